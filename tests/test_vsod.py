"""VSOD scenario: the record semantics the upstream VSOD environment relies on (field by field),
the strong-occlusion rule, the labels file, the upstream export, determinism, dead letters for
every kind of bad segment or label row (XML entities expand nothing), and the build accounting;
the labels CSV and annotation XML of odd shapes (lone CRs, huge cells or files, non-ASCII digits,
numbers that are not finite), natural frame order of any name, a segment holding braces."""
from __future__ import annotations

import io
import os
import random
import shutil
import tracemalloc

import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import (_frame_paths_of, build_report, builds, get_scenario_named, private_root,
                      read_jsonl, run, shard_files, values_of)
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.core import vocabulary
from proactivebench_builder.transforms import upstream_action_of
from proactivebench_builder.core.errors import BadItem, SourceError
from proactivebench_builder.transforms.vsod.scenario import (
    QUESTIONS, VSOD, check_boxes, is_strong, nearest_clear, parse_annotation, parse_labels, union_area)
from proactivebench_builder.transforms.vsod.play import REWIND, WAIT
from proactivebench_builder.transforms.vsod.miniature import write_segment

CONFIG = "OcclusionDataSet-MM20"
MANIFEST = manifest_of("vsod")
PARAMS = MANIFEST["parameters"]
VOCAB = MANIFEST["categories"]


@pytest.fixture(scope="module")
def source(miniature_root) -> str:
    return os.path.join(miniature_root, MANIFEST["source_subdir"])


@pytest.fixture(scope="module")
def built(built_miniature) -> tuple[str, dict]:
    """The shared build of every scenario (read only) and its report."""
    return built_miniature, build_report(built_miniature)


@pytest.fixture(scope="module")
def rows(built) -> dict[str, dict]:
    output, _ = built
    table = pq.read_table(os.path.join(output, CONFIG))  # the whole pool
    return {r["key"]: r for r in table.to_pylist()}


def frames_dir(source: str, segment: str, split: str = "test") -> str:
    return os.path.join(source, CONFIG, "Data", split, segment)


# ---- record semantics ------------------------------------------------------------------------

def test_one_sample_per_label_row_of_an_occluded_segment(rows):
    assert sorted(rows) == [f"{CONFIG}/seg_0001/event", f"{CONFIG}/seg_0001/number_of_people",
                            f"{CONFIG}/seg_0001/speaker", f"{CONFIG}/seg_0002/speaker"]
    assert sorted(r["id"] for r in rows.values()) == [0, 1, 2, 3]
    for key, row in rows.items():
        assert row["question_type"] == key.rsplit("/", 1)[1]


def test_frames_template_and_ids(rows, source):
    for key, row in rows.items():
        segment = key.split("/")[1]
        names = sorted(os.listdir(frames_dir(source, segment)))
        assert row["num_images"] == len(names) == 12
        assert row["frame_ids"] == list(range(12))
        assert row["image_template"] == f"{CONFIG}/{segment}/{{image}}.jpg"
        assert [f["path"] for f in row["frames"]] == [f"{CONFIG}/{segment}/{i:04d}.jpg"
                                                      for i in range(12)]
        for name, frame in zip(names, row["frames"]):     # bytes pass through
            with open(os.path.join(frames_dir(source, segment), name), "rb") as handle:
                assert frame["bytes"] == handle.read()
        assert row["source"]["files"] == [f"{CONFIG}/Data/test/{segment}/{n}" for n in names]
        for field in ("valid_images", "quality_answer", "step_size", "max_steps", "direction",
                      "granularity", "horizontal_step", "vertical_step", "crop"):
            assert row[field] is None, field


def test_first_and_reference_frames(rows):
    # seg_0001's passer-by covers frames 3-7, most at frame 5; frames 2 and 8 are the nearest
    # clear ones (3 steps each way), and ties go forward (waiting).
    assert rows[f"{CONFIG}/seg_0001/speaker"]["first_image"] == 5
    assert rows[f"{CONFIG}/seg_0001/speaker"]["reference_image"] == 8
    pinned = rows[f"{CONFIG}/seg_0001/event"]          # pinned in the labels file
    assert (pinned["first_image"], pinned["reference_image"]) == (4, 11)


