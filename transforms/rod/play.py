"""How ROD plays: LEFT and RIGHT move the occluder one photo either way, modulo the sweep's
length; on the first turn only the moves are accepted (naming the category there is wrong)
(upstream's `RODEnvironment`)."""
from __future__ import annotations

from proactivebench_builder.core.conformance import case, record
from proactivebench_builder.core.play import Play, Steps

CONFIG = "Realistic-Occlusion-Dataset"

# Option templates: the occluder's description comes from the manifest's `occluders` map.
MOVE_LEFT = "Move the {occluder} to the left."
MOVE_RIGHT = "Move the {occluder} to the right."


def unpadded_path(row: dict, frame_id: int) -> str:
    """ROD fills `{image}` with the plain integer (no zero padding)."""
    return row["image_template"].format(image=str(frame_id))


RECORD = record(CONFIG, "r", first_image=7, num_images=14, reference_image=0, options=[
    "Move the red blocks to the left.", "I cannot tell.", "Move the red blocks to the right."])

# Category on the first frame is wrong; moves with letters (either case) and texts; letter E is
# the second category (shift 3); abstain; junk; step cap.
CONFORMANCE_CASES = (
    case("rod-first-category", RECORD, ["Dog."]),
    case("rod-first-category-letter", RECORD, ["E"]),
    case("rod-moves-then-letter", RECORD, ["A", "a", "C. Move the red blocks to the right.", "E"]),
    case("rod-move-then-wrong-boundary", RECORD, ["C", "D"]),
    case("rod-abstain", RECORD, ["B"]),
    case("rod-junk", RECORD, ["I think it is a banana"]),
    case("rod-out-of-range-letter", RECORD, ["H"]),
    case("rod-cap", RECORD, ["A"] * 14),
    case("rod-hint-fulltext", RECORD, ["move the red blocks to the LEFT.", "Dog."], hint=True),
    case("rod-reference-letter", RECORD, ["B"], mode="reference"),
    case("rod-reference-wrong", RECORD, ["A. Cat."], mode="reference"),
)

PLAY = Play(
    actions={"LEFT": ("to the left",), "RIGHT": ("to the right",)},
    behaviour=Steps, moves={"LEFT": -1, "RIGHT": 1}, wrap=True,
    first_turn="requests", last_turn="any",   # a category on the first frame is wrong
    hint="Hint: moving the occluding object might reveal what is behind it.",
    reference_prompt="What type of object is in the image?",
    short_name="ROD", open_ended_suggestions=("Move the blocks", "Move the camera"),
    open_ended_category=False, prediction_threshold=2, keyword_matching="substring",
    suggestions=("Move the occluding object to the left.",
                 "Move the occluding object to the right."),
    frame_path=unpadded_path, upstream_order=1,
    probe_suggestions=("Move the occluding object to the left.",
                       "Move the occluding object to the right."),
    conformance_cases=CONFORMANCE_CASES,
)
