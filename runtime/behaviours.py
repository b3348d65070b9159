"""How an environment moves, by behaviour: the code behind a scenario's `environment`
declaration (`transforms.environment.Play`). `Environment` owns the loop; a behaviour answers
the hooks (which options are shown and accepted now, where a request leads, the cap, the hint).

- "frame_ladder" (the default for a new scenario): each accepted request moves one frame toward
  `reference_image`; the frames a row must hold are those between `first_image` and it.
- "steps": each action moves by a declared offset (`moves`), times the record's `step_size`
  when `step_field` says so, modulo `num_images` when `wrap` (ROD, VSOD, QuickDraw).
- The upstream-specific behaviours keep upstream's exact rules (`runtime.environments` docstring):
  "valid_images_chain" (MVP-N), "quality_ladder" (ImageNet-C), "video_steps" (ChangeIt),
  "coco_crop" (COCO).
The first/last-turn rules and the step cap come from the declaration for every behaviour.
"""
from __future__ import annotations

import functools

from PIL import Image

from proactivebench_builder.core import vocabulary
from proactivebench_builder.core.play import Play

REWIND_OPTION = "Rewind the video."
WAIT_MARKER = "Wait for the"
COCO_MOVE_OPTIONS = {
    "LEFT": "Move the camera to the left.", "RIGHT": "Move the camera to the right.",
    "UP": "Move the camera up.", "DOWN": "Move the camera down.",
}
COCO_ZOOM_OPTION = "Move farther from the object."
COCO_ZOOM_HINT = "Hint: zooming out could help with classification."


class MalformedRecord(ValueError):
    """A record the upstream environment would reject (it asserts)."""


def categories_text(categories: list[str]) -> str:
    return ", ".join(c.replace(".", "") for c in categories)


class Behaviour:
    """The hooks, for a scenario `config` declared by `play`."""

    def __init__(self, config: str, play: Play):
        self.config = config
        self.play = play

    # ---- state --------------------------------------------------------------------------------

    def setup(self, env) -> None:
        """Scenario state beyond image_id / num_turns."""

    def max_steps(self, env) -> int:
        return env.record[self.play.step_cap]

    def valid_images(self, env) -> list[int]:
        return list(range(env.record["num_images"]))

    def action_space(self, record: dict | None = None) -> tuple[str, ...]:
        return vocabulary.scenario_actions(self.play)

    def next_image(self, env, action: str) -> int:
        raise NotImplementedError

    def transform(self, env, image: Image.Image) -> Image.Image:
        return image

    # ---- what is shown and accepted ----------------------------------------------------------

    def hint(self, env) -> str:
        return self.play.hint

    def displayed_options(self, env) -> list[str]:
        return list(env.options)

    def base_correct_options(self, env) -> list[str]:
        """Options accepted as proactive moves before state-dependent removal (upstream's
        index_correct_options): every non-abstain option."""
        return [o for o in env.options if not vocabulary.is_abstain(o)]

    def accepted(self, env) -> tuple[list[str], list[str]]:
        """(accepted proactive options, accepted categories) in the current state, by the
        declared first- and last-turn rules (the last turn wins when both apply)."""
        rule = "any"
        if env.last_action is None and env.num_turns == 0:
            rule = self.play.first_turn
        if env.num_turns + 1 >= env.record["num_images"] and self.play.last_turn != "any":
            rule = self.play.last_turn
        options = self.accepted_options(env)
        if rule == "requests":
            return options, []
        if rule == "category":
            return [], [env.answer]
        return options, [env.answer]

    def accepted_options(self, env) -> list[str]:
        return list(env.correct_options)

    def open_ended_answers(self, env) -> str:
        answers = list(self.play.open_ended_suggestions)
        if self.play.open_ended_category:
            answers.append(categories_text([env.answer]))
        return ", ".join(answers) + "."

    def distance_to_reference(self, env) -> float:
        """How far the state is from the reference view; the oracle greedily reduces it."""
        return abs(env.image_id - env.record["reference_image"])

    # ---- the frames a row must hold ------------------------------------------------------------

    def reachable_frame_ids(self, record: dict) -> list[int]:
        """Every template slot value an episode (any mode) can show, sorted."""
        ids = set(range(record["num_images"]))
        return sorted(ids | {record["first_image"], record["reference_image"]})


class FrameLadder(Behaviour):
    """Each accepted request moves one frame toward the reference (and stays there)."""

    def next_image(self, env, action):
        target = env.record["reference_image"]
        return env.image_id + (target > env.image_id) - (target < env.image_id)

    def valid_images(self, env):
        return self.reachable_frame_ids(env.record)

    def reachable_frame_ids(self, record):
        first, ref = record["first_image"], record["reference_image"]
        return list(range(min(first, ref), max(first, ref) + 1))


class Steps(Behaviour):
    """Each action moves by its declared offset (modulo num_images when `wrap`)."""

    def next_image(self, env, action):
        next_id = env.image_id + self.play.moves[action]
        return next_id % env.record["num_images"] if self.play.wrap else next_id

    def distance_to_reference(self, env):
        d = abs(env.image_id - env.record["reference_image"])
        return min(d, env.record["num_images"] - d) if self.play.wrap else d


class ValidImagesChain(Behaviour):
    """MVP-N: the next frame is valid_images[num_turns]."""

    def valid_images(self, env):
        return list(env.record["valid_images"])

    def next_image(self, env, action):
        return env.record["valid_images"][env.num_turns]

    def distance_to_reference(self, env):
        # The informative view is reached only on the last turn: distance = turns left.
        return env.record["num_images"] - 1 - env.num_turns

    def reachable_frame_ids(self, record):
        ids = set(record["valid_images"])
        return sorted(ids | {record["first_image"], record["reference_image"]})


