"""The build's readers at their edges: tar headers that claim memory or time, train frames
changed after validation, CSV and XML files of odd shapes, deeply nested JSON, pickles whose opcodes claim memory, and upstream
records of the wrong types. Each is a counted dead letter naming the input (or, for a file every
item needs, one line), never a traceback, a hang, or memory that grows with what a file claims.
Each test reproduced its fault before the fix."""
from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tracemalloc

import pytest

from conftest import builds, private_miniature, read_json, shard_files
from proactivebench_builder.core import results
from proactivebench_builder.transforms.rod.miniature import sweep_frame, tar_gz
from proactivebench_builder.transforms.rod.scenario import ROD

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def values_of(scenario, unit) -> list:
    """The values of reading `unit`; ROD's "archives": every archive's unit, the fragments of a
    sequence merged as the build merges them."""
    if unit != "archives":
        return list(scenario.read_unit(unit))
    from proactivebench_builder.pipeline.reading import merged_fragments

    values = [v for u in scenario.list_units() for v in scenario.read_unit(u)]
    fragments = [v for v in values if isinstance(v, results.Fragment)]
    return [v for v in values if v not in fragments] + list(merged_fragments(fragments))


def counted(values) -> dict:
    """what -> the sum of its counts."""
    total = {}
    for v in values:
        if isinstance(v, results.Count):
            total[v.what] = total.get(v.what, 0) + v.n
    return total


def balanced(values, label: str) -> bool:
    raw = sum(v.n for v in values if isinstance(v, results.Count) and v.scenario == label
              and v.what == "raw_items")
    excluded = sum(v.n for v in values if isinstance(v, results.Count) and v.scenario == label
                   and v.what.startswith("excluded:"))
    resolved = sum(1 for v in values if isinstance(v, (results.Candidate, results.DeadLetter))
                   and v.scenario == label)
    return raw == resolved + excluded


# ---- ROD: tar headers -------------------------------------------------------------

def _header(name: str, size: int, kind: bytes, fmt=tarfile.USTAR_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info._create_header(info.get_info(), fmt, "utf-8", "strict")


def _frame_member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512)


def hostile_archive(path: str, kind: str, declared: int) -> None:
    """A .tar.gz whose first header is a GNU long-name ('L') or PAX ('x') extended header
    declaring `declared` bytes (all present, so tarfile would read them whole), then a frame."""
    frame = sweep_frame(0, 14, (40, 30), (30, 60, 200), __import__("random").Random(0))
    with gzip.open(path, "wb", compresslevel=1) as out:
        if kind == "gnu":
            out.write(_header("././@LongLink", declared, tarfile.GNUTYPE_LONGNAME,
                              tarfile.GNU_FORMAT))
            block = b"a" * (1 << 20)
        else:
            out.write(_header("PaxHeaders/x", declared, tarfile.XHDTYPE))
            head = f"{declared} comment=".encode()
            out.write(head)
            block = b"a" * (1 << 20)
            declared -= len(head)
        left = declared
        while left > 0:
            out.write(block[:min(left, len(block))])
            left -= len(block)
        out.write(b"\0" * (-declared % 512))
        out.write(_frame_member("natural_bluebl_greenr-banana-s0.jpg", frame))
        out.write(b"\0" * 1024)


def rod_source(tmp_path, archives: dict[str, bytes] | None = None) -> str:
    """A ROD source root holding only the given archives (name -> bytes)."""
    root = tmp_path / "rod_src"
    root.mkdir()
    for name, data in (archives or {}).items():
        (root / name).write_bytes(data)
    return str(root)


@pytest.mark.parametrize("kind", ["gnu", "pax"])
def test_an_extended_header_over_the_cap_is_refused_unread(kind, tmp_path):
    """The archive is one dead letter naming it, read no further, and the other
    archives are read as before."""
    import random

    root = rod_source(tmp_path, {"rod_0.tar.gz": tar_gz([
        (f"natural_bluebl_greenr-banana-s{i}.jpg",
         sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)])})
    hostile_archive(os.path.join(root, "rod_1.tar.gz"), kind, 64 << 20)
    rod = ROD(0, root)
    rod.params["read_from"] = "archives"
    tracemalloc.start()
    try:
        values = values_of(rod, "archives")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    letters = [v for v in values if isinstance(v, results.DeadLetter)]
    assert [v.path for v in letters] == ["rod_1.tar.gz"], letters
    assert "extended header" in letters[0].reason and "67,108,864" in letters[0].reason
    assert [v.key for v in values if isinstance(v, results.Candidate)] == [
        "Realistic-Occlusion-Dataset/natural_bluebl_greenr-banana"]
    assert balanced(values, "rod")


PEAK_HEADER_BYTES = 256 << 20


