"""The per-scenario pool step (ids, selection, shard plan) and the shard writer."""
from __future__ import annotations

import dataclasses
import io
import logging
import queue
import tempfile
import threading

import apache_beam as beam

from proactivebench_builder.core import results
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.errors import SourceError
from proactivebench_builder.core.layout import FILTERED_OUT, TEST, TRAIN, shard_url
from proactivebench_builder.core.records import arrow_schema, has_fractional_pixels
from proactivebench_builder.filters.selection import apply_selection
from proactivebench_builder.pipeline import failures, progress, upstream_export
from proactivebench_builder.pipeline.row_store import RowStore, fetch_many
from proactivebench_builder.pipeline.scenarios import scenario_instance
from proactivebench_builder.pipeline.train import train_shard_rows, write_train_shard
from proactivebench_builder.pipeline.writers import (
    FrameChanged, checked_frame, dropped_the_only_shard, ordered_shard_plan, write_parquet)
from proactivebench_builder.transforms.base import wrong_return

LOG = logging.getLogger(__name__)

TRAIN_POOL = "<train>"  # the pool key of the train split's examples (no scenario is named so)


def pool_facts(scenario, row: dict, ref: results.RowRef) -> dict:
    """What the pool step decides on for one sample, beside the reference of its stored row:
    its key and id, what the selection reads (`strong_occlusions`), whether its pixel counts
    are fractional (one column type per config) and the frames no episode of it shows."""
    return {"key": row["key"], "id": row.get("id"), "ref": ref,
            "strong_occlusions": row.get("strong_occlusions"),
            "fractional": has_fractional_pixels(row), "not_shown": row_not_shown(scenario, row)}


class KeyByPool(beam.DoFn):
    """A sample (or train example) on its way to its pool: its row goes to the row store
    (pipeline.row_store), and what crosses the shuffle is its pool key (the scenario, or
    TRAIN_POOL), the row's reference and the facts the pool step decides on (`pool_facts`)."""

    def __init__(self, config: BuildConfig):
        self.config = config
        self._store = None

    def start_bundle(self):
        self._store = RowStore(self.config.output)

    def process(self, value):
        ref = self._store.put(value.row)
        if isinstance(value, results.TrainExample):
            yield TRAIN_POOL, results.packed(dataclasses.replace(value, row=ref))
            return
        facts = pool_facts(scenario_instance(value.scenario, self.config), value.row, ref)
        yield value.scenario, results.packed(dataclasses.replace(value, row=facts))

    def finish_bundle(self):
        self._store.close()


