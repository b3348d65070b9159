"""The errors a run can end in, each a type of its own: a command decides its exit code and
its one-line message by the type (`core.cli.run_command`), never by matching the text.

- `UsageError`: a user's mistake found before any work (exit 2).
- `SourceError`: a source root as a whole is missing or unusable (exit 2): not a single bad item.
- `BadItem`: one raw item cannot become a sample; it becomes a dead letter, never an exit.
- `BuildFailed`: the build ran but its output must not be trusted (exit 2).
- `FolderLocked`: another build holds the output folder (exit 3).
"""
from __future__ import annotations


class UsageError(SystemExit):
    """A user's mistake, found before any work; its message is one line for stderr. It is a
    SystemExit, so it stops a command even where no entry point catches it."""


class BadItem(Exception):
    """A raw item that cannot become a sample; it becomes a dead letter with this reason."""

    def __init__(self, reason: str, path: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.path = path


class SourceError(RuntimeError):
    """The source root as a whole is missing or unusable (not a single bad item)."""


class BuildFailed(RuntimeError):
    """The build ran but its output must not be trusted (e.g. too many dead letters)."""


class FolderLocked(RuntimeError):
    """Another build holds the output folder."""
