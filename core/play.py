"""How a scenario's environment plays: one declaration per scenario, kept in its module.

A scenario class sets `environment = Play(...)`; the evaluation runtime (`runtime.behaviours`),
`validate` and the upstream export read it, so no table elsewhere lists scenarios. A scenario that
declares nothing gets `Play()`: the generic frame ladder (each accepted request moves one frame
toward `reference_image`; on the last turn only the category counts; the cap is `num_images`).

The fields:
- `actions`: action name -> the lower-case keywords that name it in an option. Matching is
  scoped to the scenario's own actions, as upstream's `_parse_action` limits its search to the
  environment's action space. Empty (the default): every known action (any option that holds one
  known keyword is a request).
- `behaviour`: how a request moves the state: a name of `runtime.behaviours.BEHAVIOURS`
  ("frame_ladder" by default; the seven upstream scenarios name their own).
- `moves`: for the "steps" behaviour, action -> frame offset (ROD's LEFT -1, RIGHT +1, ...).
- `wrap`: "steps" moves modulo `num_images` (ROD, VSOD).
- `first_turn` / `last_turn`: what is accepted on the first / last turn: "any" (a request or the
  category), "requests" (ROD's first turn: naming the category there is wrong), "category"
  (MVP-N, ImageNet-C, QuickDraw and the frame ladder: on the last turn only the category).
- `step_cap`: the record field holding the step cap ("num_images", ChangeIt's "max_steps").
- `hint`, `pre_prompt`, `reference_prompt`: texts the model sees (kept verbatim for upstream).
- `short_name`: the label of tables and `--scenarios` (defaults to the config name).
- `open_ended_suggestions`, `open_ended_category` and `prediction_threshold`: the open-ended
  mode's valid answers (the suggestions, then the category unless `open_ended_category` is
  False) and how many leading valid answers are suggestions (default: the suggestions' count).
- `suggestions`: the proactive option texts the scenario writes (examples suffice): checked at
  load time to name exactly one of its actions, and protected from other scenarios' keywords.
- `keyword_matching`: "word" (the default): a keyword counts only as whole words ("up" is not in
  "setup", "angle" not in "rectangle"); "substring": upstream's own rule (a keyword anywhere in
  the lower-cased option), kept by the seven upstream scenarios so that upstream's released
  records play bit for bit as upstream plays them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

ABSTAIN_MARKERS = ("cannot", "do not")
TURN_RULES = ("any", "requests", "category")
MATCHING = ("word", "substring")
# The behaviours `runtime.behaviours.BEHAVIOURS` implements (a test keeps the two in step).
BEHAVIOURS = ("frame_ladder", "steps", "valid_images_chain", "quality_ladder", "video_steps",
              "coco_crop")


class VocabularyError(ValueError):
    """A scenario's action keywords clash with another's, or its options do not name an action."""


@dataclass(frozen=True)
class Play:
    actions: dict = field(default_factory=dict)
    behaviour: str = "frame_ladder"
    moves: dict = field(default_factory=dict)
    wrap: bool = False
    first_turn: str = "any"
    last_turn: str = "category"
    step_cap: str = "num_images"
    hint: str = "Hint: asking for a more informative view could help with classification."
    pre_prompt: str = ""
    reference_prompt: str = ""
    short_name: str = ""
    open_ended_suggestions: tuple = ()
    open_ended_category: bool = True
    prediction_threshold: int | None = None
    suggestions: tuple = ()
    keyword_matching: str = "word"

    def __post_init__(self):
        if self.first_turn not in TURN_RULES or self.last_turn not in TURN_RULES:
            raise VocabularyError(f"first_turn/last_turn must be one of {TURN_RULES}")
        if self.keyword_matching not in MATCHING:
            raise VocabularyError(f"keyword_matching must be one of {MATCHING}")
        if self.behaviour not in BEHAVIOURS:
            raise VocabularyError(f"unknown behaviour {self.behaviour!r}; one of {BEHAVIOURS}")
        if self.behaviour in ("steps", "video_steps") and set(self.moves) != set(self.actions):
            raise VocabularyError(f"behaviour {self.behaviour!r} needs a move per action: "
                                  f"moves {sorted(self.moves)}, actions {sorted(self.actions)}")
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


def keyword_in(keyword: str, text: str, matching: str) -> bool:
    """Whether `keyword` occurs in lower-cased `text` under the scenario's matching rule."""
    if matching == "substring":
        return keyword in text
    return re.search(r"(?<![0-9a-z])" + re.escape(keyword) + r"(?![0-9a-z])", text) is not None


def is_abstain(option: str) -> bool:
    low = option.lower()
    return any(marker in low for marker in ABSTAIN_MARKERS)
