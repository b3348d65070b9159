"""One writer per output folder: `BuildLock` is taken before any work and released on every
exit. On a local folder it is a `filelock.FileLock` on `DIR/.build.lock` (an flock, which the
kernel releases when the holding process dies however it dies, so a lock left by a killed build
is never stale); the holder writes its record (pid, host, command, start time) into the file
once it holds it, for the refusal message, and filelock never truncates a file it does not
hold. On a non-local output (gs://, s3://, ...) no lock primitive is shared by every
fsspec backend: the file is a marker written before any work and removed at the end. A marker
left by a build on this host whose process is gone is taken over; any other is refused, and
the message says how to remove it when its build is known to be dead."""
from __future__ import annotations

import datetime
import errno
import json
import os
import socket
import stat
import sys

import filelock

from proactivebench_builder.core import fileio
from proactivebench_builder.core.errors import FolderLocked, OutputError
from proactivebench_builder.core.layout import LOCK


def _holder() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "command": " ".join(sys.argv)[:300],
            "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _holder_of(raw: bytes) -> dict:
    """Who holds the lock, as its file says; {} when it says nothing usable (the file is
    anyone's to write: a list or a deeply nested value is no holder, not a traceback)."""
    try:
        holder = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict) -> str:
    return (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')} "
            f"({holder.get('command')})")


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True
    return True


def _check_regular(path: str, fd: int) -> None:
    """The lock file is written: a FIFO, device or folder there is refused by its kind (checked
    on the descriptor filelock opened, without following a link and without blocking)."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "not a regular file"
        raise OutputError(f"{path} is {kind}; a build's lock file must be a regular file "
                          "(remove it and build again)")


def _write_holder(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(_holder()).encode(), 0)


def _read_holder(path: str) -> dict:
    """The holder record of a lock another build holds (read without following a link or
    blocking on a FIFO: the file is anyone's to write)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        return _holder_of(os.pread(fd, 4096, 0))
    finally:
        os.close(fd)


class BuildLock:
    """`with BuildLock(output):` the only build writing `output`; raises FolderLocked naming
    the holder when another build has it."""

    def __init__(self, output: str):
        self.output = output.rstrip("/")
        self.url = fileio.join(self.output, LOCK)
        self._fd = None

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
        path = fileio.local_path(self.url)
        os.makedirs(fileio.local_path(self.output), exist_ok=True)
        if os.path.isdir(path) and not os.path.islink(path):
            raise OutputError(f"{path} is a folder; a build's lock file must be a regular file "
                              "(remove it and build again)")

        def acquired(fd: int) -> None:
            _check_regular(path, fd)
            _write_holder(fd)
            self._held_fd = fd

        lock = filelock.FileLock(path, timeout=0, preserve_lock_file=True,
                                 fallback_to_soft=False, on_acquired=acquired)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise FolderLocked(f"{self.output} is being written by another build: "
                               f"{_describe(_read_holder(path))}") from None
        except OSError as err:
            if err.errno == errno.ELOOP or os.path.islink(path):
                raise OutputError(f"{path} is a symbolic link; a build's lock file must be a "
                                  "regular file (remove the link and build again)") from None
            raise OutputError(f"{path}: {err.strerror or err} (errno {err.errno}); a build's "
                              "lock file must be a regular file") from None
        self._fd = lock

    def _lock_marker(self) -> None:
        if fileio.exists(self.url):
            try:
                holder = _holder_of(fileio.read_bytes(self.url, limit=4096))
            except fileio.FileTooLarge:
                holder = {}
            stale = holder.get("host") == socket.gethostname() and not _pid_alive(holder.get("pid"))
            if not stale:
                raise FolderLocked(
                    f"{self.output} is being written by another build: {_describe(holder)}; if "
                    f"that build is dead, remove {self.url} and build again")
        fileio.write_bytes_atomic(self.url, json.dumps(_holder()).encode())
        self._fd = "marker"

    def release(self) -> None:
        if self._fd is None:
            return
        if self._fd == "marker":
            fileio.remove(self.url)
        else:
            # the file stays (removing a locked file races with a build opening it) but empty,
            # so a finished folder holds no pid or time and two builds leave the same bytes
            try:
                os.ftruncate(self._held_fd, 0)
            finally:
                self._fd.release()  # closing the descriptor releases the flock
        self._fd = None
