"""Property-based fuzzing of every reader of raw sources and of an imported upstream release:
QuickDraw lines (FileScan), the streaming COCO JSON reader, VSOD's labels CSV and
annotation XML, ChangeIt's tables and annotations, MVP-N's list pickles, ROD's tar headers and
the upstream JSONL import.

Invariants, for any bytes: no exception escapes but the reader's documented error type; where a
reader counts raw items, raw items = candidates + dead letters + exclusions; memory stays
bounded (tracemalloc) where a file could claim it; and, where a simpler reference exists, the
same answer. The suite runs a short budget; a longer run is one variable away:

    PB_FUZZ_EXAMPLES=20000 python -m pytest tests/fuzz/test_fuzz_sources.py -x

(random rather than derandomized examples when PB_FUZZ_EXAMPLES is set). Every failure found
is kept below as an explicit `@example`.
"""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import math
import os
import pickle
import shutil
import struct
import tarfile
import tempfile
import tracemalloc

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_budget import FUZZ  # tests/fuzz/ (no __init__.py) is on sys.path

from proactivebench_builder.core import results
from proactivebench_builder.core.errors import BadItem, SourceError
from proactivebench_builder.transforms import get_scenario, manifest_of

WORK = tempfile.mkdtemp(prefix="pb-fuzz-sources-")


# ---- helpers ----------------------------------------------------------------------------------

def balanced(values, label: str) -> None:
    raw = sum(v.n for v in values if isinstance(v, results.Count) and v.scenario == label
              and v.what == "raw_items")
    excluded = sum(v.n for v in values if isinstance(v, results.Count) and v.scenario == label
                   and v.what.startswith("excluded:"))
    resolved = sum(1 for v in values if isinstance(v, (results.Candidate, results.DeadLetter))
                   and v.scenario == label)
    assert raw == resolved + excluded, (label, raw, resolved, excluded)


class peak_memory:
    """`with peak_memory(limit):` fails when Python allocations inside peak above `limit`."""

    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self):
        tracemalloc.start()

    def __exit__(self, kind, *_):
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        if kind is None:
            assert peak <= self.limit, f"peak {peak:,} bytes"
        return False


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(), st.text(max_size=12),
    st.sampled_from(["", "0", "1", "-1", "²", "٣", "1_0", "1e400", "cat", "..", "/", "../x",
                     "{image}", "{level}", "{0}", "{image:>99}", "{image.__class__}", "a\x00b",
                     "\ud800"]))
json_values = st.recursive(json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=8), kids, max_size=5)),
    max_leaves=20)


def dumps(value) -> str:
    return json.dumps(value, allow_nan=True)


