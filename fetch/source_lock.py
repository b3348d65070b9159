"""The lock file of a source folder: the relative path, size and sha256 of every file the user
downloaded, recorded once (`run_pipeline.py --verify_sources --record`) and compared by every
later `--verify_sources` build, the way TensorFlow Datasets' registered checksums pin what a
download must be. It pins what no publisher pins (QuickDraw's ndjson, VSOD, MVP-N, ChangeIt's
videos) and catches a file changed, truncated, removed or added since.

Where and what: `<source folder>/.proactivebench-lock.jsonl`, inside the folder it describes,
so it travels with it (a copy to gs://, `--source SCENARIO=URL`). JSON Lines, UTF-8, one
object per line, deterministic (the same files give the same bytes):

    {"format": "proactivebench-source-lock", "version": 1, "algorithm": "sha256", "scenario": "coco"}
    {"path": "annotations/instances_val2014.json", "size": 123, "sha256": "<64 hex>"}
    {"path": "val2014/x.jpg", "symlink": "../elsewhere/x.jpg"}        (a link: its text, never followed)
    {"end": true, "files": 2, "bytes": 123}                           (a truncated lock is detected)

Entries come in walk order: depth first, the entries of each folder sorted by name, which is
the order of their path parts compared as tuples; a reader checks it, so the comparison is one
merge of two sorted streams and memory does not grow with the number of files (ImageNet-C has
4.75 million). Files are hashed streaming in 1 MiB blocks.

What is walked: everything under the folder except, at its top, the lock itself and fetch's
bookkeeping (`.proactivebench-fetch/`). Links are never followed (a symbolic link is recorded
and compared by its target text, so nothing outside the folder is read); a FIFO, socket or
device is a problem, never opened; a folder that cannot be listed (too deep a path, removed
while walked) is a problem, never a traceback. Local folders are walked with `os.scandir`, one
level at a time (no recursion: a thousand nested folders are fine); other fsspec URLs (gs://,
s3://, memory://), which have no links, through fsspec. A file name that is not UTF-8 (kept by
Python as surrogate escapes) is written with JSON's \\u escapes, so it reads back the same.

Reading a lock is as careful as reading any source: the file must be a regular file (a link,
a FIFO, a folder is a problem, never opened or followed), a line longer than `MAX_LINE` bytes
is a problem (memory never follows what the file holds), every line must be exactly a header,
a file entry {path, size, sha256}, a link entry {path, symlink} or the end line, paths are
relative without `..` (they name nothing outside the folder; only what the walk finds is ever
opened), and the header names the scenario the lock was recorded for.

This module imports nothing of the project but fetch's folder name (it is part of the core)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass

import fsspec

from proactivebench_builder.core import fileio
from proactivebench_builder.fetch.folder_state import STATE_DIR, file_kind

LOCK_NAME = ".proactivebench-lock.jsonl"
FORMAT = "proactivebench-source-lock"
VERSION = 1
CHUNK = 1 << 20
MAX_LINES = 20  # problems listed per folder; the rest are counted
MAX_LINE = 1 << 20  # bytes in one line of a lock (a path and a link's text: a few kB at most)
SHA256 = re.compile(r"[0-9a-f]{64}")


class LockError(Exception):
    """The lock file cannot be read as a lock; the message is one line."""


@dataclass(frozen=True)
class Entry:
    parts: tuple[str, ...]
    kind: str                # "file", "symlink", "special" or "unreadable"
    size: int = 0
    target: str | None = None  # a link's text; why an "unreadable" entry could not be read
    location: str = ""       # local path or fsspec path, to open the file

    @property
    def path(self) -> str:
        return "/".join(self.parts)


def _is_remote(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


def _local(root: str) -> str:
    return root[len("file://"):] if root.startswith("file://") else root


def lock_path(root: str) -> str:
    return root.rstrip("/") + "/" + LOCK_NAME


def _skipped(parts: tuple[str, ...]) -> bool:
    return len(parts) == 1 and (parts[0] in (LOCK_NAME, STATE_DIR)
                                or parts[0].startswith(LOCK_NAME + ".tmp-"))


# ---- walking -------------------------------------------------------------------------------


def walk(root: str):
    """Every entry under `root` (see the module docstring), in lock order."""
    if _is_remote(root):
        yield from _walk_remote(root)
    else:
        yield from _walk_local(_local(root))


def _listing(folder: str):
    """The entries of `folder`, sorted by name."""
    with os.scandir(folder) as listing:
        return iter(sorted(listing, key=lambda e: e.name))


def _walk_local(root: str):
    """Depth first, each folder's entries sorted, with a stack of listings (no recursion)."""
    try:
        stack = [((), _listing(root))]
    except OSError as err:
        yield Entry((), "unreadable", target=err.strerror or str(err), location=root)
        return
    while stack:
        prefix, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        parts = prefix + (entry.name,)
        if _skipped(parts):
            continue
        try:
            if entry.is_symlink():
                yield Entry(parts, "symlink", target=os.readlink(entry.path),
                            location=entry.path)
            elif entry.is_dir(follow_symlinks=False):
                stack.append((parts, _listing(entry.path)))
            elif entry.is_file(follow_symlinks=False):
                size = entry.stat(follow_symlinks=False).st_size
                yield Entry(parts, "file", size=size, location=entry.path)
            else:
                yield Entry(parts, "special", location=entry.path)
        except OSError as err:  # too deep a path, removed while walked, unreadable
            yield Entry(parts, "unreadable", target=err.strerror or str(err),
                        location=entry.path)


