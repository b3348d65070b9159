"""Every place the build reaches into Beam's internals, in one module, each checked against the
Beam release it was made for.

setup.py pins apache-beam to 2.77.x, and each patch below names the internal it relies on. When
another Beam is installed, or the internal is gone, the patch stops the command with one line
naming what changed and this file, instead of silently doing nothing (or the wrong thing).

- `no_timed_flushes`: the FnApiRunner's gRPC data plane flushes a buffer on a timer from another
  thread, which once lost elements of a two-thread build (docs/stress.md): set the timer to 0.
- `worker_processes(popen_module)`: Beam's local job service starts multi-processing workers with
  `subprocess.Popen` and no settings: hand it a `subprocess` whose Popen starts each in its own
  session through our worker entry (pipeline/worker_main.py).
- `quiet_instruction_tracebacks`: the SDK worker prints a failed instruction's traceback to
  stderr as well as sending it to the launcher: shadow that print.
- `beam_argument_parser`: Beam's own argparse subclass, so the build's parser of Beam flags
  behaves as Beam's does.
- `local_runner(options)`: the FnApiRunner as the DirectRunner makes it, named outright so that
  Beam does not first try its Prism runner.
"""
from __future__ import annotations

import contextlib
import sys

import apache_beam
from apache_beam.options import pipeline_options
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import sdk_worker

MADE_FOR = "2.77"  # the Beam release (major.minor) these patches were made for and tested on


class BeamChanged(RuntimeError):
    """The installed Beam is not the one a patch was made for."""


def _check(what: str, module, attribute: str) -> None:
    installed = apache_beam.__version__
    if not installed.startswith(MADE_FOR + ".") or not hasattr(module, attribute):
        raise BeamChanged(
            f"{what} relies on {module.__name__}.{attribute} of apache-beam {MADE_FOR}.x, but "
            f"apache-beam {installed} is installed; install apache-beam=={MADE_FOR}.* (setup.py "
            "pins it) or update pipeline/beam_compat.py for the new release")


def no_timed_flushes() -> None:
    """Turn off the timed flush of the FnApiRunner's gRPC data plane.

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
    _check("turning off the data plane's timed flush", worker_handlers,
           "DATA_BUFFER_TIME_LIMIT_MS")
    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0


@contextlib.contextmanager
def worker_processes(popen_module):
    """While active, Beam's local job service starts its worker processes through
    `popen_module` (which looks like the `subprocess` module)."""
    # imported here, not above: it imports sdk_worker_main, which a worker process (importing
    # this module through worker_main) must leave for runpy to run as __main__
    from apache_beam.runners.portability import local_job_service

    _check("starting local worker processes in their own session", local_job_service,
           "subprocess")
    original = local_job_service.subprocess
    local_job_service.subprocess = popen_module
    try:
        yield
    finally:
        local_job_service.subprocess = original


def quiet_instruction_tracebacks():
    """Beam's SDK worker prints the traceback of a failed instruction to stderr (sdk_worker.py,
    `_execute`), besides sending it to the build process, which raises it as the pipeline's
    error: the command then reports it once. The module's `print` is shadowed by one that drops
    writes to stderr. Returns the undo."""
    _check("silencing the SDK worker's traceback print", sdk_worker, "SdkHarness")
    if "print" not in sdk_worker.SdkHarness._execute.__code__.co_names:
        raise BeamChanged("the SDK worker no longer prints failed instructions from "
                          "SdkHarness._execute; update pipeline/beam_compat.py")

    def print_but_not_to_stderr(*args, file=None, **kwargs):
        if file is not sys.stderr:
            print(*args, file=file, **kwargs)

    sdk_worker.print = print_but_not_to_stderr
    return lambda: sdk_worker.__dict__.pop("print", None)


def beam_argument_parser():
    """Beam's argparse subclass (private): the class `PipelineOptions` parses flags with."""
    _check("parsing Beam's flags as Beam does", pipeline_options, "_BeamArgumentParser")
    return pipeline_options._BeamArgumentParser


def local_runner(options: pipeline_options.PipelineOptions):
    """The runner of a local build: Beam's FnApiRunner, made as this release's DirectRunner makes
    it when it falls back to it (the pipeline's options provisioned to the workers).

    Named outright because the DirectRunner (the default runner) first tries the Prism runner:
    where GitHub is reachable it downloads Prism's binary and runs the build there, a runner
    this project never tested and that the patches above do not reach; offline it fails, falls
    back, and leaves an empty /tmp/beam-temp* folder behind every build."""
    # imported here, not above: portable_runner imports sdk_worker_main (see worker_processes)
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    _check("running a local build on the FnApiRunner", JobServiceHandle,
           "encode_pipeline_options")
    _check("running a local build on the FnApiRunner", fn_runner, "ExtendedProvisionInfo")
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))
