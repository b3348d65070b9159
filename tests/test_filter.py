"""The leakage filter from stored predictions (the pools its check reads included), the keep-list
(malformed ones refused in one line), and the upstream import."""
from __future__ import annotations

import csv
import json
import os

import datasets
import pytest

from conftest import read_json, read_jsonl, run, shard_files
from test_configure import refused_build

MODELS = ("m1", "m2", "m3", "m4")


def _pool(built_miniature, config):
    return read_jsonl(os.path.join(built_miniature, "upstream", f"{config}_preprocessed.jsonl"))


def _predictions(pool, config, correct_count, models=MODELS, skip=()):
    """One row per model x sample; sample i gets `correct_count(i)` correct models."""
    rows = []
    for i, record in enumerate(pool):
        for m_index, model in enumerate(models):
            if (model, i) in skip:
                continue
            rows.append({"schema_version": 1, "model": model, "config": config,
                         "key": record["key"], "answer_text": "A",
                         "correct": m_index < correct_count(i)})
    return rows


def _write_jsonl(path, rows):
    with open(path, "w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def test_filter_drops_samples_at_or_above_the_threshold(tmp_path, miniature_root, built_miniature):
    pool = _pool(built_miniature, "QuickDraw")
    counts = lambda i: i % 4  # 0/4 kept, 1/4 exactly at 0.25 -> dropped, 2/4 and 3/4 dropped
    preds = _write_jsonl(tmp_path / "p.jsonl", _predictions(pool, "QuickDraw", counts))
    out = str(tmp_path / "out")
    report = run(out, miniature_root, "quickdraw", f"--predictions={preds}")
    kept = datasets.load_dataset(out, name="QuickDraw", split="test")
    expected = {r["key"] for i, r in enumerate(pool) if counts(i) == 0}
    assert set(kept["key"]) == expected
    assert report["scenarios"]["quickdraw"]["kept"] == len(expected)
    assert len(datasets.load_dataset(out, name="QuickDraw", split="unfiltered")) == len(pool)
    # the pool is written once, as two disjoint sets of shards; no export was asked for
    rows = {}
    for f in read_json(os.path.join(out, "reports", "build.json"))["files"]:
        if f["config"] == "QuickDraw":
            rows[f["split"]] = rows.get(f["split"], 0) + f["rows"]
    assert rows == {"test": len(expected), "filtered_out": len(pool) - len(expected)}
    assert not os.path.exists(os.path.join(out, "upstream"))
    stats = read_json(os.path.join(out, "reports", "filter.json"))["scenarios"]["quickdraw"]
    assert stats["before"] == len(pool) and stats["after"] == len(expected)
    assert stats["first_round_accuracy_after"] == 0.0
    assert stats["first_round_accuracy_before"] == pytest.approx(
        sum(counts(i) / 4 for i in range(len(pool))) / len(pool), abs=1e-6)
    assert stats["per_model_accuracy"]["m4"] == 0.0
    from PIL import Image

    for plot in ("filter_before_after.png", "first_round_correct_fractions.png"):
        with Image.open(os.path.join(out, "reports", "plots", plot)) as image:
            image.load()
            assert image.size[0] > 100


def test_ids_are_the_same_before_and_after_filtering(tmp_path, miniature_root, built_miniature):
    pool = _pool(built_miniature, "QuickDraw")
    preds = _write_jsonl(tmp_path / "p.jsonl", _predictions(pool, "QuickDraw", lambda i: i % 2))
    out = str(tmp_path / "out")
    run(out, miniature_root, "quickdraw", f"--predictions={preds}")
    by_key = {r["key"]: r["id"] for r in pool}
    for row in datasets.load_dataset(out, name="QuickDraw", split="test"):
        assert by_key[row["key"]] == row["id"]


def test_csv_and_ids_and_threshold_settings(tmp_path, miniature_root, built_miniature):
    pool = _pool(built_miniature, "ImageNet-C")
    path = tmp_path / "p.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["model", "config", "id", "correct"])
        writer.writeheader()
        for i, record in enumerate(pool):
            for m in range(4):
                writer.writerow({"model": f"m{m}", "config": "ImageNet-C", "id": record["id"],
                                 "correct": "true" if m < i % 3 else "false"})
    out = str(tmp_path / "out")
    run(out, miniature_root, "imagenet_c", f"--predictions={path}", "--filter_threshold=0.5")
    kept = set(datasets.load_dataset(out, name="ImageNet-C", split="test")["id"])
    assert kept == {r["id"] for i, r in enumerate(pool) if i % 3 < 2}


def test_partial_models_are_refused_unless_allowed(tmp_path, miniature_root, built_miniature):
    pool = _pool(built_miniature, "QuickDraw")
    skip = {("m4", 0), ("m4", 1), ("m3", 1)}
    rows = _predictions(pool, "QuickDraw", lambda i: 1 if i < 2 else 0, skip=skip)
    preds = _write_jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(SystemExit, match=r"lack predictions \(m3 lacks 1, m4 lacks 2\)"):
        run(str(tmp_path / "refused"), miniature_root, "quickdraw", f"--predictions={preds}")
    out = str(tmp_path / "out")
    run(out, miniature_root, "quickdraw", f"--predictions={preds}",
        "--allow_partial_predictions", "--min_models=3")
    kept = set(datasets.load_dataset(out, name="QuickDraw", split="test")["key"])
    # sample 0: 1 of 3 models correct (0.33) -> dropped; sample 1: 2 models only -> unjudged, kept
    assert pool[0]["key"] not in kept and pool[1]["key"] in kept
    stats = read_json(os.path.join(out, "reports", "filter.json"))["scenarios"]["quickdraw"]
    assert stats["unjudged"] == 1


@pytest.mark.parametrize("content, message", [
    ("", "empty"),
    ('{"model": "m", "config": "QuickDraw", "key": "k", "correct": true}\n' * 2, "duplicate"),
    ('{"model": "m", "config": "QuickDraw", "correct": true}\n', "names no sample"),
    ('{"model": "m", "key": "k", "correct": true}\n', "missing"),
    ('{"model": "m", "config": "QuickDraw", "key": "k", "correct": "maybe"}\n', "not a boolean"),
    ('not json\n', "not a JSON line"),
])
def test_bad_predictions_files_stop_before_any_work(tmp_path, miniature_root, content, message):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(SystemExit, match=message):
        run(str(tmp_path / "out"), miniature_root, "quickdraw", f"--predictions={path}")


def test_predictions_naming_unknown_samples_fail(tmp_path, miniature_root, built_miniature):
    pool = _pool(built_miniature, "QuickDraw")
    rows = _predictions(pool, "QuickDraw", lambda i: 0)
    rows += [dict(r, key="QuickDraw/cat/123") for r in rows if r["key"] == pool[0]["key"]]
    preds = _write_jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(Exception, match="not in the pool"):
        run(str(tmp_path / "out"), miniature_root, "quickdraw", f"--predictions={preds}")


def test_same_kept_set_on_multi_processing(tmp_path, miniature_root, built_miniature):
    pool = _pool(built_miniature, "QuickDraw")
    preds = _write_jsonl(tmp_path / "p.jsonl", _predictions(pool, "QuickDraw", lambda i: i % 3))
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run(a, miniature_root, "quickdraw", f"--predictions={preds}")
    run(b, miniature_root, "quickdraw", f"--predictions={preds}", "--direct_num_workers=2",
        "--direct_running_mode=multi_processing")
    assert shard_files(a) == shard_files(b)


def test_keep_list_is_refused_on_a_fresh_pool(tmp_path, miniature_root):
    with pytest.raises(SystemExit, match="only an imported upstream release"):
        run(str(tmp_path / "out"), miniature_root, "quickdraw", "--keep_list=released")


def test_export_import_round_trip_and_keep_list(tmp_path, built_miniature):
    imported = str(tmp_path / "imported")
    run(imported, "/unused", "quickdraw,imagenet_c",
        f"--import_upstream={os.path.join(built_miniature, 'upstream')}")
    original = shard_files(built_miniature)
    for name, data in shard_files(imported).items():
        if name.startswith(("QuickDraw/", "ImageNet-C/")):
            assert original[name] == data, f"{name} differs after export -> import"
    keep = tmp_path / "keep.json"
    keep.write_text(json.dumps({"QuickDraw": [0, 3, 5, 100000]}))
    out = str(tmp_path / "kept")
    run(out, "/unused", "quickdraw", f"--import_upstream={os.path.join(built_miniature, 'upstream')}",
        f"--keep_list={keep}")
    assert sorted(datasets.load_dataset(out, name="QuickDraw", split="test")["id"]) == [0, 3, 5]
    stats = read_json(os.path.join(out, "reports", "filter.json"))["scenarios"]["quickdraw"]
    assert stats["missing_ids"] == [100000]


def test_released_keep_list_on_an_imported_pool(tmp_path, built_miniature):
    """The published keep-list names the release's samples: a pool that is not the release
    (here our miniature export) keeps another count and is refused before any work, naming the
    config and both numbers (tests/test_regenerate.py plays the real route)."""
    from proactivebench_builder.filters.leakage import load_keep_list

    released = load_keep_list("released")
    assert {c: len(v) for c, v in released.items()} == {
        "Realistic-Occlusion-Dataset": 88, "OcclusionDataSet-MM20": 42, "MVP-N": 2591,
        "ImageNet-C": 1095, "QuickDraw": 2105, "ChangeIt": 396, "coco2014": 1240}
    pool_ids = {r["id"] for r in _pool(built_miniature, "QuickDraw")}
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit, match=f"QuickDraw: its records keep "
                                         f"{len(pool_ids & released['QuickDraw'])} samples "
                                         "where the release keeps 2,105"):
        run(out, "/unused", "quickdraw",
            f"--import_upstream={os.path.join(built_miniature, 'upstream')}",
            "--keep_list=released")
    assert not os.path.exists(out)


