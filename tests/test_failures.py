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

# ... and a switch that makes a method return the wrong thing: RETURN="<method>=<literal>"
RETURNS = '''

def _returning(method):
    import ast

    real = getattr(Broken, method)

    def switched(self, *args):
        wanted = os.environ.get("RETURN", "")
        if wanted.startswith(method + "="):
            return ast.literal_eval(wanted.split("=", 1)[1])
        return real(self, *args)

    switched.__name__ = method
    return switched


for _method in ("list_units", "read_unit", "build_sample", "load_frame", "read_order",
                "placeholders") if os.environ.get("RETURN") else ():
    setattr(Broken, _method, _returning(_method))
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
    source += RETURNS
    (folder / "broken_scenario.py").write_text(source)
    manifest = open(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml")).read()
    (folder / "broken.yaml").write_text(manifest.replace("name: focus", "name: broken").replace(
        "config_name: Focus", "config_name: Broken").replace("source_subdir: focus",
                                                             "source_subdir: broken"))
    return str(folder)


def command(plugin: str, tmp_path, argv: list[str], breaks: str = "",
            returns: str = "") -> tuple[int, list[str]]:
    env = dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=plugin, BREAK=breaks, RETURN=returns)
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


@pytest.mark.parametrize("returns, line", [
    ("list_units=None", "its list_units returned NoneType, expected a list of unit names (str)"),
    ("list_units='images'", "its list_units returned str, expected a list of unit names"),
    ("list_units=[{'x': 1}]", "its list_units named a unit by a dict, expected a list of unit "),
    ("read_unit=None", "its read_unit returned NoneType for unit "),
    ("read_unit=['a row']", "its read_unit yielded str for unit "),
    ("build_sample='a row'", "its build_sample returned str for Broken/"),
    ("build_sample=None", "its build_sample returned NoneType for Broken/"),
    ("load_frame='PNG'", "its load_frame returned str for "),
    ("read_order=[0]", "its read_order returned list, expected a sort key (a tuple"),
    ("placeholders=None", "its placeholders returned NoneType, expected a list of lines"),
])
def test_a_plugin_method_that_returns_the_wrong_thing_fails_the_build_in_one_line(
        broken_plugin, tmp_path, returns, line):
    """What a method returns is its code's contract, never a property of an input: a wrong
    type, even for one unit or one item, is the scenario's failure (not a dead letter, which
    would blame the inputs and, under --max_bad_fraction, pass a build missing samples)."""
    output = tmp_path / "out"
    status, lines = command(broken_plugin, tmp_path, build_argv(tmp_path, output),
                            returns=returns)
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("FAILED: scenario broken: ") and line in lines[0], lines[0]
    assert lines[0].endswith("the scenario's own code failed, its author can fix it")
    if returns.startswith("placeholders="):  # asked before any work: no folder is made
        assert not output.exists()
        return
    with open(output / "reports" / "build.json") as handle:
        report = json.load(handle)
    assert report["status"] == "failed" and line in report["failure"]


def test_units_that_give_nothing_fail_the_build_in_one_line(broken_plugin, tmp_path):
    """Every unit yields nothing at all: the build still writes its reports, and says that
    nothing was read (not that the workers wrote to a folder of their own)."""
    output = tmp_path / "out"
    status, lines = command(broken_plugin, tmp_path, build_argv(tmp_path, output),
                            returns="read_unit=[]")
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("BUILD FAILED: broken: no raw item was read"), lines[0]
    with open(output / "reports" / "build.json") as handle:
        assert "no raw item was read" in json.load(handle)["failure"]


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


# ---- a source store that fails part way -------------------------------------------------------

def build_from_s3(plugin: str, tmp_path, sources: str, port: int, output,
                  *extra: str) -> tuple[int, list]:
    from conftest import s3_environment

    env = dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=plugin, **s3_environment(port))
    done = subprocess.run([
        sys.executable, os.path.join(REPO, "run_pipeline.py"), RUNNER, "--no_progress",
        "--scenarios=broken", "--direct_num_workers=1", f"--sources_root={sources}",
        f"--output={output}", *extra],
        env=env, capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, [line for line in done.stderr.splitlines()
                             if line.strip() and " INFO " not in line]


def s3_client(port: int):
    import boto3

    return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x")


def shards_of(output) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(folder, name), output):
            open(os.path.join(folder, name), "rb").read()
            for folder, _, names in os.walk(output) for name in names
            if name.endswith(".parquet")}


@pytest.fixture(scope="module")
def s3_sources(broken_plugin, broken_build, s3_port) -> str:
    """The plug-in's miniature source, uploaded to s3://bucket/sources/."""
    s3 = s3_client(s3_port)
    local = os.path.join(os.path.dirname(broken_build), "build", "miniature_sources")
    for folder, _, names in os.walk(local):
        for name in names:
            path = os.path.join(folder, name)
            s3.upload_file(path, "bucket", "sources/" + os.path.relpath(path, local))
    return "s3://bucket/sources"


@pytest.mark.parametrize("at", [0.3, 0.6, 0.9])
def test_a_source_store_that_dies_mid_build_is_one_line_and_a_rerun_converges(
        broken_plugin, broken_build, s3_sources, s3_port, tmp_path, at):
    """The sources are s3:// and the store's connections are cut part way (while units are
    read, samples built, or frames read again for the shards): one BUILD FAILED line saying
    the store failed (exit 1), never dead letters blaming the inputs; once the store answers,
    the same build gives the uninterrupted build's shards."""
    from relay import Relay

    healthy = Relay(s3_port)
    try:
        assert build_from_s3(broken_plugin, tmp_path, s3_sources, healthy.port,
                             tmp_path / "whole")[0] == 0
    finally:
        healthy.close()
    relay = Relay(s3_port, budget=int(healthy.sent * at))
    try:
        status, lines = build_from_s3(broken_plugin, tmp_path, s3_sources, relay.port,
                                      tmp_path / "cut")
        assert status == 1 and len(lines) == 1, lines
        assert lines[0].startswith("BUILD FAILED: broken: reading s3://bucket/sources/broken: "
                                   "the store failed: ") and \
            lines[0].endswith("; run the same build again"), lines[0]
        with open(tmp_path / "cut" / "reports" / "build.json") as handle:
            report = json.load(handle)
        assert report["status"] == "failed" and "the store failed" in report["failure"]
        relay.revive()
        assert build_from_s3(broken_plugin, tmp_path, s3_sources, relay.port,
                             tmp_path / "cut")[0] == 0
    finally:
        relay.close()
    assert shards_of(tmp_path / "cut") == shards_of(tmp_path / "whole") != {}


def test_a_missing_or_corrupt_file_in_a_source_bucket_is_still_a_dead_letter(
        broken_plugin, broken_build, s3_sources, s3_port, tmp_path):
    """Only the store client's own failure is the store's: a frame missing from the bucket
    (s3fs's FileNotFoundError) or holding no image is the input's dead letter."""
    s3 = s3_client(s3_port)
    keys = sorted(item["Key"] for item in s3.list_objects_v2(
        Bucket="bucket", Prefix="sources/")["Contents"])
    frames = [k for k in keys if k.endswith(".png")]
    for key in keys:
        s3.copy_object(Bucket="bucket", Key="bad-" + key,
                       CopySource={"Bucket": "bucket", "Key": key})
    s3.delete_object(Bucket="bucket", Key="bad-" + frames[0])
    s3.put_object(Bucket="bucket", Key="bad-" + frames[-1], Body=b"not a png")
    status, lines = build_from_s3(broken_plugin, tmp_path, "s3://bucket/bad-sources", s3_port,
                                  tmp_path / "out", "--max_bad_fraction=1")
    assert status == 0, lines
    with open(tmp_path / "out" / "reports" / "build.json") as handle:
        reasons = json.load(handle)["scenarios"]["broken"]["dead_letters_by_reason"]
    assert reasons.get("missing frame file") == 1 and sum(reasons.values()) == 2, reasons
