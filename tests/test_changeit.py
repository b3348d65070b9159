"""ChangeIt end to end on its miniature source (pre-extracted frames, mp4 and webm videos), the
record semantics field by field, the real repository files, determinism, and bad raw items (a
video that is a FIFO is a dead letter, never decoded), broken or CR-ended categories and labels
tables, and a video id holding braces."""
from __future__ import annotations

import io
import os
import shutil

import datasets
import pytest
from PIL import Image

from conftest import (_frame_paths_of, balanced, build, build_report, builds, copy_sources,
                      dead_letter_reasons, file_bytes, file_text, get_scenario_named,
                      private_miniature, read_json, read_jsonl, run, shard_files, values_of)
from proactivebench_builder.core import results
from test_fileio import replace
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.transforms.changeit.scenario import (
    ACTION_QUESTIONS, OBJECT_QUESTIONS, ChangeIt, Excluded, plan_sequence)
from proactivebench_builder.transforms.changeit.miniature import (
    LABEL_COLOURS_RGB, MINIATURE_VIDEOS, _expand_runs)
from proactivebench_builder.transforms.changeit.play import REWIND_OPTION, WAIT_OPTIONS
from proactivebench_builder.transforms.changeit.csvs import (
    parse_annotation, parse_categories_csv, parse_labels_csv, parse_video_list, video_id_of)
from proactivebench_builder.core.vocabulary import is_abstain
from proactivebench_builder.transforms import upstream_action_of

# unmodified files of github.com/soCzech/ChangeIt at f93cd98 (MIT, see its LICENCE)
REAL = os.path.join(os.path.dirname(__file__), "data", "changeit_repo")
CONFIG = "ChangeIt"
NULL_EXTRAS = ("strong_occlusions", "valid_images", "quality_answer", "direction", "granularity",
               "horizontal_step", "vertical_step", "crop")


# ---- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def source(miniature_root) -> str:
    """The sources root of the shared build (read only: a test that changes ChangeIt's source
    copies its folder)."""
    return miniature_root


@pytest.fixture(scope="module")
def built(built_miniature) -> tuple[str, dict]:
    """The shared build of every scenario (read only) and its report."""
    return built_miniature, build_report(built_miniature)


def load_rows(output: str, cache_dir: str) -> list[dict]:
    """The test split as `datasets` decodes it. Its own cache folder: `datasets` can serve a
    cached copy of another output folder with the same base name."""
    return list(datasets.load_dataset(output, name=CONFIG, split="test", cache_dir=cache_dir))


@pytest.fixture(scope="module")
def rows(built, tmp_path_factory):
    return load_rows(built[0], str(tmp_path_factory.mktemp("changeit_hf_cache")))


def miniature_labels() -> dict[tuple[str, str], list[int]]:
    return {(v["category"], v["id"]): _expand_runs(v["runs"]) for v in MINIATURE_VIDEOS}


def label_of_colour(image: Image.Image) -> int:
    """The label whose colour a frame is painted with (the middle band, away from the markers)."""
    rgb = image.convert("RGB")
    w, h = rgb.size
    pixels = [rgb.getpixel((x, y)) for x in range(0, w, 4) for y in range(12, h - 8, 4)]
    mean = [sum(p[c] for p in pixels) / len(pixels) for c in range(3)]
    return min(LABEL_COLOURS_RGB, key=lambda label: sum(
        (mean[c] - LABEL_COLOURS_RGB[label][c]) ** 2 for c in range(3)))


# ---- option and question pools ------------------------------------------------------------------

def test_proactive_options_are_one_upstream_action_each():
    assert upstream_action_of(REWIND_OPTION) == "REWIND"
    assert {upstream_action_of(o) for o in WAIT_OPTIONS.values()} == {"FORWARD"}
    assert all("Wait for the" in o for o in WAIT_OPTIONS.values())  # what upstream hides at the end
    assert WAIT_OPTIONS["object"] == "Wait for the object to appear."  # the paper's Fig. 17
    assert len(set(OBJECT_QUESTIONS)) == 15 and len(set(ACTION_QUESTIONS)) == 11  # App. A.6 sizes


