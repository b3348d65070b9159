"""The command line: the build (`run_pipeline.py`, `main.py` dispatching to `build.py`) and its
subcommands, one module each in this folder, each registering its `main(argv)` with
`@subcommand(name, help)`. No list of subcommands is kept anywhere: `subcommands()` imports the
modules here and returns what registered.

Importing this package silences the known noise before any command imports Beam (see
`core.cli.silence_known_noise`)."""
from __future__ import annotations

import importlib
import pkgutil

from proactivebench_builder.core.cli import launch, silence_known_noise

silence_known_noise()


def build_main() -> int:
    """The `proactivebench-build` console script (the same as run_pipeline.py): a light launcher,
    so that Ctrl-C while Beam imports is one line too."""
    return launch("proactivebench-build", f"{__name__}.main")

_REGISTERED: dict[str, tuple] = {}


def subcommand(name: str, help: str):
    """Register the decorated `main(argv) -> int` as the subcommand `name`."""
    def register(main):
        _REGISTERED[name] = (main, help)
        return main
    return register


def subcommands() -> dict[str, tuple]:
    """name -> (main, one-line help) of every subcommand (each module here is imported once)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(sorted(_REGISTERED.items()))
