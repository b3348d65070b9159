"""How COCO plays: one frame, the full image; every view is a crop of it that grows with each
move, as upstream's `COCO2014Environment` computes it (proactivebench 0.1.1 `environment.py`;
docs/sources.md, 'COCO views'). The option texts are upstream's: its environment removes an
exhausted direction's option by its exact text."""
from __future__ import annotations

from proactivebench_builder.transforms.api import Behaviour, Play, case, is_abstain, record

CONFIG = "coco2014"

MOVE_OPTIONS = {
    "left": "Move the camera to the left.",
    "right": "Move the camera to the right.",
    "up": "Move the camera up.",
    "down": "Move the camera down.",
}
ZOOM_OPTION = "Move farther from the object."
ZOOM_HINT = "Hint: zooming out could help with classification."
ZOOM = "zoom"
DIRECTIONS = ("left", "right", "up", "down", "up_left", "up_right", "down_left", "down_right",
              ZOOM)


def direction_moves(direction: str) -> tuple[str, ...]:
    """The move keywords of a direction: ("up", "left") for "up_left", ("left",) for "left"."""
    return tuple(direction.split("_")) if direction != ZOOM else ()


def proactive_options(direction: str) -> list[str]:
    """One option per moving axis (2 for a diagonal), or the zoom-out option."""
    if direction == ZOOM:
        return [ZOOM_OPTION]
    return [MOVE_OPTIONS[m] for m in direction_moves(direction)]


def step_cap(direction: str, granularity: int) -> int:
    """Upstream's `max_steps` for a record (and so our `num_images`): g for a cardinal move,
    2g for a diagonal, g + 1 for zoom."""
    if direction == ZOOM:
        return granularity + 1
    return 2 * granularity if "_" in direction else granularity


def crop_box(record: dict, h_step: float, v_step: float) -> tuple:
    """The PIL crop box (left, upper, right, lower) of a COCO view.

    For moves, `crop.width`/`crop.height` act as right/bottom coordinates and one side extends
    by the current step; for "zoom" they are sizes (top/left are added back) and every side
    grows. The first view already includes one step."""
    crop, direction = record["crop"], record["direction"]
    zoom = ZOOM in direction
    top = crop["top"] - v_step if ("up" in direction or zoom) else crop["top"]
    left = crop["left"] - h_step if ("left" in direction or zoom) else crop["left"]
    bottom = crop["height"] + v_step if ("down" in direction or zoom) else crop["height"]
    right = crop["width"] + h_step if ("right" in direction or zoom) else crop["width"]
    if direction == ZOOM:
        bottom += crop["top"]
        right += crop["left"]
    return (left, top, right, bottom)


def template_path(row: dict, frame_id: int) -> str:
    """Upstream fills no slot: the template is the image's path, opened verbatim."""
    return row["image_template"]


def _remove_first_each(options: list[str], texts: set[str]) -> list[str]:
    """list.remove of each text (its first occurrence), as upstream removes exhausted moves."""
    options = list(options)
    for text in sorted(texts):
        if text in options:
            options.remove(text)
    return options


def _step_limit(row: dict) -> int:
    """Steps per axis at the end of an episode: granularity, or granularity + 1 for zoom."""
    g = row.get("granularity") or 1
    return g + 1 if row.get("direction") == ZOOM else g


def box_after(row: dict, steps: int) -> tuple:
    """The PIL box after `steps` steps on every moved axis (1 = the first view)."""
    return crop_box(row, (row.get("horizontal_step") or 0) * steps,
                    (row.get("vertical_step") or 0) * steps)


