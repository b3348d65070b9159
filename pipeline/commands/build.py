"""`python run_pipeline.py [build flags] [Beam flags]`: the build.

The command line is checked and made into a `BuildConfig` before any work
(`pipeline.commands.beam_flags`, `.configure`, `.output_folder`); the build then takes the output
folder's lock, marks it "building", runs the Beam graph (`pipeline.build`) on the runner chosen
(`pipeline.local_runs` for a local one), checks what was written and marks the folder "ok", or
"failed" with the reason. Its errors are typed (`core.errors`), so `core.cli.run_command` turns
each into one line and its exit code.
"""
from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions, GoogleCloudOptions, PipelineOptions, StandardOptions)

from proactivebench_builder.core import buildfolder, fileio, phases
from proactivebench_builder.core.cli import stop_reason
from proactivebench_builder.core.config import NO_FILTER, BuildConfig
from proactivebench_builder.core.errors import (
    BuildFailed, CommandError, OutputError, SourceError, StoreFailed, UsageError)
from proactivebench_builder.core.layout import BUILD_REPORT, DEAD_LETTERS, FAILURES, FILTER_REPORT
from proactivebench_builder.filters.coverage import coverage_message
from proactivebench_builder.filters.selection import selection_inputs
from proactivebench_builder.pipeline import beam_compat, failures, progress, row_store
from proactivebench_builder.pipeline.allocator import return_freed_buffers
from proactivebench_builder.pipeline.build import BuildBenchmark
from proactivebench_builder.pipeline.commands.beam_flags import (
    check_runner_name, parse_build_flags)
from proactivebench_builder.pipeline.commands.configure import build_config, check_sources
from proactivebench_builder.pipeline.commands.output_folder import (
    check_output_folder, check_reachable)
from proactivebench_builder.pipeline.commands.tables import filter_table, summary_table
from proactivebench_builder.pipeline.commands.validate import validate_folder
from proactivebench_builder.pipeline.dataset_card import stand_in_summary
from proactivebench_builder.pipeline.folder_lock import BuildLock
from proactivebench_builder.pipeline.local_runs import (
    LOCAL_RUNNERS, configure_runner, local_workers_apart_from_ctrl_c, quiet_worker_logs,
    worker_failures_reported_once)
from proactivebench_builder.pipeline.options import BuildOptions
from proactivebench_builder.pipeline.plots import write_build_plots
from proactivebench_builder.pipeline.train import unused_confidences

LOG = logging.getLogger("proactivebench_builder")


def run_pipeline(options: PipelineOptions, config: BuildConfig, local: bool,
                 show_progress: bool = False) -> None:
    """Run the build graph to completion, showing its progress on stderr when asked (a local
    run only: the DoFns report into a folder of this machine, pipeline/progress.py). A typed
    failure a worker recorded (pipeline.failures) is raised as itself. The DaskRunner opens a
    Dask client that it never closes, so it is closed here (else the process holds a connection
    to the cluster, or keeps the local cluster it started)."""
    display = None
    if show_progress:
        config = config.replace(progress_dir=tempfile.mkdtemp(prefix="proactivebench-progress-"))
        display = progress.Display(config.progress_dir, sys.stderr)
    # a local run records failures on the launcher's disk (a full output disk cannot stop the
    # record); elsewhere in the output, which every worker reaches
    config = config.replace(failures_dir=tempfile.mkdtemp(prefix="proactivebench-failures-")
                            if local else fileio.join(config.output, FAILURES))
    pipeline = beam.Pipeline(runner=beam_compat.local_runner(options) if local else None,
                             options=options)
    _ = pipeline | "BuildBenchmark" >> BuildBenchmark(config, selection_inputs(config))
    debug = options.view_as(BuildOptions).debug
    try:
        with local_workers_apart_from_ctrl_c(), worker_failures_reported_once(debug), \
                (display.showing() if display else contextlib.nullcontext()):
            result = pipeline.run()
            try:
                result.wait_until_finish()
            finally:
                client = getattr(result, "client", None)
                if client is not None:
                    client.close()
    except Exception as err:  # noqa: BLE001 - re-raised, typed when a worker said what it was
        failures.raise_recorded(config.failures_dir, err)
        raise
    finally:
        failures.clear(config.failures_dir)


