"""`python run_pipeline.py [build flags] [Beam flags]` or `python run_pipeline.py <subcommand>`:
the entry point. A first word that names a subcommand runs it; anything else is the build."""
from __future__ import annotations

import sys

from proactivebench_builder.core.cli import closest, run_command
from proactivebench_builder.pipeline.commands import subcommands
from proactivebench_builder.pipeline.commands.beam_flags import PROG, help_parser
from proactivebench_builder.pipeline.commands.build import configure_logging, run_build


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_command(PROG, dispatch, argv)


def dispatch(argv: list[str]) -> int:
    """A subcommand (its own `main`), --help, or the build."""
    configure_logging()
    commands = subcommands()
    if argv and argv[0] in commands:
        return commands[argv[0]][0](argv[1:])
    if argv and not argv[0].startswith("-"):  # before --help: `valdate --help` is a typo
        guess = closest(argv[0], commands)
        hint = f"; did you mean {guess}?" if guess else ""
        print(f"{PROG}: error: unknown subcommand {argv[0]!r}{hint} (subcommands: "
              f"{', '.join(sorted(commands))}; build flags start with --)", file=sys.stderr)
        return 2
    if any(arg in ("-h", "--help") for arg in argv):
        help_parser({name: text for name, (_, text) in commands.items()}).print_help()
        return 0
    run_build(argv)
    return 0