@pytest.mark.build
def test_extended_headers_do_not_raise_peak_memory(tmp_path_factory):
    """The issue's measurement: three ROD archives whose GNU long-name or PAX headers declare
    256 MiB drove a build's peak memory from ~200 MB to ~960 MB. Now they are dead letters
    naming each archive, and the peak stays that of the clean build."""
    from conftest import accounted, dead_letters
    from test_rod import build_peak_mb

    clean_root = private_miniature(tmp_path_factory, "rod")
    hostile_root = str(tmp_path_factory.mktemp("rod_headers"))
    shutil.copytree(clean_root, hostile_root, dirs_exist_ok=True)
    for name, kind in (("rod_2.tar.gz", "gnu"), ("rod_3.tar.gz", "pax"), ("rod_4.tar.gz", "pax")):
        hostile_archive(os.path.join(hostile_root, "rod", name), kind, PEAK_HEADER_BYTES)
    clean_out = str(tmp_path_factory.mktemp("rod_headers_clean") / "out")
    code, clean_mb = build_peak_mb(clean_out, clean_root)
    assert code == 0
    out = str(tmp_path_factory.mktemp("rod_headers_out") / "out")
    code, hostile_mb = build_peak_mb(out, hostile_root, "--max_bad_fraction=0.5")
    assert code == 0
    print(f"peak RSS: clean {clean_mb:.0f} MB, with 3 x 256 MiB extended headers "
          f"{hostile_mb:.0f} MB")
    assert hostile_mb <= clean_mb * 1.10, (clean_mb, hostile_mb)
    accounted(read_json(os.path.join(out, "reports", "build.json")))
    refused = sorted(d["path"] for d in dead_letters(out) if "extended header" in d["reason"])
    assert refused == ["rod_2.tar.gz", "rod_3.tar.gz", "rod_4.tar.gz"]
    assert shard_files(out) == shard_files(clean_out)


DECLARED_ONLY = r"""
import gzip, io, sys, tarfile
from proactivebench_builder.transforms.rod.scenario import ROD
root, bits = sys.argv[1], int(sys.argv[2])
buf = io.BytesIO()
info = tarfile.TarInfo("natural_bluebl_greenr-banana-s13.jpg")
info.size = 1 << bits                      # declared only (base-256 size field): no data
buf.write(info.tobuf(format=tarfile.GNU_FORMAT))
open(root + "/rod_0.tar.gz", "wb").write(gzip.compress(buf.getvalue()))
rod = ROD(0, root)
rod.params["read_from"] = "archives"
for value in rod.read_unit("archive:rod_0.tar.gz"):
    if value.kind == "dead_letter":
        print(value.path, "|", value.reason)
"""


