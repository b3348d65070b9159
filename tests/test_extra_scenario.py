"""A scenario written as one module plus one manifest, and nothing else (tests/extra_scenario/,
visible through PROACTIVEBENCH_SCENARIO_PATH as the README documents), goes the whole way:
build -> validate -> evaluate (oracle 100% of its rows, always-abstain 0%) -> first-round
predictions -> filter (a rebuild with --predictions). Also: the keyword checks made when the
registry loads, whole-word matching, and the runtime's loud skip of configs nobody declares."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pyarrow.parquet as pq
import pytest

from conftest import EXTRA_SCENARIO_DIR, builds, read_json, read_jsonl, run
from test_packaging import SOURCE_TREE, build_sdist, install_in_fresh_venv
from proactivebench_builder.pipeline.commands.validate import validate_folder
from proactivebench_builder.runtime import cli, environments as envs, open_ended
from proactivebench_builder.transforms import load_scenarios
from proactivebench_builder.core import vocabulary
from proactivebench_builder import transforms
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.vocabulary import VocabularyError

CONFIG = "Focus"


@pytest.fixture(scope="module")
def focus_build(shared_build, miniature_root):
    """(sources root, output, build.json) of a shared build of the plug-in alone (read only)."""
    output, report = shared_build(miniature_root, "focus", "--upstream_export")
    return miniature_root, output, report


def _rows(output: str, split: str = "test") -> list[dict]:
    """The rows of a split of the config, read from its shard sets."""
    folder = os.path.join(output, CONFIG)
    sets = ("test-",) if split == "test" else ("test-", "filtered_out-")
    return [r for name in sorted(os.listdir(folder)) if name.startswith(sets)
            for r in pq.read_table(os.path.join(folder, name)).to_pylist()]


def _evaluate(tmp_path, data: str, model: str, *extra: str) -> tuple[dict, list[dict]]:
    results = str(tmp_path / f"{model.replace(':', '_')}{len(extra)}.jsonl")
    args = cli.parse_args(["evaluate", "--data", data, "--model", model, "--results", results,
                           *extra])
    return cli.evaluate(args), read_jsonl(results)


def test_it_is_registered_from_outside_the_package():
    cls = load_scenarios()["focus"]
    # imported from its file under a private name (it can neither hide nor be hidden)
    path = os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py")
    assert cls.__module__ == transforms.plugin_module_name(path)
    assert sys.modules[cls.__module__].__file__ == path
    assert transforms.resolve_config("FOC") == transforms.resolve_config("focus") == CONFIG
    assert CONFIG in transforms.known_configs()


def test_build_and_validate(focus_build):
    _, output, report = focus_build
    entry = report["scenarios"]["focus"]
    assert entry["samples"] == 15 and entry["dead_letters"] == 0 and entry["accounted"]
    rows = _rows(output)
    assert len(rows) == 15 and all(r["key"].startswith(f"{CONFIG}/") for r in rows)
    assert validate_folder(output) == []
    # The upstream export holds it as well.
    assert len(read_jsonl(os.path.join(output, "upstream", f"{CONFIG}_preprocessed.jsonl"))) == 15


def test_evaluate_oracle_and_always_abstain(focus_build, tmp_path):
    _, output, _ = focus_build
    n = len(_rows(output))
    table, lines = _evaluate(tmp_path, output, "oracle")
    assert table[CONFIG] == {"n": n, "acc": 100.0, "psr": 3.0}   # 3 requests up the 4 frames
    assert len(lines) == n and all(line["correct_prediction"] for line in lines)
    table, _ = _evaluate(tmp_path, output, "always-abstain", "--scenarios", "focus")
    assert table[CONFIG] == {"n": n, "acc": 0.0, "psr": 0.0}
    # The upstream layout of the same build plays the same (frames found by frame_path).
    table, _ = _evaluate(tmp_path, os.path.join(output, "upstream"), "oracle")
    assert table[CONFIG]["acc"] == 100.0 and table[CONFIG]["n"] == n


def test_first_round_predictions_filter_the_rebuild(focus_build, tmp_path):
    root, output, _ = focus_build
    predictions = []
    for model in ("oracle", "always-abstain", "first-option", "random:3"):
        table, lines = _evaluate(tmp_path, output, model, "--first-round-only")
        assert {line["config"] for line in lines} == {CONFIG} and len(lines) == 15
        predictions += lines
    leaked = {p["key"] for p in predictions if p["correct"]}
    assert leaked, "random answers name some categories on the first turn"
    assert not any(p["correct"] for p in predictions if p["model"] != "random:3")
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    filtered = str(tmp_path / "filtered")
    report = run(filtered, root, "focus", f"--predictions={path}")
    kept = {r["key"] for r in _rows(filtered)}
    pool = {r["key"] for r in _rows(filtered, "unfiltered")}
    assert kept == pool - leaked and report["scenarios"]["focus"]["kept"] == len(kept)
    assert validate_folder(filtered) == []


def test_declared_texts_reach_the_model(focus_build):
    _, output, _ = focus_build
    row = _rows(output)[0]
    observation = envs.make_environment(row, hint=True).reset()
    assert observation.prompt.split(" Choose from")[0].endswith(
        "Hint: sharpening the picture could help with classification.")
    env = envs.make_environment(row, mode="oeg")
    assert env.open_ended_answers() == f"Sharpen the picture, {row['answer'][:-1]}."
    assert open_ended.threshold(CONFIG) == 1


def test_the_runtime_names_configs_it_cannot_play(focus_build, tmp_path, capsys):
    _, output, _ = focus_build
    data = str(tmp_path / "data")
    shutil.copytree(output, data)
    shutil.copytree(os.path.join(output, CONFIG), os.path.join(data, "Mystery"))
    report = read_json(os.path.join(data, "reports", "build.json"))  # evaluate plays what it
    report["files"] += [dict(f, config="Mystery", path=f["path"].replace(CONFIG, "Mystery"))
                        for f in report["files"] if f["path"].startswith(f"{CONFIG}/")]
    with open(os.path.join(data, "reports", "build.json"), "w") as handle:  # lists
        json.dump(report, handle)
    table, _ = _evaluate(tmp_path, data, "oracle")
    assert list(table) == [CONFIG, "avg"]
    err = capsys.readouterr().err
    assert "skipping config 'Mystery'" in err and "no registered scenario" in err


# ---- the vocabulary -----------------------------------------------------------------------------


def test_matching_is_scoped_and_whole_word_for_new_scenarios():
    play = load_scenarios()["focus"].environment.rules(CONFIG)
    assert play.action_of("Sharpen up the picture.") == "SHARPEN"
    assert play.action_of("Bring the image into FOCUS.") == "SHARPEN"
    with pytest.raises(ValueError):
        play.action_of("Resharpening would help.")   # not the word
    ladder = Play(actions={"ROTATE": ("angle",)}).rules("Ladder")
    with pytest.raises(ValueError):
        ladder.action_of("Show the rectangle.")       # "angle" in a word
    # The seven upstream scenarios keep upstream's substring rule (released records need it).
    mvpn = transforms.behaviour_for_config("MVP-N")
    assert mvpn.action_of("Show me another viewpoint.") == "ROTATE"


class _Fake:
    def __init__(self, play):
        self.environment = play


def _check(**plays):
    scenarios = dict(load_scenarios())
    scenarios.update({name: _Fake(play) for name, play in plays.items()})
    vocabulary.check_vocabulary(scenarios)


def test_keyword_clashes_are_refused_with_a_clear_error():
    _check(ok=Play(actions={"DEFOG": ("defog",)}, suggestions=("Defog the lens.",)))
    with pytest.raises(VocabularyError, match="'upscale'.*inside|'up'.*inside"):
        _check(bad=Play(actions={"UPSCALE": ("upscale",)}))
    with pytest.raises(VocabularyError, match="already uses it for ROTATE"):
        _check(bad=Play(actions={"SPIN": ("rotate",)}))
    with pytest.raises(VocabularyError, match="occurs in the option"):
        _check(bad=Play(actions={"CAMERA": ("camera",)}))   # "Move the camera up." is COCO's
    with pytest.raises(VocabularyError, match="abstain"):
        _check(bad=Play(actions={"NOPE": ("do nothing",)}, suggestions=("I cannot say.",)))
    with pytest.raises(VocabularyError, match="need exactly one"):
        _check(bad=Play(actions={"DEFOG": ("defog",)}, suggestions=("Clean the lens.",)))
    with pytest.raises(VocabularyError, match="tuple of keywords"):
        Play(actions={"DEFOG": "defog"})


@pytest.mark.build
def test_a_clashing_plugin_stops_the_build_with_one_line(tmp_path):
    """A plug-in whose keyword is inside an upstream one: one clear line, exit 1, no traceback."""
    import subprocess
    import sys

    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "clash_scenario.py").write_text(
        "from proactivebench_builder.transforms.base import Scenario\n"
        "from proactivebench_builder.core.play import Play\n\n\n"
        "class Clash(Scenario):\n    name = 'clash'\n    config_name = 'Clash'\n"
        "    environment = Play(actions={'UPSCALE': ('upscale',)})\n")
    env = dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=str(folder))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(repo, "run_pipeline.py"),
                           f"--output={tmp_path / 'out'}", "--runner=FnApiRunner"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2  # a user error, like a mistyped flag
    assert "scenario registry: keyword 'up' (upstream) is inside keyword 'upscale'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_scenario_declaring_no_actions_uses_every_known_keyword():
    _check(plain=Play(suggestions=("Add more details.", "Rotate the object.")))
    with pytest.raises(VocabularyError, match="'sharpen'.*occurs in the option"):
        _check(plain=Play(suggestions=("Sharpen the picture.",)))   # Focus's keyword
    with pytest.raises(VocabularyError, match="need exactly one"):
        _check(plain=Play(suggestions=("Wave a flag.",)))


@pytest.mark.build
def test_a_mistyped_scenario_path_stops_the_build_with_one_line(tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=str(tmp_path / "no_such_folder"))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(repo, "run_pipeline.py"),
                           f"--output={tmp_path / 'out'}", "--runner=FnApiRunner"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"PROACTIVEBENCH_SCENARIO_PATH: {tmp_path / 'no_such_folder'} is not a folder" \
        in done.stderr


def test_two_scenarios_may_share_a_new_keyword_for_the_same_action():
    _check(twin=Play(actions={"SHARPEN": ("sharpen",)}, suggestions=("Sharpen it.",)))


def test_declaration_mistakes_are_caught_when_declared():
    from proactivebench_builder.core.play import Steps

    with pytest.raises(VocabularyError, match="behaviour must be a Behaviour class"):
        Play(behaviour="ladder")
    with pytest.raises(VocabularyError, match="needs a move per action"):
        Play(actions={"DEFOG": ("defog",)}, behaviour=Steps)
    with pytest.raises(VocabularyError, match="last_turn"):
        Play(last_turn="never")


# ---- the plug-in's build seen without the plug-in ------------------------------------------------


def _without_the_plugin(tmp_path, *command: str) -> subprocess.CompletedProcess:
    """A command run as a user would who forgot PROACTIVEBENCH_SCENARIO_PATH."""
    env = {k: v for k, v in os.environ.items() if k != "PROACTIVEBENCH_SCENARIO_PATH"}
    return subprocess.run([sys.executable, *command], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)


def test_evaluate_without_the_plugin_says_nothing_was_evaluated(focus_build, tmp_path):
    """Refused in one line naming the missing scenario, not every config skipped and exit 0."""
    _, output, _ = focus_build
    results = tmp_path / "r.jsonl"
    done = _without_the_plugin(tmp_path, "-m", "proactivebench_builder.runtime", "evaluate",
                               "--data", output, "--model", "oracle", "--results", str(results))
    assert done.returncode == 2 and not results.exists() and "(no results)" not in done.stdout
    skipped, last = done.stderr.strip().splitlines()
    assert "skipping config 'Focus'" in skipped
    assert last == (f"python -m proactivebench_builder.runtime: error: nothing to evaluate: no "
                    f"config of {output} (Focus) has a registered scenario; make the scenario "
                    "modules visible with PROACTIVEBENCH_SCENARIO_PATH=FOLDER or an entry point "
                    "(README: Adding a scenario)")


def test_evaluate_scenarios_selecting_no_config_of_the_data(focus_build, tmp_path, capsys):
    _, output, _ = focus_build
    results = tmp_path / "r.jsonl"
    assert cli.main(["evaluate", "--data", output, "--model", "oracle", "--scenarios",
                     "quickdraw", "--results", str(results)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"python -m proactivebench_builder.runtime: error: nothing to evaluate: --scenarios "
        f"quickdraw selects none of the playable configs of {output} (found: Focus)")
    assert not results.exists()


def test_validate_without_the_plugin_names_the_missing_scenario_once(focus_build, tmp_path):
    """One problem naming the config and how to make it visible."""
    _, output, _ = focus_build
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = _without_the_plugin(tmp_path, os.path.join(repo, "run_pipeline.py"), "validate",
                               output)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "config 'Focus' has no registered scenario, so its options and steps were not checked: "
        "make the scenario's module visible with PROACTIVEBENCH_SCENARIO_PATH=FOLDER or an "
        "entry point of group proactivebench_builder.scenarios (README: Adding a scenario)"]
    assert "FAILED: 1 problems" in done.stderr


# ---- the same scenario as one module inside transforms/, installed -------------------------------
#
# The Focus module copied to transforms/focus.py and its manifest to source_manifests/focus.yaml
# in a copy of the source tree, which is then packaged and installed as Dataflow's workers do it
# (tests/test_packaging.py's sdist -> wheel -> fresh environment): no PROACTIVEBENCH_SCENARIO_PATH,
# no file left in the source tree, and the scenario reaches the installed copy through setup.py.

TREE_FILES = ("setup.py", "pyproject.toml", "run_pipeline.py", "core", "fetch", "pipeline",
              "transforms", "filters", "source_manifests", "runtime")
PACKAGE_MODULE = "proactivebench_builder.transforms.focus"


def _installed_env() -> dict:
    return {k: v for k, v in os.environ.items()
            if k not in ("PROACTIVEBENCH_SCENARIO_PATH", "PYTHONPATH", "PYTHONHOME")}


@pytest.fixture(scope="module")
@builds
def installed_module(tmp_path_factory):
    """(python of the installed copy, run_pipeline.py, workdir, sdist members) for a source tree
    whose transforms/ holds the Focus scenario as one module."""
    tree = tmp_path_factory.mktemp("tree")
    for name in TREE_FILES:
        source = os.path.join(SOURCE_TREE, name)
        if os.path.isdir(source):
            shutil.copytree(source, tree / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(source, tree / name)
    shutil.copy(os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py"),
                tree / "transforms" / "focus.py")
    shutil.copy(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml"),
                tree / "source_manifests" / "focus.yaml")
    sdist = build_sdist(str(tree), str(tmp_path_factory.mktemp("sdist")))
    with tarfile.open(sdist) as archive:
        members = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    python = install_in_fresh_venv(sdist, tmp_path_factory)
    workdir = tmp_path_factory.mktemp("elsewhere")
    where = subprocess.run(
        [python, "-c", "import sys; from proactivebench_builder.transforms import load_scenarios;"
         " cls = load_scenarios()['focus']; print(cls.__module__);"
         " print(sys.modules[cls.__module__].__file__); print(cls.manifest_location())"],
        cwd=str(workdir), env=_installed_env(), capture_output=True, text=True, timeout=300)
    assert where.returncode == 0, where.stderr[-3000:]
    return python, str(tree / "run_pipeline.py"), workdir, members, where.stdout.splitlines()


def _installed(installed_module, *command: str) -> subprocess.CompletedProcess:
    python, _, workdir, _, _ = installed_module
    return subprocess.run([python, *command], cwd=str(workdir), env=_installed_env(),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
@builds
def module_build(installed_module):
    """The installed copy's build of the module scenario from its miniature (no --sources_root:
    the installed package writes it under the working folder)."""
    _, run_pipeline, workdir, _, _ = installed_module
    output = str(workdir / "focus-build")
    done = _installed(installed_module, run_pipeline, "--scenarios", "focus", "--output", output,
                      "--runner=FnApiRunner", "--no_progress", "--upstream_export")
    assert done.returncode == 0, done.stderr[-3000:]
    return output


def test_a_module_in_transforms_is_packaged_and_registered(installed_module):
    _, _, _, members, (module, path, manifest) = installed_module
    assert {"transforms/focus.py", "source_manifests/focus.yaml"} <= members
    assert module == PACKAGE_MODULE and path.endswith("/proactivebench_builder/transforms/focus.py")
    assert not path.startswith(SOURCE_TREE) and manifest == "source_manifests/focus.yaml"


def test_a_module_in_transforms_builds_validates_and_plays(installed_module, module_build):
    _, run_pipeline, workdir, _, _ = installed_module
    rows = _rows(module_build)
    assert len(rows) == 15 and read_json(os.path.join(
        module_build, "reports", "build.json"))["scenarios"]["focus"]["dead_letters"] == 0
    done = _installed(installed_module, run_pipeline, "validate", module_build)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for data in (module_build, os.path.join(module_build, "upstream")):  # the export plays too
        results = str(workdir / f"oracle-{len(data)}.jsonl")
        done = _installed(installed_module, "-m", "proactivebench_builder.runtime", "evaluate",
                          "--data", data, "--model", "oracle", "--results", results)
        assert done.returncode == 0, done.stderr[-3000:]
        lines = read_jsonl(results)
        assert len(lines) == 15 and all(line["correct_prediction"] for line in lines)
        assert "FOC" in done.stdout and "100.0" in done.stdout


def test_a_module_in_transforms_is_filtered_by_predictions(installed_module, module_build):
    _, run_pipeline, workdir, _, _ = installed_module
    predictions = str(workdir / "predictions.jsonl")
    done = _installed(installed_module, "-m", "proactivebench_builder.runtime", "evaluate",
                      "--data", module_build, "--model", "random:3", "--first-round-only",
                      "--results", predictions)
    assert done.returncode == 0, done.stderr[-3000:]
    leaked = {p["key"] for p in read_jsonl(predictions) if p["correct"]}
    assert leaked
    filtered = str(workdir / "focus-filtered")
    done = _installed(installed_module, run_pipeline, "--scenarios", "focus", "--output", filtered,
                      f"--predictions={predictions}", "--runner=FnApiRunner", "--no_progress")
    assert done.returncode == 0, done.stderr[-3000:]
    kept = {r["key"] for r in _rows(filtered)}
    assert kept == {r["key"] for r in _rows(filtered, "unfiltered")} - leaked
    assert _installed(installed_module, run_pipeline, "validate", filtered).returncode == 0


@pytest.mark.parametrize("text, expected", [
    ("class Oops(:\n", "transforms/oops.py (line 1): SyntaxError"),
    ("from proactivebench_builder.transforms.api import Scenario, Play\n\n\n"
     "class Oops(Scenario):\n    name = 'oops'\n    config_name = 'Oops'\n"
     "    environment = Play(actions={'DEFOG': ('defog',)}, suggestions=('Defog the lens.',))\n",
     "no file 'oops.yaml' in source_manifests/ (proactivebench_builder.source_manifests)"),
])
def test_a_broken_module_in_transforms_is_one_line_naming_it(installed_module, text, expected):
    """In the installed copy (never the source tree), a module added to transforms/ that fails to
    import, or whose manifest is missing from source_manifests/, stops a build in one line."""
    _, run_pipeline, workdir, _, (_, path, _) = installed_module
    added = os.path.join(os.path.dirname(path), "oops.py")
    with open(added, "w", encoding="utf-8") as handle:
        handle.write(text)
    try:
        done = _installed(installed_module, run_pipeline, "--scenarios", "oops", "--output",
                          str(workdir / "oops"), "--runner=FnApiRunner", "--no_progress")
    finally:
        os.remove(added)
    lines = [line for line in done.stderr.strip().splitlines() if " INFO " not in line]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, \
        done.stderr[-3000:]
    assert expected in lines[0]