def _walk_remote(root: str):

    fs, base = fsspec.core.url_to_fs(root)

    def visit(path: str, prefix: tuple[str, ...]):
        listing = sorted(fs.ls(path, detail=True), key=lambda i: i["name"].rstrip("/"))
        for info in listing:
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            parts = prefix + (name,)
            if _skipped(parts) or info["name"].rstrip("/") == path.rstrip("/"):
                continue
            if info.get("type") == "directory":
                yield from visit(info["name"], parts)
            elif info.get("type") == "file":
                yield Entry(parts, "file", size=int(info.get("size") or 0), location=info["name"])
            else:
                yield Entry(parts, "special", location=info["name"])

    yield from visit(base, ())


def _hashes(root: str, entry: Entry, want_md5: bool = False) -> tuple[str, str | None, int]:
    """(sha256, md5 or None, bytes read) of a file entry, streamed; a local file is opened
    without following links and must still be a regular file."""
    sha, md5 = hashlib.sha256(), hashlib.md5() if want_md5 else None
    size = 0
    if _is_remote(root):

        fs, _ = fsspec.core.url_to_fs(root)
        handle = fs.open(entry.location, "rb")
    else:
        fd = os.open(entry.location, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{entry.path} is no longer a regular file")
        handle = os.fdopen(fd, "rb")
    with handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            sha.update(block)
            if md5 is not None:
                md5.update(block)
            size += len(block)
    return sha.hexdigest(), md5.hexdigest() if md5 else None, size


# ---- recording -----------------------------------------------------------------------------


def record(root: str, scenario: str, pins: dict[str, dict] | None = None
           ) -> tuple[list[str], int, int]:
    """Write the lock of `root`; returns (problems, files, bytes). With problems (a special
    file, a file that changed while read, a published pin not met: `pins` maps relative paths
    to {'size', 'md5', 'sha256'}) nothing is written. Lines are streamed to a temporary file
    renamed at the end, so memory does not grow with the number of files."""
    pins = pins or {}
    problems = _Problems()
    files = total = 0
    header = {"format": FORMAT, "version": VERSION, "algorithm": "sha256", "scenario": scenario}
    with _Writer(root) as out:
        out.write(_line(header))
        for entry in walk(root):
            if entry.kind == "special":
                problems.add(f"{entry.path}: not a regular file, folder or link")
                continue
            if entry.kind == "unreadable":
                problems.add(_unreadable(entry))
                continue
            if entry.kind == "symlink":
                out.write(_line({"path": entry.path, "symlink": entry.target}))
                continue
            pin = pins.get(entry.path, {})
            try:
                sha, md5, size = _hashes(root, entry, want_md5="md5" in pin)
            except OSError as err:
                problems.add(f"{entry.path}: unreadable: {err.strerror or err}")
                continue
            if size != entry.size:
                problems.add(f"{entry.path}: changed while it was read ({entry.size} then "
                             f"{size} bytes)")
                continue
            for kind, actual in (("size", size), ("md5", md5), ("sha256", sha)):
                if kind in pin and pin[kind] != actual:
                    problems.add(f"{entry.path}: {kind} {actual}, the manifest pins "
                                 f"{pin[kind]} (published); not recorded")
            out.write(_line({"path": entry.path, "size": size, "sha256": sha}))
            files += 1
            total += size
        out.write(_line({"end": True, "files": files, "bytes": total}))
        out.keep = not problems.count
    return problems.lines(), files, total


def _line(obj: dict) -> bytes:
    """One line of the lock, UTF-8; a name that is not UTF-8 (surrogate escapes) is written
    with JSON's \\u escapes instead, which read back as the same name."""
    text = json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(obj, separators=(", ", ": ")) + "\n").encode("ascii")


