"""core.moved: an import of a module that moved (code written against an older layout) fails
with one line naming the new home, whichever way it is imported and in a fresh process, and the
finder behind it hides no module that exists."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from proactivebench_builder.core.moved import MOVED, NAMESPACE, moved_message

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_NAMES = sorted(f"{NAMESPACE}.{old}" for old in MOVED)


def _new_home(old: str) -> str:
    new = MOVED[old[len(NAMESPACE) + 1:]]
    return f"{NAMESPACE}.{new[0] if isinstance(new, tuple) else new}"


@pytest.mark.parametrize("old", OLD_NAMES)
def test_importing_a_moved_module_is_one_line_naming_its_new_home(old):
    with pytest.raises(ImportError) as raised:
        importlib.import_module(old)
    message = str(raised.value)
    assert message == moved_message(old) and "\n" not in message
    assert message.startswith(f"{old} moved to {_new_home(old)}")
    importlib.import_module(_new_home(old))  # the new home is a module that exists
    assert old not in sys.modules


@pytest.mark.parametrize("old", OLD_NAMES)
def test_from_import_of_a_moved_module_names_its_new_home_too(old):
    """`from package import old` would otherwise say only "cannot import name"."""
    package, _, leaf = old.rpartition(".")
    with pytest.raises(ImportError, match=f"^{old} moved to {_new_home(old)}"):
        exec(f"from {package} import {leaf}", {})


def test_a_scenario_facing_old_home_points_at_the_api():
    assert moved_message(f"{NAMESPACE}.pipeline.fileio") == (
        f"{NAMESPACE}.pipeline.fileio moved to {NAMESPACE}.core.fileio; a scenario imports what "
        f"it needs from {NAMESPACE}.transforms.api (docs/adding_a_scenario.md)")


def test_the_finder_hides_nothing_that_exists():
    assert moved_message(f"{NAMESPACE}.core.fileio") is None
    with pytest.raises(ModuleNotFoundError, match="No module named"):
        importlib.import_module(f"{NAMESPACE}.pipeline.no_such_module")
    product = {os.path.relpath(os.path.join(folder, name), REPO)[:-3].replace(os.sep, ".")
               for top in ("core", "fetch", "pipeline", "transforms", "filters", "runtime")
               for folder, _, names in os.walk(os.path.join(REPO, top))
               for name in names if name.endswith(".py")}
    assert not product & set(MOVED), "a module that exists is listed as moved"


def test_an_old_import_is_refused_in_a_fresh_process():
    """The first import of a process may be the old name: its package installs the finder."""
    script = ("import json, sys\nfound = {}\nfor old in sys.argv[1:]:\n"
              "    try:\n        __import__(old)\n    except ImportError as err:\n"
              "        found[old] = str(err)\n    else:\n        found[old] = None\n"
              "print(json.dumps(found))\n")
    found = {}
    for old in OLD_NAMES:  # one process each: the first import of our code is the old name
        done = subprocess.run([sys.executable, "-c", script, old], capture_output=True,
                              text=True, timeout=300, check=True)
        found.update(json.loads(done.stdout))
    assert found == {old: moved_message(old) for old in OLD_NAMES}


def test_a_plugin_written_against_the_old_layout_stops_the_build_in_one_line(tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "old_scenario.py").write_text(
        "from proactivebench_builder.pipeline.fileio import join\n"
        "from proactivebench_builder.transforms.base import Scenario\n")
    env = dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=str(folder))
    done = subprocess.run([sys.executable, os.path.join(REPO, "run_pipeline.py"),
                           f"--output={tmp_path / 'out'}", "--runner=FnApiRunner"],
                          env=env, capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    expected = moved_message(f"{NAMESPACE}.pipeline.fileio")
    assert lines[0].endswith(f"{folder / 'old_scenario.py'}: ImportError: {expected}")
