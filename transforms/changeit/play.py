"""How ChangeIt plays: REWIND and WAIT move -/+ `step_size` seconds, not circular; "Rewind the
video." is hidden while a rewind would leave the video, else the first "Wait for the" option is
hidden while waiting would (upstream's elif: only one is hidden); the cap is `max_steps`
(upstream's `ChangeItEnvironment`)."""
from __future__ import annotations

from proactivebench_builder.transforms.api import Behaviour, Play, case, record, unreachable

CONFIG = "ChangeIt"
OBJECT, ACTION = "object", "action"
REWIND_OPTION = "Rewind the video."
WAIT_OPTIONS = {OBJECT: "Wait for the object to appear.", ACTION: "Wait for the action to happen."}
WAIT_MARKER = "Wait for the"


def unpadded_path(row: dict, frame_id: int) -> str:
    """Upstream fills ChangeIt's `{image}` with the plain frame id (no zero padding)."""
    return row["image_template"].format(image=str(frame_id))


def _without_first_wait(options: list[str]) -> list[str]:
    """Remove the first option holding "Wait for the"; upstream's loop removes the last option
    when none does, and so do we."""
    options = list(options)
    index = next((i for i, o in enumerate(options) if WAIT_MARKER in o), len(options) - 1)
    if options:
        options.remove(options[index])
    return options


class VideoSteps(Behaviour):
    """-/+ step_size, not circular, with one of the moves hidden at either end."""
    needs_moves = True

    def _trim(self, env, options):
        step = env.record["step_size"]
        if env.random_suggestions:
            return list(options)
        if env.image_id - step < 0:
            index = options.index(REWIND_OPTION) if REWIND_OPTION in options else -1
            return [o for i, o in enumerate(options) if i != index]
        if env.image_id + step >= env.record["num_images"]:
            return _without_first_wait(options)
        return list(options)

    def displayed_options(self, env):
        return self._trim(env, env.options)

    def accepted_options(self, env):
        return self._trim(env, env.correct_options)

    def next_image(self, env, action):
        return env.image_id + self.play.moves[action] * env.record["step_size"]

    def open_ended_answers(self, env):
        options, categories = self.accepted(env)
        # Upstream appends the rewind option unconditionally ("first frame never has rewind").
        options = options + [REWIND_OPTION]
        return ",".join(a.replace(".", "") for a in options + categories) + "."

    def states(self, record) -> list[int]:
        """Every frame an episode visits: first_image -/+ k * step_size inside the video, for
        k below the cap (a move that would leave the video is hidden)."""
        n, first, step, cap = (record["num_images"], record["first_image"],
                               record["step_size"], record["max_steps"])
        return [first + k * step for k in range(-(cap - 1), cap) if 0 <= first + k * step < n]

    def reachable_frame_ids(self, record):
        return sorted(set(self.states(record)) | {record["first_image"], record["reference_image"]})

    def upstream_frame_ids(self, record):
        return self.reachable_frame_ids(record)

    def record_problems(self, row):
        """+-step_size, not circular, at most max_steps turns."""
        step, cap, n = row.get("step_size"), row.get("max_steps"), row.get("num_images")
        if not step or step < 1 or not cap or cap < 1 or not n:
            return [f"step_size={step}, max_steps={cap}, num_images={n}: need positive values"]
        first = row.get("first_image") or 0
        ids = row.get("frame_ids") or []
        problems = []
        if any(i < 0 or i >= n for i in ids):
            problems.append(f"frame ids outside the video's {n} frames: {ids}")
        if (row.get("reference_image", 0) - first) % step:
            problems.append(f"reference_image {row.get('reference_image')} is not a whole number "
                            f"of steps of {step} from first_image {first}")
        return problems + unreachable(row, self.states(row))


RECORD = record(CONFIG, "c", first_image=0, num_images=10, reference_image=9, step_size=3,
                max_steps=5, options=["I cannot answer this question.",
                                      "Wait for the object to appear.", "Rewind the video."])

# Rewind hidden at the start, wait hidden at the end, cap max_steps.
CONFORMANCE_CASES = (
    case("cit-hidden-rewind-letter", RECORD, ["C"]),
    case("cit-hidden-rewind-text", RECORD, ["Rewind the video."]),
    case("cit-wait-to-end-and-back", RECORD, ["B", "B", "B", "B", "B"]),
    case("cit-wait-rewind-letter", RECORD, ["B", "C", "B", "E"], hint=True),
    case("cit-end-category-boundary", RECORD, ["B", "B", "B", "C"]),
    case("cit-reference", RECORD, ["Dog."], mode="reference"),
)

PLAY = Play(
    actions={"REWIND": ("rewind the video.",), "FORWARD": ("wait for the",)},
    behaviour=VideoSteps, moves={"REWIND": -1, "FORWARD": 1},  # times step_size
    last_turn="any", step_cap="max_steps",
    pre_prompt="This is a frame extracted from a video. Answer the following question.",
    hint="Hint: If you cannot answer the question, waiting for it to appear or rewinding the "
         "video could help with classification.",
    short_name="CIT", prediction_threshold=2, keyword_matching="substring",
    suggestions=(REWIND_OPTION, *WAIT_OPTIONS.values()), frame_path=unpadded_path,
    upstream_order=6, conformance_cases=CONFORMANCE_CASES,
    # what upstream's environment reads of every record, besides the common fields
    record_fields=("step_size", "max_steps"),
)
