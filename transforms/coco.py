"""MS-COCO 2014 (`coco2014`): a crop beside (or inside) the only object; the model should move
the camera toward it, or zoom out, before it answers.

Raw source: `annotations/instances_val2014.json` (a COCO instances file) and
`val2014/COCO_val2014_<12 digits>.jpg`; parameter `split: train` reads `instances_train2014.json`
and `train2014/` instead (for the GRPO train split). A sample is one image with exactly one
annotated object. It has ONE frame, the full image passed through unchanged (`frame_ids = [0]`,
`first_image = reference_image = 0`): every view the model sees is a crop of it that the upstream
environment computes at play time from `crop`, `direction`, `horizontal_step` and `vertical_step`.

The crop convention is exactly the one `COCO2014Environment` reads (upstream `proactivebench`
0.1.1 `environment.py`). With h, v the current steps (h0, v0 at turn 0; (k+1)·h0 after k moves on that axis) the
view is PIL box (left', top', right, bottom):
  * moves (left/right/up/down and the diagonals "up_left", "up_right", "down_left",
    "down_right"): `crop.width` / `crop.height` are the RIGHT / BOTTOM edge coordinates; a move
    extends the view on its side (left' = left − h, right = width + h, top' = top − v,
    bottom = height + v); the option of an axis disappears once its step reaches g·h0, so turn 0
    already shows one step and the last view shows g steps.
  * zoom: `crop.width` / `crop.height` are true SIZES; the view is (left − h, top − v,
    left + width + h, top + height + v), grown on every side, g+1 views.
The step cap that upstream computes (and that `num_images` holds, so that the environment's
`valid_images = range(num_images)` and the record agree) is g for a cardinal move, 2·g for a
diagonal, g+1 for zoom. `max_steps` stays null (upstream's COCO environment derives its cap from
`granularity` and reads no such field); the step of an axis that does not move is 0.
Every single-object image becomes a sample (no subsampling), so the pool size follows the source.

How a crop is made (the generation code is unreleased; all of this is our choice):
  * every coordinate and step is an integer (zoom's option is removed on an exact float
    equality, which integer steps always reach), every view lies inside the image (no black
    padding) and is at least `min_view_fraction` of the image side on each axis, a step is at
    least `min_step_fraction` of the side, and the stored crop (one step before the first view)
    is itself a proper box in its convention (x2 > left for moves, size >= 1 for zoom);
  * a move starts beside the object: the first view cuts off the object on the side the camera
    must move to (its IoU with the object box < `max_start_iou`, and it shows at most
    `max_start_visible_fraction` of the box); the axis that does not move spans the object plus
    some context; the last view contains the whole object box;
  * zoom starts inside the object (a window of it, IoU < `max_start_iou`) and the last view,
    grown symmetrically, contains the whole box; the window's position is drawn among those from
    which symmetric growth reaches both object ends before an image border;
  * "covers the object" means the last view contains the object's bounding box (coverage, the
    fraction of the box inside the view, is 1.0; `min_final_coverage` is checked on every plan);
  * the direction family (cardinal / diagonal / zoom) is drawn by `direction_weights`, the
    direction uniformly inside it; directions that cannot be realised for this object (no room
    beside it, object too small to zoom into) are skipped in a seeded weighted order;
    granularity is uniform in [granularity_min, granularity_max] = [3, 5] (paper: 3-5 steps).

Reading: the annotation file (val ~160 MB of JSON, train ~330 MB) is streamed once per worker
process, never parsed whole: its images[] and annotations[] elements are decoded one at a time
and reduced at once to a compact index (image records, per-image annotation counts and the lone
annotation, no segmentations), which is all a worker keeps (cached, see `load_index`); memory is
that index plus one read chunk. The units of reading are `read_shards` slices of the image ids
(id modulo read_shards), so workers share the per-image work. A raw item is one images[] record,
one image id that annotations name but images[] lacks, or one record too malformed to index (no
integer id / image_id, a duplicate image id). A file that is not valid JSON, is truncated, or
is not an instances file fails its units as a whole (each one a dead letter).

Selection: an image is a candidate when it has exactly one annotation and that annotation is
not a crowd region ([?] whether crowd regions count as objects is unknown; we count them, so an
image with one object plus a crowd of others is not "single-object"; `count_crowd_annotations:
false` ignores them instead). Images without annotations, with several, or whose single
annotation is a crowd are documented exclusions. Dead letters: an image record that is malformed,
an annotation naming an image that images[] lacks, an unknown category id, a degenerate box
(a side below `min_box_side_px`), a box outside the image (beyond `bbox_tolerance_px`), an image
smaller than `min_image_side` or with no room for any valid crop, an image file that is missing,
corrupt, or not the size the annotations state.

Distractors: the paper ranks categories by CLIP text similarity, which is not available offline.
We use a fixed, documented similarity between COCO category names instead:
  score(a, b) = 2·[same supercategory] + 1·[supercategories related in `supercategory_affinity`]
                + cosine of the names' character-trigram counts,
and take the `hard_negatives` (3) highest-scoring categories (ties by category id), shuffled with
the answer by the sample's seed.
"""
from __future__ import annotations

import codecs
import copy
import io
import json
import logging
import math
import posixpath
import random
import re
import sys
import threading
from collections import Counter
from dataclasses import dataclass

from PIL import Image

from proactivebench_builder.core import fileio
from proactivebench_builder.core.seeding import hash_rank
from proactivebench_builder.runtime.environments import coco_crop_box
from proactivebench_builder.transforms.base import BadItem, Scenario, SourceError
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.vocabulary import format_category

LOG = logging.getLogger(__name__)

QUESTIONS = (
    "Classify the visual content of this image.",
    "Identify the object in this image.",
    "What object is shown in this image?",
    "What is the main object in this picture?",
    "Which category does the object in this image belong to?",
    "What is depicted in this image?",
    "Name the object in this photo.",
    "What kind of object can be seen in this image?",
    "Tell me the category of the object in this picture.",
    "What is the object in this photograph?",
    "Recognize the object shown in this image.",
    "What does this image contain?",
    "Determine the category of the object in the image.",
    "Which object appears in this photo?",
    "What is this an image of?",
)

# The exact option strings upstream removes once a direction is exhausted (upstream `environment.py`).
MOVE_OPTIONS = {
    "left": "Move the camera to the left.",
    "right": "Move the camera to the right.",
    "up": "Move the camera up.",
    "down": "Move the camera down.",
}
ZOOM_OPTION = "Move farther from the object."

CARDINAL = ("left", "right", "up", "down")
DIAGONAL = ("up_left", "up_right", "down_left", "down_right")
ZOOM = "zoom"
FAMILIES = {"cardinal": CARDINAL, "diagonal": DIAGONAL, "zoom": (ZOOM,)}

SPLITS = ("val", "train")


