"""Building some scenarios into a folder that holds a complete build: an update that rebuilds
them and keeps the others (shards, checksums, dead letters, filter statistics), with a card and
reports covering all of them and a folder that validates; refused before any work, with one line
naming the way out, when it would not be sound (other seed, filter, upstream export, train split);
damaged previous reports end the update in one line, never a hang or a traceback."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import IN_PROCESS, RUN_PIPELINE, build, builds, copy_sources, read_json, run

from proactivebench_builder.pipeline.commands.validate import validate_folder
from proactivebench_builder.transforms import load_scenarios

ALL = tuple(sorted(load_scenarios()))  # what the shared full build holds (conftest's extra too)
EXPORT = "--upstream_export"  # the shared build has the export: an update keeps it


def digests(folder: str) -> dict[str, str]:
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
    return found


def card_configs(folder: str) -> list[str]:
    with open(os.path.join(folder, "README.md"), encoding="utf-8") as handle:
        front = handle.read().split("---\n")[1]
    return sorted(c["config_name"] for c in yaml.safe_load(front)["configs"])


@pytest.fixture
def full(built_miniature, tmp_path) -> str:
    """A private copy of the shared full build (every scenario, with the train split)."""
    copy = str(tmp_path / "proactivebench")
    shutil.copytree(built_miniature, copy)
    return copy


def test_rebuilding_one_scenario_updates_it_and_keeps_the_others(full, miniature_root):
    before, report_before = digests(full), read_json(os.path.join(full, "reports", "build.json"))
    dead_before = open(os.path.join(full, "reports", "dead_letters.jsonl")).read()
    run(full, miniature_root, "quickdraw", EXPORT, "--set", "quickdraw.samples_per_class=5")
    after, report = digests(full), read_json(os.path.join(full, "reports", "build.json"))
    assert validate_folder(full) == []
    assert card_configs(full) == sorted(["default"] + [report["scenarios"][n]["config"]
                                                       for n in ALL])
    assert sorted(report["scenarios"]) == list(ALL)
    # QuickDraw changed (5 drawings per class instead of 10); the others are kept byte for byte,
    # and so are their entries in build.json (shard checksums included)
    assert report["scenarios"]["quickdraw"]["samples"] < report_before["scenarios"]["quickdraw"][
        "samples"]
    for name in ALL:
        if name == "quickdraw":
            continue
        config = report["scenarios"][name]["config"]
        assert report["scenarios"][name] == report_before["scenarios"][name]
        kept = [f for f in report_before["files"] if f["config"] == config]
        assert kept and all(f in report["files"] for f in kept)
        for path in (p for p in before if p.startswith(config + "/")):
            assert after[path] == before[path], path
    assert any(after[p] != before[p] for p in before if p.startswith("QuickDraw/"))
    # the train split, shared with COCO, was rebuilt whole: COCO's examples are still there
    assert set(report["train"]["mix"]) == {"QuickDraw", "coco2014"}
    assert report["stamp"]["parameter_overrides"] == {"quickdraw": {"samples_per_class": 5}}
    assert set(report["stamp"]["updated_by"]) == {"quickdraw"}
    # dead letters of the kept scenarios are kept
    kept_dead = [l for l in dead_before.splitlines() if not json.loads(l)["scenario"].startswith(
        "quickdraw")]
    now = open(os.path.join(full, "reports", "dead_letters.jsonl")).read().splitlines()
    assert all(line in now for line in kept_dead)


def test_the_same_update_twice_changes_nothing_but_the_stamp(full, miniature_root):
    run(full, miniature_root, "changeit", EXPORT, "--no_train")
    first = digests(full)
    run(full, miniature_root, "changeit", EXPORT, "--no_train")
    assert digests(full) == first
    assert validate_folder(full) == []


@pytest.mark.parametrize("flags, named", [
    (("--seed=1", EXPORT), "seed (0 there, 1 now)"),
    ((), "the upstream export (made there, not asked for now: add --upstream_export)"),
    (("--no_train", EXPORT), "train split holds examples of quickdraw"),
])
def test_an_unsound_update_is_refused_before_any_work(full, miniature_root, flags, named):
    before = digests(full)
    with pytest.raises(SystemExit) as refused:
        run(full, miniature_root, "quickdraw", *flags)
    message = str(refused.value)
    assert named in message and "\n" not in message
    assert "leave out --scenarios" in message and "another --output" in message
    assert digests(full) == before


def test_a_filter_that_differs_is_refused_before_any_work(full, miniature_root, tmp_path):
    pool = os.path.join(full, "upstream", "ChangeIt_preprocessed.jsonl")
    predictions = tmp_path / "p.jsonl"
    with open(pool) as handle, open(predictions, "w") as out:
        for line in handle:
            out.write(json.dumps({"model": "m", "config": "ChangeIt", "key": json.loads(line)["key"],
                                  "correct": False}) + "\n")
    before = digests(full)
    with pytest.raises(SystemExit, match="filter mode \\('none' there, 'predictions' now\\)"):
        run(full, miniature_root, "changeit", EXPORT, f"--predictions={predictions}")
    assert digests(full) == before


def test_shards_without_a_build_report_are_refused(full, miniature_root):
    os.remove(os.path.join(full, "reports", "build.json"))
    with pytest.raises(SystemExit, match="ChangeIt.* no reports/build.json"):
        run(full, miniature_root, "quickdraw", EXPORT)


def test_a_kept_shard_that_changed_is_refused(full, miniature_root):
    shard = os.path.join(full, "ChangeIt", "test-00000-of-00001.parquet")
    os.remove(shard)
    with open(shard, "wb") as handle:
        handle.write(b"not the shard")
    with pytest.raises(SystemExit, match="ChangeIt/test-00000-of-00001.parquet, kept from its "
                                         "build, is missing or changed"):
        run(full, miniature_root, "quickdraw", EXPORT)


def test_a_folder_marked_failed_is_not_updated(full, miniature_root):
    path = os.path.join(full, "reports", "build.json")
    report = read_json(path)
    report["status"] = "failed"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    with pytest.raises(SystemExit, match="holds a failed build; rebuild every scenario"):
        run(full, miniature_root, "quickdraw", EXPORT)


def test_a_build_killed_after_its_reports_is_not_updated(full, miniature_root):
    """Its reports are written ("building", with every scenario) but its final checks never
    ran: nothing says its shards can be kept."""
    path = os.path.join(full, "reports", "build.json")
    report = read_json(path)
    report["status"] = "building"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    with pytest.raises(SystemExit, match="holds a build that did not finish "
                                         r"\(status 'building'\); rebuild every scenario"):
        run(full, miniature_root, "quickdraw", EXPORT)


@pytest.mark.parametrize("report, file, named", [
    (b"[1]", "build.json", "not a build report (a JSON list, not an object)"),
    (b"[" * 100_000 + b"]" * 100_000, "build.json", "nested too deeply"),
    (b'{"status": "ok", "scenarios": {"quickdraw": 3}}', "build.json", "of another shape"),
    (b"[1]", "filter.json", "filter.json that is not a JSON object"),
    (b"{\"scenarios\": ", "filter.json", "unreadable reports/filter.json"),
])
def test_a_report_of_the_previous_build_that_cannot_be_read_refuses_the_update(
        full, miniature_root, report, file, named):
    """A damaged or hand-made report in the folder: one line before any work (was an
    AttributeError traceback for a report that is a JSON list)."""
    with open(os.path.join(full, "reports", file), "wb") as handle:
        handle.write(report)
    before = digests(full)
    with pytest.raises(SystemExit) as refused:
        run(full, miniature_root, "quickdraw", EXPORT)
    message = str(refused.value)
    assert named in message and "\n" not in message and "another --output" in message, message
    assert digests(full) == before


@pytest.fixture(scope="module")
@builds
def two_scenario_build(tmp_path_factory, miniature_root):
    """A complete build of QuickDraw and ImageNet-C (no train split), for updates to copy."""
    tmp_path = tmp_path_factory.mktemp("two_scenarios")
    sources = copy_sources(miniature_root, tmp_path, "quickdraw", "ImageNet-C")
    result, output = build(tmp_path, sources, "quickdraw,imagenet_c")
    assert result.returncode == 0, result.stderr[-3000:]
    return sources, output


def _damage_fifo(path: str) -> None:
    os.remove(path)
    os.mkfifo(path)


def _damage_lines(path: str) -> None:
    with open(path, "ab") as handle:
        handle.write(b"not json\n" + b"[" * 100000 + b"\n\xff\xfe\n")


def _damage_filter_report(path: str) -> None:
    with open(os.path.join(os.path.dirname(path), "filter.json"), "wb") as handle:
        handle.write(b"[1]")


@pytest.mark.parametrize("damage", [
    _damage_fifo,
    _damage_filter_report,
    _damage_lines,
], ids=["fifo", "filter-json", "lines"])
def test_an_update_over_damaged_previous_reports_is_one_line_or_rebuilt(
        two_scenario_build, tmp_path, damage):
    """An update (rebuilding QuickDraw only) reads the folder's previous filter.json and merges
    its dead_letters.jsonl, which build.json's digests do not cover: a FIFO, a report of another
    shape or lines that are not JSON end the update in one line (or are left out), never a hang
    or a traceback."""
    sources, full = two_scenario_build
    output = str(tmp_path / "out")
    shutil.copytree(full, output)
    damage(os.path.join(output, "reports", "dead_letters.jsonl"))
    try:
        result = subprocess.run(
            [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", IN_PROCESS, "--no_progress",
             "--no_train", "--max_bad_fraction=0.9", "--scenarios=quickdraw",
             f"--sources_root={sources}", f"--output={output}", "--set",
             "quickdraw.samples_per_class=5"],
            capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    except subprocess.TimeoutExpired:
        pytest.fail("the update blocked")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if "FAILED" in line or "error" in line]
        named = "filter.json" if damage is _damage_filter_report else "dead_letters.jsonl"
        assert lines and named in lines[-1], result.stderr[-3000:]
