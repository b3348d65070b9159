"""The values that flow through the build graph, typed. Errors are values: every raw item becomes
a candidate, a dead letter or a counted exclusion, and counts travel as values too, because the
DaskRunner has neither tagged outputs nor metrics. Every kind of value is built here and only
here; steps tell them apart by type.

    reading:   Candidate, Fragment, DeadLetter, Count (a scenario's read_unit yields these)
    building:  Sample, TrainExample                   (or a DeadLetter)
    selection: Prediction, KeepIds                    (the filter's inputs, per pool)
    pooling:   PoolReport, TrainPool, ShardRow        (rows keyed by their ShardKey)
    writing:   ShardWritten, Dropped, UpstreamLine    (and a DeadLetter per dropped row)

Rows (`Sample.row`, `TrainExample.row`) stay plain dicts: they are the record contract's rows.
Across a shuffle a value that grows with the data travels as a RowRef into the build's row store
(pipeline.row_store): a candidate's item, a sample's row (with the facts its pool step decides
on), a train example's row.
"""
from __future__ import annotations

import dataclasses
import json
import pickle
import zlib
from dataclasses import dataclass
from typing import ClassVar, NamedTuple


@dataclass(frozen=True, slots=True)
class Candidate:
    """A raw item that can become a sample (or a train example): its key and what building it
    needs (small: frames are references, not bytes)."""
    kind: ClassVar[str] = "candidate"
    scenario: str
    key: str
    item: dict


@dataclass(frozen=True, slots=True)
class Fragment:
    """A part of one raw item found in one unit of raw reading (ROD: the photos of a sequence
    found in one of its archives, which may hold the sequence's other photos apart). The
    fragments of a key meet in the shuffle before samples are built, where the scenario
    merges them into one Candidate (`Scenario.merge_fragments`) and the raw item is counted,
    once."""
    kind: ClassVar[str] = "fragment"
    scenario: str
    key: str
    item: dict


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A raw item that could not become a sample: its source path relative to the root and why."""
    kind: ClassVar[str] = "dead_letter"
    scenario: str
    path: str
    reason: str
    key: str = ""

    def as_dict(self) -> dict:
        """The line of reports/dead_letters.jsonl."""
        return {"scenario": self.scenario, "path": self.path, "reason": self.reason,
                "key": self.key}


@dataclass(frozen=True, slots=True)
class Count:
    """`what` is "raw_items" (everything read) or "excluded:<rule>" (left out by a documented
    selection rule, e.g. a drawing the game did not recognise, or not drawn by subsampling)."""
    kind: ClassVar[str] = "count"
    scenario: str
    what: str
    n: int = 1


@dataclass(frozen=True, slots=True)
class Sample:
    """A built row of a scenario's test pool (frames still as references)."""
    kind: ClassVar[str] = "sample"
    scenario: str
    key: str
    row: dict


@dataclass(frozen=True, slots=True)
class TrainExample:
    """A built train example; `scenario` is its label (`<name>/train`), `name` the scenario."""
    kind: ClassVar[str] = "train_example"
    scenario: str
    name: str
    key: str
    row: dict


@dataclass(frozen=True, slots=True)
class Prediction:
    """One stored first-round prediction (a row of the predictions schema)."""
    kind: ClassVar[str] = "prediction"
    row: dict


@dataclass(frozen=True, slots=True)
class KeepIds:
    """The ids a keep-list keeps of one config."""
    kind: ClassVar[str] = "keep_ids"
    config: str
    ids: tuple


@dataclass(frozen=True, slots=True)
class PoolReport:
    """What the pool step decided for one scenario: pool size, kept, the filter's report, and
    the frames no episode shows (`Behaviour.patched_frames`: key, frame, why, and whether the
    row holds bytes for it)."""
    kind: ClassVar[str] = "pool"
    scenario: str
    config: str
    samples: int
    kept: int
    filter: dict
    frames_not_shown: tuple = ()


@dataclass(frozen=True, slots=True)
class TrainPool:
    """The examples each train label contributed (the reports check raw items against them)."""
    kind: ClassVar[str] = "train_pool"
    examples: dict


class RowRef(NamedTuple):
    """Where a packed value lies in the build's row store (pipeline.row_store): the store file's
    name in the output folder, the offset and the length of its bytes."""
    name: str
    offset: int
    length: int


class ShardKey(NamedTuple):
    """Which shard a row goes to: its shard set (`core.layout`: the pool's `test` or
    `filtered_out` rows, or `train`) and scenario (empty for the train split, which all
    scenarios share), its index and the set's shard count, and whether the config's pixel
    counts are written as float64 (a row holds a fractional one: core.records)."""
    split: str
    scenario: str
    index: int
    count: int
    fractional_pixels: bool = False


