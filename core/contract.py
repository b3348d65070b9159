"""The record contract's checks of one row: the one checker that the build (each sample as it is
made), the import (each upstream record before any work), `validate` (each row of a finished
folder) and the runtime (each row before it is played) call.

A row is untrusted wherever it comes from: a built folder's shards are checked against its
build.json, but whoever can edit a shard can rewrite build.json too, and an upstream-layout
folder or a Hub dataset carries no such check at all. `problems(row, behaviour)` lists, in this
order, what keeps a row from being played (the first is what the runtime refuses it for, the
whole list is what `validate` reports):

1. every column holds what the contract says (an integer is an int, not a bool or a string;
   numbers are finite; lists hold items of their type; a pixel count may be an integer or a
   fraction), and the fields every environment reads are present;
2. the numbers that size work stay within MAX_SLOT (frame ids, step caps, ...) and a row names
   at most MAX_FRAMES frames, so nothing allocates or loops by what a row claims (past this the
   scenario's rules are not asked: they iterate over these values);
3. frame ids: present, distinct, holding the first and the reference frame; one frame per id;
4. exactly 4 distinct, non-empty categories holding the answer; options present, exactly one
   abstain option, every other naming exactly one action of the scenario;
5. its scenario's rules (`Behaviour.record_problems`: the frames it can show are present, ...),
   and every view it can show (a COCO crop grows with each move) within PIL's
   decompression-bomb limit;
6. with `decode_frames`, each frame's bytes a whole image of the format its name says.

`behaviour` is the row's scenario's (`transforms.behaviour_for_config`); None for a config no
registered scenario declares, whose options and rules cannot be checked (the caller says so).
"""
from __future__ import annotations

import math

import pyarrow as pa
from PIL import Image

from proactivebench_builder.core import vocabulary
from proactivebench_builder.core.errors import ScenarioCodeError, code_failure
from proactivebench_builder.core.images import BadImage, check_image
from proactivebench_builder.core.records import (
    COLUMNS, INT_COLUMNS, METADATA_COLUMNS, UPSTREAM_COMMON_FIELDS, arrow_schema)

# Frame ids, step caps, step sizes, granularities: ChangeIt's are frame numbers of a video (a
# few thousand at most); anything beyond this is not a benchmark row but a request for unbounded
# work.
MAX_SLOT = 1_000_000
MAX_FRAMES = 4096          # frames one row may name (upstream's longest sequence: a few hundred)
SIZED = ("first_image", "num_images", "reference_image", "step_size", "max_steps",
         "granularity")
REQUIRED = UPSTREAM_COMMON_FIELDS + ("key", "frame_ids")
# The contract's types, a pixel count an integer or a fraction (core.records.PIXEL_FIELDS).
TYPES = arrow_schema(fractional_pixels=True)
# What a scenario's hooks raise on a row whose values they cannot use (types are checked first)
UNUSABLE = (KeyError, TypeError, ValueError, IndexError, ArithmeticError, AttributeError)


def problems(row: dict, behaviour=None, decode_frames: bool = False) -> list[str]:
    """Everything wrong with `row`, in the order of the module's list (empty: it is a row of
    the contract). The steps past a broken type or bound are not taken (they would judge values
    they cannot use)."""
    found = type_problems(row) + required_problems(row)
    if found:
        return found
    found = bound_problems(row)
    if found:
        return found
    found = frame_id_problems(row) + category_problems(row)
    if behaviour is not None:
        found += option_problems(row, behaviour) + scenario_problems(row, behaviour)
        found += view_problems(row, behaviour)
    if decode_frames:
        found += frame_problems(row)
    return found


def first_problem(row: dict, behaviour=None) -> str | None:
    return next(iter(problems(row, behaviour)), None)


def check_row(row: dict) -> None:
    """Raise ValueError naming the first problem of a row a scenario built (before its id is
    given): its columns are the contract's, no more, and the invariants every environment
    relies on hold (types, frame ids, categories; the scenario's own rules are `validate`'s)."""
    key = row.get("key")
    missing = [c for c in METADATA_COLUMNS if c not in row]
    if missing:
        raise ValueError(f"row {key!r} lacks columns {missing}")
    unknown = sorted(set(row) - set(COLUMNS) - {"frame_refs"})
    if unknown:
        raise ValueError(f"row {key!r} has fields the record contract does not have: "
                         f"{unknown} (its columns are fixed: core/records.py)")
    checked = {k: v for k, v in row.items() if k not in ("frames", "frame_refs")}
    if checked.get("id") is None:
        checked["id"] = 0  # ids are given once the whole pool is known
    problem = next(iter(problems(checked)), None)
    if problem:
        raise ValueError(f"row {key!r}: {problem}")


