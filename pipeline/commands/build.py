"""`python run_pipeline.py [build flags]` and its subcommands.

    run_pipeline.py [--output DIR] [--sources_root URL] [--scenarios a,b] [--seed N] [Beam flags]
    run_pipeline.py <subcommand> --help        (subcommands are listed by --help)
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from proactivebench_builder.pipeline import fileio
from proactivebench_builder.pipeline.build import BuildBenchmark
from proactivebench_builder.pipeline.import_upstream import fingerprint, present_configs
from proactivebench_builder.pipeline.manifests import load_manifest, manifest_sha256
from proactivebench_builder.pipeline.miniature import ensure_miniature_sources
from proactivebench_builder.pipeline.options import DEFAULT_MINIATURE_ROOT, BuildOptions
from proactivebench_builder.pipeline.plots import write_build_plots
from proactivebench_builder.pipeline.reports import REPORTS_DIR
from proactivebench_builder.transforms import load_scenarios

LOG = logging.getLogger("proactivebench_builder")


class BuildFailed(RuntimeError):
    """The build ran but its output must not be trusted (e.g. too many dead letters)."""


def _absolute(url: str) -> str:
    return url if "://" in url else os.path.abspath(url)


def choose_scenarios(spec: str) -> dict:
    registered = load_scenarios()
    if spec in ("", "all"):
        return registered
    chosen = {}
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        if name not in registered:
            raise SystemExit(f"unknown scenario {name!r}; registered: {', '.join(registered)}")
        chosen[name] = registered[name]
    return chosen


def resolve_sources(opts: BuildOptions, scenarios: dict) -> dict[str, str]:
    """Each scenario's source root: --source NAME=URL, else --sources_root/<source_subdir>, else
    the bundled miniature source (written on first use)."""
    overrides = {}
    for item in opts.source:
        name, sep, url = item.partition("=")
        if not sep or name not in scenarios:
            raise SystemExit(f"--source expects SCENARIO=URL with a chosen scenario, got {item!r}")
        overrides[name] = _absolute(url)
    root = opts.sources_root
    missing = [n for n in scenarios if n not in overrides]
    if root is None and missing:
        root = ensure_miniature_sources(_absolute(DEFAULT_MINIATURE_ROOT),
                                        {n: scenarios[n] for n in missing})
    sources = {n: overrides.get(n) or fileio.join(_absolute(root), load_manifest(n)["source_subdir"])
               for n in scenarios}
    absent = {n: url for n, url in sources.items() if not fileio.is_dir(url)}
    if absent:
        raise SystemExit("source folders not found: " + "; ".join(
            f"{n}: {url}" for n, url in sorted(absent.items())) + " (see README, 'Building from "
            "the real downloads', for the layout each scenario expects)")
    return sources


def parameter_overrides(items: list[str], scenarios: dict) -> dict[str, dict]:
    """--set SCENARIO.PARAMETER=VALUE, checked against the chosen scenarios' manifests."""
    import yaml

    overrides: dict[str, dict] = {}
    for item in items:
        target, sep, value = item.partition("=")
        name, dot, parameter = target.partition(".")
        if not sep or not dot or name not in scenarios:
            raise SystemExit(f"--set expects SCENARIO.PARAMETER=VALUE for a chosen scenario, "
                             f"got {item!r}")
        if parameter not in load_manifest(name)["parameters"]:
            raise SystemExit(f"--set {item!r}: {name} has no parameter {parameter!r} (see "
                             f"source_manifests/{name}.yaml)")
        overrides.setdefault(name, {})[parameter] = yaml.safe_load(value)
    return overrides


def selection_settings(opts: BuildOptions) -> dict:
    """The filter settings, checked before any work: a bad predictions file or a keep-list on a
    freshly built pool stops here with a clear message."""
    from proactivebench_builder.filters.leakage import KeepListError, load_keep_list
    from proactivebench_builder.filters.predictions import PredictionsError, read_predictions

    if opts.predictions and opts.keep_list:
        raise SystemExit("--predictions and --keep_list are alternatives; give one")
    mode = "predictions" if opts.predictions else "keep_list" if opts.keep_list else "none"
    try:
        if mode == "predictions":
            read_predictions(opts.predictions)
        if mode == "keep_list":
            if not opts.import_upstream:
                raise KeepListError(
                    "--keep_list names upstream's sample ids, which only an imported upstream "
                    "release carries (--import_upstream DIR); a pool built from the raw sources "
                    "has its own ids. Filter a fresh pool with --predictions FILE instead.")
            load_keep_list(opts.keep_list)
    except (PredictionsError, KeepListError, OSError, ValueError) as err:
        raise SystemExit(f"cannot filter: {err}") from None
    return {"mode": mode, "predictions": opts.predictions, "keep_list": opts.keep_list,
            "threshold": opts.filter_threshold, "min_models": opts.min_models,
            "allow_partial": opts.allow_partial_predictions}


