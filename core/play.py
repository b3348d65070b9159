"""How a scenario's environment plays: one declaration per scenario, kept in its folder.

A scenario class sets `environment = Play(...)` (in `transforms/<scenario>/play.py`); the
evaluation runtime, `validate`, `inspect`, the upstream export and import read it, so no table
elsewhere lists scenarios. A scenario that declares nothing gets `Play()`: the generic frame
ladder (each accepted request moves one frame toward `reference_image`; on the last turn only the
category counts; the cap is `num_images`).

The fields:
- `actions`: action name -> the lower-case keywords that name it in an option. Matching is
  scoped to the scenario's own actions, as upstream's `_parse_action` limits its search to the
  environment's action space. Empty (the default): every known action (any option that holds one
  known keyword is a request).
- `behaviour`: the `Behaviour` class that moves the state (`FrameLadder` by default, `Steps`
  for declared offsets); a scenario with rules of its own defines its class in its folder.
- `moves`: for `Steps`, action -> frame offset (ROD's LEFT -1, RIGHT +1, ...).
- `wrap`: `Steps` moves modulo `num_images` (ROD, VSOD).
- `first_turn` / `last_turn`: what is accepted on the first / last turn: "any" (a request or the
  category), "requests" (ROD's first turn: naming the category there is wrong), "category"
  (on the last turn only the category).
- `step_cap`: the record field holding the step cap ("num_images", ChangeIt's "max_steps").
- `hint`, `pre_prompt`, `reference_prompt`: texts the model sees (kept verbatim for upstream).
- `short_name`: the label of tables and `--scenarios` (defaults to the config name); `aliases`:
  more names users may type for it.
- `open_ended_suggestions`, `open_ended_category` and `prediction_threshold`: the open-ended
  mode's valid answers (the suggestions, then the category unless `open_ended_category` is
  False) and how many leading valid answers are suggestions (default: the suggestions' count).
- `suggestions`: the proactive option texts the scenario writes (examples suffice): checked at
  load time to name exactly one of its actions, and protected from other scenarios' keywords.
- `keyword_matching`: "word" (the default): a keyword counts only as whole words ("up" is not in
  "setup", "angle" not in "rectangle"); "substring": upstream's own rule (a keyword anywhere in
  the lower-cased option), kept by the seven upstream scenarios so that upstream's released
  records play bit for bit as upstream plays them.
- `frame_path(row, frame_id)`: where a frame lives in the upstream layout (the template filled
  for one slot value; it reads only the row). Default: `{image}` zero-padded to 4 digits.
- `upstream_order`: the scenario's place among upstream's seven configs in the paper's order
  (None for any other scenario): tables list them first, and upstream's keyword table and the
  random-suggestion probe's fixed pool are made of theirs.
- `probe_suggestions`: the options the scenario adds to that fixed pool.
- `conformance_cases`: scripted episodes that `runtime.conformance` plays through upstream's own
  environments and ours.
- `record_fields`: the scenario extras of the record contract its environment reads of every
  record (besides the fields every environment reads, `core.records.UPSTREAM_COMMON_FIELDS`),
  e.g. MVP-N's `valid_images`: an imported record lacking one cannot be played.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from PIL import Image

from proactivebench_builder.core import vocabulary
from proactivebench_builder.core.records import INT_COLUMNS, UPSTREAM_EXTRA_FIELDS
from proactivebench_builder.core.vocabulary import VocabularyError

TURN_RULES = ("any", "requests", "category")
MATCHING = ("word", "substring")


class MalformedRecord(ValueError):
    """A record the upstream environment would reject (it asserts)."""


def default_frame_path(row: dict, frame_id: int) -> str:
    """The `{image}` slot zero-padded to 4 digits (VSOD, MVP-N, QuickDraw, the frame ladder)."""
    return row["image_template"].format(image=f"{frame_id:04d}")


def categories_text(categories: list[str]) -> str:
    return ", ".join(c.replace(".", "") for c in categories)


# ---- what `validate` checks of a row's frames, by behaviour ---------------------------------------

def cap_problem(row: dict, expected: int, what: str) -> list[str]:
    if row.get("num_images") != expected:
        return [f"num_images={row.get('num_images')} but {what}={expected}"]
    return []


def unreachable(row: dict, reachable) -> list[str]:
    missing = sorted(set(reachable) - set(row.get("frame_ids") or []))
    return [f"frames {missing} are reachable within the step cap (num_images="
            f"{row.get('num_images')}) but missing"] if missing else []


# ---- behaviours ----------------------------------------------------------------------------------

class Behaviour:
    """How an environment moves, for a scenario `config` declared by `play`: the hooks the
    runtime's `Environment` calls (which options are shown and accepted now, where a request
    leads, the cap, the hint), and what the rest of the project asks of a record (the frames a
    row must hold, the problems `validate` reports, how `inspect` shows a row). `known` is the
    keyword table of every registered scenario (for a play that declares no actions)."""

    def __init__(self, config: str, play: "Play", known: dict | None = None):
        self.config = config
        self.play = play
        self.known = known or {}

    # ---- state --------------------------------------------------------------------------------

    def setup(self, env) -> None:
        """Scenario state beyond image_id / num_turns."""

    def max_steps(self, env) -> int:
        return env.record[self.play.step_cap]

    def valid_images(self, env) -> list[int]:
        return list(range(env.record["num_images"]))

    def keywords(self) -> list[tuple[str, str]]:
        """(keyword, action) pairs an option is matched against."""
        return vocabulary.scenario_keywords(self.play, self.known)

    def action_space(self, record: dict | None = None) -> tuple[str, ...]:
        return vocabulary.scenario_actions(self.play, self.known)

    def action_of(self, option: str) -> str:
        """The single action of this scenario an option requests (ValueError otherwise)."""
        return vocabulary.scenario_action_of(option, self.play, self.known)

    def next_image(self, env, action: str) -> int:
        raise NotImplementedError

    def patched_frames(self, record: dict) -> dict[int, str]:
        """frame id -> why no episode of `record` shows that frame although its state is
        reached (the scenario patches it: `shown_frame`); the build report lists them."""
        return {}

    def shown_frame(self, record: dict, image_id: int, action: str | None) -> int:
        """The frame id shown in state `image_id` when `action` led there (None: the first
        state): the state's own frame, unless the scenario patches one (ROD shows a neighbour
        in place of a frame its release lacks, as upstream's `_fix_corruptions`)."""
        return image_id

    def view_box(self, env) -> tuple | None:
        """The box of the frame the environment shows now (None: the whole frame)."""
        return None

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
        """Every template slot value an episode (any mode) can show, sorted: exactly the frames
        a row must hold, no more (a frame no episode shows is neither required nor read)."""
        ids = set(range(record["num_images"]))
        return sorted(ids | {record["first_image"], record["reference_image"]})

    def upstream_frame_ids(self, record: dict) -> list[int]:
        """The frame ids of a record of upstream's release (which names none), in play order:
        the frames an episode can show (`reachable_frame_ids`)."""
        return self.reachable_frame_ids(record)

    def record_problems(self, row: dict) -> list[str]:
        """What `validate` reports about a row's frames and step cap: every frame the
        environment can reach within its cap must be present."""
        return cap_problem(row, len(row.get("frame_ids") or []), "len(frame_ids)")

    # ---- how `inspect` shows a row -------------------------------------------------------------

    def sheet_views(self, row: dict) -> list[dict] | None:
        """For a row whose views are computed from its one frame at play time, the views a
        contact sheet shows: {"box": PIL box or None (the whole frame), "caption", "marks"
        (FIRST, LAST, REF), "outlines": [(box, mark)] drawn on it}; None to show the row's
        frames as they are."""
        return None


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

    def record_problems(self, row):
        """One frame per request toward the reference, so every frame between first_image and
        reference_image is reachable, and the cap must leave a turn to name the category on the
        reference."""
        first, ref, n = row.get("first_image"), row.get("reference_image"), row.get("num_images")
        if not isinstance(first, int) or not isinstance(ref, int) or not n:
            return [f"first_image={first}, reference_image={ref}, num_images={n}: need integers"]
        problems = []
        if n < abs(ref - first) + 1:
            problems.append(f"num_images={n} turns cannot reach reference_image {ref} from "
                            f"first_image {first} and answer (needs {abs(ref - first) + 1})")
        return problems + unreachable(row, range(min(first, ref), max(first, ref) + 1))


