"""File access through fsspec, so a source root or an output folder can be any URL
(a local path, gs://, s3://, memory://). Writes go to a temporary name and are then renamed,
so a reader (or a crashed run) never sees half a file under its final name."""
from __future__ import annotations

import codecs
import errno
import hashlib
import io
import itertools
import os
import posixpath
import stat
import uuid

import fsspec
import fsspec.spec

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


class NotARegularFile(OSError):
    """A path that names a FIFO, a socket, a device or a folder where a file is read."""


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def open_local_regular(path: str):
    """A binary file object of the local regular file `path`; raise NotARegularFile for anything
    else. The file is opened without blocking first (opening a FIFO for reading would otherwise
    wait for a writer forever) and checked on its descriptor, so it cannot change between the
    check and the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:  # a socket cannot be opened at all (ENXIO): name it as what it is
        if err.errno == errno.ENXIO and stat.S_ISSOCK(os.stat(path).st_mode):
            raise NotARegularFile(errno.EINVAL, "not a regular file: a socket", path) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise NotARegularFile(errno.EINVAL, f"not a regular file: {kind}", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_source(url: str):
    """A binary file object to read `url`: a local path only when it is a regular file (see
    `open_local_regular`), anything else through fsspec."""
    if is_local(url):
        return open_local_regular(local_path(url))
    fs, path = filesystem(url)
    return fs.open(path, "rb")


# The clients of remote stores (s3fs on aiobotocore and aiohttp, gcsfs on google-auth and
# aiohttp, fsspec's HTTP): what they raise when the store fails part way (a connection cut, an
# endpoint gone), by the package that raises it, since they share no base class but Exception.
STORE_CLIENT_PACKAGES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "google",
                         "fsspec", "requests", "urllib3")


def is_store_error(err: BaseException) -> bool:
    """Whether `err` is a remote store's failure (its client's error, or an OSError), not a
    bug of ours."""
    if isinstance(err, OSError):
        return True
    return any(cls.__module__.split(".", 1)[0] in STORE_CLIENT_PACKAGES
               for cls in type(err).__mro__ if cls not in (Exception, BaseException, object))


def store_error_text(err: BaseException) -> str:
    """A store's failure in one line: its type and its (first 300 characters of) text."""
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


class FileTooLarge(OSError):
    """A file larger than its reader allows (memory must not depend on what a source holds)."""


def read_bytes(url: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file `url`; with `limit`, raise FileTooLarge rather than read
    more than `limit` bytes."""
    with open_source(url) as handle:
        if limit is None:
            return handle.read()
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(errno.EFBIG, f"larger than the {limit:,} bytes a file may hold here",
                           url)
    return data


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


NAME_MAX = 255  # bytes in one file name on the file systems a build writes to


def temporary_name(final_path: str) -> str:
    """A name beside `final_path` for writing it under: unique, hidden from every glob of the
    card, and never longer than a file name may be (a legal 250-byte name stays legal: its
    temporary name holds a digest of it instead)."""
    head, tail = posixpath.split(final_path)
    prefix = f".tmp-{_RUN_TOKEN}-{os.getpid()}-{next(_COUNTER)}-"
    if len((prefix + tail).encode("utf-8", "surrogateescape")) > NAME_MAX:
        tail = hashlib.sha256(tail.encode("utf-8", "surrogateescape")).hexdigest()
    return posixpath.join(head, prefix + tail)


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
    """SHA-256 of a file, streamed in 1 MiB blocks (archives can be gigabytes); a local one must
    be a regular file (`open_source`: a FIFO is never opened for reading)."""
    digest = hashlib.sha256()
    with open_source(url) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def numbered_lines(handle, limit: int, skip_bom: bool = False):
    """(line number, the line's bytes) of a binary file, or (number, None) for a line over
    `limit` bytes, whose rest is skipped a block at a time: memory never holds more than
    `limit` bytes of a line, whatever the file holds. With `skip_bom`, a UTF-8 byte-order mark
    opening the file is left out of line 1 (an editor's save of a JSONL file)."""
    if isinstance(handle, fsspec.spec.AbstractBufferedFile):  # s3fs, gcsfs, http: their
        handle = io.BufferedReader(handle)  # readline takes no size and reads to the newline
    number = 0
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        number += 1
        if skip_bom and number == 1 and line.startswith(codecs.BOM_UTF8):
            line = line[len(codecs.BOM_UTF8):]
        if len(line) > limit and not line.endswith(b"\n"):
            while True:
                rest = handle.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            yield number, None
        else:
            yield number, line
