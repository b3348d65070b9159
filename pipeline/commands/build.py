"""`python run_pipeline.py [build flags]` and its subcommands.

    run_pipeline.py [--output DIR] [--sources_root URL] [--scenarios a,b] [--seed N] [Beam flags]
    run_pipeline.py <subcommand> --help        (subcommands are listed by --help)
"""
from __future__ import annotations

import json
import logging
import os
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from proactivebench_builder.pipeline import fileio, integrity
from proactivebench_builder.pipeline.build import BuildBenchmark
from proactivebench_builder.pipeline.import_upstream import fingerprint, present_configs
from proactivebench_builder.pipeline.manifests import (
    load_manifest, manifest_sha256, parameter_problem)
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
        parsed = yaml.safe_load(value)
        problem = parameter_problem(load_manifest(name), parameter, parsed)
        if problem:
            raise SystemExit(f"--set {name}.{parameter}: {problem} (see the parameter_rules of "
                             f"source_manifests/{name}.yaml)")
        overrides.setdefault(name, {})[parameter] = parsed
    return overrides


def check_numeric_flags(opts: BuildOptions) -> None:
    """Numeric build flags in their ranges, before any work."""
    ranges = {"max_bad_fraction": (0.0, 1.0), "filter_threshold": (0.0, 1.0),
              "min_models": (1, None)}
    for flag, (low, high) in ranges.items():
        value = getattr(opts, flag, None)
        if value is None:
            continue
        if value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise SystemExit(f"--{flag} {value}: must be {span}")


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


def configure_runner(options: PipelineOptions) -> str:
    """The runner's name, after accepting `--runner DaskRunner` (Beam knows it only by its
    module path) and giving Dask a partition count when none is set: the DaskRunner otherwise
    packs ~128 elements per partition, so a build would run on one worker.

    A local run keeps Beam's default, one in-memory worker, unless `--direct_num_workers` asks
    for more: a threaded build lost part of one stage's output once in about twenty 10%-scale
    benchmark builds (caught by the accounting check; README, "Running locally"), and one
    in-memory worker has no concurrency in which to lose anything."""
    standard = options.view_as(StandardOptions)
    if standard.runner in ("DaskRunner", DASK_RUNNER):
        from apache_beam.runners.dask.dask_runner import DaskOptions

        standard.runner = DASK_RUNNER
        dask = options.view_as(DaskOptions)
        if dask.npartitions is None and dask.partition_size is None:
            dask.npartitions = DEFAULT_DASK_PARTITIONS
    return standard.runner or "DirectRunner"


def run_pipeline(options: PipelineOptions, params: dict) -> None:
    """Run the build graph to completion. The DaskRunner opens a Dask client that it never
    closes, so it is closed here (else the process holds a connection to the cluster, or
    keeps the local cluster it started)."""
    from proactivebench_builder.filters.inputs import selection_inputs

    pipeline = beam.Pipeline(options=options)
    _ = pipeline | "BuildBenchmark" >> BuildBenchmark(params, selection_inputs(params))
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
    check_numeric_flags(opts)
    params = build_params(opts, argv)
    if opts.verify_sources:
        check_sources(params)
    runner = configure_runner(options)
    if runner in LOCAL_RUNNERS:
        from apache_beam.options.pipeline_options import DirectOptions

        direct = options.view_as(DirectOptions)
        runner += f" ({direct.direct_num_workers} workers, {direct.direct_running_mode})"
    LOG.info("building %s into %s on %s", ", ".join(params["scenarios"]), params["output"], runner)
    for name in params["scenarios"]:
        LOG.info("  %-12s <- %s", name, params["sources"][name])
    with integrity.BuildLock(params["output"]):  # one writer per folder, released on any exit
        if integrity.remove_leftovers(params["output"]):
            LOG.info("removed temporary files a killed build left in %s", params["output"])
        integrity.mark_building(params["output"])
        try:
            report = build_and_check(options, opts, params)
        except BaseException as err:
            try:
                integrity.mark_finished(params["output"], failure_reason(err))
            except OSError:  # e.g. the disk is full: build.json still says "building"
                LOG.warning("could not record the failure in %s", params["output"])
            raise
        report.update(integrity.mark_finished(params["output"], None))
    return report


def failure_reason(err: BaseException) -> str:
    """One line for build.json's `failure`: what stopped the build."""
    if isinstance(err, BuildFailed):
        return str(err)
    first_line = (str(err).splitlines() or [""])[0]
    return io_error_line(err) or f"{type(err).__name__}: {first_line}"


def io_error_line(err: BaseException) -> str | None:
    """`<strerror> (errno N): <path>` of the OS error behind `err`, which Beam may have wrapped
    (re-raised with the worker's traceback in its text), else None."""
    import re

    seen = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            where = seen.filename or ""
            return f"{seen.strerror or os.strerror(seen.errno)} (errno {seen.errno})" + (
                f": {where}" if where else "")
        seen = seen.__cause__ or seen.__context__
    match = re.search(r"\[Errno (\d+)\] ([^:\n]+)(?:: '([^'\n]+)')?", str(err))
    if match:
        return f"{match[2]} (errno {match[1]})" + (f": {match[3]}" if match[3] else "")
    return None


def build_and_check(options, opts, params) -> dict:
    """Run the graph, then the checks that decide whether the written folder can be trusted."""
    from proactivebench_builder.pipeline.commands.validate import validate_folder

    run_pipeline(options, params)
    report = json.loads(fileio.read_bytes(fileio.join(params["output"], REPORTS_DIR, "build.json")))
    print(summary_table(report["scenarios"]))
    if params["selection"]["mode"] != "none":
        filters = json.loads(fileio.read_bytes(fileio.join(params["output"], REPORTS_DIR,
                                                           "filter.json")))
        print(filter_table(filters["scenarios"]))
    write_build_plots(params["output"])
    check_bad_fraction(report["scenarios"], opts.max_bad_fraction)
    problems = (integrity.shard_problems(params["output"], report)
                + integrity.card_problems(params["output"], report))
    if problems:  # e.g. another writer changed a shard: nothing written may be trusted
        raise BuildFailed("shards differ from reports/build.json: " + "; ".join(problems[:5]))
    if opts.final_validation != "off":
        problems = validate_folder(params["output"], decode_frames=opts.final_validation == "full",
                                   check_status=False)
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
    except integrity.FolderLocked as err:
        print(f"BUILD REFUSED: {err}", file=sys.stderr)
        return 3
    except Exception as err:  # an I/O error (disk full, permissions) is one line, not a traceback
        line = io_error_line(err)
        if line is None:
            raise
        print(f"BUILD FAILED: {line}", file=sys.stderr)
        return 1
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