@st.composite
def mutated(draw, base: bytes) -> bytes:
    """`base` with a few byte edits: flips, cuts, insertions, duplications, a truncation."""
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "cut", "insert", "dup", "truncate"]))
        if kind == "flip":
            data[i] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[i:i + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "dup":
            data[i:i] = data[i:i + draw(st.integers(1, 64))]
        else:
            del data[i:]
    return bytes(data)


def maybe_mutated(strategy):
    return st.one_of(strategy, strategy.flatmap(mutated))


raw_bytes = st.binary(max_size=2000)


# ---- QuickDraw lines (FileScan) -------------------------------------------------------------------

QD_ROOT = os.path.join(WORK, "qd")


@st.composite
def qd_line(draw) -> bytes:
    coord = st.one_of(st.integers(0, 255), st.integers(-5, 300), json_scalars)
    stroke = st.one_of(
        st.integers(1, 5).flatmap(lambda n: st.tuples(
            st.lists(coord, min_size=n, max_size=n), st.lists(coord, min_size=n, max_size=n))
            .map(list)),
        st.lists(st.lists(coord, max_size=4), max_size=3), json_values)
    record = {"word": draw(st.sampled_from(["cat", "cat", "cat", "dog", "Cat", ""])),
              "countrycode": draw(st.sampled_from(["US", "", "\u00e9", '"x'])),
              "timestamp": "2017-03-01 20:41:00.70725 UTC",
              "recognized": draw(st.one_of(st.booleans(), json_scalars)),
              "key_id": draw(st.one_of(st.integers(0, 30).map(str),
                                       st.sampled_from(["00", "٣", "²", ""]), json_scalars)),
              "drawing": draw(st.one_of(st.lists(stroke, max_size=5), json_values))}
    for field in draw(st.lists(st.sampled_from(sorted(record)), max_size=2)):
        if draw(st.booleans()):
            record.pop(field, None)
        else:
            record[field] = draw(json_values)
    compact = draw(st.booleans())
    text = json.dumps(record, separators=(",", ":") if compact else (", ", ": "),
                      ensure_ascii=draw(st.booleans()), allow_nan=True)
    line = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:
        line = draw(mutated(line))
    return line + draw(st.sampled_from([b"\n", b"\r\n", b"\n\n", b""]))


quickdraw_files = st.one_of(
    st.lists(qd_line(), max_size=12).map(lambda ls: b"".join(
        line if line.endswith(b"\n") else line + b"\n" for line in ls)),
    st.lists(qd_line(), max_size=8).map(lambda ls: b"\xef\xbb\xbf" + b"".join(ls)),
    raw_bytes)


def _qd_full_parse(data: bytes, qd, capacity: int) -> list[str] | None:
    """The kept key ids by a full parse of every line (FileScan's promise), or None when a
    key_id repeats: a canonical line FileScan never needs is not validated, so it claims its
    key even when its strokes are broken, where a full parse drops it (FileScan's docstring)."""
    from proactivebench_builder.core.seeding import hash_rank

    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    seen, eligible, keys = set(), [], []
    for line in data.split(b"\n"):
        line = line.rstrip(b"\r\n")
        if not line or line.isspace():
            continue
        try:
            record = qd._parse_line(line, "cat")
        except BadItem:
            found = _canonical_key(line)
            if found is not None:
                keys.append(found)
            continue
        keys.append(record["key_id"])
        if record["key_id"] in seen:
            continue
        seen.add(record["key_id"])
        if not record["recognized"] or len(record["strokes"]) < int(qd.params["min_strokes"]):
            continue
        eligible.append((hash_rank(0, "quickdraw", "test", f"cat/{record['key_id']}"),
                         record["key_id"]))
    if len(keys) != len(set(keys)):
        return None
    return [k for _, k in sorted(eligible)[:capacity]]


def _canonical_key(line: bytes) -> str | None:
    from proactivebench_builder.transforms.quickdraw.scan import CANONICAL_LINES

    found = CANONICAL_LINES.match(line + b"\n")
    return found.group(3).decode() if found else None


@FUZZ
@given(quickdraw_files)
@example(b'{"word":"cat","countrycode":"IT","timestamp":"t","recognized":true,"key_id":"77",'
         b'"drawing":[[[1,2,3],[4,5],[6,7]]]}\n{"word":"cat","countrycode":"IT","timestamp":'
         b'"t","recognized":true,"key_id":"77","drawing":[[[1,2,3],[4,5,6]],[[7,8],[9,10]]]}\n')
@example(b"[" * 50000 + b"\n")
def test_quickdraw_file_scan(data):
    folder = os.path.join(QD_ROOT, "simplified")
    os.makedirs(folder, exist_ok=True)
    unit = os.path.join(folder, "cat.ndjson")
    with open(unit, "wb") as handle:
        handle.write(data)
    qd = get_scenario("quickdraw")(0, QD_ROOT)
    qd.params.update(samples_per_class=3, train_per_class=2)
    values = list(qd.read_unit_with_train(unit))  # FileScan: never raises
    balanced(values, "quickdraw")
    balanced(values, "quickdraw/train")
    picked = sorted(v.item["key_id"] for v in values if isinstance(v, results.Candidate))
    reference = _qd_full_parse(data, qd, 5)
    if reference is not None:
        assert picked == sorted(reference)
    for v in values:
        if isinstance(v, results.Candidate):
            row = (qd.build_sample(v.key, v.item) if v.scenario == "quickdraw"
                   else qd.build_train_example(v.key, v.item))
            refs = row.get("frame_refs") or [row["image_ref"]]
            qd.load_frame(refs[-1])


# ---- COCO: the streaming JSON reader -------------------------------------------------------------

@st.composite
def coco_doc(draw) -> bytes:
    image = st.fixed_dictionaries({
        "id": st.one_of(st.integers(0, 30), json_scalars),
        "width": st.one_of(st.integers(0, 5000), json_scalars),
        "height": st.one_of(st.integers(0, 5000), json_scalars),
        "file_name": st.one_of(st.just("COCO_val2014_000000000001.jpg"), json_scalars)})
    ann = st.fixed_dictionaries({
        "id": st.one_of(st.integers(0, 30), json_scalars),
        "image_id": st.one_of(st.integers(0, 30), json_scalars),
        "category_id": st.one_of(st.integers(0, 90), json_scalars),
        "bbox": st.one_of(st.lists(st.floats(-10, 5000), min_size=4, max_size=4), json_values),
        "iscrowd": st.one_of(st.integers(0, 1), json_scalars),
        "segmentation": json_values})
    doc = {"info": draw(json_values),
           "images": draw(st.lists(st.one_of(image, json_values), max_size=6)),
           "annotations": draw(st.lists(st.one_of(ann, json_values), max_size=6)),
           "categories": draw(st.one_of(st.lists(st.fixed_dictionaries(
               {"id": st.integers(0, 90), "name": st.text(max_size=6)}), max_size=4),
               json_values))}
    parts = [f"{json.dumps(k)}: {dumps(doc[k])}" for k in draw(st.permutations(list(doc)))
             if not (k in ("info", "categories") and draw(st.booleans()))]
    if draw(st.integers(0, 7)) == 0:
        parts.append('"images": []')  # a repeated key
    text = ("\ufeff" if draw(st.integers(0, 9)) == 0 else "") + "{" + ", ".join(parts) + "}"
    return text.encode("utf-8", "surrogatepass")


def deep(n: int, opener=b"[", closer=b"]") -> bytes:
    return opener * n + closer * n


@FUZZ
@given(st.one_of(maybe_mutated(coco_doc()), raw_bytes,
                 json_values.map(lambda v: dumps(v).encode("utf-8", "surrogatepass"))))
@example(b'{"images": ' + deep(30000) + b', "annotations": []}')
@example(b'{"images": [], "annotations": [' + deep(30000, b'{"a":', b"}") + b"]}")
def test_coco_annotation_stream(data):
    from proactivebench_builder.transforms.coco.annotations import index_annotations

    outcomes = set()
    for chunk in (3, 64, 1 << 16):
        try:
            index = index_annotations(io.BytesIO(data), chunk_bytes=chunk)
        except ValueError:
            outcomes.add("ValueError")
        else:
            outcomes.add(repr((index.images, index.objects, index.orphans, index.malformed,
                               index.file_categories)))
    assert len(outcomes) == 1, "the index depends on the chunk size"
    try:
        parsed = json.loads(data.decode("utf-8-sig", "surrogatepass"))
    except (ValueError, RecursionError):
        return
    if (isinstance(parsed, dict) and isinstance(parsed.get("images"), list)
            and isinstance(parsed.get("annotations"), list)
            and data.count(b'"images"') == 1 and data.count(b'"annotations"') == 1):
        assert outcomes != {"ValueError"}, "json.loads reads an instances file the stream refuses"


# ---- VSOD: labels CSV and annotation XML -----------------------------------------------------------

csv_cell = st.one_of(st.text(max_size=10), st.sampled_from(
    ["seg_0001", "speaker", "event", "number_of_people", "Ge You", "Two", "4", "11", "²", "٣",
     "", " ", '"', "a,b", "x\ny", "\r", "x\ry", "9" * 5000, "y" * 140000]))


@st.composite
def csv_text(draw, header: list[str]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=draw(st.sampled_from(["\n", "\r\n", "\r"])))
    if draw(st.integers(0, 5)):
        writer.writerow(header)
    for _ in range(draw(st.integers(0, 6))):
        writer.writerow(draw(st.lists(csv_cell, max_size=len(header) + 1)))
    return out.getvalue().encode("utf-8", "surrogatepass")


LABEL_HEADER = ["segment", "question_type", "answer", "first_image", "reference_image"]


@FUZZ
@given(st.one_of(maybe_mutated(csv_text(LABEL_HEADER)), raw_bytes))
@example(("segment,question_type,answer,first_image,reference_image\r"
          "seg_0001,speaker,Ge\rYou,,\r").encode())
@example(b"segment,question_type,answer\n" + b'"' + b"x" * 200000 + b'"\n')
@example("segment,question_type,answer,first_image\nseg_0001,speaker,Ge You,²\n".encode())
def test_vsod_labels(data):
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return  # VSOD.labels: a SourceError naming the file
    try:
        good, bad = parse_labels(text, manifest_of("vsod")["categories"])
    except SourceError:
        return
    lines = [g["line"] for g in good] + [line for line, _ in bad]
    assert all(isinstance(n, int) and n > 0 for n in lines)
    for label in good:
        for column in ("first_image", "reference_image"):
            assert label[column] is None or 0 <= label[column] < 10 ** 9


xml_number = st.one_of(st.integers(-10, 100).map(str), st.floats().map(repr), st.sampled_from(
    ["nan", "inf", "-inf", "1e400", " 5 ", "", "0x10", "1_0", "５", "١٢", "-0"]))


@st.composite
def vsod_xml(draw) -> bytes:
    objects = "".join(
        "<object><name>p</name>" + ("" if draw(st.integers(0, 9)) == 0 else "<bndbox>" + "".join(
            f"<{k}>{draw(xml_number)}</{k}>" for k in ("xmin", "ymin", "xmax", "ymax"))
            + "</bndbox>") + "</object>" for _ in range(draw(st.integers(0, 3))))
    size = (f"<size><width>{draw(xml_number)}</width><height>{draw(xml_number)}</height></size>"
            if draw(st.booleans()) else "")
    return f"<annotation><filename>f.jpg</filename>{size}{objects}</annotation>".encode()


BILLION_LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">' + b"".join(
    b'<!ENTITY b%d "%s">' % (i, (b"&a;" if i == 0 else b"&b%d;" % (i - 1)) * 10)
    for i in range(8)) + b"]><annotation>&b7;</annotation>")


