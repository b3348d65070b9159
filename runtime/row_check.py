"""What a row must be before `evaluate` plays it, wherever it comes from (our Parquet shards, a
Hub dataset, an upstream-layout JSONL line): the record contract (core/records.py) and the rules
its scenario declares (`Behaviour.record_problems`, what `validate` checks of a build's rows).

Rows are untrusted: a build folder's shards are checked against its build.json, but whoever can
edit a shard can rewrite build.json too, and an upstream-layout folder or a Hub dataset carries
no such check at all. So before an environment sees a row:
- every column holds what the contract says (an integer is an int, not a bool or a string;
  numbers are finite; lists hold items of their type), and the fields every environment reads
  are present;
- the numbers that size work stay within `MAX_SLOT` (frame ids, step caps, ...) and a row names
  at most `MAX_FRAMES` frames, so nothing allocates or loops by what a row claims;
- its scenario's rules hold (the frames it can reach are present, ...), and every view it can
  show (a COCO crop grows with each move) stays under PIL's decompression-bomb limit.
A row that breaks one of these is a `BadRecord` naming the first thing wrong.
"""
from __future__ import annotations

import math

import pyarrow as pa
from PIL import Image

from proactivebench_builder import transforms
from proactivebench_builder.core import records

# Frame ids, step caps, step sizes, granularities: ChangeIt's are frame numbers of a video (a
# few hundred); anything beyond this is not a benchmark row but a request for unbounded work.
MAX_SLOT = 1_000_000
MAX_FRAMES = 4096          # frames one row may name (upstream's largest: 14)
# What an environment must be able to play: the fields upstream's environments read of every
# record (scenario extras are checked by the scenario's own rules).
REQUIRED = records.UPSTREAM_COMMON_FIELDS
SIZED = ("first_image", "num_images", "reference_image", "step_size", "max_steps",
         "granularity")
_SCHEMA = records.arrow_schema(fractional_pixels=True)  # pixel counts: integers or fractions
# What a scenario's hooks raise on a row whose values they cannot use (types are checked first)
_UNUSABLE = (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError)


class BadRecord(ValueError):
    """A row that cannot be played; the message says why (one line)."""


def contract_row(record: dict) -> dict:
    """A row of the record contract from an upstream-layout record: its columns (anything else,
    `frames` included, is left out: frames come from the files the template names)."""
    row = records.empty_row()
    row.update({k: v for k, v in record.items() if k in row and k != "frames"})
    return row


def check(row: dict, config: str) -> None:
    """Raise BadRecord naming the first thing that keeps `row` (with its `frame_ids`) from
    being played as `config`."""
    problem = (first(type_problems(row)) or required_problem(row) or size_problem(row)
               or frame_problem(row) or rule_problem(row, config) or view_problem(row, config))
    if problem:
        raise BadRecord(problem)


def first(problems) -> str | None:
    return next(iter(problems), None)


def type_problems(row: dict):
    for column in _SCHEMA:
        if column.name != "frames":
            problem = value_problem(row.get(column.name), column.type)
            if problem:
                yield f"{column.name}: {problem}"


