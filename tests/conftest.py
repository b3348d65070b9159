"""Shared fixtures: miniature raw sources (written once per session, in each source's real
layout) and a helper that runs a whole build on the FnApiRunner (the runner every local build
runs on: pipeline.beam_compat.local_runner)."""
from __future__ import annotations

import inspect
import json
import os
import re

# The suite holds a scenario defined only under tests/ (tests/extra_scenario/: a module and its
# manifest), made visible the documented way before anything loads the registry; worker
# processes inherit the variable.
EXTRA_SCENARIO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extra_scenario")
os.environ["PROACTIVEBENCH_SCENARIO_PATH"] = os.pathsep.join(
    p for p in (os.environ.get("PROACTIVEBENCH_SCENARIO_PATH"), EXTRA_SCENARIO_DIR) if p)

import pytest  # noqa: E402

from proactivebench_builder.pipeline.commands.build import run_build  # noqa: E402
from proactivebench_builder.pipeline.miniature import ensure_miniature_sources  # noqa: E402
from proactivebench_builder.transforms import load_scenarios  # noqa: E402

RUNNER = "--runner=FnApiRunner"


# The inner loop's quick subset, `python -m pytest -q tests -m "not build"`, leaves out every
# test that builds (the miniature sources, a build, a command on a built folder) or starts a
# process of ours: what is left are the unit tests, the layers check and the fuzz targets,
# a few minutes where the whole suite takes ten to twenty.
BUILD_CALLS = re.compile(r"\b(run|run_build|build_once|private_miniature|run_cli|run_pipeline|"
                         r"ensure_miniature_sources|subprocess\.run|subprocess\.Popen)\(")


def _source(function) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _builds(item) -> bool:
    """Whether the test, or a fixture it uses (at any depth), calls what builds."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for definitions in (info.name2fixturedefs.values() if info else ()):
        functions += [d.func for d in definitions]
    return any(BUILD_CALLS.search(_source(f)) for f in functions if f is not None)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _builds(item):
            item.add_marker(pytest.mark.build)


def pytest_configure(config):
    """`datasets` caches a loaded local folder under a name that can survive a change of the
    files (seen across test sessions), so every session starts from an empty cache, and every
    test gets its own (below); module-scoped fixtures use the session's."""
    config.addinivalue_line("markers", "build: builds or runs a command of ours in a process "
                                       "(left out by the quick subset: -m 'not build')")
    import tempfile

    import datasets

    datasets.config.HF_DATASETS_CACHE = tempfile.mkdtemp(prefix="hf_datasets_cache_")


@pytest.fixture(autouse=True)
def fresh_datasets_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


@pytest.fixture(scope="session")
def miniature_root(tmp_path_factory) -> str:
    """Every registered scenario's miniature source, under one root."""
    root = str(tmp_path_factory.mktemp("miniature_sources"))
    return ensure_miniature_sources(root, load_scenarios())


# One in-memory worker: a build whose DoFns must see a test's monkeypatches runs in this process
# (a default local build runs its DoFns in worker processes of their own).
IN_PROCESS = "--direct_num_workers=1"


def run(output: str, sources_root: str, scenarios: str, *extra: str) -> dict:
    """Build into `output`; returns reports/build.json."""
    return run_build([f"--output={output}", f"--sources_root={sources_root}",
                      f"--scenarios={scenarios}", RUNNER, *extra])


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def file_bytes(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def file_text(path, encoding: str = "utf-8") -> str:
    with open(path, encoding=encoding) as handle:
        return handle.read()


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def shard_files(output: str) -> dict[str, bytes]:
    """Relative path -> bytes of every Parquet shard under `output`."""
    found = {}
    for folder, _, names in os.walk(output):
        for name in names:
            if name.endswith(".parquet"):
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    found[os.path.relpath(path, output)] = handle.read()
    return found


def private_miniature(tmp_path_factory, name: str) -> str:
    """A sources root holding only `name`'s miniature source, private to one test module."""
    root = str(tmp_path_factory.mktemp(f"{name}_sources"))
    return ensure_miniature_sources(root, {name: load_scenarios()[name]})


def build_once(tmp_path_factory, sources_root: str, name: str, *extra: str) -> tuple[str, dict]:
    """(output folder, build.json) of one build of `name` into a fresh folder."""
    output = str(tmp_path_factory.mktemp(f"{name}_build") / "out")
    return output, run(output, sources_root, name, *extra)


@pytest.fixture(scope="session")
def built_miniature(tmp_path_factory, miniature_root) -> str:
    """One build of every scenario from the miniature sources, with the upstream export (the
    tests of the export read it), shared by read-only tests."""
    output = str(tmp_path_factory.mktemp("built") / "proactivebench")
    run(output, miniature_root, "all", "--upstream_export")
    return output