# ---- the real repository files --------------------------------------------------------------------

def test_real_categories_and_labels_parse_and_match_the_manifest():
    actions = parse_categories_csv(file_text(f"{REAL}/categories.csv"))
    manifest = manifest_of("changeit")
    assert len(actions) == 44 and actions["cube"] == "Rubik's Cube Solving"
    assert set(actions) == set(manifest["objects"])
    assert [[d, a] for d, a, _ in manifest["categories_table"]] == [[d, a] for d, a in actions.items()]
    labels = parse_labels_csv(file_text(f"{REAL}/labels.csv"))
    assert labels == {0: "background/noannotation", 1: "state1", 2: "action", 3: "state2"}


def test_every_real_annotation_parses_and_is_listed():
    labels = {0, 1, 2, 3}
    seen = 0
    for category in sorted(os.listdir(f"{REAL}/annotations")):
        listed_text = file_text(f"{REAL}/videos/{category}.csv")
        assert not listed_text.endswith("\n")  # the real lists have no final newline
        listed = parse_video_list(listed_text)
        assert len(listed) == listed_text.count("\n") + 1 and all(len(i) == 11 for i in listed)
        for name in sorted(os.listdir(f"{REAL}/annotations/{category}")):
            per_second = parse_annotation(
                file_text(f"{REAL}/annotations/{category}/{name}"), labels)
            assert len(per_second) >= 6 and video_id_of(name) in listed
            seen += 1
    assert seen == 48 and video_id_of("-IBU2ag0kHU.fps1.csv") == "-IBU2ag0kHU"


def test_miniature_repository_files_are_byte_identical_to_the_real_ones(source):
    for name in ("categories.csv", "labels.csv"):
        with open(os.path.join(source, "changeit", name), "rb") as mine, \
                open(os.path.join(REAL, name), "rb") as real:
            assert mine.read() == real.read()
    text = file_text(os.path.join(source, "changeit", "videos", "apple.csv"), "ascii")
    assert not text.endswith("\n") and "-aB3dE5fG7h" in parse_video_list(text)
    scores = [float(line.split(",")[1]) for line in text.splitlines()]
    assert scores == sorted(scores, reverse=True)


def test_miniature_is_deterministic(tmp_path):
    ChangeIt.write_miniature(str(tmp_path / "a"))
    ChangeIt.write_miniature(str(tmp_path / "b"))
    for folder, _, names in os.walk(tmp_path / "a"):
        for name in names:
            path = os.path.join(folder, name)
            twin = os.path.join(tmp_path / "b", os.path.relpath(path, tmp_path / "a"))
            assert file_bytes(path) == file_bytes(twin), path


# ---- parsing and planning rules -----------------------------------------------------------------

@pytest.mark.parametrize("text, reason", [
    ("0,0\n1,0\n3,2\n", "seconds not consecutive"),
    ("0,0\n0,1\n", "seconds not consecutive"),
    ("0,0\n1,1.0\n", "non-integer"),
    ("0,0\n1,x\n", "non-integer"),
    ("0,0\n1,7\n", "unknown label 7"),
    ("0,0,1\n", "fields"),
    ("", "no rows"),
    ("\n\n", "no rows"),
])
def test_bad_annotations_are_rejected_with_a_reason(text, reason):
    with pytest.raises(BadItem, match=reason):
        parse_annotation(text, {0, 1, 2, 3})


def test_annotation_without_final_newline_parses():
    assert parse_annotation("0,0\n1,2", {0, 1, 2, 3}) == [0, 2]


def test_blank_lines_and_crlf_in_an_annotation_are_harmless_variants():
    assert parse_annotation("0,0\r\n\r\n1,2\r\n\n", {0, 1, 2, 3}) == [0, 2]