# ---- geometry ------------------------------------------------------------------------------

def box_area(box) -> float:
    left, top, right, bottom = box
    return max(0.0, right - left) * max(0.0, bottom - top)


def intersection(a, b) -> float:
    return box_area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def iou(a, b) -> float:
    inter = intersection(a, b)
    union = box_area(a) + box_area(b) - inter
    return inter / union if union > 0 else 0.0


def coverage(view, obj) -> float:
    """The fraction of the object box inside the view."""
    return intersection(view, obj) / box_area(obj)


def direction_moves(direction: str) -> tuple[str, ...]:
    """The move keywords of a direction: ("up", "left") for "up_left", ("left",) for "left"."""
    return tuple(direction.split("_")) if direction != ZOOM else ()


def proactive_options(direction: str) -> list[str]:
    """One option per moving axis (2 for a diagonal), or the zoom-out option."""
    if direction == ZOOM:
        return [ZOOM_OPTION]
    return [MOVE_OPTIONS[m] for m in direction_moves(direction)]


def step_cap(direction: str, granularity: int) -> int:
    """Upstream's `max_steps` for a record (and so our `num_images`)."""
    if direction == ZOOM:
        return granularity + 1
    return 2 * granularity if "_" in direction else granularity


@dataclass(frozen=True)
class AxisPlan:
    """One axis of a crop: what is stored (start = left/top; end = the value stored under
    width/height, an edge coordinate for moves and a size for zoom), the step, and the extents
    of the first and last displayed views."""
    start: int
    end: int
    step: int
    first: tuple[int, int]
    last: tuple[int, int]


@dataclass(frozen=True)
class CropPlan:
    direction: str
    granularity: int
    crop: dict            # {top, left, height, width} as upstream reads it
    horizontal_step: int
    vertical_step: int
    first_view: tuple     # (left, top, right, bottom)
    last_view: tuple
    start_iou: float
    final_coverage: float


def _object_span(o0: float, o1: float, n: int) -> tuple[int, int]:
    """The object's extent on one axis in whole pixels (grown outward), inside [0, n]."""
    return max(0, math.floor(o0)), min(n, math.ceil(o1))


def fixed_axis(rng: random.Random, n: int, o0: float, o1: float, min_view: int,
               context: float) -> AxisPlan | None:
    """The axis a move does not touch: a window holding the whole object plus some context."""
    lo_obj, hi_obj = _object_span(o0, o1, n)
    smallest = max(min_view, hi_obj - lo_obj)
    if smallest > n:
        return None
    margin = max(min_view, round(context * (hi_obj - lo_obj)))
    size = rng.randint(smallest, min(n, smallest + margin))
    lo = rng.randint(max(0, hi_obj - size), min(lo_obj, n - size))
    return AxisPlan(lo, lo + size, 0, (lo, lo + size), (lo, lo + size))


