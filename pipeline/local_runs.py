"""How a build runs: the runner it is given (the DaskRunner's name and partitions; on the local
runner one worker process per core, without Beam's timed data-plane flush) and the local worker
processes around it (their start-up noise, Ctrl-C, and failures reported once, by the command).

`pipeline/commands/build.py` calls these around `pipeline.run()`; nothing here builds the graph.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess

from apache_beam.options.pipeline_options import (
    DirectOptions, PipelineOptions, StandardOptions, WorkerOptions)

from proactivebench_builder.core.cli import at_interrupt, canonical
from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.pipeline import beam_compat, worker_main
from proactivebench_builder.pipeline.worker_main import BEAM_WORKER_MODULE

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
    Every local run also gets Beam's data plane without its timed flush (beam_compat):
    that flush is what once lost part of a two-thread build's output."""
    standard = options.view_as(StandardOptions)
    if standard.runner in ("DaskRunner", DASK_RUNNER):
        from apache_beam.runners.dask.dask_runner import DaskOptions

        standard.runner = DASK_RUNNER
        dask = options.view_as(DaskOptions)
        if dask.npartitions is None and dask.partition_size is None:
            dask.npartitions = DEFAULT_DASK_PARTITIONS
        if dask.address:
            check_scheduler(dask.address)
    runner = standard.runner or "DirectRunner"
    if runner in LOCAL_RUNNERS:
        direct = options.view_as(DirectOptions)
        if not flag_given(argv or [], "direct_num_workers"):
            direct.direct_num_workers = available_cores()
        # Beam's own default mode, in_memory, would run any number of workers as one
        if direct.direct_num_workers > 1 and not flag_given(argv or [], "direct_running_mode"):
            direct.direct_running_mode = DEFAULT_LOCAL_MODE
        beam_compat.no_timed_flushes()
    return runner


def check_scheduler(address: str, timeout_s: float = 10.0) -> None:
    """Refuse, before any work, a --dask_client_address where nothing listens (distributed would
    try for 30 s and end in an OSError without an errno). Only tcp:// addresses (the default
    scheme) are probed; others are left to distributed."""
    scheme, _, location = address.rpartition("://")
    if scheme not in ("", "tcp"):
        return
    host, _, port = location.rpartition(":")
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                 timeout=timeout_s).close()
    except ValueError:
        raise UsageError(f"--dask_client_address {address}: expected tcp://HOST:PORT") from None
    except OSError as err:
        raise UsageError(f"--dask_client_address {address}: no Dask scheduler answers there "
                         f"({err.strerror or err}); start one (dask scheduler) or leave the "
                         "flag out for a local cluster") from None


def flag_given(argv: list[str], name: str) -> bool:
    """Whether `argv` sets `--name` (spelled with `_` or `-`, with or without `=`)."""
    return any(canonical(arg.split("=", 1)[0]) == f"--{name}" for arg in argv)


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def quiet_worker_logs(options: PipelineOptions, argv: list[str], show_progress: bool) -> None:
    """Worker processes (multi_processing) log straight to stderr: keep Beam's own chatter out
    of a build's log (channels established, harness started, and two warnings every worker
    gives at start: no main session to load, and our build flags, which the worker's Beam does
    not know), and while the progress display is drawn, our INFO lines too (the display says
    what they say, and a line written by another process under it would break it). Flags the
    user gives are kept."""
    harness = options.view_as(WorkerOptions)
    if not flag_given(argv, "sdk_harness_log_level_overrides"):
        harness.sdk_harness_log_level_overrides = {
            "apache_beam": "WARNING", "apache_beam.options.pipeline_options": "ERROR",
            "__main__": "ERROR"}  # the worker's entry point, sdk_worker_main
    if show_progress and not flag_given(argv, "default_sdk_harness_log_level"):
        harness.default_sdk_harness_log_level = "WARNING"


# Beam's loggers that report a failed step at ERROR, each with a whole traceback: the local job
# service relaying a worker process's records ('Worker: ...'), the DoFn runner, and the SDK
# worker ('Error processing instruction ...').
BEAM_FAILURE_LOGGERS = ("apache_beam.runners.portability.local_job_service",
                        "apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker")


class _FailureReportedElsewhere(logging.Filter):
    """Drops ERROR records: the same failure reaches this process as the pipeline's exception,
    which the command reports in one line (or with its traceback, for a bug)."""

    def filter(self, record) -> bool:
        return record.levelno < logging.ERROR


@contextlib.contextmanager
def worker_failures_reported_once(debug: bool):
    """Unless --debug, a failed step is reported once, by the command, instead of also as
    tracebacks from Beam's loggers and from the SDK worker's own print to stderr (silenced here
    for an in-process worker; pipeline/worker_main.py does it in worker processes)."""
    if debug:
        yield
        return
    quiet = _FailureReportedElsewhere()
    loggers = [logging.getLogger(name) for name in BEAM_FAILURE_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    restore = beam_compat.quiet_instruction_tracebacks()
    try:
        yield
    finally:
        restore()
        for logger in loggers:
            logger.removeFilter(quiet)


class _WorkerSubprocess:
    """The `subprocess` module as Beam's local job service sees it, except that Popen starts
    each worker in a session of its own, through pipeline/worker_main.py (Beam's worker with
    our known noise silenced), and remembers it."""

    def __init__(self, module):
        self._module = module
        self.started = []

    def __getattr__(self, name):
        return getattr(self._module, name)

    def Popen(self, *args, **kwargs):  # noqa: N802 (the name Beam calls)
        kwargs.setdefault("start_new_session", True)
        if args and isinstance(args[0], str):  # Beam's command line, run with shell=True
            args = (args[0].replace(f"-m {BEAM_WORKER_MODULE}", f"-m {worker_main.__name__}"),) \
                + args[1:]
        process = self._module.Popen(*args, **kwargs)
        self.started.append(process)
        return process


@contextlib.contextmanager
def local_workers_apart_from_ctrl_c():
    """Beam's multi-processing workers (`--direct_running_mode=multi_processing`) start in the
    build's process group, so a terminal's Ctrl-C reaches each of them as well, and each prints
    its own KeyboardInterrupt tracebacks. Here they start in a session of their own (Beam has
    no setting for it; its one Popen call, in `local_job_service`, is handed a `subprocess`
    whose Popen adds `start_new_session`), so Ctrl-C reaches the build alone. The build ends
    them silently (SIGKILL to their process group) the moment Ctrl-C is pressed, before Beam's
    teardown asks them to stop (each would log that it is leaving), and when it stops early for
    any other reason."""
    if os.name != "posix":
        yield
        return
    workers = _WorkerSubprocess(subprocess)

    def end_workers():
        for process in workers.started:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:  # already gone
                pass

    try:
        with beam_compat.worker_processes(workers), at_interrupt(end_workers):
            yield  # (at_interrupt: at once, before Beam's teardown talks to the workers)
    except BaseException:
        end_workers()
        raise
