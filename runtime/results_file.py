"""The --results file of `evaluate`: one JSON object per line, appended as samples finish.

The file is the user's (it may hold other runs' lines, or be edited), so it is read as untrusted:
- only a regular file is opened (a FIFO, a device such as /dev/null or /dev/zero, a folder, a
  path inside a file, a link loop: one line, exit 2, before any work);
- a line longer than `MAX_LINE_BYTES`, not UTF-8, not JSON, nested too deeply, or not an object
  is named by its number (exit 2): the file is damaged, and only its owner can say how to mend it;
- a last line cut short (a run killed or a disk filled mid-write: what the writer below leaves
  at worst) is the one exception: it is dropped with a one-line warning, cut off the file before
  anything is appended, and its sample is played again. A last line that lacks only its newline
  is whole, and kept.

Lines are written whole or not at all: each is one `os.write` on a descriptor opened for
appending, and a write that fails part way (a full disk) is cut back off before the error is
reported.

One run writes a results file at a time (`one_writer`): a second `evaluate` of the same model
and settings into the same file (a job launched twice) is refused in one line before any work,
naming the first; runs of other models or settings may append beside it (each line is whole,
and each run reads back only its own).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

from proactivebench_builder.core import fileio
from proactivebench_builder.core.errors import CommandError, ResultsLocked, UsageError
from proactivebench_builder.core.locks import ExclusiveLock, Held, describe

# A result line holds a trajectory (every turn's answer text, and a judge's output), each answer
# capped by the endpoint's reply cap (runtime.models.MAX_REPLY_BYTES); far more than any line.
MAX_LINE_BYTES = 64 << 20


class ResultsWriteError(CommandError):
    """The results file could not be written (a full disk, permissions): exit 1, and what was
    written so far stays valid, so a rerun resumes."""
    exit_code = 1
    prefix = None


@dataclass
class ResultsFile:
    """What was read of a results file: its lines as (line number, object), and where a cut
    last line starts (None: there is none)."""
    path: str
    lines: list[tuple[int, dict]] = field(default_factory=list)
    torn_at: int | None = None       # byte offset of a cut last line, cut off before appending
    ends_without_newline: bool = False

    def damaged(self, number: int, what: str) -> UsageError:
        return UsageError(f"--results {self.path}: line {number}: {what} (mend or delete that "
                          "line, or use a new --results file)")


def lock_path(path: str, signature: dict) -> str:
    """The lock file of one run's writes to `path`: beside it, named by the run's settings."""
    digest = hashlib.sha256(json.dumps(signature, sort_keys=True, default=str).encode())
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.{digest.hexdigest()[:12]}.lock")


@contextmanager
def one_writer(path: str, signature: dict):
    """Hold the results file `path` for the run `signature` describes, from before it is read
    to the end: ResultsLocked (one line) when another process of the same run holds it."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--results {path}: {reason(err)}") from None
    lock = ExclusiveLock(lock_path(path, signature), "the results file's lock file")
    try:
        lock.__enter__()
    except Held as held:
        raise ResultsLocked(f"--results {path} is being written by another evaluate of the same "
                            f"model and settings: {describe(held.holder)} (the same job started "
                            "twice?); wait for it to end, or give another --results file"
                            ) from None
    try:
        yield
    finally:
        lock.release()


def check_apart(path: str, data: str) -> None:
    """The results file and its lock are not written inside the --data folder: a build folder
    holds exactly what its build wrote (validate and publish would find a file it did not
    write), and an upstream-layout folder is someone's release."""
    if "://" in data or not os.path.isdir(data):
        return  # a Hub id or a remote folder: nothing local to write into
    root = os.path.realpath(data)
    where = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    if os.path.commonpath([root, where]) == root:
        raise UsageError(f"--results {path} is inside --data {data}: the data folder holds only "
                         "what its build (or release) wrote; give a --results file outside it")


def check_usable(path: str) -> None:
    """`path` is a local regular file or absent (a URL, a FIFO, a device, a folder: one line),
    checked before the run's lock is made beside it."""
    if "://" in path:  # a local path would be made of it: ./s3:/bucket/...
        raise UsageError(f"--results {path}: a results file is a local file (it is appended to "
                         "as samples finish and locked while a run writes it); give a local "
                         "path, and copy it to the store once the run ends")
    try:
        fileio.open_local_regular(path).close()
    except FileNotFoundError:
        return
    except OSError as err:
        raise UsageError(f"--results {path}: {reason(err)}") from None


def read(path: str, keep=None) -> ResultsFile:
    """The lines of the results file at `path` (none when it does not exist yet), every one
    checked; only those `keep(line)` is true for are held (a file several models' runs share
    costs the memory of this run's lines, not of the file)."""
    found = ResultsFile(path)
    try:
        handle = fileio.open_local_regular(path)
    except FileNotFoundError:
        return found
    except OSError as err:
        raise UsageError(f"--results {path}: {reason(err)}") from None
    with handle:
        offset = 0
        for number, raw in fileio.numbered_lines(handle, MAX_LINE_BYTES):
            if raw is None:
                raise found.damaged(number, f"longer than {MAX_LINE_BYTES:,} bytes")
            last = not raw.endswith(b"\n")
            try:
                value = parse_line(raw)
            except ValueError as err:
                if not last:
                    raise found.damaged(number, str(err)) from None
                found.torn_at = offset
                print(f"evaluate: warning: --results {path}: line {number} was cut short (a "
                      "run stopped mid-write); dropped, its sample is played again",
                      file=sys.stderr)
                break
            if last:
                found.ends_without_newline = True
            if value is not None and (keep is None or keep(value)):
                found.lines.append((number, value))
            offset += len(raw)
    return found


def parse_line(raw: bytes) -> dict | None:
    """One line as a JSON object (None for a blank line); ValueError saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 (byte {err.start})") from None
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be a result line") from None
    except ValueError as err:
        raise ValueError(f"not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object (a {type(value).__name__})")
    return value


def reason(err: OSError) -> str:
    """What is wrong with a path, in words (and the errno, to search for)."""
    if isinstance(err, fileio.NotARegularFile):
        return f"{err.strerror}; give the path of a JSONL file"
    text = err.strerror or os.strerror(err.errno or 0)
    return f"{text} (errno {err.errno})" if err.errno else text


class Writer:
    """Appends whole lines to a results file read by `read` (its cut last line cut off first)."""

    def __init__(self, found: ResultsFile):
        self.path = found.path
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
                              | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as err:
            raise UsageError(f"--results {self.path}: {reason(err)}") from None
        try:
            if not stat.S_ISREG(os.fstat(self.fd).st_mode):  # replaced since it was read
                raise UsageError(f"--results {self.path}: not a regular file")
            os.set_blocking(self.fd, True)
            if found.torn_at is not None:
                os.ftruncate(self.fd, found.torn_at)
            elif found.ends_without_newline:
                self._write(b"\n")
        except BaseException:
            os.close(self.fd)
            raise

    def write(self, line: dict) -> None:
        self._write((json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
                    .encode("utf-8"))

    def _write(self, data: bytes) -> None:
        start = os.fstat(self.fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as err:
            try:  # no half line is left for the next run to trip over
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            raise ResultsWriteError(f"--results {self.path}: {reason(err)}; the results "
                                    "written so far are kept, rerun the same command to "
                                    "resume") from None

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