@pytest.mark.build
@pytest.mark.parametrize("bits", [44, 86])
def test_a_member_declaring_data_that_is_not_there_ends_with_the_stream(bits, tmp_path):
    """The skip stops at the end of the stream: the archive is cut short,
    a dead letter naming it, at once."""
    done = subprocess.run([sys.executable, "-c", DECLARED_ONLY, rod_source(tmp_path), str(bits)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("rod_0.tar.gz | unreadable archive") for line in lines), lines


def test_a_frame_number_too_long_for_int_is_an_unparseable_name(tmp_path):
    """That member alone is a dead letter; a non-ASCII digit is not a
    frame number either."""
    import random

    frames = [(f"natural_bluebl_greenr-banana-s{i}.jpg",
               sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)]
    odd = [("natural_bluebl_greenr-cup-s" + "9" * 5000 + ".jpg", frames[0][1]),
           ("natural_bluebl_greenr-cup-s\u0663.jpg", frames[0][1])]
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": tar_gz(frames + odd)}))
    rod.params["read_from"] = "archives"
    values = values_of(rod, "archives")
    letters = [v for v in values if isinstance(v, results.DeadLetter)]
    assert len(letters) == 2 and all("unparseable frame name" in v.reason for v in letters)
    assert [v.key for v in values if isinstance(v, results.Candidate)] == [
        "Realistic-Occlusion-Dataset/natural_bluebl_greenr-banana"]
    assert balanced(values, "rod")


@pytest.mark.parametrize("text", ['{"features": {"label": {"names": 5}}}', "[" * 100000,
                                  '{"features": [1]}'])
def test_an_odd_dataset_info_is_one_line(text, tmp_path):
    """dataset_info.json (the class table every ROD sample is checked against): a value of
    another type or a deeply nested one is a SourceError naming the file, not a TypeError or
    RecursionError traceback."""
    from proactivebench_builder.core.errors import SourceError

    root = rod_source(tmp_path, {"rod_0.tar.gz": tar_gz([]), "dataset_info.json":
                                 text.encode()})
    with pytest.raises(SourceError, match="dataset_info.json"):
        ROD(0, root).list_units()


def _pax_member(name: str, data: bytes, pax: dict[str, str]) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.pax_headers = len(data), pax
    return info.tobuf(format=tarfile.PAX_FORMAT) + data + b"\0" * (-len(data) % 512)


def test_pax_headers_are_read_in_linear_time(tmp_path):
    """tarfile (CPython before 3.11.10 / 3.12.6) looks for `hdrcharset` with a regular
    expression that backtracks quadratically over a run of digits: 60 members whose PAX
    header holds a 15,000-digit comment (well-formed, under the size cap) took ~30 s. Now PAX
    records are parsed in one pass, and the members are read as usual."""
    import random
    import time

    frame = sweep_frame(0, 14, (40, 30), (30, 60, 200), random.Random(0))
    body = b"".join(_pax_member(f"other/{i}.txt", b"x", {"comment": "7" * 15000})
                    for i in range(60))
    body += _pax_member("natural_bluebl_greenr-banana-s0.jpg", frame, {"comment": "1" * 100})
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": gzip.compress(body + b"\0" * 1024)}))
    rod.params["read_from"] = "archives"
    started = time.monotonic()
    values = values_of(rod, "archives")
    assert time.monotonic() - started < 10
    counts = counted(values)
    assert counts.get("excluded:not_a_frame") == 60
    assert balanced(values, "rod")


@pytest.mark.parametrize("case", ["chain", "sparse", "malformed"])
def test_odd_extended_headers_refuse_their_archive(case, tmp_path):
    """A chain of 2,000 GNU long-name headers (tarfile recurses once per header: a
    RecursionError took the whole ROD unit), a GNU sparse member (its 1.0 map is read with a
    quadratic search) and a PAX header that is not made of records are each one dead letter
    naming the archive."""
    import random

    if case == "chain":
        link = _header("././@LongLink", 10, tarfile.GNUTYPE_LONGNAME, tarfile.GNU_FORMAT)
        body = (link + b"x" * 10 + b"\0" * 502) * 2000
    elif case == "sparse":
        body = _pax_member("natural_bluebl_greenr-banana-s1.jpg", b"1\n0\n5\n" + b"a" * 100,
                           {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                            "GNU.sparse.name": "a.jpg", "GNU.sparse.realsize": "5"})
    else:
        head = b"3 " + b"a" * 500 + b"="
        body = _header("PaxHeaders/x", len(head), tarfile.XHDTYPE) + head + b"\0" * (
            -len(head) % 512) + _frame_member("natural_bluebl_greenr-banana-s1.jpg", b"abc")
    frame = sweep_frame(0, 14, (40, 30), (30, 60, 200), random.Random(0))
    body = _frame_member("natural_bluebl_greenr-banana-s0.jpg", frame) + body + b"\0" * 1024
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": gzip.compress(body)}))
    rod.params["read_from"] = "archives"
    values = values_of(rod, "archives")
    refused = [v for v in values if isinstance(v, results.DeadLetter) and v.path == "rod_0.tar.gz"]
    assert len(refused) == 1 and refused[0].reason.startswith("refused archive: rod_0.tar.gz"), \
        [v for v in values if isinstance(v, results.DeadLetter)]
    assert balanced(values, "rod")


def test_the_reader_keeps_no_list_of_members(tmp_path):
    """tarfile keeps every member it has read, also when streaming: memory grew with the number
    of members of an archive (30,000 tiny members: ~20 MB). Now only the current one is kept."""
    body = b"".join(_frame_member(f"n/{i}.txt", b"") for i in range(30000)) + b"\0" * 1024
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": gzip.compress(body)}))
    rod.params["read_from"] = "archives"
    excluded = 0
    tracemalloc.start()
    try:
        for value in rod.read_unit("archive:rod_0.tar.gz"):  # values not kept: the reader's memory
            if isinstance(value, results.Count) and value.what == "excluded:not_a_frame":
                excluded += value.n
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert excluded == 30000
    assert peak < 4 << 20, peak


# ---- the train split: frames checked like the test split's -----------------------

@pytest.mark.build
@pytest.mark.parametrize("kind", ["file", "view"])
def test_a_train_frame_changed_after_validation_is_a_dead_letter(kind, tmp_path_factory,
                                                                 monkeypatch):
    """The example is dropped as a counted dead letter, as in the test split."""
    import dataclasses

    from conftest import IN_PROCESS, read_jsonl, run
    from proactivebench_builder.pipeline import row_store, shards

    root = str(tmp_path_factory.mktemp("coco_train_changing"))
    shutil.copytree(private_miniature(tmp_path_factory, "coco"), root, dirs_exist_ok=True)
    truncated = []
    original = shards.AssignIdsAndShards.process

    def truncate_then_assign(self, element):
        pool, values = element
        values = list(values)
        if pool == shards.TRAIN_POOL and not truncated:
            examples = sorted((v for v in map(results.unpacked, values)  # packed to cross
                               if isinstance(v, results.TrainExample)), key=lambda v: v.key)
            examples = [dataclasses.replace(e, row=row_store.fetch(self.config.output, e.row))
                        for e in examples]  # (their rows cross as references)
            for example in examples:
                ref = example.row["image_ref"]
                if example.name == "coco" and ref["kind"] == kind:
                    with open(ref["url"], "r+b") as handle:
                        handle.truncate(os.path.getsize(ref["url"]) // 2)
                    truncated.extend(e.key for e in examples
                                     if e.row["image_ref"].get("url") == ref["url"])
                    break
        yield from original(self, (pool, values))

    monkeypatch.setattr(shards.AssignIdsAndShards, "process", truncate_then_assign)
    output = str(tmp_path_factory.mktemp("coco_train_changing_out") / "out")
    report = run(output, root, "coco", IN_PROCESS, "--max_bad_fraction=1",
                 "--no_upstream_export")
    assert truncated, f"no COCO train example of kind {kind}"
    letters = [d for d in read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
               if "frame changed after validation" in d["reason"]]
    assert sorted(d["key"] for d in letters) == sorted(truncated)
    assert {d["scenario"] for d in letters} == {"coco/train"}
    import pyarrow.parquet as pq

    keys = [k for name in os.listdir(os.path.join(output, "data"))
            for k in pq.read_table(os.path.join(output, "data", name),
                                   columns=["key"]).column("key").to_pylist()]
    assert not set(truncated) & set(keys)
    train = report["train"]
    assert train["scenarios"]["coco"]["accounted"] is True
    assert train["examples"] == train["rows"] == len(keys)
    assert report["status"] in ("building", "ok")


# ---- VSOD: the labels CSV and the annotation XML --------------------------------------------

def vsod_vocabulary() -> dict:
    from proactivebench_builder.transforms import manifest_of

    return manifest_of("vsod")["categories"]


HEADER = "segment,question_type,answer,first_image,reference_image"


def test_labels_with_lone_carriage_returns_parse():
    """CR ends a line as CSV says; a cell cut by a CR is a bad line."""
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    text = f"{HEADER}\rseg_0001,speaker,Ge You,,\rseg_0002,speaker,Ge\rYou,,\r"
    good, bad = parse_labels(text, vsod_vocabulary())
    assert [(g["segment"], g["line"]) for g in good] == [("seg_0001", 2)]
    assert [line for line, _ in bad] == [3, 4]


def test_a_cell_over_the_csv_field_limit_is_one_bad_line():
    """A cell over the csv field limit is a bad line, not a `_csv.Error` out of parse_labels."""
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    text = (f"{HEADER}\nseg_0001,speaker,\"{'x' * 200000}\",,\n"
            "seg_0002,speaker,Ge You,,\n")
    good, bad = parse_labels(text, vsod_vocabulary())
    assert [g["segment"] for g in good] == ["seg_0002"]
    assert len(bad) == 1 and bad[0][0] == 2 and "field larger than" in bad[0][1]


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "9" * 5000, "+3", " 1_0"])
def test_a_pinned_frame_that_is_not_ascii_digits_is_one_bad_line(value):
    """The line is a dead letter."""
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    good, bad = parse_labels(f"{HEADER}\nseg_0001,speaker,Ge You,{value},\n",
                             vsod_vocabulary())
    assert good == [] and len(bad) == 1 and "is not a frame index" in bad[0][1]