def test_step_shrinks_until_an_informative_second_is_reachable():
    labels = [0] * 40
    labels[13] = 2  # one action second, not a multiple of the base step 2
    plan = plan_sequence(labels, {2}, target_frames=20, max_frames=60,
                         require_uninformative_first=True)
    assert plan["step_size"] == 1 and plan["reference_image"] == 13
    assert plan["frame_ids"] == list(range(40)) and plan["max_steps"] == 40
    with pytest.raises(Excluded, match="informative_frame_unreachable"):
        plan_sequence(labels, {2}, target_frames=20, max_frames=20,
                      require_uninformative_first=True)


def test_plan_rules():
    base = [0] * 5 + [2] * 30 + [3] * 10
    plan = plan_sequence(base, {2}, 20, 60, True)
    assert plan["step_size"] == 3 and plan["reference_image"] == 6  # first multiple of 3 in [5, 35)
    assert plan["num_images"] == 45 and plan["frame_ids"] == list(range(0, 45, 3))
    with pytest.raises(Excluded, match="no_informative_frame"):
        plan_sequence([0, 1, 3], {2}, 20, 60, True)
    with pytest.raises(Excluded, match="informative_first_frame"):
        plan_sequence([1, 1, 2], {1, 2, 3}, 20, 60, True)
    assert plan_sequence([1, 1, 2], {1, 2, 3}, 20, 60, False)["reference_image"] == 0


# ---- the built records, field by field ----------------------------------------------------------

def test_build_accounts_for_every_raw_item(built):
    report = built[1]["scenarios"]["changeit"]
    # 5 annotated videos x 2 question types
    assert report["raw_items"] == 10 and report["accounted"] and report["dead_letters"] == 0
    assert report["excluded"] == {"informative_first_frame": 1, "no_informative_frame": 1}
    assert report["samples"] == 8 and report["config"] == CONFIG


def test_one_sample_per_video_and_question_type(rows):
    keys = sorted(r["key"] for r in rows)
    assert keys == sorted([
        "ChangeIt/apple/-aB3dE5fG7h/action", "ChangeIt/apple/-aB3dE5fG7h/object",
        "ChangeIt/apple/Qw3_rTy8uIo/action",                       # starts with state1: no object
        "ChangeIt/beer/Qw3_rTy8uIo/action", "ChangeIt/beer/Qw3_rTy8uIo/object",  # same id, 2 cats
        "ChangeIt/beer/Zx9-cVb7nM1/object",                        # no action annotated
        "ChangeIt/tie/Lm4kJh8gF2d/action", "ChangeIt/tie/Lm4kJh8gF2d/object"])
    assert [r["id"] for r in sorted(rows, key=lambda r: r["key"])] == list(range(8))
    for row in rows:
        assert row["question_type"] == row["key"].rsplit("/", 1)[1]


