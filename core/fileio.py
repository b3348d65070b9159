"""File access through fsspec, so a source root or an output folder can be any URL
(a local path, gs://, s3://, memory://). Writes go to a temporary name and are then renamed,
so a reader (or a crashed run) never sees half a file under its final name."""
from __future__ import annotations

import errno
import hashlib
import itertools
import os
import posixpath
import uuid

import fsspec

from proactivebench_builder.core.errors import MissingPackage

# Local paths skip fsspec: its open() costs ~0.1 ms per file, which adds up over ~100k frames
# read twice and exported once. Any URL with a scheme (gs://, memory://, file://) goes
# through fsspec as before.
_MADE_DIRS: set[str] = set()


def is_local(url: str) -> bool:
    """Whether `url` names a file of this machine: a plain path or a file:// URL."""
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    """The path of a local `url` as the os module takes it (a file:// URL without its scheme)."""
    return url[len("file://"):] if url.startswith("file://") else url


# fsspec protocols whose filesystem is an optional package, and the extra that installs it
_BACKENDS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"),
             "gcs": ("gcsfs", "gcs")}


def filesystem(url: str):
    """(filesystem, path inside it) for a URL or a local path. A URL whose filesystem package
    is not installed is one line naming what to install (fsspec raises an ImportError deep in
    its registry, which would otherwise end every command in a long traceback)."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as err:
        protocol = url.split("://", 1)[0].lower()
        package, extra = _BACKENDS.get(protocol, (None, None))
        if package:
            raise MissingPackage(f"{protocol}:// URLs need the {package} package, which is not "
                                 f"installed: pip install -e \".[{extra}]\" (from the "
                                 f"repository; or pip install {package})") from None
        raise MissingPackage(f"{protocol}:// URLs need a package that is not installed: "
                             f"{err}") from None
    return fs, path


def join(base: str, *parts: str) -> str:
    return posixpath.join(base.rstrip("/"), *parts) if base else posixpath.join(*parts)


def read_bytes(url: str) -> bytes:
    if is_local(url):
        with open(local_path(url), "rb") as handle:
            return handle.read()
    fs, path = filesystem(url)
    with fs.open(path, "rb") as handle:
        return handle.read()


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def is_dir(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.isdir(path)


def folder_exists(url: str) -> bool:
    """Whether `url` is a folder, telling "no such folder" (False) from "could not ask": a
    remote store that cannot be reached (no network, no credentials) raises the store's error,
    where `is_dir` would answer False and a missing folder would be blamed."""
    if is_local(url):
        return os.path.isdir(local_path(url))
    fs, path = filesystem(url)
    try:
        return fs.info(path).get("type") == "directory"
    except FileNotFoundError:
        return False


def list_names(url: str) -> list[str]:
    """Sorted base names of the entries directly inside a folder ([] when it does not exist)."""
    fs, path = filesystem(url)
    if not fs.isdir(path):
        return []
    return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))


# One random token per process plus a counter: unique across processes and machines writing
# into one folder, without a urandom call per file (the export writes ~100k files).
_RUN_TOKEN = uuid.uuid4().hex[:12]
_COUNTER = itertools.count()


def temporary_name(final_path: str) -> str:
    head, tail = posixpath.split(final_path)
    return posixpath.join(head, f".tmp-{_RUN_TOKEN}-{os.getpid()}-{next(_COUNTER)}-{tail}")


def write_bytes_atomic(url: str, data: bytes) -> None:
    if is_local(url):
        _write_local_atomic(local_path(url), data)
        return
    fs, path = filesystem(url)
    fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
    tmp = temporary_name(path)
    try:
        with fs.open(tmp, "wb") as handle:
            handle.write(data)
        fs.mv(tmp, path)
    except BaseException:
        _remove_quietly(lambda: fs.exists(tmp) and fs.rm(tmp))
        raise


def _write_local_atomic(path: str, data: bytes) -> None:
    folder = os.path.dirname(path) or "."
    if folder not in _MADE_DIRS:  # one makedirs per folder and process, not per file
        os.makedirs(folder, exist_ok=True)
        _MADE_DIRS.add(folder)
    tmp = temporary_name(path)
    try:
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
        except FileNotFoundError:  # the folder was removed since it was made (a rebuild)
            _MADE_DIRS.discard(folder)
            os.makedirs(folder, exist_ok=True)
            with open(tmp, "wb") as handle:
                handle.write(data)
        os.replace(tmp, path)
    except BaseException as err:  # e.g. a full disk: no temporary file is left behind
        _remove_quietly(lambda: os.path.lexists(tmp) and os.remove(tmp))
        if isinstance(err, OSError) and err.errno and not err.filename:
            raise OSError(err.errno, err.strerror, path) from err
        raise


def _remove_quietly(remove) -> None:
    try:
        remove()
    except OSError:
        pass


def remove(url: str) -> None:
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path)


def sha256(url: str) -> str:
    """SHA-256 of a file, streamed in 1 MiB blocks (archives can be gigabytes)."""
    fs, path = filesystem(url)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Failures of os.link that mean "this filesystem cannot link these two files": copy instead.
_CANNOT_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP,
                errno.EACCES}


def link_or_copy_atomic(source: str, target: str) -> str:
    """Give `target` the content of `source` (a finished output file of this build), atomically:
    a hard link on a local filesystem (no bytes written: the test split of an unfiltered build
    is its pool, shard for shard), else a copy. Both names stay valid on their own: every
    writer here replaces files by rename, never in place. Returns "link" or "copy"."""
    if is_local(source) and is_local(target):
        source, target = local_path(source), local_path(target)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        tmp = temporary_name(target)
        try:
            os.link(source, tmp)
        except OSError as err:
            if err.errno not in _CANNOT_LINK:
                raise
        else:
            try:
                os.replace(tmp, target)
            except BaseException:
                _remove_quietly(lambda: os.remove(tmp))
                raise
            return "link"
    copy_atomic(source, target)
    return "copy"


def copy_atomic(source: str, target: str) -> None:
    """Copy a file under a temporary name, then rename it (same filesystem assumed)."""
    fs, src = filesystem(source)
    _, dst = filesystem(target)
    fs.makedirs(posixpath.dirname(dst) or ".", exist_ok=True)
    tmp = temporary_name(dst)
    try:
        fs.copy(src, tmp)
        fs.mv(tmp, dst)
    except BaseException:
        _remove_quietly(lambda: fs.exists(tmp) and fs.rm(tmp))
        raise