class CocoCrop(Behaviour):
    """One frame; the view is a crop that grows with each move on an axis; exhausted
    directions' options are removed; caps granularity / 2*granularity / granularity+1."""

    def action_space(self, record=None):
        direction = (record or {}).get("direction", "")
        if ZOOM in direction:
            return ("ZOOM",)
        return tuple(n.upper() for n in ("up", "down", "left", "right") if n in direction)

    def setup(self, env):
        record = env.record
        direction, g = record["direction"], record["granularity"]
        env.h_step, env.v_step = record["horizontal_step"], record["vertical_step"]
        env.h_turns = env.v_turns = 0
        env.max_h = env.max_v = 0
        if ZOOM in direction:
            env.coco_max_steps = g + 1
            env.max_h, env.max_v = env.h_step * (g + 1), env.v_step * (g + 1)
            return
        env.coco_max_steps = g if "_" not in direction else 2 * g
        for name in ("up", "down", "left", "right"):
            if name in direction:
                if name in ("up", "down"):
                    env.max_v = env.v_step * g
                else:
                    env.max_h = env.h_step * g

    def max_steps(self, env):
        return env.coco_max_steps

    def hint(self, env):
        return ZOOM_HINT if ZOOM in env.record["direction"] else self.play.hint

    def _trim(self, env, options):
        options = list(options)
        if env.random_suggestions:
            return options
        if env.record["direction"] == ZOOM:
            if env.h_step == env.max_h:
                options = [o for o in options if o != ZOOM_OPTION]
            return options
        removed = set()
        if env.h_step >= env.max_h:
            removed |= {MOVE_OPTIONS["left"], MOVE_OPTIONS["right"]}
        if env.v_step >= env.max_v:
            removed |= {MOVE_OPTIONS["up"], MOVE_OPTIONS["down"]}
        return _remove_first_each(options, removed)

    def displayed_options(self, env):
        return self._trim(env, env.options)

    def accepted_options(self, env):
        return self._trim(env, env.correct_options)

    def next_image(self, env, action):
        if action in ("LEFT", "RIGHT", "ZOOM"):
            env.h_turns += 1
            env.h_step = env.h_step / env.h_turns * (env.h_turns + 1)
        if action in ("UP", "DOWN", "ZOOM"):
            env.v_turns += 1
            env.v_step = env.v_step / env.v_turns * (env.v_turns + 1)
        return env.image_id

    def view_box(self, env):
        if env.mode == "reference":
            return None
        return crop_box(env.record, env.h_step, env.v_step)

    def transform(self, env, image):
        box = self.view_box(env)
        return image if box is None else image.crop(box)

    def distance_to_reference(self, env):
        # The full view is reached by exhausting the moves: distance = steps still to grow.
        h_left = (env.max_h - env.h_step) / env.record["horizontal_step"] if env.max_h else 0
        v_left = (env.max_v - env.v_step) / env.record["vertical_step"] if env.max_v else 0
        return max(h_left, 0) + max(v_left, 0)

    def reachable_frame_ids(self, record):
        return sorted({record["first_image"], record["reference_image"]})

    def upstream_frame_ids(self, record):
        return [int(record["first_image"])]

    def record_problems(self, row):
        """One frame, the full image; the direction, steps, crop and options agree, and the
        first view is a non-empty box."""
        ids = row.get("frame_ids") or []
        problems = []
        if len(ids) != 1 or row.get("first_image") != row.get("reference_image"):
            problems.append(f"expected one frame (the full image), got frame_ids {ids}")
        direction = row.get("direction")
        if direction not in DIRECTIONS:
            problems.append(f"direction {direction!r} not one of {sorted(DIRECTIONS)}")
            return problems
        if not row.get("granularity") or row["granularity"] < 1:
            problems.append(f"granularity={row.get('granularity')}, need >= 1")
        problems += _step_problems(row)
        crop = row.get("crop")
        if not crop or any(crop.get(k) is None for k in ("top", "left", "height", "width")):
            problems.append(f"crop {crop!r} lacks top/left/height/width")
        if problems:
            return problems
        left, top, right, bottom = crop_box(row, row["horizontal_step"], row["vertical_step"])
        if right <= left or bottom <= top:
            problems.append(f"first view box {(left, top, right, bottom)} is empty")
        return problems

    def sheet_views(self, row):
        """The first view, the last view, and the full image with both boxes drawn."""
        first, last = box_after(row, 1), box_after(row, _step_limit(row))
        return [
            {"box": first, "caption": "first view (crop + 1 step)", "marks": ["FIRST"]},
            {"box": last, "caption": f"last view ({_step_limit(row)} steps)", "marks": ["LAST"]},
            {"box": None, "caption": "full image: first/last boxes", "marks": ["REF"],
             "outlines": [(last, "LAST"), (first, "FIRST")]},
        ]