def test_frame_sequence_and_navigation_fields(rows):
    truth = miniature_labels()
    params = manifest_of("changeit")["parameters"]
    for row in rows:
        _, category, video_id, qt = row["key"].split("/")
        labels = truth[(category, video_id)]
        informative = set(params[f"{qt}_labels"])
        n, step = row["num_images"], row["step_size"]
        assert n == len(labels)                                    # one image per annotated second
        assert row["image_template"] == f"ChangeIt/{category}/{video_id}/{{image}}.jpg"
        assert row["first_image"] == 0 and labels[0] not in informative
        assert row["frame_ids"] == list(range(0, n, step))         # exactly the reachable frames
        assert step == max(1, -(-n // params["target_frames"]))    # ceil(n / 20) here
        assert row["max_steps"] == len(row["frame_ids"])
        ref = row["reference_image"]
        assert ref in row["frame_ids"] and labels[ref] in informative
        assert all(labels[k] not in informative for k in row["frame_ids"] if k < ref)
        for extra in NULL_EXTRAS:
            assert row[extra] is None, extra


def test_frames_show_the_annotated_second(rows):
    """Each frame (pre-extracted or decoded from mp4/webm) is painted with its second's label."""
    truth = miniature_labels()
    for row in rows:
        _, category, video_id, _ = row["key"].split("/")
        assert len(row["frames"]) == len(row["frame_ids"])
        for k, image in zip(row["frame_ids"], row["frames"]):
            assert image.size == (64, 48)
            assert label_of_colour(image) == truth[(category, video_id)][k], (row["key"], k)


def test_question_options_categories_and_answer(rows):
    manifest = manifest_of("changeit")
    actions = {d: a for d, a, _ in manifest["categories_table"]}
    for row in rows:
        category, qt = row["key"].split("/")[1], row["question_type"]
        assert row["prompt"] in (OBJECT_QUESTIONS if qt == "object" else ACTION_QUESTIONS)
        assert len(row["options"]) == 3
        abstain = [o for o in row["options"] if is_abstain(o)]
        proactive = [o for o in row["options"] if not is_abstain(o)]
        assert len(abstain) == 1
        assert sorted(proactive) == sorted([REWIND_OPTION, WAIT_OPTIONS[qt]])
        expected = manifest["objects"][category] if qt == "object" else actions[category]
        assert row["answer"] == expected.capitalize() + "."
        assert len(set(row["categories"])) == 4 and row["answer"] in row["categories"]
        assert all(c.endswith(".") and c[0].isupper() for c in row["categories"])
        files = row["source"]["files"]
        assert files[0] == f"annotations/{category}/{row['key'].split('/')[2]}.fps1.csv"
        assert row["source"]["license"].startswith("MIT")


def test_oracle_reaches_the_reference_within_max_steps(rows):
    """Upstream's rules: rewind hidden while id - step < 0, wait hidden when id + step >= n, the
    episode stops after max_steps model calls (the answer is one of them)."""
    for row in rows:
        image, turns, step, n = row["first_image"], 0, row["step_size"], row["num_images"]
        while image != row["reference_image"]:
            assert image + step < n, "the wait option must be shown"
            image += step
            turns += 1
            assert image in row["frame_ids"]
        assert turns + 1 <= row["max_steps"]
        last = row["frame_ids"][-1]
        assert last + step >= n and 0 - step < 0  # wait hidden at the end, rewind at the start


def test_upstream_export_names_every_frame(built, rows):
    output = built[0]
    lines = read_jsonl(os.path.join(output, "upstream", "ChangeIt_preprocessed.jsonl"))
    assert len(lines) == len(rows)
    by_key = {r["key"]: r for r in rows}
    for line in lines:
        assert line["step_size"] >= 1 and line["max_steps"] >= 2 and "valid_images" not in line
        row = by_key[line["key"]]
        for k, image in zip(line["frame_ids"], row["frames"]):
            path = os.path.join(output, "upstream", line["image_template"].format(image=str(k)))
            assert os.path.isfile(path), path
            with open(path, "rb") as handle:
                assert Image.open(io.BytesIO(handle.read())).size == image.size
        assert os.path.isfile(os.path.join(output, "upstream", line["image_template"].format(
            image=str(line["reference_image"]))))


def test_pre_extracted_frames_pass_through_unchanged(built, source):
    output = built[0]
    path = "ChangeIt/apple/-aB3dE5fG7h/3.jpg"
    with open(os.path.join(output, "upstream", path), "rb") as exported, \
            open(os.path.join(source, "changeit", "frames/apple/-aB3dE5fG7h/3.jpg"), "rb") as raw:
        assert exported.read() == raw.read()


# ---- determinism ------------------------------------------------------------------------------

def test_choices_depend_only_on_seed_and_key(source):
    root = os.path.join(source, "changeit")
    a, b, other = ChangeIt(0, root), ChangeIt(0, root), ChangeIt(1, root)
    key = "ChangeIt/apple/-aB3dE5fG7h/object"
    assert a.pick_prompt(key, OBJECT_QUESTIONS) == b.pick_prompt(key, OBJECT_QUESTIONS)
    opts = [REWIND_OPTION, WAIT_OPTIONS["object"]]
    assert a.build_options(key, opts) == b.build_options(key, opts)
    assert len({tuple(ChangeIt(s, root).build_options(key, opts)) for s in range(12)}) > 1
    pool = list(manifest_of("changeit")["objects"].values())
    assert a.pick_categories(key, "apple", pool) == b.pick_categories(key, "apple", pool)
    assert other.rng(key, "prompt").random() != a.rng(key, "prompt").random()


def test_a_video_frame_is_the_same_whatever_was_read_before(source):
    root = os.path.join(source, "changeit")
    url = os.path.join(root, "downloads", "tie", "Lm4kJh8gF2d.mp4")
    forward = ChangeIt(0, root)
    frames = {k: forward.load_frame({"kind": "video", "url": url, "second": k}) for k in range(22)}
    backward = ChangeIt(0, root)
    for k in reversed(range(22)):
        assert backward.load_frame({"kind": "video", "url": url, "second": k}) == frames[k]


def test_rebuild_is_byte_identical(built, source, tmp_path):
    copy = tmp_path / "src"
    # another path and another listing: the same output
    shutil.copytree(os.path.join(source, "changeit"), copy / "changeit")
    output = str(tmp_path / "again")
    run(output, str(copy), "changeit", "--upstream_export")
    assert shard_files(output) == shard_files(built[0], CONFIG)
    for name in ("ChangeIt_preprocessed.jsonl",):
        assert file_bytes(os.path.join(output, "upstream", name)) == \
            file_bytes(os.path.join(built[0], "upstream", name))


# ---- bad raw items ------------------------------------------------------------------------------

def _add_annotation(root, category, video_id, labels, listed=True, text=None):
    folder = os.path.join(root, "annotations", category)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{video_id}.fps1.csv"), "w") as handle:
        handle.write(text if text is not None else "".join(f"{s},{l}\n" for s, l in enumerate(labels)))
    if listed:
        id_list = os.path.join(root, "videos", f"{category}.csv")
        with open(id_list, "a") as handle:
            handle.write(f"\n{video_id},0.050")


def _write_short_mp4(path, seconds):
    import cv2
    import numpy as np

    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), 4, (64, 48))
    for _ in range(seconds * 4):
        writer.write(np.full((48, 64, 3), 128, np.uint8))
    writer.release()