@dataclass(frozen=True, slots=True)
class ShardRow:
    """A row (a test row dict, or a TrainExample) on its way to its shard; None for the one
    placeholder of an empty split, which still gets its (empty) shard."""
    kind: ClassVar[str] = "shard_row"
    shard: ShardKey
    row: object


@dataclass(frozen=True, slots=True)
class ShardWritten:
    """A shard file written: where, and its rows, size and sha256 (`mix`: the train split's
    ambiguous/unambiguous counts per config)."""
    kind: ClassVar[str] = "shard"
    scenario: str
    config: str
    split: str
    path: str
    rows: int
    bytes: int
    sha256: str
    mix: dict | None = None


@dataclass(frozen=True, slots=True)
class Dropped:
    """A sample dropped while its shard was written (its frame changed after validation):
    `split` is the shard set it was in, `in_test` whether that is the test split's."""
    kind: ClassVar[str] = "dropped"
    scenario: str
    split: str
    in_test: bool


@dataclass(frozen=True, slots=True)
class UpstreamLine:
    """One line of the upstream export's `<config>_preprocessed.jsonl`, and the image files
    written for it: (path relative to DIR, size, sha256) each, for build.json."""
    kind: ClassVar[str] = "upstream_line"
    config: str
    id: int
    line: str
    files: tuple = ()


def relabelled(value, scenario: str):
    """`value` reported under another label (e.g. a read of both splits at once)."""
    return dataclasses.replace(value, scenario=scenario)


# ---- the train branch's label --------------------------------------------------------------

def train_label(name: str) -> str:
    """Results of the train branch are reported under `<scenario>/train`."""
    return f"{name}/train"


def is_train_label(label: str) -> bool:
    return label.endswith("/train")


# ---- names that are not UTF-8 ----------------------------------------------------------------
# A file name read from disk whose bytes are not UTF-8 arrives with surrogate escapes, which no
# Beam coder can encode: such values are turned into dead letters with the name made readable.

def not_utf8(value):
    """The first string inside `value` that UTF-8 cannot encode, else None. Nearly every value
    is fine, which one C-speed JSON encoding proves; only a failure walks the value."""
    if dataclasses.is_dataclass(value):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return None
    except (UnicodeEncodeError, TypeError, ValueError):
        return _first_not_utf8(value)


def _first_not_utf8(value):
    """The first string inside `value` that UTF-8 cannot encode (a file name read from disk
    with bytes that are not UTF-8 arrives with surrogate escapes), else None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return None
    if isinstance(value, dict):
        value = list(value.keys()) + list(value.values())
    if isinstance(value, (list, tuple)):
        for part in value:
            bad = _first_not_utf8(part)
            if bad is not None:
                return bad
    return None


def escaped(text: str) -> str:
    """Readable, UTF-8-safe text of a name: the raw bytes that are not UTF-8 shown as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def non_utf8_reason(text: str) -> str:
    return f"non-UTF-8 file name: {text}"


def utf8_safe(value):
    """`value`, or, when it holds a non-UTF-8 name, what can cross a coder: a candidate (or a
    fragment of one) becomes a dead letter of its key, a dead letter or count gets escaped
    text."""
    bad = not_utf8(value)
    if bad is None:
        return value
    if isinstance(value, (Candidate, Fragment)):
        return DeadLetter(value.scenario, escaped(value.key), non_utf8_reason(escaped(bad)),
                          escaped(value.key))
    return dataclasses.replace(value, **{f.name: escaped(getattr(value, f.name))
                                         for f in dataclasses.fields(value)
                                         if isinstance(getattr(value, f.name), str)})


def utf8_unit(unit: str):
    """A unit of raw reading as it can cross a coder: a name that is not UTF-8 travels as its
    escaped text, to become one dead letter where it is read."""
    bad = not_utf8(unit)
    return {"not_utf8": escaped(unit), "text": escaped(bad)} if bad else unit


# ---- what crosses a shuffle ------------------------------------------------------------------

def packed(value) -> bytes:
    """A value as one opaque byte string, to cross a GroupByKey. The local runner (FnApiRunner)
    decodes every grouped element in the build process and keeps it there as Python objects
    until the next stage reads it: a row of nested dicts and lists takes several times its
    encoded size there, and decoding it costs the driver's one core; a byte string is held as
    it came. Our own values only: what is unpickled here was pickled by this build's workers.
    Compressed (zlib, fastest level): frame references repeat long source paths."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def unpacked(data: bytes):
    return pickle.loads(zlib.decompress(data))


def packed_kv(kv):
    """(key, value) with the value packed."""
    return kv[0], packed(kv[1])
