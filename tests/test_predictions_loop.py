"""The README's loop, end to end on the miniature sources: build the pool, play several models'
first round (`evaluate --first-round-only`, into one file), rebuild into the same folder with
`--predictions`. And when predictions miss samples: one message naming per scenario how many
samples lack predictions, from which model, a few keys and how to complete them, before any work
when the pool is known (a rebuild into the same folder), from the pool step otherwise, never a
Beam traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict

import datasets
import pytest

from conftest import IN_PROCESS, builds, read_json, run

from proactivebench_builder.core.errors import BuildFailed
from proactivebench_builder.runtime.cli import main as evaluate

RUN_PIPELINE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "run_pipeline.py")
SCENARIOS = "quickdraw,vsod"  # VSOD has weak-occlusion clips: in the pool, never in the test split
MODELS = ("always-abstain", "random:1", "random:2", "first-option")


def first_round(data, results, model, *extra):
    assert evaluate(["evaluate", "--data", data, "--model", model, "--first-round-only",
                     "--results", str(results), *extra]) == 0


@pytest.fixture(scope="module")
@builds
def loop(tmp_path_factory, miniature_root):
    """build -> first round of every model into one file -> rebuild with --predictions."""
    root = tmp_path_factory.mktemp("loop")
    out, predictions = str(root / "proactivebench"), root / "first_round.jsonl"
    run(out, miniature_root, SCENARIOS, "--no_train")
    for model in MODELS:
        first_round(out, predictions, model)
    report = run(out, miniature_root, SCENARIOS, "--no_train", f"--predictions={predictions}")
    return out, predictions, report


def test_the_documented_loop_filters_the_pool(loop):
    out, predictions, report = loop
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    correct = defaultdict(list)
    for row in rows:
        correct[row["config"], row["key"]].append(row["correct"])
    filters = read_json(os.path.join(out, "reports", "filter.json"))["scenarios"]
    for name, config in (("quickdraw", "QuickDraw"), ("vsod", "OcclusionDataSet-MM20")):
        pool = datasets.load_dataset(out, name=config, split="unfiltered")
        # first-round-only played the whole pool, weak VSOD clips included, with every model
        assert {k for c, k in correct if c == config} == set(pool["key"])
        assert all(len(correct[config, k]) == len(MODELS) for k in pool["key"])
        expected = {r["key"] for r in pool if r["strong_occlusions"] is not False
                    and sum(correct[config, r["key"]]) / len(MODELS) < 0.25}
        kept = datasets.load_dataset(out, name=config, split="test")
        assert set(kept["key"]) == expected
        assert filters[name]["models"] == len(MODELS) and "error" not in filters[name]
        assert report["scenarios"][name]["kept"] == len(expected)
    assert 0 < report["scenarios"]["quickdraw"]["kept"] < report["scenarios"]["quickdraw"]["samples"]


def test_an_update_of_one_filtered_scenario_keeps_both_splits(loop, miniature_root, tmp_path):
    """`--scenarios quickdraw --predictions P` into the filtered folder rebuilds QuickDraw's two
    shard sets and keeps VSOD's: each split loads the rows it loaded before."""
    import shutil

    out, predictions, _ = loop
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)

    def splits(folder):
        return {(config, split): sorted(datasets.load_dataset(
                    folder, name=config, split=split, cache_dir=str(tmp_path / "cache"))["key"])
                for config in ("QuickDraw", "OcclusionDataSet-MM20")
                for split in ("test", "unfiltered")}

    before = splits(copy)
    report = run(copy, miniature_root, "quickdraw", "--no_train", f"--predictions={predictions}")
    assert splits(copy) == before and set(report["scenarios"]) == {"quickdraw", "vsod"}
    from proactivebench_builder.pipeline.commands.validate import validate_folder

    assert validate_folder(copy) == []