def code_version() -> str:
    from proactivebench_builder.pipeline import __version__

    return __version__


def build_params(opts: BuildOptions, argv: list[str]) -> dict:
    scenarios = choose_scenarios(opts.scenarios)
    config_to_scenario = {cls.config_name: n for n, cls in load_scenarios().items()}
    selection = selection_settings(opts)
    params = {"seed": opts.seed, "output": _absolute(opts.output),
              "export_upstream": not opts.no_upstream_export,
              "config_to_scenario": config_to_scenario,
              "overrides": parameter_overrides(opts.overrides, scenarios)}
    if opts.import_upstream:
        folder = _absolute(opts.import_upstream)
        configs = present_configs(folder, {scenarios[n].config_name: n for n in scenarios})
        if not configs:
            raise SystemExit(f"--import_upstream {folder}: no <config>_preprocessed.jsonl of the "
                             "chosen scenarios there")
        scenarios = {config_to_scenario[c]: scenarios[config_to_scenario[c]] for c in configs}
        params.update(import_upstream=folder, import_configs=configs, keep_ids=True,
                      sources={n: folder for n in scenarios})
        selection["origin"] = fingerprint(folder, configs)
    else:
        params["sources"] = resolve_sources(opts, scenarios)
        selection["origin"] = "built"
        if not opts.no_train:
            params["train_sources"] = {n: params["sources"][n] for n, cls in scenarios.items()
                                       if cls.has_train_split}
    stamp = {
        "code_version": code_version(),
        "command": "run_pipeline.py " + " ".join(argv),
        "seed": opts.seed,
        "origin": selection["origin"],
        "parameter_overrides": params["overrides"],
        "manifests": {n: {"sha256": manifest_sha256(n)} for n in sorted(scenarios)},
        "filter": {k: selection[k] for k in ("mode", "threshold", "min_models")},
    }
    params.update(scenarios=sorted(scenarios), selection=selection, stamp=stamp)
    return params


DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DEFAULT_DASK_PARTITIONS = 16


# local runners, by the names configure_runner returns
LOCAL_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "FnApiRunner")
# The running mode of a local build that does not name one: worker processes, which share no
# Python state and whose data plane has no timed flush (docs/stress.md: 30 repeated builds agree).
DEFAULT_LOCAL_MODE = "multi_processing"


def configure_runner(options: PipelineOptions, argv: list[str] | None = None) -> str:
    """The runner's name, after accepting `--runner DaskRunner` (Beam knows it only by its
    module path) and giving Dask a partition count when none is set: the DaskRunner otherwise
    packs ~128 elements per partition, so a build would run on one worker.

    A local run uses every core: one worker process per core (`--direct_num_workers`, in
    DEFAULT_LOCAL_MODE) unless `argv` gives `--direct_num_workers` / `--direct_running_mode`
    (`--direct_num_workers=N` alone gets N workers in DEFAULT_LOCAL_MODE).
    Every local run also gets Beam's data plane without its timed flush (no_timed_flushes):
    that flush is what once lost part of a two-thread build's output."""
    standard = options.view_as(StandardOptions)
    if standard.runner in ("DaskRunner", DASK_RUNNER):
        from apache_beam.runners.dask.dask_runner import DaskOptions

        standard.runner = DASK_RUNNER
        dask = options.view_as(DaskOptions)
        if dask.npartitions is None and dask.partition_size is None:
            dask.npartitions = DEFAULT_DASK_PARTITIONS
    runner = standard.runner or "DirectRunner"
    if runner in LOCAL_RUNNERS:
        from apache_beam.options.pipeline_options import DirectOptions

        direct = options.view_as(DirectOptions)
        if not flag_given(argv or [], "direct_num_workers"):
            direct.direct_num_workers = available_cores()
        # Beam's own default mode, in_memory, would run any number of workers as one
        if direct.direct_num_workers > 1 and not flag_given(argv or [], "direct_running_mode"):
            direct.direct_running_mode = DEFAULT_LOCAL_MODE
        no_timed_flushes()
    return runner


