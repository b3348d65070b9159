"""Regenerating the benchmark (README, "Regenerating the benchmark"), played on small copies:

- route 1, the released split: a release-shaped `test/` folder (records in the release's JSONL
  format with tiny images, under the real released ids of ROD and VSOD) imported with
  `--keep_list released`: the released counts are checked, a folder whose records keep another
  count is refused in one line before any work;
- route 2's labels: `release_labels` reads release-shaped MVP-N and VSOD records and writes the
  files their manifests read, and a build from them holds no placeholders;
- builds say what stands in for the benchmark, and `publish --repo_id` refuses them unasked;
- a config whose test split is empty writes no 0-row shard and still loads;
- the released train split's confidence columns, filled from train predictions;
- what used to end in a traceback is one line (a missing fsspec backend, an unreachable store
  or Hub), and the Dataflow requirements file installs.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import datasets
import fsspec
import pytest
from PIL import Image

from conftest import IN_PROCESS, RUNNER, builds, read_json, run, shard_files
from proactivebench_builder.core.errors import SourceError
from proactivebench_builder.core.manifests import load_data_file
from proactivebench_builder.pipeline.commands import main as cli
from proactivebench_builder.pipeline.commands.build import run_build
from proactivebench_builder.pipeline.miniature import ensure_miniature_sources
from proactivebench_builder.transforms import load_scenarios

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASED = load_data_file("released_keep_list.json")["kept_ids"]
ROD, VSOD, MVPN = "Realistic-Occlusion-Dataset", "OcclusionDataSet-MM20", "MVP-N"


def tiny_jpeg(shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (shade, 40, 200 - shade)).save(out, "JPEG")
    return out.getvalue()


def write_release(folder, records: dict[str, list[dict]], frames: dict[str, bytes]) -> str:
    """A release-shaped test/ folder: `<config>_preprocessed.jsonl` + the image files."""
    os.makedirs(folder, exist_ok=True)
    for config, rows in records.items():
        with open(os.path.join(folder, f"{config}_preprocessed.jsonl"), "w") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in rows)
    for path, data in frames.items():
        os.makedirs(os.path.dirname(os.path.join(folder, path)), exist_ok=True)
        with open(os.path.join(folder, path), "wb") as handle:
            handle.write(data)
    return str(folder)


def rod_records():
    """ROD's 88 released ids, each a 14-frame record as upstream's environment reads it."""
    records, frames = [], {}
    for i in RELEASED[ROD]:
        stem = ("natural_redbl_greenr-orange", "natural_redcard_whiter-vase")[i % 2]
        template = f"{ROD}/{stem}-s{{image}}.jpg"
        records.append({
            "id": i, "image_template": template, "first_image": 7, "num_images": 14,
            "reference_image": 0, "prompt": "What is behind the red blocks?",
            "options": ["Move the red blocks to the left.", "I cannot tell.",
                        "Move the red blocks to the right."],
            "categories": ["Orange.", "Vase.", "Hammer.", "Plate."],
            "answer": "Orange." if i % 2 == 0 else "Vase."})
        for frame in range(14):
            frames[template.format(image=frame)] = tiny_jpeg(10 * frame)
    return records, frames


VSOD_EXTRA_IDS = (0, 1, 2, 3)  # in the release's pool, not in its kept ids


def vsod_records():
    """VSOD's 42 released ids (strong clips) and a few records the keep-list drops, one of them
    a weak clip, as in the release's pool."""
    speakers = ["Ursula von der leyen.", "Ge you.", "José mourinho.", "Monika schnitzer."]
    records, frames = [], {}
    ids = sorted(set(RELEASED[VSOD]) | set(VSOD_EXTRA_IDS))
    for n, i in enumerate(ids):
        template = f"{VSOD}/clip_{n % 3:04d}/{{image}}.jpg"
        records.append({
            "id": i, "image_template": template, "first_image": 1, "num_images": 4,
            "reference_image": 3, "prompt": "Could you tell me who is talking?",
            "options": ["Rewind the video.", "I cannot answer this question.",
                        "Wait for the occlusion to disappear."],
            "categories": speakers, "answer": speakers[n % 4],
            "strong_occlusions": i != VSOD_EXTRA_IDS[0]})
        for frame in range(4):
            frames[template.format(image=f"{frame:04d}")] = tiny_jpeg(30 * frame)
    return records, frames


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> str:
    rod, rod_frames = rod_records()
    vsod, vsod_frames = vsod_records()
    return write_release(tmp_path_factory.mktemp("release") / "test", {ROD: rod, VSOD: vsod},
                         {**rod_frames, **vsod_frames})