def test_strong_occlusion_flag(rows):
    assert rows[f"{CONFIG}/seg_0001/speaker"]["strong_occlusions"] is True
    assert rows[f"{CONFIG}/seg_0002/speaker"]["strong_occlusions"] is False   # still in the pool


def test_options_prompt_categories_answer(rows):
    expected = {"seg_0001/speaker": "Ursula von der leyen.", "seg_0001/number_of_people": "Two.",
                "seg_0001/event": "Press conference.", "seg_0002/speaker": "José mourinho."}
    for key, row in rows.items():
        moves = [o for o in row["options"] if not vocabulary.is_abstain(o)]
        assert sorted(moves) == sorted([REWIND, WAIT])
        assert sorted(upstream_action_of(o) for o in moves) == ["FORWARD", "REWIND"]
        assert len(row["options"]) == 3
        assert [o for o in row["options"] if vocabulary.is_abstain(o)][0] in \
            vocabulary.ABSTAIN_OPTIONS
        qtype = row["question_type"]
        assert row["prompt"] in QUESTIONS[qtype]
        assert not row["prompt"].startswith("This is a frame")    # the runtime adds it
        assert row["answer"] == expected[key.split("/", 1)[1]]
        assert row["answer"] in row["categories"] and len(set(row["categories"])) == 4
        assert set(row["categories"]) <= {vocabulary.format_category(a) for a in VOCAB[qtype]}


def test_first_frame_shows_the_occluder(rows):
    row = rows[f"{CONFIG}/seg_0001/speaker"]

    def dark_share(i):
        image = Image.open(io.BytesIO(row["frames"][i]["bytes"])).convert("L")
        dark = image.point(lambda v: 255 if v < 60 else 0).histogram()[255]
        return dark / (image.width * image.height)
    assert dark_share(row["first_image"]) > 0.5 > dark_share(row["reference_image"])


def test_load_dataset_decodes_every_frame(built):
    datasets = pytest.importorskip("datasets")
    output, _ = built
    ds = datasets.load_dataset(output, name=CONFIG, split="test")
    # upstream's loader skips strong_occlusions == False: the weak clip stays in the pool only
    assert len(ds) == 3 and f"{CONFIG}/seg_0002/speaker" not in ds["key"]
    assert len(datasets.load_dataset(output, name=CONFIG, split="unfiltered")) == 4
    for row in ds:
        assert len(row["frames"]) == row["num_images"]
        for image in row["frames"]:
            image.load()


def test_upstream_export_has_every_frame(built, rows):
    output, _ = built
    lines = read_jsonl(os.path.join(output, "upstream", f"{CONFIG}_preprocessed.jsonl"))
    assert len(lines) == 4
    for line in lines:
        row = rows[line["key"]]
        assert line["strong_occlusions"] is row["strong_occlusions"]
        assert line["question_type"] == row["question_type"]
        for k, fid in enumerate(line["frame_ids"]):
            path = os.path.join(output, "upstream",
                                line["image_template"].format(image=f"{fid:04d}"))
            with open(path, "rb") as handle:
                assert handle.read() == row["frames"][k]["bytes"]


def test_runtime_environment_waits_and_rewinds_round_the_video(rows):
    from proactivebench_builder.runtime.environments import Environment

    row = rows[f"{CONFIG}/seg_0001/speaker"]
    env = Environment(row, CONFIG)
    env.step(WAIT)
    assert env.image_id == row["first_image"] + 1
    env.step(REWIND)
    env.step(REWIND)
    assert env.image_id == row["first_image"] - 1
    assert env.step(row["answer"]).correct is True
    wrap = Environment(dict(row, first_image=0), CONFIG)
    wrap.step(REWIND)
    assert wrap.image_id == row["num_images"] - 1


