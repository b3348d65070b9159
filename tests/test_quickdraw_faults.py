"""QuickDraw's one-pass reader (`FileScan`) against a full parse of every line, and its faults.

The reference below is the reader as it was before the one-pass scan: every line parsed with
`json.loads`, every stroke validated, one heap per split. The scan must keep exactly the same
drawings for both splits, balance its accounting whatever fails where, and treat a BOM and
blank lines as no items at all.
"""
from __future__ import annotations

import heapq
import json
import os
import random
from collections import Counter

import pytest

from conftest import IN_PROCESS, read_json, run
from proactivebench_builder.core import fileio
from proactivebench_builder.core.seeding import hash_rank
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.transforms.quickdraw import scan
from proactivebench_builder.transforms.quickdraw.scan import FileScan
from proactivebench_builder.transforms.quickdraw.scenario import QuickDraw

TRAIN = "quickdraw/train"


def real_format_line(rng: random.Random, category: str, key_id: str, recognized=True,
                     n_strokes=None) -> str:
    """A line as the real simplified files write it: 2-9 strokes of 4-20 points."""
    strokes = []
    for _ in range(n_strokes or rng.randint(2, 9)):
        n = rng.randint(4, 20)
        strokes.append([[rng.randint(0, 255) for _ in range(n)],
                        [rng.randint(0, 255) for _ in range(n)]])
    record = {"word": category, "countrycode": rng.choice(["US", "DE", "BR"]),
              "timestamp": "2017-03-09 00:28:55.63775 UTC", "recognized": recognized,
              "key_id": key_id, "drawing": strokes}
    return json.dumps(record, separators=(",", ":"))


def write_category(folder, category: str, lines: list[str], prefix: bytes = b"") -> str:
    path = os.path.join(str(folder), "quickdraw", "simplified", f"{category}.ndjson")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(prefix + ("\n".join(lines) + "\n").encode("utf-8"))
    return path


def generated_lines(seed: int, n: int, category: str = "cat") -> list[str]:
    rng = random.Random(seed)
    lines = []
    for d in range(n):
        lines.append(real_format_line(rng, category, str(4500000000000000 + d * 7919),
                                      recognized=rng.random() < 0.9,
                                      n_strokes=1 if d % 23 == 0 else None))
    return lines


def reference_read(scenario: QuickDraw, path: str, start: int, stop: int):
    """The reader before the one-pass scan: (picked key ids, counts, dead-letter reasons)."""
    category = os.path.basename(path)[: -len(".ndjson")]
    heap, seen, eligible = [], set(), 0
    counts, dead = Counter(), []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip(b"\r\n")
            counts["raw_items"] += 1
            try:
                drawing = scenario._parse_line(line, category)
            except BadItem as err:
                dead.append((number, err.reason))
                continue
            key_id = drawing["key_id"]
            if key_id in seen:
                dead.append((number, "duplicate key"))
                continue
            seen.add(key_id)
            if not drawing["recognized"]:
                counts["excluded:not_recognized"] += 1
                continue
            if len(drawing["strokes"]) < 2:
                counts["excluded:too_few_strokes"] += 1
                continue
            eligible += 1
            entry = (-hash_rank(0, "quickdraw", "test", f"{category}/{key_id}"), key_id)
            if len(heap) < stop:
                heapq.heappush(heap, entry)
            elif entry > heap[0]:
                heapq.heapreplace(heap, entry)
    ranked = sorted(heap, key=lambda e: -e[0])
    if start:
        counts["excluded:in_test_pool"] += min(start, len(ranked))
    if eligible > len(ranked):
        counts["excluded:not_sampled"] += eligible - len(ranked)
    return sorted(key for _, key in ranked[start:stop]), counts, dead


def split_values(values, label):
    mine = [v for v in values if v.scenario == label]
    picked = sorted(v.item["key_id"] for v in mine if v.kind == "candidate")
    counts = Counter()
    for v in mine:
        if v.kind == "count":
            counts[v.what] += v.n
    dead = [v for v in mine if v.kind == "dead_letter"]
    return picked, counts, dead