class AssignIdsAndShards(beam.DoFn):
    """Sees one scenario's whole pool (small: the facts of each sample and the reference of its
    stored row, `KeyByPool`), or the whole train split (key TRAIN_POOL), and assigns each row
    its shard.

    `id` is the index of `key` in the sorted keys, assigned before any filtering, so ids do not
    depend on the filter. A key seen twice keeps its first copy (in a deterministic order: by
    its row's `source`) and the others become dead letters."""

    def __init__(self, config: BuildConfig):
        self.config = config

    def process(self, element):
        name, values = element
        with failures.recorded(self.config.failures_dir, None if name == TRAIN_POOL else name), \
                progress.timed(self.config.progress_dir, "pool",
                               "train" if name == TRAIN_POOL else name):
            yield from self.assign(name, [results.unpacked(v) for v in values])

    def assign(self, name, values):
        if name == TRAIN_POOL:
            planned = False
            for value in train_shard_rows(values):
                if isinstance(value, results.ShardRow) and not planned:  # each row has the count
                    progress.report(self.config.progress_dir, progress.PLANNED, "train",
                                    value.shard.count)
                    planned = True
                yield value
            return
        scenario = scenario_instance(name, self.config)
        by_key: dict[str, list[dict]] = {}
        for value in values:
            if isinstance(value, results.Sample):
                by_key.setdefault(value.key, []).append(value.row)
        selection_values = [v for v in values if not isinstance(v, results.Sample)]
        rows = []
        for key in sorted(by_key):
            first, *others = self.copies_in_order(by_key[key])
            for source in others:
                files = source["files"]
                yield results.DeadLetter(name, files[0] if files else key, "duplicate key", key)
            if not self.config.keep_ids:  # an imported release keeps upstream's ids
                first["id"] = len(rows)
            rows.append(first)
        if self.config.keep_ids:
            rows.sort(key=lambda r: r["id"])
            if len({r["id"] for r in rows}) != len(rows):
                raise SourceError(f"{name}: the imported release repeats ids (each record of "
                                  "a config has its own id)")
        kept, report = apply_selection(name, scenario.config_name, rows, selection_values,
                                       self.config.selection)
        LOG.info("%s: pool of %d samples, %d kept", name, len(rows), len(kept))
        unshown = tuple(item for r in rows for item in r["not_shown"])
        for item in unshown:
            LOG.info("%s: %s is a frame no episode shows (%s); its row holds %s", name,
                     item["frame"], item["why"], item["row_holds"])
        yield results.PoolReport(name, scenario.config_name, len(rows), len(kept), report,
                                 unshown)
        rows_per_shard = int(scenario.params.get("rows_per_shard", 500))
        fractional = any(r["fractional"] for r in rows)  # one column type per config
        # The pool is written once: the rows the filter keeps (the `test` set, which is the
        # split `test`) and those it leaves out (`filtered_out`; the split `unfiltered` reads
        # both). Each set is cut into runs in id order.
        sets = {TEST: [r for r in rows if r["key"] in kept],
                FILTERED_OUT: [r for r in rows if r["key"] not in kept]}
        for shard_set, set_rows in sets.items():
            # An empty set gets no shard: `datasets` cannot load a 0-row Parquet file
            # ("BatchSize must be greater than 0"); the card leaves it out instead.
            plan = ordered_shard_plan([r["key"] for r in set_rows], rows_per_shard)
            if plan:
                progress.report(self.config.progress_dir, progress.PLANNED, name,
                                len(set(plan.values())))
            for row in set_rows:
                index, count = plan[row["key"]]
                yield results.ShardRow(
                    results.ShardKey(shard_set, name, index, count, fractional),
                    {"ref": row["ref"], "id": row["id"]})

    def copies_in_order(self, copies: list[dict]) -> list:
        """The facts of a key's samples, the one kept first; a key seen twice (rare) has its
        rows read back, to order its copies by their `source` and name the others' files."""
        if len(copies) == 1:
            return copies
        rows = fetch_many(self.config.output, [c["ref"] for c in copies])
        ordered = sorted(zip(copies, rows), key=lambda pair: repr(pair[1]["source"]))
        return [ordered[0][0]] + [row["source"] for _, row in ordered[1:]]

    def finish_bundle(self):
        progress.flush(self.config.progress_dir)


def row_not_shown(scenario, row: dict) -> tuple:
    """What the build report says of each frame of a row its scenario never shows (ROD's one
    photo upstream patches around): the sample, the frame, why, and what the row holds for it
    (the raw route's substitute, or nothing: an import needs no bytes for it)."""
    behaviour = scenario.environment.rules(scenario.config_name)
    found = []
    for frame_id, why in sorted(behaviour.patched_frames(row).items()):
        held = frame_id in row["frame_ids"]
        ref = row["frame_refs"][row["frame_ids"].index(frame_id)] if held else {}
        found.append({"key": row["key"], "frame": scenario.frame_path(row, frame_id),
                      "why": why, "row_holds": (
                          "another frame's photo (the manifest's frame_substitutions)"
                          if "substitutes" in ref else "its photo" if held else "nothing")})
    return tuple(found)


SPILL_AFTER_BYTES = 16 << 20  # read-ahead frames beyond this go to a temporary file


