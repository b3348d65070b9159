"""What a scenario author gets wrong first, found by a newcomer who wrote plug-ins from
docs/adding_a_scenario.md alone: each is one clear line (or a dead letter naming it), never a
traceback or a silently wrong benchmark; and `Steps` plays any declared offset."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import RUNNER, read_json, run
from proactivebench_builder.core.play import Play, Steps
from proactivebench_builder.core.contract import check_row
from proactivebench_builder.core.vocabulary import VocabularyError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLUGIN = '''
import os
from PIL import Image
from proactivebench_builder.core import fileio
from proactivebench_builder.core.play import Play
from proactivebench_builder.transforms.base import Scenario

class Mist(Scenario):
    name = "{name}"
    config_name = "Mist"
    environment = Play(actions={{"CLEAR": ("demist",)}}, suggestions=("Demist the lens.",))

    def list_units(self):
        return ["a"]

    def read_unit(self, unit):
        yield self.count("raw_items")
        yield self.candidate("Mist/a", {{}})

    def build_sample(self, key, item):
        raise NotImplementedError

    @classmethod
    def write_miniature(cls, root, seed=0):
        os.makedirs(root, exist_ok=True)
'''

MANIFEST = """
name: {name}
{config_key}: Mist
dataset: Mist
license: CC0
citation: none
homepage: https://example.org
source_subdir: mist
layout: none
parameters: {{rows_per_shard: 500}}
{extra}
"""


def plugin_folder(tmp_path, name="mist", config_key="config_name", extra="",
                  second=False) -> str:
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}_scenario.py").write_text(PLUGIN.format(name=name))
    (folder / f"{name}.yaml").write_text(MANIFEST.format(name=name, config_key=config_key,
                                                         extra=extra))
    if second:  # another module registering the same name
        (folder / f"{name}_again.py").write_text(PLUGIN.format(name=name))
    return str(folder)


def build_with(tmp_path, folder: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=folder)
    return subprocess.run([sys.executable, os.path.join(REPO, "run_pipeline.py"),
                           f"--output={tmp_path / 'out'}", RUNNER, *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.strip().splitlines() if " INFO " not in line]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, \
        done.stderr[-3000:]
    return lines[0]


@pytest.mark.build
@pytest.mark.parametrize("config_key, extra, expected", [
    ("config_nmae", "", "lacks ['config_name'] (is 'config_nmae' a misspelling of 'config_name'?)"),
    ("config_name", "parameter_rule: {rows_per_shard: {type: int}}",
     "unknown key 'parameter_rule'; did you mean 'parameter_rules'?"),
])
def test_a_misspelt_manifest_key_is_one_line_naming_it(tmp_path, config_key, extra, expected):
    folder = plugin_folder(tmp_path, config_key=config_key, extra=extra)
    line = one_error_line(build_with(tmp_path, folder, "--scenarios=mist"))
    assert "mist.yaml" in line and expected in line


@pytest.mark.build
def test_two_modules_registering_one_name_is_one_line(tmp_path):
    folder = plugin_folder(tmp_path, second=True)
    line = one_error_line(build_with(tmp_path, folder, "--scenarios=mist"))
    assert "two scenarios are named 'mist'" in line


@pytest.mark.build
def test_a_plugin_that_does_not_import_is_one_line_naming_the_file(tmp_path):
    folder = plugin_folder(tmp_path)
    with open(os.path.join(folder, "broken_scenario.py"), "w") as handle:
        handle.write("def oops(:\n")
    line = one_error_line(build_with(tmp_path, folder, "--scenarios=mist"))
    assert "broken_scenario.py (line 1): SyntaxError" in line


@pytest.mark.build
def test_an_unknown_scenario_names_the_variable_a_plugin_needs(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(REPO, "run_pipeline.py"),
                           "--scenarios=fogg", RUNNER], capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))
    assert "PROACTIVEBENCH_SCENARIO_PATH" in one_error_line(done)


def test_a_step_cap_the_record_cannot_hold_is_refused_when_declared():
    with pytest.raises(VocabularyError, match="not an integer column of the record contract"):
        Play(step_cap="zoom_steps")


def test_a_row_with_a_field_of_its_own_is_refused():
    row = {"key": "Mist/a", "categories": ["A.", "B.", "C.", "D."], "answer": "A.",
           "options": ["x"], "frame_ids": [0], "first_image": 0, "reference_image": 0,
           "zoom_steps": 3}
    row.update({c: row.get(c) for c in ("id", "image_template", "num_images", "prompt",
                                        "question_type", "strong_occlusions", "valid_images",
                                        "quality_answer", "step_size", "max_steps", "direction",
                                        "granularity", "horizontal_step", "vertical_step",
                                        "crop", "source")})
    with pytest.raises(ValueError, match=r"fields the record contract does not have: \['zoom_steps'\]"):
        check_row(row)


# ---- Steps with offsets other than one ---------------------------------------------------------

TWO = Play(actions={"MAGNIFY": ("magnify",)}, behaviour=Steps, moves={"MAGNIFY": 2},
           suggestions=("Magnify the picture.",))


def two_step_row(**changes) -> dict:
    row = {"first_image": 0, "reference_image": 6, "num_images": 4, "frame_ids": [0, 2, 4, 6]}
    row.update(changes)
    return row


def test_steps_of_two_reach_every_other_frame():
    rules = TWO.rules("Zoom")
    assert rules.reachable_frame_ids(two_step_row()) == [0, 2, 4, 6]
    assert rules.record_problems(two_step_row()) == []


def test_steps_report_an_unreachable_reference():
    problems = TWO.rules("Zoom").record_problems(two_step_row(reference_image=5,
                                                              frame_ids=[0, 2, 4, 5, 6]))
    assert any("reference_image 5 cannot be reached" in p for p in problems), problems


def test_the_runtime_plays_steps_of_two_to_the_reference(monkeypatch):
    from proactivebench_builder import transforms
    from proactivebench_builder.runtime import environments as envs
    from proactivebench_builder.runtime.conformance import with_frames
    from proactivebench_builder.runtime.episodes import run_episode
    from proactivebench_builder.runtime.policies import POLICIES

    monkeypatch.setattr(transforms, "behaviour_for_config", lambda config: TWO.rules(config))
    record = with_frames({"key": "Zoom/a", "id": 0, "prompt": "What is it?",
                          "image_template": "{image}", "answer": "Dog.",
                          "categories": ["Cat.", "Dog.", "Cow.", "Pig."],
                          "options": ["Magnify the picture.", "I cannot tell."],
                          **two_step_row()}, "Zoom")
    stats = run_episode(envs.Environment(record, "Zoom"), POLICIES["oracle"]())
    assert stats["image_id_history"] == [0, 2, 4, 6] and stats["correct_prediction"]


# ---- a partial rebuild that cannot see a kept scenario ------------------------------------------

def test_an_update_that_cannot_see_a_kept_plugin_is_refused_before_any_work(
        tmp_path, miniature_root):
    root = miniature_root  # the session's miniature sources hold the plug-in's (tests/conftest.py)
    output = str(tmp_path / "out")
    run(output, root, "focus,quickdraw", "--no_train")
    before = read_json(os.path.join(output, "reports", "build.json"))
    env = {k: v for k, v in os.environ.items() if k != "PROACTIVEBENCH_SCENARIO_PATH"}
    done = subprocess.run([sys.executable, os.path.join(REPO, "run_pipeline.py"),
                           f"--output={output}", f"--sources_root={root}",
                           "--scenarios=quickdraw", "--no_train", RUNNER], env=env,
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    line = one_error_line(done)
    assert "it also holds focus, which no registered scenario is" in line
    assert "PROACTIVEBENCH_SCENARIO_PATH" in line
    assert read_json(os.path.join(output, "reports", "build.json")) == before  # untouched


def test_a_frame_kind_of_a_plugin_still_imports_its_export():
    """docs/adding_a_scenario.md says so: an overridden load_frame hands `file` refs to super()."""
    text = open(os.path.join(REPO, "docs", "adding_a_scenario.md"), encoding="utf-8").read()
    assert "super().load_frame(ref)" in textwrap.dedent(text)
