"""pipeline/commands/import_check.py: what `--import_upstream DIR` checks before any work.

Every mistake a folder of another version or layout holds is one line before any image is read:
each field upstream's environments read, absent and of the wrong type, in every config; images
one folder down, still zipped, or absent; and a record the released keep list keeps among them.
The records are upstream's own shape: each scenario's conformance records (hand-made records
that upstream's environments were recorded playing, tests/data/upstream_recorded.json).
"""
from __future__ import annotations

import json
import os

import pytest

from proactivebench_builder import transforms
from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.pipeline import import_check
from proactivebench_builder.pipeline.commands import main as cli

CONFIGS = ("Realistic-Occlusion-Dataset", "OcclusionDataSet-MM20", "MVP-N", "ImageNet-C",
           "QuickDraw", "ChangeIt", "coco2014")


def upstream_record(config: str) -> dict:
    """A record of `config` as upstream's release holds it (no key, frame_ids or source)."""
    for case in transforms.conformance_cases():
        record = case["record"]
        if record["key"].startswith(config + "/") and not case["random"]:
            return {k: v for k, v in record.items() if k != "key"}
    raise AssertionError(config)


def scenario_of(config: str) -> str:
    return next(n for n, cls in transforms.load_scenarios().items() if cls.config_name == config)


# A value of the wrong type for each field upstream's environments read (the mistakes a JSONL of
# another version holds: a number as text, a list where an object is, text for a boolean...).
WRONG = {"id": "7", "image_template": 5, "first_image": "7", "num_images": 1.5,
         "reference_image": True, "prompt": ["What?"], "options": "A", "categories": {"a": 1},
         "answer": 3, "strong_occlusions": "False", "valid_images": ["1", "2"],
         "quality_answer": 1, "step_size": "2", "max_steps": 2.5, "direction": 1,
         "granularity": "3", "horizontal_step": "11", "vertical_step": [1], "crop": [1, 2, 3, 4]}
FIELD_CASES = [(config, field) for config in CONFIGS for field in import_check.upstream_fields(config)]


def write_jsonl(folder, config: str, records: list[dict]) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{config}_preprocessed.jsonl"), "w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    return str(folder)


def three_records(config: str, change=None) -> list[dict]:
    """Three good records of `config` (ids 0, 1, 2); `change(record)` applied to the second."""
    records = [dict(upstream_record(config), id=i) for i in range(3)]
    if change:
        change(records[1])
    return records


def refusal(folder: str, config: str, released: bool = False) -> str:
    scan = import_check.scan_config(folder, config, scenario_of(config))
    with pytest.raises(UsageError) as raised:
        import_check.check_records(folder, scan, None, 0.0, released)
    line = str(raised.value)
    assert "\n" not in line
    return line


def test_every_config_has_records_upstream_plays(tmp_path):
    for config in CONFIGS:
        folder = write_jsonl(tmp_path / config, config, three_records(config))
        scan = import_check.scan_config(folder, config, scenario_of(config))
        assert scan.bad == [] and sorted(scan.rows) == [0, 1, 2], (config, scan.bad)


@pytest.mark.parametrize("config, field", FIELD_CASES)
def test_a_field_upstream_reads_absent_is_one_line_naming_it(tmp_path, config, field):
    folder = write_jsonl(tmp_path, config, three_records(config, lambda r: r.pop(field)))
    line = refusal(folder, config)
    assert f"{config}_preprocessed.jsonl line 2" in line and f"{field} is absent" in line, line
    assert "expected " in line and "1 of 3 records" in line


@pytest.mark.parametrize("config, field", FIELD_CASES)
def test_a_field_upstream_reads_of_another_type_is_one_line_naming_it(tmp_path, config, field):
    folder = write_jsonl(tmp_path, config,
                         three_records(config, lambda r: r.update({field: WRONG[field]})))
    line = refusal(folder, config)
    assert f"{config}_preprocessed.jsonl line 2" in line and f"{field} is " in line, line
    assert "expected " in line or "is not" in line, line


@pytest.mark.parametrize("change, words", [
    (lambda r: r.update(answer="Zebra."), "answer 'Zebra.' not in categories"),
    (lambda r: r.update(crop={"top": 1, "left": 2}), "crop is"),
    (lambda r: r.update(image_template="../../etc/{image}"), "leads outside"),
    (lambda r: r.update(id=0), "id 0 repeats"),
])
def test_what_validate_would_refuse_is_refused_before_any_work(tmp_path, change, words):
    config = "coco2014" if "crop" in words else "QuickDraw"
    folder = write_jsonl(tmp_path, config, three_records(config, change))
    assert words in refusal(folder, config)


def test_a_record_the_filter_leaves_out_is_a_warning_and_a_dead_letter(tmp_path, caplog):
    config = "MVP-N"
    folder = write_jsonl(tmp_path, config, three_records(config, lambda r: r.pop("valid_images")))
    scan = import_check.scan_config(folder, config, scenario_of(config))
    import_check.check_records(folder, scan, frozenset({0, 2}), 0.5, released=False)
    assert "1 of 3 records of MVP-N cannot be imported" in caplog.text
    with pytest.raises(UsageError, match="the released keep list keeps it"):
        import_check.check_records(folder, scan, frozenset({1}), 0.5, released=True)


