"""core/buildfolder.py: the readers of a build folder (validate, evaluate --data, inspect,
publish) read only the regular files a build writes, inside the folder."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import RUN_PIPELINE
from test_partial_rebuild import two_scenario_build  # noqa: F401 - a fixture


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
