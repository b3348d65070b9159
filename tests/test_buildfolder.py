"""core/buildfolder.py: the readers of a build folder (validate, evaluate --data, inspect,
publish) read only the regular files a build writes, inside the folder; a failed build is marked
and refused by each of them; a killed build's temporary files are removed by the next build."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import RUN_PIPELINE, read_json, run
from test_partial_rebuild import two_scenario_build  # noqa: F401 - a fixture
from proactivebench_builder.core import buildfolder
from proactivebench_builder.core.errors import BuildFailed
from proactivebench_builder.pipeline.commands.validate import main as validate_main


@pytest.mark.parametrize("command, name", [
    (c, n) for n in ("README.md", "reports/build.json")
    for c in ("validate", "evaluate", "inspect", "publish")])
def test_a_card_or_report_linked_from_outside_the_folder_is_refused(
        two_scenario_build, tmp_path, command, name):
    """A build writes regular files only: a card or a build.json that is a link leading out of
    the folder is read by no reader (confinement), as publish already refuses it."""
    _, built = two_scenario_build
    folder = tmp_path / "built"
    shutil.copytree(built, folder)
    outside = tmp_path / "elsewhere"
    shutil.move(str(folder / name), outside)
    os.symlink(outside, folder / name)
    argv = {
        "validate": [sys.executable, RUN_PIPELINE, "validate", str(folder)],
        "evaluate": [sys.executable, "-m", "proactivebench_builder.runtime", "evaluate",
                     "--data", str(folder), "--model", "oracle", "--scenarios", "quickdraw",
                     "--results", str(tmp_path / "r.jsonl")],
        "inspect": [sys.executable, RUN_PIPELINE, "inspect", str(folder), "--out",
                    str(tmp_path / "sheets"), "--per_scenario", "1"],
        "publish": [sys.executable, RUN_PIPELINE, "publish", str(folder), "--to",
                    str(tmp_path / "target")],
    }[command]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    said = result.stdout + result.stderr  # validate lists its problems on stdout
    assert result.returncode in (1, 2) and f"{name}: unreadable: a symbolic link" in said \
        or command in ("evaluate", "publish") and result.returncode == 2 and name in said, said
    assert "Traceback" not in said


def test_a_refused_build_is_marked_and_refused_everywhere(tmp_path, miniature_root, capsys):
    from proactivebench_builder.pipeline import publish
    from proactivebench_builder.runtime import loading

    root = str(tmp_path / "sources")
    shutil.copytree(os.path.join(miniature_root, "ImageNet-C"), os.path.join(root, "ImageNet-C"))
    for folder in glob.glob(os.path.join(root, "ImageNet-C", "*", "*", "n*")):
        with open(os.path.join(folder, "notes.txt"), "w") as handle:  # dead letters
            handle.write("not an image")
    output = str(tmp_path / "out")
    with pytest.raises(BuildFailed):
        run(output, root, "imagenet_c", "--max_bad_fraction=0")
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "failed" and "too many bad inputs" in report["failure"]
    assert validate_main([output]) == 1
    assert "its build failed: too many bad inputs" in capsys.readouterr().out
    with pytest.raises(publish.PublishError, match="its build failed"):
        publish.publish(output, publish.FsspecTarget(str(tmp_path / "target")), dry_run=True)
    with pytest.raises(SystemExit, match="its build failed"):
        loading.check_data(output)


def test_leftovers_of_a_killed_build_are_removed_by_the_next_build(tmp_path, miniature_root):
    output = str(tmp_path / "out")
    planted = [os.path.join(output, "upstream", "QuickDraw", ".tmp-0123456789ab-1-0-0000.png"),
               os.path.join(output, "QuickDraw", ".tmp-0123456789ab-1-1-test-00000.parquet"),
               os.path.join(output, ".tmp-0123456789ab-1-2-README.md")]
    buildfolder.mark_building(output)  # what a build killed part way leaves
    for path in planted:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(b"half a file")
    run(output, miniature_root, "quickdraw", "--no_train")
    assert not any(os.path.exists(p) for p in planted)