def test_a_header_that_is_not_csv_is_one_line():
    from proactivebench_builder.core.errors import SourceError
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    with pytest.raises(SourceError, match="labels file"):
        parse_labels('"' + "x" * 200000 + '"\n', vsod_vocabulary())


def test_a_huge_labels_file_is_refused_in_one_line(tmp_path):
    """A labels file over its cap is a SourceError naming it, unread."""
    from proactivebench_builder.core.errors import SourceError
    from proactivebench_builder.transforms.vsod.scenario import MAX_LABELS_BYTES, VSOD

    scenario = VSOD(0, str(tmp_path))
    with open(tmp_path / scenario.params["labels_file"], "wb") as handle:
        handle.write(HEADER.encode() + b"\n")
        handle.truncate(1 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(SourceError, match="labels"):
            scenario.labels()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_LABELS_BYTES, peak


@pytest.mark.parametrize("number", ["inf", "-inf", "nan", "1e400"])
def test_annotation_numbers_must_be_finite(number):
    """Either is the annotation's BadItem."""
    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.vsod.scenario import parse_annotation

    box = "".join(f"<{k}>{v}</{k}>" for k, v in zip(("xmin", "ymin", "xmax", "ymax"),
                                                      (1, 1, number, 5)))
    size = f"<size><width>{number}</width><height>8</height></size>"
    for xml in (f"<annotation>{size}</annotation>",
                f"<annotation><object><bndbox>{box}</bndbox></object></annotation>"):
        with pytest.raises(BadItem, match="finite|numeric"):
            parse_annotation(xml.encode())


def test_natural_frame_order_takes_any_file_name():
    """Digit runs
    are ASCII digits, compared as numbers, and any names sort."""
    from proactivebench_builder.transforms.vsod.scenario import natural_key

    names = ["0010.jpg", "0001\u00b22.jpg", "2.jpg", "\u00b2.jpg", "a.jpg", "0002.jpg"]
    ordered = sorted(names, key=natural_key)
    assert ordered.index("2.jpg") < ordered.index("0010.jpg")
    assert sorted(["f10.jpg", "f9.jpg", "f010.jpg"], key=natural_key) == [
        "f9.jpg", "f10.jpg", "f010.jpg"]


# ---- MVP-N list pickles ------------------------------------------------------------------------

def test_a_pickle_memo_index_claims_no_memory():
    """A memo
    index beyond the entries the pickle has made is a bad pickle, refused before unpickling."""
    import struct

    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.mvpn.scenario import load_sample_list

    tracemalloc.start()
    try:
        with pytest.raises(BadItem, match="bad pickle: memo"):
            load_sample_list(b"\x80\x02]r" + struct.pack("<I", 1 << 27) + b".")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak
    import pickle

    value = [["a/b/1_0.png", "a/b/2_1.png"]] * 3 + [["x"] * 300]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):  # what picklers write still loads
        assert load_sample_list(pickle.dumps(value, protocol=protocol)) == value