# ---- accounting and determinism ----------------------------------------------------------

def test_build_report_accounts_for_every_label_row(built):
    _, report = built
    r = report["scenarios"]["vsod"]
    assert r["config"] == CONFIG
    assert r["raw_items"] == 6 and r["samples"] == 4 and r["dead_letters"] == 0
    assert r["excluded"] == {"no_labels": 1, "no_occlusion": 1}
    assert r["accounted"] is True


def test_same_inputs_same_bytes(tmp_path, built, miniature_root):
    output, _ = built
    again = str(tmp_path / "again")
    run(again, miniature_root, "vsod", "--upstream_export")
    assert shard_files(again) == shard_files(output, CONFIG)


def test_choices_come_from_the_seed():
    key = f"{CONFIG}/seg_0001/speaker"

    def picks(scenario):
        return (scenario.pick_prompt(key, QUESTIONS["speaker"]),
                scenario.build_options(key, [REWIND, WAIT]),
                scenario.pick_categories(key, "Ge You", VOCAB["speaker"]))
    assert picks(VSOD(0, "/a")) == picks(VSOD(0, "/b"))
    assert picks(VSOD(0, "/a")) != picks(VSOD(1, "/a"))


# ---- bad raw items -----------------------------------------------------------------------------

def _segment(root, name, n=8, size=(32, 18), peak_boxes=None):
    boxes = peak_boxes if peak_boxes is not None else {3: [(0, 0, 30, 18)]}
    write_segment(str(root), "test", name, n, size, boxes, random.Random(name))


@pytest.fixture(scope="module")
@builds
def broken(tmp_path_factory, source) -> tuple[str, dict, list[dict]]:
    """The miniature plus one bad segment or label row of each kind."""
    root = tmp_path_factory.mktemp("vsod_broken")
    copy = root / MANIFEST["source_subdir"]
    shutil.copytree(source, copy)
    data, ann = copy / CONFIG / "Data" / "test", copy / CONFIG / "Annotations" / "test"
    _segment(copy, "bad_xml")
    (ann / "bad_xml" / "0002.xml").write_text("<annotation><object>")
    _segment(copy, "box_outside", peak_boxes={3: [(10, 0, 40, 18)]})
    _segment(copy, "missing_frame")
    os.remove(data / "missing_frame" / "0005.jpg")
    _segment(copy, "corrupt_frame")
    blob = (data / "corrupt_frame" / "0001.jpg").read_bytes()
    (data / "corrupt_frame" / "0001.jpg").write_bytes(blob[: len(blob) // 2])
    _segment(copy, "size_mismatch")
    xml = (ann / "size_mismatch" / "0000.xml").read_text()
    (ann / "size_mismatch" / "0000.xml").write_text(xml.replace("<width>32", "<width>64"))
    _segment(copy, "no_bndbox")
    (ann / "no_bndbox" / "0003.xml").write_text(
        "<annotation><object><name>occlusion</name></object></annotation>")
    _segment(copy, "no_annotations")
    shutil.rmtree(ann / "no_annotations")
    labels = (copy / PARAMS["labels_file"]).read_text()
    labels += "".join(f"{s},speaker,Ge You,,\n" for s in (
        "bad_xml", "box_outside", "missing_frame", "corrupt_frame", "size_mismatch",
        "no_bndbox", "no_annotations"))
    labels += ("seg_0002,event,Birthday party,,\n"        # line 14: unknown label
               "seg_0002,weather,Sunny,,\n"               # 15: unknown question type
               "seg_9999,speaker,Ge You,,\n"              # 16: unknown segment
               "seg_0001,speaker,Ge You,,\n"              # 17: duplicate (segment, type)
               "seg_0002,number_of_people,Three,x,\n"     # 18: malformed pin
               "seg_0002,event,Concert,,99\n")            # 19: pinned frame out of range
    (copy / PARAMS["labels_file"]).write_text(labels)
    output = str(tmp_path_factory.mktemp("built") / "out")  # apart from the sources
    report = run(output, str(root), "vsod", "--max_bad_fraction=1")
    return output, report, read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))