def build_cli(*argv, runner: str = RUNNER) -> int:
    """The build command, run in this process (on the local runner, by one in-memory worker)."""
    return cli.main([*argv, runner, *([IN_PROCESS] if runner == RUNNER else [])])


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ---- route 1: the released split ---------------------------------------------------------------

@pytest.mark.build
def test_route_1_imports_the_release_and_checks_its_counts(tmp_path, release):
    out = str(tmp_path / "released")
    report = run(out, "/unused", "rod,vsod", f"--import_upstream={release}",
                 "--keep_list=released")
    assert report["status"] == "ok"
    rod = datasets.load_dataset(out, name=ROD, split="test")
    vsod = datasets.load_dataset(out, name=VSOD, split="test")
    assert sorted(rod["id"]) == RELEASED[ROD] and len(rod) == 88
    assert sorted(vsod["id"]) == RELEASED[VSOD] and len(vsod) == 42
    assert len(datasets.load_dataset(out, name=VSOD, split="unfiltered")) == 42 + len(VSOD_EXTRA_IDS)
    assert report["stand_ins"] == {}  # the release's own records: nothing stands in
    card = open(os.path.join(out, "README.md")).read()
    assert "not the benchmark" not in card
    assert "pretty_name: ProactiveBench (imported from the upstream release)" in card
    # then as the README goes on: validate, and play it
    from proactivebench_builder.runtime.cli import main as evaluate

    assert cli.main(["validate", out]) == 0
    results = tmp_path / "oracle.jsonl"
    assert evaluate(["evaluate", "--data", out, "--model", "oracle", "--results",
                     str(results)]) == 0
    assert len(results.read_text().splitlines()) == 88 + 42


@pytest.mark.parametrize("damage, expected", [
    ("drop a ROD record", f"{ROD}: its records keep 87 samples where the release keeps 88"),
    ("weaken a kept VSOD clip", f"{VSOD}: its records keep 41 samples where the release keeps 42"),
])
def test_route_1_refuses_a_folder_that_is_not_the_release(tmp_path, release, capsys, damage,
                                                          expected):
    copy = str(tmp_path / "test")
    shutil.copytree(release, copy)
    config = ROD if "ROD" in damage else VSOD
    path = os.path.join(copy, f"{config}_preprocessed.jsonl")
    lines = open(path).read().splitlines()
    if config == ROD:
        lines = lines[1:]
    else:
        kept = next(n for n, line in enumerate(lines) if json.loads(line)["id"] in RELEASED[VSOD])
        lines[kept] = json.dumps(dict(json.loads(lines[kept]), strong_occlusions=False))
    open(path, "w").write("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert build_cli(f"--output={out}", "--scenarios=rod,vsod", f"--import_upstream={copy}",
                     "--keep_list=released") == 2
    line = one_line(capsys.readouterr().err)
    assert expected in line and "not the release's test/ folder" in line
    assert not out.exists()  # refused before any work


def test_route_1_refuses_a_release_folder_missing_a_chosen_config(tmp_path, release, capsys):
    out = tmp_path / "out"
    assert build_cli(f"--output={out}", "--scenarios=rod,vsod,mvpn", f"--import_upstream={release}",
                     "--keep_list=released") == 2
    line = one_line(capsys.readouterr().err)
    assert "lacks MVP-N_preprocessed.jsonl (the release keeps 2,591 samples)" in line
    assert not out.exists()


PATCHED = "natural_bluebl_greenr-banana"  # the sequence upstream's ROD environment patches


def release_lacking_the_patched_frame(folder, s6: str) -> str:
    """The release-shaped ROD and VSOD records, ROD's id 0 being the banana sequence whose s6
    upstream shows as s5 or s7: that frame `missing` or `corrupt`, as in the release."""
    rod, frames = rod_records()
    rod[0] = dict(rod[0], image_template=f"{ROD}/{PATCHED}-s{{image}}.jpg",
                  options=["Move the blue blocks to the left.", "I cannot tell.",
                           "Move the blue blocks to the right."],
                  categories=["Banana.", "Vase.", "Hammer.", "Plate."], answer="Banana.")
    for frame in range(14):
        frames[f"{ROD}/{PATCHED}-s{frame}.jpg"] = tiny_jpeg(10 * frame + 5)
    if s6 == "missing":
        del frames[f"{ROD}/{PATCHED}-s6.jpg"]
    else:
        frames[f"{ROD}/{PATCHED}-s6.jpg"] = b"\xff\xd8\xff\xe0 not a whole JPEG"
    vsod, vsod_frames = vsod_records()
    return write_release(folder, {ROD: rod, VSOD: vsod}, {**frames, **vsod_frames})


