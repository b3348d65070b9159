"""Shared fixtures: miniature raw sources (written once per session, in each source's real
layout), the builds made of them (one per distinct set of inputs per session: shared_build),
and a helper that runs a whole build on the FnApiRunner (the runner every local build runs on:
pipeline.beam_compat.local_runner), in this process unless a test is about worker processes."""
from __future__ import annotations

import copy
import io
import json
import os
import shutil
import subprocess
import sys

# The suite holds a scenario defined only under tests/ (tests/extra_scenario/: a module and its
# manifest), made visible the documented way before anything loads the registry; worker
# processes inherit the variable.
EXTRA_SCENARIO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extra_scenario")
os.environ["PROACTIVEBENCH_SCENARIO_PATH"] = os.pathsep.join(
    p for p in (os.environ.get("PROACTIVEBENCH_SCENARIO_PATH"), EXTRA_SCENARIO_DIR) if p)

import pytest  # noqa: E402

from proactivebench_builder.core import results  # noqa: E402

from proactivebench_builder.pipeline.commands.build import run_build  # noqa: E402
from proactivebench_builder.pipeline.local_runs import flag_given  # noqa: E402
from proactivebench_builder.pipeline.miniature import ensure_miniature_sources  # noqa: E402
from proactivebench_builder.transforms import load_scenarios  # noqa: E402

RUNNER = "--runner=FnApiRunner"


# The inner loop's quick subset, `python -m pytest -q tests -m "not build"`, leaves out every
# test that builds (the miniature sources, a build, a command on a built folder) or starts a
# process of ours: what is left are the unit tests, the layers check and the fuzz targets.
# A test says that it builds: it uses a fixture declared with @builds (at any depth), or it
# carries @pytest.mark.build itself; the helpers below refuse to build for a test that does not.


def builds(fixture_function):
    """Declares a fixture that builds, writes miniature sources or starts a process of ours:
    every test that uses it, directly or through other fixtures, is marked `build`. (Apply it
    under @pytest.fixture.)"""
    fixture_function.builds = True
    return fixture_function


def uses_a_building_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info else ()
    return any(getattr(d.func, "builds", False) for defs in definitions for d in defs)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if uses_a_building_fixture(item):
            item.add_marker(pytest.mark.build)


RUNNING = {}  # "test": the test being run


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    RUNNING["test"] = item


def check_declared_build() -> None:
    """A test that builds without saying so would run in the quick subset: refused."""
    test = RUNNING.get("test")
    if test is not None and test.get_closest_marker("build") is None:
        pytest.fail(f"{test.nodeid} builds: mark it @pytest.mark.build, or build in a fixture "
                    "declared with @builds", pytrace=False)


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
@builds
def miniature_root(tmp_path_factory) -> str:
    """Every registered scenario's miniature source, under one root (read-only: a test that
    damages a source works on a copy)."""
    root = str(tmp_path_factory.mktemp("miniature_sources"))
    return ensure_miniature_sources(root, load_scenarios())


# One in-memory worker: the build's DoFns run in this process, so they see a test's
# monkeypatches and no worker process is started (a default local build starts one per core,
# seconds each). Builds in tests run so unless the test is about worker processes, which then
# says so with WORKER_PROCESSES (or its own --direct_num_workers / --direct_running_mode).
IN_PROCESS = "--direct_num_workers=1"
# The default local run's workers: one process per core (no --direct_num_workers given).
WORKER_PROCESSES = "--direct_running_mode=multi_processing"


def worker_flags(flags) -> list[str]:
    """[IN_PROCESS], unless `flags` (a build's other flags) set the workers themselves."""
    sets_workers = any(flag_given(list(flags), name)
                       for name in ("direct_num_workers", "direct_running_mode"))
    return [] if sets_workers else [IN_PROCESS]


def build_flags(sources_root: str, scenarios: str, *extra: str) -> list[str]:
    """The flags `run` builds with, but --output."""
    return [f"--sources_root={sources_root}", f"--scenarios={scenarios}", RUNNER,
            *worker_flags(extra), *extra]


