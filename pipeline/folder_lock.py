"""One writer per output folder: `BuildLock` is taken before any work and released on every
exit. On a local folder it is an exclusive lock on `DIR/.build.lock` (`core.locks`: an flock
through `filelock`, released by the kernel however the holder dies, so a lock left by a killed
build is never stale, and naming its holder: pid, host, command, start time). On a non-local
output (gs://, s3://, ...) no lock primitive is shared by every fsspec backend: the file is a
marker written before any work and removed at the end. A marker left by a build on this host
whose process is gone is taken over; any other is refused, and the message says how to remove
it when its build is known to be dead."""
from __future__ import annotations

import json
import logging
import os
import socket

from proactivebench_builder.core import fileio
from proactivebench_builder.core.errors import FolderLocked
from proactivebench_builder.core.layout import LOCK
from proactivebench_builder.core.locks import (
    ExclusiveLock, Held, describe, holder_of, holder_record)


LOG = logging.getLogger("proactivebench_builder")


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True
    return True


class BuildLock:
    """`with BuildLock(output):` the only build writing `output`; raises FolderLocked naming
    the holder when another build has it."""

    def __init__(self, output: str):
        self.output = output.rstrip("/")
        self.url = fileio.join(self.output, LOCK)
        self._held = None

    def __enter__(self):
        if fileio.is_local(self.output):
            self._lock_local()
        else:
            self._lock_marker()
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def _lock_local(self) -> None:
        os.makedirs(fileio.local_path(self.output), exist_ok=True)
        # the file stays (removing a locked file races with a build opening it) but empty, so
        # a finished folder holds no pid or time and two builds leave the same bytes
        lock = ExclusiveLock(fileio.local_path(self.url), "a build's lock file", keep_file=True)
        try:
            self._held = lock.__enter__()
        except Held as held:
            raise FolderLocked(f"{self.output} is being written by another build: "
                               f"{describe(held.holder)}") from None

    def _lock_marker(self) -> None:
        if fileio.exists(self.url):
            try:
                holder = holder_of(fileio.read_bytes(self.url, limit=4096))
            except fileio.FileTooLarge:
                holder = {}
            stale = holder.get("host") == socket.gethostname() and not _pid_alive(holder.get("pid"))
            if not stale:
                raise FolderLocked(
                    f"{self.output} is being written by another build: {describe(holder)}; if "
                    f"that build is dead, remove {self.url} and build again")
        fileio.write_bytes_atomic(self.url, json.dumps(holder_record()).encode())
        self._held = "marker"

    def release(self) -> None:
        if self._held is None:
            return
        if self._held == "marker":
            try:
                fileio.remove(self.url)
            except Exception as err:  # noqa: BLE001 - the store no longer answers: the next
                if not fileio.is_store_error(err):  # build on this host takes the marker over
                    raise
                LOG.warning("could not remove the lock marker %s (%s): the next build on this "
                            "host takes it over", self.url, fileio.store_error_text(err))
        else:
            self._held.release()
        self._held = None