@pytest.mark.build
@pytest.mark.parametrize("s6", ["missing", "corrupt"])
def test_route_1_imports_a_release_lacking_the_frame_upstream_patches(tmp_path, s6):
    """Upstream's ROD environment never shows natural_bluebl_greenr-banana-s6 (it shows s5
    when LEFT led there, else s7): the import neither needs it nor drops the sample, the
    released counts hold, the folder validates, and the sample plays as upstream plays it."""
    from proactivebench_builder.runtime import environments as envs

    folder = release_lacking_the_patched_frame(tmp_path / "test", s6)
    out = str(tmp_path / "released")
    report = run(out, "/unused", "rod,vsod", f"--import_upstream={folder}",
                 "--keep_list=released")
    assert report["status"] == "ok" and report["scenarios"]["rod"]["dead_letters"] == 0
    assert cli.main(["validate", out]) == 0
    rod = datasets.load_dataset(out, name=ROD, split="test")
    assert len(rod) == 88 and rod["id"] == RELEASED[ROD]  # every sample, in id order
    row = rod[0]
    assert row["frame_ids"] == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13]
    left, right = row["options"][0], row["options"][2]
    env = envs.make_environment(row)
    shown = [env.shown_frame_id()]
    for answer in (left, left, right, right):
        env.step(answer)
        shown.append(env.shown_frame_id())
    # states 7, 6 (by LEFT: s5), 5, 6 (by RIGHT: s7), 7
    assert shown == [7, 5, 5, 7, 7]
    on_disk = open(os.path.join(folder, ROD, f"{PATCHED}-s5.jpg"), "rb").read()
    env = envs.make_environment(row)
    env.step(left)
    assert env.current_image().tobytes() == Image.open(io.BytesIO(on_disk)).convert("RGB").tobytes()


def test_route_1_points_at_the_test_folder(tmp_path, release, capsys):
    assert build_cli(f"--output={tmp_path / 'out'}", "--scenarios=rod",
                     f"--import_upstream={os.path.dirname(release)}",
                     "--keep_list=released") == 2
    assert f"--import_upstream {release}" in one_line(capsys.readouterr().err)


@pytest.mark.build
def test_route_1_build_fails_when_a_record_of_the_release_cannot_be_read(tmp_path, release,
                                                                         capsys):
    """The records count right, but a frame is missing (an archive not unzipped): the build
    fails naming the count it reached and the first file it could not import, and says to
    replace it, rather than publishing a smaller split."""
    copy = str(tmp_path / "test")
    shutil.copytree(release, copy)
    os.remove(os.path.join(copy, ROD, "natural_redbl_greenr-orange-s3.jpg"))
    assert build_cli(f"--output={tmp_path / 'out'}", "--scenarios=rod",
                     f"--import_upstream={copy}", "--keep_list=released",
                     "--max_bad_fraction=1") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{ROD}: the build keeps 44 samples where the release keeps 88" in err
    assert "the first that could not be imported: " in err and "orange" in err, err
    assert "replace the release's files named in reports/dead_letters.jsonl" in err
    assert "without the filter" not in err


# ---- route 2: labels only the release holds --------------------------------------------------------

def mvpn_release_records():
    """A release-shaped MVP-N JSONL: every class named by one or two records."""
    classes = load_scenarios()["mvpn"].read_manifest()["classes"]
    records = []
    for n, cls in enumerate(classes):
        for k in range(1 + n % 2):
            records.append({
                "id": len(records), "image_template": f"MVP-N/{cls}/{k:04d}/{{image}}_{{informative}}.png",
                "first_image": 0, "num_images": 2, "reference_image": 1, "valid_images": [0, 1],
                "prompt": "Identify the object in this image.",
                "options": ["Rotate the object.", "I cannot tell."],
                "categories": [f"Shelf product {cls}.", "A.", "B.", "C."],
                "answer": f"Shelf product {cls}."})
    return records


SPEAKERS = ["Angela merkel.", "Ge you.", "Jane goodall.", "Pep guardiola.", "Tom hanks."]
EVENTS = ["Parliament session.", "Cooking show.", "Press conference.", "Lecture."]
COUNTS = ["One.", "Two.", "Three.", "Four."]


def vsod_release_records():
    """Release-shaped VSOD records for the miniature's segments (no `question_type`: it is read
    from the prompt), with frame pins."""
    rows = [("seg_0001", "Who is speaking in this clip?", SPEAKERS, "Tom hanks."),
            ("seg_0001", "How many people are in the scene?", COUNTS, "Two."),
            ("seg_0001", "What kind of event is this?", EVENTS, "Parliament session."),
            ("seg_0002", "Can you say who is talking?", SPEAKERS, "Jane goodall."),
            ("seg_0003", "What event is taking place?", EVENTS, "Cooking show.")]
    return [{"id": i, "image_template": f"{VSOD}/{segment}/{{image}}.jpg", "first_image": 3,
             "num_images": 12, "reference_image": 10, "prompt": prompt,
             "options": ["Rewind the video.", "I cannot tell.",
                         "Wait for the occlusion to disappear."],
             "categories": categories[:4] if answer in categories[:4] else categories[1:],
             "answer": answer, "strong_occlusions": True}
            for i, (segment, prompt, categories, answer) in enumerate(rows)]