class Steps(Behaviour):
    """Each action moves by its declared offset (modulo num_images when `wrap`). The frames an
    episode can show are those its moves reach from `first_image` within the step cap, which
    are also the states it may enter (upstream's ROD, VSOD and QuickDraw move by one, so theirs
    are every id below num_images)."""

    def entered(self, record: dict) -> set[tuple[int, str | None]]:
        """Every (state, the action that entered it) the declared moves reach from first_image
        (entered by None) in fewer turns than the cap (a state entered on the last turn shows
        nothing: the episode ends there)."""
        n, cap = record.get("num_images") or 0, record.get(self.play.step_cap) or 0
        seen = frontier = {(record["first_image"], None)}
        for _ in range(max(0, cap - 1)):
            step = {((i + move) % n if self.play.wrap and n else i + move, action)
                    for i, _ in frontier for action, move in self.play.moves.items()}
            frontier = {(i, a) for i, a in step if i >= 0} - seen
            seen = seen | frontier
        return seen

    def reachable(self, record: dict) -> set[int]:
        """Every state the declared moves reach from first_image in fewer turns than the cap."""
        return {i for i, _ in self.entered(record)}

    def shown(self, record: dict) -> set[int]:
        """Every frame an episode shows on its way (the reachable states, as patched)."""
        return {self.shown_frame(record, i, a) for i, a in self.entered(record)}

    def valid_images(self, env):
        return sorted(self.reachable(env.record))

    def next_image(self, env, action):
        next_id = env.image_id + self.play.moves[action]
        return next_id % env.record["num_images"] if self.play.wrap else next_id

    def distance_to_reference(self, env):
        d = abs(env.image_id - env.record["reference_image"])
        return min(d, env.record["num_images"] - d) if self.play.wrap else d

    def reachable_frame_ids(self, record):
        return sorted(self.shown(record) | {record["reference_image"]})

    def record_problems(self, row):
        """Every frame the moves show within the cap is in the row, and the reference is among
        the states they reach."""
        if not isinstance(row.get("first_image"), int) or not row.get("num_images") \
                or not isinstance(row.get(self.play.step_cap), int):
            return [f"first_image={row.get('first_image')}, num_images={row.get('num_images')}, "
                    f"{self.play.step_cap}={row.get(self.play.step_cap)}: need integers"]
        reachable = self.reachable(row)
        problems = unreachable(row, self.shown(row))
        if row.get("reference_image") not in reachable:
            problems.append(f"reference_image {row.get('reference_image')} cannot be reached from "
                            f"first_image {row['first_image']} by the moves "
                            f"{dict(self.play.moves)} within {self.play.step_cap}="
                            f"{row[self.play.step_cap]} turns")
        return problems


