"""pipeline/import_upstream.py: a release's records become rows with their values as the release
holds them (integers stay integers through the shards and a re-export) and a config's rows are
written in id order; a byte-order mark opening a JSONL is not a bad record, and a record of the
wrong types or shape is one dead letter naming its line while the import goes on."""
from __future__ import annotations

import pytest

import io
import json
import os
import shutil

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from conftest import IN_PROCESS, RUNNER, run, shard_files
from proactivebench_builder.pipeline.commands import main as build
from proactivebench_builder.runtime import cli as runtime_cli

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


def test_a_byte_order_mark_opening_an_upstream_jsonl_is_not_a_bad_record(built_miniature,
                                                                        tmp_path, capsys):
    upstream = tmp_path / "upstream"
    shutil.copytree(os.path.join(built_miniature, "upstream"), upstream)
    jsonl = upstream / "QuickDraw_preprocessed.jsonl"
    lines = jsonl.read_bytes()
    jsonl.write_bytes(b"\xef\xbb\xbf" + lines)
    out = tmp_path / "imported"
    build.main([RUNNER, IN_PROCESS, "--import_upstream", str(upstream), "--scenarios",
                "quickdraw", "--output", str(out), "--no_progress"])
    report = json.loads((out / "reports" / "build.json").read_text())
    assert report["scenarios"]["quickdraw"]["dead_letters"] == 0
    assert report["scenarios"]["quickdraw"]["samples"] == lines.count(b"\n")
    assert runtime_cli.main(["evaluate", "--data", str(upstream), "--model", "oracle",
                             "--scenarios", "QD", "--results", str(tmp_path / "r.jsonl"),
                             "--no_progress"]) == 0


def test_a_release_in_a_bucket_imports_as_from_a_folder(tmp_path, s3_port):
    """--import_upstream s3://...: the same shards as the same release in a local folder (its
    JSONL read a bounded line at a time through the store's client)."""
    import subprocess
    import sys

    import boto3

    from conftest import REPO, s3_environment, s3_objects

    folder = coco_release(tmp_path / "test", [WHOLE] * 3, [0, 1, 2])
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3_port}", region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="x")
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            s3.upload_file(path, "bucket", "release/" + os.path.relpath(path, folder))
    assert len(s3_objects(s3_port, "release/")) == 4
    local = str(tmp_path / "local")
    assert run(local, "/unused", "coco", f"--import_upstream={folder}")["status"] == "ok"
    remote = str(tmp_path / "remote")
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_pipeline.py"), RUNNER, "--no_progress",
         "--scenarios=coco", f"--output={remote}", "--import_upstream=s3://bucket/release"],
        env=dict(os.environ, **s3_environment(s3_port)), capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    shards = shard_files(local)
    assert shards == shard_files(remote) and shards
    for shard in shards:
        assert open(os.path.join(local, shard), "rb").read() == \
            open(os.path.join(remote, shard), "rb").read()


# ---- --import_upstream: the records of a release --------------------------------------

@pytest.fixture(scope="module")
def quickdraw_release(shared_build, miniature_root) -> str:
    """The upstream export of a shared QuickDraw-only build: a release folder to import (read
    only: tests copy what they change)."""
    return os.path.join(shared_build(miniature_root, "quickdraw", "--no_train",
                                         "--upstream_export")[0], "upstream")


def _release_lines(folder: str) -> list[bytes]:
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "rb") as handle:
        return handle.read().splitlines()


def _import_config(folder: str):
    from proactivebench_builder.core.config import BuildConfig

    return BuildConfig(seed=0, output="/unused", scenarios=("quickdraw",),
                       sources={"quickdraw": folder}, config_to_scenario={"QuickDraw": "quickdraw"},
                       import_upstream=folder, import_configs=("QuickDraw",), keep_ids=True)


def _edited(line: bytes, **changes) -> bytes:
    import json

    record = json.loads(line)
    record.update(changes)
    return json.dumps(record).encode()