class QualityLadder(Steps):
    """ImageNet-C: only `quality_answer` is accepted (each move one severity milder)."""
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

    def reachable_frame_ids(self, record):
        return sorted(set(self.LEVELS) | {record["first_image"], record["reference_image"]})


def _without_first_wait(options: list[str]) -> list[str]:
    """Remove the first option holding "Wait for the"; upstream's loop removes the last option
    when none does, and so do we."""
    options = list(options)
    index = next((i for i, o in enumerate(options) if WAIT_MARKER in o), len(options) - 1)
    if options:
        options.remove(options[index])
    return options


class VideoSteps(Behaviour):
    """ChangeIt: -/+ step_size, not circular; "Rewind the video." hidden while image_id -
    step_size < 0, else the first "Wait for the" option hidden while image_id + step_size >=
    num_images (upstream's elif: only one is hidden)."""

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

    def reachable_frame_ids(self, record):
        n, first = record["num_images"], record["first_image"]
        step = record["step_size"] or 1
        ids = {i for i in range(n) if (i - first) % step == 0}
        return sorted(ids | {first, record["reference_image"]})


def _remove_first_each(options: list[str], texts: set[str]) -> list[str]:
    """list.remove of each text (its first occurrence), as upstream removes exhausted moves."""
    options = list(options)
    for text in sorted(texts):
        if text in options:
            options.remove(text)
    return options


def coco_crop_box(record: dict, h_step: float, v_step: float) -> tuple:
    """The PIL crop box (left, upper, right, lower) of a COCO view (docs/sources.md, COCO views).

    For moves, `crop.width`/`crop.height` act as right/bottom coordinates and one side extends
    by the current step; for "zoom" they are sizes (top/left are added back) and every side
    grows. The first view already includes one step."""
    crop, direction = record["crop"], record["direction"]
    zoom = "zoom" in direction
    top = crop["top"] - v_step if ("up" in direction or zoom) else crop["top"]
    left = crop["left"] - h_step if ("left" in direction or zoom) else crop["left"]
    bottom = crop["height"] + v_step if ("down" in direction or zoom) else crop["height"]
    right = crop["width"] + h_step if ("right" in direction or zoom) else crop["width"]
    if direction == "zoom":
        bottom += crop["top"]
        right += crop["left"]
    return (left, top, right, bottom)


class CocoCrop(Behaviour):
    """COCO: one frame; the view is a crop that grows with each move on an axis; exhausted
    directions' options are removed; caps granularity / 2*granularity / granularity+1."""

    def action_space(self, record=None):
        direction = (record or {}).get("direction", "")
        if "zoom" in direction:
            return ("ZOOM",)
        return tuple(n.upper() for n in ("up", "down", "left", "right") if n in direction)

    def setup(self, env):
        record = env.record
        direction, g = record["direction"], record["granularity"]
        env.h_step, env.v_step = record["horizontal_step"], record["vertical_step"]
        env.h_turns = env.v_turns = 0
        env.max_h = env.max_v = 0
        if "zoom" in direction:
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
        return COCO_ZOOM_HINT if "zoom" in env.record["direction"] else self.play.hint

    def _trim(self, env, options):
        options = list(options)
        if env.random_suggestions:
            return options
        if env.record["direction"] == "zoom":
            if env.h_step == env.max_h:
                options = [o for o in options if o != COCO_ZOOM_OPTION]
            return options
        removed = set()
        if env.h_step >= env.max_h:
            removed |= {COCO_MOVE_OPTIONS["LEFT"], COCO_MOVE_OPTIONS["RIGHT"]}
        if env.v_step >= env.max_v:
            removed |= {COCO_MOVE_OPTIONS["UP"], COCO_MOVE_OPTIONS["DOWN"]}
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

    def transform(self, env, image):
        if env.mode == "reference":
            return image
        return image.crop(coco_crop_box(env.record, env.h_step, env.v_step))

    def distance_to_reference(self, env):
        # The full view is reached by exhausting the moves: distance = steps still to grow.
        h_left = (env.max_h - env.h_step) / env.record["horizontal_step"] if env.max_h else 0
        v_left = (env.max_v - env.v_step) / env.record["vertical_step"] if env.max_v else 0
        return max(h_left, 0) + max(v_left, 0)

    def reachable_frame_ids(self, record):
        return sorted({record["first_image"], record["reference_image"]})


BEHAVIOURS = {"frame_ladder": FrameLadder, "steps": Steps, "valid_images_chain": ValidImagesChain,
              "quality_ladder": QualityLadder, "video_steps": VideoSteps, "coco_crop": CocoCrop}


class UnknownConfig(ValueError):
    """No registered scenario declares this config."""


@functools.lru_cache(maxsize=None)
def for_config(config: str) -> Behaviour:
    """The behaviour of the registered scenario whose config_name is `config`."""
    from proactivebench_builder.transforms import load_scenarios, scenario_for_config

    cls = scenario_for_config(config)
    if cls is None:
        raise UnknownConfig(f"no registered scenario has config {config!r} (registered: "
                            f"{', '.join(c.config_name for c in load_scenarios().values())}); "
                            "make its module visible with PROACTIVEBENCH_SCENARIO_PATH=FOLDER or an "
                            "entry point (README: Adding a scenario)")
    play = cls.environment
    if play.behaviour not in BEHAVIOURS:
        raise UnknownConfig(f"scenario {cls.name!r}: unknown behaviour {play.behaviour!r} "
                            f"(one of {', '.join(BEHAVIOURS)})")
    return BEHAVIOURS[play.behaviour](config, play)