def test_bad_raw_items_become_dead_letters_and_the_build_goes_on(source, tmp_path):
    top = tmp_path / "src"
    shutil.copytree(os.path.join(source, "changeit"), top / "changeit")
    root = str(top / "changeit")
    good = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    _add_annotation(root, "apple", "GapGapGap01", None, text="0,0\n1,0\n3,2\n")
    _add_annotation(root, "apple", "FloatLab_01", None, text="0,0\n1,0.5\n2,2\n")
    _add_annotation(root, "apple", "NotListed01", good, listed=False)
    _add_annotation(root, "apple", "NoMedia0001", good)
    os.makedirs(os.path.join(root, "videos"), exist_ok=True)
    _add_annotation(root, "unicorn", "Unicorn0001", good)           # not in categories.csv
    with open(os.path.join(root, "annotations", "apple", "notes.txt"), "w") as handle:
        handle.write("stray file\n")
    os.remove(os.path.join(root, "frames", "beer", "Qw3_rTy8uIo", "3.jpg"))        # missing frame
    jpg = os.path.join(root, "frames", "apple", "-aB3dE5fG7h", "6.jpg")
    data = file_bytes(jpg)
    open(jpg, "wb").write(data[: len(data) - 40])                                  # truncated
    with open(os.path.join(root, "downloads", "apple", "Qw3_rTy8uIo.mp4"), "wb") as handle:
        handle.write(b"this is not a video")                                      # unreadable
    _write_short_mp4(os.path.join(root, "downloads", "tie", "Lm4kJh8gF2d.mp4"), 5)  # too short

    output = str(tmp_path / "out_bad")
    report = run(output, str(top), "changeit", "--max_bad_fraction=1.0")["scenarios"]["changeit"]
    dead = read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
    by_path = {}
    for letter in dead:
        assert letter["scenario"] == "changeit" and letter["reason"]
        by_path.setdefault(letter["path"], []).append(letter)

    def reasons(path):
        return " | ".join(sorted({d["reason"] for d in by_path[path]}))

    expected = {
        "annotations/apple/GapGapGap01.fps1.csv": "seconds not consecutive",
        "annotations/apple/FloatLab_01.fps1.csv": "non-integer",
        "annotations/apple/NotListed01.fps1.csv": "not listed in videos/apple.csv",
        "annotations/unicorn/Unicorn0001.fps1.csv": "unknown category",
        "annotations/apple/notes.txt": "unexpected file",
        "downloads/apple/NoMedia0001": "missing video",
        "frames/beer/Qw3_rTy8uIo/3.jpg": "missing frame file",
        "frames/apple/-aB3dE5fG7h/6.jpg": "truncated JPEG",
        "downloads/apple/Qw3_rTy8uIo.mp4": "unreadable video",
        "downloads/tie/Lm4kJh8gF2d.mp4": "video too short",
    }
    for path, reason in expected.items():
        assert path in by_path, (path, sorted(by_path))
        assert reason in reasons(path), (path, reasons(path))
    # a bad annotation loses both of its questions, each named by its key
    assert sorted(d["key"] for d in by_path["annotations/apple/GapGapGap01.fps1.csv"]) == [
        "ChangeIt/apple/GapGapGap01/action", "ChangeIt/apple/GapGapGap01/object"]
    assert report["accounted"]
    assert report["raw_items"] == report["samples"] + report["dead_letters"] + sum(
        report["excluded"].values())
    assert report["dead_letters"] == len(dead)
    kept = {r["key"] for r in load_rows(output, str(tmp_path / "hf_cache"))}
    assert kept == {"ChangeIt/beer/Zx9-cVb7nM1/object"}  # the untouched video still builds