@FUZZ
@given(st.one_of(maybe_mutated(vsod_xml()), raw_bytes))
@example(b"<annotation><size><width>inf</width><height>8</height></size></annotation>")
@example(b"<annotation><object><bndbox><xmin>nan</xmin><ymin>1</ymin><xmax>5</xmax>"
         b"<ymax>5</ymax></bndbox></object></annotation>")
@example(BILLION_LAUGHS)
def test_vsod_annotation_xml(data):
    from proactivebench_builder.transforms.vsod.scenario import (
        check_boxes, parse_annotation, union_area)

    try:
        size, boxes = parse_annotation(data)
        check_boxes(boxes, 64, 36)
    except BadItem:
        return
    assert size is None or all(isinstance(v, int) for v in size)
    assert all(math.isfinite(v) for box in boxes for v in box)
    assert 0 <= union_area(boxes) <= 64 * 36 + 1e-6


# ---- ChangeIt: tables and annotations ----------------------------------------------------------

@FUZZ
@given(st.one_of(maybe_mutated(csv_text(["DIR_NAME", "ACTION_NAME", "CENTERING_PARAM"])),
                 maybe_mutated(csv_text(["LABEL_ID", "MEANING"])),
                 st.lists(st.tuples(st.one_of(st.integers(-1, 5), csv_cell),
                                    st.one_of(st.integers(-1, 5), csv_cell)), max_size=8).map(
                     lambda rows: "\n".join(f"{a},{b}" for a, b in rows).encode(
                         "utf-8", "surrogatepass")),
                 raw_bytes))
