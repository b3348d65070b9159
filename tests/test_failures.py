"""pipeline/failures.py and core.errors.code_failure: a scenario's own code that raises is its
author's to fix. Whatever method of a plug-in raises (listing its units, its frames' paths, its
miniature writer, its play declaration's rules and moves), the command ends in one line naming
the scenario, the method, the exception and the frames of the plug-in's own file, not Beam's
traceback; a build says so in its build.json."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import EXTRA_SCENARIO_DIR, RUNNER

pytestmark = pytest.mark.build  # every test here builds or starts a command of ours

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The test-only Focus scenario, renamed, with a switch in each method that raises on request:
# the line that opens the method, and the indent of its body.
SWITCHES = {
    "    def list_units(self) -> list[str]:\n": ("list_units", 8),
    "    def write_miniature(cls, root: str, seed: int = 0) -> None:\n": ("write_miniature", 8),
    "def unpadded_path(row: dict, frame_id: int) -> str:\n": ("unpadded_path", 4),
}
BEHAVIOUR = '''

class BrokenLadder(FrameLadder):
    def record_problems(self, row):
        if os.environ.get("BREAK") == "record_problems":
            raise RuntimeError("record_problems broke")
        return super().record_problems(row)

    def next_image(self, env, action):
        if os.environ.get("BREAK") == "next_image":
            raise RuntimeError("next_image broke")
        return super().next_image(env, action)
'''


@pytest.fixture(scope="module")
def broken_plugin(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("plugin")
    source = open(os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py")).read()
    for old, new in [('name = "focus"', 'name = "broken"'),
                     ('config_name = "Focus"', 'config_name = "Broken"'),
                     ("class Focus(Scenario)", "class Broken(Scenario)"),
                     ("from proactivebench_builder.transforms.api import (",
                      "from proactivebench_builder.core.play import FrameLadder\n"
                      "from proactivebench_builder.transforms.api import ("),
                     ("frame_path=unpadded_path)",
                      "frame_path=unpadded_path, behaviour=BrokenLadder)")]:
        assert old in source, old  # the test scenario changed under this test
        source = source.replace(old, new)
    for line, (method, indent) in SWITCHES.items():
        assert line in source, line
        pad = " " * indent
        source = source.replace(line, line + f'{pad}if os.environ.get("BREAK") == "{method}":\n'
                                f'{pad}    raise RuntimeError("{method} broke")\n')
    source = source.replace("\n\ndef unpadded_path", BEHAVIOUR + "\n\ndef unpadded_path", 1)
    (folder / "broken_scenario.py").write_text(source)
    manifest = open(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml")).read()
    (folder / "broken.yaml").write_text(manifest.replace("name: focus", "name: broken").replace(
        "config_name: Focus", "config_name: Broken").replace("source_subdir: focus",
                                                             "source_subdir: broken"))
    return str(folder)


def command(plugin: str, tmp_path, argv: list[str], breaks: str = "") -> tuple[int, list[str]]:
    env = dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=plugin, BREAK=breaks)
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, [line for line in done.stderr.splitlines()
                             if line.strip() and " INFO " not in line]


def build_argv(tmp_path, output) -> list[str]:
    """A build of the plug-in from its miniature source (written under the working folder)."""
    return [os.path.join(REPO, "run_pipeline.py"), RUNNER, "--no_progress", "--scenarios=broken",
            f"--output={output}"]


@pytest.fixture(scope="module")
def broken_build(broken_plugin, tmp_path_factory) -> str:
    """A build of the plug-in whose code raised nowhere, with its upstream export (for the
    commands that read one)."""
    where = tmp_path_factory.mktemp("built")
    status, err = command(broken_plugin, where, [*build_argv(where, where / "out"),
                                                 "--upstream_export"])
    assert status == 0, err
    return str(where / "out")


def assert_names_the_plugin(lines: list[str], method: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith("FAILED: ") and \
        f"its {method} raised RuntimeError: {method} broke" in lines[0], lines[0]
    assert "broken_scenario.py:" in lines[0] and "apache_beam" not in lines[0]


@pytest.mark.parametrize("method", ["list_units", "unpadded_path", "write_miniature"])
def test_a_plugin_method_that_raises_fails_the_build_in_one_line(broken_plugin, tmp_path,
                                                                 method):
    output = tmp_path / "out"
    status, lines = command(broken_plugin, tmp_path, build_argv(tmp_path, output), method)
    assert status == 2
    assert_names_the_plugin(lines, method)
    if method != "write_miniature":  # (that one fails before the folder is the build's)
        with open(output / "reports" / "build.json") as handle:
            report = json.load(handle)
        assert report["status"] == "failed" and method in report["failure"]


def test_a_play_rule_that_raises_fails_validate_in_one_line(broken_plugin, broken_build,
                                                            tmp_path):
    status, lines = command(broken_plugin, tmp_path, [
        os.path.join(REPO, "run_pipeline.py"), "validate", "--no_progress", broken_build],
        "record_problems")
    assert status == 2
    assert_names_the_plugin(lines, "record_problems")


def test_a_frame_path_that_raises_fails_the_import_of_an_upstream_folder_in_one_line(
        broken_plugin, broken_build, tmp_path):
    status, lines = command(broken_plugin, tmp_path, [
        *build_argv(tmp_path, tmp_path / "imported"), "--import_upstream",
        os.path.join(broken_build, "upstream")], "unpadded_path")
    assert status == 2
    assert_names_the_plugin(lines, "unpadded_path")


@pytest.mark.parametrize("method, data", [("next_image", ""), ("unpadded_path", "upstream")])
def test_a_move_or_frame_path_that_raises_fails_evaluate_in_one_line(broken_plugin, broken_build,
                                                                     tmp_path, method, data):
    """A move raises while an episode plays; a frame's path, while an upstream-layout folder
    (the build's export) is read."""
    status, lines = command(broken_plugin, tmp_path, [
        "-m", "proactivebench_builder.runtime", "evaluate", "--data",
        os.path.join(broken_build, data), "--model", "oracle", "--results",
        str(tmp_path / "r.jsonl"), "--no_progress"], method)
    assert status == 2
    assert_names_the_plugin(lines, method)


# ---- a remote output's store that fails part way -----------------------------------------------

def build_to_s3(tmp_path, url: str, port: int) -> tuple[int, list[str]]:
    from conftest import s3_environment

    env = dict(os.environ, **s3_environment(port))
    done = subprocess.run([sys.executable, os.path.join(REPO, "run_pipeline.py"), RUNNER,
                           "--no_progress", "--direct_num_workers=1", "--scenarios=quickdraw",
                           "--no_train", f"--output={url}"], env=env, capture_output=True,
                          text=True, timeout=600, cwd=str(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, [line for line in done.stderr.splitlines()
                             if line.strip() and " INFO " not in line]


def test_a_store_that_dies_mid_build_is_one_line_and_a_rerun_converges(s3_port, tmp_path):
    """The output is s3:// and its store's connections are cut part way: one BUILD FAILED line,
    last (what could not be recorded or removed said before it, in one warning line each); the
    folder is not taken for complete; once the store answers, the same build converges to an
    uninterrupted build's shards and leaves no temporary object."""
    from conftest import s3_objects
    from relay import Relay

    assert build_to_s3(tmp_path, "s3://bucket/whole-build", s3_port)[0] == 0
    whole = s3_objects(s3_port, "whole-build/")
    relay = Relay(s3_port, budget=sum(len(b) for b in whole.values()) // 2)
    try:
        status, lines = build_to_s3(tmp_path, "s3://bucket/cut-build", relay.port)
        assert status == 1 and lines[-1].startswith("BUILD FAILED: "), lines
        assert "the store failed: " in lines[-1] and "run the same build again" in lines[-1]
        assert all(" WARNING " in line for line in lines[:-1]), lines
        report = s3_objects(s3_port, "cut-build/").get("reports/build.json")
        assert report is None or json.loads(report)["status"] != "ok"
        relay.revive()
        assert build_to_s3(tmp_path, "s3://bucket/cut-build", relay.port)[0] == 0
    finally:
        relay.close()
    cut = s3_objects(s3_port, "cut-build/")
    assert not [k for k in cut if os.path.basename(k).startswith(".tmp-")]
    shards = {k: v for k, v in whole.items() if k.endswith(".parquet")}
    assert {k: v for k, v in cut.items() if k.endswith(".parquet")} == shards
