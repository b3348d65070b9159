"""How MVP-N plays: the next view is `valid_images[num_turns]` (the informative view comes last);
on the last turn only the category counts (upstream's `MVPNEnvironment`)."""
from __future__ import annotations

from proactivebench_builder.transforms.api import (Behaviour, Play, case, foreign, record,
                                                   unreachable)

CONFIG = "MVP-N"

# Each holds exactly one ROTATE keyword (rotate / view / angle / orientation / different) and no
# other action keyword; mind substrings ("up" in "cup", "angle" in "rectangle", "rotation" holds
# no keyword at all).
ROTATE_REQUESTS = (
    "Rotate the object.",
    "Could you rotate the object?",
    "Please rotate the product so I can see it better.",
    "Show me another view of the object.",
    "Give me a view of the object from another perspective.",
    "Change the camera angle of the object.",
    "Move the camera to a new angle.",
    "Change the orientation of the object.",
    "Show me the object from a different side.",
    "Let me see the product from a different position.",
    "Turn the object to a new orientation.",
)


def chain(row: dict) -> list[int]:
    """The view shown on each turn: first_image, then valid_images[t] on turn t (upstream's
    `_prepare_next_state`), for the num_images turns an episode has."""
    return [row["first_image"]] + list(row["valid_images"][1:row["num_images"]])


def informative_views(row: dict) -> set[int]:
    """The views upstream reads from the informative location: the one of the last turn, and
    the reference (reference mode)."""
    return {chain(row)[-1], row["reference_image"]}


def view_path(row: dict, frame_id: int) -> str:
    """`{image}` is the view id zero-padded to 4 digits, `{informative}` is 1 only for the view
    shown on the last turn and in reference mode (upstream's slot rules)."""
    informative = int(frame_id in informative_views(row))
    return row["image_template"].format(informative=informative, image=f"{frame_id:04d}")


class ValidImagesChain(Behaviour):
    """The next frame is valid_images[num_turns]."""

    def valid_images(self, env):
        return list(env.record["valid_images"])

    def next_image(self, env, action):
        return env.record["valid_images"][env.num_turns]

    def distance_to_reference(self, env):
        # The informative view is reached only on the last turn: distance = turns left.
        return env.record["num_images"] - 1 - env.num_turns

    def reachable_frame_ids(self, record):
        return sorted(set(chain(record)) | {record["reference_image"]})

    def upstream_frame_ids(self, record):
        """The chain's views in play order, then the reference when no turn shows it."""
        return list(dict.fromkeys(chain(record) + [record["reference_image"]]))

    def record_problems(self, row):
        """A view for every turn (upstream indexes valid_images by the turn), every view an
        episode shows present, and none shown from both locations (a frame id holds one
        image)."""
        valid, n = row.get("valid_images"), row.get("num_images")
        if not valid or not n or n < 1:
            return [f"valid_images={valid}, num_images={n}: need a view for every turn"]
        if len(valid) < n:
            return [f"num_images={n} turns but {len(valid)} valid_images: the last turns "
                    "have no view"]
        problems = unreachable(row, self.reachable_frame_ids(row))
        both = sorted(set(chain(row)[:-1]) & informative_views(row))
        if both:
            problems.append(f"views {both} are shown both as uninformative and as informative: "
                            "a frame id holds one image")
        return problems


RECORD = record(CONFIG, "m", first_image=4, num_images=3, reference_image=2,
                valid_images=[4, 9, 2], image_template="x/{informative}/{image}",
                options=["Rotate the object.", "I cannot tell."])
RANDOM_RECORD = dict(RECORD, options=[foreign("DOWN"), "I cannot tell."])

# Rotate valid before the last turn only.
CONFORMANCE_CASES = (
    case("mvpn-rotate-to-last", RECORD, ["A", "A", "A"]),
    case("mvpn-rotate-then-letter", RECORD, ["A", "A", "D"]),
    case("mvpn-first-category", RECORD, ["Dog."]),
    case("mvpn-boundary-letter", RECORD, ["C"]),
    case("mvpn-abstain", RECORD, ["B. I cannot tell."]),
    case("mvpn-random", RANDOM_RECORD, ["A", "A", "D"], random_suggestions=True),
)

PLAY = Play(
    actions={"ROTATE": ("rotate", "view", "angle", "orientation", "different")},
    behaviour=ValidImagesChain, last_turn="category",
    hint="Hint: rotating the object could provide a more informative view.",
    short_name="MVP-N", open_ended_suggestions=("Rotate the object", "Move the camera"),
    open_ended_category=False, prediction_threshold=2, keyword_matching="substring",
    suggestions=ROTATE_REQUESTS, frame_path=view_path, upstream_order=3,
    probe_suggestions=("Rotate the object.", "Change the camera angle of the object."),
    conformance_cases=CONFORMANCE_CASES,
    # what upstream's environment reads of every record, besides the common fields
    record_fields=("valid_images",),
)
