"""The build on Beam's DaskRunner, against a real Dask cluster of two worker processes.

A `distributed.LocalCluster` on the loopback interface stands in for a remote cluster: the
build connects to it by address (`--dask_client_address tcp://...`), as it would to any
scheduler, and its workers import the installed package. The output must be byte-identical to
the FnApiRunner build of the same sources (only the recorded command line differs), and a
leakage-filtered build must keep the same samples. The cluster is closed whatever happens; a
scheduler that cannot be reached is one line naming it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import RUN_PIPELINE, copy_sources, read_jsonl, run

distributed = pytest.importorskip("distributed")

from proactivebench_builder.pipeline.commands.build import run_build

# Files whose text records the command line, which names the runner; compared without it.
STAMPED = {"README.md", os.path.join("reports", "build.json")}


@pytest.fixture(scope="module")
def dask_address():
    """A two-process Dask cluster on 127.0.0.1, closed at the end even if a test fails."""
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                       host="127.0.0.1", dashboard_address="127.0.0.1:0")
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture
def dask_client(dask_address):
    """A client of our own, to watch which workers ran the tasks."""
    client = distributed.Client(dask_address)
    try:
        yield client
    finally:
        client.close()


def build_on_dask(address: str, output: str, sources_root: str, *extra: str) -> dict:
    return run_build([f"--output={output}", f"--sources_root={sources_root}",
                      "--runner=DaskRunner", f"--dask_client_address={address}", *extra])


def all_files(root: str) -> dict[str, bytes]:
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def without_command(name: str, data: bytes) -> object:
    """A stamped file with its command line taken out."""
    if name.endswith(".json"):
        report = json.loads(data)
        report["stamp"].pop("command")
        return report
    # The card folds the command over lines that start with "command:" or an indent after it.
    lines, skipping = [], False
    for line in data.decode("utf-8").splitlines():
        if line.startswith("command:"):
            skipping = True
            continue
        if skipping and line.startswith("  ") and not line.strip().endswith(":"):
            continue
        skipping = False
        lines.append(line)
    return lines


def assert_same_output(expected_dir: str, actual_dir: str) -> None:
    expected, actual = all_files(expected_dir), all_files(actual_dir)
    assert sorted(expected) == sorted(actual)
    assert any(n.endswith(".parquet") for n in expected)
    assert any(n.startswith("upstream" + os.sep) for n in expected)
    for name in sorted(expected):
        if name in STAMPED:
            assert without_command(name, expected[name]) == without_command(name, actual[name]), \
                name
        else:
            assert expected[name] == actual[name], f"{name} differs between runners"


def test_dask_build_is_byte_identical_to_the_fnapi_build(tmp_path, miniature_root,
                                                         built_miniature, dask_address,
                                                         dask_client):
    output = str(tmp_path / "dask")
    with distributed.get_task_stream(dask_client) as tasks:
        report = build_on_dask(dask_address, output, miniature_root, "--upstream_export")
    assert all(s["accounted"] for s in report["scenarios"].values())
    assert report["train"]["rows"] > 0  # the train split (default settings) is part of it
    assert_same_output(built_miniature, output)
    with open(os.path.join(output, "reports", "dead_letters.jsonl"), "rb") as handle:
        dask_dead = handle.read()
    with open(os.path.join(built_miniature, "reports", "dead_letters.jsonl"), "rb") as handle:
        assert dask_dead == handle.read()
    # The work really was spread: both worker processes ran Beam bundles.
    workers = {t["worker"] for t in tasks.data if "apply_dofn_to_bundle" in str(t["key"])}
    assert len(workers) == 2, workers


def quickdraw_predictions(built_miniature: str, path) -> tuple[str, set[str]]:
    """Four models; sample i is answered correctly by i % 4 of them, so only every fourth
    sample (no correct model) stays under the 0.25 threshold."""
    pool = read_jsonl(os.path.join(built_miniature, "upstream", "QuickDraw_preprocessed.jsonl"))
    rows = [{"schema_version": 1, "model": f"m{m}", "config": "QuickDraw", "key": r["key"],
             "answer_text": "A", "correct": m < i % 4}
            for i, r in enumerate(pool) for m in range(4)]
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path), {r["key"] for i, r in enumerate(pool) if i % 4 == 0}


def test_leakage_filter_on_dask_keeps_the_same_samples(tmp_path, miniature_root, built_miniature,
                                                       dask_address):
    predictions, expected = quickdraw_predictions(built_miniature, tmp_path / "p.jsonl")
    flags = (f"--predictions={predictions}", "--no_train", "--upstream_export")
    on_dask, on_fnapi = str(tmp_path / "dask"), str(tmp_path / "fnapi")
    report = build_on_dask(dask_address, on_dask, miniature_root, "--scenarios=quickdraw", *flags)
    run(on_fnapi, miniature_root, "quickdraw", *flags)
    kept = {k for name in os.listdir(os.path.join(on_dask, "QuickDraw")) if name.startswith("test-")
            for k in pq.read_table(os.path.join(on_dask, "QuickDraw", name)).column("key").to_pylist()}
    assert kept == expected
    assert report["scenarios"]["quickdraw"]["kept"] == len(expected) < \
        report["scenarios"]["quickdraw"]["samples"]
    assert_same_output(on_fnapi, on_dask)


def test_an_unreachable_dask_scheduler_is_one_line(tmp_path, miniature_root):
    pytest.importorskip("distributed")
    sources = copy_sources(miniature_root, tmp_path, "quickdraw")
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:9",
         "--no_progress", "--scenarios=quickdraw", f"--sources_root={sources}",
         f"--output={tmp_path / 'out'}"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "127.0.0.1:9" in result.stderr.strip().splitlines()[-1]
