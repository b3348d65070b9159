"""Source verification: compare each source folder with what its manifest pins, before a build.

A manifest may pin two things about its raw download (both optional, both relative to the
scenario's source root, any fsspec URL):

    expected_files:   {glob: count}           how many *files* match the glob
                                              (e.g. "val2014/COCO_val2014_*.jpg": 40504)
    checksums:        {relative path: sha256} the SHA-256 of an archive or annotation file

`verify_sources({scenario: source root URL})` checks every pin of every chosen scenario and
returns every mismatch as one human-readable line (an empty list means the sources agree with
the manifests). It never stops at the first problem: a user fixing a download wants the whole
list at once. It reads only what the pins name (a glob listing, the pinned files' bytes), so it
runs before any Beam work starts.

Choices:
- Globs count files only (a folder matching the glob is not a file of the download); `**`
  recurses, as fsspec's glob does.
- A checksum pin on a file that is absent is a mismatch ("missing"), not a skipped check.
- A pin that is itself malformed (a negative or non-integer count, a checksum that is not 64 hex
  digits) is reported as a manifest problem, so a typo in a manifest cannot pass silently.
- Hashing streams the file in 1 MiB blocks, so a 2 GB archive costs no memory.

Two more checks come from `run_pipeline.py fetch`'s work:
- the sizes the manifest's `downloads:` section publishes are checked for the files present
  (an archive removed after its extraction is not a problem);
- a lock file (`fetch/source_lock.py`: `<source root>/.proactivebench-lock.jsonl`, the relative
  path, size and sha256 of every file) is compared when present: every file missing, added,
  resized or changed since it was recorded is a mismatch. `record_sources` writes it
  (`--verify_sources --record`) only when every chosen folder meets every pin above (so a
  failed run writes nothing), and checks the published md5/sha256 of the downloads it hashes
  on the way.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import stat

from proactivebench_builder.core import fileio, phases
from proactivebench_builder.fetch import source_lock
from proactivebench_builder.fetch.folder_state import file_kind
from proactivebench_builder.fetch.plan import PlanError, pins_by_path
from proactivebench_builder.transforms import manifest_of

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")


def verify_sources(sources: dict[str, str], manifests: dict[str, dict] | None = None) -> list[str]:
    """Every mismatch between the source folders and their manifests' `expected_files` and
    `checksums`, as readable lines ([] when all agree). `manifests` (scenario -> manifest dict)
    overrides the packaged manifests, for tests and tools."""
    problems = []
    for name in sorted(sources):
        manifest = manifests[name] if manifests and name in manifests else _packaged(name)
        lock = " and its lock file" if source_lock.exists(sources[name]) else ""
        with phases.phase(f"verifying {name}'s source folder against its pins{lock}"):
            problems.extend(verify_source(name, sources[name], manifest))
    return problems


def verify_source(name: str, root: str, manifest: dict, compare_lock: bool = True) -> list[str]:
    """The mismatches of one scenario's source folder (with its lock file's, when it has one
    and `compare_lock`)."""
    if not fileio.is_dir(root):
        return [f"{name}: source folder not found: {root}"]
    problems = []
    for pattern, expected in sorted((manifest.get("expected_files") or {}).items()):
        problems.extend(_check_count(name, root, str(pattern), expected))
    for relative, digest in sorted((manifest.get("checksums") or {}).items()):
        problems.extend(_check_checksum(name, root, str(relative), digest))
    problems.extend(_check_download_sizes(name, root, manifest))
    if compare_lock and not problems and source_lock.exists(root):
        problems.extend(f"{name}: {line}" for line in source_lock.compare(root, name))
    return problems


def record_sources(sources: dict[str, str], manifests: dict[str, dict] | None = None
                   ) -> tuple[list[str], list[str]]:
    """`--verify_sources --record`: check every pin of every folder as `verify_sources` does,
    and only when all agree write each folder's lock file (a folder passing its pins while
    another fails gets none: the user fixes the download and records again). Returns
    (problems, one summary line per lock written). A published md5/sha256 that only hashing
    the whole folder finds wrong stops that folder's lock alone; the lines say which were
    written."""
    chosen = {name: manifests[name] if manifests and name in manifests else _packaged(name)
              for name in sorted(sources)}
    problems = []
    for name, manifest in chosen.items():
        with phases.phase(f"verifying {name}'s source folder against its pins"):
            problems += verify_source(name, sources[name], manifest, compare_lock=False)
    if problems:
        return problems, []
    written = []
    for name, manifest in chosen.items():
        try:
            with phases.phase(f"recording the sha256 of every file of {name} in its lock "
                              "file"):
                lines, files, size = source_lock.record(sources[name], name,
                                                        pins_by_path(manifest))
        except OSError as err:  # a full disk, a read-only folder, a folder in its place
            lines = [f"cannot write the lock file {source_lock.lock_path(sources[name])}: "
                     f"{err.strerror or err} (errno {err.errno})"]
        problems.extend(f"{name}: {line}" for line in lines)
        if not lines:
            written.append(f"{name}: recorded {files} files ({size} bytes) in "
                           f"{source_lock.lock_path(sources[name])}")
    return problems, written


def _packaged(name: str) -> dict:
    return manifest_of(name)


def count_files(root: str, pattern: str) -> int:
    """How many files (not folders) under `root` match the glob `pattern`."""
    fs, base = fileio.filesystem(root)
    matches = fs.glob(fileio.join(base, pattern), detail=True)
    return sum(1 for info in matches.values() if info.get("type") == "file")


def _check_count(name: str, root: str, pattern: str, expected) -> list[str]:
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        return [f"{name}: manifest problem: expected_files[{pattern!r}] = {expected!r} is not a "
                f"file count"]
    found = count_files(root, pattern)
    if found != expected:
        return [f"{name}: expected {expected} files matching {pattern!r}, found {found} "
                f"(under {root})"]
    return []


def _check_checksum(name: str, root: str, relative: str, digest) -> list[str]:
    expected = str(digest).strip().lower()
    if not SHA256_PATTERN.match(expected):
        return [f"{name}: manifest problem: checksums[{relative!r}] = {digest!r} is not a "
                f"sha256 (64 hex digits)"]
    url = fileio.join(root, relative)
    try:
        actual = _sha256(url)
    except FileNotFoundError:
        return [f"{name}: missing file {relative!r} (its sha256 is pinned; under {root})"]
    except fileio.NotARegularFile as err:  # a FIFO would block the read for ever
        return [f"{name}: pinned file {relative!r} is {err.strerror}"]
    except OSError as err:
        return [f"{name}: unreadable file {relative!r}: {err.strerror or err}"]
    if actual != expected:
        return [f"{name}: sha256 mismatch for {relative!r}: expected {expected}, got {actual}"]
    return []


def _sha256(url: str) -> str:
    """The sha256 of a pinned file, streamed; a local one must be a regular file (a FIFO, a
    socket, a device or a folder raises NotARegularFile without blocking)."""
    if not fileio.is_local(url):
        fs, path = fileio.filesystem(url)
        if not fs.isfile(path):
            raise FileNotFoundError(url)
        return fileio.sha256(url)
    path = fileio.local_path(url)
    mode = os.stat(path).st_mode  # links are followed: a pinned file may live elsewhere
    if not stat.S_ISREG(mode):
        raise fileio.NotARegularFile(errno.EINVAL, f"not a regular file: {file_kind(mode)}",
                                     path)
    digest = hashlib.sha256()
    with fileio.open_local_regular(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_download_sizes(name: str, root: str, manifest: dict) -> list[str]:
    """The published sizes of the downloads that are present (fetch may remove an archive
    once extracted, so an absent one is no problem: the folder's other pins cover it)."""
    try:
        pins = pins_by_path(manifest)
    except PlanError as err:
        return [f"{name}: manifest problem: {err}"]
    problems = []
    fs, base = fileio.filesystem(root)
    for relative, pin in sorted(pins.items()):
        if "size" not in pin:
            continue
        path = fileio.join(base, relative)
        if not fs.isfile(path):
            continue
        size = fs.size(path)
        if size != pin["size"]:
            problems.append(f"{name}: {relative!r} has {size} bytes, its publisher says "
                            f"{pin['size']} (a partial or different download)")
    return problems
