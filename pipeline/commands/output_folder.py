"""An --output the build can write, refused before any work when it cannot be: a file, a folder
that cannot be created or written, or a folder of files no build wrote (a build writes over
what it finds, so it must not be let loose on, say, a docs folder)."""
from __future__ import annotations

import os
import tempfile

from proactivebench_builder.core import fileio
from proactivebench_builder.core.errors import MissingPackage, OutputError, UsageError
from proactivebench_builder.core.layout import BUILD_REPORT, LOCK, REPORTS_DIR, TEMPORARY_PREFIX


def not_a_build(path: str) -> str | None:
    """The name of an entry that shows the existing folder `path` is not a build's (a build
    writes over what it finds, so it must not be let loose on, say, a docs folder); None when
    it is new, empty, or holds a build report or only what a build killed early leaves."""
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, BUILD_REPORT)):
        return None
    leftovers = (LOCK, REPORTS_DIR)  # a build killed before its first report
    return next((name for name in sorted(os.listdir(path))
                 if name not in leftovers and not name.startswith(TEMPORARY_PREFIX)), None)


def check_reachable(flag: str, url: str) -> None:
    """A remote URL whose store cannot be reached (no network, no credentials) stops the
    command before any work, in one line saying so (rather than a writer's traceback, or a
    folder "not found")."""
    try:
        fileio.folder_exists(url)
    except MissingPackage:
        raise
    except Exception as err:  # noqa: BLE001 - the store's own error
        text = (str(err).splitlines() or [""])[0]
        raise OutputError(f"cannot reach {flag} {url}: {type(err).__name__}: {text} (no "
                          "network, or no credentials for the store?)") from None


def check_output_folder(output: str) -> None:
    """A local --output that cannot become a folder stops the command before any work (the
    build would otherwise fail only after it ran); a remote one must be reachable, and is
    otherwise left to its writers."""
    if not fileio.is_local(output):
        check_reachable("--output", output)
        return
    path = os.path.abspath(fileio.local_path(output))
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--output {output} is an existing file, not a folder")
    foreign = not_a_build(path)
    if foreign:
        raise UsageError(f"--output {output} holds files no build wrote (e.g. {foreign!r}) and "
                         "no reports/build.json; give a new or empty folder, or one a build wrote")
    check_can_write("--output", output, path)


def check_can_write(flag: str, value: str, path: str) -> None:
    """The local folder `path` (given as `flag value`) exists or can be created, and can be
    written: refused in one line otherwise, before any work."""
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"{flag} {value} cannot be created: {existing} is a file")
    try:  # a real probe: os.access says yes to root on a read-only file system
        tempfile.TemporaryDirectory(dir=existing, prefix=".write-probe-").cleanup()
    except OSError as err:
        raise UsageError(f"{flag} {value} cannot be written: {existing}: "
                         f"{err.strerror or err}") from None
