"""Deterministic Parquet shards, written the way TensorFlow Datasets' Beam writer does it.

Which shard a row lands in depends only on its place in id order (a test or unfiltered split:
consecutive runs) or on md5 of its `key` (the train split), never on bundle or worker order;
rows are sorted by `id` inside a shard; shards that would be empty are dropped and the rest
numbered without gaps; every file is written under a temporary name and renamed when complete.
`beam.io.WriteToParquet(num_shards=N)` round-robins from a random start, so it is not used.
"""
from __future__ import annotations

import hashlib
import logging
import math
import posixpath

import pyarrow as pa
import pyarrow.parquet as pq

from proactivebench_builder.core import fileio
from proactivebench_builder.core.images import BadImage, check_image
from proactivebench_builder.core.seeding import stable_hash
from proactivebench_builder.pipeline import failures
from proactivebench_builder.transforms.base import SourceChanged, wrong_return

LOG = logging.getLogger(__name__)

_HASH_SPACE = 2 ** 128


def ordered_shard_plan(keys: list[str], rows_per_shard: int) -> dict[str, tuple[int, int]]:
    """key -> (shard index, shard count) for keys given in id order: consecutive runs of as
    equal a length as can be, so reading the shards in their order gives the rows in id order
    (a user's `load_dataset` sees a config as its ids run)."""
    if not keys:
        return {}
    count = max(1, math.ceil(len(keys) / rows_per_shard))
    return {k: (position * count // len(keys), count) for position, k in enumerate(keys)}


def shard_plan(keys: list[str], rows_per_shard: int, salt: str) -> dict[str, tuple[int, int]]:
    """key -> (shard index, shard count). Buckets are ranges of md5(salt, key), so the global
    order of hashed keys is kept across shards; empty buckets are dropped and renumbered."""
    if not keys:
        return {}
    buckets = max(1, math.ceil(len(keys) / rows_per_shard))
    bucket_of = {k: stable_hash(salt, k) * buckets // _HASH_SPACE for k in keys}
    used = sorted(set(bucket_of.values()))
    dense = {b: i for i, b in enumerate(used)}
    return {k: (dense[b], len(used)) for k, b in bucket_of.items()}


def _column_options(schema: pa.Schema) -> tuple[dict, list]:
    """Image bytes are already compressed: store them plain (as `datasets` does); snappy and
    dictionaries for everything else."""
    compression, dictionary = {}, []
    for path in _leaf_paths(schema):
        is_bytes = path.startswith("frames.") and path.endswith(".bytes")
        compression[path] = "none" if is_bytes else "snappy"
        if not is_bytes:
            dictionary.append(path)
    return compression, dictionary


def _leaf_paths(schema: pa.Schema) -> list[str]:
    paths = []

    def walk(prefix: str, dtype: pa.DataType):
        if pa.types.is_struct(dtype):
            for i in range(dtype.num_fields):
                child = dtype.field(i)
                walk(f"{prefix}.{child.name}", child.type)
        elif pa.types.is_list(dtype):
            walk(f"{prefix}.list.element", dtype.value_type)
        else:
            paths.append(prefix)

    for field in schema:
        walk(field.name, field.type)
    return paths


MAX_ROW_GROUP_BYTES = 8 << 20  # image bytes per row group: bounds memory and viewer row groups


def _image_bytes(row: dict) -> int:
    return sum(len(image["bytes"] or b"") for column in ("frames", "images")
               for image in row.get(column) or ())


def write_parquet(url: str, rows, schema: pa.Schema, rows_per_row_group: int) -> dict:
    """Write `rows` (an iterable of dicts, already in order) to `url` atomically, streaming a
    row group at a time so memory holds one row group (at most `rows_per_row_group` rows and
    about MAX_ROW_GROUP_BYTES of image bytes). Returns the row count, byte size and sha256 of
    the file (the dataset card and the publish plan name shards by content)."""
    compression, dictionary = _column_options(schema)
    fs, path = fileio.filesystem(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = fileio.temporary_name(path)
    count = 0
    digest = hashlib.sha256()
    raw = writer = None
    try:
        raw = fs.open(tmp, "wb")
        handle = _Hashing(raw, digest)
        writer = pq.ParquetWriter(handle, schema, compression=compression,
                                  use_dictionary=dictionary, write_statistics=dictionary)
        batch, batch_bytes = [], 0
        for row in rows:
            batch.append({c: row.get(c) for c in schema.names})
            batch_bytes += _image_bytes(row)
            if len(batch) >= rows_per_row_group or batch_bytes >= MAX_ROW_GROUP_BYTES:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch, batch_bytes = [], 0
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
        writer, closing = None, writer
        closing.close()
        raw, closing = None, raw
        closing.close()
        fs.mv(tmp, path)
    except BaseException as err:
        # Close the writer and the file before removing the file, swallowing what closing a
        # failed file raises again (a full disk fails every flush): the error that stopped the
        # write is the one raised, and no writer is left to write into a closed file later.
        _close_quietly(writer)
        _close_quietly(raw)
        try:
            if fs.exists(tmp):
                fs.rm(tmp)
        except OSError:
            pass
        if isinstance(err, OSError) and err.errno and not err.filename:
            # name the file: a full disk's error from write() names none
            raise OSError(err.errno, err.strerror, url) from err
        raise
    return {"rows": count, "bytes": handle.size, "sha256": digest.hexdigest()}


def _close_quietly(closable) -> None:
    if closable is None:
        return
    try:
        closable.close()
    except Exception:  # noqa: BLE001 - already failing; the first error is the one reported
        pass


class _Hashing:
    """A write-only file that hashes and counts what passes through it, so a shard's checksum
    costs no second read of the file (Parquet is written strictly sequentially)."""

    def __init__(self, raw, digest):
        self._raw, self._digest, self.size = raw, digest, 0

    def write(self, data) -> int:
        self._digest.update(data)
        self.size += len(data)
        return self._raw.write(data)

    def __getattr__(self, name):  # tell, flush, close, closed, ... of the real file
        return getattr(self._raw, name)


class FrameChanged(Exception):
    """A frame's source no longer gives the bytes validated when its sample was built."""

    def __init__(self, path: str, reason: str):
        super().__init__(reason)
        self.path, self.reason = path, reason


def checked_frame(scenario, ref: dict) -> bytes:
    """A frame's bytes, proven to be the bytes validated when its sample was built: equal to
    the sha256 recorded then, or (a reference without one) a complete image when decoded as the
    build validates. A source file changed, truncated, replaced by a link or removed since
    raises FrameChanged; the writer drops the row, and it becomes a dead letter."""
    where = ref.get("url", "") + (f":{ref['member']}" if ref.get("member") else "")
    path = scenario.relative(ref["url"]) + (f":{ref['member']}" if ref.get("member") else "") \
        if ref.get("url") else ""
    try:
        data = scenario.load_frame(ref)
    except SourceChanged as err:  # a frame made from a source file (a crop) checks its source
        raise FrameChanged(path, err.reason) from None
    except Exception as err:  # noqa: BLE001 - gone, unreadable, a link: the row's dead letter
        if fileio.is_store_client_error(err):  # (the store's failure is not the row's)
            raise failures.store_failed(scenario, err) from err
        raise FrameChanged(path, f"frame unreadable when written: {type(err).__name__}: "
                                 f"{getattr(err, 'reason', err)}") from None
    if not isinstance(data, bytes):
        raise wrong_return(scenario, "load_frame", data,
                           "the frame's encoded bytes (PNG or JPEG)", of=where or ref.get("kind"))
    expected = ref.get("sha256")
    if expected is not None:
        if hashlib.sha256(data).hexdigest() != expected:
            raise FrameChanged(path, "frame changed after validation: its bytes differ from "
                                     "the bytes validated when the sample was built")
    elif ref.get("kind") == "file":
        try:
            check_image(data, posixpath.basename(where))
        except BadImage as err:
            raise FrameChanged(path, f"frame changed after validation: {err}") from None
    return data


def dropped_the_only_shard(url: str, written: dict, count: int) -> bool:
    """Whether the shard at `url` came out with no row (every row's frames changed since they
    were validated) and is its split's only shard: it is removed, as an empty split has no
    shard (datasets cannot load a 0-row one). An empty shard among several is kept, and the
    final validation names it: renumbering the others is not this stage's to do."""
    if written["rows"] or count != 1:
        return False
    fileio.remove(url)
    LOG.warning("%s: no row left (their frames changed since they were validated): removed",
                url)
    return True