# ---- 1. types and presence ------------------------------------------------------------------

def type_problems(row: dict) -> list[str]:
    found = []
    for column in TYPES:
        if column.name != "frames":
            problem = value_problem(row.get(column.name), column.type)
            if problem:
                found.append(f"{column.name}: {problem}")
    return found


def value_problem(value, kind: pa.DataType) -> str | None:
    """Why `value` is not a value of the Arrow type `kind` (None: it is, or it is null)."""
    if value is None:
        return None
    if pa.types.is_integer(kind):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{shown(value)} is not an integer"
        if not -2 ** 63 <= value < 2 ** 63:
            return f"{shown(value)} does not fit in 64 bits"
        return None
    if pa.types.is_floating(kind):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{shown(value)} is not a number"
        return None if math.isfinite(value) else f"{value} is not a finite number"
    if pa.types.is_string(kind):
        if not isinstance(value, str):
            return f"{shown(value)} is not text"
        try:
            value.encode("utf-8")  # JSON's "\ud800" escapes decode to lone surrogates
        except UnicodeEncodeError:
            return f"{shown(value)} is not text UTF-8 can encode"
        return None
    if pa.types.is_boolean(kind):
        return None if isinstance(value, bool) else f"{shown(value)} is not true/false"
    if pa.types.is_binary(kind):
        return None if isinstance(value, bytes) else f"{shown(value)} is not bytes"
    if pa.types.is_list(kind):
        if not isinstance(value, list):
            return f"{shown(value)} is not a list"
        for index, item in enumerate(value):
            problem = "null" if item is None else value_problem(item, kind.value_type)
            if problem:
                return f"item {index}: {problem}"
        return None
    if pa.types.is_struct(kind):
        if not isinstance(value, dict):
            return f"{shown(value)} is not an object"
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


def expected_text(kind: pa.DataType) -> str:
    """A field's Arrow type as a user reads it ("a list of integers")."""
    if pa.types.is_integer(kind):
        return "an integer"
    if pa.types.is_floating(kind):
        return "a number"
    if pa.types.is_boolean(kind):
        return "true or false"
    if pa.types.is_string(kind):
        return "text"
    if pa.types.is_list(kind):
        plural = {"an integer": "integers", "a number": "numbers", "text": "texts"}
        item = expected_text(kind.value_type)
        return f"a list of {plural.get(item, item)}"
    if pa.types.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        return "an object of " + ", ".join(f"{f.name} ({expected_text(f.type)})" for f in fields)
    return str(kind)


def shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def required_problems(row: dict) -> list[str]:
    missing = [f for f in REQUIRED if row.get(f) is None]
    empty = [f for f in ("key", "prompt", "image_template") if row.get(f) == ""]
    return ([f"lacks {', '.join(missing)}"] if missing else []) + [
        f"{f} is empty" for f in empty]


# ---- 2. bounds ----------------------------------------------------------------------------------

def bound_problems(row: dict) -> list[str]:
    """Values no real record holds and the scenario's rules would loop over: an integer beyond
    MAX_SLOT (a ChangeIt max_steps of 10^9 would build a list of 2*10^9 ids), a negative size,
    more than MAX_FRAMES frames."""
    for name in SIZED:
        value = row.get(name)
        if value is not None and not 0 <= value <= MAX_SLOT:
            return [f"{name}={value} is outside 0..{MAX_SLOT:,} (beyond any real record)"]
    for name in sorted(INT_COLUMNS):
        value = row.get(name)
        if isinstance(value, int) and abs(value) > MAX_SLOT:
            return [f"{name}={value} is beyond the {MAX_SLOT:,} any real record stays within"]
    for name in ("frame_ids", "valid_images"):
        values = row.get(name) or []
        if len(values) > MAX_FRAMES:
            return [f"{name} names {len(values):,} frames (at most {MAX_FRAMES:,})"]
        if any(not 0 <= v <= MAX_SLOT for v in values):
            return [f"{name} holds an id outside 0..{MAX_SLOT:,}"]
    return []