@pytest.fixture
@builds
def labelled_sources(tmp_path):
    """(sources root, release folder): miniature MVP-N and VSOD sources, and release-shaped
    records of both to derive their labels from."""
    root = str(tmp_path / "sources")
    scenarios = load_scenarios()
    ensure_miniature_sources(root, {n: scenarios[n] for n in ("mvpn", "vsod")})
    folder = write_release(tmp_path / "release" / "test",
                           {MVPN: mvpn_release_records(), VSOD: vsod_release_records()}, {})
    return root, folder


def test_release_labels_writes_what_the_manifests_read(labelled_sources, capsys):
    root, release = labelled_sources
    # the miniature's own VSOD labels are not replaced unasked
    assert cli.main(["release_labels", "--release", release, "--sources_root", root]) == 2
    line = one_line(capsys.readouterr().err)
    assert "proactivebench_vsod_labels.csv already exists" in line and "--overwrite" in line
    assert not os.path.exists(os.path.join(root, "mvpn", "proactivebench_mvpn_class_names.yaml"))
    assert cli.main(["release_labels", "--release", release, "--sources_root", root,
                     "--overwrite"]) == 0
    out = capsys.readouterr().out
    assert "mvpn: 44 of 44 class names from 66 records" in out
    assert "vsod: 5 labels of 3 segments from 5 records" in out
    names = load_data_file("proactivebench_mvpn_class_names.yaml", os.path.join(root, "mvpn"))
    assert names["0041"] == "Shelf product 0041"
    labels = open(os.path.join(root, "vsod", "proactivebench_vsod_labels.csv")).read()
    assert labels.splitlines()[0] == "segment,question_type,answer,first_image,reference_image"
    assert "seg_0001,number_of_people,Two,3,10" in labels.splitlines()
    assert "seg_0002,speaker,Jane goodall,3,10" in labels.splitlines()
    # a second run finds the same bytes
    assert cli.main(["release_labels", "--release", release, "--sources_root", root]) == 0
    assert capsys.readouterr().out.count("unchanged") == 3


def test_a_build_with_the_release_labels_holds_no_placeholders(tmp_path, labelled_sources):
    root, release = labelled_sources
    assert cli.main(["release_labels", "--release", release, "--sources_root", root,
                     "--overwrite"]) == 0
    out = str(tmp_path / "out")
    report = run(out, root, "mvpn,vsod", "--no_train")
    kinds = {item["kind"] for items in report["stand_ins"].values() for item in items}
    assert kinds == {"miniature"}  # the raw sources are still the miniature ones
    mvpn = datasets.load_dataset(out, name=MVPN, split="test")
    assert all(a.startswith("Shelf product 00") for a in mvpn["answer"])
    assert not any("Product 00" in c for row in mvpn["categories"] for c in row)
    vsod = datasets.load_dataset(out, name=VSOD, split="unfiltered")
    by_key = {r["key"]: r for r in vsod}
    event = by_key[f"{VSOD}/seg_0001/event"]
    assert event["answer"] == "Parliament session." and set(event["categories"]) <= set(EVENTS)
    assert (event["first_image"], event["reference_image"]) == (3, 10)
    assert by_key[f"{VSOD}/seg_0001/speaker"]["answer"] == "Tom hanks."
    card = open(os.path.join(out, "README.md")).read()
    assert "placeholder" not in card and "rebuilt from miniature sources; not the benchmark" in card


def test_a_build_without_them_says_it_holds_placeholders(built_miniature):
    report = read_json(os.path.join(built_miniature, "reports", "build.json"))
    kinds = {n: {i["kind"] for i in items} for n, items in report["stand_ins"].items()}
    assert kinds["mvpn"] == kinds["vsod"] == {"miniature", "placeholders"}
    assert kinds["quickdraw"] == {"miniature"}
    assert "44 of 44 class names are placeholders" in json.dumps(report["stand_ins"]["mvpn"])
    card = open(os.path.join(built_miniature, "README.md")).read()
    assert "pretty_name: ProactiveBench (rebuilt from miniature sources and placeholder labels;" \
        in card and "## Not the benchmark" in card


