"""The command line: the build (`run_pipeline.py`, `main.py` handing to `build.py`) and its
subcommands, one module each in this folder. Each registers itself with `subcommand(...)`: its
name, its one-line help, the flags it declares on the parser it is given, and what it runs on
the parsed flags; run_pipeline.py's parser adds them through argparse's add_subparsers. No list
of subcommands is kept anywhere: `subcommands()` imports the modules here and returns what
registered.

Importing this package silences the known noise before any command imports Beam (see
`core.cli.silence_known_noise`)."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import pkgutil
from typing import Callable

from proactivebench_builder.core.cli import CommandParser, launch, run_command, silence_known_noise

silence_known_noise()

PROG = "run_pipeline.py"


def build_main() -> int:
    """The `proactivebench-build` console script (the same as run_pipeline.py): a light launcher,
    so that Ctrl-C while Beam imports is one line too."""
    return launch("proactivebench-build", f"{__name__}.main")


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One subcommand of run_pipeline.py."""
    name: str
    help: str  # one line, in run_pipeline.py --help
    description: str  # the top of its own --help
    declare: Callable[[CommandParser], None]  # declares its flags on the parser it is given
    run: Callable[[argparse.Namespace], int]  # the command, on the parsed flags: its exit status

    @property
    def prog(self) -> str:
        return f"{PROG} {self.name}"

    def parser_settings(self) -> dict:
        return {"prog": self.prog, "description": self.description,
                "formatter_class": argparse.RawDescriptionHelpFormatter}

    def add_to(self, subparsers) -> None:
        """Declare this subcommand on run_pipeline.py's parser (`subparsers`: what its
        add_subparsers returned)."""
        self.declare(subparsers.add_parser(self.name, help=self.help, **self.parser_settings()))

    def parser(self) -> CommandParser:
        """This subcommand's parser on its own."""
        parser = CommandParser(**self.parser_settings())
        self.declare(parser)
        return parser

    def main(self, argv: list[str]) -> int:
        """Run on `argv`, the words after the subcommand's name (its module's entry point)."""
        return run_command(self.prog, lambda argv: self.run(self.parser().parse_args(argv)), argv)

    def run_parsed(self, args: argparse.Namespace, argv: list[str]) -> int:
        """Run on the flags run_pipeline.py's parser read from `argv`: a refusal or an
        interruption is reported as this subcommand's, as by `main`."""
        return run_command(self.prog, lambda argv: self.run(args), argv)


_REGISTERED: dict[str, Subcommand] = {}


def subcommand(name: str, help: str, description: str, declare, run) -> Subcommand:
    """Register the subcommand `name` (see `Subcommand`); returns it."""
    _REGISTERED[name] = Subcommand(name, help, description, declare, run)
    return _REGISTERED[name]


def subcommands() -> dict[str, Subcommand]:
    """name -> Subcommand, of every subcommand (each module here is imported once)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(sorted(_REGISTERED.items()))