def test_bad_segments_become_dead_letters_with_path_and_reason(broken):
    _, _, dead = broken
    by_path = {d["path"]: d["reason"] for d in dead}
    prefix = f"{CONFIG}/Annotations/test"
    assert by_path[f"{prefix}/bad_xml/0002.xml"].startswith("bad XML: ")
    assert by_path[f"{prefix}/box_outside/0003.xml"].startswith("box outside the image: ")
    assert by_path[f"{CONFIG}/Data/test/missing_frame"].startswith(
        "frame/annotation count mismatch: 7 frames, 8 XML files")
    assert by_path[f"{CONFIG}/Data/test/corrupt_frame/0001.jpg"].startswith(
        ("truncated JPEG", "undecodable image"))
    assert by_path[f"{prefix}/size_mismatch/0000.xml"].startswith("inconsistent size: ")
    assert by_path[f"{prefix}/no_bndbox/0003.xml"] == "bad XML: an <object> without a <bndbox>"
    assert by_path[f"{prefix}/no_annotations"].startswith("missing annotations folder")


def test_bad_label_rows_become_dead_letters_with_line_and_reason(broken):
    _, _, dead = broken
    labels = PARAMS["labels_file"]
    by_path = {d["path"]: d["reason"] for d in dead}
    assert by_path[f"{labels}:14"].startswith("unknown label: 'Birthday party'")
    assert by_path[f"{labels}:15"].startswith("unknown question type: 'weather'")
    assert by_path[f"{labels}:16"].startswith("unknown segment: 'seg_9999'")
    assert by_path[f"{labels}:17"].startswith("duplicate label: speaker of seg_0001")
    assert by_path[f"{labels}:18"].startswith("malformed labels line: first_image 'x'")
    assert by_path[f"{labels}:19"].startswith("pinned frame out of range: reference_image 99")


def test_the_build_goes_on_and_accounts(broken):
    output, report, dead = broken
    r = report["scenarios"]["vsod"]
    assert r["samples"] == 4
    assert r["dead_letters"] == len(dead) == 13
    assert r["raw_items"] == r["samples"] + r["dead_letters"] + sum(r["excluded"].values())
    assert r["accounted"] is True
    keys = {row["key"] for row in
            pq.read_table(os.path.join(output, CONFIG)).to_pylist()}
    assert f"{CONFIG}/seg_0001/speaker" in keys and len(keys) == 4


def test_headerless_labels_file_is_a_configuration_error():
    with pytest.raises(SourceError, match="lacks columns"):
        parse_labels("seg_0001,speaker,Ge You\n", VOCAB)


# ---- the rules in isolation --------------------------------------------------------------------

def test_union_area_counts_overlaps_once():
    assert union_area([(0, 0, 10, 10)]) == 100
    assert union_area([(0, 0, 10, 10), (5, 5, 15, 15)]) == 175
    assert union_area([(0, 0, 10, 10), (2, 2, 4, 4)]) == 100
    assert union_area([(0, 0, 2, 2), (5, 5, 6, 6)]) == 5


def test_strong_rule_is_configurable():
    fractions = [0.0, 0.3, 0.6, 0.0]
    assert is_strong(fractions, {})
    assert not is_strong(fractions, {"min_union_fraction": 0.7})
    assert not is_strong(fractions, {"min_union_fraction": 0.25, "min_frames": 3})
    assert is_strong(fractions, {"min_union_fraction": 0.25, "min_frames": 2})