def extend_low_axis(rng: random.Random, n: int, o0: float, o1: float, g: int, min_view: int,
                    context: float, min_step: int = 1) -> AxisPlan | None:
    """A move toward lower coordinates (left, up): the view's high edge stays put, the low edge
    starts inside or past the object's high side and moves by `step` per turn; after g−1 moves
    it has passed the object's low edge. Stored: start = first low edge + step (upstream shows
    one step already), end = the high edge (used as right/bottom)."""
    lo_obj, hi_obj = _object_span(o0, o1, n)
    margin = max(min_view, round(context * (hi_obj - lo_obj)))
    high = rng.randint(hi_obj, min(n, hi_obj + margin))
    first_lo_min, first_lo_max = lo_obj + 1, high - min_view
    if first_lo_min > first_lo_max:
        return None
    first_lo = rng.randint(first_lo_min, first_lo_max)
    moves = g - 1
    step_min = max(min_step, math.ceil((first_lo - lo_obj) / moves))
    # the stored crop (one step before the first view) must itself be a proper box
    step_max = min((first_lo - max(0, lo_obj - margin)) // moves, high - first_lo - 1)
    if step_min > step_max:
        return None
    step = rng.randint(step_min, step_max)
    last_lo = first_lo - moves * step
    return AxisPlan(first_lo + step, high, step, (first_lo, high), (last_lo, high))


def extend_high_axis(rng: random.Random, n: int, o0: float, o1: float, g: int, min_view: int,
                     context: float, min_step: int = 1) -> AxisPlan | None:
    """A move toward higher coordinates (right, down): the mirror image of `extend_low_axis`.
    Stored: start = the fixed low edge, end = first high edge − step (used as right/bottom)."""
    low = extend_low_axis(rng, n, n - o1, n - o0, g, min_view, context, min_step)
    if low is None:
        return None
    first = (n - low.first[1], n - low.first[0])
    last = (n - low.last[1], n - low.last[0])
    return AxisPlan(first[0], first[1] - low.step, low.step, first, last)


def zoom_axis(rng: random.Random, n: int, o0: float, o1: float, g: int,
              min_view: int, min_step: int = 1) -> AxisPlan | None:
    """Zoom out: the first view is a window inside the object; g zoom-outs grow it by `step` on
    both sides each time until it holds the whole object, never leaving the image. Stored: start
    = first low edge + step, end = the true size (first size − 2·step, kept ≥ 1).

    Growth is symmetric, so only some window positions can end exactly around an object that
    nearly fills the image: the position is drawn among those that can, not blindly."""
    lo_obj, hi_obj = _object_span(o0, o1, n)
    if hi_obj - lo_obj < min_view:
        return None
    size = rng.randint(min_view, hi_obj - lo_obj)
    feasible = []
    for first_lo in range(lo_obj, hi_obj - size + 1):
        first_hi = first_lo + size
        needed = max(first_lo - lo_obj, hi_obj - first_hi)   # growth to reach both object ends
        room = min(first_lo, n - first_hi)                    # growth before leaving the image
        step_min = max(min_step, math.ceil(needed / g))
        step_max = min(room // g, (size - 1) // 2)
        if step_min <= step_max:
            feasible.append((first_lo, step_min, step_max))
    if not feasible:
        return None
    first_lo, step_min, step_max = rng.choice(feasible)
    step = rng.randint(step_min, step_max)
    first_hi = first_lo + size
    return AxisPlan(first_lo + step, size - 2 * step, step, (first_lo, first_hi),
                    (first_lo - g * step, first_hi + g * step))


def plan_axis(rng, kind: str, n: int, o0: float, o1: float, g: int, min_view: int,
              context: float, min_step: int) -> AxisPlan | None:
    if kind == "fixed":
        return fixed_axis(rng, n, o0, o1, min_view, context)
    if kind == "low":
        return extend_low_axis(rng, n, o0, o1, g, min_view, context, min_step)
    if kind == "high":
        return extend_high_axis(rng, n, o0, o1, g, min_view, context, min_step)
    return zoom_axis(rng, n, o0, o1, g, min_view, min_step)


def axis_kinds(direction: str) -> tuple[str, str]:
    """(horizontal, vertical) axis behaviour of a direction."""
    if direction == ZOOM:
        return "zoom", "zoom"
    moves = direction_moves(direction)
    horizontal = "low" if "left" in moves else "high" if "right" in moves else "fixed"
    vertical = "low" if "up" in moves else "high" if "down" in moves else "fixed"
    return horizontal, vertical


@dataclass(frozen=True)
class CropRules:
    max_start_iou: float
    max_start_visible_fraction: float
    min_final_coverage: float
    min_view_fraction: float
    min_step_fraction: float
    context_margin: float
    attempts: int

    @classmethod
    def from_params(cls, params: dict) -> "CropRules":
        return cls(float(params["max_start_iou"]), float(params["max_start_visible_fraction"]),
                   float(params["min_final_coverage"]), float(params["min_view_fraction"]),
                   float(params["min_step_fraction"]), float(params["context_margin"]),
                   int(params["crop_attempts"]))


def try_direction(rng: random.Random, direction: str, g: int, width: int, height: int,
                  obj: tuple, rules: CropRules) -> CropPlan | None:
    """One attempt at a crop for `direction`; None when the draw breaks a rule."""
    min_w = max(1, round(rules.min_view_fraction * width))
    min_h = max(1, round(rules.min_view_fraction * height))
    step_w = max(1, round(rules.min_step_fraction * width))
    step_h = max(1, round(rules.min_step_fraction * height))
    kind_x, kind_y = axis_kinds(direction)
    x = plan_axis(rng, kind_x, width, obj[0], obj[2], g, min_w, rules.context_margin, step_w)
    y = plan_axis(rng, kind_y, height, obj[1], obj[3], g, min_h, rules.context_margin, step_h)
    if x is None or y is None:
        return None
    first = (x.first[0], y.first[0], x.first[1], y.first[1])
    last = (x.last[0], y.last[0], x.last[1], y.last[1])
    start_iou, final_coverage = iou(first, obj), coverage(last, obj)
    if start_iou >= rules.max_start_iou:
        return None
    if coverage(first, obj) > rules.max_start_visible_fraction:
        return None
    if final_coverage < rules.min_final_coverage:
        return None
    crop = {"top": y.start, "left": x.start, "height": y.end, "width": x.end}
    return CropPlan(direction, g, crop, x.step, y.step, first, last, start_iou, final_coverage)


def weighted_order(rng: random.Random, weights: dict[str, float]) -> list[str]:
    """All names with positive weight, in a seeded order where heavier names tend to come first
    (weighted sampling without replacement: sort by u^(1/w))."""
    keyed = [(rng.random() ** (1.0 / w), name) for name, w in sorted(weights.items()) if w > 0]
    return [name for _, name in sorted(keyed, reverse=True)]


def direction_weights(family_weights: dict) -> dict[str, float]:
    """Each family's weight shared evenly by its directions."""
    out = {}
    for family, directions in FAMILIES.items():
        for d in directions:
            out[d] = float(family_weights.get(family, 0)) / len(directions)
    return out


def plan_crop(rng_direction: random.Random, rng_crop: random.Random, g: int, width: int,
              height: int, obj: tuple, family_weights: dict, rules: CropRules) -> CropPlan | None:
    """The first realisable direction in a seeded weighted order, `rules.attempts` draws each."""
    for direction in weighted_order(rng_direction, direction_weights(family_weights)):
        for _ in range(rules.attempts):
            plan = try_direction(rng_crop, direction, g, width, height, obj, rules)
            if plan is not None:
                return plan
    return None


# ---- distractors ---------------------------------------------------------------------------

def trigrams(name: str) -> Counter:
    padded = f"  {name.lower()} "
    return Counter(padded[i:i + 3] for i in range(len(padded) - 2))


def text_similarity(a: str, b: str) -> float:
    """Cosine similarity of character-trigram counts: a fixed stand-in for a text encoder."""
    ta, tb = trigrams(a), trigrams(b)
    dot = sum(ta[t] * tb[t] for t in ta)
    norm = math.sqrt(sum(v * v for v in ta.values())) * math.sqrt(sum(v * v for v in tb.values()))
    return dot / norm if norm else 0.0


def category_similarity(a: dict, b: dict, affinity: dict) -> float:
    same = a["supercategory"] == b["supercategory"]
    related = b["supercategory"] in affinity.get(a["supercategory"], ())
    return 2.0 * same + 1.0 * (related and not same) + text_similarity(a["name"], b["name"])


_NEGATIVES: dict[tuple, list[str]] = {}


def hard_negatives(answer_id: int, table: dict[int, dict], affinity: dict, k: int) -> list[str]:
    """The k category names most similar to the answer's (ties broken by category id).
    Memoised per process on everything the ranking reads: it is the same for every sample of
    a category, and ranking 80 names by trigram similarity took ~3 ms per sample."""
    key = (answer_id, k,
           tuple(sorted((s, tuple(v)) for s, v in affinity.items())),
           tuple(sorted((cid, c["name"], c["supercategory"]) for cid, c in table.items())))
    if key not in _NEGATIVES:
        _NEGATIVES[key] = _rank_negatives(answer_id, table, affinity, k)
    return list(_NEGATIVES[key])


def _rank_negatives(answer_id: int, table: dict[int, dict], affinity: dict, k: int) -> list[str]:
    answer = table[answer_id]
    others = [(-category_similarity(answer, cat, affinity), cid, cat["name"])
              for cid, cat in table.items() if cid != answer_id]
    return [name for _, _, name in sorted(others)[:k]]


# ---- streaming the top level of a JSON file ------------------------------------------------

READ_CHUNK_BYTES = 1 << 20
# One value (an annotation, the categories list) longer than this is a broken file, not data:
# without a cap, a value that never ends would be read (and re-parsed) to the end of the file.
MAX_VALUE_CHARS = 64 << 20
_WHITESPACE = re.compile(r"[ \t\n\r]*")   # JSON's whitespace, exactly


class NotAJsonObject(ValueError):
    """The top-level value of the file is not a JSON object."""


class StreamedArray:
    """The elements of a top-level array, decoded one at a time as it is iterated (once, and
    before `iter_top_level` is asked for its next member)."""

    def __init__(self, elements):
        self._elements = elements

    def __iter__(self):
        return self._elements


def iter_top_level(stream, streamed_keys, chunk_bytes: int = READ_CHUNK_BYTES):
    """Parse a JSON file whose top level is an object without holding more of it than the
    member being decoded: yields (key, value) per member, in file order. A value is decoded
    whole, except the value of a key in `streamed_keys` that is an array: that one is a
    StreamedArray whose elements are decoded one by one (what the caller leaves unread of it
    is skipped). `stream` is a binary file of UTF-8 text, read `chunk_bytes` at a time.

    Raises NotAJsonObject when the top level is another JSON value, and ValueError naming the
    character position for invalid JSON, a truncated file or a value over MAX_VALUE_CHARS."""
    text = _JsonText(stream, chunk_bytes)
    first = text.next_char()
    if first != "{":
        if first == "":
            raise text.truncated("where a JSON object should begin")
        raise NotAJsonObject(f"the top level is not a JSON object (it starts with {first!r})")
    text.pos += 1
    if text.next_char() == "}":
        text.pos += 1
    else:
        while True:
            key = text.key()
            text.take(":", f"after the key {key!r}")
            if key in streamed_keys and text.next_char() == "[":
                text.pos += 1
                elements = _array_elements(text, key)
                yield key, StreamedArray(elements)
                for _ in elements:
                    pass
            else:
                yield key, text.value(f"the value of {key!r}")
            if text.take(",}", f"after the value of {key!r}") == "}":
                break
    if text.next_char() != "":
        raise text.invalid(text.pos, "extra data after the top-level object")


def _array_elements(text: _JsonText, key: str):
    """The elements of the array whose "[" `text` has just passed, up to and past its "]"."""
    if text.next_char() == "]":
        text.pos += 1
        return
    position = 0
    while True:
        yield text.value(f"{key}[{position}]")
        if text.take(",]", f"after {key}[{position}]") == "]":
            return
        position += 1


class _JsonText:
    """A sliding window over the text of a JSON file: `text[pos:]` is read but not yet parsed,
    and `offset` is the position of `text[0]` in the whole file (for error messages). What has
    been parsed is dropped whenever more is read, so the window stays about one chunk long."""

    def __init__(self, stream, chunk_bytes: int):
        self.stream = stream
        self.chunk_bytes = chunk_bytes
        # utf-8-sig and surrogatepass decode bytes as json.loads does (a BOM is allowed)
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")("surrogatepass")
        # a decoder of its own: the pure-Python scanner keeps state between calls
        self.raw_decode = json.JSONDecoder().raw_decode
        self.text, self.pos, self.offset = "", 0, 0
        self.bytes_read = 0
        self.at_end = False

    def read_more(self) -> bool:
        """Append the next chunk, dropping what is parsed; False at the end of the file. The
        chunk is at least as long as the unparsed text, so a long value is re-parsed only
        O(log(length / chunk)) times while it is completed, never quadratically."""
        if self.at_end:
            return False
        pending = len(self.text) - self.pos
        data = self.stream.read(max(self.chunk_bytes, pending))
        self.at_end = not data
        try:
            added = self.decoder.decode(data, final=self.at_end)
        except UnicodeDecodeError as err:
            raise ValueError(f"not UTF-8 text near byte {self.bytes_read + err.start}: "
                             f"{err.reason}") from None
        self.bytes_read += len(data)
        self.offset += self.pos
        self.text, self.pos = self.text[self.pos:] + added, 0
        return not self.at_end or bool(added)

    def next_char(self) -> str:
        """The next character that is not whitespace (not consumed), "" at the end of the file."""
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.read_more():
                return ""

    def take(self, allowed: str, where: str) -> str:
        """Consume the next character, which must be one of `allowed`."""
        char = self.next_char()
        if char and char in allowed:
            self.pos += 1
            return char
        wanted = " or ".join(repr(c) for c in allowed)
        if char == "":
            raise self.truncated(f"where {wanted} should come {where}")
        raise self.invalid(self.pos, f"expected {wanted} {where}, found {char!r}")

    def key(self) -> str:
        """The next key of the top-level object: a string, as JSON requires."""
        char = self.next_char()
        if char == "":
            raise self.truncated("where a key of the top-level object should begin")
        if char != '"':
            raise self.invalid(self.pos, f"expected a key in double quotes, found {char!r}")
        return self.value("a key of the top-level object")

    def value(self, what: str):
        """Decode the JSON value at the cursor and move past it. A value that does not end in
        the window is retried with more text read, until it ends or reaches MAX_VALUE_CHARS."""
        if self.next_char() == "":
            raise self.truncated(f"where {what} should begin")
        while True:
            try:
                value, end = self.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as err:
                if self.at_end or not self._may_continue(err):
                    raise self._syntax_error(err, what) from None
            else:
                if self.at_end or not _may_be_cut_short(value, len(self.text) - end):
                    self.pos = end
                    return value
            if len(self.text) - self.pos > MAX_VALUE_CHARS:
                raise ValueError(f"{what} at character {self.offset + self.pos} is longer than "
                                 f"{MAX_VALUE_CHARS >> 20} MiB without ending: a broken file")
            self.read_more()

    def _may_continue(self, err: json.JSONDecodeError) -> bool:
        """Whether a decoding error may only mean that the window ends inside the value: the
        decoder stops where the text runs out, or within a literal or a \\uXXXX escape of it
        (so near the end), or reports a string left open (at its start)."""
        return err.pos >= len(self.text) - 16 or err.msg.startswith("Unterminated string")

    def _syntax_error(self, err: json.JSONDecodeError, what: str) -> ValueError:
        if self.at_end and (err.pos >= len(self.text) or err.msg.startswith("Unterminated")):
            return self.truncated(f"inside {what}")
        return self.invalid(err.pos, f"{err.msg} (in {what})")

    def invalid(self, pos: int, message: str) -> ValueError:
        return ValueError(f"invalid JSON at character {self.offset + pos}: {message}")

    def truncated(self, where: str) -> ValueError:
        return ValueError(f"truncated JSON: the file ends at character "
                          f"{self.offset + len(self.text)}, {where}")


def _may_be_cut_short(value, chars_after: int) -> bool:
    """A number is the one JSON value that decodes without error when the window cuts it short
    ("12" of "125", "1" of "1.5" or "1e-5"): trust it only with more than 2 characters after it
    (the longest unfinished tail, "e-", is 2) or at the end of the file."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and chars_after <= 2


# ---- reading the annotation file -----------------------------------------------------------

@dataclass
class ImageObjects:
    """What a sample needs of one image's annotations: their counts, and the lone annotation
    when there is one (an image with several objects is excluded without looking further)."""
    count: int = 0               # every annotation, crowd regions included
    count_non_crowd: int = 0
    single: dict | None = None           # the annotation, when count == 1
    single_non_crowd: dict | None = None  # the non-crowd annotation, when count_non_crowd == 1


@dataclass
class AnnotationIndex:
    """A compact index of an annotation file: the image records, per image its objects (see
    ImageObjects), the annotations that name unknown images, and the records too malformed to
    index. It is all a worker keeps of the file: a dict per annotation (let alone the parsed
    file, segmentations and all) would cost gigabytes for train2014 in every worker process."""
    images: dict                 # image id -> image record
    objects: dict                # image id -> ImageObjects
    orphans: dict                # image id (not in images[]) -> sorted annotation ids
    malformed: list              # [(location, reason)]
    file_categories: dict        # category id -> name, as the file's categories[] has it


_CACHE: dict[str, AnnotationIndex] = {}
_CACHE_LOCK = threading.Lock()


def load_index(url: str) -> AnnotationIndex:
    """The index of the annotation file at any fsspec URL, read once per process (streamed: see
    `index_annotations`). Records that cannot be indexed (no integer id / image_id, a
    duplicate image id) are set aside as malformed items."""
    with _CACHE_LOCK:
        if url not in _CACHE:
            # the test branch reads val2014 while the train branch reads train2014: keep both
            # (compact: no segmentations) rather than re-read them in turn, but no more
            if len(_CACHE) >= 2:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[url] = read_index(url)
        return _CACHE[url]


def read_index(url: str, chunk_bytes: int = READ_CHUNK_BYTES) -> AnnotationIndex:
    fs, path = fileio.filesystem(url)
    with fs.open(path, "rb") as stream:
        return index_annotations(stream, chunk_bytes)


ANNOTATION_FIELDS = ("id", "image_id", "category_id", "bbox", "iscrowd", "area")
NOT_COCO = "not a COCO instances file (no images/annotations lists)"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def index_annotations(stream, chunk_bytes: int = READ_CHUNK_BYTES) -> AnnotationIndex:
    """The AnnotationIndex of a COCO instances file read from a binary stream, in one pass that
    never holds the parsed file: every images[] / annotations[] element is reduced to what the
    index keeps as soon as it is decoded, so memory is the index plus about one chunk.

    It is the index the former reader built from pycocotools' COCO index of the whole parsed
    file (tests/test_coco_stream.py checks them against each other): the first record of each
    integer image id; per image its annotations in file order; the malformed records, those of
    images[] first, each in file order. Unlike pycocotools it takes annotations without a
    category_id and categories without an id (they name no category, so a sample of them is a
    dead letter) instead of failing the whole file on them; and it refuses a file whose top
    level repeats the images or annotations key (json.loads kept the last one)."""
    builder = _IndexBuilder()
    try:
        for key, value in iter_top_level(stream, ("images", "annotations"), chunk_bytes):
            builder.add_member(key, value)
    except NotAJsonObject:
        raise ValueError(NOT_COCO) from None
    return builder.index()


class _IndexBuilder:
    """Reduces the top-level members of an annotation file, in the order `iter_top_level`
    yields them, to an AnnotationIndex. Annotations may come before images in a file, so which
    image ids are orphans is only decided once the whole file has been read."""

    def __init__(self):
        self.images: dict | None = None       # image id -> record; None: no images list (yet)
        self.image_problems: list = []
        self.objects: dict | None = None      # image id -> ImageObjects, by first annotation
        # image id -> its annotation ids, for the ids that could be orphans' (see below)
        self.annotation_ids: dict = {}
        self.annotation_problems: list = []
        self.categories = None
        self.seen: set = set()

    def add_member(self, key: str, value) -> None:
        if key in ("images", "annotations"):
            # json.loads would keep the last value, but by then the first has been reduced
            # (and which annotation ids to keep decided on it): refuse such a file instead
            if key in self.seen:
                raise ValueError(f"the top-level key {key!r} appears twice")
            self.seen.add(key)
        if key == "images":
            self._read_images(value)
        elif key == "annotations":
            self._read_annotations(value)
        elif key == "categories":
            self.categories = value   # the last one wins, as with json.loads
        # anything else (info, licenses, ...) is not needed

    def _read_images(self, value) -> None:
        if not isinstance(value, StreamedArray):
            return  # not a list: not an instances file
        images = {}
        for position, image in enumerate(value):
            if not isinstance(image, dict) or not _is_int(image.get("id")):
                self.image_problems.append((f"images[{position}]",
                                            "malformed image record: no integer id"))
            elif image["id"] in images:
                self.image_problems.append((f"images[{position}]",
                                            f"duplicate image id {image['id']}"))
            else:
                images[image["id"]] = _with_shared_keys(image)
        self.images = images

    def _read_annotations(self, value) -> None:
        if not isinstance(value, StreamedArray):
            return
        objects = {}
        for position, ann in enumerate(value):
            if not isinstance(ann, dict) or not _is_int(ann.get("id")) \
                    or not _is_int(ann.get("image_id")):
                self.annotation_problems.append(
                    (f"annotations[{position}]",
                     "malformed annotation record: no integer id / image_id"))
                continue
            # only what a sample needs: segmentations are most of the file
            compact = {k: ann[k] for k in ANNOTATION_FIELDS if k in ann}
            image_id = compact["image_id"]
            if image_id not in objects:
                objects[image_id] = ImageObjects()
            _count_annotation(objects[image_id], compact)
            # Only an orphan's annotation ids are kept in the index. In a file that lists its
            # images first (as COCO's do) an image is known by now, and the id is not needed:
            # keeping all ~600k of train2014's would cost ~30 MB while reading.
            if self.images is None or image_id not in self.images:
                self.annotation_ids.setdefault(image_id, []).append(compact["id"])
        self.objects = objects

    def index(self) -> AnnotationIndex:
        if self.images is None or self.objects is None:
            raise ValueError(NOT_COCO)
        objects, orphans = {}, {}
        for image_id, found in self.objects.items():
            if image_id in self.images:
                objects[image_id] = found
            else:
                orphans[image_id] = sorted(self.annotation_ids[image_id])
        return AnnotationIndex(self.images, objects, orphans,
                               self.image_problems + self.annotation_problems,
                               _file_categories(self.categories))


def _with_shared_keys(record: dict) -> dict:
    """The record with its keys interned. json.loads shares one string per distinct key among
    all the records of a file; records decoded one at a time each get their own copies, which
    for train2014's 82k image records would be ~40 MB of "file_name", "coco_url", ..."""
    return {sys.intern(key): value for key, value in record.items()}


def _count_annotation(found: ImageObjects, ann: dict) -> None:
    """Count one more annotation of an image; `single` holds it only while it is the only one
    (and so, at the end, only when the image has exactly one)."""
    found.count += 1
    found.single = ann if found.count == 1 else None
    if not ann.get("iscrowd", 0):
        found.count_non_crowd += 1
        found.single_non_crowd = ann if found.count_non_crowd == 1 else None


def _file_categories(categories) -> dict:
    """category id -> name of the categories[] records that have an integer id (anything
    else, like a categories value that is not a list, names no category)."""
    if not isinstance(categories, list):
        return {}
    return {c["id"]: c.get("name") for c in categories
            if isinstance(c, dict) and _is_int(c.get("id"))}


def shard_of(number: int, shards: int) -> int:
    return number % shards


# ---- the scenario --------------------------------------------------------------------------

class Coco(Scenario):
    name = "coco"
    config_name = "coco2014"
    has_train_split = True
    # How upstream's environment plays COCO (runtime.behaviours; texts from upstream).
    environment = Play(
        actions={"LEFT": ("to the left",), "RIGHT": ("to the right",), "UP": ("up",),
                 "DOWN": ("down",), "ZOOM": ("farther",)},
        behaviour="coco_crop", last_turn="any",
        hint="Hint: moving the camera could help with classification.",  # zoom: its own hint
        short_name="COCO",
        open_ended_suggestions=("Move the camera", "Move farther from the object"),
        prediction_threshold=2, keyword_matching="substring",
        suggestions=(*MOVE_OPTIONS.values(), ZOOM_OPTION))

    def __init__(self, seed: int, source_root: str):
        super().__init__(seed, source_root)
        self.category_table = {int(c["id"]): dict(c) for c in self.manifest["category_table"]}

    @property
    def split(self) -> str:
        split = str(self.params.get("split", "val"))
        if split not in SPLITS:
            raise SourceError(f"coco: parameters.split must be one of {SPLITS}, got {split!r}")
        return split

    @property
    def image_folder(self) -> str:
        return f"{self.split}2014"

    @property
    def annotation_url(self) -> str:
        return self.path("annotations", f"instances_{self.split}2014.json")

    def list_units(self) -> list[str]:
        if not fileio.exists(self.annotation_url):
            raise SourceError(f"coco: no annotation file {self.annotation_url} (expected "
                              f"annotations/instances_{self.split}2014.json from "
                              f"annotations_trainval2014.zip)")
        self.require_inside_root(self.annotation_url, "the annotation file of every sample")
        self.require_inside_root(self.path(self.image_folder), "the folder of every image")
        if not fileio.is_dir(self.path(self.image_folder)):
            raise SourceError(f"coco: no image folder {self.path(self.image_folder)} (expected "
                              f"{self.image_folder}/ from {self.image_folder}.zip)")
        n = int(self.params["read_shards"])
        return [f"{self.annotation_url}#shard={i}/{n}" for i in range(n)]

    # -- raw reading --------------------------------------------------------------------------

    def read_unit(self, unit: str):
        url, _, spec = unit.partition("#shard=")
        shard, shards = (int(v) for v in spec.split("/"))
        index = load_index(self.inside_root(url))  # checked again: the unit's dead letter
        where = self.relative(url)
        for position, (location, reason) in enumerate(index.malformed):
            if shard_of(position, shards) == shard:
                yield self.count("raw_items")
                yield self.dead_letter(f"{url}#{location}", reason)
        for image_id in sorted(index.images):
            if shard_of(image_id, shards) == shard:
                yield from self._read_image(index, image_id, url, where)
        for image_id, ann_ids in sorted(index.orphans.items()):
            if shard_of(image_id, shards) == shard:
                yield self.count("raw_items")
                yield self.dead_letter(f"{url}#image_id={image_id}",
                                       f"annotation(s) {ann_ids} name image id {image_id}, "
                                       f"which images[] does not list")

    def _read_image(self, index: AnnotationIndex, image_id: int, url: str, where: str):
        yield self.count("raw_items")
        location = f"{url}#image_id={image_id}"
        try:
            image = self._image_record(index.images[image_id])
            count, annotation = self._objects(index, image_id)
            if count == 0:
                yield self.count("excluded:no_annotation")
                return
            if count > 1:
                yield self.count("excluded:multiple_objects")
                return
            if annotation.get("iscrowd", 0):
                yield self.count("excluded:crowd_annotation")
                return
            item = self._candidate_item(index, image, annotation, where)
        except BadItem as err:
            yield self.dead_letter(location, err.reason)
            return
        except (TypeError, ValueError, KeyError, ArithmeticError) as err:  # one odd record
            yield self.dead_letter(location, f"malformed record: {type(err).__name__}: {err}")
            return
        yield self.candidate(f"coco2014/{self.image_folder}/{image_id:012d}", item)

    def _objects(self, index: AnnotationIndex, image_id: int) -> tuple[int, dict | None]:
        """(how many annotations count as objects, the lone one when there is one): crowd
        regions count too, unless configured not to."""
        found = index.objects.get(image_id, ImageObjects())
        if self.params.get("count_crowd_annotations", True):
            return found.count, found.single
        return found.count_non_crowd, found.single_non_crowd

    def _image_record(self, image: dict) -> dict:
        width, height, name = image.get("width"), image.get("height"), image.get("file_name")
        if not _is_int(width) or not _is_int(height) or width < 1 or height < 1:
            raise BadItem(f"malformed image record: width/height {width!r}x{height!r}")
        if not isinstance(name, str) or not name or posixpath.basename(name) != name \
                or name in (".", ".."):
            raise BadItem(f"malformed image record: file_name {name!r}")
        expected = f"COCO_{self.image_folder}_{image['id']:012d}.jpg"
        if self.params.get("check_file_names", True) and name != expected:
            raise BadItem(f"inconsistent image record: file_name {name!r} for image id "
                          f"{image['id']} (expected {expected!r})")
        return {"id": image["id"], "width": width, "height": height, "file_name": name}

    def _candidate_item(self, index: AnnotationIndex, image: dict, ann: dict, where: str) -> dict:
        category_id = ann.get("category_id")
        if not _is_int(category_id) or category_id not in self.category_table \
                or category_id not in index.file_categories:
            raise BadItem(f"unknown category id {category_id!r} (annotation {ann['id']})")
        named = index.file_categories[category_id]
        if named != self.category_table[category_id]["name"]:
            # a different category table (another dataset's file?): names would be wrong
            raise BadItem(f"inconsistent category: id {category_id} is {named!r} in the file, "
                          f"{self.category_table[category_id]['name']!r} in the manifest")
        box = self._object_box(ann, image["width"], image["height"])
        side = int(self.params["min_image_side"])
        if min(image["width"], image["height"]) < side:
            raise BadItem(f"image too small for a crop: {image['width']}x{image['height']} "
                          f"(min side {side})")
        return {"image_id": image["id"], "file_name": image["file_name"],
                "width": image["width"], "height": image["height"], "box": box,
                "category_id": category_id, "annotation_id": ann["id"], "annotations": where}

    def _object_box(self, ann: dict, width: int, height: int) -> list[float]:
        """The object box as (left, top, right, bottom) floats, checked against the image."""
        bbox = ann.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in bbox):
            raise BadItem(f"malformed bbox {bbox!r} (annotation {ann['id']})")
        x, y, w, h = (float(v) for v in bbox)
        smallest = float(self.params["min_box_side_px"])
        if w < smallest or h < smallest:
            raise BadItem(f"degenerate box {bbox} (a side below {smallest} px; annotation "
                          f"{ann['id']})")
        tol = float(self.params["bbox_tolerance_px"])
        if x < -tol or y < -tol or x + w > width + tol or y + h > height + tol:
            raise BadItem(f"box outside the image: {bbox} in {width}x{height} "
                          f"(annotation {ann['id']})")
        # within tolerance: clip, so every later check sees a box inside the image
        return [max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h)]

    # -- building a sample --------------------------------------------------------------------

    def build_sample(self, key: str, item: dict) -> dict:
        relative_image = f"{self.image_folder}/{item['file_name']}"
        url = self.path(self.image_folder, item["file_name"])
        _, width, height = self.validate_file_frame(url)
        if (width, height) != (item["width"], item["height"]):
            raise BadItem(f"inconsistent image size: {width}x{height} on disk, "
                          f"{item['width']}x{item['height']} in the annotations", relative_image)
        plan = self.crop_plan(key, item)
        category = self.category_table[item["category_id"]]["name"]
        row = self.new_row(key)
        row.update(
            image_template=f"coco2014/{relative_image}",
            first_image=0, reference_image=0, frame_ids=[0],
            num_images=step_cap(plan.direction, plan.granularity),
            prompt=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, proactive_options(plan.direction)),
            categories=self.pick_categories(key, category, self.distractor_pool(item)),
            answer=format_category(category),
            direction=plan.direction, granularity=plan.granularity,
            horizontal_step=float(plan.horizontal_step), vertical_step=float(plan.vertical_step),
            crop={k: float(v) for k, v in plan.crop.items()},
        )
        row["source"]["files"] = [f"{item['annotations']}#annotation_id={item['annotation_id']}",
                                  relative_image]
        row["frame_refs"] = [{"kind": "file", "url": url}]
        return row

    def crop_plan(self, key: str, item: dict) -> CropPlan:
        """The seeded crop of one sample; BadItem when no direction can be realised."""
        g = self.rng(key, "granularity").randint(int(self.params["granularity_min"]),
                                                 int(self.params["granularity_max"]))
        plan = plan_crop(self.rng(key, "direction"), self.rng(key, "crop"), g, item["width"],
                         item["height"], tuple(item["box"]), self.params["direction_weights"],
                         CropRules.from_params(self.params))
        if plan is None:
            raise BadItem(f"image too small for a crop: no low-IoU start view fits around the "
                          f"object {item['box']} in {item['width']}x{item['height']}",
                          f"{self.image_folder}/{item['file_name']}")
        return plan

    def distractor_pool(self, item: dict) -> list[str]:
        """The answer plus its hard negatives (pick_categories shuffles them by the seed)."""
        answer_id = item["category_id"]
        negatives = hard_negatives(answer_id, self.category_table,
                                   self.params.get("supercategory_affinity", {}),
                                   int(self.params["hard_negatives"]))
        return [self.category_table[answer_id]["name"]] + negatives

    def frame_path(self, row: dict, frame_id: int) -> str:
        """The template is a literal path (no slot): upstream opens it verbatim."""
        return row["image_template"]

    # -- the train split (GRPO) ---------------------------------------------------------------

    def for_split(self, split: str) -> "Coco":
        """The same scenario reading another COCO split (train2014 for the train split)."""
        other = copy.copy(self)
        other.params = dict(self.params, split=split)
        return other

    def list_train_units(self) -> list[str]:
        train = self.for_split("train")
        if not fileio.exists(train.annotation_url):
            LOG.warning("coco: no %s, so the train split has no COCO examples",
                        train.annotation_url)
            return []
        return train.list_units()

    def read_train_unit(self, unit: str):
        """Single-object train2014 images, at most `train_examples / read_shards` per unit,
        picked by hash rank (the train split's size is set in the manifest)."""
        train = self.for_split("train")
        quota = math.ceil(int(self.params["train_examples"]) / int(self.params["read_shards"]))
        candidates = []
        for value in train.read_unit(unit):
            if value["kind"] == "candidate":
                candidates.append(value)
            else:
                yield value
        candidates.sort(key=lambda v: hash_rank(self.seed, self.name, "train", v["key"]))
        if len(candidates) > quota:
            yield self.count("excluded:not_sampled", len(candidates) - quota)
        yield from sorted(candidates[:quota], key=lambda v: v["key"])

    def build_train_example(self, key: str, item: dict) -> dict:
        """The first (tight, low-IoU) view of a crop plan, where the valid replies are the camera
        moves, or the whole image, where the valid reply is the class; mixed by
        `train_ambiguous_fraction`."""
        train = self.for_split("train")
        url = train.path(train.image_folder, item["file_name"])
        train.validate_file_frame(url)
        plan = train.crop_plan(key, item)
        ambiguous = self.rng(key, "train_mix").random() < float(
            self.params["train_ambiguous_fraction"])
        moves = proactive_options(plan.direction)
        if ambiguous:
            view = {"crop": plan.crop, "direction": plan.direction}
            # turn 0 of the environment: the crop extended by one step
            box = [float(v) for v in coco_crop_box(view, plan.horizontal_step,
                                                   plan.vertical_step)]
            image_ref = {"kind": "view", "url": url, "box": box}
        else:
            image_ref = {"kind": "file", "url": url}
        category = self.category_table[item["category_id"]]["name"]
        return self.train_example(
            key, question=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, moves),
            categories=self.pick_categories(key, category, self.distractor_pool(item)),
            answer=format_category(category), proactive_actions=moves if ambiguous else [],
            ambiguous=ambiguous, frame_id=0, image_ref=image_ref,
            files=[f"{train.image_folder}/{item['file_name']}"])

    def load_frame(self, ref: dict) -> bytes:
        """Source files pass through; a train view is the crop the environment would show,
        re-encoded as JPEG (the only COCO frames whose pixels change)."""
        if ref["kind"] != "view":
            return super().load_frame(ref)
        with Image.open(io.BytesIO(self.read_source(ref["url"]))) as image:
            # crop, then convert: the same pixels (conversion is per pixel), on the view only
            view = image.crop(tuple(round(v) for v in ref["box"])).convert("RGB")
            out = io.BytesIO()
            view.save(out, format="JPEG", quality=int(self.params.get("train_jpeg_quality", 90)))
        return out.getvalue()

    # -- miniature ----------------------------------------------------------------------------

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        """`annotations/instances_{val,train}2014.json` (full schema, the real 80 categories from
        the manifest) and small synthetic JPEGs under `val2014/` and `train2014/`, named as COCO
        names them: single-object images of several sizes and object positions (left, right,
        corner, centre, full height, nearly the whole image, a grayscale one), plus images a
        rule excludes (no annotation, several objects, a lone crowd region, an object with a
        crowd region beside it)."""
        table = cls.read_manifest()["category_table"]
        for split, images in MINIATURE_IMAGES.items():
            write_miniature_split(root, split, images, table, seed)


