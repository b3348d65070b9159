"""pipeline/import_upstream.py: a release's records become rows with their values as the release
holds them (integers stay integers through the shards and a re-export) and a config's rows are
written in id order."""
from __future__ import annotations

import pytest

import io
import json
import os

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from conftest import run, shard_files

pytestmark = pytest.mark.build  # every test here builds or starts a command of ours

COCO = "coco2014"


def coco_release(folder, crops: list[dict], ids: list[int]) -> str:
    """A release-shaped coco2014 folder: one record per id (in the order given), each with its
    crop, and the image its template names."""
    os.makedirs(os.path.join(folder, COCO, "val2014"), exist_ok=True)
    picture = io.BytesIO()
    Image.new("RGB", (320, 240), (90, 120, 30)).save(picture, "JPEG")
    records = []
    for i, crop in zip(ids, crops):
        template = f"{COCO}/val2014/COCO_val2014_{i:012d}.jpg"
        with open(os.path.join(folder, template), "wb") as handle:
            handle.write(picture.getvalue())
        records.append({
            "id": i, "image_template": template, "first_image": 0, "num_images": 3,
            "reference_image": 0, "prompt": "Recognize the object shown in this image.",
            "options": ["Move the camera to the left.", "I do not know what is this object."],
            "categories": ["Dog.", "Cat.", "Horse.", "Bird."], "answer": "Dog.",
            "direction": "left", "granularity": 3, "horizontal_step": 11, "vertical_step": 7,
            "crop": crop})
    with open(os.path.join(folder, f"{COCO}_preprocessed.jsonl"), "w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    return str(folder)


WHOLE = {"top": 40, "left": 60, "height": 120, "width": 200}


def exported(output: str) -> dict[int, dict]:
    with open(os.path.join(output, "upstream", f"{COCO}_preprocessed.jsonl")) as handle:
        return {r["id"]: r for r in map(json.loads, handle)}


def test_integers_stay_integers_in_the_shards_and_a_re_export(tmp_path):
    folder = coco_release(tmp_path / "test", [WHOLE] * 4, [0, 1, 2, 3])
    out = str(tmp_path / "out")
    assert run(out, "/unused", "coco", f"--import_upstream={folder}",
               "--upstream_export")["status"] == "ok"
    shard = next(p for p in shard_files(out) if p.startswith(COCO))
    schema = pq.read_schema(os.path.join(out, shard))
    assert schema.field("horizontal_step").type == pa.int64()
    assert schema.field("crop").type.field("top").type == pa.int64()
    row = datasets.load_dataset(out, name=COCO, split="test")[0]
    assert type(row["horizontal_step"]) is int and row["crop"] == WHOLE
    record = exported(out)[0]
    assert (record["horizontal_step"], record["vertical_step"], record["crop"]) == (11, 7, WHOLE)
    assert '"horizontal_step": 11,' in open(
        os.path.join(out, "upstream", f"{COCO}_preprocessed.jsonl")).read()


def test_a_fractional_pixel_count_keeps_its_config_fractional(tmp_path):
    """A column holds one type: a config whose records hold a fraction is written as float64,
    that fraction exactly."""
    fractional = dict(WHOLE, top=40.5)
    folder = coco_release(tmp_path / "test", [WHOLE, fractional], [0, 1])
    out = str(tmp_path / "out")
    assert run(out, "/unused", "coco", f"--import_upstream={folder}",
               "--upstream_export")["status"] == "ok"
    shard = next(p for p in shard_files(out) if p.startswith(COCO))
    assert pq.read_schema(os.path.join(out, shard)).field("horizontal_step").type == pa.float64()
    assert exported(out)[1]["crop"]["top"] == 40.5


def test_a_config_is_written_in_id_order(tmp_path):
    """Records out of order in the file, several shards: reading the shards in their order
    gives the ids in order."""
    ids = [7, 3, 11, 0, 5, 9, 1, 10, 2, 8, 6, 4]
    folder = coco_release(tmp_path / "test", [WHOLE] * len(ids), ids)
    out = str(tmp_path / "out")
    run(out, "/unused", "coco", f"--import_upstream={folder}", "--set=coco.rows_per_shard=5")
    shards = sorted(p for p in shard_files(out) if p.startswith(COCO))
    assert len(shards) == 3
    in_order = [i for p in shards for i in pq.read_table(os.path.join(out, p))["id"].to_pylist()]
    assert in_order == sorted(ids)
    assert datasets.load_dataset(out, name=COCO, split="test")["id"] == sorted(ids)