@pytest.mark.build
def test_a_list_file_over_its_cap_is_a_dead_letter(tmp_path):
    """A list pickle builds ~30 bytes of objects per byte of pickle (EMPTY_LIST, APPEND...): a
    256 MiB one could hold gigabytes. A list file over MAX_LIST_BYTES (the real ones hold about
    twenty kB) is a dead letter, unread."""
    from proactivebench_builder.transforms.mvpn.scenario import MAX_LIST_BYTES, MVPN

    root = private_root(tmp_path, "mvpn")
    unit = os.path.join(root, "mvpn", "data", "test_list", "test_0000_100.pkl")
    with open(unit, "r+b") as handle:
        handle.truncate(MAX_LIST_BYTES + 1)
    scenario = MVPN(0, os.path.join(root, "mvpn"))
    values = list(scenario.read_unit(unit))
    letters = [v for v in values if isinstance(v, results.DeadLetter)]
    assert len(letters) == 1 and "larger than" in letters[0].reason
    assert balanced(values, "mvpn")


@pytest.mark.parametrize("token", ["\u0663", "\u00b2", "9" * 12])
def test_a_view_token_that_is_not_ascii_digits_is_a_dead_letter(token):
    """'²'.isdigit() is true but int('²') fails (the element was a dead letter saying
    "ValueError"), and int('٣') is 3: a view file ٣_0.png was exported as 3_0.png. A view token
    must be ASCII digits to be a frame id."""
    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.mvpn.scenario import MVPN

    scenario = MVPN(0, "/nowhere")
    with pytest.raises(BadItem, match="non-integer view token"):
        scenario._frame_ids([f"0041/1/{token}_0.png", "0041/1/2_1.png"])


def private_root(tmp_path, name: str) -> str:
    from proactivebench_builder.pipeline.miniature import ensure_miniature_sources
    from proactivebench_builder.transforms import load_scenarios

    return ensure_miniature_sources(str(tmp_path / "src"), {name: load_scenarios()[name]})


# ---- QuickDraw lines ---------------------------------------------------------------------------

@pytest.mark.parametrize("key_id", ["\u0663", "\u00b2", "12\u00b2"])
def test_a_key_id_of_other_digits_is_a_dead_letter(key_id, tmp_path):
    """A key_id is ASCII digits, as the canonical-line pattern reads it; the full parse took
    any character str.isdigit() accepts ('²', '٣'), so one drawing could be read two ways."""
    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.quickdraw.scenario import QuickDraw

    line = ('{"word":"cat","countrycode":"US","timestamp":"t","recognized":true,"key_id":"%s",'
            '"drawing":[[[1,2],[3,4]],[[5,6],[7,8]]]}' % key_id).encode()
    with pytest.raises(BadItem, match="key_id"):
        QuickDraw(0, str(tmp_path))._parse_line(line, "cat")


# ---- COCO: the streaming JSON reader -------------------------------------------------------------

@pytest.mark.parametrize("doc", [
    b'{"images": ' + b"[" * 30000 + b"]" * 30000 + b', "annotations": []}',
    b'{"images": [], "annotations": [' + b'{"a":' * 30000 + b"1" + b"}" * 30000 + b"]}",
    b'{"info": ' + b"[" * 30000,
])
@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_a_deeply_nested_value_is_a_value_error_naming_its_position(doc, chunk):
    """It is a ValueError naming where the value starts."""
    from proactivebench_builder.transforms.coco.annotations import index_annotations

    with pytest.raises(ValueError, match=r"at character \d+") as err:
        index_annotations(io.BytesIO(doc), chunk)
    assert "nested" in str(err.value) or "truncated" in str(err.value)


# ---- ChangeIt: categories.csv and labels.csv -------------------------------------------------------

@pytest.fixture(scope="module")
@builds
def changeit_source(tmp_path_factory) -> str:
    return os.path.join(private_miniature(tmp_path_factory, "changeit"), "changeit")


def _changeit_root(source: str, tmp_path) -> str:
    """A private copy of ChangeIt's miniature, without its (large) frames and videos."""
    root = str(tmp_path / "changeit")
    shutil.copytree(source, root, ignore=shutil.ignore_patterns("frames", "downloads"))
    return root