BAD_RECORDS = {
    "template a number": dict(image_template=5),
    "template a list": dict(image_template=["QuickDraw/{image}.png"]),
    "template with a format spec": dict(image_template="QuickDraw/{image:>999999999}.png"),
    "template with an attribute": dict(image_template="QuickDraw/{image.__class__}.png"),
    "template leading out": dict(image_template="../../elsewhere/{image}.png"),
    "frame_ids strings": dict(frame_ids=["0", "1"]),
    "frame_ids a number": dict(frame_ids=3),
    "frame_ids huge": dict(frame_ids=list(range(200000))),
    "key a list": dict(key=["a"]),
    "key of another config": dict(key="coco2014/1"),
    "prompt a number": dict(prompt=5),
    "options a string": dict(options="A"),
    "num_images 10^20": dict(num_images=10 ** 20),
    "id a float": dict(id=1.9),
    "id a bool": dict(id=True),
    "id null": dict(id=None),
    "answer null": dict(answer=None),
    "source of another shape": dict(source={"files": "x"}),
    "crop not a dict": dict(crop=[1, 2]),
    "step a string": dict(horizontal_step="x"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS) + ["nested", "not utf-8", "a list",
                                                        "nan", "not json"])
def test_a_bad_upstream_record_is_one_dead_letter(case, quickdraw_release, tmp_path):
    """Each is
    one dead letter naming the line, before any writer."""
    from proactivebench_builder.pipeline.import_upstream import ImportRecord, ReadRecords

    good = _release_lines(quickdraw_release)[0]
    line = {"nested": b"[" * 100000, "not utf-8": good.replace(b"Trumpet", b"Tr\xffmpet"),
            "a list": b"[1, 2]", "nan": _edited(good).replace(b'"first_image": 0',
                                                         b'"first_image": NaN'),
            "not json": b'{"id": 0,'}.get(case) or _edited(good, **BAD_RECORDS.get(case, {}))
    folder = str(tmp_path / "release")
    shutil.copytree(quickdraw_release, folder)
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "wb") as handle:
        handle.write(line + b"\n")
    config = _import_config(folder)
    read = list(ReadRecords(config).process("QuickDraw"))
    assert len(read) == 1
    values = list(ImportRecord(config).process(read[0]))
    assert [type(v).__name__ for v in values] == ["Count", "DeadLetter"], values
    assert values[1].path == "QuickDraw_preprocessed.jsonl:1", values[1]


def test_a_good_upstream_record_still_imports(quickdraw_release):
    import pyarrow as pa

    from proactivebench_builder.core.records import arrow_schema
    from proactivebench_builder.pipeline.import_upstream import ImportRecord, ReadRecords

    config = _import_config(quickdraw_release)
    for element in ReadRecords(config).process("QuickDraw"):
        values = list(ImportRecord(config).process(element))
        assert [type(v).__name__ for v in values] == ["Count", "Sample"], values
        row = dict(values[1].row, frames=[])
        schema = arrow_schema()
        pa.Table.from_pylist([{c: row.get(c) for c in schema.names}], schema=schema)


def test_an_import_with_bad_records_builds_and_accounts(quickdraw_release, tmp_path):
    """The repro of the inventory (36): bad records among good ones; the build goes on, each
    bad record a dead letter, every shard written, the accounting balanced."""
    from conftest import read_jsonl, run

    lines = _release_lines(quickdraw_release)
    bad = [_edited(lines[0], image_template=5), _edited(lines[1], prompt=5),
           _edited(lines[2], num_images=10 ** 20), _edited(lines[3], key=["a"]),
           _edited(lines[4], frame_ids=["0"]), b"[" * 100000, b"\xff\xfe{}"]
    folder = str(tmp_path / "release")
    shutil.copytree(quickdraw_release, folder)
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "wb") as handle:
        handle.write(b"\n".join(bad + lines[5:]) + b"\n")
    output = str(tmp_path / "out")
    report = run(output, "/unused", "quickdraw", f"--import_upstream={folder}",
                 "--max_bad_fraction=1")
    entry = report["scenarios"]["quickdraw"]
    assert entry["accounted"] and entry["samples"] == len(lines) - 5
    assert entry["dead_letters"] == len(bad)
    letters = read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
    assert {d["path"] for d in letters} == {f"QuickDraw_preprocessed.jsonl:{n}"
                                            for n in range(1, len(bad) + 1)}
