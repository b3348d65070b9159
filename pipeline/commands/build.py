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

from proactivebench_builder.pipeline import fileio, integrity
from proactivebench_builder.pipeline.build import BuildBenchmark
from proactivebench_builder.pipeline.commands.arguments import (
    CommandParser, UsageError, closest, run_command, unknown_name)
from proactivebench_builder.pipeline.import_upstream import fingerprint, present_configs
# the runner's configuration and the local worker processes (re-exported: scripts and tests
# reach them through this command)
from proactivebench_builder.pipeline.local_runs import (  # noqa: F401
    DASK_RUNNER, DEFAULT_DASK_PARTITIONS, DEFAULT_LOCAL_MODE, LOCAL_RUNNERS, available_cores,
    configure_runner, flag_given, local_workers_apart_from_ctrl_c, no_timed_flushes,
    quiet_worker_logs, worker_failures_reported_once)
from proactivebench_builder.pipeline.manifests import (
    load_manifest, manifest_location, manifest_sha256, parameter_problem)
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
    from proactivebench_builder.transforms import ScenarioPathError, VocabularyError

    try:
        registered = load_scenarios()
    except (ScenarioPathError, VocabularyError) as err:  # a scenario author's mistake
        raise SystemExit(f"scenario registry: {err}") from None
    if spec == "all":
        return registered
    chosen = {}
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        if name not in registered:
            raise UsageError("--scenarios: " + unknown_name("scenario", name, registered))
        chosen[name] = registered[name]
    if not chosen:
        raise UsageError(f"--scenarios {spec!r} names no scenario (known: "
                         f"{', '.join(registered)}, or all)")
    return chosen


def resolve_sources(opts: BuildOptions, scenarios: dict) -> dict[str, str]:
    """Each scenario's source root: --source NAME=URL, else --sources_root/<source_subdir>, else
    the bundled miniature source (written on first use)."""
    overrides = {}
    for item in opts.source:
        name, sep, url = item.partition("=")
        if not sep:
            raise UsageError(f"--source expects SCENARIO=URL, got {item!r}")
        if name not in scenarios:
            registered = load_scenarios()
            raise UsageError(
                f"--source {item!r}: " + (f"{name} is not among the scenarios built "
                                          f"({', '.join(sorted(scenarios))}; see --scenarios)"
                                          if name in registered else
                                          unknown_name("scenario", name, registered)))
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
            f"{n}: {url}" for n, url in sorted(absent.items())) + " (docs/sources.md gives the "
            "layout each scenario expects and where to get it)")
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
                             f"{manifest_location(name)})")
        parsed = yaml.safe_load(value)
        problem = parameter_problem(load_manifest(name), parameter, parsed)
        if problem:
            raise SystemExit(f"--set {name}.{parameter}: {problem} (see "
                             f"{manifest_location(name)})")
        overrides.setdefault(name, {})[parameter] = parsed
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
    params["update"] = plan_partial_update(params)
    if selection["mode"] == "predictions":
        check_predictions_cover_pool(params)
    return params


def plan_partial_update(params: dict) -> dict | None:
    """Some scenarios into a folder holding a build of more: update them, keep the others
    (pipeline/partial_rebuild.py), or refuse before any work naming the way out."""
    from proactivebench_builder.pipeline.partial_rebuild import UpdateRefused, plan_update

    capable = {n for n, cls in load_scenarios().items() if cls.has_train_split}
    try:
        update = plan_update(params, capable)
    except UpdateRefused as err:
        raise SystemExit(str(err)) from None
    if update:
        LOG.info("updating %s in %s; keeping %s as built", ", ".join(params["scenarios"]),
                 params["output"], ", ".join(update["kept"]))
        if update["train_sources"]:  # the shared train split is rebuilt whole
            params["train_sources"] = {**params["train_sources"], **update["train_sources"]}
            for name, overrides in update["train_overrides"].items():
                params["overrides"].setdefault(name, overrides)
    return update