class ReadAhead:
    """Frames read before their rows are written, kept in a spooled temporary file: in memory up
    to SPILL_AFTER_BYTES, on local disk beyond, so a shard of full-size ROD photos (about 170 MB)
    does not sit in a worker's memory while it is written."""

    def __init__(self):
        self._file = tempfile.SpooledTemporaryFile(max_size=SPILL_AFTER_BYTES)
        self._where: dict = {}
        self._errors: dict = {}

    def put(self, key, data: bytes) -> None:
        self._where[key] = (self._file.seek(0, io.SEEK_END), len(data))
        self._file.write(data)

    def put_error(self, key, error: "FrameChanged") -> None:
        self._errors[key] = error

    def __contains__(self, key) -> bool:
        return key in self._where or key in self._errors

    def pop(self, key) -> bytes:
        if key in self._errors:
            raise self._errors.pop(key)
        offset, size = self._where.pop(key)
        self._file.seek(offset)
        return self._file.read(size)

    def close(self) -> None:
        self._file.close()


def prefetch(scenario, rows: list[dict]) -> "InReadOrder | None":
    """The frames of one shard's rows, read in the scenario's `read_order` when it has one
    (ROD's tar.gz members: reading them in id order would re-decompress the archive for every
    backward step), keyed by (row index, frame index); None when frames are read in row
    order."""
    order = [(scenario.read_order(ref), r, f) for r, row in enumerate(rows)
             for f, ref in enumerate(row["frame_refs"])]
    for key, _, _ in order:
        if not isinstance(key, tuple):
            raise wrong_return(scenario, "read_order", key, "a sort key (a tuple; () for row "
                               "order)")
    if not any(key for key, _, _ in order):
        return None
    return InReadOrder(scenario, rows, [(r, f) for _, r, f in sorted(order)])


class InReadOrder:
    """Frames asked for in row order but read in read order: asking for a frame reads forward
    in read order up to it, and keeps only the frames read before their turn (ReadAhead). When
    the two orders agree (ROD's ids follow its archives' order) nothing waits, so nothing is
    copied into the spooled file; before, the whole shard (~150 MB of photos) went through it."""

    def __init__(self, scenario, rows: list[dict], order: list[tuple[int, int]]):
        self._scenario, self._rows = scenario, rows
        self._next = iter(order)
        self._ahead = ReadAhead()

    def pop(self, key) -> bytes:
        if key in self._ahead:
            return self._ahead.pop(key)
        for r, f in self._next:
            try:
                data = checked_frame(self._scenario, self._rows[r]["frame_refs"][f])
            except FrameChanged as err:
                if (r, f) == key:
                    raise
                self._ahead.put_error((r, f), err)
                continue
            if (r, f) == key:
                return data
            self._ahead.put((r, f), data)
        raise KeyError(key)

    def close(self) -> None:
        self._ahead.close()