@pytest.mark.parametrize("name,damage", [
    ("categories.csv", lambda t: t.replace(b'"Bacon Frying"', b"Bacon\rFrying", 1)),
    ("labels.csv", lambda t: t.replace(b'"action"', b"act\rion", 1)),
    ("categories.csv", lambda t: t + b'x,"' + b"y" * 200000 + b'",0.1\n'),
    ("labels.csv", lambda t: t + b"\xff\xfe\n"),
    ("categories.csv", lambda t: t + b"\xff\xfe\n"),
])
def test_a_broken_table_is_one_line_naming_it(name, damage, changeit_source, tmp_path):
    """Listing the units stops the build with one line naming it."""
    from proactivebench_builder.core.errors import SourceError
    from proactivebench_builder.transforms.changeit.scenario import ChangeIt

    root = _changeit_root(changeit_source, tmp_path)
    path = os.path.join(root, name)
    with open(path, "rb") as handle:
        text = handle.read()
    with open(path, "wb") as handle:
        handle.write(damage(text))
    with pytest.raises(SourceError, match=name.replace(".", r"\.")):
        ChangeIt(0, root).list_units()


def test_tables_with_carriage_return_line_ends_parse(changeit_source, tmp_path):
    """CR-only line ends (an old Mac export) are line ends, as CSV says, not an error."""
    from proactivebench_builder.transforms.changeit.scenario import ChangeIt

    root = _changeit_root(changeit_source, tmp_path)
    before = ChangeIt(0, root).list_units()
    for name in ("categories.csv", "labels.csv"):
        path = os.path.join(root, name)
        with open(path, "rb") as handle:
            text = handle.read()
        with open(path, "wb") as handle:
            handle.write(text.replace(b"\n", b"\r"))
    scenario = ChangeIt(0, root)
    assert scenario.list_units() == before
    values = list(scenario.read_unit(before[0]))
    assert any(isinstance(v, results.Candidate) for v in values)


# ---- --import_upstream: the records of a release --------------------------------------

@pytest.fixture(scope="module")
def quickdraw_release(shared_build, miniature_root) -> str:
    """The upstream export of a shared QuickDraw-only build: a release folder to import (read
    only: tests copy what they change)."""
    return os.path.join(shared_build(miniature_root, "quickdraw", "--no_train",
                                         "--upstream_export")[0], "upstream")


def _release_lines(folder: str) -> list[bytes]:
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "rb") as handle:
        return handle.read().splitlines()


def _import_config(folder: str):
    from proactivebench_builder.core.config import BuildConfig

    return BuildConfig(seed=0, output="/unused", scenarios=("quickdraw",),
                       sources={"quickdraw": folder}, config_to_scenario={"QuickDraw": "quickdraw"},
                       import_upstream=folder, import_configs=("QuickDraw",), keep_ids=True)


def _edited(line: bytes, **changes) -> bytes:
    import json

    record = json.loads(line)
    record.update(changes)
    return json.dumps(record).encode()


BAD_RECORDS = {
    "template a number": dict(image_template=5),
    "template a list": dict(image_template=["QuickDraw/{image}.png"]),
    "template with a format spec": dict(image_template="QuickDraw/{image:>999999999}.png"),
    "template with an attribute": dict(image_template="QuickDraw/{image.__class__}.png"),
    "template leading out": dict(image_template="../../elsewhere/{image}.png"),
    "frame_ids strings": dict(frame_ids=["0", "1"]),
    "frame_ids a number": dict(frame_ids=3),
    "frame_ids huge": dict(frame_ids=list(range(200000))),
    "key a list": dict(key=["a"]),
    "key of another config": dict(key="coco2014/1"),
    "prompt a number": dict(prompt=5),
    "options a string": dict(options="A"),
    "num_images 10^20": dict(num_images=10 ** 20),
    "id a float": dict(id=1.9),
    "id a bool": dict(id=True),
    "id null": dict(id=None),
    "answer null": dict(answer=None),
    "source of another shape": dict(source={"files": "x"}),
    "crop not a dict": dict(crop=[1, 2]),
    "step a string": dict(horizontal_step="x"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS) + ["nested", "not utf-8", "a list",
                                                        "nan", "not json"])
def test_a_bad_upstream_record_is_one_dead_letter(case, quickdraw_release, tmp_path):
    """Each is
    one dead letter naming the line, before any writer."""
    from proactivebench_builder.pipeline.import_upstream import ImportRecord, ReadRecords

    good = _release_lines(quickdraw_release)[0]
    line = {"nested": b"[" * 100000, "not utf-8": good.replace(b"Trumpet", b"Tr\xffmpet"),
            "a list": b"[1, 2]", "nan": _edited(good).replace(b'"first_image": 0',
                                                         b'"first_image": NaN'),
            "not json": b'{"id": 0,'}.get(case) or _edited(good, **BAD_RECORDS.get(case, {}))
    folder = str(tmp_path / "release")
    shutil.copytree(quickdraw_release, folder)
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "wb") as handle:
        handle.write(line + b"\n")
    config = _import_config(folder)
    read = list(ReadRecords(config).process("QuickDraw"))
    assert len(read) == 1
    values = list(ImportRecord(config).process(read[0]))
    assert [type(v).__name__ for v in values] == ["Count", "DeadLetter"], values
    assert values[1].path == "QuickDraw_preprocessed.jsonl:1", values[1]