def flag_given(argv: list[str], name: str) -> bool:
    """Whether `argv` sets `--name` (spelled with `_` or `-`, with or without `=`)."""
    spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
    return any(arg.split("=", 1)[0] in spellings for arg in argv)


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def no_timed_flushes() -> None:
    """Turn off the timed flush of the FnApiRunner's gRPC data plane (Beam 2.77).

    The runner's side of the data plane and its in-process (multi_threading) workers send a
    bundle's data through a `TimeBasedBufferingClosableOutputStream`, whose thread flushes the
    buffer every DATA_BUFFER_TIME_LIMIT_MS (1 s): it copies the buffer, hands the copy to the
    send queue, then empties the buffer. The thread that writes elements takes no lock, so
    elements written while the flusher is handing over its copy (the send queue can block) are
    emptied with it, unsent. That is how a two-thread build once lost the last samples and
    counts of two QuickDraw units, which arrive in one burst at the end of a unit (docs/stress.md
    reproduces it). With the limit at 0, streams flush only by size, from the writing thread;
    subprocess workers (multi_processing) already run so. A timed flush only helps streaming
    latency, which a batch build does not need."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0


def quiet_worker_logs(options: PipelineOptions, argv: list[str], show_progress: bool) -> None:
    """Worker processes (multi_processing) log straight to stderr: keep Beam's own chatter out
    of a build's log (channels established, harness started, and two warnings every worker
    gives at start: no main session to load, and our build flags, which the worker's Beam does
    not know), and while the progress display is drawn, our INFO lines too (the display says
    what they say, and a line written by another process under it would break it). Flags the
    user gives are kept."""
    from apache_beam.options.pipeline_options import WorkerOptions

    harness = options.view_as(WorkerOptions)
    if not flag_given(argv, "sdk_harness_log_level_overrides"):
        harness.sdk_harness_log_level_overrides = {
            "apache_beam": "WARNING", "apache_beam.options.pipeline_options": "ERROR",
            "__main__": "ERROR"}  # the worker's entry point, sdk_worker_main
    if show_progress and not flag_given(argv, "default_sdk_harness_log_level"):
        harness.default_sdk_harness_log_level = "WARNING"


def run_pipeline(options: PipelineOptions, params: dict, show_progress: bool = False) -> None:
    """Run the build graph to completion, showing its progress on stderr when asked (a local
    run only: the DoFns report into a folder of this machine, pipeline/progress.py). The
    DaskRunner opens a Dask client that it never closes, so it is closed here (else the
    process holds a connection to the cluster, or keeps the local cluster it started)."""
    from proactivebench_builder.filters.inputs import selection_inputs

    display = None
    if show_progress:
        import tempfile

        from proactivebench_builder.pipeline import progress

        params = dict(params, progress_dir=tempfile.mkdtemp(prefix="proactivebench-progress-"))
        display = progress.Display(params["progress_dir"], sys.stderr)
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | "BuildBenchmark" >> BuildBenchmark(params, selection_inputs(params))
    with (display.showing() if display else contextlib.nullcontext()):
        result = pipeline.run()
        try:
            result.wait_until_finish()
        finally:
            client = getattr(result, "client", None)
            if client is not None:
                client.close()


def run_build(argv: list[str]) -> dict:
    """Build the benchmark; returns the build report (`reports/build.json`)."""
    from proactivebench_builder.pipeline.allocator import return_freed_buffers

    return_freed_buffers()  # the driver (and the workers of an in-process runner)
    options = PipelineOptions(argv)
    opts = options.view_as(BuildOptions)
    params = build_params(opts, argv)
    if opts.verify_sources:
        check_sources(params)
    runner = configure_runner(options, argv)
    local = runner in LOCAL_RUNNERS
    if local:
        from apache_beam.options.pipeline_options import DirectOptions

        direct = options.view_as(DirectOptions)
        runner += f" ({direct.direct_num_workers} workers, {direct.direct_running_mode})"
    LOG.info("building %s into %s on %s", ", ".join(params["scenarios"]), params["output"], runner)
    for name in params["scenarios"]:
        LOG.info("  %-12s <- %s", name, params["sources"][name])
    from proactivebench_builder.pipeline.commands.validate import validate_folder
    from proactivebench_builder.pipeline.progress import enabled

    show_progress = local and enabled(opts.progress, sys.stderr)
    if local:
        quiet_worker_logs(options, argv, show_progress)
    run_pipeline(options, params, show_progress=show_progress)
    report = json.loads(fileio.read_bytes(fileio.join(params["output"], REPORTS_DIR, "build.json")))
    print(summary_table(report["scenarios"]))
    if params["selection"]["mode"] != "none":
        filters = json.loads(fileio.read_bytes(fileio.join(params["output"], REPORTS_DIR,
                                                           "filter.json")))
        print(filter_table(filters["scenarios"]))
    write_build_plots(params["output"])
    check_bad_fraction(report["scenarios"], opts.max_bad_fraction)
    if opts.final_validation != "off":
        problems = validate_folder(params["output"], decode_frames=opts.final_validation == "full")
        if problems:
            raise BuildFailed(f"the written folder breaks the record contract in {len(problems)} "
                              f"places, e.g.: " + "; ".join(problems[:5]))
    return report


def check_sources(params: dict) -> None:
    from proactivebench_builder.pipeline.verify_sources import verify_sources

    if params.get("import_upstream"):
        raise SystemExit("--verify_sources checks raw sources against their manifests; an "
                         "imported upstream release has no such pins")
    problems = verify_sources(params["sources"])
    if problems:
        raise SystemExit("source verification failed (nothing was built):\n  " +
                         "\n  ".join(problems))
    LOG.info("sources agree with their manifests' pins")


def summary_table(scenarios: dict) -> str:
    header = ("scenario", "raw items", "excluded", "samples", "test", "dead letters", "shards",
              "bytes")
    rows = [header]
    for name, r in sorted(scenarios.items()):
        rows.append((name, r["raw_items"], sum(r["excluded"].values()), r["samples"], r["kept"],
                     r["dead_letters"], r["shards"]["test"] + r["shards"]["unfiltered"],
                     r["bytes"]["test"] + r["bytes"]["unfiltered"]))
    return format_table(rows)


def filter_table(scenarios: dict) -> str:
    """The leakage filter per scenario: samples and mean first-round accuracy before/after."""
    def pct(value):
        return "-" if value is None else f"{100 * value:.1f}%"

    rows = [("scenario", "mode", "before", "after", "first-round acc before", "after", "models")]
    for name, f in sorted(scenarios.items()):
        rows.append((name, f["mode"], f["before"], f["after"],
                     pct(f.get("first_round_accuracy_before")),
                     pct(f.get("first_round_accuracy_after")), f.get("models", "-")))
    return format_table(rows)


def format_table(rows: list[tuple]) -> str:
    header = rows[0]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(v).rjust(w) if i else str(v).ljust(w)
                       for i, (v, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def check_bad_fraction(scenarios: dict, limit: float) -> None:
    bad = {n: r for n, r in scenarios.items() if r["bad_fraction"] > limit}
    if bad:
        detail = "; ".join(f"{n}: {r['dead_letters']} of {r['raw_items']} raw items "
                           f"({r['bad_fraction']:.1%}), by reason {r['dead_letters_by_reason']}"
                           for n, r in sorted(bad.items()))
        raise BuildFailed(f"too many bad inputs (--max_bad_fraction={limit}): {detail}. "
                          "See reports/dead_letters.jsonl for every path and reason.")


def configure_logging() -> None:
    """Our progress lines at INFO on stderr; Beam's own chatter stays at its default level
    (Beam installs a root handler on import, so `basicConfig` alone would do nothing)."""
    if LOG.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    configure_logging()
    commands = subcommands()
    if argv and argv[0] in commands:
        import importlib

        return importlib.import_module(commands[argv[0]][0]).main(argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("Subcommands:")
        for name, (_, text) in sorted(commands.items()):
            print(f"  {name:10s} {text}")
        import argparse

        parser = argparse.ArgumentParser(prog="run_pipeline.py", add_help=False,
                                         description="Build flags (any Beam flag is accepted too, "
                                         "e.g. --runner, --direct_num_workers):")
        BuildOptions._add_argparse_args(parser)
        parser.print_help()
        return 0
    try:
        run_build(argv)
    except BuildFailed as err:
        print(f"BUILD FAILED: {err}", file=sys.stderr)
        return 2
    return 0


def subcommands() -> dict:
    """Subcommands found by module: pipeline/commands/<name>.py with a `main(argv)` and `HELP`
    (this module, the build itself, is the one without a name)."""
    import importlib
    import pkgutil

    from proactivebench_builder.pipeline import commands

    found = {}
    for module in pkgutil.iter_modules(commands.__path__):
        if module.name != "build":
            mod = importlib.import_module(f"{commands.__name__}.{module.name}")
            found[module.name] = (mod.__name__, mod.HELP)
    return found