def value_problem(value, kind: pa.DataType) -> str | None:
    """Why `value` is not a value of the Arrow type `kind` (None: it is, or it is null)."""
    if value is None:
        return None
    if pa.types.is_integer(kind):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{_shown(value)} is not an integer"
        if not -2 ** 63 <= value < 2 ** 63:
            return f"{_shown(value)} does not fit in 64 bits"
        return None
    if pa.types.is_floating(kind):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{_shown(value)} is not a number"
        return None if math.isfinite(value) else f"{value} is not a finite number"
    if pa.types.is_string(kind):
        return None if isinstance(value, str) else f"{_shown(value)} is not text"
    if pa.types.is_boolean(kind):
        return None if isinstance(value, bool) else f"{_shown(value)} is not true/false"
    if pa.types.is_binary(kind):
        return None if isinstance(value, bytes) else f"{_shown(value)} is not bytes"
    if pa.types.is_list(kind):
        if not isinstance(value, list):
            return f"{_shown(value)} is not a list"
        for index, item in enumerate(value):
            problem = "null" if item is None else value_problem(item, kind.value_type)
            if problem:
                return f"item {index}: {problem}"
        return None
    if pa.types.is_struct(kind):
        if not isinstance(value, dict):
            return f"{_shown(value)} is not an object"
        names = [kind.field(i).name for i in range(kind.num_fields)]
        unknown = sorted(str(k) for k in value if k not in names)
        if unknown:
            return f"unknown fields {unknown} (expected {names})"
        for name in names:
            problem = value_problem(value.get(name), kind.field(name).type)
            if problem:
                return f"{name}: {problem}"
        return None
    return f"a column of type {kind} cannot be checked"  # a contract change not followed here


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def required_problem(row: dict) -> str | None:
    missing = [f for f in REQUIRED if row.get(f) is None]
    return f"lacks {', '.join(missing)}" if missing else None


def size_problem(row: dict) -> str | None:
    for name in SIZED:
        value = row.get(name)
        if value is not None and not 0 <= value <= MAX_SLOT:
            return f"{name}={value} is outside 0..{MAX_SLOT:,}"
    for name in ("frame_ids", "valid_images"):
        values = row.get(name) or []
        if len(values) > MAX_FRAMES:
            return f"{name} names {len(values):,} frames (at most {MAX_FRAMES:,})"
        if any(not 0 <= v <= MAX_SLOT for v in values):
            return f"{name} holds an id outside 0..{MAX_SLOT:,}"
    return None


def frame_problem(row: dict) -> str | None:
    ids, frames = row.get("frame_ids"), row.get("frames")
    if ids is None:
        return "lacks frame_ids"
    if frames is not None and (not isinstance(frames, list) or len(frames) != len(ids)):
        return f"{len(ids)} frame_ids but {_count(frames)} frames"
    return None


def _count(frames) -> str:
    return str(len(frames)) if isinstance(frames, list) else f"no list of ({type(frames).__name__})"


def rule_problem(row: dict, config: str) -> str | None:
    """What `validate` checks of a row: the contract's invariants (4 distinct categories holding
    the answer, options, first/reference frames present) and the scenario's rules."""
    try:
        records.check_row(row)
    except ValueError as err:
        return str(err).replace(f"row {row.get('key')!r}: ", "")
    return first(scenario_call(lambda: transforms.behaviour_for_config(config)
                               .record_problems(row), config) or [])


def scenario_call(call, config: str):
    """`call()` (a scenario's hook on a checked row); a row its hook cannot use is a problem
    (BadRecord), not a traceback."""
    try:
        return call()
    except _UNUSABLE as err:
        raise BadRecord(f"{config} cannot play it ({type(err).__name__}: {err})") from None


def view_problem(row: dict, config: str) -> str | None:
    """A view a row can show (a crop box that grows with each move) larger than PIL's
    decompression-bomb limit would allocate by what the row claims."""
    views = scenario_call(lambda: transforms.behaviour_for_config(config).sheet_views(row),
                          config) or []
    for view in views:
        box = view.get("box")
        if box is None:
            continue
        left, top, right, bottom = box
        if (right - left) * (bottom - top) > Image.MAX_IMAGE_PIXELS:
            return (f"its {view.get('caption', 'view')} {tuple(round(v) for v in box)} is "
                    f"larger than {Image.MAX_IMAGE_PIXELS:,} pixels")
    return None


def reachable_ids(record: dict, config: str) -> list[int]:
    """The frame ids an episode of `record` can show (what an upstream record without
    `frame_ids` needs), at most MAX_FRAMES of them."""
    ids = scenario_call(lambda: transforms.behaviour_for_config(config)
                        .reachable_frame_ids(record), config)
    if len(ids) > MAX_FRAMES:
        raise BadRecord(f"it can show {len(ids):,} frames (at most {MAX_FRAMES:,})")
    return list(ids)