@pytest.mark.build
def test_real_repository_files_build_end_to_end(tmp_path):
    """The real apple/avocado/eggs repository files, with frames supplied for one real video:
    it becomes samples, every other annotated video is a 'missing video' dead letter or a rule
    exclusion, and the accounting holds."""
    top = tmp_path / "src"
    root = top / "changeit"
    shutil.copytree(REAL, root)
    labels = parse_annotation(file_text(f"{REAL}/annotations/eggs/jU3_JVh1YwA.fps1.csv"),
                              {0, 1, 2, 3})
    from proactivebench_builder.transforms.changeit.miniature import _painted_frame
    from proactivebench_builder.transforms.changeit.video import encode_jpeg
    folder = root / "frames" / "eggs" / "jU3_JVh1YwA"
    folder.mkdir(parents=True)
    for second, label in enumerate(labels):
        (folder / f"{second}.jpg").write_bytes(encode_jpeg(_painted_frame(label, second), 90))
    output = str(tmp_path / "out_real")
    report = run(output, str(top), "changeit", "--max_bad_fraction=1.0")["scenarios"]["changeit"]
    assert report["raw_items"] == 96 and report["accounted"]
    assert report["samples"] == 2
    assert set(report["dead_letters_by_reason"]) == {"missing video"}
    assert report["excluded"] == {"informative_first_frame": 17, "no_informative_frame": 4}
    assert report["dead_letters"] == 96 - 21 - 2  # the rules keep 75 pairs; 73 lack their video
    built_rows = load_rows(output, str(tmp_path / "hf_cache"))
    for row in built_rows:
        assert row["key"].startswith("ChangeIt/eggs/jU3_JVh1YwA/")
        assert label_of_colour(row["frames"][row["frame_ids"].index(row["reference_image"])]) \
            in (1, 2, 3)


