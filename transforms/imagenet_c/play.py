"""How ImageNet-C plays: only the record's `quality_answer` is accepted as a request, and each
accepted request shows the image one severity milder; on the last turn only the category counts
(upstream's `ImageNetCEnvironment`)."""
from __future__ import annotations

from proactivebench_builder.transforms.api import (MalformedRecord, Play, Steps, cap_problem, case,
                                                   foreign, record)

CONFIG = "ImageNet-C"
SEVERITIES = (5, 4, 3, 2, 1)  # play order: most severe first, mildest is the reference
ACTIONS = ("BRIGHTNESS", "CONTRAST", "SATURATE", "BLUR", "NOISE", "JPEG_COMPRESSION", "PIXELATE",
           "ARTIFACTS")


def level_path(row: dict, frame_id: int) -> str:
    """The `{level}` slot holds the severity."""
    return row["image_template"].format(level=frame_id)


class QualityLadder(Steps):
    """Only `quality_answer` is accepted (each move one severity milder)."""
    LEVELS = (1, 2, 3, 4, 5)

    def valid_images(self, env):
        return list(self.LEVELS)

    def base_correct_options(self, env):
        if env.record.get("quality_answer") in env.options:
            return [env.record["quality_answer"]]
        if not env.random_suggestions:
            raise MalformedRecord(f"quality_answer {env.record.get('quality_answer')!r} "
                                  "is not one of the options")
        return super().base_correct_options(env)

    def open_ended_answers(self, env):
        options, categories = self.accepted(env)
        return ", ".join(a.replace(".", "") for a in options + categories) + "."

    def upstream_frame_ids(self, record):
        """Each turn one level milder from first_image, down to level 1, for the num_images
        turns an episode has; then the reference when no turn shows it."""
        first = record["first_image"]
        levels = [first - t for t in range(record["num_images"]) if first - t >= 1]
        return list(dict.fromkeys(levels + [record["reference_image"]]))

    def reachable_frame_ids(self, record):
        return sorted(self.upstream_frame_ids(record))

    def record_problems(self, row):
        """The 5 severity levels, each suggestion one level milder."""
        problems = cap_problem(row, len(self.LEVELS), "the number of levels")
        if set(row.get("frame_ids") or []) != set(self.LEVELS):
            problems.append(f"frame_ids {row.get('frame_ids')} are not the levels 1..5")
        if row.get("quality_answer") not in (row.get("options") or []):
            problems.append(f"quality_answer {row.get('quality_answer')!r} not in options")
        return problems


RECORD = record(CONFIG, "i", first_image=5, num_images=5, reference_image=1,
                image_template="x/{level}/a.JPEG", quality_answer="Denoise the image.",
                options=["Denoise the image.", "I do not know what is this object.",
                         "Increase image resolution.", "Reduce brightness.", "Deblur the image."])
RANDOM_RECORD = dict(RECORD, options=[
    foreign("REWIND"), "I do not know what is this object.", foreign("ROTATE"), foreign("UP"),
    foreign("DETAILS")])

# Only quality_answer moves; last turn category only.
CONFORMANCE_CASES = (
    case("inc-quality-to-cap", RECORD, ["A"] * 5),
    case("inc-invalid-distractor", RECORD, ["C"]),
    case("inc-quality-then-letter", RECORD, ["A", "A", "G"]),
    case("inc-no-period-fulltext", RECORD, ["denoise the image"]),
    case("inc-fulltext", RECORD, ["Denoise the image.", "Dog."], hint=True),
    case("inc-boundary-letter", RECORD, ["E", "F"]),
    case("inc-reference", RECORD, ["Dog."], mode="reference"),
    case("inc-random", RANDOM_RECORD, ["C", "D", "A", "G"], random_suggestions=True),
)

PLAY = Play(
    actions={"BRIGHTNESS": ("brightness",), "CONTRAST": ("contrast",),
             "SATURATE": ("saturation",), "BLUR": ("deblur",), "NOISE": ("denoise",),
             "JPEG_COMPRESSION": ("compression",), "PIXELATE": ("resolution",),
             "ARTIFACTS": ("artifacts",)},
    behaviour=QualityLadder,
    moves=dict.fromkeys(ACTIONS, -1),   # each accepted request: one severity milder
    last_turn="category",
    hint="Hint: enhancing the image quality could help with classification.",
    short_name="IN-C", aliases=("inc",), prediction_threshold=1, keyword_matching="substring",
    suggestions=("Increase the brightness.", "Increase the contrast.",
                 "Increase the saturation.", "Deblur the image.", "Denoise the image.",
                 "Remove the JPEG compression.", "Increase image resolution.",
                 "Remove the artifacts."),
    frame_path=level_path, upstream_order=4,
    probe_suggestions=("Increase the brightness.", "Increase the contrast.",
                       "Increase the saturation.", "Deblur the image.", "Denoise the image.",
                       "Remove the JPEG compression.", "Increase image resolution."),
    conformance_cases=CONFORMANCE_CASES,
    # what upstream's environment reads of every record, besides the common fields
    record_fields=("quality_answer",),
)
