"""ImageNet-C end to end on its miniature `<corruption>/<severity>/<wnid>/` source (a file name
holding braces keeps its name)."""
from __future__ import annotations

import io
import os
import shutil

import datasets
import pytest

from conftest import (_frame_paths_of, get_scenario_named, private_root, read_json, read_jsonl,
                      run, values_of)
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.core.vocabulary import is_abstain
from proactivebench_builder.transforms import upstream_action_of


@pytest.fixture(scope="module")
def rows(built_miniature):
    return datasets.load_dataset(built_miniature, name="ImageNet-C", split="test")


def test_enhancements_are_the_upstream_quality_actions():
    manifest = manifest_of("imagenet_c")
    for action, option in manifest["enhancements"].items():
        assert upstream_action_of(option) == action
    assert set(manifest["corruption_actions"].values()) == set(manifest["enhancements"])


def test_severity_ladder_and_quality_options(rows):
    manifest = manifest_of("imagenet_c")
    assert len(rows) == 4 * 5  # 4 miniature classes x 5 images per class
    for row in rows:
        corruption = row["image_template"].split("/")[1]
        assert row["frame_ids"] == [5, 4, 3, 2, 1]
        assert (row["first_image"], row["reference_image"], row["num_images"]) == (5, 1, 5)
        assert row["quality_answer"] == manifest["enhancements"][
            manifest["corruption_actions"][corruption]]
        assert len(row["options"]) == 5 and row["quality_answer"] in row["options"]
        assert sum(is_abstain(o) for o in row["options"]) == 1
        assert len({upstream_action_of(o) for o in row["options"] if not is_abstain(o)}) == 4
        assert row["answer"] in row["categories"] and len(set(row["categories"])) == 4
        assert [f.size for f in row["frames"]] == [(64, 64)] * 5


def test_jpeg_bytes_pass_through_unchanged(built_miniature, miniature_root):
    import pyarrow.parquet as pq

    path = os.path.join(built_miniature, "ImageNet-C", "test-00000-of-00001.parquet")
    row = pq.read_table(path).slice(0, 1).to_pylist()[0]
    for frame, source in zip(row["frames"], row["source"]["files"]):
        with open(os.path.join(miniature_root, "ImageNet-C", source), "rb") as handle:
            assert frame["bytes"] == handle.read()


def test_great_pyrenees_in_the_upstream_style(rows):
    assert "Great_pyrenees." in {r["answer"] for r in rows}


def test_corrupt_files_become_dead_letters(tmp_path, miniature_root):
    root = tmp_path / "src"
    shutil.copytree(os.path.join(miniature_root, "ImageNet-C"), root / "ImageNet-C")
    report0 = run(str(tmp_path / "clean"), str(root), "imagenet_c",
                  "--upstream_export")["scenarios"]["imagenet_c"]
    clean = read_jsonl(str(tmp_path / "clean" / "upstream" / "ImageNet-C_preprocessed.jsonl"))
    victims = [r["source"]["files"] for r in clean[:4]]
    base = root / "ImageNet-C"
    data = (base / victims[0][2]).read_bytes()
    (base / victims[0][2]).write_bytes(data[: len(data) // 2])              # truncated JPEG
    (base / victims[1][0]).write_bytes(b"")                                  # zero bytes
    png = io.BytesIO()
    from PIL import Image
    Image.new("RGB", (8, 8)).save(png, format="PNG")
    (base / victims[2][4]).write_bytes(png.getvalue())                       # PNG named .JPEG
    os.remove(base / victims[3][1])                                          # missing severity
    out = str(tmp_path / "out")
    report = run(out, str(root), "imagenet_c", "--max_bad_fraction=0.5")["scenarios"]["imagenet_c"]
    dead = {d["path"]: d["reason"] for d in read_jsonl(os.path.join(out, "reports",
                                                                     "dead_letters.jsonl"))}
    assert dead[victims[0][2]].startswith("truncated JPEG") or "undecodable" in dead[victims[0][2]]
    assert dead[victims[1][0]].startswith("empty file")
    assert dead[victims[2][4]].startswith("PNG data in a file named")
    assert dead[victims[3][1]] == "missing frame file"
    assert report["samples"] == report0["samples"] - 4 and report["accounted"]
    assert read_json(os.path.join(out, "reports", "build.json"))


# ---- ImageNet-C: a file name holding braces -------------------------------------------------------

@pytest.mark.build
def test_an_imagenet_c_file_name_with_braces_keeps_its_name(tmp_path):
    """Braces are doubled
    in the template's literal parts, and the frame path is the file's own name."""
    import glob

    src = os.path.join(private_root(tmp_path, "imagenet_c"), "ImageNet-C")
    first = sorted(glob.glob(f"{src}/*/*/*/*.JPEG"))[0]
    wnid, name = first.split("/")[-2], os.path.basename(first)
    for path in glob.glob(f"{src}/*/*/{wnid}/{name}"):
        os.rename(path, os.path.join(os.path.dirname(path), "x{1}" + name))
    scenario = get_scenario_named("imagenet_c", src)
    scenario.params["samples_per_class"] = 100
    paths = _frame_paths_of(scenario, values_of(scenario, wnid))
    braced = [p for key, ps in paths.items() if "{" in key for p in ps]
    assert len(braced) == 5 and all(p.endswith(f"/{wnid}/x{{1}}{name}") for p in braced)