@example(b'DIR_NAME,ACTION_NAME,CENTERING_PARAM\napple,Apple\rPeeling,0.3\n')
@example(b'LABEL_ID,MEANING\n\xd9\xa3,state1\n')
@example(b",")                                         # an empty video id was listed
def test_changeit_tables_and_annotations(data):
    from proactivebench_builder.transforms.changeit.csvs import (
        parse_annotation, parse_categories_csv, parse_labels_csv, parse_video_list, read_text)

    try:
        text = read_text(data)
    except BadItem:
        return
    for parse in (parse_categories_csv, parse_labels_csv):
        try:
            table = parse(text)
        except SourceError:
            continue
        assert all(isinstance(k, (str, int)) for k in table)
    ids = parse_video_list(text)
    assert not any("," in i or i != i.strip() or not i for i in ids)
    try:
        labels = parse_annotation(text, {0, 1, 2, 3})
    except BadItem:
        return
    assert labels and all(label in {0, 1, 2, 3} for label in labels)


# ---- MVP-N list pickles --------------------------------------------------------------------------

MVPN_ROOT = os.path.join(WORK, "mvpn")

mvpn_path = st.one_of(st.builds(lambda c, s, v, m: f"{c}/{s}/{v}_{m}.png",
                                st.sampled_from(["0000", "0041", "0042", "..", ""]),
                                st.sampled_from(["0", "1", "set", "a/b"]),
                                st.sampled_from(["1", "2", "3", "²", "٣", "x", ""]),
                                st.sampled_from(["0", "1", "2"])),
                      st.text(max_size=20))


