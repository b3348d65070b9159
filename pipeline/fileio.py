"""File access through fsspec, so a source root or an output folder can be any URL
(a local path, gs://, s3://, memory://). Writes go to a temporary name and are then renamed,
so a reader (or a crashed run) never sees half a file under its final name."""
from __future__ import annotations

import posixpath
import uuid

import fsspec


def filesystem(url: str):
    """(filesystem, path inside it) for a URL or a local path."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def join(base: str, *parts: str) -> str:
    return posixpath.join(base.rstrip("/"), *parts) if base else posixpath.join(*parts)


def read_bytes(url: str) -> bytes:
    fs, path = filesystem(url)
    with fs.open(path, "rb") as handle:
        return handle.read()


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def is_dir(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.isdir(path)


def list_names(url: str) -> list[str]:
    """Sorted base names of the entries directly inside a folder ([] when it does not exist)."""
    fs, path = filesystem(url)
    if not fs.isdir(path):
        return []
    return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))


def temporary_name(final_path: str) -> str:
    head, tail = posixpath.split(final_path)
    return posixpath.join(head, f".tmp-{uuid.uuid4().hex}-{tail}")


def write_bytes_atomic(url: str, data: bytes) -> None:
    fs, path = filesystem(url)
    fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
    tmp = temporary_name(path)
    with fs.open(tmp, "wb") as handle:
        handle.write(data)
    fs.mv(tmp, path)


def remove(url: str) -> None:
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path)
