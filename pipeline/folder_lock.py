"""One writer per output folder: `BuildLock` is taken before any work and released on every
exit. On a local folder it is an `fcntl.flock` on `DIR/.build.lock`, which the kernel releases
when the holding process dies however it dies, so a lock left by a killed build is never
stale; the file also names its holder (pid, host, command, start time) for the refusal
message. On a non-local output (gs://, s3://, ...) no lock primitive is shared by every
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


def _open_lock_file(path: str) -> int:
    """A descriptor of the regular file `path`, created when absent. The lock file is truncated
    and written: a symbolic link there would have its target overwritten, so a link is never
    followed (O_NOFOLLOW), and a FIFO, device or folder is refused by its kind (opened without
    blocking, checked on the descriptor)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or os.path.islink(path):
            raise OutputError(f"{path} is a symbolic link; a build's lock file must be a regular "
                              "file (remove the link and build again)") from None
        raise OutputError(f"{path}: {err.strerror or err} (errno {err.errno}); a build's lock "
                          "file must be a regular file") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "not a regular file"
        raise OutputError(f"{path} is {kind}; a build's lock file must be a regular file "
                          "(remove it and build again)")
    os.set_blocking(fd, True)
    return fd


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
        import fcntl  # POSIX only: imported where a local lock is taken

        os.makedirs(fileio.local_path(self.output), exist_ok=True)
        fd = _open_lock_file(fileio.local_path(self.url))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_of(os.pread(fd, 4096, 0))
            os.close(fd)
            raise FolderLocked(f"{self.output} is being written by another build: "
                               f"{_describe(holder)}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        self._fd = fd

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
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None
