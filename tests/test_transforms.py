"""transforms/__init__.py: the scenario registry and the plug-ins it loads from
PROACTIVEBENCH_SCENARIO_PATH. A plug-in module is loaded by its path (one named like a
standard module shadows nothing; two folders may each hold a module of one name); an
unusable scenario path is one line in every command."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import EXTRA_SCENARIO_DIR, RUN_PIPELINE, builds, run


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