# ---- the miniature source ------------------------------------------------------------------

# image id -> (width, height, mode, [(category id, [x, y, w, h], iscrowd), ...])
MINIATURE_IMAGES = {
    "val": {
        42: (160, 120, "RGB", [(18, [20.5, 30.25, 40.0, 35.5], 0)]),         # dog, left
        73: (120, 160, "L", [(1, [10.0, 20.0, 50.0, 90.0], 1),               # crowd + dog:
                             (18, [70.0, 60.0, 30.0, 40.0], 0)]),            #   two objects
        74: (160, 120, "RGB", [(47, [10.0, 10.0, 20.0, 20.0], 0),            # three objects
                               (48, [60.0, 50.0, 10.0, 30.0], 0),
                               (49, [100.0, 70.0, 12.0, 30.0], 0)]),
        133: (160, 120, "RGB", []),                                          # no annotation
        139: (160, 120, "RGB", [(17, [30.0, 20.0, 100.0, 85.0], 0)]),        # cat, large
        164: (160, 120, "RGB", [(3, [110.0, 80.0, 30.0, 25.0], 0)]),         # car, lower right
        192: (160, 120, "RGB", [(51, [60.0, 40.0, 45.0, 40.0], 0)]),         # bowl, centre
        196: (128, 128, "RGB", [(81, [5.0, 4.0, 30.0, 28.0], 0)]),           # sink, top left
        208: (160, 120, "RGB", [(1, [70.0, 0.0, 25.0, 120.0], 0)]),          # person, full height
        241: (160, 120, "RGB", [(1, [20.0, 20.0, 60.0, 60.0], 1)]),          # a lone crowd
        257: (200, 150, "RGB", [(6, [10.0, 8.0, 180.0, 134.0], 0)]),         # bus, almost all
        283: (160, 120, "RGB", [(70, [120.0, 30.0, 40.0, 50.0], 0)]),        # toilet, right edge
        294: (96, 96, "L", [(47, [40.0, 40.0, 20.0, 20.0], 0)]),             # cup, grayscale
    },
    "train": {
        9: (160, 120, "RGB", [(59, [40.0, 30.0, 70.0, 50.0], 0)]),           # pizza
        25: (120, 160, "RGB", [(25, [30.0, 10.0, 40.0, 110.0], 0)]),         # giraffe
        30: (160, 120, "RGB", [(64, [10.0, 10.0, 30.0, 30.0], 0),            # two objects
                               (86, [90.0, 50.0, 20.0, 40.0], 0)]),
    },
}


