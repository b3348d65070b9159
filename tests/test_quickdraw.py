"""QuickDraw end to end on its miniature ndjson source, its record semantics, and bad input."""
from __future__ import annotations

import json
import os
import shutil

import datasets
import pytest

from conftest import file_text, read_json, read_jsonl, run
from proactivebench_builder.transforms.quickdraw.play import DETAIL_REQUESTS
from proactivebench_builder.transforms.quickdraw.scenario import QuickDraw
from proactivebench_builder.transforms.quickdraw.strokes import parse_strokes
from proactivebench_builder.core.vocabulary import is_abstain
from proactivebench_builder.transforms import upstream_action_of
from proactivebench_builder.core.errors import BadItem


@pytest.fixture(scope="module")
def rows(built_miniature):
    return datasets.load_dataset(built_miniature, name="QuickDraw", split="test")


def test_every_request_is_one_upstream_details_action():
    assert {upstream_action_of(option) for option in DETAIL_REQUESTS} == {"DETAILS"}


def test_frames_are_stroke_prefixes_ending_in_the_full_drawing(rows, miniature_root):
    assert len(rows) > 0
    for row in rows:
        n = row["num_images"]
        assert n >= 2 and row["first_image"] == 0 and row["reference_image"] == n - 1
        assert row["frame_ids"] == list(range(n))
        assert [f.size for f in row["frames"]] == [(256, 256)] * n
        ink = [sum(1 for p in f.convert("L").get_flattened_data() if p < 128) for f in row["frames"]]
        assert ink == sorted(ink) and ink[0] < ink[-1], "each frame adds a stroke"
        assert "{image}" in row["image_template"]


def test_question_has_upstream_option_semantics(rows):
    for row in rows:
        assert len(row["options"]) == 2
        requests = [o for o in row["options"] if not is_abstain(o)]
        assert len(requests) == 1 and upstream_action_of(requests[0]) == "DETAILS"
        assert len(row["categories"]) == 4 and row["answer"] in row["categories"]
        assert all(c.endswith(".") and c[0].isupper() for c in row["categories"])
        assert row["key"].startswith("QuickDraw/") and row["answer"] == \
            row["key"].split("/")[1].capitalize() + "."


def test_ten_recognised_drawings_per_class_at_most(built_miniature, rows):
    report = read_json(os.path.join(built_miniature, "reports", "build.json"))["scenarios"]
    qd = report["quickdraw"]
    assert qd["accounted"]
    assert qd["excluded"]["not_recognized"] > 0 and qd["excluded"]["not_sampled"] > 0
    per_class = {}
    for row in rows:
        per_class[row["key"].split("/")[1]] = per_class.get(row["key"].split("/")[1], 0) + 1
    assert max(per_class.values()) == 10
    assert "The Eiffel Tower" in per_class  # a name with spaces and capitals


def test_raw_family_is_normalised_like_simplified():
    raw = [[[100.5, 300.5], [50, 50], [0, 10]], [[100.5, 100.5], [50, 250], [20, 30]]]
    assert parse_strokes(raw, raw=True) == [[[0, 255], [0, 0]], [[0, 0], [0, 255]]]
    with pytest.raises(BadItem, match="no strokes"):
        parse_strokes([], raw=False)


def _faulty_source(tmp_path, miniature_root):
    root = tmp_path / "src"
    shutil.copytree(os.path.join(miniature_root, "quickdraw"), root / "quickdraw")
    cat = root / "quickdraw" / "simplified" / "cat.ndjson"
    lines = cat.read_text().splitlines()
    good = json.loads(lines[0])
    bad = [
        lines[1][: len(lines[1]) // 2],                                        # cut mid-way
        json.dumps(dict(good, key_id="999", drawing=[])),                       # no strokes
        json.dumps(dict(good, key_id="998", word="dog")),                       # wrong word
        lines[0],                                                               # duplicate key
        json.dumps(dict(good, key_id="997", drawing=[[[1, 2], [3]]])),          # malformed stroke
    ]
    cat.write_text("\n".join(lines[:1] + lines[2:] + bad) + "\n")
    (root / "quickdraw" / "simplified" / "unicorn-ish.ndjson").write_text(lines[0] + "\n")
    return root


def test_bad_lines_become_dead_letters_and_the_build_goes_on(tmp_path, miniature_root):
    root = _faulty_source(tmp_path, miniature_root)
    out = str(tmp_path / "out")
    report = run(out, str(root), "quickdraw", "--max_bad_fraction=0.5")["scenarios"]["quickdraw"]
    dead = [d for d in read_jsonl(os.path.join(out, "reports", "dead_letters.jsonl"))
            if d["scenario"] == "quickdraw"]  # the train branch reads the same files
    reasons = {(d["path"].split("/")[-1], d["reason"].split(":")[0]) for d in dead}
    n = len(file_text(root / "quickdraw" / "simplified" / "cat.ndjson").splitlines())
    assert (f"cat.ndjson:{n - 4}", "malformed ndjson line") in reasons
    assert (f"cat.ndjson:{n - 3}", "drawing with no strokes") in reasons
    assert (f"cat.ndjson:{n - 2}", "inconsistent record") in reasons
    assert (f"cat.ndjson:{n - 1}", "duplicate key") in reasons
    assert (f"cat.ndjson:{n}", "malformed stroke (x and y lists differ or are empty)") in reasons
    assert ("unicorn-ish.ndjson:1", "unknown class") in reasons
    assert report["dead_letters"] == len(dead) == 6 and report["accounted"]
    assert report["samples"] > 0


def test_too_many_bad_inputs_fail_the_build_clearly(tmp_path, miniature_root):
    from proactivebench_builder.core.errors import BuildFailed

    root = _faulty_source(tmp_path, miniature_root)
    with pytest.raises(BuildFailed, match="too many bad inputs.*quickdraw"):
        run(str(tmp_path / "out"), str(root), "quickdraw", "--max_bad_fraction=0.01")


def test_render_is_deterministic():
    scenario = QuickDraw(0, "/nonexistent")
    ref = {"kind": "strokes", "strokes": [[[0, 255], [0, 255]]]}
    assert scenario.load_frame(ref) == scenario.load_frame(ref)


def test_manifest_parameters_can_be_overridden_per_build(tmp_path, miniature_root):
    out = str(tmp_path / "out")
    report = run(out, miniature_root, "quickdraw", "--set", "quickdraw.samples_per_class=2",
                 "--no_train")
    assert report["scenarios"]["quickdraw"]["samples"] == 2 * 6
    assert report["stamp"]["parameter_overrides"] == {"quickdraw": {"samples_per_class": 2}}
    with pytest.raises(SystemExit, match="has no parameter 'samples'"):
        run(out, miniature_root, "quickdraw", "--set", "quickdraw.samples=2")


# ---- QuickDraw lines ---------------------------------------------------------------------------

@pytest.mark.parametrize("key_id", ["\u0663", "\u00b2", "12\u00b2"])
def test_a_key_id_of_other_digits_is_a_dead_letter(key_id, tmp_path):
    """A key_id is ASCII digits, as the canonical-line pattern reads it; the full parse took
    any character str.isdigit() accepts ('²', '٣'), so one drawing could be read two ways."""
    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.quickdraw.scenario import QuickDraw

    line = ('{"word":"cat","countrycode":"US","timestamp":"t","recognized":true,"key_id":"%s",'
            '"drawing":[[[1,2],[3,4]],[[5,6],[7,8]]]}' % key_id).encode()
    with pytest.raises(BadItem, match="key_id"):
        QuickDraw(0, str(tmp_path))._parse_line(line, "cat")
