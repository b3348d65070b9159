"""The build's command line as Beam reads it: every flag one of the build's own
(`pipeline.options.BuildOptions`) or a real Beam pipeline option, each value parsed, checked
before any work; an unknown runner refused by name."""
from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from proactivebench_builder.core.cli import CommandParser, unknown_name
from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.pipeline import beam_compat
from proactivebench_builder.pipeline.local_runs import available_cores
from proactivebench_builder.pipeline.options import BuildOptions

PROG = "run_pipeline.py"
BEAM_OPTIONS_URL = ("https://beam.apache.org/releases/pydoc/current/"
                    "apache_beam.options.pipeline_options.html")


def help_parser(commands: dict) -> CommandParser:
    """The build's own flags, for --help (Beam's ~200 flags are only named); `commands`: the
    subcommands, name -> one-line help."""
    listing = "\n".join(f"  {name:10s} {text}" for name, text in sorted(commands.items()))
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
    head, tail = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    parser = beam_flags_parser(head)
    head = parser.normalise(head)
    values = parser.parse_args(head)  # exits 2 with one line on an unknown flag or a bad value
    check_worker_count(getattr(values, "direct_num_workers", None))
    return head + tail


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