# ---- the declaration -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Play:
    actions: dict = field(default_factory=dict)
    behaviour: type = FrameLadder
    moves: dict = field(default_factory=dict)
    wrap: bool = False
    first_turn: str = "any"
    last_turn: str = "category"
    step_cap: str = "num_images"
    hint: str = "Hint: asking for a more informative view could help with classification."
    pre_prompt: str = ""
    reference_prompt: str = ""
    short_name: str = ""
    aliases: tuple = ()
    open_ended_suggestions: tuple = ()
    open_ended_category: bool = True
    prediction_threshold: int | None = None
    suggestions: tuple = ()
    keyword_matching: str = "word"
    frame_path: Callable[[dict, int], str] = default_frame_path
    upstream_order: int | None = None
    probe_suggestions: tuple = ()
    conformance_cases: tuple = ()
    record_fields: tuple = ()

    def __post_init__(self):
        if self.first_turn not in TURN_RULES or self.last_turn not in TURN_RULES:
            raise VocabularyError(f"first_turn/last_turn must be one of {TURN_RULES}")
        if self.keyword_matching not in MATCHING:
            raise VocabularyError(f"keyword_matching must be one of {MATCHING}")
        if not (isinstance(self.behaviour, type) and issubclass(self.behaviour, Behaviour)):
            raise VocabularyError(f"behaviour must be a Behaviour class (core.play), not "
                                  f"{self.behaviour!r}")
        if getattr(self.behaviour, "needs_moves", issubclass(self.behaviour, Steps)) \
                and set(self.moves) != set(self.actions):
            raise VocabularyError(f"behaviour {self.behaviour.__name__} needs a move per action: "
                                  f"moves {sorted(self.moves)}, actions {sorted(self.actions)}")
        unknown = [f for f in self.record_fields if f not in UPSTREAM_EXTRA_FIELDS]
        if unknown:
            raise VocabularyError(f"record_fields {unknown} are not scenario extras of the "
                                  f"record contract ({', '.join(UPSTREAM_EXTRA_FIELDS)})")
        if self.step_cap not in INT_COLUMNS:
            raise VocabularyError(f"step_cap {self.step_cap!r} is not an integer column of the "
                                  f"record contract (one of {', '.join(sorted(INT_COLUMNS))}): "
                                  "rows hold only the contract's columns (core/records.py)")
        for action, keywords in self.actions.items():
            if isinstance(keywords, str) or not keywords:
                raise VocabularyError(f"action {action!r}: give a tuple of keywords")
            for keyword in keywords:
                if keyword != keyword.lower() or not keyword.strip():
                    raise VocabularyError(f"action {action!r}: keyword {keyword!r} must be "
                                          "non-empty lower-case text")

    @property
    def threshold(self) -> int:
        """Leading OEG valid answers that are suggestions (default: the declared ones, or 1)."""
        if self.prediction_threshold is not None:
            return self.prediction_threshold
        return max(1, len(self.open_ended_suggestions))

    def rules(self, config: str, known: dict | None = None) -> Behaviour:
        """The behaviour that plays this declaration for `config`."""
        return self.behaviour(config, self, known)
