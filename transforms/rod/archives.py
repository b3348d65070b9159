"""Reading ROD's archive members: a `.tar.gz` reads forward only, so one reader per archive and
thread is kept per process, and a row's frames are read as one span of its sequence."""
from __future__ import annotations

import gzip
import threading

from proactivebench_builder.core import fileio

_READERS: dict[tuple[str, str], object] = {}

_SPANS: dict[tuple[str, str], tuple[int, bytes]] = {}

_LOCK = threading.Lock()

def archive_version(fs, path: str) -> str:
    """What identifies one version of an archive (size plus mtime / generation / etag), so the
    per-process caches below never serve bytes of an archive replaced under the same name."""
    info = fs.info(path)
    stamp = next((info[k] for k in ("mtime", "generation", "etag", "ETag", "LastModified")
                  if info.get(k) is not None), "")
    return f"{info.get('size')}:{stamp}"


def open_archive(url: str):
    """A forward reader of the uncompressed stream of the archive at `url` (a regular file only,
    see fileio.open_source)."""
    raw = fileio.open_source(url)
    return gzip.GzipFile(fileobj=raw, mode="rb") if url.endswith((".gz", ".tgz")) else raw


def read_tar_span(url: str, start: int, length: int, version: str = "") -> bytes:
    """`length` bytes at `start` in the uncompressed stream of a (gzipped) tar. One reader per
    archive is kept per process, so consecutive reads move forward without re-decompressing."""
    # one reader per archive and thread: two shard writers never drag each other backwards
    slot = (url, version, threading.get_ident())
    with _LOCK:
        reader = _READERS.get(slot)
        if reader is None:
            reader = open_archive(url)
            _READERS[slot] = reader
    reader.seek(start)
    data = reader.read(length)
    if len(data) != length:
        raise OSError(f"{url}: archive ended at {start + len(data)}, expected {start + length}")
    return data


def read_member(ref: dict) -> bytes:
    """A member's bytes, through a one-span-per-archive cache of its whole sequence."""
    url, offset, size = ref["url"], ref["offset"], ref["size"]
    start, end = ref.get("span") or (offset, offset + size)
    archive = (url, ref.get("version", ""), threading.get_ident())  # per thread, as the readers
    with _LOCK:
        cached = _SPANS.get(archive)
    if cached is None or cached[0] != start or len(cached[1]) != end - start:
        cached = (start, read_tar_span(url, start, end - start, archive[1]))
        with _LOCK:
            _SPANS[archive] = cached
    return cached[1][offset - start: offset - start + size]