def check_predictions_cover_pool(params: dict) -> None:
    """Before any work: the predictions cover what the filter will judge (filters/coverage.py)."""
    from proactivebench_builder.filters.coverage import check_before_work
    from proactivebench_builder.filters.predictions import read_predictions

    problem = check_before_work(read_predictions(params["selection"]["predictions"]), params)
    if problem:
        raise SystemExit(f"cannot filter: {problem}")


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
    debug = options.view_as(BuildOptions).debug
    with local_workers_apart_from_ctrl_c(), worker_failures_reported_once(debug), \
            (display.showing() if display else contextlib.nullcontext()):
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
    argv = parse_build_flags(argv)
    options = PipelineOptions(argv)
    opts = options.view_as(BuildOptions)
    if opts.record and not opts.verify_sources:
        raise UsageError("--record writes the lock files --verify_sources compares: give both")
    check_runner_name(options.view_as(StandardOptions).runner)
    check_output_folder(opts.output)  # numeric flags are range-checked by their argparse types
    params = build_params(opts, argv)
    if opts.verify_sources:
        check_sources(params, record=opts.record)
    runner = configure_runner(options, argv)
    local = runner in LOCAL_RUNNERS
    if local:
        from apache_beam.options.pipeline_options import DirectOptions

        direct = options.view_as(DirectOptions)
        runner += f" ({direct.direct_num_workers} workers, {direct.direct_running_mode})"
    from proactivebench_builder.pipeline.progress import enabled

    show_progress = local and enabled(opts.progress, sys.stderr)
    if local:
        quiet_worker_logs(options, argv, show_progress)
    with integrity.BuildLock(params["output"]):  # one writer per folder, released on any exit
        # said once the folder is ours: a build refused by the lock says only that
        LOG.info("building %s into %s on %s", ", ".join(params["scenarios"]), params["output"],
                 runner)
        for name in params["scenarios"]:
            LOG.info("  %-12s <- %s", name, params["sources"][name])
        if integrity.remove_leftovers(params["output"]):
            LOG.info("removed temporary files a killed build left in %s", params["output"])
        integrity.mark_building(params["output"])
        try:
            report = build_and_check(options, opts, params, show_progress)
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
    if isinstance(err, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    first_line = (str(err).splitlines() or [""])[0]
    # a scenario's SourceError (e.g. a link out of the sources root), which Beam may re-raise
    # with the worker's traceback in its text: its own line says what is wrong
    source = source_error_line(err)
    if source is not None and not isinstance(err, OSError):
        return f"SourceError: {source}"
    return io_error_line(err) or f"{type(err).__name__}: {first_line}"


def exception_chain(err: BaseException):
    """`err`, then the exceptions it was raised from or while handling, innermost last."""
    while err is not None:
        yield err
        err = err.__cause__ or err.__context__


def io_error_line(err: BaseException) -> str | None:
    """`<strerror> (errno N): <path>` of the OS error behind `err`, which Beam may have wrapped
    (re-raised with the worker's traceback in its text), else None."""
    import re

    for seen in exception_chain(err):
        if isinstance(seen, OSError) and seen.errno:
            where = seen.filename or ""
            return f"{seen.strerror or os.strerror(seen.errno)} (errno {seen.errno})" + (
                f": {where}" if where else "")
    # a worker's traceback text may name the error first without its path (the `open` that
    # failed), then with it (as re-raised): the first mention with a path is the clearer one
    matches = list(re.finditer(r"\[Errno (\d+)\] ([^:\n]+)(?:: '([^'\n]+)')?", str(err)))
    match = next((m for m in matches if m[3]), matches[0] if matches else None)
    if match:
        return f"{match[2]} (errno {match[1]})" + (f": {match[3]}" if match[3] else "")
    return None


def build_and_check(options, opts, params, show_progress: bool) -> dict:
    """Run the graph, then the checks that decide whether the written folder can be trusted."""
    from proactivebench_builder.pipeline.commands.validate import validate_folder

    run_pipeline(options, params, show_progress=show_progress)
    report = json.loads(fileio.read_bytes(fileio.join(params["output"], REPORTS_DIR, "build.json")))
    filters = None
    if params["selection"]["mode"] != "none":
        filters = json.loads(fileio.read_bytes(fileio.join(params["output"], REPORTS_DIR,
                                                           "filter.json")))
        check_filter_errors(filters["scenarios"], params["output"])
    print(summary_table(report["scenarios"]))
    if filters:
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


def check_filter_errors(scenarios: dict, output: str) -> None:
    """The pool step reports predictions or a keep-list that cannot filter its pool as a value
    (filters/selection.py); the build then fails with those messages, naming the written pool."""
    from proactivebench_builder.filters.coverage import coverage_message

    failed = [f for _, f in sorted(scenarios.items()) if f.get("error")]
    coverage = [f["error"] for f in failed if f.get("error_kind") == "coverage"]
    errors = [f["error"] for f in failed if f.get("error_kind") != "coverage"]
    if coverage:
        errors.append(coverage_message(coverage).replace("--data DIR", f"--data {output}"))
    if errors:
        raise BuildFailed("cannot filter: " + " ".join(errors) + " (nothing reached the test "
                          f"split; the unfiltered pool is written in {output})")


def check_sources(params: dict, record: bool = False) -> None:
    from proactivebench_builder.pipeline.verify_sources import record_sources, verify_sources

    if params.get("import_upstream"):
        raise SystemExit("--verify_sources checks raw sources against their manifests; an "
                         "imported upstream release has no such pins")
    if record:
        problems, written = record_sources(params["sources"])
    else:
        problems, written = verify_sources(params["sources"]), []
    if problems:
        raise SystemExit("source verification failed (nothing was " +
                         ("recorded or built" if record else "built") + "):\n  " +
                         "\n  ".join(problems))
    for line in written:
        LOG.info("lock file %s", line)
    LOG.info("sources agree with their manifests' pins" +
             (" (lock files recorded)" if record else ""))


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
        def reasons(r: dict) -> str:
            return ", ".join(f"{reason} {count}"
                             for reason, count in sorted(r["dead_letters_by_reason"].items()))

        detail = "; ".join(f"{n}: {r['dead_letters']} of {r['raw_items']} raw items "
                           f"({r['bad_fraction']:.1%}), by reason: {reasons(r)}"
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


PROG = "run_pipeline.py"
BEAM_OPTIONS_URL = ("https://beam.apache.org/releases/pydoc/current/"
                    "apache_beam.options.pipeline_options.html")


def help_parser(commands: dict) -> CommandParser:
    """The build's own flags, for --help (Beam's ~200 flags are only named)."""
    import argparse

    listing = "\n".join(f"  {name:10s} {text}" for name, (_, text) in sorted(commands.items()))
    parser = CommandParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} [build flags] [Beam flags]\n       {PROG} <subcommand> --help",
        description="Build ProactiveBench. Without flags: every registered scenario, from the "
                    "bundled miniature\nsources, into ./build/proactivebench, on the local "
                    "runner.\n\nSubcommands:\n" + listing,
        epilog="Any Beam pipeline option is accepted too, e.g. --runner, --direct_num_workers, "
               "--direct_running_mode,\n--temp_location, --project, --region, --setup_file, "
               "--dask_client_address; all of them:\n" + BEAM_OPTIONS_URL + "\nFlags after a lone "
               "-- go to Beam unchecked (options of a runner's service that Beam does not "
               "declare).")
    BuildOptions._add_argparse_args(parser)
    return parser


