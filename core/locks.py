"""Exclusive locks on local files, through `filelock`, that say who holds them.

The lock is an flock, which the kernel releases when its holder dies however it dies, so a lock
left by a killed command is never stale. Once it holds the lock, the holder writes its record
(pid, host, command, start time) into the lock file, so that a refused second command can name
it; filelock never truncates a file it does not hold. The file is written, so a link there is
never followed and a FIFO, device or folder is refused by its kind.
"""
from __future__ import annotations

import datetime
import errno
import json
import os
import socket
import stat
import sys

import filelock

from proactivebench_builder.core.errors import OutputError


class Held(Exception):
    """Another process holds the lock: `holder` is its record ({} when the file says nothing
    usable)."""

    def __init__(self, holder: dict):
        super().__init__(describe(holder))
        self.holder = holder


def holder_record() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "command": " ".join(sys.argv)[:300],
            "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def holder_of(raw: bytes) -> dict:
    """Who holds a lock, as its file says; {} when it says nothing usable (the file is anyone's
    to write: a list or a deeply nested value is no holder, not a traceback)."""
    try:
        holder = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return {}
    return holder if isinstance(holder, dict) else {}


def describe(holder: dict) -> str:
    return (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')} "
            f"({holder.get('command')})")


def read_holder(path: str) -> dict:
    """The record of a lock another process holds (read without following a link or blocking
    on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        return holder_of(os.pread(fd, 4096, 0))
    finally:
        os.close(fd)


class ExclusiveLock:
    """`with ExclusiveLock(path, what):` this process alone holds `path`; raises Held naming
    the holder when another does, OutputError (one line naming `what`) when the path cannot be
    a lock file. `keep_file`: the file stays after release, emptied (a build folder's lock, so
    that a finished folder holds no pid and two builds leave the same bytes); else it is
    removed (filelock itself leaves a Unix lock file in place). `wait`: seconds to wait for
    the holder to release it before Held."""

    def __init__(self, path: str, what: str, keep_file: bool = False, wait: float = 0):
        self.path, self.what, self.keep_file, self.wait = path, what, keep_file, wait
        self._lock = None
        self._fd = None

    def __enter__(self):
        path = self.path
        if os.path.isdir(path) and not os.path.islink(path):
            raise OutputError(f"{path} is a folder; {self.what} must be a regular file (remove "
                              "it and try again)")

        def acquired(fd: int) -> None:  # the descriptor filelock opened (no link followed)
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "not a regular file"
                raise OutputError(f"{path} is {kind}; {self.what} must be a regular file "
                                  "(remove it and try again)")
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder_record()).encode(), 0)
            self._fd = fd

        lock = filelock.FileLock(path, timeout=self.wait, preserve_lock_file=self.keep_file,
                                 fallback_to_soft=False, on_acquired=acquired)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise Held(read_holder(path)) from None
        except OSError as err:
            if err.errno == errno.ELOOP or os.path.islink(path):
                raise OutputError(f"{path} is a symbolic link; {self.what} must be a regular "
                                  "file (remove the link and try again)") from None
            raise OutputError(f"{path}: {err.strerror or err} (errno {err.errno}); {self.what} "
                              "must be a regular file") from None
        self._lock = lock
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def release(self) -> None:
        if self._lock is None:
            return
        try:
            if self.keep_file:
                os.ftruncate(self._fd, 0)
            else:  # unlinked while held: a process that opened it before finds it unlinked
                os.unlink(self.path)  # once it gets the flock, and filelock tries again
        except FileNotFoundError:
            pass
        finally:
            self._lock.release()  # closing the descriptor releases the flock
            self._lock = self._fd = None
