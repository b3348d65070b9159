"""transforms/__init__.py: the scenario registry and the plug-ins it loads from
PROACTIVEBENCH_SCENARIO_PATH. A plug-in module is loaded by its path (one named like a
standard module shadows nothing; two folders may each hold a module of one name); an
unusable scenario path is one line in every command. And what every scenario reads through
transforms/base.py: a frame, an annotation file, a CSV, a list or a folder of them linked out of
the sources root is never followed (a dead letter or a failure naming the link; a labels file the
user names outright is read where it is), and a BOM or blank lines in a line-oriented source
change nothing."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import (EXTRA_SCENARIO_DIR, RUN_PIPELINE, accounted, builds, dead_letters,
                      private_miniature, read_json, run, shard_files)
from proactivebench_builder.transforms import load_scenarios


@pytest.fixture(scope="module")
@builds
def quickdraw_build(tmp_path_factory, miniature_root) -> str:
    output = str(tmp_path_factory.mktemp("edges") / "build")
    run(output, miniature_root, "quickdraw", "--no_train", "--no_upstream_export")
    return output


def _shadowing_plugins(tmp_path) -> str:
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml"), folder)
    # a plug-in named like a standard module: imported by name, the standard one came instead
    shutil.copy(os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py"), folder / "calendar.py")
    return str(folder)


@pytest.mark.build
def test_a_plugin_named_like_a_standard_module_registers_and_shadows_nothing(tmp_path):
    folder = _shadowing_plugins(tmp_path)
    code = textwrap.dedent("""
        import calendar
        from proactivebench_builder.transforms import load_scenarios
        scenarios = load_scenarios()
        import calendar as again
        print(sorted(scenarios), hasattr(again, "monthrange"), again is calendar)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=folder))
    assert done.returncode == 0, done.stderr
    assert "'focus'" in done.stdout and "True True" in done.stdout, done.stdout


@pytest.mark.build
def test_two_plugin_folders_with_modules_of_one_name_both_load(tmp_path):
    """Each module is its own, by path: a `scenario.py` in two folders is two modules."""
    first, second = tmp_path / "one", tmp_path / "two"
    for folder, name in ((first, "focus"), (second, "blur")):
        folder.mkdir()
        source = open(os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py")).read()
        manifest = open(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml")).read()
        if name == "blur":
            source = source.replace('name = "focus"', 'name = "blur"').replace(
                'config_name = "Focus"', 'config_name = "Blur"')
            manifest = manifest.replace("name: focus", "name: blur").replace(
                "config_name: Focus", "config_name: Blur")
        (folder / "scenario.py").write_text(source)
        (folder / f"{name}.yaml").write_text(manifest)
    code = ("from proactivebench_builder.transforms import load_scenarios; "
            "s = load_scenarios(); print(sorted(s), s['blur'].read_manifest()['config_name'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=os.pathsep.join(
                              [str(first), str(second)])))
    assert done.returncode == 0, done.stderr
    assert "'blur'" in done.stdout and "'focus'" in done.stdout and "Blur" in done.stdout


@pytest.mark.parametrize("command", [
    [RUN_PIPELINE, "validate", "{data}"],
    [RUN_PIPELINE, "inspect", "{data}"],
    [RUN_PIPELINE, "publish", "{data}", "--to", "{data}-published", "--dry_run"],
    ["-m", "proactivebench_builder.runtime", "evaluate", "--data", "{data}", "--model", "oracle",
     "--results", "{data}-r.jsonl"],
])
@pytest.mark.parametrize("module, says", [
    (None, "is not a folder"),
    ("def oops(:\n", "SyntaxError"),
    ("import no_such_package_here\n", "ModuleNotFoundError"),
])
def test_an_unusable_scenario_path_is_one_line_in_every_command(tmp_path, quickdraw_build, command,
                                                                module, says):
    folder = tmp_path / "plugins"
    if module is not None:
        folder.mkdir()
        (folder / "broken_scenario.py").write_text(module)
    data = tmp_path / "data"
    shutil.copytree(quickdraw_build, data)
    args = [a.replace("{data}", str(data)) for a in command]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path),
                          env=dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=str(folder)))
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, \
        done.stderr[-2000:]
    assert says in lines[0] and str(folder) in lines[0], lines


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def image_files(root: str) -> list[str]:
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.join(folder, n) for n in names if n.lower().endswith(IMAGE_SUFFIXES)]
    return sorted(found)