def beam_flags_parser(argv: list[str]) -> CommandParser:
    """A parser that knows exactly the flags Beam's `PipelineOptions` will read from `argv`:
    those of every loaded `PipelineOptions` subclass (BuildOptions among them), collected as
    Beam collects them, plus the DaskRunner's when the command line mentions Dask (its
    module costs half a second to import). Beam itself drops an unknown flag with a warning;
    this parser refuses it."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    if any("dask" in arg.lower() for arg in argv):
        try:
            import apache_beam.runners.dask.dask_runner  # noqa: F401  (defines DaskOptions)
        except ImportError:  # the [dask] extra is not installed: --runner DaskRunner says so
            pass

    class BeamFlags(CommandParser, _BeamArgumentParser):
        pass

    parser = BeamFlags(prog=PROG, add_help=False)
    classes = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)
    return parser


def parse_build_flags(argv: list[str]) -> list[str]:
    """The build's command line, checked before any work: every flag must be one of the build's
    or a real Beam option, each value must parse; returns it with every flag spelled as
    declared (underscores), which is what Beam's parser needs. Flags after a lone `--` go to
    Beam unchecked and unchanged: a runner's service may take options this Beam release does not
    declare (Dataflow forwards them to the job)."""
    argv = list(argv)
    head, tail = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    parser = beam_flags_parser(head)
    head = parser.normalise(head)
    parser.parse_args(head)  # exits 2 with one line on an unknown flag or a bad value
    return head + tail


def check_runner_name(runner: str | None) -> None:
    """An unknown --runner stops the command before any work (Beam would refuse it only once the
    pipeline runs). Names are matched as Beam matches them (any case, 'Runner' optional); a
    dotted path names a runner class of the user's and is left to Beam."""
    if runner is None or "." in runner or runner == "DaskRunner":  # see configure_runner
        return
    known = {path.rsplit(".", 1)[-1] for path in StandardOptions.ALL_KNOWN_RUNNERS}
    lowered = {name.lower() for name in known}
    if runner.lower() in lowered or runner.lower() + "runner" in lowered:
        return
    raise UsageError("--runner: " + unknown_name("runner", runner, sorted(known | {"DaskRunner"})))


