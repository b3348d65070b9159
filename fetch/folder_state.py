"""Fetch's own bookkeeping inside a source folder: `<folder>/.proactivebench-fetch/`.

- `partial/<path>.part`: the bytes of a download not finished yet, resumed from (HTTP Range);
- `state.json`: what fetch verified, per relative path: "files" (size, modification time,
  digests, URL), "extracted" archives (where, how many files, whether the archive was
  removed since) and the "sizes" servers announced for files nothing pins, so that a later
  run trusts a file whose size and modification time are unchanged without reading it
  again, and `fetch --dry_run` knows sizes offline.

The folder is fetch's to write: a state that cannot be read (not JSON, too deep, not a regular
file, larger than `STATE_LIMIT`) is ignored, and every file is then verified from its bytes,
which is the safe direction. Nothing here opens a file through a link or blocks on a FIFO.
"""
from __future__ import annotations

import json
import os
import stat
import threading

from proactivebench_builder.core import fileio

STATE_DIR = ".proactivebench-fetch"  # fetch's bookkeeping inside each source folder
STATE_FILE = "state.json"
STATE_LIMIT = 64 << 20  # fetch's own record; anything larger is not one (it is ignored)
PARTIAL_DIR = "partial"


def destination_paths(folder: str, spec) -> tuple[str, str]:
    """(the final path, the partial download's path) inside `folder` of a FileSpec's file."""
    dest = os.path.join(folder, *spec.path.split("/"))
    part = os.path.join(folder, STATE_DIR, PARTIAL_DIR, *spec.path.split("/")) + ".part"
    return dest, part


def matches_pins(spec, record: dict) -> bool:
    """Whether a record of fetch's is of the file `spec` names: its pins agree, and, when
    no digest is pinned, its URL is the one fetched (a record-only file's identity: a
    manifest naming another commit's archive names another file)."""
    if not (spec.md5 or spec.sha256) and record.get("url") != spec.url:
        return False
    return all(record.get(k) == getattr(spec, k) for k in ("size", "md5", "sha256")
               if getattr(spec, k) is not None)


def verified_before(spec, record: dict | None, st: os.stat_result) -> bool:
    """Whether fetch's record says it verified the file in place (`st`): the same size and
    modification time, and pins that agree (an md5 pin needs a recorded md5)."""
    return bool(record and record.get("size") == st.st_size
                and record.get("mtime_ns") == st.st_mtime_ns and matches_pins(spec, record)
                and (spec.md5 is None or record.get("md5")))


def fetch_record(folder: str) -> dict:
    """What fetch recorded in `folder` (`state.json`): "files" it verified, "extracted"
    archives, and the "sizes" servers announced; each path -> a dict. Read only; empty
    when there is no usable record."""
    return FolderState(folder).data


def recorded_size(record: dict, spec) -> int | None:
    """The size of `spec`'s file that fetch recorded (`fetch_record`): of the file it
    verified, of the archive it extracted, or the one the server announced for a download
    it started; None when it recorded none for this file (for a file nothing pins, a record
    of another URL is of another file)."""
    for kind in ("files", "extracted", "sizes"):
        entry = record.get(kind, {}).get(spec.path)
        if not isinstance(entry, dict) or type(entry.get("size")) is not int \
                or entry["size"] < 0:
            continue
        # an announced size is of the URL; a verified file's record is checked as a skip is
        if (entry.get("url") == spec.url) if kind == "sizes" else matches_pins(spec, entry):
            return entry["size"]
    return None


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    for test, name in fileio._KINDS:
        if test(mode):
            return name
    return "not a regular file"


class FolderState:
    """`<folder>/.proactivebench-fetch/state.json`, shared by the threads fetching into one
    folder and written atomically after every change."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, STATE_DIR, STATE_FILE)
        self.lock = threading.Lock()
        self.data = {"files": {}, "extracted": {}, "sizes": {}}
        try:
            loaded = json.loads(fileio.read_bytes(self.path, limit=STATE_LIMIT))
            if isinstance(loaded, dict):
                for key in self.data:
                    if isinstance(loaded.get(key), dict):
                        self.data[key] = loaded[key]
        except (OSError, ValueError, RecursionError):
            pass  # no state (or an unreadable one): every file is verified from its bytes

    def get(self, kind: str, path: str) -> dict | None:
        with self.lock:
            value = self.data[kind].get(path)
            return dict(value) if isinstance(value, dict) else None

    def put(self, kind: str, path: str, value: dict | None) -> None:
        with self.lock:
            if value is None:
                self.data[kind].pop(path, None)
            else:
                self.data[kind][path] = value
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.tmp-{os.getpid()}-{threading.get_ident()}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(self.data, handle, indent=1, sort_keys=True)
                    handle.write("\n")
                os.replace(tmp, self.path)
            except BaseException:  # a full disk, Ctrl-C: no temporary file is left
                try:
                    os.remove(tmp)
                except OSError:
                    pass
                raise

    def remember_size(self, spec, size: int) -> None:
        """Record the size a server announced for a file nothing pins (written once per
        change)."""
        entry = {"size": size, "url": spec.url}
        if self.get("sizes", spec.path) != entry:
            self.put("sizes", spec.path, entry)