def run(output: str, sources_root: str, scenarios: str, *extra: str) -> dict:
    """Build into `output`, in this process unless `extra` sets the workers; returns
    reports/build.json."""
    check_declared_build()
    return run_build([f"--output={output}", *build_flags(sources_root, scenarios, *extra)])


class SharedBuilds:
    """The builds of one pytest run, one per distinct set of inputs: asked again for the same
    sources, scenarios and flags, it hands back the folder it built the first time (and a copy
    of its report). Tests that only read a build share it; a test that changes the folder works
    on a copy (shutil.copytree), and one whose monkeypatches reach into the build builds its own
    (conftest.run)."""

    def __init__(self, tmp_path_factory):
        self._tmp_path_factory = tmp_path_factory
        self._built: dict[tuple[str, ...], tuple[str, dict]] = {}

    def __call__(self, sources_root: str, scenarios: str, *extra: str) -> tuple[str, dict]:
        """(output folder, build.json) of a build of `scenarios` with `extra`'s flags."""
        check_declared_build()
        key = tuple(build_flags(sources_root, scenarios, *extra))
        if key not in self._built:
            label = scenarios.replace(",", "_")
            output = str(self._tmp_path_factory.mktemp(f"{label}_build") / "proactivebench")
            self._built[key] = output, run(output, sources_root, scenarios, *extra)
        output, report = self._built[key]
        return output, copy.deepcopy(report)


@pytest.fixture(scope="session")
@builds
def shared_build(tmp_path_factory) -> SharedBuilds:
    return SharedBuilds(tmp_path_factory)


@pytest.fixture(scope="session")
@builds
def built_miniature(shared_build, miniature_root) -> str:
    """A build of every scenario from the miniature sources, with the upstream export (the
    tests of the export read it), shared by read-only tests."""
    return shared_build(miniature_root, "all", "--upstream_export")[0]


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


def shard_files(output: str, config: str | None = None) -> dict[str, bytes]:
    """Relative path -> bytes of every Parquet shard under `output` (of `config` only, when
    given: its test and unfiltered shards)."""
    found = {}
    for folder, _, names in os.walk(output):
        for name in names:
            if name.endswith(".parquet"):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, output)
                if config is None or config in relative.split(os.sep)[:2]:
                    with open(path, "rb") as handle:
                        found[relative] = handle.read()
    return found


def build_report(output: str) -> dict:
    return read_json(os.path.join(output, "reports", "build.json"))


def private_miniature(tmp_path_factory, name: str) -> str:
    """A sources root holding only `name`'s miniature source, private to one test module."""
    check_declared_build()
    root = str(tmp_path_factory.mktemp(f"{name}_sources"))
    return ensure_miniature_sources(root, {name: load_scenarios()[name]})


class FakeStream(io.StringIO):
    """A text stream that says whether it is a terminal."""

    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


class StderrAtCalls:
    """What a command had written to stderr when it first called each watched function: a
    phase line found there was said before the work that function does (no timing involved).
    `text` accumulates stderr as read so far; `out` the same for stdout."""

    def __init__(self, capsys, monkeypatch):
        self.capsys, self.monkeypatch = capsys, monkeypatch
        self.text, self.out = "", ""
        self.at_first_call: dict[str, str] = {}

    def read(self) -> str:
        captured = self.capsys.readouterr()
        self.text += captured.err
        self.out += captured.out
        return self.text

    def watch(self, owner, name: str) -> None:
        original = getattr(owner, name)

        def called(*args, **kwargs):
            self.at_first_call.setdefault(name, self.read())
            return original(*args, **kwargs)

        self.monkeypatch.setattr(owner, name, called)

    def lines(self) -> list[str]:
        return self.read().splitlines()


@pytest.fixture
def stderr_at_calls(capsys, monkeypatch) -> StderrAtCalls:
    return StderrAtCalls(capsys, monkeypatch)


# ---- a real S3 API (moto's server), for remote stores that fail part way --------------------

@pytest.fixture(scope="session")
def s3_port():
    """A local S3-compatible server (moto's) holding one bucket."""
    boto3 = pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        port = server._server.server_port
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                     aws_access_key_id="x", aws_secret_access_key="x").create_bucket(
            Bucket="bucket")
        yield port
    finally:
        server.stop()