def assert_balanced(values, label):
    picked, counts, dead = split_values(values, label)
    excluded = sum(n for what, n in counts.items() if what.startswith("excluded:"))
    assert counts["raw_items"] == len(picked) + len(dead) + excluded, (label, counts)


def scenario_at(root) -> QuickDraw:
    return QuickDraw(0, str(root / "quickdraw"))


def test_the_rank_of_the_scan_is_hash_rank(tmp_path):
    scan = FileScan(scenario_at(tmp_path), "x/cat.ndjson", "The Eiffel Tower", capacity=1)
    digest = scan.rank_prefix.copy()
    digest.update(b"4500000000000123")
    assert int.from_bytes(digest.digest(), "big") == \
        hash_rank(0, "quickdraw", "test", "The Eiffel Tower/4500000000000123")


@pytest.mark.parametrize("seed,read_bytes", [(0, None), (1, None), (2, 777)])
def test_the_scan_keeps_what_a_full_parse_of_every_line_keeps(tmp_path, monkeypatch, seed,
                                                              read_bytes):
    if read_bytes:  # blocks smaller than a line: every line straddles a block boundary
        monkeypatch.setattr(scan, "READ_BYTES", read_bytes)
    lines = generated_lines(seed, 3000)
    rng = random.Random(seed)
    good = json.loads(lines[7])
    faults = [
        lines[11][: len(lines[11]) // 2],                                       # cut mid-way
        json.dumps(dict(good, key_id="999", drawing=[])),                       # no strokes
        json.dumps(dict(good, key_id="998", word="dog"), separators=(",", ":")),  # wrong word
        lines[7],                                                               # duplicate key
        json.dumps(dict(good, key_id="997")),                  # valid, not canonical (spaces)
        json.dumps(dict(good, key_id="996", drawing=[[[1.5, 2], [3, 4]]] * 2)),  # non-integer
        "not json at all",
        "garbage" + lines[13],                          # a canonical line after other bytes
        lines[14][:40] + "\r" + lines[14][40:],       # a lone CR inside a field
        '{"word":"cat","countrycode":"US","timestamp":"x","recognized":true,"key_id":"995",'
        '"drawing":[[[1,2],[3,4]],[[5],[6]]],"extra":1}',                        # extra field
    ]
    for fault in faults:
        lines.insert(rng.randrange(len(lines)), fault)
    path = write_category(tmp_path, "cat", lines)
    scenario = scenario_at(tmp_path)
    values = list(scenario.read_unit_with_train(path))
    for label, start, stop in (("quickdraw", 0, 10), (TRAIN, 10, 60)):
        picked, counts, dead = split_values(values, label)
        want_picked, want_counts, want_dead = reference_read(scenario, path, start, stop)
        assert len(picked) == stop - start
        assert picked == want_picked
        assert counts == want_counts
        assert sorted(d.reason.split(":")[0] for d in dead) == \
            sorted(reason.split(":")[0] for _, reason in want_dead)
        assert_balanced(values, label)
    # one split at a time gives the same values as the two read together
    assert list(scenario.read_unit(path)) == [v for v in values if v.scenario == "quickdraw"]
    train_alone = list(scenario.read_train_unit(path))
    assert train_alone == [v for v in values if v.scenario == TRAIN]


def test_a_broken_drawing_that_would_be_kept_is_a_dead_letter_and_the_next_rank_is_kept(
        tmp_path):
    lines = generated_lines(2, 400)
    scenario = scenario_at(tmp_path)
    path = write_category(tmp_path, "cat", lines)
    best = split_values(list(scenario.read_unit(path)), "quickdraw")[0]
    # break the drawing of a kept line in a way only the full stroke validation sees
    index = next(i for i, line in enumerate(lines) if json.loads(line)["key_id"] == best[0])
    record = json.loads(lines[index])
    record["drawing"][0][1] = record["drawing"][0][1][:-1]  # x and y of different lengths
    lines[index] = json.dumps(record, separators=(",", ":"))
    write_category(tmp_path, "cat", lines)
    values = list(scenario.read_unit_with_train(path))
    for label, start, stop in (("quickdraw", 0, 10), (TRAIN, 10, 60)):
        picked, _, dead = split_values(values, label)
        assert picked == reference_read(scenario, path, start, stop)[0]
        assert [d.path for d in dead] == [f"simplified/cat.ndjson:{index + 1}"]
        assert "x and y lists differ" in dead[0].reason
        assert_balanced(values, label)
    assert best[0] not in split_values(values, "quickdraw")[0]


@pytest.mark.parametrize("value", ["1.5", "NaN", "1e400", "-3", '"7"', "true"])
def test_one_odd_coordinate_loses_only_its_drawing(tmp_path, value):
    lines = generated_lines(3, 200)
    record = json.loads(lines[50])
    text = json.dumps(record, separators=(",", ":"))
    first = str(record["drawing"][0][0][0])
    lines[50] = text.replace(f'"drawing":[[[{first},', f'"drawing":[[[{value},', 1)
    assert lines[50] != text
    path = write_category(tmp_path, "cat", lines)
    values = list(scenario_at(tmp_path).read_unit_with_train(path))
    for label in ("quickdraw", TRAIN):
        picked, counts, dead = split_values(values, label)
        assert [d.path for d in dead] == ["simplified/cat.ndjson:51"]
        assert counts["raw_items"] == 200 and len(picked) == (10 if label == "quickdraw" else 50)
        assert_balanced(values, label)


def test_a_bom_and_blank_lines_are_no_items(tmp_path):
    lines = generated_lines(4, 300)
    clean = list(scenario_at(tmp_path).read_unit_with_train(write_category(tmp_path, "cat",
                                                                            lines)))
    spaced = lines[:5] + ["", "   ", "\r"] + lines[5:100] + [""] + lines[100:] + ["", ""]
    path = write_category(tmp_path, "cat", spaced, prefix=b"\xef\xbb\xbf")
    values = list(scenario_at(tmp_path).read_unit_with_train(path))
    for label in ("quickdraw", TRAIN):
        assert split_values(values, label)[1] == split_values(clean, label)[1]
        assert split_values(values, label)[0] == split_values(clean, label)[0]
        assert not split_values(values, label)[2]
    # CRLF line ends too
    crlf = write_category(tmp_path, "cat", [line + "\r" for line in lines])
    assert [v for v in scenario_at(tmp_path).read_unit_with_train(crlf)
            if v.kind != "candidate"] == [v for v in clean if v.kind != "candidate"]


def test_an_io_error_part_way_counts_what_was_read_and_the_rest_as_one_item(tmp_path,
                                                                              monkeypatch):
    lines = generated_lines(5, 500)
    path = write_category(tmp_path, "cat", lines)
    real = fileio.open_source

    class FailingHandle:
        """Reads come in 64 KiB pieces; the third fails, as a disk or network error would."""

        def __init__(self, handle):
            self.handle, self.reads = handle, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, size=-1):
            self.reads += 1
            if self.reads == 3:
                raise OSError("Input/output error")
            return self.handle.read(1 << 16)

    monkeypatch.setattr(fileio, "open_source", lambda url: FailingHandle(real(url)))
    values = list(scenario_at(tmp_path).read_unit_with_train(path))
    with open(path, "rb") as handle:
        read_lines = handle.read(2 << 16).count(b"\n")  # the whole lines before the failure
    assert 0 < read_lines < 500
    for label in ("quickdraw", TRAIN):
        picked, counts, dead = split_values(values, label)
        assert counts["raw_items"] == read_lines + 1
        assert [d.path for d in dead] == [f"simplified/cat.ndjson:{read_lines + 1}"]
        assert "Input/output error" in dead[0].reason
        assert picked  # what was read before the failure still counts
        assert_balanced(values, label)


