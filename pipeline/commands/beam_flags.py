"""The build's command line as Beam reads it: every flag one of the build's own
(`pipeline.options.BuildOptions`) or a real Beam pipeline option, each value parsed, checked
before any work; an unknown runner refused by name."""
from __future__ import annotations

import os

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from proactivebench_builder.core.cli import CommandParser, unknown_name
from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.pipeline import beam_compat
from proactivebench_builder.pipeline.commands import PROG
from proactivebench_builder.pipeline.local_runs import available_cores
# imported for its flags: BuildOptions is one of the PipelineOptions subclasses collected below
from proactivebench_builder.pipeline.options import BuildOptions  # noqa: F401


def beam_flags_parser(argv: list[str]) -> CommandParser:
    """A parser that knows exactly the flags Beam's `PipelineOptions` will read from `argv`:
    those of every loaded `PipelineOptions` subclass (BuildOptions among them), collected as
    Beam collects them, plus the DaskRunner's when the command line mentions Dask (its
    module costs half a second to import). Beam itself drops an unknown flag with a warning;
    this parser refuses it."""
    if any("dask" in arg.lower() for arg in argv):
        try:
            import apache_beam.runners.dask.dask_runner  # noqa: F401  (defines DaskOptions)
        except ImportError:  # the [dask] extra is not installed: --runner DaskRunner says so
            pass

    class BeamFlags(CommandParser, beam_compat.beam_argument_parser()):
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
    check_utf8(argv)
    head, tail = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    parser = beam_flags_parser(head)
    head = parser.normalise(head)
    values = parser.parse_args(head)  # exits 2 with one line on an unknown flag or a bad value
    check_worker_count(getattr(values, "direct_num_workers", None))
    return head + tail


def check_utf8(argv: list[str]) -> None:
    """Every argument must be UTF-8 text: Beam hands the pipeline's options to its runner and
    workers as UTF-8 (a protobuf Struct), so a path holding other bytes (Python keeps them as
    surrogate escapes) would end the build in a UnicodeEncodeError after it started."""
    for i, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            flag = arg.partition("=")[0] if arg.startswith("--") else (
                argv[i - 1] if i and argv[i - 1].startswith("--") else "an argument")
            value = arg.partition("=")[2] if arg.startswith("--") else arg
            shown = os.fsencode(value).decode("utf-8", "backslashreplace")
            raise UsageError(f"{flag}: '{shown}' is not UTF-8 text, which Beam needs to hand "
                             "the build's options to its workers (rename the file or folder, "
                             "or link to it under a UTF-8 name)") from None


# Each local worker is a process of its own (~100-200 MB before any data); the build's work is
# CPU-bound, so workers beyond a few per core only add memory and connections (1000 of them once
# took 16 GB and never finished).
WORKERS_PER_CORE = 4


def check_worker_count(workers: int | None) -> None:
    """--direct_num_workers within what this machine can run (Beam takes any integer: -1 ends
    in an IndexError, 1000 starts hundreds of processes)."""
    if workers is None:
        return
    if workers < 1:
        raise UsageError(f"--direct_num_workers {workers}: must be at least 1 (without the "
                         "flag a local build runs one worker per core)")
    cores = available_cores()
    most = WORKERS_PER_CORE * cores
    if workers > most:
        raise UsageError(f"--direct_num_workers {workers}: at most {most} here ({WORKERS_PER_CORE}"
                         f" per core of this machine's {cores}): each worker is a process of its "
                         "own, and more of them only add memory")


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