def test_missing_predictions_are_named_before_any_work(loop, miniature_root, tmp_path):
    """A model played on the filtered test split misses the dropped samples: refused before any
    work, naming the scenario, the count, the model, example keys and the way to complete."""
    out, predictions, _ = loop
    partial = tmp_path / "partial.jsonl"
    partial.write_text(predictions.read_text())
    first_round(out, partial, "random:7", "--split", "test")
    pool = datasets.load_dataset(out, name="QuickDraw", split="unfiltered")
    test = set(datasets.load_dataset(out, name="QuickDraw", split="test")["key"])
    missing = sorted(set(pool["key"]) - test)
    before = os.stat(os.path.join(out, "reports", "build.json")).st_mtime_ns
    with pytest.raises(SystemExit) as raised:
        run(out, miniature_root, SCENARIOS, "--no_train", f"--predictions={partial}")
    message = str(raised.value)
    assert "\n" not in message
    assert (f"QuickDraw: {len(missing)} of {len(pool)} samples lack predictions "
            f"(random:7 lacks {len(missing)}), e.g. {missing[0]}") in message
    assert "evaluate --data" in message and "--first-round-only" in message
    assert "--allow_partial_predictions" in message
    assert os.stat(os.path.join(out, "reports", "build.json")).st_mtime_ns == before
    # completing the model's run (evaluate resumes) makes the same rebuild go through
    first_round(out, partial, "random:7")
    run(out, miniature_root, SCENARIOS, "--no_train", f"--predictions={partial}")
    assert read_json(os.path.join(out, "reports", "filter.json"))[
        "scenarios"]["quickdraw"]["models"] == len(MODELS) + 1


def test_a_scenario_without_predictions_is_refused_before_any_work(loop, miniature_root,
                                                                   tmp_path):
    _, predictions, _ = loop
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit, match="ImageNet-C: no predictions .*--scenarios"):
        run(out, miniature_root, SCENARIOS + ",imagenet_c", f"--predictions={predictions}")
    assert not os.path.exists(out)


def test_in_a_fresh_folder_the_pool_step_names_the_missing_samples(loop, miniature_root,
                                                                   tmp_path):
    """Every model played only the filtered test split: consistent among themselves, so only the
    pool shows what is missing. The build fails with one line (exit 2), no traceback, as a user
    running the command sees it."""
    out, _, _ = loop
    test_only = tmp_path / "test_only.jsonl"
    for model in MODELS[:2]:
        first_round(out, test_only, model, "--split", "test")
    fresh = str(tmp_path / "fresh")
    done = subprocess.run(
        [sys.executable, RUN_PIPELINE, f"--output={fresh}", f"--sources_root={miniature_root}",
         f"--scenarios={SCENARIOS}", "--runner=FnApiRunner", IN_PROCESS, "--no_train",
         f"--predictions={test_only}"], capture_output=True, text=True, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    failure = [line for line in done.stderr.splitlines() if "BUILD FAILED" in line]
    assert len(failure) == 1 and "Traceback" not in done.stderr
    assert "QuickDraw: " in failure[0] and "samples lack predictions" in failure[0]
    assert f"evaluate --data {fresh} --first-round-only" in failure[0]
    # the pool is written, nothing reached the test split
    import pyarrow.parquet as pq

    assert pq.read_table(os.path.join(fresh, "QuickDraw")).num_rows > 0
    # an empty split has no shard: the pool is all filtered_out
    assert all(n.startswith("filtered_out-") for n in os.listdir(os.path.join(fresh, "QuickDraw")))
    with pytest.raises(BuildFailed, match="samples lack predictions"):
        run(fresh + "2", miniature_root, SCENARIOS, "--no_train", f"--predictions={test_only}")


def test_a_rebuild_with_another_seed_is_refused_before_it_replaces_the_build(loop, miniature_root):
    """The folder holds a finished, filtered build at seed 0; the same rebuild with --seed 1
    would make another pool, fail the filter after the work and leave the folder failed: it is
    refused before any work, naming both seeds, and the folder keeps its build."""
    out, predictions, _ = loop
    before = read_json(os.path.join(out, "reports", "build.json"))
    with pytest.raises(SystemExit) as raised:
        run(out, miniature_root, SCENARIOS, "--no_train", f"--predictions={predictions}",
            "--seed=1")
    message = str(raised.value.code)
    assert "seed (0 there, 1 now)" in message and "another --output" in message
    assert "\n" not in message
    assert read_json(os.path.join(out, "reports", "build.json")) == before


def test_a_failed_filter_does_not_promise_a_pool_nothing_reads():
    from proactivebench_builder.pipeline.commands.build import check_filter_errors

    with pytest.raises(BuildFailed) as raised:
        check_filter_errors({"quickdraw": {"error": "QuickDraw: 3 predictions name samples "
                                                    "that are not in the pool"}}, "/x/out")
    message = str(raised.value)
    assert "the unfiltered pool is written" not in message
    assert "/x/out is marked failed" in message and "without the filter" in message
