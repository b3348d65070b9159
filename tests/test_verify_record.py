"""Lock files of source folders (fetch/source_lock.py, fetch/verify.py):
`--verify_sources --record` writes `<source folder>/.proactivebench-lock.jsonl` (relative path,
size and sha256 of every file) once the manifest's pins agree, and every later
`--verify_sources` compares the folder with it: a file changed, resized, removed, added or
re-linked is named. Links are recorded by their text, never followed."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from proactivebench_builder.fetch import source_lock
from proactivebench_builder.fetch.download import STATE_DIR
from proactivebench_builder.pipeline.commands.build import run_build
from proactivebench_builder.fetch.verify import record_sources, verify_sources

from conftest import RUNNER, run

NO_PINS = {"expected_files": {}, "checksums": {}}


@pytest.fixture()
def coco(miniature_root, tmp_path) -> str:
    """A copy of the miniature COCO source (its packaged pins are the real download's, so the
    tests give the folder a manifest without pins, or with the pins they test)."""
    folder = str(tmp_path / "coco")
    shutil.copytree(os.path.join(miniature_root, "coco"), folder)
    return folder


def lock_lines(folder: str) -> list[dict]:
    with open(os.path.join(folder, source_lock.LOCK_NAME), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_record_then_compare_agrees(coco):
    problems, written = record_sources({"coco": coco}, {"coco": NO_PINS})
    assert problems == [] and len(written) == 1 and "recorded 19 files" in written[0]
    lines = lock_lines(coco)
    assert lines[0] == {"format": "proactivebench-source-lock", "version": 1,
                        "algorithm": "sha256", "scenario": "coco"}
    assert lines[-1]["end"] is True and lines[-1]["files"] == 19
    entry = next(e for e in lines if e.get("path") == "val2014/COCO_val2014_000000000042.jpg")
    with open(os.path.join(coco, entry["path"]), "rb") as handle:
        data = handle.read()
    assert entry == {"path": entry["path"], "size": len(data),
                     "sha256": hashlib.sha256(data).hexdigest()}
    paths = [tuple(e["path"].split("/")) for e in lines[1:-1]]
    assert paths == sorted(paths)  # walk order: a reader merges without holding either side
    assert verify_sources({"coco": coco}, {"coco": NO_PINS}) == []


def test_recording_twice_gives_the_same_bytes(coco):
    record_sources({"coco": coco}, {"coco": NO_PINS})
    with open(os.path.join(coco, source_lock.LOCK_NAME), "rb") as handle:
        first = handle.read()
    os.makedirs(os.path.join(coco, STATE_DIR, "partial"))  # fetch's own files are not locked
    with open(os.path.join(coco, STATE_DIR, "state.json"), "w") as handle:
        handle.write("{}")
    record_sources({"coco": coco}, {"coco": NO_PINS})
    with open(os.path.join(coco, source_lock.LOCK_NAME), "rb") as handle:
        assert handle.read() == first


def test_every_change_since_the_record_is_named(coco, tmp_path):
    record_sources({"coco": coco}, {"coco": NO_PINS})
    val = os.path.join(coco, "val2014")
    with open(os.path.join(val, "COCO_val2014_000000000042.jpg"), "r+b") as handle:
        handle.write(b"\xff\xd8 changed")                      # same size, other bytes
    with open(os.path.join(val, "COCO_val2014_000000000073.jpg"), "ab") as handle:
        handle.write(b"tail")                                   # resized
    os.remove(os.path.join(val, "COCO_val2014_000000000074.jpg"))  # removed
    with open(os.path.join(val, "COCO_val2014_000000999999.jpg"), "wb") as handle:
        handle.write(b"new")                                    # added
    problems = verify_sources({"coco": coco}, {"coco": NO_PINS})
    text = "\n".join(problems)
    assert "coco: changed: val2014/COCO_val2014_000000000042.jpg has sha256" in text
    assert "coco: changed: val2014/COCO_val2014_000000000073.jpg has" in text
    assert "coco: missing: val2014/COCO_val2014_000000000074.jpg (in the lock)" in text
    assert "coco: not in the lock: val2014/COCO_val2014_000000999999.jpg" in text
    assert problems[-1].endswith("record the lock again: --verify_sources --record")
    assert len(problems) == 5


def test_links_are_recorded_by_their_text_and_never_followed(coco, tmp_path):
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(b"secret bytes outside the source root")
    os.symlink(outside, os.path.join(coco, "val2014", "linked.jpg"))
    record_sources({"coco": coco}, {"coco": NO_PINS})
    entry = next(e for e in lock_lines(coco) if e.get("path") == "val2014/linked.jpg")
    assert entry == {"path": "val2014/linked.jpg", "symlink": str(outside)}
    outside.write_bytes(b"other bytes")  # what the link points at is none of the lock's business
    assert verify_sources({"coco": coco}, {"coco": NO_PINS}) == []
    os.remove(os.path.join(coco, "val2014", "linked.jpg"))
    os.symlink("/etc/passwd", os.path.join(coco, "val2014", "linked.jpg"))
    problems = verify_sources({"coco": coco}, {"coco": NO_PINS})
    assert "now points to '/etc/passwd'" in problems[0]


def test_a_special_file_is_refused_and_nothing_recorded(coco):
    os.mkfifo(os.path.join(coco, "annotations", "pipe"))
    problems, written = record_sources({"coco": coco}, {"coco": NO_PINS})
    assert written == [] and problems == ["coco: annotations/pipe: not a regular file, folder "
                                          "or link"]
    assert not os.path.exists(os.path.join(coco, source_lock.LOCK_NAME))


def test_a_published_pin_not_met_blocks_the_record(coco):
    """--record hashes everything anyway, so it also checks the published digests of the
    downloads present (here an md5 pinned on the annotation file, as ImageNet-C's tars are)."""
    manifest = {**NO_PINS, "name": "coco", "downloads": {"files": [{
        "url": "https://example.org/instances_val2014.json",
        "path": "annotations/instances_val2014.json", "md5": "0" * 32,
        "pins_from": "https://example.org/checksums"}]}}
    problems, written = record_sources({"coco": coco}, {"coco": manifest})
    assert written == [] and len(problems) == 1
    assert "annotations/instances_val2014.json: md5" in problems[0]
    assert "the manifest pins " + "0" * 32 in problems[0]
    assert not os.path.exists(os.path.join(coco, source_lock.LOCK_NAME))


def test_a_published_size_is_checked_without_a_lock(coco):
    manifest = {**NO_PINS, "name": "coco", "downloads": {"files": [{
        "url": "https://example.org/a.json", "path": "annotations/instances_val2014.json",
        "size": 1, "pins_from": "https://example.org/sizes", "record_only": "a test"}]}}
    problems = verify_sources({"coco": coco}, {"coco": manifest})
    assert len(problems) == 1 and "its publisher says 1" in problems[0]


@pytest.mark.parametrize("edit, message", [
    (lambda lines: lines[:-1], "truncated (no end line)"),
    (lambda lines: [lines[0], lines[2], lines[1], *lines[3:]], "out of order"),
    (lambda lines: ['{"format": "other"}\n', *lines[1:]], "not a proactivebench-source-lock"),
    (lambda lines: [*lines[:2], "not json\n", *lines[2:]], "line 3 is not JSON"),
    (lambda lines: [*lines[:-1], '{"end": true, "files": 1, "bytes": 1}\n'],
     "end line does not match"),
])
def test_a_damaged_lock_is_one_problem(coco, edit, message):
    record_sources({"coco": coco}, {"coco": NO_PINS})
    path = os.path.join(coco, source_lock.LOCK_NAME)
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(edit(lines))
    problems = verify_sources({"coco": coco}, {"coco": NO_PINS})
    assert any(message in p for p in problems), problems


def test_many_differences_are_counted_not_all_listed(coco):
    record_sources({"coco": coco}, {"coco": NO_PINS})
    shutil.rmtree(os.path.join(coco, "val2014"))
    for k in range(30):
        with open(os.path.join(coco, f"extra-{k:02d}.txt"), "w") as handle:
            handle.write("x")
    problems = verify_sources({"coco": coco}, {"coco": NO_PINS})
    assert len(problems) == source_lock.MAX_LINES + 2
    assert problems[-2] == f"coco: ... and {13 + 30 - source_lock.MAX_LINES} more"


def test_fsspec_roots_are_recorded_and_compared():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/lock/src/a/x.json", b"{}")
    fs.pipe("/lock/src/b.jpg", b"jpeg")
    root = "memory://lock/src"
    problems, written = record_sources({"demo": root}, {"demo": NO_PINS})
    assert problems == [] and "recorded 2 files (6 bytes)" in written[0]
    assert verify_sources({"demo": root}, {"demo": NO_PINS}) == []
    fs.pipe("/lock/src/b.jpg", b"JPEG")
    assert "changed: b.jpg has sha256" in verify_sources({"demo": root}, {"demo": NO_PINS})[0]


# ---- through the build command ---------------------------------------------------------------


@pytest.mark.build
def test_record_needs_verify_sources():
    with pytest.raises(SystemExit, match="--record writes the lock files --verify_sources "
                                         "compares: give both"):
        run_build(["--record", RUNNER])


def test_a_build_records_then_a_later_build_refuses_a_changed_source(miniature_root, tmp_path):
    """VSOD's manifest pins nothing its miniature lacks, so a real build can record: the lock
    is written before the build, and a later --verify_sources build stops before any work
    once a frame has changed."""
    root = str(tmp_path / "sources")
    shutil.copytree(os.path.join(miniature_root, "vsod"), os.path.join(root, "vsod"))
    report = run(str(tmp_path / "out1"), root, "vsod", "--verify_sources", "--record",
                 "--no_progress")
    assert report["scenarios"]["vsod"]["samples"] > 0
    lock = os.path.join(root, "vsod", source_lock.LOCK_NAME)
    assert lock_lines(os.path.join(root, "vsod"))[0]["scenario"] == "vsod"
    frames = os.path.join(root, "vsod", "OcclusionDataSet-MM20", "Data", "test")
    segment = sorted(os.listdir(frames))[0]
    frame = os.path.join(frames, segment, sorted(os.listdir(os.path.join(frames, segment)))[0])
    with open(frame, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(SystemExit, match="source verification failed \\(nothing was built\\)"
                                         ": vsod: changed: OcclusionDataSet-MM20/Data/test/"):
        run(str(tmp_path / "out2"), root, "vsod", "--verify_sources", "--no_progress")
    assert not os.path.exists(tmp_path / "out2" / "reports")
    assert os.path.isfile(lock)


def test_a_failed_record_writes_no_lock_and_says_so(miniature_root, tmp_path):
    """Every folder is checked before any lock is written: VSOD (no pins) passes while COCO's
    miniature fails its pins, and VSOD gets no lock a later build would trust; the message says
    no lock was written, in one line."""
    root = str(tmp_path / "sources")
    for name in ("vsod", "coco"):
        shutil.copytree(os.path.join(miniature_root, name), os.path.join(root, name))
    sources = {n: os.path.join(root, n) for n in ("coco", "vsod")}
    problems, written = record_sources(sources)
    assert problems and all(p.startswith("coco: ") for p in problems) and written == []
    assert not os.path.exists(os.path.join(root, "vsod", source_lock.LOCK_NAME))
    with pytest.raises(SystemExit) as raised:
        run(str(tmp_path / "out"), root, "vsod,coco", "--verify_sources", "--record",
            "--no_progress")
    message = str(raised.value.code)
    assert message.startswith("source verification failed (no lock file was written; nothing "
                              "was built): coco: ") and "\n" not in message
    assert not os.path.exists(os.path.join(root, "vsod", source_lock.LOCK_NAME))
    assert not os.path.exists(tmp_path / "out" / "reports")


def test_what_was_recorded_names_each_lock_written():
    from proactivebench_builder.pipeline.commands.configure import what_was_recorded

    assert what_was_recorded([], False) == "nothing was built"
    assert what_was_recorded(["vsod: recorded 3 files (9 bytes) in x"], True) == (
        "lock files were written only for vsod, whose folders passed; nothing was built")
