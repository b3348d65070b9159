"""The shape of the code, checked: layers whose imports point one way, no import cycle (imports
inside functions included), and a scenario's knowledge in its own folder only.

    core  <-  transforms (scenarios)  <-  filters  <-  pipeline (the Beam graph)  <-  commands
      ^              ^                                                                   |
      |              +-------------------- fetch (getting and checking the sources)  <---+
      +-- runtime ---+           (the runtime reads the core and the scenarios' declarations)

Nothing is run: the product code is parsed (`ast`), as a reader would read it.
"""
from __future__ import annotations

import ast
import os
import re

import pytest

from proactivebench_builder import transforms
from proactivebench_builder.transforms import load_scenarios

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "proactivebench_builder"
PRODUCT = ("core", "transforms", "filters", "pipeline", "runtime", "source_manifests", "fetch")

# What each layer may import of ours (a module's own package is always allowed).
MAY_IMPORT = {
    "core": {"core"},
    "transforms": {"core", "transforms"},
    "filters": {"core", "filters"},
    "pipeline": {"core", "transforms", "filters", "pipeline"},
    # fetch reads the scenarios' manifests (their downloads: and pins), never the Beam graph
    "fetch": {"core", "transforms", "fetch"},
    "commands": {"core", "transforms", "filters", "pipeline", "fetch", "commands"},
    "runtime": {"core", "transforms", "runtime"},
    "source_manifests": set(),
}


def layer(module: str) -> str:
    return "commands" if module.startswith("pipeline.commands") else module.split(".")[0]


def product_modules() -> dict[str, str]:
    found = {}
    for top in PRODUCT:
        for folder, _, names in os.walk(os.path.join(REPO, top)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    module = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                    found[module.removesuffix(".__init__")] = path
    return found


MODULES = product_modules()


def imports_of(path: str) -> list[tuple[str, int, bool]]:
    """(module of ours, line, inside a function) of every import statement in a file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(NAMESPACE + "."):
            base = node.module[len(NAMESPACE) + 1:]
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name[len(NAMESPACE) + 1:] for a in node.names
                     if a.name.startswith(NAMESPACE + ".")]
        elif isinstance(node, ast.ImportFrom) and node.module == NAMESPACE:
            names = [a.name for a in node.names]
        inside, up = False, node
        while up in parents:
            up = parents[up]
            inside = inside or isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef))
        found += [(name, node.lineno, inside) for name in names if name in MODULES]
    return found


GRAPH = {module: imports_of(path) for module, path in MODULES.items()}


def test_each_layer_imports_only_the_layers_below_it():
    wrong = [f"{MODULES[m]}:{line}: {m} ({layer(m)}) imports {target} ({layer(target)})"
             for m, found in GRAPH.items() for target, line, _ in found
             if layer(target) not in MAY_IMPORT[layer(m)]]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_even_inside_functions():
    edges = {m: {target for target, _, _ in found} for m, found in GRAPH.items()}
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    assert not cycles, cycles


def test_imports_sit_at_the_top_unless_a_comment_says_why():
    """A lazy import is kept only for start-up time, and says so on the line before it."""
    unexplained = []
    for module, found in GRAPH.items():
        lines = open(MODULES[module], encoding="utf-8").read().splitlines()
        for target, line, inside in found:
            if inside and not lines[line - 2].strip().startswith("#"):
                unexplained.append(f"{MODULES[module]}:{line}: {target}")
    assert not unexplained, unexplained


# ---- a scenario's knowledge lives in its folder ----------------------------------------------------

def string_literals(path: str):
    """(line, text) of every string literal of a file that is not a docstring."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node.lineno, node.value


def scenario_marks() -> dict[str, tuple[set[str], list[str]]]:
    """Per built-in scenario: the words that name it (name, config name, short name) and its
    option texts."""
    marks = {}
    for name, cls in load_scenarios().items():
        if not cls.__module__.startswith(f"{NAMESPACE}.transforms."):
            continue  # a plug-in (tests/extra_scenario)
        play = cls.environment
        words = {name, cls.config_name, play.short_name} - {""}
        texts = [t for t in (*play.suggestions, *play.probe_suggestions) if len(t) > 8]
        marks[name] = (words, texts)
    return marks


def test_no_file_outside_a_scenario_folder_names_it_or_holds_its_option_texts():
    marks = scenario_marks()
    found = []
    for module, path in MODULES.items():
        parts = module.split(".")
        own = parts[1] if parts[0] == "transforms" and len(parts) > 1 else None  # folder or module
        own_texts = marks[own][1] if own in marks else []
        for line, text in string_literals(path):
            tokens = set(re.findall(r"[A-Za-z0-9_\-]+", text))
            for name, (words, texts) in marks.items():
                if name == own:
                    continue
                # an option both scenarios offer (upstream's "Rewind the video.") is each one's own
                hits = sorted(tokens & words) + [t for t in texts
                                                 if t in text and t not in own_texts]
                if hits:
                    found.append(f"{os.path.relpath(path, REPO)}:{line}: {name}: {hits}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", sorted(scenario_marks()))
def test_each_scenario_is_a_folder_with_its_play_and_miniature(name):
    """The built-ins' shape: a folder each. A scenario that is one module of transforms/ (as a
    user may add) has only its manifest to show."""
    parts = load_scenarios()[name].__module__.split(".")
    if len(parts) > 3:  # proactivebench_builder.transforms.<folder>.<module>
        folder = os.path.join(REPO, "transforms", parts[2])
        assert {"__init__.py", "scenario.py", "play.py", "miniature.py"} <= set(os.listdir(folder))
    assert os.path.exists(os.path.join(REPO, "source_manifests", f"{name}.yaml"))


def scenario_modules() -> list[str]:
    """Every module of a scenario of this package (its folder's or its one module)."""
    shared = {f"transforms.{name}" for name in transforms.SHARED_MODULES}
    return sorted(m for m in MODULES if m.startswith("transforms.") and m not in shared)


def test_scenarios_import_our_code_through_the_api_alone():
    """A scenario imports what it needs of ours from `transforms.api` and nothing else but its
    own folder's modules, so that the project's other modules can move behind the API."""
    wrong = []
    for module in scenario_modules():
        own = ".".join(module.split(".")[:2])  # transforms.<scenario>
        for target, line, _ in GRAPH[module]:
            if target != "transforms.api" and target != own and not target.startswith(own + "."):
                wrong.append(f"{MODULES[module]}:{line}: {module} imports {target}")
    assert not wrong, "\n".join(wrong)
