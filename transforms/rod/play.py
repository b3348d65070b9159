"""How ROD plays: LEFT and RIGHT move the occluder one photo either way, modulo the sweep's
length; on the first turn only the moves are accepted (naming the category there is wrong)
(upstream's `RODEnvironment`)."""
from __future__ import annotations

from proactivebench_builder.transforms.api import MalformedRecord, Play, Steps, case, record

CONFIG = "Realistic-Occlusion-Dataset"
# Upstream's `_fix_corruptions`: the one photo its release lacks (the raw dataset holds 1,231 of
# 88 x 14 = 1,232). Any frame path holding this text is shown with "s6" replaced by "s5" when the
# move that led there was LEFT, else by "s7", so no episode ever shows it.
PATCHED_FRAME = "natural_bluebl_greenr-banana-s6"
PATCH_WHY = ("upstream's ROD environment shows s5 in its place when LEFT led there, else s7 "
             "(its _fix_corruptions), so the photo is never read: the release probably lacks "
             "it (the raw dataset holds 1,231 of the 1,232), and a copy it holds is not used")

# Option templates: the occluder's description comes from the manifest's `occluders` map.
MOVE_LEFT = "Move the {occluder} to the left."
MOVE_RIGHT = "Move the {occluder} to the right."


def unpadded_path(row: dict, frame_id: int) -> str:
    """ROD fills `{image}` with the plain integer (no zero padding)."""
    return row["image_template"].format(image=str(frame_id))


class OccluderSweep(Steps):
    """LEFT/RIGHT by one photo, modulo the sweep, showing upstream's neighbour in place of the
    photo its release lacks."""

    def patched_frames(self, record):
        return {f: PATCH_WHY for f in range(record["num_images"])
                if PATCHED_FRAME in unpadded_path(record, f)}

    def shown_frame(self, record, image_id, action):
        path = unpadded_path(record, image_id)
        if PATCHED_FRAME not in path:
            return image_id
        patched = path.replace("s6", "s5" if action == "LEFT" else "s7")
        for frame_id in range(record["num_images"]):
            if unpadded_path(record, frame_id) == patched:
                return frame_id
        raise MalformedRecord(f"upstream shows {patched!r} in place of {path!r}, and that is "
                              "no frame of the record")


RECORD = record(CONFIG, "r", first_image=7, num_images=14, reference_image=0, options=[
    "Move the red blocks to the left.", "I cannot tell.", "Move the red blocks to the right."])

# The sequence upstream patches (PATCHED_FRAME): frame 6 entered by LEFT shows s5, by RIGHT or
# at the start s7.
PATCHED_RECORD = dict(RECORD, key=f"{CONFIG}/patched",
                      image_template="x/natural_bluebl_greenr-banana-s{image}.jpg")

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
    case("rod-patched-left", PATCHED_RECORD, ["A", "A", "C", "C", "E"]),
    case("rod-patched-around", PATCHED_RECORD, ["C"] * 14),
    case("rod-patched-start", dict(PATCHED_RECORD, first_image=6), ["A", "C", "C", "E"]),
    case("rod-patched-reference", dict(PATCHED_RECORD, reference_image=6), ["E"],
         mode="reference"),
)

PLAY = Play(
    actions={"LEFT": ("to the left",), "RIGHT": ("to the right",)},
    behaviour=OccluderSweep, moves={"LEFT": -1, "RIGHT": 1}, wrap=True,
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