def test_reference_is_the_nearest_clear_frame_round_the_circle():
    fractions = [0.0, 0.5, 0.9, 0.5, 0.2, 0.0]
    boxed = [False, True, True, True, True, False]
    assert nearest_clear(fractions, boxed, 2) == 0
    assert nearest_clear(fractions, boxed, 4) == 5
    assert nearest_clear([0.0, 0.9, 0.0], [False, True, False], 1) == 2   # tie: wait
    assert nearest_clear([0.3, 0.9, 0.1], [True, True, True], 1) == 2     # none clear


def test_annotation_parsing():
    size, boxes = parse_annotation(
        b"<annotation><size><width>10</width><height>8</height></size>"
        b"<object><bndbox><xmin>1</xmin><ymin>2</ymin><xmax>5</xmax><ymax>8</ymax></bndbox>"
        b"</object></annotation>")
    assert size == (10, 8) and boxes == [(1.0, 2.0, 5.0, 8.0)]
    check_boxes(boxes, 10, 8)
    with pytest.raises(BadItem, match="outside"):
        check_boxes([(-1, 0, 5, 5)], 10, 8)
    with pytest.raises(BadItem, match="empty box"):
        check_boxes([(5, 0, 5, 5)], 10, 8)
    assert parse_annotation(b"<annotation/>") == (None, [])


def test_question_pools():
    assert set(QUESTIONS) == set(VOCAB) == {"speaker", "number_of_people", "event"}
    for pool in QUESTIONS.values():
        assert len(pool) == 15 and len(set(pool)) == 15
    for qtype, words in VOCAB.items():
        assert len({vocabulary.format_category(w) for w in words}) == len(words) >= 4, qtype


def _entity_bomb() -> bytes:
    entities = ['<!ENTITY e0 "lol">'] + [
        f'<!ENTITY e{i} "{("&e%d;" % (i - 1)) * 10}">' for i in range(1, 10)]
    return (('<?xml version="1.0"?><!DOCTYPE annotation [' + "".join(entities) + "]>"
             "<annotation><size><width>&e9;</width><height>1</height></size></annotation>")
            .encode())


@pytest.mark.parametrize("xml", [
    _entity_bomb(),
    b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/hostname">]>'
    b"<annotation><size><width>&e;</width><height>1</height></size></annotation>",
], ids=["billion-laughs", "external-entity"])
def test_vsod_xml_entities_are_a_bad_item_and_expand_nothing(xml):
    """expat refuses external entities and stops entity expansion at its amplification limit
    (activated past 8 MiB of output): the peak is bounded by that limit (~64 MB traced, the same
    for 9 or 30 levels of nesting), not by what the file claims."""
    from proactivebench_builder.transforms.base import BadItem
    from proactivebench_builder.transforms.vsod.scenario import parse_annotation

    tracemalloc.start()
    try:
        with pytest.raises(BadItem, match="bad XML"):
            parse_annotation(xml)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 128 << 20


# ---- VSOD: the labels CSV and the annotation XML --------------------------------------------

def vsod_vocabulary() -> dict:
    from proactivebench_builder.transforms import manifest_of

    return manifest_of("vsod")["categories"]


HEADER = "segment,question_type,answer,first_image,reference_image"


def test_labels_with_lone_carriage_returns_parse():
    """CR ends a line as CSV says; a cell cut by a CR is a bad line."""
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    text = f"{HEADER}\rseg_0001,speaker,Ge You,,\rseg_0002,speaker,Ge\rYou,,\r"
    good, bad = parse_labels(text, vsod_vocabulary())
    assert [(g["segment"], g["line"]) for g in good] == [("seg_0001", 2)]
    assert [line for line, _ in bad] == [3, 4]


def test_a_cell_over_the_csv_field_limit_is_one_bad_line():
    """A cell over the csv field limit is a bad line, not a `_csv.Error` out of parse_labels."""
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    text = (f"{HEADER}\nseg_0001,speaker,\"{'x' * 200000}\",,\n"
            "seg_0002,speaker,Ge You,,\n")
    good, bad = parse_labels(text, vsod_vocabulary())
    assert [g["segment"] for g in good] == ["seg_0002"]
    assert len(bad) == 1 and bad[0][0] == 2 and "field larger than" in bad[0][1]


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "9" * 5000, "+3", " 1_0"])
def test_a_pinned_frame_that_is_not_ascii_digits_is_one_bad_line(value):
    """The line is a dead letter."""
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    good, bad = parse_labels(f"{HEADER}\nseg_0001,speaker,Ge You,{value},\n",
                             vsod_vocabulary())
    assert good == [] and len(bad) == 1 and "is not a frame index" in bad[0][1]


