"""pipeline/folder_lock.py: the output folder's lock. A lock file that is a link, a FIFO or a
folder is refused naming it (its target untouched); a held lock whose file names no holder is
refused as held; on an output without a lock primitive (gs://, s3://, memory://) a marker file
left by another build is refused saying how to remove it, and one of a dead build on this host
is taken over. A second build into a held folder is refused at once (exit 3, naming the holder,
nothing touched), also while the first one runs, and the folder stays valid."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, RUN_PIPELINE, RUNNER, run
from proactivebench_builder.core.errors import OutputError
from proactivebench_builder.core.layout import LOCK
from proactivebench_builder.pipeline.commands import build as build_command
from proactivebench_builder.pipeline.commands.validate import main as validate_main
from proactivebench_builder.pipeline.folder_lock import BuildLock


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    output, victim = tmp_path / "out", tmp_path / "victim.txt"
    output.mkdir()
    victim.write_text("precious content")
    os.symlink(victim, output / LOCK)
    with pytest.raises(OutputError, match=LOCK) as refused:
        with BuildLock(str(output)):
            pass
    assert "link" in str(refused.value)
    assert victim.read_text() == "precious content"


@pytest.mark.build
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_lock_file_that_is_not_a_regular_file_is_one_line_naming_it(tmp_path, kind):
    output = tmp_path / "out"
    output.mkdir()
    if kind == "fifo":
        os.mkfifo(output / LOCK)
    else:
        (output / LOCK).mkdir()
    done = subprocess.run([sys.executable, RUN_PIPELINE, f"--output={output}", "--scenarios=quickdraw",
                           "--no_train", RUNNER], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    lines = [line for line in done.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(output / LOCK) in lines[0], lines


@pytest.mark.parametrize("content", [b"[1]", b"7", b"[" * 4096, b"\xff"])
def test_a_held_lock_whose_file_names_no_holder_is_refused_as_held(tmp_path, content):
    """The refusal read the holder's JSON and called .get on whatever it was (a traceback)."""
    import fcntl

    from proactivebench_builder.core.errors import FolderLocked

    output = tmp_path / "out"
    output.mkdir()
    (output / LOCK).write_bytes(content)
    with open(output / LOCK, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another build holds it
        with pytest.raises(FolderLocked, match="another build"):
            with BuildLock(str(output)):
                pass
    marker = f"memory://lock-test-{os.getpid()}-{len(content)}/out"
    from proactivebench_builder.core import fileio

    fileio.write_bytes_atomic(fileio.join(marker, LOCK), content)
    with pytest.raises(FolderLocked, match="another build"):
        with BuildLock(marker):
            pass


@pytest.mark.parametrize("content", [
    json.dumps({"pid": 1, "host": "another-host", "command": "build", "started": "t"}).encode(),
    b"[1]", b"\xff" * 10, b"x" * 100000,
], ids=["another-host", "a-list", "not-utf8", "huge"])
def test_a_marker_left_on_a_remote_output_is_refused_naming_how_to_remove_it(content):
    """gs://, s3://: no lock primitive, a marker file. One held by a build elsewhere (or one
    that names no holder at all) is refused in one line saying how to remove it."""
    import uuid

    from proactivebench_builder.core import fileio
    from proactivebench_builder.core.errors import FolderLocked
    from proactivebench_builder.pipeline.folder_lock import BuildLock

    output = f"memory://inputs-gaps-{uuid.uuid4().hex}/out"
    fileio.write_bytes_atomic(f"{output}/.build.lock", content)
    with pytest.raises(FolderLocked, match=r"remove memory://.*\.build\.lock and build again"):
        with BuildLock(output):
            pass
    assert fileio.read_bytes(f"{output}/.build.lock") == content


@pytest.mark.build
def test_a_marker_of_a_dead_build_on_this_host_is_taken_over_and_removed():
    import socket as socket_
    import uuid

    from proactivebench_builder.core import fileio
    from proactivebench_builder.pipeline.folder_lock import BuildLock

    output = f"memory://inputs-gaps-{uuid.uuid4().hex}/out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    fileio.write_bytes_atomic(f"{output}/.build.lock", json.dumps(
        {"pid": int(dead.stdout), "host": socket_.gethostname()}).encode())
    with BuildLock(output):
        assert json.loads(fileio.read_bytes(f"{output}/.build.lock"))["pid"] == os.getpid()
    assert not fileio.exists(f"{output}/.build.lock")


def test_a_second_build_into_a_locked_folder_is_refused_at_once(tmp_path, miniature_root):
    output = str(tmp_path / "out")
    with BuildLock(output):
        done = subprocess.run(
            [sys.executable, "run_pipeline.py", f"--output={output}",
             f"--sources_root={miniature_root}", "--scenarios=quickdraw", RUNNER],
            cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 3, done.stderr[-2000:]
        assert f"pid {os.getpid()}" in done.stderr and "BUILD REFUSED" in done.stderr
        assert not os.path.exists(os.path.join(output, "reports"))  # nothing was touched
    # released on exit; a lock file left by a dead holder is not a lock (flock dies with it)
    with open(os.path.join(output, LOCK), "w") as handle:
        json.dump({"pid": 999999999, "host": "gone"}, handle)
    report = run(output, miniature_root, "quickdraw", "--no_train")
    assert report["status"] == "ok"


def test_two_concurrent_builds_one_is_refused_and_the_folder_stays_valid(tmp_path,
                                                                         miniature_root,
                                                                         monkeypatch):
    """A build runs in this process and, once it holds the folder, waits until a second build
    (another process) has tried the same folder: no timing decides whether they overlap."""
    import threading

    output = str(tmp_path / "out")
    holding, tried = threading.Event(), threading.Event()
    original = build_command.build_and_check

    def build_while_the_other_tries(*args):
        holding.set()
        assert tried.wait(300)
        return original(*args)

    monkeypatch.setattr(build_command, "build_and_check", build_while_the_other_tries)
    outcome = {}

    def first_build():
        try:
            outcome["report"] = run(output, miniature_root, "quickdraw,imagenet_c")
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = err
            holding.set()

    thread = threading.Thread(target=first_build)
    thread.start()
    try:
        assert holding.wait(300)
        second = subprocess.run(
            [sys.executable, "run_pipeline.py", f"--output={output}",
             f"--sources_root={miniature_root}", "--scenarios=quickdraw", RUNNER],
            cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        tried.set()
        thread.join(600)
    assert "error" not in outcome, outcome.get("error")
    assert second.returncode == 3, second.stderr[-2000:]
    assert f"pid {os.getpid()}" in second.stderr
    assert outcome["report"]["status"] == "ok"
    assert validate_main([output, "--skip_frames"]) == 0