def test_runtime_first_round_predictions_feed_the_filter(tmp_path, miniature_root, built_miniature):
    """Run models -> store first-round predictions -> filter, as one loop."""
    from proactivebench_builder.runtime.cli import main as evaluate

    files = []
    for model in ("random:1", "random:2", "random:3", "first-option"):
        path = tmp_path / f"{model.replace(':', '_')}.jsonl"
        assert evaluate(["evaluate", "--data", built_miniature, "--model", model,
                         "--scenarios", "quickdraw", "--split", "unfiltered",
                         "--first-round-only", "--results", str(path)]) == 0
        files.append(path.read_text())
    merged = tmp_path / "predictions.jsonl"
    merged.write_text("".join(files))
    rows = [json.loads(line) for line in merged.read_text().splitlines()]
    out = str(tmp_path / "out")
    run(out, miniature_root, "quickdraw", f"--predictions={merged}", "--no_train")
    kept = set(datasets.load_dataset(out, name="QuickDraw", split="test")["key"])
    correct = {}
    for row in rows:
        correct.setdefault(row["key"], []).append(bool(row["correct"]))
    expected = {k for k, votes in correct.items() if sum(votes) / len(votes) < 0.25}
    assert kept == expected and len(correct) == 60


def _upstream(tmp_path) -> str:
    folder = tmp_path / "upstream"
    folder.mkdir()
    (folder / "QuickDraw_preprocessed.jsonl").write_text("{}\n")
    return str(folder)