def test_a_jsonl_of_another_version_is_refused_through_the_command(tmp_path, capsys):
    """The whole command, in-process: one line on stderr, exit 2, nothing written."""
    config = "MVP-N"
    records = [dict(upstream_record(config), id=i) for i in range(20)]
    for record in records:
        record["valid_views"] = record.pop("valid_images")  # a renamed field
    folder = write_jsonl(tmp_path / "test", config, records)
    out = tmp_path / "out"
    assert cli.main(["--runner=FnApiRunner", f"--output={out}", "--scenarios=mvpn",
                     f"--import_upstream={folder}"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "20 of 20 records of MVP-N cannot be imported" in lines[0]
    assert "valid_images is absent (expected a list of integers; upstream's MVP-N " \
           "environment reads it)" in lines[0]
    assert not out.exists()


# ---- the images: where the templates point ------------------------------------------------------

def release_with_images(folder, config: str = "QuickDraw") -> str:
    """Three records of `config` and the image files their templates name (as `x/...`)."""
    records = [dict(upstream_record(config), id=i, image_template=f"{config}/{i}/{{image}}.png")
               for i in range(3)]
    write_jsonl(folder, config, records)
    behaviour = transforms.behaviour_for_config(config)
    for record in records:
        for frame in behaviour.reachable_frame_ids(record):
            path = os.path.join(folder, behaviour.play.frame_path(record, frame))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(b"not read by the check")
    return str(folder)


def frames_refusal(folder: str, config: str = "QuickDraw") -> str:
    scan = import_check.scan_config(folder, config, scenario_of(config))
    with pytest.raises(UsageError) as raised:
        import_check.check_frames(folder, [scan], {}, 0.0, released=False)
    assert "\n" not in str(raised.value)
    return str(raised.value)


def test_images_where_the_templates_point_pass(tmp_path):
    folder = release_with_images(tmp_path / "test")
    scan = import_check.scan_config(folder, "QuickDraw", "quickdraw")
    import_check.check_frames(folder, [scan], {}, 0.0, released=True)


def test_images_unzipped_one_folder_down_say_where_they_are(tmp_path):
    inner = release_with_images(tmp_path / "test" / "test")
    outer = write_jsonl(tmp_path / "test", "QuickDraw",
                        [json.loads(line) for line in open(f"{inner}/QuickDraw_preprocessed.jsonl")])
    line = frames_refusal(outer)
    assert "3 of the 3 records kept lack their first or reference frame" in line
    assert f"no {outer}/QuickDraw/0/0000.png" in line
    assert f"it is at {inner}/QuickDraw/0/0000.png" in line and "one folder down" in line


def test_a_folder_holding_only_the_jsonl_files_says_so(tmp_path):
    folder = write_jsonl(tmp_path / "test", "QuickDraw", three_records("QuickDraw"))
    line = frames_refusal(folder)
    assert f"{folder} holds no x/ folder" in line and "unzip the release's image archives" in line


def test_archives_left_zipped_are_named(tmp_path):
    folder = write_jsonl(tmp_path / "test", "QuickDraw", [
        dict(r, image_template="QuickDraw/{image}.png") for r in three_records("QuickDraw")])
    for name in ("data1.zip", "data2.zip"):
        open(os.path.join(folder, name), "wb").close()
    scan = import_check.scan_config(folder, "QuickDraw", "quickdraw")
    with pytest.raises(UsageError, match="unzip the archives first: data1.zip, data2.zip"):
        import_check.check_unzipped(folder, [scan])


def test_a_few_missing_frames_outside_the_released_split_are_a_warning(tmp_path, caplog):
    folder = release_with_images(tmp_path / "test")
    os.remove(os.path.join(folder, "QuickDraw", "1", "0000.png"))
    scan = import_check.scan_config(folder, "QuickDraw", "quickdraw")
    import_check.check_frames(folder, [scan], {}, 0.5, released=False)
    assert "1 of the 3 records kept lack their first or reference frame" in caplog.text
    import_check.check_frames(folder, [scan], {"QuickDraw": frozenset({0, 2})}, 0.0,
                              released=True)  # the record left out is not looked at
    with pytest.raises(UsageError):
        import_check.check_frames(folder, [scan], {"QuickDraw": frozenset({1})}, 0.5,
                                  released=True)


def test_a_frame_that_is_a_folder_or_a_fifo_is_missing(tmp_path):
    folder = release_with_images(tmp_path / "test")
    first = os.path.join(folder, "QuickDraw", "0", "0000.png")
    os.remove(first)
    os.mkfifo(first)
    assert "lack their first or reference frame" in frames_refusal(folder)
    os.remove(first)
    os.mkdir(first)
    assert "lack their first or reference frame" in frames_refusal(folder)