def test_a_header_that_is_not_csv_is_one_line():
    from proactivebench_builder.core.errors import SourceError
    from proactivebench_builder.transforms.vsod.scenario import parse_labels

    with pytest.raises(SourceError, match="labels file"):
        parse_labels('"' + "x" * 200000 + '"\n', vsod_vocabulary())


def test_a_huge_labels_file_is_refused_in_one_line(tmp_path):
    """A labels file over its cap is a SourceError naming it, unread."""
    from proactivebench_builder.core.errors import SourceError
    from proactivebench_builder.transforms.vsod.scenario import MAX_LABELS_BYTES, VSOD

    scenario = VSOD(0, str(tmp_path))
    with open(tmp_path / scenario.params["labels_file"], "wb") as handle:
        handle.write(HEADER.encode() + b"\n")
        handle.truncate(1 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(SourceError, match="labels"):
            scenario.labels()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_LABELS_BYTES, peak


@pytest.mark.parametrize("number", ["inf", "-inf", "nan", "1e400"])
def test_annotation_numbers_must_be_finite(number):
    """Either is the annotation's BadItem."""
    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.vsod.scenario import parse_annotation

    box = "".join(f"<{k}>{v}</{k}>" for k, v in zip(("xmin", "ymin", "xmax", "ymax"),
                                                      (1, 1, number, 5)))
    size = f"<size><width>{number}</width><height>8</height></size>"
    for xml in (f"<annotation>{size}</annotation>",
                f"<annotation><object><bndbox>{box}</bndbox></object></annotation>"):
        with pytest.raises(BadItem, match="finite|numeric"):
            parse_annotation(xml.encode())


def test_natural_frame_order_takes_any_file_name():
    """Digit runs
    are ASCII digits, compared as numbers, and any names sort."""
    from proactivebench_builder.transforms.vsod.scenario import natural_key

    names = ["0010.jpg", "0001\u00b22.jpg", "2.jpg", "\u00b2.jpg", "a.jpg", "0002.jpg"]
    ordered = sorted(names, key=natural_key)
    assert ordered.index("2.jpg") < ordered.index("0010.jpg")
    assert sorted(["f10.jpg", "f9.jpg", "f010.jpg"], key=natural_key) == [
        "f9.jpg", "f10.jpg", "f010.jpg"]


# ---- VSOD: a segment holding braces --------------------------------------------------------------

@pytest.mark.build
def test_a_vsod_segment_with_braces_keeps_its_name(tmp_path):
    from proactivebench_builder.transforms.vsod.layout import DATASET_FOLDER

    src = os.path.join(private_root(tmp_path, "vsod"), "vsod")
    scenario = get_scenario_named("vsod", src)
    segment = scenario.segments()[0]
    for kind in ("Data", "Annotations"):
        os.rename(scenario.tree(kind, segment), scenario.tree(kind, segment + "{0}"))
    labels = os.path.join(src, scenario.params["labels_file"])
    with open(labels, encoding="utf-8") as handle:
        text = handle.read()
    with open(labels, "w", encoding="utf-8") as handle:
        handle.write(text.replace(f"{segment},", f"{segment}{{0}},"))
    scenario = get_scenario_named("vsod", src)
    paths = _frame_paths_of(scenario, values_of(scenario, "segment:" + segment + "{0}"))
    assert paths and all(p.startswith(f"{DATASET_FOLDER}/{segment}{{0}}/")
                         for ps in paths.values() for p in ps)