@pytest.mark.parametrize("content, says", [
    ("[1, 2]", "mapping"),
    ('{"QuickDraw": [null]}', "None"),
    ('{"QuickDraw": [1e400]}', "inf"),
    ('{"QuickDraw": [0.9, 1]}', "0.9"),
    ('{"QuickDraw": [true]}', "True"),
    ('{"QuickDraw": ["3"]}', "'3'"),
    ('{"QuickDraw": [-1]}', "-1"),
    ('{"QuickDraw": 3}', "QuickDraw"),
    ('{"kept_ids": [1]}', "mapping"),
    ("[" * 100000 + "]" * 100000, "JSON"),
    ("not json", "JSON"),
    ('{"Quickdraw": [0, 1], "QuickDraw": [1]}', "did you mean 'QuickDraw'"),
    ('{"ImageNet-C": [0, 1]}', "QuickDraw"),   # the imported config is absent: all dropped
])
def test_a_malformed_keep_list_is_one_line_naming_it(capsys, tmp_path, content, says):
    path = tmp_path / "keep.json"
    path.write_text(content)
    line = refused_build(capsys, tmp_path, f"--import_upstream={_upstream(tmp_path)}",
                         f"--keep_list={path}")
    assert "keep.json" in line and says in line, line


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_keep_list_that_is_not_a_regular_file_is_refused(capsys, tmp_path, kind):
    path = tmp_path / "keep.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    line = refused_build(capsys, tmp_path, f"--import_upstream={_upstream(tmp_path)}",
                         f"--keep_list={path}")
    assert str(path) in line, line


def test_a_keep_list_may_leave_a_config_empty_on_purpose(tmp_path):
    from proactivebench_builder.filters.leakage import load_keep_list

    path = tmp_path / "keep.json"
    path.write_text('{"QuickDraw": [], "MVP-N": [3, 1]}')
    assert load_keep_list(str(path)) == {"QuickDraw": set(), "MVP-N": {1, 3}}


@pytest.mark.parametrize("report", ['[1]', "[" * 50000 + "]" * 50000, '{"stamp": [1]}',
                                    '{"stamp": {"code_version": "x"}, "files": [1, {"path": 2}]}',
                                    '{"stamp": {"code_version": "x"}, "sources": [], '
                                    '"scenarios": {"quickdraw": 3}}'])
def test_an_odd_previous_report_is_no_pool_for_the_predictions_check(tmp_path, report):
    """The driver's coverage check reads the output folder's previous build.json as a shortcut;
    a list there or deep nesting was an AttributeError or RecursionError traceback."""
    from proactivebench_builder.core.config import BuildConfig
    from proactivebench_builder.filters.coverage import previous_pools

    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "build.json").write_text(report)
    config = BuildConfig(seed=0, output=str(tmp_path), scenarios=("quickdraw",), sources={},
                         config_to_scenario={}, stamp={"code_version": "x", "seed": None,
                                                       "origin": None, "manifests": {},
                                                       "parameter_overrides": {}})
    assert previous_pools(config) == {}