def every_output_byte(output: str) -> bytes:
    chunks = []
    for folder, _, names in os.walk(output):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                chunks.append(handle.read())
    return b"".join(chunks)


@pytest.mark.build
@pytest.mark.parametrize("name", sorted(load_scenarios()))
def test_links_out_of_the_sources_root_are_never_followed(name, tmp_path_factory):
    """Every image file of the source is replaced by a link to a copy outside the sources root
    (for ROD, after the README's `tar -xzf rod_N.tar.gz -C extracted`): the outside bytes must
    reach neither the shards nor the upstream export, and each link is a dead letter naming it."""
    root = str(tmp_path_factory.mktemp(f"{name}_linked"))
    shutil.copytree(private_miniature(tmp_path_factory, name), root, dirs_exist_ok=True)
    if name == "rod":
        extracted = os.path.join(root, "rod", "extracted")
        os.makedirs(extracted)
        for archive in glob.glob(os.path.join(root, "rod", "rod_*.tar.gz")):
            subprocess.run(["tar", "-xzf", archive, "-C", extracted], check=True)
    images = image_files(root)
    if not images:
        pytest.skip(f"{name}: no image files in its source (nothing to link)")
    outside = str(tmp_path_factory.mktemp(f"{name}_outside"))
    marker = b"OUTSIDE-THE-SOURCES-ROOT"
    for i, path in enumerate(images):
        target = os.path.join(outside, f"{i}{os.path.splitext(path)[1]}")
        with open(path, "rb") as src, open(target, "wb") as dst:
            dst.write(src.read() + marker)  # still a decodable image, with a marker appended
        os.remove(path)
        os.symlink(target, path)
    output = str(tmp_path_factory.mktemp(f"{name}_linked_out") / "out")
    # every frame is a link, so no sample is left: the folder has no shard to validate
    report = run(output, root, name, "--max_bad_fraction=1", "--final_validation=off")
    accounted(report)
    assert marker not in every_output_byte(output)
    letters = [d for d in dead_letters(output) if "link outside the sources root" in d["reason"]]
    assert letters, dead_letters(output)[:5]
    assert all(os.path.realpath(outside) in d["reason"] for d in letters)


METADATA_LINKS = [
    ("coco", "coco/annotations/instances_val2014.json", "failure"),
    ("changeit", "changeit/categories.csv", "failure"),
    ("changeit", "changeit/labels.csv", "failure"),
    ("changeit", "changeit/videos/apple.csv", "dead letter"),
    ("changeit", "changeit/annotations/apple", "dead letter"),
    ("vsod", "vsod/proactivebench_vsod_labels.csv", "failure"),
    ("vsod", "vsod/OcclusionDataSet-MM20/Annotations/test/seg_0001", "dead letter"),
    ("rod", "rod/dataset_info.json", "failure"),
    ("mvpn", "mvpn/data/test_list/test_0000_100.pkl", "dead letter"),
    ("mvpn", "mvpn/data/test_list", "failure"),
    ("imagenet_c", "ImageNet-C/brightness/5/n01440764", "dead letter"),
]


OUTSIDE_MARKER = "OUTSIDE-THE-SOURCES-ROOT-METADATA"


def with_marker(path: str) -> None:
    """Put the marker into a file so that it still parses as its format (a reader that followed
    the link would take it in): a top-level key of a JSON object, an XML comment after the root,
    a last line of a CSV (a malformed row), bytes after an image or a pickle's STOP."""
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        data[OUTSIDE_MARKER] = OUTSIDE_MARKER
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        return
    extra = {".xml": f"<!-- {OUTSIDE_MARKER} -->", ".csv": f"\n{OUTSIDE_MARKER},x,y\n"}.get(
        os.path.splitext(path)[1], OUTSIDE_MARKER)
    with open(path, "ab") as handle:
        handle.write(extra.encode("utf-8"))


def link_out(root: str, relative: str, outside: str) -> str:
    """Move `relative` (a file or folder) to `outside`, marked, and leave a link to it."""
    path = os.path.join(root, relative)
    target = os.path.join(outside, os.path.basename(path))
    shutil.move(path, target)
    for folder, _, names in os.walk(target) if os.path.isdir(target) else [("", [], [target])]:
        for name in names:
            with_marker(os.path.join(folder, name))
    os.symlink(target, path)
    return os.path.realpath(target)