class WriteShard(beam.DoFn):
    """Materializes the frames of one shard's rows and writes the shard; with the upstream
    export asked for, it also writes the export's image files from the same bytes, and its
    JSONL lines travel to the terminal step. Train shards are written in the same stage, so
    both workers share one queue of shards."""

    def __init__(self, config: BuildConfig):
        self.config = config
        self._frames_thread = None

    def frames_thread(self):
        """One thread per DoFn instance, kept across shards (readers it opens, e.g. ROD's
        archive readers with their access points, are per thread): it reads the frames of the
        next rows and writes their upstream images while this thread encodes and writes the
        Parquet file (both mostly outside the interpreter lock), so a worker left alone at
        the end of the stage still uses two cores."""
        if self._frames_thread is None:
            from concurrent.futures import ThreadPoolExecutor

            self._frames_thread = ThreadPoolExecutor(max_workers=1,
                                                     thread_name_prefix="shard-frames")
        return self._frames_thread

    def teardown(self):
        if self._frames_thread is not None:
            self._frames_thread.shutdown(wait=True)
            self._frames_thread = None

    def process(self, element):
        key, rows = element
        shard = results.ShardKey(*key)
        rows = [results.unpacked(r) for r in rows]
        with failures.recorded(self.config.failures_dir, shard.scenario or None), \
                progress.timed(self.config.progress_dir, "write", shard.scenario or "train") as t:
            for value in self.write(shard, rows):  # e.g. a full disk
                if isinstance(value, results.ShardWritten):
                    t.add_bytes(value.bytes)
                yield value
        progress.report(self.config.progress_dir, progress.WRITTEN, shard.scenario or "train")

    def finish_bundle(self):
        progress.flush(self.config.progress_dir)

    def write(self, shard: results.ShardKey, rows):
        shard_set, name, index, count, fractional = shard
        if shard_set == TRAIN:
            yield from write_train_shard(
                self.config, index, count, rows,
                lambda produce: produced_ahead(self.frames_thread(), produce))
            return
        scenario = scenario_instance(name, self.config)
        placed = sorted(rows, key=lambda r: r["id"])  # {ref, id} of each row (AssignIds...)
        rows = [dict(row, id=p["id"]) for p, row in zip(
            placed, fetch_many(self.config.output, [p["ref"] for p in placed]))]
        export = self.config.export_upstream
        output = self.config.output

        dropped = []
        exported = {}  # key -> what build.json records of its exported images

        def materialized():  # on the frames thread (frames_thread)
            prefetched = prefetch(scenario, rows)
            try:
                for r, row in enumerate(rows):
                    frames = []
                    try:
                        for f, (fid, ref) in enumerate(zip(row["frame_ids"], row["frame_refs"])):
                            data = (prefetched.pop((r, f)) if prefetched
                                    else checked_frame(scenario, ref))
                            frames.append({"bytes": data, "path": scenario.frame_path(row, fid)})
                    except FrameChanged as err:
                        dropped.append((row, err))
                        continue
                    if export:
                        exported[row["key"]] = tuple(
                            upstream_export.write_image(output, frame["path"], frame["bytes"])
                            for frame in frames)
                    yield dict(row, frames=frames)
            finally:
                if prefetched:
                    prefetched.close()

        config = scenario.config_name
        url = shard_url(output, shard_set, config, index, count)
        written = write_parquet(url, produced_ahead(self.frames_thread(), materialized),
                                arrow_schema(fractional),
                                int(scenario.params.get("rows_per_row_group", 64)))
        LOG.info("%s: wrote %s (%d rows, %d bytes)", name, url, written["rows"], written["bytes"])
        for row, err in dropped:
            LOG.warning("%s: %s dropped from %s: %s", name, row["key"], shard_set, err.reason)
            yield results.DeadLetter(name, err.path or row["key"], err.reason, row["key"])
            yield results.Dropped(name, shard_set, shard_set == TEST)
        dropped_keys = {row["key"] for row, _ in dropped}
        rows = [row for row in rows if row["key"] not in dropped_keys]
        if dropped_the_only_shard(url, written, count):
            return
        yield results.ShardWritten(name, config, shard_set, url, written["rows"],
                                   written["bytes"], written["sha256"])
        if export:
            for row in rows:
                yield results.UpstreamLine(config, row["id"], upstream_export.jsonl_line(row),
                                           exported.get(row["key"], ()))


ROWS_AHEAD = 1  # rows waiting ahead of the Parquet writer (a ROD row holds ~38 MB)


def produced_ahead(pool, produce, limit: int = ROWS_AHEAD):
    """The items of the generator `produce()`, computed on `pool`'s thread at most `limit`
    ahead of the caller, in order. An error of the producer is raised here; when the caller
    stops early (its own error), the producer is stopped and waited for, so nothing it opened
    outlives the shard."""
    items: queue.Queue = queue.Queue(maxsize=limit)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run():
        generator = produce()
        try:
            for item in generator:
                if not put((None, item)):
                    return
        except BaseException as err:  # noqa: BLE001 - handed to the consumer
            put((err, None))
            return
        finally:
            generator.close()
        put((None, end))

    running = pool.submit(run)
    try:
        while True:
            err, item = items.get()
            if err is not None:
                raise err
            if item is end:
                return
            yield item
    finally:
        stop.set()
        running.result()
