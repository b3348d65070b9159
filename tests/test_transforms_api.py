"""transforms.api, the scenario author's API: one module holds every name a scenario imports of
this project, docs/adding_a_scenario.md lists each of them, and the scenarios written for the
suite and the guide import from it alone. (Those scenarios going the whole way, build to
filtered rebuild, is tests/test_extra_scenario.py and tests/test_adding_a_scenario_doc.py; that
the built-in scenarios import through it is tests/test_layers.py.)"""
from __future__ import annotations

import ast
import os
import re

from conftest import EXTRA_SCENARIO_DIR
from proactivebench_builder.core import errors, fileio, play, vocabulary
from proactivebench_builder.transforms import api, base

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(REPO, "docs", "adding_a_scenario.md")
NAMESPACE = "proactivebench_builder"


def guide_text() -> str:
    with open(GUIDE, encoding="utf-8") as handle:
        return handle.read()


def our_imports(source: str) -> set[str]:
    """The modules of ours a piece of Python source imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(NAMESPACE):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(NAMESPACE)}
    return found


def test_every_public_name_is_listed_and_is_the_object_of_its_home():
    public = {name for name in vars(api) if not name.startswith("_") and name != "annotations"}
    assert sorted(api.__all__) == sorted(public)
    assert api.Scenario is base.Scenario and api.Play is play.Play and api.fileio is fileio
    assert api.BadItem is errors.BadItem and api.format_category is vocabulary.format_category


def test_the_guide_lists_every_name_of_the_api():
    listed = set()
    for line in guide_text().splitlines():
        if line.startswith("| `"):
            listed |= set(re.findall(r"`(\w+)`", line.split("|")[1]))
    assert set(api.__all__) <= listed, sorted(set(api.__all__) - listed)


def test_the_suites_plugin_and_the_guides_example_import_from_the_api_alone():
    with open(os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py"), encoding="utf-8") as handle:
        sources = {"focus_scenario.py": handle.read()}
    for body in re.findall(r"```python\n(.*?)```", guide_text(), re.DOTALL):
        sources[body.splitlines()[0]] = body
    assert len(sources) >= 2
    for name, source in sources.items():
        assert our_imports(source) == {f"{NAMESPACE}.transforms.api"}, name