def _unreadable(entry: Entry) -> str:
    what = "cannot be listed or read" if entry.parts else "cannot be listed"
    return f"{entry.path or '.'}: {what}: {entry.target}"


class _Writer:
    """The lock written under a temporary name beside it, renamed when `keep` is set at the
    end of the block, removed otherwise (or on any error)."""

    def __init__(self, root: str):
        self.root = root
        self.keep = False
        self.target = lock_path(root)
        self.tmp = f"{self.target}.tmp-{os.getpid()}"

    def __enter__(self):
        if _is_remote(self.root):

            self.fs, self.tmp_path = fsspec.core.url_to_fs(self.tmp)
            _, self.target_path = fsspec.core.url_to_fs(self.target)
            self.handle = self.fs.open(self.tmp_path, "wb")
        else:
            self.fs, self.tmp_path, self.target_path = None, _local(self.tmp), _local(self.target)
            self.handle = open(self.tmp_path, "wb")
        return self

    def write(self, line: bytes) -> None:
        self.handle.write(line)

    def __exit__(self, kind, value, tb):
        keep = self.keep and kind is None
        try:
            self.handle.close()  # a full disk may say so only now
            if keep:
                if self.fs is not None:
                    self.fs.mv(self.tmp_path, self.target_path)
                else:
                    os.replace(self.tmp_path, self.target_path)
                return False
        except BaseException:
            self._remove_tmp()
            raise
        self._remove_tmp()
        return False

    def _remove_tmp(self) -> None:
        try:
            if self.fs is not None:
                self.fs.rm(self.tmp_path)
            else:
                os.remove(self.tmp_path)
        except (OSError, FileNotFoundError):
            pass


# ---- comparing -----------------------------------------------------------------------------


def exists(root: str) -> bool:
    if _is_remote(root):

        fs, path = fsspec.core.url_to_fs(lock_path(root))
        return fs.isfile(path)
    return os.path.lexists(_local(lock_path(root)))


def compare(root: str, scenario: str | None = None) -> list[str]:
    """Every difference between `root` and its lock ([] when they agree): files missing, added,
    resized or changed, links changed; with `scenario`, a lock recorded for another scenario.
    At most MAX_LINES are listed, then a count."""
    problems = _Problems()
    try:
        locked = _read_lock(root, scenario)
        on_disk = walk(root)
        want, have = next(locked, None), next(on_disk, None)
        while want is not None or have is not None:
            if have is not None and have.kind == "unreadable":
                problems.add(_unreadable(have))
                # what the lock holds under it cannot be compared: said once, above
                while want is not None and want[0][:len(have.parts)] == have.parts:
                    want = next(locked, None)
                have = next(on_disk, None)
            elif have is None or (want is not None and want[0] < have.parts):
                problems.add(f"missing: {'/'.join(want[0])} (in the lock)")
                want = next(locked, None)
            elif want is None or have.parts < want[0]:
                problems.add(f"not in the lock: {have.path}")
                have = next(on_disk, None)
            else:
                problem = _compare_one(root, want[1], have)
                if problem:
                    problems.add(problem)
                want, have = next(locked, None), next(on_disk, None)
    except LockError as err:
        problems.add(f"lock file {lock_path(root)}: {err}")
    lines = problems.lines()
    if lines:
        lines.append("if the change is intended, record the lock again: --verify_sources "
                     "--record")
    return lines