def run_build(argv: list[str]) -> dict:
    """Build the benchmark; returns the build report (`reports/build.json`)."""
    return_freed_buffers()  # the driver (and the workers of an in-process runner)
    argv = parse_build_flags(argv)
    options = PipelineOptions(argv)
    opts = options.view_as(BuildOptions)
    if opts.record and not opts.verify_sources:
        raise UsageError("--record writes the lock files --verify_sources compares: give both")
    check_runner_name(options.view_as(StandardOptions).runner)
    check_output_folder(opts.output)  # numeric flags are range-checked by their argparse types
    for flag, url in (("--temp_location", options.view_as(GoogleCloudOptions).temp_location),
                      ("--staging_location",
                       options.view_as(GoogleCloudOptions).staging_location)):
        if url and not fileio.is_local(url):  # Dataflow stages here first: offline, say so
            check_reachable(flag, url)
    config = build_config(opts, argv)
    # the driver's own long steps (verifying sources, the checks of the written folder): bars
    # on a terminal (unless --no_progress), else lines of the build's log
    on_terminal = progress.enabled(None, sys.stderr) and opts.progress is not False
    checks = phases.BAR if on_terminal else phases.LINES
    with phases.showing(checks, write=LOG.info):
        if opts.verify_sources:
            check_sources(config, record=opts.record)
        return build_in_folder(options, opts, argv, config)


def build_in_folder(options, opts, argv: list[str], config: BuildConfig) -> dict:
    """Run the build into its output folder, holding the folder's lock; returns the report."""
    runner = configure_runner(options, argv)
    local = runner in LOCAL_RUNNERS
    if local:
        direct = options.view_as(DirectOptions)
        runner += f" ({direct.direct_num_workers} workers, {direct.direct_running_mode})"
        if direct.direct_running_mode == "multi_processing" and \
                config.output.startswith("memory://"):
            # the workers hand each other rows through the output folder (the row store)
            raise OutputError(f"{config.output}: a memory:// folder is private to each "
                              "process, and this build's worker processes share their rows "
                              "through the output folder: give an --output every worker "
                              "reaches, or --direct_running_mode=in_memory")
    show_progress = local and progress.enabled(opts.progress, sys.stderr)
    if local:
        quiet_worker_logs(options, argv, show_progress)
    output = config.output
    try:
        with BuildLock(output):  # one writer per folder, released on any exit
            # said once the folder is ours: a build refused by the lock says only that
            LOG.info("building %s into %s on %s", ", ".join(config.scenarios), output, runner)
            for name in config.scenarios:
                LOG.info("  %-12s <- %s", name, config.sources[name])
            if buildfolder.remove_leftovers(output):
                LOG.info("removed temporary files a killed build left in %s", output)
            buildfolder.mark_building(output)
            try:
                report = build_and_check(options, opts, config, local, show_progress)
            except BaseException as err:
                try:
                    buildfolder.mark_finished(output, failure_reason(err))
                except Exception as mark_err:  # noqa: BLE001 - a full disk, a store that
                    if not fileio.is_store_error(mark_err):  # does not answer; else a bug
                        raise
                    LOG.warning("could not record the failure in %s (%s): its build.json "
                                "still says building", output, fileio.store_error_text(mark_err))
                try:
                    row_store.remove_store(output)  # what the workers left there
                except Exception as remove_err:  # noqa: BLE001 - as above
                    if not fileio.is_store_error(remove_err):
                        raise
                    LOG.warning("could not remove the row store's files from %s (%s)", output,
                                fileio.store_error_text(remove_err))
                raise
            report.update(buildfolder.mark_finished(output, None))
    except OSError as err:
        if err.errno:
            raise OutputError.of(err) from err  # a full disk, permissions: one line, exit 1
        if fileio.is_local(output):
            raise
        raise _store_failed(output, err) from err
    except CommandError:
        raise
    except Exception as err:  # noqa: BLE001 - the launcher's own reads and writes of a remote
        if fileio.is_local(output) or not fileio.is_store_error(err):  # output; else a bug
            raise
        raise _store_failed(output, err) from err
    return report


def _store_failed(output: str, err: BaseException) -> OutputError:
    return OutputError(f"{output}: the store failed: {fileio.store_error_text(err)}; run the "
                       "same build again")


def failure_reason(err: BaseException) -> str:
    """One line for build.json's `failure`: what stopped the build."""
    if isinstance(err, KeyboardInterrupt):
        return stop_reason(getattr(err, "signum", signal.SIGINT))
    if isinstance(err, SourceError):
        return f"SourceError: {err}"
    if isinstance(err, (BuildFailed, OutputError, StoreFailed)):
        return str(err)
    if isinstance(err, OSError) and err.errno:
        return str(OutputError.of(err))
    # a worker's error reaches here as the runner's text; the worker recorded its own line
    return getattr(err, "failure_line", None) or \
        f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"