def s3_objects(port: int, prefix: str) -> dict[str, bytes]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="x")
    found = {}
    for item in s3.list_objects_v2(Bucket="bucket", Prefix=prefix).get("Contents", []):
        found[item["Key"][len(prefix):]] = s3.get_object(Bucket="bucket",
                                                         Key=item["Key"])["Body"].read()
    return found


def s3_environment(port: int) -> dict:
    """The environment of a command of ours that reads and writes s3:// through the endpoint at
    `port`, with the S3 client's retries at one attempt (a dead endpoint then fails at once)."""
    return dict(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="x",
                AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1", AWS_MAX_ATTEMPTS="1",
                AWS_RETRY_MODE="standard")


# A build in a child process, with a deadline (a hang is a failure, never a stuck suite), on
# copies of some of the miniature sources (which a test may then damage).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PIPELINE = os.path.join(REPO, "run_pipeline.py")
DEADLINE_S = 600  # a hang, not slowness: a miniature build takes well under a minute


def copy_sources(miniature_root: str, tmp_path, *folders: str) -> str:
    """A sources root under `tmp_path` holding copies of the named miniature source folders."""
    root = str(tmp_path / "sources")
    for folder in folders:
        shutil.copytree(os.path.join(miniature_root, folder), os.path.join(root, folder))
    return root


def build(tmp_path, sources: str, scenarios: str, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    """Build `scenarios` from `sources` into tmp_path/out in a child process (no train split,
    bad inputs tolerated up to 90%); returns the finished process and the output folder."""
    output = str(tmp_path / "out")
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", "--no_progress", "--no_train",
         "--max_bad_fraction=0.9", f"--scenarios={scenarios}", f"--sources_root={sources}",
         f"--output={output}", *worker_flags(extra), *extra],
        capture_output=True, text=True, timeout=DEADLINE_S, cwd=str(tmp_path))
    return result, output


@pytest.fixture
def small_filesystem(tmp_path):
    """A 256 kB tmpfs when this machine lets us mount one, else None."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def accounted(report: dict) -> None:
    for name, entry in report["scenarios"].items():
        balance = entry["samples"] + entry["dead_letters"] + sum(entry["excluded"].values())
        assert entry["accounted"] and entry["raw_items"] == balance, (name, entry)


def dead_letters(output: str) -> list[dict]:
    return read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))


def dead_letter_reasons(output: str) -> dict[str, str]:
    return {d["path"]: d["reason"]
            for d in read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))}


def balanced(report: dict) -> bool:
    """raw items = samples + dead letters + exclusions, per scenario (build.json's check)."""
    return all(s["accounted"] and s["raw_items"] == s["samples"] + s["dead_letters"]
               + sum(s.get("excluded", {}).values()) for s in report["scenarios"].values())


# ---- a scenario's values, read in the test's process -------------------------------------------

def values_of(scenario, unit) -> list:
    """The values of reading `unit`; ROD's "archives": every archive's unit, the fragments of a
    sequence merged as the build merges them."""
    if unit != "archives":
        return list(scenario.read_unit(unit))
    from proactivebench_builder.pipeline.reading import merged_fragments

    values = [v for u in scenario.list_units() for v in scenario.read_unit(u)]
    fragments = [v for v in values if isinstance(v, results.Fragment)]
    return [v for v in values if v not in fragments] + list(merged_fragments(fragments))


def _frame_paths_of(scenario, values) -> dict[str, list[str]]:
    """key -> the upstream-layout path of each frame, for the candidates among `values`."""
    found = {}
    for v in values:
        if isinstance(v, results.Candidate):
            row = scenario.build_sample(v.key, v.item)
            found[v.key] = [scenario.frame_path(row, f) for f in row["frame_ids"]]
    return found


def get_scenario_named(name: str, root: str):
    from proactivebench_builder.transforms import get_scenario

    return get_scenario(name)(0, root)


def private_root(tmp_path, name: str) -> str:
    from proactivebench_builder.pipeline.miniature import ensure_miniature_sources
    from proactivebench_builder.transforms import load_scenarios

    return ensure_miniature_sources(str(tmp_path / "src"), {name: load_scenarios()[name]})