@pytest.mark.build
@pytest.mark.parametrize("name,relative,outcome", METADATA_LINKS,
                         ids=[f"{n}:{r.split('/', 1)[1]}" for n, r, _ in METADATA_LINKS])
def test_metadata_linked_out_of_the_sources_root_is_never_followed(name, relative, outcome,
                                                                   tmp_path_factory):
    """Not only frames: an annotation file, a CSV, a label file, a list or a folder of them
    that resolves outside the sources root is never read. A file every item needs stops the
    build with a failure naming the link and its target; a per-unit one is counted dead
    letters naming them; either way no byte of the outside copy reaches the output."""
    root = str(tmp_path_factory.mktemp(f"{name}_meta_linked"))
    shutil.copytree(private_miniature(tmp_path_factory, name), root, dirs_exist_ok=True)
    assert os.path.exists(os.path.join(root, relative)), f"the miniature lost {relative}"
    target = link_out(root, relative, str(tmp_path_factory.mktemp(f"{name}_meta_outside")))
    link = relative.split("/", 1)[1]  # as a dead letter names it: relative to the scenario root
    output = str(tmp_path_factory.mktemp(f"{name}_meta_out") / "out")
    if outcome == "failure":
        with pytest.raises(Exception, match="link outside the sources root"):
            run(output, root, name, "--max_bad_fraction=1", "--final_validation=off")
        failure = read_json(os.path.join(output, "reports", "build.json"))["failure"]
        assert f"{link} -> {target}" in failure, failure
        assert not shard_files(output)
    else:
        report = run(output, root, name, "--max_bad_fraction=1", "--final_validation=off")
        accounted(report)
        letters = [d for d in dead_letters(output) if "link outside the sources root" in d["reason"]]
        assert letters, dead_letters(output)[:5]
        assert all(target in d["reason"] and link in d["reason"] for d in letters), letters[:3]
    assert OUTSIDE_MARKER.encode() not in every_output_byte(output)


@pytest.mark.build
def test_a_labels_file_named_outright_outside_the_root_is_the_users_own(tmp_path_factory):
    """Only source files are held to the root: VSOD's `labels_file` given as an absolute path
    (the user's configuration, not a link in a download) is read wherever it is."""
    from proactivebench_builder.transforms import get_scenario

    root = str(tmp_path_factory.mktemp("vsod_labels_abs"))
    shutil.copytree(private_miniature(tmp_path_factory, "vsod"), root, dirs_exist_ok=True)
    scenario = get_scenario("vsod")(0, os.path.join(root, "vsod"))
    outside = str(tmp_path_factory.mktemp("vsod_labels_elsewhere") / "labels.csv")
    shutil.move(scenario.labels_url(), outside)
    scenario.params["labels_file"] = outside
    assert scenario.list_units() and scenario.labels()[0]


def add_bom_and_blank_lines(path: str) -> None:
    with open(path, "rb") as handle:
        data = handle.read()
    if data.startswith(b"\xef\xbb\xbf"):
        return
    lines = data.split(b"\n")
    data = b"\n\n".join(lines) if path.endswith(".csv") else data
    with open(path, "wb") as handle:
        handle.write(b"\xef\xbb\xbf" + data)


@pytest.mark.build
@pytest.mark.parametrize("name, patterns", [
    ("changeit", ["*.csv", "videos/*.csv", "annotations/*/*.csv"]),
    ("coco", ["annotations/*.json"]),
    ("vsod", ["*.csv"]),
])
def test_bom_and_blank_lines_are_harmless(name, patterns, tmp_path_factory):
    clean_root = private_miniature(tmp_path_factory, name)
    clean_out = str(tmp_path_factory.mktemp(f"{name}_plain") / "out")
    clean = run(clean_out, clean_root, name, "--no_train")
    root = str(tmp_path_factory.mktemp(f"{name}_bom"))
    shutil.copytree(clean_root, root, dirs_exist_ok=True)
    subdir = os.listdir(root)[0]
    changed = [p for pattern in patterns for p in glob.glob(os.path.join(root, subdir, pattern))]
    assert changed
    for path in changed:
        add_bom_and_blank_lines(path)
    output = str(tmp_path_factory.mktemp(f"{name}_bom_out") / "out")
    report = run(output, root, name, "--no_train")
    assert report["scenarios"] == clean["scenarios"]
    assert shard_files(output) == shard_files(clean_out)