def test_the_evaluation_runtime_plays_the_rows_as_upstream(rows):
    """Our runtime (upstream's ChangeIt rules): the oracle waits to the reference and answers."""
    from proactivebench_builder.runtime.environments import make_environment, reachable_frame_ids

    for row in rows:
        assert reachable_frame_ids(row, CONFIG) == row["frame_ids"]
        env = make_environment(row, config=CONFIG)
        assert REWIND_OPTION not in env.displayed_options()  # hidden at the first frame
        while env.image_id != row["reference_image"]:
            env.step(WAIT_OPTIONS[row["question_type"]])
            assert not env.done
        env.step(row["answer"])
        assert env.done and env.correct
        assert env.num_turns <= row["max_steps"]


def test_last_annotated_second_may_lie_just_past_the_last_frame(tmp_path):
    """ffmpeg's fps=1 rounds to the nearest second, so an annotation can name a second just past
    a video's last frame (that frame stands in); further than the tolerance is too short."""
    from proactivebench_builder.transforms.changeit.video import VideoReader

    path = str(tmp_path / "v.mp4")
    _write_short_mp4(path, 15)
    reader = VideoReader(path)
    try:
        assert reader.frame_at(14.0) is not None and reader.frame_at(15.2) is None
        assert reader.frame_at(15.2, tail_s=1.0) is not None
        assert reader.frame_at(16.5, tail_s=1.0) is None
    finally:
        reader.close()


def test_dead_letter_reasons_carry_no_object_addresses(tmp_path):
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8not a jpeg at all")
    with pytest.raises(BadItem) as caught:
        ChangeIt(0, str(tmp_path))._validate_frame_file(str(tmp_path / "bad.jpg"))
    assert "undecodable image" in caught.value.reason and "0x" not in caught.value.reason


def test_a_remote_video_is_decoded_from_a_temporary_copy(source):
    """OpenCV needs a local file: a video under any fsspec URL is copied, read, then removed."""
    import fsspec

    from proactivebench_builder.transforms.changeit.video import VideoReader

    local = os.path.join(source, "changeit", "downloads", "tie", "Lm4kJh8gF2d.mp4")
    url = "memory://changeit-test/Lm4kJh8gF2d.mp4"
    with fsspec.open(url, "wb") as handle:
        handle.write(file_bytes(local))
    remote, here = VideoReader(url), VideoReader(local)
    try:
        assert remote.temporary and os.path.exists(remote.path)
        assert (remote.frame_at(7.0) == here.frame_at(7.0)).all()
    finally:
        remote.close()
        here.close()
    assert not os.path.exists(remote.path)


@pytest.fixture(scope="module")
@builds
def video_fifo_build(tmp_path_factory, miniature_root):
    """A ChangeIt build whose one .webm video is a FIFO."""
    tmp_path = tmp_path_factory.mktemp("video_fifo")
    sources = copy_sources(miniature_root, tmp_path, "changeit")
    video = os.path.join(sources, "changeit", "downloads", "beer", "Zx9-cVb7nM1.webm")
    replace(video, os.mkfifo)
    return build(tmp_path, sources, "changeit")


def test_a_fifo_in_place_of_a_video_is_a_dead_letter_never_decoded(video_fifo_build):
    """OpenCV (FFmpeg) would block on a FIFO for ever: the video is refused before it is
    opened for reading, a dead letter naming it; the build goes on and balances."""
    result, output = video_fifo_build
    assert result.returncode == 0, result.stderr[-3000:]
    reasons = dead_letter_reasons(output)
    assert any("Zx9-cVb7nM1" in path and "named pipe" in reason
               for path, reason in reasons.items()), reasons
    assert balanced(read_json(os.path.join(output, "reports", "build.json")))


def test_a_fifo_in_place_of_a_video_is_an_ordinary_dead_letter(video_fifo_build):
    result, output = video_fifo_build
    assert "Traceback" not in result.stderr
    reasons = [r for p, r in dead_letter_reasons(output).items() if "Zx9-cVb7nM1" in p]
    assert reasons and all(not r.startswith("unexpected error") for r in reasons), reasons


