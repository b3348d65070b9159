"""SIGTERM and SIGHUP stop a build like Ctrl-C: sent to the build's main
process alone (as `kill`, `timeout` or a batch scheduler do), they end the whole process tree
within seconds, mark the folder failed with the signal's name, print one line and exit with
128 + the signal's number. Before, the main process died at once without a word, build.json
stayed "building", and its worker processes (sessions of their own) lived on for two minutes
and then printed grpc tracebacks into the terminal."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from conftest import RUNNER, read_json
from test_cli_errors import RUN_PIPELINE, REPO, temporary_files, write_corpus


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process (Linux /proc)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        table[int(entry)] = (int(fields[1]), int(fields[3]))
    return table


def tree_of(pid: int) -> set[int]:
    """`pid`'s descendants and the members of their sessions (the workers start sessions of
    their own, and Beam starts them through a shell)."""
    table = process_table()
    found, frontier = set(), {pid}
    while frontier:
        children = {p for p, (parent, _) in table.items() if parent in frontier} - found
        sessions = {table[p][1] for p in children}
        children |= {p for p, (_, sid) in table.items() if sid in sessions and sid != 0} - found
        found |= children
        frontier = children
    return found


def alive(pids) -> set[int]:
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.add(pid)
        except OSError:
            pass
    return out


@pytest.mark.build
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_the_whole_build_in_one_line(tmp_path, signum):
    sources = write_corpus(str(tmp_path / "sources"))
    output = str(tmp_path / "out")
    temporary = tmp_path / "tmp"  # the build's own temporary folders go here
    temporary.mkdir()
    process = subprocess.Popen(
        [sys.executable, RUN_PIPELINE, f"--output={output}", f"--sources_root={sources}",
         "--scenarios=quickdraw", "--no_train", RUNNER, "--direct_running_mode=multi_processing",
         "--direct_num_workers=2", "--progress"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env=dict(os.environ, TMPDIR=str(temporary)))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    tree: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while not temporary_files(output):
            assert process.poll() is None, "the build ended before writing: " + "".join(lines)
            assert time.monotonic() < deadline, "no write began within 240 s"
            time.sleep(0.005)
        tree = tree_of(process.pid)
        assert tree, "no worker process found"
        before = len(lines)
        os.kill(process.pid, signum)  # the main process alone
        status = process.wait(timeout=120)
        reader.join(timeout=30)
        after = "".join(lines[before:])
        ended = time.monotonic() + 30
        while alive(tree) and time.monotonic() < ended:
            time.sleep(0.2)
        assert not alive(tree), f"still running after the build ended: {alive(tree)}"
    finally:
        for pid in alive(tree | {process.pid}):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        process.wait()
    name = signal.Signals(signum).name
    assert status == 128 + signum, after
    assert "Traceback" not in after, after
    assert after.strip().splitlines()[-1] == f"run_pipeline.py: stopped by {name}", after
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "failed" and report["failure"] == f"stopped by {name}", report
    for folder, _, names in os.walk(output):
        for file_name in names:
            if file_name.endswith(".parquet") and not file_name.startswith(".tmp-"):
                pq.read_table(os.path.join(folder, file_name))
    # the build's own temporary folders (progress, worker failures) are gone with it
    left = [n for n in os.listdir(temporary) if n.startswith("proactivebench-")]
    assert not left, left


def test_ctrl_c_alone_says_interrupted():
    from proactivebench_builder.core.cli import stop_reason

    assert stop_reason(signal.SIGINT) == "interrupted (Ctrl-C)"
    assert stop_reason(signal.SIGTERM) == "stopped by SIGTERM"
