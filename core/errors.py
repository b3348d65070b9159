"""The errors a run can end in, each a type of its own: a command decides its exit code and
its one-line message by the type (`core.cli.run_command`), never by matching the text.

- `UsageError`: a user's mistake found before any work (exit 2).
- `CommandError` and its kinds, each with its exit code and the word that opens its line:
  `SourceError` (exit 2): a source root as a whole is missing or unusable, not a single bad item;
  `BuildFailed` (exit 2): the build ran but its output must not be trusted; `OutputError`
  (exit 1): the output could not be written (a full disk, permissions); `MissingPackage` (exit
  2): an optional package is not installed (it names what to install); `FolderLocked` (exit 3):
  another build holds the output folder; `ResultsLocked` (exit 3): another evaluate of the same
  run writes the same results file; `ScenarioCodeError` (exit 2): a scenario's own code raised
  or returned what its method must not; `StoreFailed` (exit 1): a remote store's client failed
  part way while the build read its sources (not a bad input: the same build again converges).
- `BadItem`: one raw item cannot become a sample; it becomes a dead letter, never an exit.

An error raised on a worker reaches the launcher as text only; `pipeline.failures` carries its
type across as a record instead.
"""
from __future__ import annotations

import os


class UsageError(SystemExit):
    """A user's mistake, found before any work; its message is one line for stderr. It is a
    SystemExit, so it stops a command even where no entry point catches it."""


class BadItem(Exception):
    """A raw item that cannot become a sample; it becomes a dead letter with this reason."""

    def __init__(self, reason: str, path: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.path = path


class CommandError(RuntimeError):
    """A run that cannot go on, for a reason its message states in one line, opened by `prefix`
    (None: `<command>: error:`, as a user's mistake is)."""
    exit_code = 1
    prefix: str | None = "FAILED"


class ScenarioError(CommandError):
    """A scenario's module, manifest or declaration is unusable: its author's mistake (the
    subclasses say which: `core.manifests.ManifestError`, `core.vocabulary.VocabularyError`,
    `transforms.ScenarioPathError`)."""
    exit_code = 2
    prefix = None


class SourceError(CommandError):
    """The source root as a whole is missing or unusable (not a single bad item)."""
    exit_code = 2
    prefix = "BUILD FAILED"


class BuildFailed(CommandError):
    """The build ran but its output must not be trusted (e.g. too many dead letters)."""
    exit_code = 2
    prefix = "BUILD FAILED"


class OutputError(CommandError):
    """The output could not be written: `<strerror> (errno N): <path>`."""
    exit_code = 1
    prefix = "BUILD FAILED"

    @classmethod
    def of(cls, err: OSError) -> "OutputError":
        where = err.filename or ""
        text = f"{err.strerror or os.strerror(err.errno)} (errno {err.errno})"
        return cls(text + (f": {where}" if where else ""))


class MissingPackage(CommandError):
    """An optional package the run needs is not installed (e.g. s3fs for s3:// URLs); the
    message names what to install."""
    exit_code = 2
    prefix = "FAILED"


class ScenarioCodeError(CommandError):
    """A scenario's own code raised where its failure stops the command (listing its units,
    loading a frame, a play hook...): its author's to fix, named in one line with the frames of
    the scenario's own files."""
    exit_code = 2
    prefix = "FAILED"


class StoreFailed(CommandError):
    """A remote store's client failed part way (a connection cut, an endpoint gone) while the
    build read a source: the store's failure, not a bad input, so never a dead letter."""
    exit_code = 1
    prefix = "BUILD FAILED"


class ResultsLocked(CommandError):
    """Another `evaluate` of the same run is writing the same results file."""
    exit_code = 3
    prefix = "EVALUATE REFUSED"


class FolderLocked(CommandError):
    """Another build holds the output folder."""
    exit_code = 3
    prefix = "BUILD REFUSED"


def code_failure(err: BaseException, module: str, who: str) -> str | None:
    """One line saying that the code of `module` (a scenario's, `who` names it: "scenario dim")
    raised `err`: the function that was called, the exception, and the frames of the files of
    the module's folder, innermost last. None when no frame of the traceback is there (the
    error is not that code's)."""
    import sys
    import traceback

    file = getattr(sys.modules.get(module), "__file__", None)
    if not file:
        return None
    folder = os.path.dirname(os.path.abspath(file))
    own = [f for f in traceback.extract_tb(err.__traceback__)
           if os.path.abspath(f.filename).startswith(folder + os.sep)]
    if not own:
        return None
    detail = (str(err).splitlines() or [""])[0][:300]
    frames = " < ".join(f"{os.path.relpath(f.filename, os.path.dirname(folder))}:{f.lineno} "
                        f"in {f.name}" for f in reversed(own[-4:]))
    return (f"{who}: its {own[0].name} raised {type(err).__name__}"
            f"{': ' + detail if detail else ''} (at {frames}); the scenario's own code failed, "
            "its author can fix it (--debug shows the whole traceback)")


def wrong_return(who: str, method: str, value, expected: str, verb: str = "returned",
                 of: str = "") -> str:
    """One line saying that the code of `who` ("scenario dim") broke its method's contract:
    `method` `verb` (returned, yielded) `value`, of the wrong type, (for `of`: the unit or the
    key it was called for) where `expected` was due."""
    return (f"{who}: its {method} {verb} {type(value).__name__}{f' for {of}' if of else ''}, "
            f"expected {expected}; the scenario's own code failed, its author can fix it")


def command_error_class(name: str) -> type[CommandError] | None:
    """The CommandError subclass named `name` (a typed failure recorded on a worker is raised
    again by the launcher under its own type)."""
    pending = [CommandError]
    while pending:
        cls = pending.pop()
        if cls.__name__ == name:
            return cls
        pending.extend(cls.__subclasses__())
    return None
