"""How QuickDraw plays: each accepted request for more details adds a stroke (+1 frame); on the
last turn only the category counts; the cap is the number of strokes (upstream's
`QuickDrawEnvironment`)."""
from __future__ import annotations

from proactivebench_builder.transforms.api import Play, Steps, case, foreign, record

CONFIG = "QuickDraw"

# Each holds exactly one DETAILS keyword (details / quickdraw / drawing / sketch) and no other.
DETAIL_REQUESTS = (
    "Add more details.",
    "Could you improve the quickdraw?",
    "Make this drawing more complete.",
    "Please add more strokes to the sketch.",
    "Continue the drawing.",
    "Keep sketching, please.",
    "Show me more details.",
    "Add a few more strokes to the quickdraw.",
    "Could you finish the drawing?",
    "Extend the sketch with more strokes.",
    "I need more details to answer.",
    "Draw more of the quickdraw.",
    "Complete the sketch.",
)

RECORD = record(CONFIG, "q", first_image=0, num_images=4, reference_image=3, options=[
    "I cannot answer this question.", "Make this drawing more complete."])
RANDOM_RECORD = dict(RECORD, options=["I cannot answer this question.", foreign("REWIND")])

# Details until the last turn.
CONFORMANCE_CASES = (
    case("qd-details-to-last", RECORD, ["B", "B", "B", "B"]),
    case("qd-details-then-text", RECORD, ["B", "Make this drawing more complete.", "Dog."]),
    case("qd-abstain-text", RECORD, ["I cannot answer this question."]),
    case("qd-boundary-letter", RECORD, ["C", "D"]),
    case("qd-random", RANDOM_RECORD, ["B", "B", "d"], random_suggestions=True),
)

PLAY = Play(
    actions={"DETAILS": ("details", "quickdraw", "drawing", "sketch")},
    behaviour=Steps, moves={"DETAILS": 1}, last_turn="category",
    hint="Hint: Adding more details to the quickdraw could help with classification.",
    short_name="QD", open_ended_suggestions=("Add more details to the drawing",),
    prediction_threshold=1, keyword_matching="substring", suggestions=DETAIL_REQUESTS,
    upstream_order=5, probe_suggestions=("Make this drawing more complete.", "Add more details."),
    conformance_cases=CONFORMANCE_CASES,
)