def test_an_unopenable_file_is_one_dead_letter_per_split(tmp_path):
    os.makedirs(tmp_path / "quickdraw" / "simplified")
    path = str(tmp_path / "quickdraw" / "simplified" / "cat.ndjson")
    values = list(scenario_at(tmp_path).read_unit_with_train(path))
    for label in ("quickdraw", TRAIN):
        _, counts, dead = split_values(values, label)
        assert counts["raw_items"] == 1 and len(dead) == 1
        assert_balanced(values, label)


def test_a_category_file_linked_out_of_the_root_is_never_read(tmp_path):
    """A symlink out of the sources root (e.g. left by an extraction) is one dead letter per
    split naming the link and its target; none of the outside file's drawings is read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = write_category(str(outside), "cat", generated_lines(1, 50))
    os.makedirs(tmp_path / "quickdraw" / "simplified")
    link = tmp_path / "quickdraw" / "simplified" / "cat.ndjson"
    os.symlink(target, link)
    values = list(scenario_at(tmp_path).read_unit_with_train(str(link)))
    assert not [v for v in values if v.kind == "candidate"]
    for label in ("quickdraw", TRAIN):
        _, counts, dead = split_values(values, label)
        assert counts["raw_items"] == 1 and len(dead) == 1, (label, counts, dead)
        assert "link outside the sources root" in dead[0].reason, dead[0]
        assert os.path.realpath(target) in dead[0].reason, dead[0]
        assert_balanced(values, label)


@pytest.mark.build
def test_a_build_reads_each_category_file_once_and_balances_both_splits(tmp_path,
                                                                        monkeypatch):
    rng = random.Random(6)
    for c, category in enumerate(["cat", "sun", "house", "bicycle", "t-shirt"]):
        lines = [real_format_line(rng, category, str(4600000000000000 + c * 10**6 + d))
                 for d in range(150)]
        if category == "cat":
            lines[20] = lines[20].replace('"drawing":[[[', '"drawing":[[[NaN,', 1)
            lines.insert(0, "")
        write_category(tmp_path / "src", category, lines,
                       prefix=b"\xef\xbb\xbf" if category == "sun" else b"")
    reads = []
    real_run = FileScan.run

    def counting_run(self):
        reads.append(os.path.basename(self.unit))
        return real_run(self)

    monkeypatch.setattr(FileScan, "run", counting_run)  # the FnApiRunner runs in this process
    out = str(tmp_path / "out")
    build = run(out, str(tmp_path / "src"), "quickdraw", IN_PROCESS)
    assert sorted(reads) == sorted(f"{c}.ndjson" for c in
                                   ["cat", "sun", "house", "bicycle", "t-shirt"])
    test, train = build["scenarios"]["quickdraw"], build["train"]["scenarios"]["quickdraw"]
    assert test["accounted"] and train["accounted"]
    assert test["raw_items"] == train["raw_items"] == 750
    assert test["dead_letters"] == train["dead_letters"] == 1
    assert test["samples"] == 50 and train["examples"] == 250
    assert read_json(os.path.join(out, "reports", "build.json")) == build


def test_an_overlong_line_is_one_dead_letter_and_the_rest_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "READ_BYTES", 4096)
    monkeypatch.setattr(scan, "MAX_LINE_BYTES", 10000)
    lines = generated_lines(7, 200)
    lines.insert(100, "[" * 50000)  # no newline for longer than any real line
    path = write_category(tmp_path, "cat", lines)
    values = list(scenario_at(tmp_path).read_unit_with_train(path))
    for label in ("quickdraw", TRAIN):
        picked, counts, dead = split_values(values, label)
        assert [(d.path, d.reason.split(":")[0]) for d in dead] == \
            [("simplified/cat.ndjson:101", "malformed ndjson line")]
        assert counts["raw_items"] == 201
        assert_balanced(values, label)
    del lines[100]
    clean = list(scenario_at(tmp_path).read_unit(write_category(tmp_path, "cat", lines)))
    assert split_values(values, "quickdraw")[0] == split_values(clean, "quickdraw")[0]
