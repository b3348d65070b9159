"""The output folder: `load_dataset` decodes every frame of every config, the dataset card lists
every config, and the upstream export matches what the upstream environments read."""
from __future__ import annotations

import os

import datasets
import pytest
import yaml

from conftest import file_bytes, file_text, read_json, read_jsonl
from proactivebench_builder.core.records import UPSTREAM_COMMON_FIELDS
from proactivebench_builder.transforms import load_scenarios

CONFIGS = sorted(cls.config_name for cls in load_scenarios().values())


def _card(output: str) -> dict:
    text = file_text(os.path.join(output, "README.md"))
    return yaml.safe_load(text.split("---\n")[1])


def test_card_lists_every_config_with_both_splits_from_one_copy(built_miniature):
    """`test` names the pool's kept rows, `unfiltered` the same files and, where the filter
    left rows out (VSOD's weak occlusions), their set too: no file is a copy of another."""
    configs = {c["config_name"]: c for c in _card(built_miniature)["configs"]}
    assert configs.pop("default")["data_files"] == [{"split": "train",
                                                     "path": "data/train-*.parquet"}]
    assert sorted(configs) == CONFIGS
    for name, config in configs.items():
        left_out = any(n.startswith("filtered_out-") for n in
                       os.listdir(os.path.join(built_miniature, name)))
        test = f"{name}/test-*.parquet"
        assert config["data_files"] == [
            {"split": "test", "path": test},
            {"split": "unfiltered",
             "path": [test, f"{name}/filtered_out-*.parquet"] if left_out else test}]
    assert not os.path.exists(os.path.join(built_miniature, "unfiltered"))


def test_unfiltered_is_the_kept_rows_then_the_rows_left_out(built_miniature):
    """The split `unfiltered` reads the `test` set in id order, then the rows the filter left
    out in id order: the whole pool, each row once."""
    config = "OcclusionDataSet-MM20"  # its weak occlusions are left out of the test split
    test = datasets.load_dataset(built_miniature, name=config, split="test")
    pool = datasets.load_dataset(built_miniature, name=config, split="unfiltered")
    kept = test["id"]
    assert kept == sorted(kept) and pool["id"][:len(kept)] == kept
    rest = pool["id"][len(kept):]
    assert rest and rest == sorted(rest) and not set(rest) & set(kept)
    assert sorted(pool["id"]) == list(range(len(pool)))


@pytest.mark.parametrize("config", CONFIGS)
def test_load_dataset_decodes_every_frame(built_miniature, config):
    rows = datasets.load_dataset(built_miniature, name=config, split="test")
    assert len(rows) > 0
    for row in rows:
        assert len(row["frames"]) == len(row["frame_ids"]) >= 1
        for frame in row["frames"]:
            frame.load()
            assert frame.size[0] > 0 and frame.size[1] > 0
    ids = rows["id"]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("config", CONFIGS)
def test_upstream_export_matches_the_environments(built_miniature, config):
    folder = os.path.join(built_miniature, "upstream")
    records = read_jsonl(os.path.join(folder, f"{config}_preprocessed.jsonl"))
    assert [r["id"] for r in records] == sorted(r["id"] for r in records)
    keys = sorted(r["key"] for r in records)
    assert [r["id"] for r in sorted(records, key=lambda r: r["key"])] == list(range(len(keys)))
    scenario = next(c for c in load_scenarios().values() if c.config_name == config)(0, "/")
    for record in records:
        assert set(UPSTREAM_COMMON_FIELDS) <= set(record)
        assert isinstance(record["id"], int) and isinstance(record["first_image"], int)
        assert isinstance(record["num_images"], int) and isinstance(record["reference_image"], int)
        assert isinstance(record["prompt"], str) and isinstance(record["answer"], str)
        assert all(isinstance(o, str) for o in record["options"] + record["categories"])
        assert record["answer"] in record["categories"] and len(record["categories"]) == 4
        for frame_id in record["frame_ids"]:
            path = os.path.join(folder, scenario.frame_path(record, frame_id))
            assert os.path.isfile(path), f"{config} id {record['id']}: {path} missing"


def test_build_report_accounts_for_every_raw_item(built_miniature):
    report = read_json(os.path.join(built_miniature, "reports", "build.json"))
    for name, entry in report["scenarios"].items():
        assert entry["accounted"], name
        assert entry["rows"]["test"] + entry["rows"]["filtered_out"] == entry["samples"]
        assert entry["rows"]["test"] == entry["kept"]
    assert report["stamp"]["manifests"] and "code_version" in report["stamp"]


def test_a_rebuilt_folder_loads_the_new_rows(tmp_path, miniature_root):
    """`datasets` keys its cache of a folder on the card's YAML; the card's `dataset_info` sizes
    and content fingerprint make a rebuild visible."""
    from conftest import run

    out, cache = str(tmp_path / "out"), str(tmp_path / "cache")
    run(out, miniature_root, "quickdraw", "--no_train")
    first = datasets.load_dataset(out, name="QuickDraw", split="test", cache_dir=cache)
    run(out, miniature_root, "quickdraw", "--no_train", "--seed=7")
    second = datasets.load_dataset(out, name="QuickDraw", split="test", cache_dir=cache)
    assert first["prompt"] != second["prompt"]


def test_build_report_lists_every_shard_with_its_checksum(built_miniature):
    import hashlib

    files = read_json(os.path.join(built_miniature, "reports", "build.json"))["files"]
    assert files
    for entry in files:
        data = file_bytes(os.path.join(built_miniature, entry["path"]))
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert len(data) == entry["bytes"]