def build_and_check(options, opts, config: BuildConfig, local: bool, show_progress: bool) -> dict:
    """Run the graph, then the checks that decide whether the written folder can be trusted."""
    output = config.output
    run_pipeline(options, config, local, show_progress=show_progress)
    report = json.loads(fileio.read_bytes(fileio.join(output, BUILD_REPORT)))
    if "scenarios" not in report:  # still the launcher's own "building" mark
        raise BuildFailed(f"the workers' reports did not reach {output} as the launcher sees "
                          "it: the workers wrote to a folder of their own (a local path on a "
                          "cluster, memory://); give an --output that the launcher and every "
                          "worker reach")
    filters = None
    if config.selection.mode != NO_FILTER:
        filters = json.loads(fileio.read_bytes(fileio.join(output, FILTER_REPORT)))
        check_filter_errors(filters["scenarios"], output, imported=bool(config.import_upstream))
    print(summary_table(report["scenarios"]))
    if report.get("stand_ins"):  # the console says what the card's title says
        LOG.info("not the benchmark: %s (README: Regenerating the benchmark)",
                 stand_in_summary(report["stand_ins"]))
    if config.selection.predictions and config.train_sources:
        unused = unused_confidences(output, report.get("files", []),
                                    config.selection.predictions)
        if unused:
            LOG.warning("%d train predictions name no example of the train split, e.g. %s: "
                        "their confidences were not used", len(unused),
                        ", ".join("/".join(u) for u in unused[:3]))
    if filters:
        print(filter_table(filters["scenarios"]))
    with phases.phase("drawing the build's plots"):
        write_build_plots(output)
    check_something_read(report["scenarios"], config.scenarios)
    check_bad_fraction(report["scenarios"], opts.max_bad_fraction)
    problems = (buildfolder.shard_problems(output, report)
                + buildfolder.card_problems(output, report))
    if problems:  # e.g. another writer changed a shard: nothing written may be trusted
        raise BuildFailed("shards differ from reports/build.json: " + "; ".join(problems[:5]))
    if opts.final_validation != "off":
        problems = validate_folder(output, decode_frames=opts.final_validation == "full",
                                   check_status=False)
        if problems:
            raise BuildFailed(f"the written folder breaks the record contract in {len(problems)} "
                              f"places, e.g.: " + "; ".join(problems[:5]))
    return report


def check_filter_errors(scenarios: dict, output: str, imported: bool = False) -> None:
    """The pool step reports predictions or a keep-list that cannot filter its pool as a value
    (filters/selection.py); the build then fails with those messages. The folder is then marked
    failed, and nothing (evaluate, validate, publish) reads a failed folder's pool, so the way
    on is said: build the pool first, without the filter; for an import, the release's own
    files that could not be read are the way on (the first one named)."""
    failed = [f for _, f in sorted(scenarios.items()) if f.get("error")]
    coverage = [f["error"] for f in failed if f.get("error_kind") == "coverage"]
    errors = [f["error"] for f in failed if f.get("error_kind") != "coverage"]
    if coverage:
        errors.append(coverage_message(coverage).replace("--data DIR", f"--data {output}"))
    if errors and imported:
        first = first_dead_letter(output)
        raise BuildFailed("cannot filter: " + " ".join(errors) + " (" + (
            f"the first that could not be imported: {first}; " if first else "") +
            "replace the release's files named in reports/dead_letters.jsonl with good copies "
            "(unzip its archives again), then run the same import again)")
    if errors:
        raise BuildFailed("cannot filter: " + " ".join(errors) + " (nothing reached the test "
                          f"split, and {output} is marked failed, so nothing reads its pool: "
                          "build the pool again without the filter, play or fix what the "
                          "filter needs on it, then rebuild with the filter)")


def check_something_read(scenarios: dict, built: list[str]) -> None:
    """A scenario of this build that counted no raw item built nothing, and no later check
    would say why (its pool is merely empty)."""
    empty = [name for name in sorted(built) if not scenarios.get(name, {}).get("raw_items")]
    if empty:
        raise BuildFailed(f"{', '.join(empty)}: no raw item was read: its units gave no "
                          "value (a scenario's read_unit yields self.count(\"raw_items\") once "
                          "per raw item, then its candidate or dead letter; "
                          "docs/adding_a_scenario.md), or its source holds none")


def first_dead_letter(output: str) -> str | None:
    """The first dead letter's path and reason in the build's report ("path: reason")."""
    try:
        with fileio.open_source(fileio.join(output, DEAD_LETTERS)) as handle:
            for _, raw in fileio.numbered_lines(handle, 1 << 16):
                letter = json.loads(raw) if raw else None
                if isinstance(letter, dict) and letter.get("path"):
                    return f"{letter['path']}: {letter.get('reason')}"
    except (OSError, ValueError):
        return None
    return None


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