def test_release_labels_refuses_what_is_not_a_release(tmp_path, capsys):
    assert cli.main(["release_labels", "--release", str(tmp_path), "--sources_root",
                     str(tmp_path)]) == 2
    assert "no MVP-N_preprocessed.jsonl, OcclusionDataSet-MM20_preprocessed.jsonl" in one_line(
        capsys.readouterr().err)
    folder = write_release(tmp_path / "test", {MVPN: [{"id": 0, "answer": "X."}],
                                                VSOD: [{"id": 0}]}, {})
    assert cli.main(["release_labels", "--release", folder, "--sources_root",
                     str(tmp_path)]) == 1
    assert "no labels in the records of mvpn, vsod" in capsys.readouterr().err


# ---- publishing a build that is not the benchmark -------------------------------------------------

@pytest.fixture
def hub_unreachable(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token-file"))
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")


def test_publish_refuses_a_miniature_or_placeholder_build_on_the_hub(built_miniature, tmp_path,
                                                                   capsys, hub_unreachable):
    assert cli.main(["publish", built_miniature, "--repo_id", "me/ProactiveBench"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "is not the benchmark: miniature sources (" in line
    assert "placeholder labels (mvpn, vsod)" in line and "--allow_stand_ins" in line
    # asked for, it goes on (and meets the offline Hub)
    assert cli.main(["publish", built_miniature, "--repo_id", "me/ProactiveBench",
                     "--allow_stand_ins"]) == 2
    err = capsys.readouterr().err
    assert "note: " in err and "PUBLISH FAILED" in err and "pass --allow_stand_ins" not in err
    # a folder target goes ahead with a note
    target = str(tmp_path / "published")
    assert cli.main(["publish", built_miniature, "--to", target]) == 0
    assert "note: " in capsys.readouterr().err
    assert os.path.exists(os.path.join(target, "README.md"))


# ---- an empty test split ----------------------------------------------------------------------------

def test_an_empty_test_split_writes_no_shard_and_loads(tmp_path, built_miniature, capsys):
    keep = tmp_path / "keep.json"
    keep.write_text(json.dumps({"QuickDraw": [], "ImageNet-C": [0, 1]}))
    out = str(tmp_path / "out")
    upstream = os.path.join(built_miniature, "upstream")
    run(out, "/unused", "quickdraw,imagenet_c", f"--import_upstream={upstream}",
        f"--keep_list={keep}")
    assert not [p for p in shard_files(out) if p.startswith("QuickDraw/test-")]
    assert len(datasets.load_dataset(out, name="QuickDraw", split="unfiltered")) == 60
    assert len(datasets.load_dataset(out, name="ImageNet-C", split="test")) == 2
    with pytest.raises(ValueError, match="test"):  # the split is absent, not a broken file
        datasets.load_dataset(out, name="QuickDraw", split="test")
    assert cli.main(["validate", out]) == 0
    assert "OK:" in capsys.readouterr().out
    # the runtime plays what each split holds: the pool of a config with no test rows too
    from proactivebench_builder.runtime.cli import main as evaluate

    results = tmp_path / "first_round.jsonl"
    assert evaluate(["evaluate", "--data", out, "--model", "oracle", "--first-round-only",
                     "--results", str(results)]) == 0
    played = [json.loads(line)["config"] for line in results.read_text().splitlines()]
    assert played.count("QuickDraw") == 60 and played.count("ImageNet-C") == 20
    assert evaluate(["evaluate", "--data", out, "--model", "oracle", "--results",
                     str(tmp_path / "test.jsonl")]) == 0
    out_text = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in out_text[-2:]] == [["IN-C", "2"], ["avg", "2"]]
    # a rebuild that empties a split removes the shard an earlier build wrote there
    keep.write_text(json.dumps({"QuickDraw": [], "ImageNet-C": []}))
    run(out, "/unused", "quickdraw,imagenet_c", f"--import_upstream={upstream}",
        f"--keep_list={keep}")
    assert not [p for p in shard_files(out) if "/test-" in p]
    assert cli.main(["validate", out]) == 0


def test_validate_loads_every_config_through_datasets(tmp_path, built_miniature, capsys):
    """A 0-row shard passes every other check; loading is what users do, and it fails."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from proactivebench_builder.pipeline.commands import validate

    copy = str(tmp_path / "copy")
    shutil.copytree(built_miniature, copy)
    shard = os.path.join(copy, "QuickDraw", sorted(os.listdir(os.path.join(copy, "QuickDraw")))[0])
    schema = pq.read_schema(shard)
    pq.write_table(pa.Table.from_pylist([], schema=schema), shard)
    problems = validate.load_problems(copy)
    assert any("BatchSize must be greater than 0" in p and "QuickDraw" in p for p in problems), problems
    assert validate.load_problems(built_miniature) == []


# ---- the released train columns ----------------------------------------------------------------------

def test_train_split_has_the_released_confidence_columns(tmp_path, miniature_root,
                                                         built_miniature):
    pool = [json.loads(line) for line in open(os.path.join(
        built_miniature, "upstream", "QuickDraw_preprocessed.jsonl"))]
    train = datasets.load_dataset(built_miniature, split="train")
    for column in ("qwen_conf", "qwen_delta", "llava_conf", "llava_delta"):
        assert column in train.column_names
    assert set(train["qwen_conf"]) == {None}
    quickdraw_keys = [k for k, c in zip(train["key"], train["config"]) if c == "QuickDraw"][:3]
    rows = [{"model": m, "config": "QuickDraw", "key": r["key"], "correct": False}
            for r in pool for m in ("a", "b")]
    rows += [{"model": "Qwen2.5-VL-3B", "config": "QuickDraw", "key": k, "correct": True,
              "split": "train", "confidence": 0.75, "delta": {"A": 0.5, "B": -0.25}}
             for k in quickdraw_keys]
    rows += [{"model": "llava-next-mistral-7b", "config": "QuickDraw", "key": quickdraw_keys[0],
              "correct": False, "split": "train", "confidence": 0.125}]
    predictions = tmp_path / "p.jsonl"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = str(tmp_path / "out")
    run(out, miniature_root, "quickdraw", f"--predictions={predictions}")
    by_key = {r["key"]: r for r in datasets.load_dataset(out, split="train")}
    first = by_key[quickdraw_keys[0]]
    assert first["qwen_conf"] == 0.75 and first["llava_conf"] == 0.125
    assert first["qwen_delta"] == [{"key": "A", "value": 0.5}, {"key": "B", "value": -0.25}]
    assert by_key[quickdraw_keys[1]]["llava_conf"] is None
    assert sum(r["qwen_conf"] is not None for r in by_key.values()) == 3


def test_train_predictions_of_an_unknown_family_are_refused(tmp_path, miniature_root):
    predictions = tmp_path / "p.jsonl"
    predictions.write_text(json.dumps({"model": "m", "config": "QuickDraw", "key": "k",
                                       "correct": True}) + "\n" + json.dumps(
        {"model": "gpt", "config": "QuickDraw", "key": "k", "correct": True, "split": "train",
         "confidence": 0.5}) + "\n")
    with pytest.raises(SystemExit, match="must hold exactly one of qwen, llava"):
        run(str(tmp_path / "out"), miniature_root, "quickdraw", f"--predictions={predictions}")


# ---- one line, not a traceback --------------------------------------------------------------------

@pytest.mark.parametrize("url, package, extra", [("s3://bucket/sources", "s3fs", "s3"),
                                                 ("gs://bucket/sources", "gcsfs", "gcs")])
def test_a_missing_fsspec_backend_is_one_line(tmp_path, capsys, monkeypatch, url, package,
                                              extra):
    def no_backend(url, **kwargs):  # what fsspec raises when the package is not installed
        raise ImportError(f"Install {package} to access this store")

    monkeypatch.setattr(fsspec.core, "url_to_fs", no_backend)
    assert build_cli(f"--sources_root={url}", f"--output={tmp_path / 'out'}") == 2
    line = one_line(capsys.readouterr().err)
    assert f"need the {package} package" in line and f'pip install -e ".[{extra}]"' in line


class UnreachableStore(fsspec.AbstractFileSystem):
    """A remote store this machine cannot reach: every request fails as a connection does."""
    protocol = "unreachable"

    def info(self, path, **kwargs):
        raise ConnectionError("Cannot connect to host storage.example:443")

    ls = info


@pytest.mark.build
def test_an_unreachable_store_is_not_blamed_on_missing_folders(tmp_path, capsys):
    fsspec.register_implementation("unreachable", UnreachableStore, clobber=True)
    with pytest.raises(SourceError, match="cannot reach unreachable://bucket/sources"):
        run_build([f"--output={tmp_path / 'out'}", "--sources_root=unreachable://bucket/sources",
                   RUNNER])
    assert build_cli(f"--output={tmp_path / 'out'}", "--temp_location=unreachable://bucket/tmp",
                     "--sources_root=/nowhere", runner="--runner=DataflowRunner") == 1
    line = one_line(capsys.readouterr().err)
    assert "cannot reach --temp_location unreachable://bucket/tmp" in line
    assert build_cli("--output=unreachable://bucket/out") == 1
    assert "cannot reach --output unreachable://bucket/out" in one_line(capsys.readouterr().err)


def test_an_unreachable_hub_fails_fast_in_one_line(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from proactivebench_builder.runtime.cli import main as evaluate

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert evaluate(["evaluate", "--data", "someone/ProactiveBench", "--model", "oracle",
                     "--results", str(tmp_path / "r.jsonl")]) == 2
    line = one_line(capsys.readouterr().err)
    assert "cannot be reached" in line and "HF_HUB_OFFLINE=1" in line and "local folder" in line


@pytest.mark.build
def test_the_dataflow_requirements_file_installs(tmp_path):
    """What the README's Dataflow command passes to --requirements_file, installed as a worker
    would, into a throwaway environment (from the package registry or pip's cache)."""
    requirements = os.path.join(REPO_ROOT, "dataflow-requirements.txt")
    assert os.path.exists(requirements)
    readme = open(os.path.join(REPO_ROOT, "README.md")).read()
    assert "--requirements_file dataflow-requirements.txt" in readme
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "install", "--quiet", "-r", requirements],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    check = subprocess.run([python, "-c", "import fsspec, gcsfs; fsspec.filesystem('gs')"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr[-2000:]


# ---- what an import is ---------------------------------------------------

def test_an_export_imported_again_keeps_its_stand_ins(tmp_path, built_miniature, capsys,
                                                     hub_unreachable):
    """The miniature build's own upstream export, imported: its marker carries the build's
    stand-ins over, its records are named as a builder's export with placeholder answers, the
    card does not claim the release, and publish --repo_id refuses it."""
    upstream = os.path.join(built_miniature, "upstream")
    marker = read_json(os.path.join(upstream, "proactivebench_builder_export.json"))
    assert {i["kind"] for i in marker["stand_ins"][MVPN]} == {"miniature", "placeholders"}
    out = str(tmp_path / "imported")
    report = run(out, "/unused", "mvpn,quickdraw", f"--import_upstream={upstream}")
    kinds = {n: {i["kind"] for i in items} for n, items in report["stand_ins"].items()}
    assert kinds["mvpn"] == {"builder_export", "miniature", "placeholders", "not_released_split"}
    assert kinds["quickdraw"] == {"builder_export", "miniature", "not_released_split"}
    whats = json.dumps(report["stand_ins"]["mvpn"])
    assert "records answer with a placeholder (e.g. 'Product 00" in whats
    card = open(os.path.join(out, "README.md")).read()
    assert "upstream release)" not in card and "upstream release's own records" not in card
    assert "\n# ProactiveBench (imported from a builder's export, miniature sources, placeholder " \
        "labels and records other than the released split; not the benchmark)\n" in card
    capsys.readouterr()
    assert cli.main(["publish", out, "--repo_id", "me/ProactiveBench"]) == 2
    assert "a builder's export (mvpn, quickdraw)" in one_line(capsys.readouterr().err)


def test_a_published_release_shaped_folder_keeps_the_marker_and_must_be_unzipped(
        tmp_path, built_miniature, capsys):
    """publish --with_upstream lays the export out as the release's test/ folder, marker
    included; imported with its archives still zipped, it is refused before any work naming
    them; unzipped, it imports with the exported build's stand-ins."""
    import zipfile

    target = str(tmp_path / "published")
    assert cli.main(["publish", built_miniature, "--to", target, "--with_upstream"]) == 0
    test = os.path.join(target, "test")
    assert os.path.isfile(os.path.join(test, "proactivebench_builder_export.json"))
    capsys.readouterr()
    out = tmp_path / "imported"
    assert build_cli(f"--output={out}", "--scenarios=rod,vsod", f"--import_upstream={test}",
                     "--keep_list=released") == 2
    line = one_line(capsys.readouterr().err)
    assert "unzip the archives first: " in line and f"{ROD}.zip" in line
    assert not out.exists()
    for name in os.listdir(test):
        if name.endswith(".zip"):
            with zipfile.ZipFile(os.path.join(test, name)) as archive:
                archive.extractall(test)
    report = run(str(out), "/unused", "rod,vsod", f"--import_upstream={test}")
    assert {i["kind"] for i in report["stand_ins"]["rod"]} == {
        "builder_export", "miniature", "not_released_split"}


def test_release_shaped_records_with_placeholder_answers_are_stand_ins(tmp_path):
    """Records without our own fields (as a release-shaped copy strips them) but answering with
    MVP-N's placeholders are still not the release's."""
    from proactivebench_builder.core.config import KEEP_LIST, Selection
    from proactivebench_builder.pipeline.commands.configure import imported_stand_ins
    from proactivebench_builder.pipeline.import_check import scan_config

    def stand_ins(folder, selection):
        return imported_stand_ins(folder, [scan_config(folder, MVPN, "mvpn")], selection)

    records = [dict(r, answer=f"Product {n % 44:04d}.") for n, r in
               enumerate(mvpn_release_records())]
    folder = write_release(tmp_path / "test", {MVPN: records}, {})
    found = stand_ins(folder, Selection(mode=KEEP_LIST, keep_list="released"))
    assert [i["kind"] for i in found["mvpn"]] == ["placeholders"]
    assert "66 of 66 records answer with a placeholder" in found["mvpn"][0]["what"]
    clean = write_release(tmp_path / "clean", {MVPN: mvpn_release_records()}, {})
    assert stand_ins(clean, Selection(mode=KEEP_LIST, keep_list="released")) == {}
    unfiltered = stand_ins(clean, Selection())
    assert [i["kind"] for i in unfiltered["mvpn"]] == ["not_released_split"]


def test_the_card_says_upstream_release_only_without_stand_ins():
    from proactivebench_builder.pipeline import dataset_card

    stamp = {"origin": "upstream:abc"}
    assert dataset_card.title({}, stamp) == "ProactiveBench (imported from the upstream release)"
    other = {"rod": [{"kind": "not_released_split", "what": "x"}]}
    assert dataset_card.title(other, stamp) == (
        "ProactiveBench (imported from records other than the released split; not the "
        "benchmark)")
    assert dataset_card.about(other, stamp) == dataset_card.IMPORTED_OTHER
    route2 = {"rod": [{"kind": "unverified", "what": "x"}, {"kind": "unfiltered", "what": "y"}]}
    assert dataset_card.title(route2, {"origin": "built"}) == (
        "ProactiveBench (rebuilt from unverified sources and an unfiltered pool; not the "
        "benchmark)")


def test_an_unverified_unfiltered_route_2_build_is_not_the_benchmark(tmp_path, miniature_root,
                                                                    capsys, hub_unreachable):
    """Sources that are not the miniature (no marker), built without --verify_sources and
    without a filter: build.json names both, the card does not say plain "(rebuilt)", and
    publish --repo_id refuses it."""
    from proactivebench_builder.pipeline.miniature import MARKER

    root = tmp_path / "sources"
    shutil.copytree(os.path.join(miniature_root, "quickdraw"), root / "quickdraw")
    os.remove(root / "quickdraw" / MARKER)
    out = str(tmp_path / "out")
    report = run(out, str(root), "quickdraw", "--no_train")
    assert [i["kind"] for i in report["stand_ins"]["quickdraw"]] == ["unverified", "unfiltered"]
    card = open(os.path.join(out, "README.md")).read()
    assert "\n# ProactiveBench (rebuilt from unverified sources and an unfiltered pool; not the " \
        "benchmark)\n" in card
    capsys.readouterr()
    assert cli.main(["publish", out, "--repo_id", "me/ProactiveBench"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "unverified sources (quickdraw)" in line and "an unfiltered pool (quickdraw)" in line


def test_evaluating_the_release_folder_plays_the_released_split(tmp_path, release, capsys):
    """`evaluate --data <release>/test` plays what upstream's loader plays: the released keep
    list (VSOD's extra pool records are left out), saying so in one line; --all_records plays
    every record and says that it is not the released split."""
    from proactivebench_builder.runtime.cli import main as evaluate

    def played(*extra) -> tuple[dict, str]:
        results = tmp_path / f"results{len(extra)}.jsonl"
        assert evaluate(["evaluate", "--no_progress", "--data", release, "--model", "oracle",
                         "--results", str(results), *extra]) == 0
        lines = [json.loads(line) for line in results.read_text().splitlines()]
        counts = {c: sum(1 for r in lines if r["config"] == c) for c in (ROD, VSOD)}
        return counts, capsys.readouterr().err

    counts, err = played()
    assert counts == {ROD: 88, VSOD: 42}
    assert one_line(err).startswith(f"evaluate: {release} holds the release's records: playing "
                                    "the released split")
    counts, err = played("--all_records")
    assert counts == {ROD: 88, VSOD: 42 + len(VSOD_EXTRA_IDS) - 1}  # less the weak clip
    assert "playing every record of" in one_line(err) and "(--all_records)" in err


def test_release_labels_notes_records_answering_with_placeholders(tmp_path, built_miniature,
                                                                  capsys):
    """Our own export's MVP-N records answer "Product 0000.": release_labels says they are not
    the release's, before anything is written."""
    root = tmp_path / "sources"
    for name in ("mvpn", "vsod"):
        (root / name).mkdir(parents=True)
    assert cli.main(["release_labels", "--release", os.path.join(built_miniature, "upstream"),
                     "--sources_root", str(root), "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "note: 12 of 12 records answer with a placeholder (e.g. 'Product 0000.'): these are " \
           "not the release's records" in out
