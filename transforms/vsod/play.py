"""How VSOD plays: REWIND and WAIT move one frame back or forth, modulo the clip's length
(upstream's `VSODEnvironment`)."""
from __future__ import annotations

from proactivebench_builder.transforms.api import Play, Steps, case, record

CONFIG = "OcclusionDataSet-MM20"
REWIND = "Rewind the video."
WAIT = "Wait for the occlusion to disappear."

RECORD = record(CONFIG, "v", first_image=2, num_images=6, reference_image=0,
                strong_occlusions=True, options=[
                    "I cannot answer this question.", "Rewind the video.",
                    "Wait for the occlusion to disappear."])

# Circular, both moves always valid, pre-prompt.
CONFORMANCE_CASES = (
    case("vsod-rewind-wrap", RECORD, ["B", "B", "B", "C", "E"]),
    case("vsod-first-category-letter", RECORD, ["D"]),
    case("vsod-fulltext", RECORD,
         ["Wait for the occlusion to disappear.", "rewind the video.", "Dog."], hint=True),
    case("vsod-cap", RECORD, ["C"] * 6),
    case("vsod-reference", RECORD, ["B"], mode="reference", hint=True),
)

PLAY = Play(
    actions={"REWIND": ("rewind the video.",), "FORWARD": ("wait for the",)},
    behaviour=Steps, moves={"REWIND": -1, "FORWARD": 1}, wrap=True, last_turn="any",
    pre_prompt="This is a frame extracted from a video. Answer the following question.",
    hint="Hint: If there is an occlusion, waiting for it to disappear or rewinding the video "
         "might reveal what's behind it.",
    short_name="VSOD", open_ended_suggestions=(
        "Wait for the occlusion to disappear", "Rewind the video", "Move the camera"),
    prediction_threshold=3, keyword_matching="substring", suggestions=(REWIND, WAIT),
    upstream_order=2, probe_suggestions=(REWIND, WAIT), conformance_cases=CONFORMANCE_CASES,
    # what upstream's environment reads of every record, besides the common fields
    record_fields=("strong_occlusions",),
)