def _compare_one(root: str, locked: dict, entry: Entry) -> str | None:
    if "symlink" in locked:
        if entry.kind != "symlink":
            now = "a file" if entry.kind == "file" else "not a regular file, folder or link"
            return f"changed: {entry.path} was a link, is now {now}"
        if entry.target != locked["symlink"]:
            return f"changed: link {entry.path} now points to {entry.target!r} " \
                   f"(locked: {locked['symlink']!r})"
        return None
    if entry.kind != "file":
        now = "a link" if entry.kind == "symlink" else "not a regular file, folder or link"
        return f"changed: {entry.path} was a file, is now {now}"
    if entry.size != locked["size"]:
        return f"changed: {entry.path} has {entry.size} bytes (locked: {locked['size']})"
    try:
        sha, _, _ = _hashes(root, entry)
    except OSError as err:
        return f"unreadable: {entry.path}: {err.strerror or err}"
    if sha != locked["sha256"]:
        return f"changed: {entry.path} has sha256 {sha} (locked: {locked['sha256']})"
    return None


def _open_lock(root: str):
    if _is_remote(root):

        fs, path = fsspec.core.url_to_fs(lock_path(root))
        return fs.open(path, "rb")
    path = _local(lock_path(root))
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):  # a link is not followed, a FIFO never opened
        raise LockError(f"not a regular file: {file_kind(mode)}")
    try:
        return fileio.open_local_regular(path)
    except OSError as err:  # changed since the lstat, unreadable
        raise LockError(f"{err.strerror or err}") from None


def _lines(handle):
    """(number, bytes) per line, each at most MAX_LINE bytes (memory never follows the file)."""
    for number, raw in fileio.numbered_lines(handle, MAX_LINE):
        if raw is None:
            raise LockError(f"line {number} is longer than {MAX_LINE} bytes")
        yield number, raw


def _read_lock(root: str, scenario: str | None = None):
    """(parts, entry) per locked path, checking the header, the order and the end line."""
    with _open_lock(root) as handle:
        previous, files, total, ended = None, 0, 0, False
        for number, raw in _lines(handle):
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise LockError(f"line {number} is not JSON") from None
            if not isinstance(obj, dict):
                raise LockError(f"line {number} is not an object")
            if number == 1:
                _check_header(obj, scenario)
                continue
            if ended:
                raise LockError(f"line {number} follows the end line")
            if "end" in obj:
                if obj != {"end": True, "files": files, "bytes": total}:
                    raise LockError("its end line does not match its entries")
                ended = True
                continue
            parts = _entry_parts(obj, number)
            if previous is not None and not previous < parts:
                raise LockError(f"line {number} is out of order")
            previous = parts
            if "size" in obj:
                files += 1
                total += obj["size"]
            yield parts, obj
        if not ended:
            raise LockError("truncated (no end line): record it again with --record")


def _check_header(obj: dict, scenario: str | None) -> None:
    version = obj.get("version")
    if obj.get("format") != FORMAT or type(version) is not int or version != VERSION \
            or obj.get("algorithm") != "sha256":
        raise LockError(f"not a {FORMAT} version {VERSION} file")
    if scenario is not None and obj.get("scenario") != scenario:
        raise LockError(f"recorded for scenario {obj.get('scenario')!r}, not {scenario!r}")


def _entry_parts(obj: dict, number: int) -> tuple[str, ...]:
    path = obj.get("path")
    if not isinstance(path, str) or not path:
        raise LockError(f"line {number} has no path")
    parts = tuple(path.split("/"))
    if any(p in ("", ".", "..") for p in parts) or path.startswith("/"):
        raise LockError(f"line {number}: {path!r} is not a relative path")
    keys = set(obj)
    if keys == {"path", "symlink"}:
        if not isinstance(obj["symlink"], str):
            raise LockError(f"line {number}: a link without its target")
    elif not (keys == {"path", "size", "sha256"} and type(obj["size"]) is int
              and obj["size"] >= 0 and isinstance(obj["sha256"], str)
              and SHA256.fullmatch(obj["sha256"])):
        raise LockError(f"line {number}: expected size and sha256 (or a link's text) only")
    return parts


class _Problems:
    """The first MAX_LINES problems, and how many there were (memory stays bounded when a
    whole folder differs)."""

    def __init__(self):
        self.first: list[str] = []
        self.count = 0

    def add(self, line: str) -> None:
        self.count += 1
        if len(self.first) < MAX_LINES:
            self.first.append(line)

    def lines(self) -> list[str]:
        more = self.count - len(self.first)
        return self.first + ([f"... and {more} more"] if more else [])
