"""`python run_pipeline.py [build flags] [Beam flags]` or `python run_pipeline.py <subcommand>`:
the entry point. A first word that is not a flag is a subcommand, read by argparse's
add_subparsers (each subcommand declares its own flags); with no word, or a flag first, the
command is the build, whose flags are checked as Beam reads them (`beam_flags`)."""
from __future__ import annotations

import argparse
import sys

from proactivebench_builder.core.cli import CommandParser, run_command
from proactivebench_builder.pipeline.commands import PROG, subcommands
from proactivebench_builder.pipeline.commands.build import configure_logging, run_build
from proactivebench_builder.pipeline.options import BuildOptions

HELP_FLAGS = ("-h", "--help")
BEAM_OPTIONS_URL = ("https://beam.apache.org/releases/pydoc/current/"
                    "apache_beam.options.pipeline_options.html")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_command(PROG, dispatch, argv)


def dispatch(argv: list[str]) -> int:
    """A subcommand, --help, or the build."""
    configure_logging()
    commands = subcommands()
    parser = command_parser(commands.values())
    if argv and not argv[0].startswith("-"):
        args = parser.parse_args(argv)  # an unknown subcommand is refused, even with --help
        return commands[args.subcommand].run_parsed(args, argv[1:])
    if any(arg in HELP_FLAGS for arg in argv):
        parser.print_help()
        return 0
    run_build(argv)
    return 0


def command_parser(commands) -> CommandParser:
    """run_pipeline.py's parser: the subcommands (`commands`), each with the flags it declares,
    and the build's own flags for --help (Beam's ~200 flags are only named)."""
    parser = CommandParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} [build flags] [Beam flags]\n       {PROG} <subcommand> --help",
        description="Build ProactiveBench. Without flags: every registered scenario, from the "
                    "bundled miniature\nsources, into ./build/proactivebench, on the local "
                    "runner.",
        epilog="Any Beam pipeline option is accepted too, e.g. --runner, --direct_num_workers, "
               "--direct_running_mode,\n--temp_location, --project, --region, --setup_file, "
               "--dask_client_address; all of them:\n" + BEAM_OPTIONS_URL + "\nFlags after a lone "
               "-- go to Beam unchecked (options of a runner's service that Beam does not "
               "declare).")
    words = parser.add_subparsers(title="subcommands", dest="subcommand", metavar="<subcommand>",
                                  unknown_note="build flags start with --")
    for command in commands:
        command.add_to(words)
    BuildOptions._add_argparse_args(parser.add_argument_group("build flags"))
    return parser