def test_a_good_upstream_record_still_imports(quickdraw_release):
    import pyarrow as pa

    from proactivebench_builder.core.records import arrow_schema
    from proactivebench_builder.pipeline.import_upstream import ImportRecord, ReadRecords

    config = _import_config(quickdraw_release)
    for element in ReadRecords(config).process("QuickDraw"):
        values = list(ImportRecord(config).process(element))
        assert [type(v).__name__ for v in values] == ["Count", "Sample"], values
        row = dict(values[1].row, frames=[])
        schema = arrow_schema()
        pa.Table.from_pylist([{c: row.get(c) for c in schema.names}], schema=schema)


def test_an_import_with_bad_records_builds_and_accounts(quickdraw_release, tmp_path):
    """The repro of the inventory (36): bad records among good ones; the build goes on, each
    bad record a dead letter, every shard written, the accounting balanced."""
    from conftest import read_jsonl, run

    lines = _release_lines(quickdraw_release)
    bad = [_edited(lines[0], image_template=5), _edited(lines[1], prompt=5),
           _edited(lines[2], num_images=10 ** 20), _edited(lines[3], key=["a"]),
           _edited(lines[4], frame_ids=["0"]), b"[" * 100000, b"\xff\xfe{}"]
    folder = str(tmp_path / "release")
    shutil.copytree(quickdraw_release, folder)
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "wb") as handle:
        handle.write(b"\n".join(bad + lines[5:]) + b"\n")
    output = str(tmp_path / "out")
    report = run(output, "/unused", "quickdraw", f"--import_upstream={folder}",
                 "--max_bad_fraction=1")
    entry = report["scenarios"]["quickdraw"]
    assert entry["accounted"] and entry["samples"] == len(lines) - 5
    assert entry["dead_letters"] == len(bad)
    letters = read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
    assert {d["path"] for d in letters} == {f"QuickDraw_preprocessed.jsonl:{n}"
                                            for n in range(1, len(bad) + 1)}


# ---- source names holding braces -------------------------------------------------------------------

def _frame_paths_of(scenario, values) -> dict[str, list[str]]:
    """key -> the upstream-layout path of each frame, for the candidates among `values`."""
    found = {}
    for v in values:
        if isinstance(v, results.Candidate):
            row = scenario.build_sample(v.key, v.item)
            found[v.key] = [scenario.frame_path(row, f) for f in row["frame_ids"]]
    return found


@pytest.mark.build
def test_an_imagenet_c_file_name_with_braces_keeps_its_name(tmp_path):
    """Braces are doubled
    in the template's literal parts, and the frame path is the file's own name."""
    import glob

    src = os.path.join(private_root(tmp_path, "imagenet_c"), "ImageNet-C")
    first = sorted(glob.glob(f"{src}/*/*/*/*.JPEG"))[0]
    wnid, name = first.split("/")[-2], os.path.basename(first)
    for path in glob.glob(f"{src}/*/*/{wnid}/{name}"):
        os.rename(path, os.path.join(os.path.dirname(path), "x{1}" + name))
    scenario = get_scenario_named("imagenet_c", src)
    scenario.params["samples_per_class"] = 100
    paths = _frame_paths_of(scenario, values_of(scenario, wnid))
    braced = [p for key, ps in paths.items() if "{" in key for p in ps]
    assert len(braced) == 5 and all(p.endswith(f"/{wnid}/x{{1}}{name}") for p in braced)


def test_a_rod_setting_with_braces_keeps_its_name(tmp_path):
    import random

    frames = [(f"natural_{{x}}_bluebl_greenr-banana-s{i}.jpg",
               sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)]
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": tar_gz(frames)}))
    rod.params["read_from"] = "archives"
    paths = _frame_paths_of(rod, values_of(rod, "archives"))
    assert list(paths.values()) == [[f"Realistic-Occlusion-Dataset/natural_{{x}}_bluebl_greenr-"
                                     f"banana-s{i}.jpg" for i in range(14)]]


