"""File helpers the writers rely on: unique temporary names, and frames read ahead of their
rows."""
import errno
import os

import fsspec
import pytest

from proactivebench_builder.core import fileio


def test_temporary_names_are_unique_hidden_and_keep_the_name():
    names = {fileio.temporary_name("/out/QuickDraw/test-00000-of-00001.parquet")
             for _ in range(1000)}
    assert len(names) == 1000
    for name in names:
        folder, base = os.path.split(name)
        assert folder == "/out/QuickDraw"
        assert base.startswith(".tmp-") and base.endswith("-test-00000-of-00001.parquet")


def test_read_ahead_frames_come_back_in_any_order_and_spill_to_disk(monkeypatch):
    from proactivebench_builder.pipeline import shards

    monkeypatch.setattr(shards, "SPILL_AFTER_BYTES", 1000)
    ahead = shards.ReadAhead()
    frames = {(r, f): bytes([r * 7 + f]) * (300 + r * 10 + f) for r in range(3) for f in range(4)}
    for key in sorted(frames, reverse=True):  # read order differs from write order
        ahead.put(key, frames[key])
    assert ahead._file._rolled  # past the threshold the frames live in a temporary file
    assert [ahead.pop(key) for key in sorted(frames)] == [frames[k] for k in sorted(frames)]
    ahead.close()


def test_frames_in_read_order_wait_only_when_read_before_their_turn(monkeypatch):
    """The shard writer reads frames in the scenario's read order and asks for them in row
    order: only frames read before their turn wait in the spooled file."""
    from proactivebench_builder.pipeline import shards

    class Reader:
        read = []

        def load_frame(self, ref):
            Reader.read.append(ref["n"])
            return bytes([ref["n"]]) * 10

        def relative(self, url):
            return url

    rows = [{"frame_refs": [{"kind": "member", "n": 2 * r + f} for f in range(2)]}
            for r in range(3)]
    in_order = shards.InReadOrder(Reader(), rows, [(r, f) for r in range(3) for f in range(2)])
    assert [in_order.pop((r, f)) for r in range(3) for f in range(2)] == \
        [bytes([n]) * 10 for n in range(6)]
    assert not in_order._ahead._where  # nothing waited
    reverse = shards.InReadOrder(Reader(), rows, [(r, f) for r in (2, 1, 0) for f in range(2)])
    assert reverse.pop((0, 0)) == bytes([0]) * 10
    assert len(reverse._ahead._where) == 4  # rows 2 and 1 were read before their turn
    assert reverse.pop((2, 1)) == bytes([5]) * 10


def test_rows_produced_ahead_on_a_thread_keep_order_errors_and_stop_early():
    """The shard writer's rows made on a thread ahead of the Parquet writer: in order, the
    producer's error raised in the writer, and a writer that stops early stops the producer."""
    from concurrent.futures import ThreadPoolExecutor

    from proactivebench_builder.pipeline import shards

    made, closed = [], []

    def produce(n, fail_at=None):
        def generator():
            try:
                for i in range(n):
                    if i == fail_at:
                        raise ValueError(f"bad row {i}")
                    made.append(i)
                    yield i
            finally:
                closed.append(n)
        return generator

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert list(shards.produced_ahead(pool, produce(50))) == list(range(50))
        with pytest.raises(ValueError, match="bad row 7"):
            list(shards.produced_ahead(pool, produce(20, fail_at=7)))
        made.clear()
        ahead = shards.produced_ahead(pool, produce(1000))
        assert [next(ahead) for _ in range(3)] == [0, 1, 2]
        ahead.close()  # the writer's own error: the producer is stopped and waited for
        assert len(made) <= 3 + shards.ROWS_AHEAD + 1  # the queue, and one in hand
        assert closed == [50, 20, 1000]


def test_the_sha256_of_a_fifo_is_refused_without_opening_it_for_reading(tmp_path):
    """A FIFO where a file to hash is (was: open() waited for a writer for ever)."""
    fifo = tmp_path / "pinned.tar"
    os.mkfifo(fifo)
    with pytest.raises(fileio.NotARegularFile, match="FIFO"):
        fileio.sha256(str(fifo))
    (tmp_path / "file").write_bytes(b"abc")
    assert fileio.sha256(str(tmp_path / "file")) == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")


def test_a_socket_is_named_as_a_socket(tmp_path):
    """A socket cannot be opened (ENXIO): the refusal says what the path is."""
    import socket

    path = os.path.join(tmp_path, "s")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    try:
        with pytest.raises(fileio.NotARegularFile, match="a socket"):
            fileio.open_local_regular(path)
    finally:
        listener.close()