def octagon(x: float, y: float, w: float, h: float) -> list[float]:
    """A polygon touching all four sides of the box (so its bounding box is the bbox)."""
    cx, cy = w / 4, h / 4
    points = [(x + cx, y), (x + w - cx, y), (x + w, y + cy), (x + w, y + h - cy),
              (x + w - cx, y + h), (x + cx, y + h), (x, y + h - cy), (x, y + cy)]
    return [round(v, 2) for p in points for v in p]


def polygon_area(flat: list[float]) -> float:
    xs, ys = flat[0::2], flat[1::2]
    n = len(xs)
    return abs(sum(xs[i] * ys[(i + 1) % n] - xs[(i + 1) % n] * ys[i] for i in range(n))) / 2


def rectangle_rle(x: int, y: int, w: int, h: int, width: int, height: int) -> dict:
    """Uncompressed RLE (column-major runs starting with zeros, as COCO crowd regions store)."""
    counts, run, value = [], 0, 0
    for col in range(width):
        for row in range(height):
            bit = 1 if x <= col < x + w and y <= row < y + h else 0
            if bit == value:
                run += 1
            else:
                counts.append(run)
                run, value = 1, bit
    counts.append(run)
    return {"counts": counts, "size": [height, width]}


def miniature_image(width: int, height: int, mode: str, objects, rng: random.Random) -> bytes:
    """A smooth background with each object drawn as its annotated polygon, JPEG."""
    from PIL import Image, ImageDraw

    base = tuple(rng.randint(60, 200) for _ in range(3))
    image = Image.new("RGB", (width, height), base)
    draw = ImageDraw.Draw(image)
    for band in range(0, height, 8):
        shade = tuple(max(0, min(255, c + (band * 40) // height - 20)) for c in base)
        draw.rectangle((0, band, width, band + 8), fill=shade)
    for _, (x, y, w, h), _crowd in objects:
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        flat = octagon(x, y, w, h)
        draw.polygon(list(zip(flat[0::2], flat[1::2])), fill=colour)
    if mode == "L":
        image = image.convert("L")
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=70)
    return out.getvalue()


def write_miniature_split(root: str, split: str, images: dict, table: list, seed: int) -> None:
    folder = f"{split}2014"
    records, annotations, next_ann = [], [], 1 if split == "val" else 100001
    for image_id in sorted(images):
        width, height, mode, objects = images[image_id]
        name = f"COCO_{folder}_{image_id:012d}.jpg"
        records.append({
            "license": 1 + image_id % 2, "file_name": name,
            "coco_url": f"http://images.cocodataset.org/{folder}/{name}",
            "height": height, "width": width,
            "date_captured": f"2013-11-{1 + image_id % 28:02d} 16:28:13",
            "flickr_url": f"http://farm{1 + image_id % 9}.staticflickr.com/{image_id}.jpg",
            "id": image_id})
        for category_id, bbox, crowd in objects:
            x, y, w, h = bbox
            if crowd:
                segmentation = rectangle_rle(int(x), int(y), int(w), int(h), width, height)
                area = float(int(w) * int(h))
            else:
                segmentation = [octagon(x, y, w, h)]
                area = polygon_area(segmentation[0])
            annotations.append({"segmentation": segmentation, "area": area, "iscrowd": crowd,
                                "image_id": image_id, "bbox": list(bbox),
                                "category_id": category_id, "id": next_ann})
            next_ann += 1
        rng = random.Random(f"{seed}/coco/{split}/{image_id}")
        fileio.write_bytes_atomic(fileio.join(root, folder, name),
                                  miniature_image(width, height, mode, objects, rng))
    dataset = {
        "info": {"description": "COCO 2014 Dataset (miniature synthetic copy)",
                 "url": "http://cocodataset.org", "version": "1.0", "year": 2014,
                 "contributor": "COCO Consortium", "date_created": "2017/09/01"},
        "licenses": [{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/", "id": 1,
                      "name": "Attribution-NonCommercial-ShareAlike License"},
                     {"url": "http://creativecommons.org/licenses/by/2.0/", "id": 2,
                      "name": "Attribution License"}],
        "images": records, "annotations": annotations,
        "categories": [{"supercategory": c["supercategory"], "id": c["id"], "name": c["name"]}
                       for c in table],
    }
    fileio.write_bytes_atomic(fileio.join(root, "annotations", f"instances_{folder}.json"),
                              json.dumps(dataset, separators=(",", ":")).encode("utf-8"))
