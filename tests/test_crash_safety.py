"""Crash safety: a build killed while it writes shards leaves no partial shard under a
final name, and the next run into the same folder produces the same bytes as an uninterrupted
build.

The build runs in a subprocess (`run_pipeline.py ... --runner FnApiRunner`, all in that one
process: the kill reaches the writer) and is killed with SIGKILL, which skips every cleanup
handler, as soon as a temporary shard (`.tmp-<unique>-<name>`) appears under the output: the
kill lands inside the write, not before or after it. To make that
window wide without any test hook in production code, the source is a real, bigger QuickDraw
corpus generated here (60 categories x 12 drawings: 600 samples whose stroke frames are
rendered while the shards are written).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from conftest import IN_PROCESS, RUNNER, run, shard_files
from proactivebench_builder.transforms import manifest_of

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATEGORIES, DRAWINGS = 60, 12
FLAGS = ("--scenarios=quickdraw", "--no_train", "--no_upstream_export",
         "--final_validation=off")


def write_corpus(root: str) -> str:
    """`<root>/quickdraw/simplified/<category>.ndjson` in the real format; returns `root`."""
    folder = os.path.join(root, "quickdraw", "simplified")
    os.makedirs(folder)
    for c, category in enumerate(manifest_of("quickdraw")["classes"][:CATEGORIES]):
        rng = random.Random(f"crash/{category}")
        lines = []
        for d in range(DRAWINGS):
            strokes = [[[rng.randint(0, 255) for _ in range(4)], [rng.randint(0, 255) for _ in range(4)]]
                       for _ in range(rng.randint(3, 7))]
            lines.append(json.dumps({
                "word": category, "countrycode": "US", "timestamp": "2017-03-01 20:41:00.1 UTC",
                "recognized": True, "key_id": str(5000000000000000 + c * 1000 + d),
                "drawing": strokes}, separators=(",", ":")))
        with open(os.path.join(folder, f"{category}.ndjson"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return root


def temporary_shards(output: str) -> list[str]:
    found = []
    for folder, _, names in os.walk(output):
        found += [os.path.join(folder, n) for n in names
                  if n.startswith(".tmp-") and n.endswith(".parquet")]
    return found


def final_shards(output: str) -> list[str]:
    found = []
    for folder, _, names in os.walk(output):
        found += [os.path.join(folder, n) for n in names
                  if n.endswith(".parquet") and not n.startswith(".tmp-")]
    return found


def kill_while_writing(output: str, sources_root: str) -> list[str]:
    """Start a build, SIGKILL its process group as soon as a shard is being written; returns the
    temporary files seen at that moment."""
    command = [sys.executable, os.path.join(REPO, "run_pipeline.py"), f"--output={output}",
               f"--sources_root={sources_root}", RUNNER, IN_PROCESS, *FLAGS]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            seen = temporary_shards(output)
            if seen:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=60)
                return seen
            if process.poll() is not None:
                raise AssertionError("the build finished before any shard write was seen; "
                                     "make the corpus bigger")
            time.sleep(0.005)
        raise AssertionError("no shard write began within 240 s")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.build
def test_killed_build_leaves_no_partial_shard_and_rerun_matches(tmp_path):
    sources_root = write_corpus(str(tmp_path / "sources"))
    reference = str(tmp_path / "reference")
    expected = run(reference, sources_root, "quickdraw", *FLAGS[1:])
    assert expected["scenarios"]["quickdraw"]["samples"] == CATEGORIES * 10
    reference_shards = shard_files(reference)
    assert reference_shards

    output = str(tmp_path / "killed")
    seen = kill_while_writing(output, sources_root)
    assert seen, "the kill landed while a shard was being written"
    # Nothing under a final name is partial: every such file is a complete Parquet file whose
    # bytes equal the uninterrupted build's (a complete shard is deterministic).
    for path in final_shards(output):
        relative = os.path.relpath(path, output)
        table = pq.read_table(path)
        assert table.num_rows == pq.ParquetFile(path).metadata.num_rows
        with open(path, "rb") as handle:
            assert handle.read() == reference_shards[relative], relative
    # the commit point (the build report) is written only after every shard: until then the
    # folder's report says only that a build started (core.buildfolder), and is refused
    with open(os.path.join(output, "reports", "build.json"), encoding="utf-8") as handle:
        assert json.load(handle) == {"status": "building"}

    rerun = run(output, sources_root, "quickdraw", *FLAGS[1:])
    assert shard_files(output) == reference_shards   # no leftover temporary shard either
    assert rerun["files"] == expected["files"]
    assert not temporary_shards(output)
