"""The ProactiveBench environments as one small state machine; each scenario's rules come from
the declaration in its folder (`environment = Play(...)`, see `core.play`), played by the
`Behaviour` it names. Any registered scenario is playable; docs/environments.md describes the
rules of upstream's seven.

Semantics are upstream's (`proactivebench` 0.1.1 `environment.py`): the same answer on the same
record moves the environment the same way and scores the same.

One turn (`Environment.step`), as upstream's `evaluate_generated_answer`:
1. the accepted answers of the current state are computed (the scenario's behaviour);
2. the answer is matched against the displayed proactive/abstain block (letters from A) and
   against the 4 categories (letters shifted by that block's length), see `prompts.evaluate_answer`;
3. neither correct -> stop (wrong); correct category -> stop (right); correct option -> the
   option's action (by the scenario's keywords, `core.vocabulary`: upstream's substring rule for
   the seven upstream scenarios, whole words for others);
4. num_turns += 1; reaching the step cap stops; otherwise the next state is prepared.

Modes: "mcqa" (the loop above), "reference" (the reference frame, the 4 categories only, one
turn), "oeg" (one turn, no options; the answer is scored by a judge, see `runtime.open_ended`).
`hint` appends the scenario hint (the generic OEG hint in "oeg" mode), `history` keeps the
earlier turns in each observation, `random_suggestions` is the random-proactive-suggestion probe.

Choices where upstream is silent or crashes ([I]/[?] points, documented here):
- Random-suggestion probe: upstream's `random=True` keeps every option visible, counts every
  non-abstain option as correct and then performs a *random* action of the scenario; the records
  with replaced options were not released. We replace every non-abstain option of the record by
  a distinct option of the probe's fixed pool (`transforms.probe_pool`: the suggestions
  upstream's scenarios declare for it) whose action is not in this scenario's action space,
  picked with a Random seeded by (seed, key); the random action uses the same generator, so runs
  are reproducible (upstream uses the unseeded global `random`).
- Upstream asserts (crashes) when a correct option names no action of the scenario, or when a
  move leaves the frames (possible only if both ends bind at once); we raise `MalformedRecord`
  for the first and end the episode as wrong for the second.
- Frames come from the row: frame k of `frames` shows template slot value `frame_ids[k]`; the
  state's frame is the one shown, unless its scenario patches it (`Behaviour.shown_frame`).
"""
from __future__ import annotations

import copy
import io
import random
import re
from dataclasses import dataclass, field

from PIL import Image

from proactivebench_builder import transforms
from proactivebench_builder.core import prompts, vocabulary
from proactivebench_builder.core.play import MalformedRecord

MODES = ("mcqa", "reference", "oeg")
STOP = "STOP"


def config_of(record: dict, config: str | None = None) -> str:
    """The record's config: the explicit argument, else the prefix of `key` ("QuickDraw/...")."""
    if config:
        return transforms.resolve_config(config)
    key = record.get("key") or ""
    prefix = key.split("/", 1)[0]
    if not prefix:
        raise ValueError("record has no `key`; pass config= explicitly")
    return transforms.resolve_config(prefix)


def decode_frame(frame) -> Image.Image:
    """A row's frame as PIL: a datasets-decoded image, a {bytes, path} struct or raw bytes.
    Bytes that are not a whole image, or hold more pixels than PIL's decompression-bomb limit,
    are a MalformedRecord (decoded only then: the size is read from the header first)."""
    if isinstance(frame, Image.Image):  # decoded by `datasets` (a Hub row): still lazy
        _check_pixels(*frame.size)
        return frame
    data = frame.get("bytes") if isinstance(frame, dict) else frame
    if not data or not isinstance(data, (bytes, bytearray)):
        raise MalformedRecord("frame without bytes (frames must come from the row)")
    try:
        image = Image.open(io.BytesIO(data))
        _check_pixels(*image.size)
        image.load()
    except MalformedRecord:
        raise
    except Image.DecompressionBombError:
        raise MalformedRecord("frame of more pixels than PIL's decompression-bomb limit "
                              f"({Image.MAX_IMAGE_PIXELS:,})") from None
    except Exception as err:  # noqa: BLE001 (PIL raises many types for bad data)
        # PIL names the stream object ("<_io.BytesIO object at 0x7f...>"): not worth showing
        detail = re.sub(r" <[^>]* at 0x[0-9a-fA-F]+>", "", str(err))
        raise MalformedRecord(f"undecodable frame ({type(err).__name__}: {detail})") from None
    return image