@st.composite
def mvpn_pickle(draw) -> bytes:
    value = draw(st.one_of(st.lists(st.one_of(st.lists(mvpn_path, max_size=7), json_values),
                                    max_size=6), json_values))
    return pickle.dumps(value, protocol=draw(st.integers(0, pickle.HIGHEST_PROTOCOL)))


def _mvpn_root() -> str:
    if not os.path.isdir(MVPN_ROOT):
        from proactivebench_builder.pipeline.miniature import ensure_miniature_sources
        from proactivebench_builder.transforms import load_scenarios

        root = ensure_miniature_sources(os.path.join(WORK, "mvpn-src"),
                                        {"mvpn": load_scenarios()["mvpn"]})
        shutil.copytree(os.path.join(root, "mvpn"), MVPN_ROOT)
    return MVPN_ROOT


@pytest.mark.build
@FUZZ
@given(st.one_of(maybe_mutated(mvpn_pickle()), raw_bytes))
@example(b"\x80\x02]r" + struct.pack("<I", 1 << 27) + b".")   # memo index 2^27: 2 GB before
@example(b"\x80\x02]q\x05.")                                   # BINPUT beyond the entries made
@example(b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"x.")  # BINBYTES8 claiming 1 TiB
def test_mvpn_list_pickle(data):
    root = _mvpn_root()
    unit = os.path.join(root, "data", "test_list", "test_0000_100.pkl")
    with open(unit, "wb") as handle:
        handle.write(data)
    mvpn = get_scenario("mvpn")(0, root)
    with peak_memory(32 << 20):
        values = list(mvpn.read_unit(unit))  # never raises
    balanced(values, "mvpn")
    for v in values:
        if isinstance(v, results.Candidate):
            try:
                mvpn.build_sample(v.key, v.item)
            except BadItem:
                pass


# ---- ROD tar headers ------------------------------------------------------------------------------

ROD_ROOT = os.path.join(WORK, "rod")
ROD_NAMES = ["natural_bluebl_greenr-banana/s0.jpg", "natural_bluebl_greenr-banana-s13.jpg",
             "orange/natural_redbl_greenr-orange-s3.jpg", "x/../../etc/passwd", "/abs.jpg",
             "a" * 300 + "-s1.jpg", "natural_bluebl_greenr-banana-s6.png",
             "natural_bluebl_greenr-cup-s" + "9" * 40 + ".jpg", "natural_bluebl_greenr-cup-s٣.jpg"]


def _tiny_jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(out, format="JPEG")
    return out.getvalue()


TINY_JPEG = _tiny_jpeg()