# ---- ChangeIt: categories.csv and labels.csv -------------------------------------------------------

@pytest.fixture(scope="module")
@builds
def changeit_source(tmp_path_factory) -> str:
    return os.path.join(private_miniature(tmp_path_factory, "changeit"), "changeit")


def _changeit_root(source: str, tmp_path) -> str:
    """A private copy of ChangeIt's miniature, without its (large) frames and videos."""
    root = str(tmp_path / "changeit")
    shutil.copytree(source, root, ignore=shutil.ignore_patterns("frames", "downloads"))
    return root


@pytest.mark.parametrize("name,damage", [
    ("categories.csv", lambda t: t.replace(b'"Bacon Frying"', b"Bacon\rFrying", 1)),
    ("labels.csv", lambda t: t.replace(b'"action"', b"act\rion", 1)),
    ("categories.csv", lambda t: t + b'x,"' + b"y" * 200000 + b'",0.1\n'),
    ("labels.csv", lambda t: t + b"\xff\xfe\n"),
    ("categories.csv", lambda t: t + b"\xff\xfe\n"),
])
def test_a_broken_table_is_one_line_naming_it(name, damage, changeit_source, tmp_path):
    """Listing the units stops the build with one line naming it."""
    from proactivebench_builder.core.errors import SourceError
    from proactivebench_builder.transforms.changeit.scenario import ChangeIt

    root = _changeit_root(changeit_source, tmp_path)
    path = os.path.join(root, name)
    with open(path, "rb") as handle:
        text = handle.read()
    with open(path, "wb") as handle:
        handle.write(damage(text))
    with pytest.raises(SourceError, match=name.replace(".", r"\.")):
        ChangeIt(0, root).list_units()


def test_tables_with_carriage_return_line_ends_parse(changeit_source, tmp_path):
    """CR-only line ends (an old Mac export) are line ends, as CSV says, not an error."""
    from proactivebench_builder.transforms.changeit.scenario import ChangeIt

    root = _changeit_root(changeit_source, tmp_path)
    before = ChangeIt(0, root).list_units()
    for name in ("categories.csv", "labels.csv"):
        path = os.path.join(root, name)
        with open(path, "rb") as handle:
            text = handle.read()
        with open(path, "wb") as handle:
            handle.write(text.replace(b"\n", b"\r"))
    scenario = ChangeIt(0, root)
    assert scenario.list_units() == before
    values = list(scenario.read_unit(before[0]))
    assert any(isinstance(v, results.Candidate) for v in values)


# ---- ChangeIt: a video id holding braces ---------------------------------------------------------

def test_a_changeit_video_id_with_braces_keeps_its_name(changeit_source, tmp_path):
    root = str(tmp_path / "changeit")
    shutil.copytree(changeit_source, root)
    scenario = get_scenario_named("changeit", root)
    unit = scenario.list_units()[0]
    category = os.path.basename(unit)
    name = sorted(n for n in os.listdir(unit) if n.endswith(".fps1.csv"))[0]
    video = name.split(".", 1)[0]
    os.rename(os.path.join(unit, name), os.path.join(unit, f"{video}{{v}}.fps1.csv"))
    frames = os.path.join(root, scenario.params["frames_dir"], category)
    os.rename(os.path.join(frames, video), os.path.join(frames, video + "{v}"))
    listing = os.path.join(root, "videos", f"{category}.csv")
    with open(listing, encoding="utf-8") as handle:
        text = handle.read()
    with open(listing, "w", encoding="utf-8") as handle:
        handle.write(text.replace(video + ",", video + "{v},"))
    paths = _frame_paths_of(scenario, values_of(scenario, unit))
    braced = [p for key, ps in paths.items() if "{v}" in key for p in ps]
    assert braced and all(p.startswith(f"ChangeIt/{category}/{video}{{v}}/") for p in braced)
