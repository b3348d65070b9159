"""What an output folder says about itself, and who may write it.

- One writer per output folder: `BuildLock` is taken before any work and released on every
  exit. On a local folder it is an `fcntl.flock` on `DIR/.build.lock`, which the kernel releases
  when the holding process dies however it dies, so a lock left by a killed build is never
  stale; the file also names its holder (pid, host, command, start time) for the refusal
  message. On a non-local output (gs://, s3://, ...) no lock primitive is shared by every
  fsspec backend: the file is a marker written before any work and removed at the end. A marker
  left by a build on this host whose process is gone is taken over; any other is refused, and
  the message says how to remove it when its build is known to be dead.
- The folder says what it is: `reports/build.json` carries `status`, "building" from the
  moment a build starts until it ends, then "ok" or "failed" with the reason.
- `folder_problems` is the one check that `validate`, `publish` and the evaluation runtime run
  before trusting a folder: a finished build whose status is "ok", whose every shard file has
  the size and sha256 that `build.json` records, and whose card fingerprints the same files.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
import sys

from proactivebench_builder.core import fileio
from proactivebench_builder.core.errors import FolderLocked

LOCK_NAME = ".build.lock"
REPORT = "reports/build.json"
BUILDING, OK, FAILED = "building", "ok", "failed"


def _holder() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "command": " ".join(sys.argv)[:300],
            "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


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


class BuildLock:
    """`with BuildLock(output):` the only build writing `output`; raises FolderLocked naming
    the holder when another build has it."""

    def __init__(self, output: str):
        self.output = output.rstrip("/")
        self.url = fileio.join(self.output, LOCK_NAME)
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
        import fcntl

        os.makedirs(self.output, exist_ok=True)
        fd = os.open(self.url, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}
            os.close(fd)
            raise FolderLocked(f"{self.output} is being written by another build: "
                               f"{_describe(holder)}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        self._fd = fd

    def _lock_marker(self) -> None:
        if fileio.exists(self.url):
            try:
                holder = json.loads(fileio.read_bytes(self.url))
            except ValueError:
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


# ---- the status in build.json ------------------------------------------------------------------

def report_url(output: str) -> str:
    return fileio.join(output, REPORT)


def read_report(output: str) -> dict | None:
    try:
        return json.loads(fileio.read_bytes(report_url(output)))
    except (FileNotFoundError, ValueError):
        return None


def mark_building(output: str) -> None:
    """From here until the build ends, the folder says a build is under way: a build killed
    part way leaves it so, and nothing trusts the folder until a build finishes."""
    fileio.write_bytes_atomic(report_url(output), _json({"status": BUILDING}))


def mark_finished(output: str, reason: str | None) -> dict | None:
    """Record the outcome in build.json: "ok", or "failed" with `reason`. A build that failed
    before writing its report keeps a report that says only that."""
    report = read_report(output) or {}
    if report.get("status") == BUILDING and "scenarios" not in report:
        report = {}
    report["status"] = OK if reason is None else FAILED
    if reason is None:
        report.pop("failure", None)
    else:
        report["failure"] = reason
    fileio.write_bytes_atomic(report_url(output), _json(report))
    return report


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


# ---- the folder check ----------------------------------------------------------------------------

def folder_problems(folder: str, checksums: bool = True) -> list[str]:
    """Why `folder` is not a finished, intact build ([] when it is): one problem when it is not
    a successfully finished build at all, else one per shard that differs from build.json."""
    problems = status_problems(folder)
    if problems or not checksums:
        return problems
    report = read_report(folder)
    return shard_problems(folder, report) + card_problems(folder, report)


def status_problems(folder: str) -> list[str]:
    """[] when `folder` holds a build that finished with status "ok", else one problem."""
    folder = folder.rstrip("/")
    if not fileio.is_dir(folder):
        return [f"{folder}: no such folder"]
    if not fileio.exists(report_url(folder)):
        return [f"{REPORT}: missing: {folder} is not a finished build (build one with "
                "run_pipeline.py --output DIR)"]
    report = read_report(folder)
    if report is None:
        return [f"{REPORT}: not valid JSON (a damaged or foreign report)"]
    status = report.get("status")
    if status == BUILDING:
        return [f"{folder}: a build into this folder started and did not finish ({REPORT} "
                "status 'building'); build again"]
    if status == FAILED:
        return [f"{folder}: its build failed: {report.get('failure', 'no reason recorded')}"]
    if status != OK:
        return [f"{REPORT}: no build status (written by an older or unfinished build); "
                "build again"]
    return []


def shard_problems(folder: str, report: dict) -> list[str]:
    """Every file build.json lists has the size and sha256 it records."""
    problems = []
    for entry in report.get("files") or []:
        url = fileio.join(folder, entry["path"])
        try:
            size, digest = _size_and_sha256(url)
        except FileNotFoundError:
            problems.append(f"{entry['path']}: missing (listed in {REPORT})")
            continue
        if size != entry.get("bytes") or digest != entry.get("sha256"):
            problems.append(f"{entry['path']}: {size} bytes, sha256 {digest[:16]}..., but "
                            f"{REPORT} says {entry.get('bytes')} bytes, sha256 "
                            f"{str(entry.get('sha256'))[:16]}... (changed or mixed output)")
    return problems


def card_problems(folder: str, report: dict) -> list[str]:
    """The card's per-config content fingerprint names the files build.json lists."""
    from proactivebench_builder.pipeline.dataset_card import dataset_info

    try:
        card = fileio.read_bytes(fileio.join(folder, "README.md")).decode("utf-8")
    except FileNotFoundError:
        return ["README.md (the dataset card) is missing"]
    described = set()
    if card.startswith("---"):
        import yaml

        try:
            front = yaml.safe_load(card.split("---", 2)[1]) or {}
            described = {(i.get("config_name"), i.get("description"))
                         for i in front.get("dataset_info") or []}
        except (yaml.YAMLError, AttributeError, IndexError):
            return ["README.md: unreadable YAML front matter"]
    problems = []
    for info in dataset_info(report.get("files") or []):
        if (info["config_name"], info["description"]) not in described:
            problems.append(f"README.md: config {info['config_name']!r}: the card's content "
                            f"fingerprint does not match the shards {REPORT} lists")
    return problems


def _size_and_sha256(url: str) -> tuple[int, str]:
    fs, path = fileio.filesystem(url)
    digest, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


# ---- leftovers of a killed build ---------------------------------------------------------------

def remove_leftovers(output: str) -> int:
    """Temporary files (`.tmp-*`) a killed build left anywhere under `output`; only called while
    the lock is held, so none of them belongs to a running build. Returns how many."""
    fs, root = fileio.filesystem(output)
    if not fs.isdir(root) or not fileio.exists(report_url(output)):
        return 0  # not a folder a build has written (a killed one marked it "building" first)
    removed = 0
    for path in fs.find(root):
        if os.path.basename(path).startswith(".tmp-"):
            fs.rm(path)
            removed += 1
    return removed