def _raw_header(name: str, size: int, kind: bytes, fmt=tarfile.GNU_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info._create_header(info.get_info(), fmt, "utf-8", "strict")


@st.composite
def rod_archive(draw) -> bytes:
    fmt = draw(st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
    out = io.BytesIO()
    for _ in range(draw(st.integers(0, 5))):
        special = draw(st.integers(0, 6))
        if special == 0:   # an extended header (GNU long name or PAX) of a declared size
            kind = draw(st.sampled_from([tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK,
                                         tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_SPARSE]))
            body = draw(st.one_of(st.binary(max_size=64), st.sampled_from(
                [b"1" * 3000, b"3 " + b"a" * 600 + b"=", b"20 path=s0.jpgxxxxx\n",
                 b"30 GNU.sparse.major=1\n", b"99999999999999999999 a=b\n"])))
            declared = draw(st.one_of(st.just(len(body)), st.integers(0, 1 << 70)))
            out.write(_raw_header("././@LongLink", min(declared, (1 << 88) - 1), kind) + body
                      + b"\0" * (-len(body) % 512))
            continue
        name = draw(st.one_of(st.sampled_from(ROD_NAMES), st.text(min_size=1, max_size=40)))
        info = tarfile.TarInfo(name)
        info.type = draw(st.sampled_from([tarfile.REGTYPE] * 3 + [
            tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE]))
        data = draw(st.one_of(st.binary(max_size=64), st.just(TINY_JPEG)))
        info.size = len(data) if info.type == tarfile.REGTYPE else 0
        info.linkname = draw(st.sampled_from(["", "/etc/passwd", "../x", "s0.jpg"]))
        if fmt == tarfile.PAX_FORMAT and draw(st.booleans()):
            info.pax_headers = {draw(st.sampled_from(["path", "size", "comment", "x"])):
                                draw(st.sampled_from(["9" * 12, "-1", "a" * 3000, "s1.jpg"]))}
        try:
            header = info.tobuf(format=fmt)
        except (ValueError, UnicodeError):
            continue
        declared = draw(st.integers(0, 3))
        if declared == 0 and info.type == tarfile.REGTYPE:  # a size with no data behind it
            out.write(_raw_header(name[:90], draw(st.integers(1 << 20, 1 << 86)),
                                  tarfile.REGTYPE))
            break
        out.write(header + (data + b"\0" * (-len(data) % 512)
                            if info.type == tarfile.REGTYPE else b""))
    data = out.getvalue() + b"\0" * 1024
    if draw(st.integers(0, 2)) == 0:
        data = draw(mutated(data))
    compress = draw(st.sampled_from([lambda d: gzip.compress(d, 1), bz2.compress, lzma.compress,
                                     bytes]))
    return compress(data)


def _rod_archive_value(data: bytes):
    os.makedirs(ROD_ROOT, exist_ok=True)
    with open(os.path.join(ROD_ROOT, "rod_0.tar.gz"), "wb") as handle:
        handle.write(data)
    rod = get_scenario("rod")(0, ROD_ROOT)
    rod.params["read_from"] = "archives"
    return rod


@FUZZ
@given(st.one_of(rod_archive(), raw_bytes.map(lambda b: gzip.compress(b, 1)), raw_bytes))
@example(gzip.compress(_raw_header("natural_bluebl_greenr-banana-s13.jpg", 1 << 44,
                                   tarfile.REGTYPE)))                  # hours of skipping before
@example(gzip.compress((_raw_header("././@LongLink", 10, tarfile.GNUTYPE_LONGNAME)
                        + b"x" * 10 + b"\0" * 502) * 1500))          # RecursionError before
@example(gzip.compress(_raw_header("././@LongLink", 1 << 30, tarfile.GNUTYPE_LONGNAME)))
@example(bz2.compress(_raw_header("notes/zeros.bin", 24 << 20, tarfile.REGTYPE)
                      + b"\0" * (24 << 20)))                  # 24 MiB in one read before
def test_rod_archive_headers(data):
    import time

    from proactivebench_builder.pipeline.reading import merged_fragments
    from proactivebench_builder.transforms.rod import archives

    archives._READERS.clear()
    archives._SPANS.clear()
    archives._POINTS.clear()
    rod = _rod_archive_value(data)
    started = time.monotonic()
    with peak_memory(48 << 20):
        values = list(rod.read_unit("archive:rod_0.tar.gz"))  # never raises
    assert time.monotonic() - started < 20
    # a sequence's photos are a fragment, counted where the fragments meet (the build's merge)
    fragments = [v for v in values if isinstance(v, results.Fragment)]
    values = [v for v in values if v not in fragments] + list(merged_fragments(fragments))
    balanced(values, "rod")
    for v in values:
        if isinstance(v, results.Candidate):
            try:
                row = rod.build_sample(v.key, v.item)
            except BadItem:
                continue
            for ref in row["frame_refs"][:2]:
                rod.load_frame(ref)


# ---- the upstream JSONL import --------------------------------------------------------------------

UPSTREAM = os.path.join(WORK, "upstream")
UPSTREAM_RECORD = {
    "id": 0, "image_template": "QuickDraw/cat/1/{image}.png", "first_image": 0, "num_images": 2,
    "reference_image": 1, "prompt": "What is this?", "options": ["I cannot tell.", "More."],
    "categories": ["Cat.", "Dog.", "Pig.", "Cow."], "answer": "Cat.",
    "key": "QuickDraw/cat/1", "frame_ids": [0, 1],
    "source": {"dataset": "Quick, Draw!", "license": "CC BY 4.0", "files": ["x"]}}


def _upstream_folder() -> str:
    if not os.path.isdir(UPSTREAM):
        folder = os.path.join(UPSTREAM, "QuickDraw", "cat", "1")
        os.makedirs(folder)
        for frame in (0, 1):
            from PIL import Image

            Image.new("RGB", (8, 8), (frame * 200, 0, 0)).save(
                os.path.join(folder, f"{frame}.png"))
    return UPSTREAM


@st.composite
def upstream_line(draw) -> bytes:
    record = dict(UPSTREAM_RECORD)
    for field in draw(st.lists(st.sampled_from(sorted(record) + ["crop", "step_size",
                                                                  "valid_images"]), max_size=3)):
        choice = draw(st.integers(0, 2))
        if choice == 0:
            record.pop(field, None)
        elif choice == 1:
            record[field] = draw(json_values)
        else:
            record[field] = draw(st.sampled_from(
                ["../x/{image}.png", "/etc/hostname", "QuickDraw/{image}", "{level}", 10 ** 20,
                 -1, [], [0, 0], ["a"], {"top": "x"}, 1.5, 10 ** 9, "{image:>999999999}"]))
    return dumps(record).encode("utf-8", "surrogatepass")


@FUZZ
@given(st.one_of(maybe_mutated(upstream_line()), raw_bytes))
@example(b"[" * 100000)
@example(dumps(dict(UPSTREAM_RECORD, image_template=5)).encode())
@example(dumps(dict(UPSTREAM_RECORD, num_images=10 ** 20, frame_ids=None)).encode())
@example(dumps(dict(UPSTREAM_RECORD, key=["a"])).encode())
@example(dumps(dict(UPSTREAM_RECORD, prompt="\ud800")).encode())
@example(dumps(dict(UPSTREAM_RECORD, frame_ids=None, num_images=10 ** 9)).encode())
def test_upstream_import_record(data):
    import pyarrow as pa

    from proactivebench_builder.core.config import BuildConfig
    from proactivebench_builder.core.records import arrow_schema
    from proactivebench_builder.core.fileio import numbered_lines
    from proactivebench_builder.pipeline.import_upstream import (
        MAX_LINE_BYTES, ImportRecord, ReadRecords)

    folder = _upstream_folder()
    config = BuildConfig(seed=0, output="/unused", scenarios=("quickdraw",),
                         sources={"quickdraw": folder},
                         config_to_scenario={"QuickDraw": "quickdraw"}, import_upstream=folder,
                         import_configs=("QuickDraw",), keep_ids=True)
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "wb") as handle:
        handle.write(data + b"\n")
    elements = list(ReadRecords(config).process("QuickDraw"))
    assert len(elements) == len(list(numbered_lines(io.BytesIO(data + b"\n"), MAX_LINE_BYTES)))
    for element in elements:
        with peak_memory(64 << 20):
            values = list(ImportRecord(config).process(element))
        kinds = [type(v).__name__ for v in values]
        assert kinds in (["Count", "Sample"], ["Count", "DeadLetter"]), kinds
        if kinds[1] == "Sample":
            row = dict(values[1].row, frames=[])
            schema = arrow_schema()
            pa.Table.from_pylist([{c: row.get(c) for c in schema.names}], schema=schema)