# ---- 3. frames, 4. categories and options -----------------------------------------------------

def frame_id_problems(row: dict) -> list[str]:
    ids, frames = row.get("frame_ids") or [], row.get("frames")
    found = []
    if not ids:
        found.append("no frame_ids")
    if len(ids) != len(set(ids)):
        found.append(f"frame ids repeat: {ids}")
    for slot in ("first_image", "reference_image"):
        if row.get(slot) not in ids:
            found.append(f"{slot}={row.get(slot)} is not in frame_ids {ids}")
    if frames is not None and (not isinstance(frames, list) or len(frames) != len(ids)):
        count = len(frames) if isinstance(frames, list) else f"no list of ({type(frames).__name__})"
        found.append(f"{len(ids)} frame_ids but {count} frames")
    return found


def category_problems(row: dict) -> list[str]:
    categories = row.get("categories") or []
    found = []
    if len(categories) != 4:
        found.append(f"{len(categories)} categories, expected 4")
    if len(set(categories)) != len(categories):
        found.append(f"categories repeat: {categories}")
    if any(not (c or "").strip() for c in categories):
        found.append("an empty category")
    if row.get("answer") not in categories:
        found.append(f"answer {row.get('answer')!r} not in categories {categories}")
    return found


def option_problems(row: dict, behaviour) -> list[str]:
    options = row.get("options") or []
    if not options:
        return ["no options"]
    if any(not (o or "").strip() for o in options):
        return [f"an empty option in {options}"]
    found = []
    abstain = [o for o in options if vocabulary.is_abstain(o)]
    if len(abstain) != 1:
        found.append(f"{len(abstain)} abstain options, expected 1: {options}")
    for option in options:
        if not vocabulary.is_abstain(option):
            try:
                behaviour.action_of(option)
            except ValueError as err:
                found.append(str(err))
    if len(abstain) == len(options):
        found.append("no proactive option")
    return found


# ---- 5. the scenario's rules and views ---------------------------------------------------------

def scenario_problems(row: dict, behaviour) -> list[str]:
    """The scenario's own checks (`Behaviour.record_problems`), written for rows of the contract;
    a value they did not expect is one problem naming what went wrong, not a traceback."""
    try:
        return list(behaviour.record_problems(row))
    except UNUSABLE as err:
        return [f"its scenario's checks cannot judge this row ({type(err).__name__}: {err})"]
    except Exception as err:  # noqa: BLE001 - a play declaration's own code: its author's
        raise ScenarioCodeError(own_code_failure(err, behaviour)) from err


def view_problems(row: dict, behaviour) -> list[str]:
    """A view the row can show (a crop box that grows with each move) larger than PIL's
    decompression-bomb limit would allocate by what the row claims."""
    try:
        views = behaviour.sheet_views(row) or []
    except UNUSABLE as err:
        return [f"its scenario cannot show it ({type(err).__name__}: {err})"]
    except Exception as err:  # noqa: BLE001 - a play declaration's own code: its author's
        raise ScenarioCodeError(own_code_failure(err, behaviour)) from err
    for view in views:
        box = view.get("box")
        if box is None:
            continue
        left, top, right, bottom = box
        if (right - left) * (bottom - top) > Image.MAX_IMAGE_PIXELS:
            return [f"its {view.get('caption', 'view')} {tuple(round(v) for v in box)} is "
                    f"larger than {Image.MAX_IMAGE_PIXELS:,} pixels"]
    return []


def own_code_failure(err: BaseException, behaviour) -> str:
    """The one line of a play declaration's code that raised (core.errors.code_failure)."""
    return (code_failure(err, type(behaviour).__module__, f"the play of {behaviour.config}")
            or f"the play of {behaviour.config}: {type(err).__name__}: {err}")


# ---- 6. the frames' bytes -------------------------------------------------------------------

def frame_problems(row: dict) -> list[str]:
    """One decodable frame per frame id (a full decode; JPEG at 1/8 scale, which still reads
    every segment, like the build's own source validation)."""
    found = []
    for position, frame in enumerate(row.get("frames") or []):
        frame = frame if isinstance(frame, dict) else {}
        try:
            check_image(frame.get("bytes") or b"", frame.get("path") or "")
        except BadImage as err:
            found.append(f"frame {position} ({frame.get('path')}): {err}")
    return found
