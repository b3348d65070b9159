"""The streaming JSON reader (core.jsonstream) on its own: members in file order, chosen arrays
streamed element by element, values cut by a chunk edge read whole, a long value not re-parsed
chunk by chunk, and every broken file a ValueError that says where."""
from __future__ import annotations

import io
import json

import pytest

from proactivebench_builder.core import jsonstream
from proactivebench_builder.core.jsonstream import NotAJsonObject, StreamedArray, iter_top_level


def members_of(data: bytes, streamed=("images",), chunk_bytes: int = 7) -> list:
    return [(key, list(value) if isinstance(value, StreamedArray) else value)
            for key, value in iter_top_level(io.BytesIO(data), streamed, chunk_bytes)]


def test_iter_top_level_streams_only_the_named_arrays():
    text = ('{"info": {"a": [1, 2]}, "images": [{"id": 1}, {"id": 2}], "other": [3, 4],'
            ' "annotations": {"not": "a list"}, "skipped": [[5], [6]], "last": "x"}')
    members = []
    for key, value in iter_top_level(io.BytesIO(text.encode()), ("images", "annotations",
                                                                 "skipped"), 4):
        if isinstance(value, StreamedArray):
            value = ("streamed", [element for element in value] if key != "skipped" else [])
        members.append((key, value))
    assert members == [("info", {"a": [1, 2]}), ("images", ("streamed", [{"id": 1}, {"id": 2}])),
                       ("other", [3, 4]), ("annotations", {"not": "a list"}),
                       ("skipped", ("streamed", [])), ("last", "x")]


@pytest.mark.parametrize("number", ["125", "-0", "1.5", "1.5e-3", "2E+10", "-7e2", "0.000001"])
def test_numbers_cut_by_a_chunk_edge_are_read_whole(number):
    """A number is the one value that decodes without error when cut short ("1" of "1.5")."""
    text = f'{{"images": [{number}, {number}], "x": {number}}}'
    for chunk_bytes in range(1, len(text) + 1):
        members = [(key, list(value) if isinstance(value, StreamedArray) else value)
                   for key, value in iter_top_level(io.BytesIO(text.encode()), ("images",),
                                                    chunk_bytes)]
        assert members == [("images", [json.loads(number)] * 2), ("x", json.loads(number))]


class CountingStream(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.reads = 0

    def read(self, size=-1):
        self.reads += 1
        return super().read(size)


def test_a_long_value_is_not_reparsed_chunk_by_chunk():
    """Each retry of a value that does not end in the window reads as much again as it holds, so
    a 4 MB value read 1 KiB at a time costs ~12 reads, not ~4000 (quadratic)."""
    polygon = [round(i * 0.37, 2) for i in range(600_000)]
    data = json.dumps({"shapes": [{"id": 1, "points": polygon}]}).encode()
    stream = CountingStream(data)
    members = [(k, list(v)) for k, v in iter_top_level(stream, ("shapes",), 1024)]
    assert members[0][1][0]["points"][-1] == polygon[-1]
    assert len(data) > 4_000_000 and stream.reads < 30


def test_a_value_that_never_ends_stops_at_the_cap(monkeypatch):
    monkeypatch.setattr(jsonstream, "MAX_VALUE_CHARS", 10_000)
    data = b'{"shapes": [{"id": 1, "name": "' + b"x" * 1_000_000
    stream = CountingStream(data)
    with pytest.raises(ValueError, match=r"shapes\[0\] at character 12 is longer than"):
        for _, value in iter_top_level(stream, ("shapes",), 1000):
            list(value)
    assert stream.tell() < 50_000  # it stopped reading soon after the cap


@pytest.mark.parametrize("text, message", [
    ('', "truncated JSON"), ('{"a": [1, 2', "truncated JSON"), ('{"a": 1,', "truncated JSON"),
    ('{"a" 1}', "expected ':'"), ('{"a": 1} x', "extra data"), ('{a: 1}', "double quotes"),
    ('{"a": tru}', "invalid JSON"), (b'{"a": "\xff"}', "not UTF-8"),
])
@pytest.mark.parametrize("chunk_bytes", [1, 3, 1 << 20])
def test_a_broken_file_is_a_value_error_that_says_where(text, message, chunk_bytes):
    data = text if isinstance(text, bytes) else text.encode()
    with pytest.raises(ValueError, match=message):
        members_of(data, ("a",), chunk_bytes)


@pytest.mark.parametrize("text", ["[]", "3", '"x"', "null"])
def test_another_top_level_value_is_not_an_object(text):
    with pytest.raises(NotAJsonObject):
        members_of(text.encode())


def test_a_byte_order_mark_is_read_as_json_loads_reads_it():
    data = b"\xef\xbb\xbf" + json.dumps({"images": [1, 2], "x": "\u00e9"}).encode()
    assert members_of(data) == [("images", [1, 2]), ("x", "\u00e9")]
