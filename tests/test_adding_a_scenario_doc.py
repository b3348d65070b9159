"""docs/adding_a_scenario.md is enough to write a working scenario: its example module and
manifest, copied out of the page as they stand, are built, validated and played by the
commands the page gives (in fresh processes, with PROACTIVEBENCH_SCENARIO_PATH naming only
the example's folder). Only `--runner=FnApiRunner` is added, as every test pins the runner."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import IN_PROCESS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join("docs", "adding_a_scenario.md")


def guide_text() -> str:
    with open(os.path.join(REPO, GUIDE), encoding="utf-8") as handle:
        return handle.read()


def code_blocks(section: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)


@pytest.mark.build
def test_the_guides_example_scenario_works(tmp_path):
    blocks = code_blocks(guide_text())
    files = {}
    for language, body in blocks:
        first = body.splitlines()[0]
        if language in ("python", "yaml") and first.startswith("# my_scenarios/"):
            files[first[2:]] = body
    assert sorted(files) == ["my_scenarios/dim.yaml", "my_scenarios/dim_scenario.py"]
    for relative, body in files.items():
        os.makedirs(tmp_path / os.path.dirname(relative), exist_ok=True)
        (tmp_path / relative).write_text(body, encoding="utf-8")
    commands = next(body for language, body in blocks if language == "bash").splitlines()
    env = dict(os.environ)
    for line in commands:
        words = shlex.split(line.replace("$PWD", str(tmp_path)))
        if words[0] == "export":
            name, value = words[1].split("=", 1)
            env[name] = value
            continue
        assert words[0] == "python"
        words[0] = sys.executable
        if words[1] == "run_pipeline.py":
            words[1] = os.path.join(REPO, "run_pipeline.py")
            if words[2] != "validate":
                words += ["--runner=FnApiRunner", IN_PROCESS]
        done = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    assert env["PROACTIVEBENCH_SCENARIO_PATH"] == str(tmp_path / "my_scenarios")
    with open(tmp_path / "dim.jsonl", encoding="utf-8") as handle:
        results = [json.loads(line) for line in handle]
    assert len(results) == 8 and {r["config"] for r in results} == {"Dim"}
    assert all(r["correct_prediction"] for r in results)
    assert "DIM" in done.stdout and "100.0" in done.stdout
