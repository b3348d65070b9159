"""Where the modules that moved went. Code written against an older layout (a plug-in importing
`proactivebench_builder.pipeline.fileio`) fails to import with one line naming the new home,
instead of a bare "No module named": no old name is kept as an alias, since an alias would let
such code run on unnoticed while the layout keeps changing under it.

`install()` appends a finder to `sys.meta_path`; every package that held a moved module calls it
on import (its `__init__`), which always runs before Python looks for the package's submodule.
The finder comes last, so it answers only for names no other finder has: a module that exists
is never hidden by it.
"""
from __future__ import annotations

import sys

NAMESPACE = "proactivebench_builder"
SCENARIO_API = f"{NAMESPACE}.transforms.api"

# old module -> where its contents live now (both under NAMESPACE)
MOVED = {
    "pipeline.fileio": "core.fileio",
    "pipeline.images": "core.images",
    "pipeline.manifests": "core.manifests",
    "pipeline.records": "core.records",
    "pipeline.results": "core.results",
    "pipeline.seeding": "core.seeding",
    "pipeline.commands.arguments": "core.cli",
    "transforms.environment": "core.play",
    "transforms.vocabulary": "core.vocabulary",
    "runtime.prompts": "core.prompts",
    "runtime.behaviours": ("core.play", "Behaviour, Steps, MalformedRecord; each upstream "
                           "scenario's own behaviour is in its transforms/<name>/play.py"),
    "pipeline.integrity": ("core.buildfolder", "folder_problems, read_report; BuildLock is in "
                           f"{NAMESPACE}.pipeline.folder_lock"),
    "filters.inputs": "filters.selection",
    "pipeline.cli": "pipeline.commands.build",
    "pipeline.inspect_command": "pipeline.commands.inspect",
    "pipeline.publish_command": "pipeline.commands.publish",
    "pipeline.validate_command": "pipeline.commands.validate",
    "core.download": "fetch.download",
    "core.extract": "fetch.extract",
    "core.source_lock": "fetch.source_lock",
    "pipeline.fetch_plan": "fetch.plan",
    "pipeline.fetch_sizes": "fetch.sizes",
    "pipeline.verify_sources": "fetch.verify",
}
# the old homes a scenario imported from: their message names the scenario author's API too
SCENARIO_FACING = ("pipeline.fileio", "pipeline.images", "pipeline.manifests", "pipeline.results",
                   "pipeline.seeding", "transforms.environment", "transforms.vocabulary",
                   "runtime.behaviours")


def moved_message(old: str) -> str | None:
    """The one line an import of the moved module `old` (a full name) fails with; None when
    `old` did not move."""
    short = old[len(NAMESPACE) + 1:] if old.startswith(NAMESPACE + ".") else None
    new = MOVED.get(short)
    if new is None:
        return None
    new, details = new if isinstance(new, tuple) else (new, "")
    message = f"{old} moved to {NAMESPACE}.{new}" + (f" ({details})" if details else "")
    if short in SCENARIO_FACING:
        message += (f"; a scenario imports what it needs from {SCENARIO_API} "
                    "(docs/adding_a_scenario.md)")
    return message


class MovedModuleFinder:
    """A meta-path finder that refuses the old name of a moved module, naming its new home."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        message = moved_message(fullname)
        if message is None:
            return None
        # ImportError, not ModuleNotFoundError: `from package import old` swallows the latter
        # (taking it for "no such submodule") and says only "cannot import name"
        raise ImportError(message, name=fullname)


def install() -> None:
    """Make an import of a moved module fail with `moved_message` (once per process)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
