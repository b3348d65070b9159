"""The source lock files of `--verify_sources [--record]` (fetch/source_lock.py, through
fetch/verify.py) at their edges: a malformed, torn, huge, foreign or special lock file, names
that are not UTF-8, folders too deep to list or to recurse into, a lock that cannot be written.
Each case ends in one problem line (plus the hint to re-record) or in correct handling, never in
a traceback, a hang or memory that follows what a file claims."""
from __future__ import annotations

import json
import os
import subprocess
import tracemalloc

import pytest

from test_download import one_line, open_fifo_once, run_with_deadline
from proactivebench_builder.fetch import source_lock
from proactivebench_builder.fetch.verify import record_sources, verify_sources


NO_PINS = {"expected_files": {}, "checksums": {}}


@pytest.fixture()
def locked(tmp_path) -> str:
    """A small source folder, recorded."""
    folder = tmp_path / "src"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "x.json").write_bytes(b"{}")
    (folder / "b.jpg").write_bytes(b"jpeg")
    problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
    assert problems == [] and written
    return str(folder)


def lock_of(folder: str) -> str:
    return os.path.join(folder, source_lock.LOCK_NAME)


def rewrite_lock(folder: str, edit) -> None:
    with open(lock_of(folder), encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    with open(lock_of(folder), "w", encoding="utf-8") as handle:
        handle.writelines(edit(lines))


def compare(folder: str, scenario: str = "demo") -> list[str]:
    return verify_sources({scenario: folder}, {scenario: NO_PINS})


def assert_one_lock_problem(problems: list[str], message: str) -> None:
    assert len(problems) == 2 and message in problems[0], problems  # + the hint to re-record
    assert all(one_line(p) for p in problems)


def entry_line(**fields) -> str:
    return json.dumps(fields) + "\n"


@pytest.mark.parametrize("line, message", [
    ("[" * 100_000 + "]" * 100_000 + "\n", "line 2 is not JSON"),
    (entry_line(path="a/l", symlink="x", size="big"), "line 2"),
    (entry_line(path="a/l", symlink="x", size=10 ** 30), "line 2"),
    (entry_line(path="../../etc/passwd", size=1, sha256="0" * 64), "not a relative path"),
    (entry_line(path="/etc/passwd", size=1, sha256="0" * 64), "not a relative path"),
    (entry_line(path="a/x.json", size=2, sha256="z" * 64), "expected size and sha256"),
    (entry_line(path="a/x.json", size=True, sha256="0" * 64), "expected size and sha256"),
    (entry_line(path=["a"], size=2, sha256="0" * 64), "has no path"),
    ('{"path": "a", "size": ' + "9" * 5000 + "}\n", "line 2 is not JSON"),
    ("\xff\xfe\n", "line 2"),
])
def test_a_malformed_lock_line_is_one_problem(locked, line, message):
    rewrite_lock(locked, lambda lines: [lines[0], line, *lines[1:]])
    assert_one_lock_problem(compare(locked), message)


def test_a_torn_last_line_is_one_problem(locked):
    rewrite_lock(locked, lambda lines: [*lines[:-1], lines[-1][:10]])
    assert_one_lock_problem(compare(locked), "line 4 is not JSON")


def test_duplicate_lock_entries_are_one_problem(locked):
    rewrite_lock(locked, lambda lines: [lines[0], lines[1], *lines[1:]])
    assert_one_lock_problem(compare(locked), "out of order")


def test_a_lock_claiming_a_huge_size_is_one_problem(locked):
    rewrite_lock(locked, lambda lines: [lines[0], lines[1].replace('"size": 2', '"size": '
                                                                  + str(10 ** 40)), *lines[2:]])
    problems = compare(locked)
    assert problems and all(one_line(p) for p in problems)


def test_a_lock_of_another_scenario_is_one_problem(locked):
    assert_one_lock_problem(compare(locked, "other"), "recorded for scenario 'demo'")


def test_a_lock_header_with_a_boolean_version_is_refused(locked):
    rewrite_lock(locked, lambda lines: [lines[0].replace('"version": 1', '"version": true'),
                                        *lines[1:]])
    assert_one_lock_problem(compare(locked), "not a proactivebench-source-lock")


def test_a_lock_line_of_64_mib_costs_no_memory(locked):
    with open(lock_of(locked), "r+b") as handle:
        handle.seek(0, 2)
        handle.truncate(handle.tell() + (64 << 20))  # sparse: one line of zero bytes
    tracemalloc.start()
    try:
        problems = compare(locked)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problems and "longer than" in problems[0], problems
    assert peak < 16 << 20


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_a_lock_file_that_is_not_a_regular_file_is_one_problem(locked, tmp_path, kind):
    os.remove(lock_of(locked))
    if kind == "fifo":
        os.mkfifo(lock_of(locked))
    elif kind == "link":
        outside = tmp_path / "outside.jsonl"
        outside.write_text("{}\n")
        os.symlink(outside, lock_of(locked))
    else:
        os.mkdir(lock_of(locked))
    problems = run_with_deadline(lambda: compare(locked), 20, open_fifo_once(lock_of(locked))
                                 if kind == "fifo" else lambda: None)
    assert_one_lock_problem(problems, "not a regular file")


def test_names_that_are_not_utf8_are_recorded_and_compared(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    with open(os.path.join(bytes(folder), b"caf\xe9.jpg"), "wb") as handle:
        handle.write(b"jpeg")
    problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
    assert problems == [] and written, problems
    assert compare(str(folder)) == []
    with open(os.path.join(bytes(folder), b"caf\xe9.jpg"), "ab") as handle:
        handle.write(b"!")
    problems = compare(str(folder))
    assert problems and "caf" in problems[0] and all(one_line(p) for p in problems)


def test_a_folder_that_cannot_be_listed_is_one_problem(tmp_path):
    """A path deeper than PATH_MAX cannot be listed by its path."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "ok.txt").write_text("ok")
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(20):  # 20 x 250 bytes: past PATH_MAX, made relative to a descriptor
            os.mkdir("d" * 250, dir_fd=fd)
            child = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    try:
        problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
        assert written == [] and problems and all(one_line(p) for p in problems), problems
        assert "cannot be listed" in problems[0]
        assert not os.path.exists(lock_of(str(folder)))
    finally:
        shutil_rmtree_deep(folder)


def shutil_rmtree_deep(folder) -> None:
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_a_thousand_nested_folders_are_walked_without_recursion(tmp_path):
    folder = tmp_path / "src"
    deep = str(folder)
    os.mkdir(deep)
    for _ in range(1500):  # one level at a time (pathlib's parents=True recurses)
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    with open(os.path.join(deep, "x"), "wb") as handle:
        handle.write(b"x")
    try:
        problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
        assert problems == [] and "recorded 1 files" in written[0]
        assert compare(str(folder)) == []
    finally:
        shutil_rmtree_deep(folder)  # shutil.rmtree (pytest's cleanup) recurses


def test_a_lock_that_cannot_be_written_is_one_problem(locked):
    """A folder in the lock's place (or a full disk, a read-only folder): nothing is recorded,
    the reason is one line."""
    os.remove(lock_of(locked))
    os.mkdir(lock_of(locked))
    problems, written = record_sources({"demo": locked}, {"demo": NO_PINS})
    assert written == [] and len(problems) == 1 and one_line(problems[0]), problems
    assert "cannot write the lock file" in problems[0]
    assert [n for n in os.listdir(locked) if ".tmp-" in n] == []


def test_a_full_disk_while_recording_is_one_problem(small_filesystem):
    if small_filesystem is None:
        pytest.skip("mounting a tmpfs is not allowed here")
    folder = small_filesystem / "src"
    folder.mkdir()
    for k in range(2000):  # empty files, long names: the lock outgrows the 256 kB disk
        (folder / f"{k:05d}-{'n' * 200}").write_bytes(b"")
    problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
    assert written == [] and len(problems) == 1 and one_line(problems[0]), problems
    assert "No space left on device" in problems[0]
    assert [n for n in os.listdir(folder) if n.startswith(source_lock.LOCK_NAME)] == []


def test_a_locked_file_replaced_by_a_fifo_is_named_never_opened(locked):
    os.remove(os.path.join(locked, "b.jpg"))
    os.mkfifo(os.path.join(locked, "b.jpg"))
    problems = run_with_deadline(lambda: compare(locked), 20,
                                 open_fifo_once(os.path.join(locked, "b.jpg")))
    assert_one_lock_problem(problems, "b.jpg was a file, is now not a regular file")