def _check_pixels(width: int, height: int) -> None:
    if width * height > Image.MAX_IMAGE_PIXELS:
        raise MalformedRecord(f"frame of {width}x{height} pixels: more than PIL's "
                              f"decompression-bomb limit ({Image.MAX_IMAGE_PIXELS:,})")


@dataclass
class Turn:
    """One played turn, for trajectories and conversation history."""
    image_id: int
    prompt: str
    options: list[str]
    answer_text: str
    action_evaluation: str
    category_evaluation: str
    chosen: str
    action: str
    image: Image.Image | None = field(default=None, repr=False)


@dataclass
class Observation:
    image: Image.Image | None
    image_id: int
    prompt: str                  # the full text the model sees
    question: str                # pre-prompt + question (+ hint), without the option list
    options: list[str]           # displayed options (proactive/abstain block, then categories)
    done: bool
    correct: bool | None         # None while running, and in "oeg" mode (a judge scores it)
    num_turns: int
    max_steps: int
    history: list[Turn] = field(default_factory=list, repr=False)
    last_turn: Turn | None = None


# ---------------------------------------------------------------------------------------------


class Environment:
    """One sample's episode. `reset()` gives the first observation, `step(answer)` the next."""

    def __init__(self, record: dict, config: str, mode: str = "mcqa", hint: bool = False,
                 random_suggestions: bool = False, history: bool = False, seed: int = 0,
                 preset_options: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.record = record
        self.config = config
        self.rules = transforms.behaviour_for_config(config)
        self.mode = mode
        self.hint = hint
        self.random_suggestions = random_suggestions
        self.keep_history = history
        self.seed = seed
        # The record's options are already the probe's (upstream's random records): keep them.
        self.preset_options = preset_options
        self.key = str(record.get("key") or record.get("id"))
        self.answer = record["answer"]
        self.categories = list(record["categories"])
        if self.answer not in self.categories:
            raise MalformedRecord(f"answer {self.answer!r} is not among {self.categories}")
        self._frames = self._index_frames(record)
        self.reset()

    # ---- state ------------------------------------------------------------------------------

    def reset(self) -> Observation:
        self._rng = random.Random(f"{self.seed}|{self.config}|{self.key}|random-suggestions")
        self.options = self._stored_options()
        self.correct_options = self.rules.base_correct_options(self)
        self.image_id = self.record["first_image"]
        self.last_action = None
        self.num_turns = 0
        self.done = False
        self.correct = None if self.mode == "oeg" else False
        self.turns: list[Turn] = []
        self.rules.setup(self)
        # Reference mode keeps the scenario cap, as upstream (any answer ends it after one turn).
        self.max_steps = 1 if self.mode == "oeg" else self.rules.max_steps(self)
        self.valid_images = self.rules.valid_images(self)
        return self.observe()

    def _stored_options(self) -> list[str]:
        options = list(self.record["options"])
        if not self.random_suggestions or self.preset_options:
            return options
        own = set(self.rules.action_space(self.record))
        foreign = transforms.probe_pool()
        pool = [o for o in foreign if transforms.upstream_action_of(o) not in own]
        if len(pool) < len(options):  # a scenario with (nearly) every action: any suggestion
            pool = list(foreign)
        rng = random.Random(f"{self.seed}|{self.config}|{self.key}|foreign-options")
        picks = iter(rng.sample(pool, sum(not vocabulary.is_abstain(o) for o in options)))
        return [o if vocabulary.is_abstain(o) else next(picks) for o in options]

    def _index_frames(self, record: dict) -> dict:
        frames, ids = record.get("frames"), record.get("frame_ids")
        if frames is None or ids is None or len(frames) != len(ids):
            raise MalformedRecord("record needs `frames` and `frame_ids` of equal length")
        return dict(zip(ids, frames))

    def frame(self, image_id: int) -> Image.Image:
        if image_id not in self._frames:
            raise MalformedRecord(f"{self.key}: frame {image_id} is not in frame_ids")
        image = self._frames[image_id]
        if not isinstance(image, Image.Image):
            image = self._frames[image_id] = decode_frame(image)
        return image

    # ---- what the model sees ----------------------------------------------------------------

    def displayed_options(self) -> list[str]:
        """The proactive/abstain block as displayed now (empty in reference and oeg modes)."""
        if self.mode != "mcqa":
            return []
        return self.rules.displayed_options(self)

    def question(self) -> str:
        record = self.record
        text = record["prompt"]
        if self.mode == "reference":
            text = self.rules.play.reference_prompt or text
        hint = None
        if self.hint:
            hint = prompts.OEG_HINT if self.mode == "oeg" else self.rules.hint(self)
        # In OEG the generic hint is appended after the pre-prompted question (tests/oeg.py).
        return prompts.compose_question(text, self.rules.play.pre_prompt, hint)

    def shown_frame_id(self) -> int:
        """The frame shown now: the reference in reference mode, else the state's frame as the
        scenario shows it (ROD shows a neighbour in place of the photo upstream's release
        lacks, by the move that led there)."""
        if self.mode == "reference":
            return self.record["reference_image"]
        return self.rules.shown_frame(self.record, self.image_id, self.last_action)

    def current_image(self) -> Image.Image:
        image = self.frame(self.shown_frame_id()).convert("RGB")
        box = self.rules.view_box(self)
        if box is not None and (box[2] - box[0]) * (box[3] - box[1]) > Image.MAX_IMAGE_PIXELS:
            # a crop allocates its box, whatever the image's size
            raise MalformedRecord(f"{self.key}: view {tuple(round(v) for v in box)} is larger "
                                  f"than PIL's decompression-bomb limit")
        return self.rules.transform(self, image)

    def observe(self) -> Observation:
        options = [] if self.mode == "oeg" else self.displayed_options() + self.categories
        question = self.question()
        prompt = question if self.mode == "oeg" else prompts.multi_choice_prompt(question, options)
        image_id = self.record["reference_image"] if self.mode == "reference" else self.image_id
        return Observation(
            image=self.current_image(), image_id=image_id, prompt=prompt, question=question,
            options=options, done=self.done, correct=self.correct, num_turns=self.num_turns,
            max_steps=self.max_steps,
            history=list(self.turns) if self.keep_history else [],
            last_turn=self.turns[-1] if self.turns else None)

    def accepted_answers(self) -> tuple[list[str], list[str]]:
        """(proactive options, categories) that count as correct in the current state."""
        if self.mode == "reference":
            return [], [self.answer]
        return self.rules.accepted(self)

    def valid_proactive_options(self) -> list[str]:
        """The displayed options that count as correct proactive moves now."""
        if self.mode != "mcqa" or self.done:
            return []
        accepted = self.accepted_answers()[0]
        return [o for o in self.displayed_options() if o in accepted]

    def open_ended_answers(self) -> str:
        """Upstream's `get_open_ended_gen_answers` for the first state (comma-separated)."""
        return self.rules.open_ended_answers(self)

    # ---- one turn ---------------------------------------------------------------------------

    def step(self, answer_text: str) -> Observation:
        if self.done:
            raise RuntimeError("episode is over; call reset()")
        shown = self.observe() if self.keep_history else None
        if self.mode == "oeg":
            return self._record_open_ended(answer_text, shown)
        accepted_options, accepted_categories = self.accepted_answers()
        block = self.displayed_options()
        if self.mode == "reference":
            action_eval, chosen_action = "mismatch", ""
            category_eval, chosen_category = prompts.evaluate_answer(
                answer_text, accepted_categories, self.categories, shift=0)
        else:
            action_eval, chosen_action = prompts.evaluate_answer(
                answer_text, accepted_options, block, shift=0)
            category_eval, chosen_category = prompts.evaluate_answer(
                answer_text, accepted_categories, self.categories, shift=len(block))
        if category_eval == "correct":
            action, self.correct = STOP, True
        elif action_eval == "correct":
            action = self._action_of(chosen_action)
        else:
            action = STOP
        chosen = chosen_category if category_eval != "mismatch" else chosen_action
        self._log_turn(answer_text, action_eval, category_eval, chosen, action, shown)
        self.num_turns += 1
        if self.num_turns == self.max_steps:
            action = STOP
        if action != STOP:
            action = self._move(action)
        self.last_action = action
        self.done = action == STOP
        return self.observe()

    def _action_of(self, option: str) -> str:
        """The action an accepted option requests, as upstream's `_parse_action`: the first
        keyword (in upstream's order) of an action this scenario has; in the random probe a
        random keyword of the scenario's actions instead."""
        play = self.rules.play
        allowed = self.rules.action_space(self.record)
        keywords = [(k, a) for k, a in self.rules.keywords() if a in allowed]
        if self.random_suggestions:
            return self._rng.choice(keywords)[1]
        low = option.lower()
        found = [a for k, a in keywords if vocabulary.keyword_in(k, low, play.keyword_matching)]
        if not found or (len(found) > 1 and set(found) != {"ROTATE"}):
            raise MalformedRecord(f"{self.key}: option {option!r} maps to actions {found} "
                                  f"within {allowed}")
        return found[0]

    def _move(self, action: str) -> str:
        next_id = self.rules.next_image(self, action)
        if next_id not in self.valid_images:
            # Upstream stops here in the random probe (ChangeIt) and asserts otherwise.
            return STOP
        self.image_id = next_id
        return action

    def _log_turn(self, answer_text, action_eval, category_eval, chosen, action, shown):
        # image_id as upstream's image_id_history (first_image even in reference mode).
        self.turns.append(Turn(
            image_id=self.image_id,
            prompt=shown.prompt if shown else "", options=shown.options if shown else [],
            answer_text=answer_text, action_evaluation=action_eval,
            category_evaluation=category_eval, chosen=chosen, action=action,
            image=shown.image if shown else None))

    def _record_open_ended(self, answer_text: str, shown) -> Observation:
        self._log_turn(answer_text, "", "", "", STOP, shown)
        self.num_turns += 1
        self.done = True
        return self.observe()

    # ---- results ----------------------------------------------------------------------------

    def statistics(self) -> dict:
        """Upstream's `get_statistics` plus the key: enough to recompute acc and psr."""
        return {
            "key": self.record.get("key"), "id": self.record.get("id"), "config": self.config,
            "num_turns": self.num_turns,
            "generated_answers": [t.answer_text for t in self.turns],
            "action_evaluations": [t.action_evaluation for t in self.turns],
            "category_evaluations": [t.category_evaluation for t in self.turns],
            "correct_prediction": bool(self.correct),
            "image_id_history": [t.image_id for t in self.turns],
            "action_history": [t.action for t in self.turns],
            "max_steps": self.num_turns == self.max_steps,
        }

    def distance_to_reference(self) -> float:
        return self.rules.distance_to_reference(self)

    def clone(self) -> "Environment":
        """An independent copy sharing the (read-only) frames, to look one answer ahead."""
        twin = copy.copy(self)
        twin.turns = list(self.turns)
        twin._rng = copy.deepcopy(self._rng)
        return twin


def make_environment(record: dict, mode: str = "mcqa", hint: bool = False,
                     random_suggestions: bool = False, history: bool = False, seed: int = 0,
                     config: str | None = None) -> Environment:
    """The environment for one benchmark row (our Parquet row, the same with frames decoded by
    `datasets`, or an upstream JSONL record with frames attached by `runtime.loading`)."""
    if random_suggestions and mode != "mcqa":
        raise ValueError("the random-suggestion probe is an MCQA ablation")
    return Environment(record, config_of(record, config), mode=mode, hint=hint,
                       random_suggestions=random_suggestions, history=history, seed=seed)


def action_space(config: str, record: dict | None = None) -> tuple[str, ...]:
    return transforms.behaviour_for_config(config).action_space(record)


def reachable_frame_ids(record: dict, config: str) -> list[int]:
    """Every template slot value an episode (any mode) can show, sorted: what a row's
    `frame_ids` must cover. Used to attach frames to upstream JSONL records."""
    return transforms.behaviour_for_config(config).reachable_frame_ids(record)