def _moved_axes(direction: str) -> set[str]:
    """The direction's parts ("up_left" -> {"up", "left"}; zoom moves every side)."""
    return {ZOOM} if direction == ZOOM else set(direction.split("_"))


def _step_problems(row: dict) -> list[str]:
    """A moved axis needs a positive step (the other may be 0); the proactive options are
    exactly the direction's move texts, which the environment removes by their exact text."""
    h, v = row.get("horizontal_step"), row.get("vertical_step")
    if h is None or v is None or h < 0 or v < 0:
        return [f"horizontal_step={h}, vertical_step={v}: need values >= 0"]
    parts = _moved_axes(row["direction"])
    problems = []
    if (parts & {"left", "right", ZOOM} and not h) or (parts & {"up", "down", ZOOM} and not v):
        problems.append(f"direction {row['direction']!r} moves an axis whose step is 0 "
                        f"(horizontal {h}, vertical {v})")
    expected = set(proactive_options(row["direction"]))
    proactive = {o for o in row.get("options") or [] if not is_abstain(o)}
    if proactive != expected:
        problems.append(f"proactive options {sorted(proactive)} do not match direction "
                        f"{row['direction']!r} ({sorted(expected)})")
    return problems


# ---- conformance with upstream's environment -----------------------------------------------------

def _coco(name, direction, crop, h=10.0, v=8.0, g=3, options=None):
    proactive = [o for part in direction.split("_") for o in proactive_options(part)]
    return record(CONFIG, name, image_template="coco/a.jpg", first_image=0, num_images=1,
                  reference_image=0, direction=direction, granularity=g, horizontal_step=h,
                  vertical_step=v, crop=crop,
                  options=options or proactive[:1] + ["I cannot tell."] + proactive[1:])


MOVE_CROP = {"top": 100.0, "left": 200.0, "height": 150.0, "width": 260.0}
ZOOM_CROP = {"top": 100.0, "left": 200.0, "height": 50.0, "width": 60.0}
LEFT = _coco("left", "left", MOVE_CROP)
UP_LEFT = _coco("upleft", "up_left", MOVE_CROP)
DOWN_RIGHT = _coco("downright", "down_right", MOVE_CROP, h=7.5, v=5.0, g=2)
ZOOM_RECORD = _coco("zoom", ZOOM, ZOOM_CROP)

# Crops per turn, exhausted directions removed, caps.
CONFORMANCE_CASES = (
    case("coco-left-exhaust", LEFT, ["A", "A", "A"]),
    case("coco-left-then-category", LEFT, ["A", "A", "D"]),
    case("coco-upleft", UP_LEFT, ["C", "C", "A", "A", "A", "A"]),
    case("coco-upleft-text", UP_LEFT,
         ["Move the camera up.", "Move the camera up.", "Move the camera up.", "Dog."]),
    case("coco-downright", DOWN_RIGHT, ["A", "C", "A", "Dog."]),
    case("coco-zoom", ZOOM_RECORD, ["A", "A", "A", "A"], hint=True),
    case("coco-zoom-then-letter", ZOOM_RECORD, ["A", "A", "A", "D"]),
    case("coco-reference", ZOOM_RECORD, ["B"], mode="reference"),
    case("coco-junk", LEFT, [""]),
)

PLAY = Play(
    actions={"LEFT": ("to the left",), "RIGHT": ("to the right",), "UP": ("up",),
             "DOWN": ("down",), "ZOOM": ("farther",)},
    behaviour=CocoCrop, last_turn="any",
    hint="Hint: moving the camera could help with classification.",  # zoom: ZOOM_HINT
    short_name="COCO",
    open_ended_suggestions=("Move the camera", "Move farther from the object"),
    prediction_threshold=2, keyword_matching="substring",
    suggestions=(*MOVE_OPTIONS.values(), ZOOM_OPTION),
    frame_path=template_path,
    upstream_order=7,
    probe_suggestions=(MOVE_OPTIONS["up"], MOVE_OPTIONS["down"], ZOOM_OPTION),
    conformance_cases=CONFORMANCE_CASES,
    # what upstream's environment reads of every record, besides the common fields
    record_fields=("direction", "granularity", "horizontal_step", "vertical_step", "crop"),
)
