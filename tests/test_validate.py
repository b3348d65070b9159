"""`run_pipeline.py validate`: a clean build passes, and each violation the validator claims to
catch is caught when a copy of a built folder is broken that way (a shard rewritten with
pyarrow with one field changed or swapped for a valid other one, a report removed, a card
edited)."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import file_text, read_json
from test_buildfolder import (assert_one_clear_line, built, resign,  # noqa: F401 - a fixture
                              rewrite_shards, run_validate)
from proactivebench_builder.core import buildfolder
from proactivebench_builder.pipeline.commands import main as build
from proactivebench_builder.core.records import arrow_schema
from proactivebench_builder.pipeline.commands.validate import main, validate_folder
from proactivebench_builder.pipeline.commands.validate import main as validate_main


@pytest.fixture
def broken(built_miniature, tmp_path) -> str:
    """A private copy of the built folder (without the upstream export, not validated)."""
    copy = str(tmp_path / "built")
    shutil.copytree(built_miniature, copy, ignore=shutil.ignore_patterns("upstream"))
    return copy


def first_shard(root: str, config: str, shard_set: str = "test") -> str:
    """The first shard of one of a config's sets (the pool's `test` or `filtered_out` rows)."""
    shards = sorted(glob.glob(os.path.join(root, config, f"{shard_set}-*.parquet")))
    if not shards:
        pytest.skip(f"no {shard_set} shard for {config} in this build")
    return shards[0]


def rewrite(path: str, change, schema: pa.Schema | None = None) -> None:
    """Read a shard, let `change(rows)` edit the row dicts, write it back."""
    rows = pq.read_table(path).to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema or arrow_schema()), path)


def problems_after(root: str, config: str, change, shard_set: str = "test") -> list[str]:
    rewrite(first_shard(root, config, shard_set), change)
    return validate_folder(root)


def assert_reported(problems: list[str], *fragments: str) -> None:
    assert any(all(f in p for f in fragments) for p in problems), (fragments, problems)


def test_clean_build_has_no_problems(built_miniature):
    assert validate_folder(built_miniature) == []


def test_main_exit_codes(built_miniature, broken, capsys):
    assert main([built_miniature]) == 0
    os.remove(os.path.join(broken, "reports", "build.json"))
    assert main([broken]) == 1
    assert "build.json: missing" in capsys.readouterr().out


def set_first(field, value):
    def change(rows):
        rows[0][field] = value
    return change


ROW_VIOLATIONS = {
    "answer not in categories": ("QuickDraw", set_first("answer", "Nope."), "not in categories"),
    "three categories": ("QuickDraw", lambda r: r[0].update(categories=r[0]["categories"][:3]),
                         "3 categories, expected 4"),
    "repeated category": ("QuickDraw",
                          lambda r: r[0].update(categories=[r[0]["answer"]] * 4),
                          "categories repeat"),
    "no options": ("QuickDraw", set_first("options", []), "no options"),
    "empty option": ("QuickDraw", lambda r: r[0].update(options=r[0]["options"] + [" "]),
                     "an empty option"),
    "two abstain options": ("QuickDraw",
                            lambda r: r[0].update(options=["I cannot tell.", "I do not know."]),
                            "abstain options, expected 1"),
    "option without an action": ("QuickDraw",
                                 lambda r: r[0].update(options=["I cannot tell.", "Try harder."]),
                                 "need exactly one"),
    "first frame missing": ("QuickDraw", set_first("first_image", 999), "first_image=999"),
    "reference frame missing": ("ImageNet-C", set_first("reference_image", 0),
                                "reference_image=0"),
    "frame does not decode": ("QuickDraw",
                              lambda r: r[0]["frames"][0].update(bytes=b"\x89PNG broken"),
                              "undecodable image"),
    "frame missing": ("QuickDraw", lambda r: r[0].update(frames=r[0]["frames"][:-1]),
                      "frame_ids but"),
    "QuickDraw cap": ("QuickDraw", lambda r: r[0].update(num_images=r[0]["num_images"] + 1),
                      "num_images="),
    "ROD frame missing": ("Realistic-Occlusion-Dataset",
                          lambda r: r[0].update(num_images=r[0]["num_images"] + 1),
                          "num_images="),
    "MVP-N cap": ("MVP-N", lambda r: r[0].update(num_images=r[0]["num_images"] + 1),
                  "valid_images: the last turns have no view"),
    "MVP-N chain": ("MVP-N", lambda r: r[0].update(valid_images=r[0]["valid_images"][::-1]),
                    "shown both as uninformative and as informative"),
    "ImageNet-C levels": ("ImageNet-C", lambda r: r[0].update(num_images=4),
                          "the number of levels=5"),
    "ImageNet-C quality answer": ("ImageNet-C", set_first("quality_answer", "Add contrast."),
                                  "quality_answer"),
    "ChangeIt cap beyond frames": ("ChangeIt",
                                   lambda r: r[0].update(max_steps=r[0]["max_steps"] + 2,
                                                         num_images=10 ** 4),
                                   "reachable within the step cap"),
    "ChangeIt no step": ("ChangeIt", set_first("step_size", None), "need positive values"),
    "COCO two frames": ("coco2014",
                        lambda r: r[0].update(frame_ids=r[0]["frame_ids"] * 2),
                        "expected one frame"),
    "COCO bad direction": ("coco2014", set_first("direction", "sideways"), "direction"),
}


@pytest.mark.parametrize("name", sorted(ROW_VIOLATIONS))
def test_row_violation_is_reported(broken, name):
    config, change, fragment = ROW_VIOLATIONS[name]
    assert_reported(problems_after(broken, config, change), config, fragment)


def test_duplicate_id_is_reported(broken):
    def change(rows):
        rows[1]["id"] = rows[0]["id"]
    assert_reported(problems_after(broken, "QuickDraw", change), "appears twice", "id ")


def test_duplicate_key_is_reported(broken):
    def change(rows):
        rows[1]["key"] = rows[0]["key"]
    assert_reported(problems_after(broken, "QuickDraw", change), "appears twice", "key ")


def test_a_row_in_both_sets_of_the_pool_is_reported(broken):
    """The `test` and `filtered_out` sets are disjoint parts of one pool: a kept row written
    among the rows left out too is a key (and an id) twice in the pool."""
    config = "OcclusionDataSet-MM20"  # its weak occlusions are left out of the test split
    kept = pq.read_table(first_shard(broken, config)).to_pylist()[0]
    assert_reported(problems_after(broken, config, lambda rows: rows.append(kept),
                                   shard_set="filtered_out"),
                    "appears twice in the OcclusionDataSet-MM20 pool", "key ")


def test_changed_column_type_is_reported(broken):
    path = first_shard(broken, "QuickDraw")
    schema = arrow_schema()
    narrowed = schema.set(schema.get_field_index("num_images"), pa.field("num_images", pa.int32()))
    rewrite(path, lambda rows: None, narrowed)
    assert_reported(validate_folder(broken), "column 'num_images' is int32")


def test_missing_column_is_reported(broken):
    path = first_shard(broken, "QuickDraw")
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["answer"]), path)
    assert_reported(validate_folder(broken), "missing columns ['answer']")


def test_missing_feature_metadata_is_reported(broken):
    path = first_shard(broken, "QuickDraw")
    rewrite(path, lambda rows: None, arrow_schema().remove_metadata())
    assert_reported(validate_folder(broken), "huggingface")


def test_missing_build_report_is_reported(broken):
    os.remove(os.path.join(broken, "reports", "build.json"))
    assert_reported(validate_folder(broken), "build.json: missing")


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def edit_build_report(root: str, edit) -> None:
    path = os.path.join(root, "reports", "build.json")
    report = read_json(path)
    edit(report)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)


def test_unaccounted_scenario_is_reported(broken):
    edit_build_report(broken, lambda r: r["scenarios"]["quickdraw"].update(accounted=False))
    assert_reported(validate_folder(broken), "quickdraw", "dead letters")


def test_built_train_split_is_accounted_for(built_miniature):
    train = read_json(os.path.join(built_miniature, "reports", "build.json"))["train"]
    assert train["scenarios"] and all(e["accounted"] for e in train["scenarios"].values())
    assert train["rows"] == train["examples"] == sum(
        e["examples"] for e in train["scenarios"].values())


def test_unaccounted_train_scenario_is_reported(broken):
    def lose_an_example(report):
        entry = report["train"]["scenarios"]["quickdraw"]
        entry["examples"] -= 1  # the stored flag still says accounted: the numbers are checked
        report["train"]["examples"] -= 1

    edit_build_report(broken, lose_an_example)
    assert_reported(validate_folder(broken), "train split: quickdraw", "examples")
    assert_reported(validate_folder(broken), "rows written for")


def test_report_row_count_mismatch_is_reported(broken):
    rewrite(first_shard(broken, "QuickDraw"), lambda rows: rows.pop())
    assert_reported(validate_folder(broken), "test rows reported")


def test_card_without_a_config_folder_is_reported(broken):
    card = os.path.join(broken, "README.md")
    text = file_text(card)
    write_text(card, text.replace("config_name: QuickDraw", "config_name: SomethingElse"))
    problems = validate_folder(broken)
    assert_reported(problems, "config folder 'QuickDraw' is not in the card")
    assert_reported(problems, "card config 'SomethingElse' has no shard folder")


def test_card_glob_without_shards_is_reported(broken):
    card = os.path.join(broken, "README.md")
    text = file_text(card)
    write_text(card, text.replace("path: QuickDraw/test-*.parquet",
                                  "path: QuickDraw/train-*.parquet"))
    assert_reported(validate_folder(broken), "no shard matches 'QuickDraw/train-*.parquet'")


def test_leftover_shard_is_reported(broken):
    path = first_shard(broken, "QuickDraw")
    shutil.copy(path, os.path.join(os.path.dirname(path), "test-00001-of-00003.parquet"))
    problems = validate_folder(broken)
    assert_reported(problems, "shards disagree on the shard count")
    assert_reported(problems, "appears twice")


def train_shard(root: str) -> str:
    shards = sorted(glob.glob(os.path.join(root, "data", "train-*.parquet")))
    if not shards:
        pytest.skip("this build has no train split")
    return shards[0]


def test_train_ground_truth_outside_options_is_reported(broken):
    from proactivebench_builder.core.records import train_arrow_schema

    rewrite(train_shard(broken), set_first("ground_truth", "Nope."), train_arrow_schema())
    assert_reported(validate_folder(broken), "data/train-", "ground_truth 'Nope.' not in options")


def test_train_key_in_the_test_pool_is_reported(broken):
    from proactivebench_builder.core.records import train_arrow_schema

    pool = pq.read_table(first_shard(broken, "QuickDraw"), columns=["key"]).column("key")[0]

    def change(rows):
        rows[0].update(config="QuickDraw", key=pool.as_py())
    rewrite(train_shard(broken), change, train_arrow_schema())
    assert_reported(validate_folder(broken), "also in the QuickDraw test pool")


def test_train_shard_with_the_test_schema_is_reported(broken):
    path = train_shard(broken)
    shutil.copy(first_shard(broken, "QuickDraw"), path)
    problems = validate_folder(broken)
    assert_reported(problems, "data/train-", "missing columns")


def test_each_phase_is_said_before_its_work_and_not_with_no_progress(built_miniature,
                                                                     stderr_at_calls, capsys):
    import datasets

    from proactivebench_builder.core import buildfolder
    from proactivebench_builder.pipeline.commands import validate

    for owner, name in ((buildfolder, "_sizes_and_sha256"), (validate, "row_problems"),
                        (datasets, "load_dataset")):
        stderr_at_calls.watch(owner, name)
    assert main([built_miniature]) == 0
    said = [line.removeprefix("run_pipeline.py validate: ") for line in stderr_at_calls.lines()]
    rows = sum(int(n) for n in re.findall(r"OK: .*: (\d+) rows", stderr_at_calls.out))
    size = r"\([\d.]+ [kM]?B\)"
    expected = [rf"checking the sha256 of \d+ shards and reports {size}",
                rf"checking the sha256 of \d+ exported files {size}",
                rf"checking every row against the record contract \({rows} rows\)",
                r"loading every config split with datasets.load_dataset \(\d+ splits\)"]
    assert len(said) == len(expected) and rows > 0, said
    assert all(re.fullmatch(pattern, line) for pattern, line in zip(expected, said)), said
    first = {name: text.splitlines()[-1] for name, text in stderr_at_calls.at_first_call.items()}
    assert first == {"_sizes_and_sha256": "run_pipeline.py validate: " + said[0],
                     "row_problems": "run_pipeline.py validate: " + said[2],
                     "load_dataset": "run_pipeline.py validate: " + said[3]}
    assert main([built_miniature, "--no_progress"]) == 0
    assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def published(built_miniature, tmp_path_factory) -> str:
    target = str(tmp_path_factory.mktemp("published") / "copy")
    assert build.main(["publish", built_miniature, "--to", target]) == 0
    assert not os.path.exists(os.path.join(target, "upstream"))
    return target


def test_a_copy_published_without_the_export_validates_and_publishes_again(
        published, tmp_path, capsys):
    assert build.main(["validate", published]) == 0
    assert "upstream export" in capsys.readouterr().out  # said, not checked
    assert build.main(["publish", published, "--to", str(tmp_path / "again")]) == 0


@pytest.mark.parametrize("name, damage", [
    ("dead_letters.jsonl", b"garbage\n"),
    ("filter.json", b"\x00\x01"),
])
def test_the_reports_build_json_names_are_covered_by_its_digests(
        built_miniature, tmp_path, capsys, name, damage):
    report = json.loads(open(os.path.join(built_miniature, "reports", "build.json")).read())
    assert {e["path"] for e in report["report_files"]} == {
        "reports/dead_letters.jsonl", "reports/filter.json"}
    copy = str(tmp_path / "copy")
    shutil.copytree(built_miniature, copy)
    with open(os.path.join(copy, "reports", name), "wb") as handle:
        handle.write(damage)
    assert build.main(["validate", copy, "--skip_frames"]) == 1
    assert f"reports/{name}:" in capsys.readouterr().out
    assert build.main(["publish", copy, "--to", str(tmp_path / "pub")]) != 0
    assert not os.path.exists(tmp_path / "pub" / "reports" / name)


@pytest.fixture
def built_copy(built_miniature, tmp_path) -> str:
    copy = str(tmp_path / "built")
    shutil.copytree(built_miniature, copy, ignore=shutil.ignore_patterns("upstream"))
    return copy


def swap_for_a_valid_other_shard(root: str) -> str:
    """Replace one shard by a different but valid Parquet file, same rows and schema (written
    with other settings): what a second writer can leave behind, invisible to every check but
    a checksum."""
    import pyarrow.parquet as pq

    path = sorted(glob.glob(os.path.join(root, "QuickDraw", "*.parquet")))[0]
    table = pq.read_table(path)
    os.remove(path)
    pq.write_table(table, path, compression="gzip", row_group_size=7)
    return os.path.relpath(path, root)


def test_validate_catches_a_shard_that_differs_from_build_json(built_copy, capsys):
    changed = swap_for_a_valid_other_shard(built_copy)
    assert validate_main([built_copy, "--skip_frames"]) == 1
    out = capsys.readouterr().out
    assert changed in out and "sha256" in out


def test_validate_stays_bounded_on_a_forged_step_cap(built, capsys):
    """A re-signed ChangeIt shard with max_steps = 10^9 passes the checksums (integrity is not
    authenticity); validate's row checks stay bounded and name the value."""
    def huge_cap(rows):
        rows[0]["max_steps"] = 10 ** 9
    rewrite_shards(built, "ChangeIt", huge_cap)
    resign(built)
    assert buildfolder.folder_problems(built) == []  # the forgery passes the integrity check
    code, text = run_validate(built, capsys)
    assert_one_clear_line(code, text, "max_steps=1000000000")