def not_a_build(path: str) -> str | None:
    """The name of an entry that shows the existing folder `path` is not a build's (a build
    writes over what it finds, so it must not be let loose on, say, a docs folder); None when
    it is new, empty, or holds a build report or only what a build killed early leaves."""
    from proactivebench_builder.pipeline import integrity

    if not os.path.isdir(path) or os.path.exists(os.path.join(path, integrity.REPORT)):
        return None
    leftovers = (integrity.LOCK_NAME, "reports")  # a build killed before its first report
    return next((name for name in sorted(os.listdir(path))
                 if name not in leftovers and not name.startswith(".tmp-")), None)


def check_output_folder(output: str) -> None:
    """A local --output that cannot become a folder stops the command before any work (the
    build would otherwise fail only after it ran). Remote URLs are left to their writers."""
    import tempfile

    if not fileio.is_local(output):
        return
    path = os.path.abspath(output)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--output {output} is an existing file, not a folder")
    foreign = not_a_build(path)
    if foreign:
        raise UsageError(f"--output {output} holds files no build wrote (e.g. {foreign!r}) and "
                         "no reports/build.json; give a new or empty folder, or one a build wrote")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"--output {output} cannot be created: {existing} is a file")
    try:  # a real probe: os.access says yes to root on a read-only file system
        tempfile.TemporaryDirectory(dir=existing, prefix=".write-probe-").cleanup()
    except OSError as err:
        raise UsageError(f"--output {output} cannot be written: {existing}: "
                         f"{err.strerror or err}") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_command(PROG, dispatch, argv)


def dispatch(argv: list[str]) -> int:
    """A subcommand (its own `main`), --help, or the build."""
    configure_logging()
    commands = subcommands()
    if argv and argv[0] in commands:
        import importlib

        return importlib.import_module(commands[argv[0]][0]).main(argv[1:])
    if any(arg in ("-h", "--help") for arg in argv):
        help_parser(commands).print_help()
        return 0
    if argv and not argv[0].startswith("-"):
        guess = closest(argv[0], commands)
        hint = f"; did you mean {guess}?" if guess else ""
        print(f"{PROG}: error: unknown subcommand {argv[0]!r}{hint} (subcommands: "
              f"{', '.join(sorted(commands))}; build flags start with --)", file=sys.stderr)
        return 2
    try:
        run_build(argv)
    except BuildFailed as err:
        print(f"BUILD FAILED: {err}", file=sys.stderr)
        return 2
    except integrity.FolderLocked as err:
        print(f"BUILD REFUSED: {err}", file=sys.stderr)
        return 3
    except Exception as err:  # an I/O error (disk full, permissions) is one line, not a traceback
        line = source_error_line(err)
        if line is not None:  # a source folder that is not what its scenario reads
            print(f"BUILD FAILED: {line}", file=sys.stderr)
            return 2
        line = io_error_line(err)
        if line is None:
            raise
        print(f"BUILD FAILED: {line}", file=sys.stderr)
        return 1
    return 0


def source_error_line(err: BaseException) -> str | None:
    """The message of the `transforms.base.SourceError` behind `err` (a scenario found its
    source folder unusable while listing it: no files, a missing labels file), which a worker
    may have re-raised as text, else None."""
    import re

    from proactivebench_builder.transforms.base import SourceError

    step = re.compile(r" \[while running [^\n]*\]$")  # the step Beam names after the message
    for seen in exception_chain(err):
        if isinstance(seen, SourceError):
            return step.sub("", str(seen).splitlines()[0])
    match = re.search(r"SourceError: ([^\n]+)$", str(err), re.M)
    return step.sub("", match[1]) if match else None


def subcommands() -> dict:
    """Subcommands found by module: pipeline/commands/<name>.py with a `main(argv)` and `HELP`
    (this module, the build itself, is the one without a name; `arguments` is plumbing)."""
    import importlib
    import pkgutil

    from proactivebench_builder.pipeline import commands

    found = {}
    for module in pkgutil.iter_modules(commands.__path__):
        if module.name not in ("build", "arguments"):
            mod = importlib.import_module(f"{commands.__name__}.{module.name}")
            found[module.name] = (mod.__name__, mod.HELP)
    return found
