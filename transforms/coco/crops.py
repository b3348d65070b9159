"""COCO's crop plans: where the first view of a sample lies beside (or inside) its object, how
far each move extends it, and the checks every plan passes (the generation code is unreleased;
every rule here is our choice, described in the folder's docstring)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from proactivebench_builder.transforms.coco.play import ZOOM, direction_moves

CARDINAL = ("left", "right", "up", "down")
DIAGONAL = ("up_left", "up_right", "down_left", "down_right")
FAMILIES = {"cardinal": CARDINAL, "diagonal": DIAGONAL, "zoom": (ZOOM,)}

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