@pytest.mark.build
def test_a_vsod_segment_with_braces_keeps_its_name(tmp_path):
    from proactivebench_builder.transforms.vsod.layout import DATASET_FOLDER

    src = os.path.join(private_root(tmp_path, "vsod"), "vsod")
    scenario = get_scenario_named("vsod", src)
    segment = scenario.segments()[0]
    for kind in ("Data", "Annotations"):
        os.rename(scenario.tree(kind, segment), scenario.tree(kind, segment + "{0}"))
    labels = os.path.join(src, scenario.params["labels_file"])
    with open(labels, encoding="utf-8") as handle:
        text = handle.read()
    with open(labels, "w", encoding="utf-8") as handle:
        handle.write(text.replace(f"{segment},", f"{segment}{{0}},"))
    scenario = get_scenario_named("vsod", src)
    paths = _frame_paths_of(scenario, values_of(scenario, "segment:" + segment + "{0}"))
    assert paths and all(p.startswith(f"{DATASET_FOLDER}/{segment}{{0}}/")
                         for ps in paths.values() for p in ps)


def test_a_changeit_video_id_with_braces_keeps_its_name(changeit_source, tmp_path):
    root = str(tmp_path / "changeit")
    shutil.copytree(changeit_source, root)
    scenario = get_scenario_named("changeit", root)
    unit = scenario.list_units()[0]
    category = os.path.basename(unit)
    name = sorted(n for n in os.listdir(unit) if n.endswith(".fps1.csv"))[0]
    video = name.split(".", 1)[0]
    os.rename(os.path.join(unit, name), os.path.join(unit, f"{video}{{v}}.fps1.csv"))
    frames = os.path.join(root, scenario.params["frames_dir"], category)
    os.rename(os.path.join(frames, video), os.path.join(frames, video + "{v}"))
    listing = os.path.join(root, "videos", f"{category}.csv")
    with open(listing, encoding="utf-8") as handle:
        text = handle.read()
    with open(listing, "w", encoding="utf-8") as handle:
        handle.write(text.replace(video + ",", video + "{v},"))
    paths = _frame_paths_of(scenario, values_of(scenario, unit))
    braced = [p for key, ps in paths.items() if "{v}" in key for p in ps]
    assert braced and all(p.startswith(f"ChangeIt/{category}/{video}{{v}}/") for p in braced)


def get_scenario_named(name: str, root: str):
    from proactivebench_builder.transforms import get_scenario

    return get_scenario(name)(0, root)


def test_an_unexpected_error_in_one_train_example_is_its_dead_letter(tmp_path, monkeypatch):
    """A test item that fails unexpectedly is its own dead letter (BuildSample); a train item
    that did took the whole build down with a runner traceback. Now it is the same."""
    from proactivebench_builder.core.config import BuildConfig
    from proactivebench_builder.pipeline.reading import train_example_values
    from proactivebench_builder.transforms.coco.scenario import Coco

    def broken(self, key, item):
        raise RuntimeError("a plug-in's bug")

    monkeypatch.setattr(Coco, "build_train_example", broken)
    root = str(tmp_path)
    config = BuildConfig(seed=0, output="/unused", scenarios=("coco",), sources={"coco": root},
                         config_to_scenario={"coco2014": "coco"}, train_sources={"coco": root})
    values = list(train_example_values(results.Candidate("coco/train", "coco2014/k", {}), config))
    assert len(values) == 1 and isinstance(values[0], results.DeadLetter)
    assert values[0].scenario == "coco/train" and "RuntimeError: a plug-in's bug" in values[0].reason


def test_a_bzip2_archive_decompresses_a_block_at_a_time(tmp_path):
    """tarfile's "r|*" streams hand each 10 KiB of compressed input to the decompressor whole:
    bzip2 turns ~100 bytes into 64 MiB of zeros, so one read held 64 MiB (a 10 KiB archive:
    gigabytes). Now the archive is read through a decompressing file that returns what is
    asked, whatever the compression."""
    import bz2

    zeros = tarfile.TarInfo("notes/zeros.bin")
    zeros.size = 64 << 20
    body = zeros.tobuf(format=tarfile.GNU_FORMAT)
    compressor = bz2.BZ2Compressor(9)
    data = compressor.compress(body)
    for _ in range(64):
        data += compressor.compress(b"\0" * (1 << 20))
    data += compressor.compress(b"\0" * 1024) + compressor.flush()
    assert len(data) < 16 << 10
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": data}))
    rod.params["read_from"] = "archives"
    tracemalloc.start()
    try:
        values = values_of(rod, "archives")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counted(values).get("excluded:not_a_frame") == 1
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("compress", ["bz2", "lzma", "none"])
def test_archives_of_any_compression_give_their_frames_to_the_writer(compress, tmp_path):
    """The member index and the writer's reads go through the same decompression."""
    import bz2
    import lzma
    import random

    frames = [(f"natural_bluebl_greenr-banana-s{i}.jpg",
               sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)]
    plain = gzip.decompress(tar_gz(frames))
    data = {"bz2": bz2.compress, "lzma": lzma.compress, "none": bytes}[compress](plain)
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": data}))
    rod.params["read_from"] = "archives"
    rows = [rod.build_sample(v.key, v.item) for v in values_of(rod, "archives")
            if isinstance(v, results.Candidate)]
    assert len(rows) == 1
    for ref, (_, expected) in zip(reversed(rows[0]["frame_refs"]), reversed(frames)):
        assert rod.load_frame(ref) == expected
