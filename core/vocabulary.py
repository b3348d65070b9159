"""The option vocabulary: which option requests which action.

Upstream recognises an option by lower-cased substrings: an option containing "cannot" or
"do not" is an abstain option; otherwise the first matching keyword below names its action
(`docs/environments.md`). `ACTION_KEYWORDS` is upstream's table; a scenario
may declare more keywords for new actions in its `environment` (`transforms.environment.Play`),
checked when the registry loads (`check_vocabulary`): no keyword inside another, none occurring
in another scenario's option texts or in an abstain option, and every declared option text of a
scenario names exactly one of its actions.

Matching is scoped to a scenario's actions (`action_of(option, play)`), as upstream limits its
search to the environment's action space, and is whole-word unless the scenario keeps upstream's
substring rule (the seven upstream scenarios do, for bit-compatibility with released records:
MVP-N's "viewpoint" names ROTATE by "view", QuickDraw's "sketching" DETAILS by "sketch").
`action_of(option)` without a scenario is upstream's rule over upstream's table.
"""
from __future__ import annotations

import functools

from proactivebench_builder.core.play import ABSTAIN_MARKERS, Play, VocabularyError, keyword_in

# keyword -> action name, as the upstream environment maps them.
ACTION_KEYWORDS = {
    "to the left": "LEFT",
    "to the right": "RIGHT",
    "rewind the video.": "REWIND",
    "wait for the": "FORWARD",
    "rotate": "ROTATE", "view": "ROTATE", "angle": "ROTATE", "orientation": "ROTATE",
    "different": "ROTATE",
    "brightness": "BRIGHTNESS",
    "contrast": "CONTRAST",
    "saturation": "SATURATE",
    "deblur": "BLUR",
    "denoise": "NOISE",
    "compression": "JPEG_COMPRESSION",
    "resolution": "PIXELATE",
    "artifacts": "ARTIFACTS",
    "details": "DETAILS", "quickdraw": "DETAILS", "drawing": "DETAILS", "sketch": "DETAILS",
    "up": "UP",
    "down": "DOWN",
    "farther": "ZOOM",
}

# The abstain pool seen in the paper's examples (App. A, App. D).
ABSTAIN_OPTIONS = (
    "I cannot tell.",
    "I cannot answer this question.",
    "I do not know what is this object.",
)


def is_abstain(option: str) -> bool:
    low = option.lower()
    return any(marker in low for marker in ABSTAIN_MARKERS)


def known_keywords(scenarios: dict | None = None) -> dict[str, str]:
    """keyword -> action of upstream's table and every (registered) scenario's declaration."""
    if scenarios is None:
        from proactivebench_builder.transforms import load_scenarios

        scenarios = load_scenarios()
    table = dict(ACTION_KEYWORDS)
    for cls in scenarios.values():
        for action, keywords in cls.environment.actions.items():
            table.update({k: action for k in keywords})
    return table


def scenario_keywords(play: Play, known: dict | None = None) -> list[tuple[str, str]]:
    """(keyword, action) pairs an option of this scenario is matched against, in order:
    its declared actions, or every known keyword when it declares none."""
    if play.actions:
        return [(k, action) for action, keywords in play.actions.items() for k in keywords]
    return list((known if known is not None else known_keywords()).items())


def scenario_actions(play: Play) -> tuple[str, ...]:
    return tuple(dict.fromkeys(action for _, action in scenario_keywords(play)))


def matched_keywords(option: str, play: Play, known: dict | None = None) -> list[tuple[str, str]]:
    low = option.lower()
    return [(k, a) for k, a in scenario_keywords(play, known)
            if keyword_in(k, low, play.keyword_matching)]


def scenario_action_of(option: str, play: Play, known: dict | None = None) -> str:
    """The single action of `play`'s actions that an option requests; ValueError otherwise
    (several keywords are allowed only when they all name ROTATE, as upstream allows)."""
    found = matched_keywords(option, play, known)
    actions = {a for _, a in found}
    if not found or (len(found) > 1 and actions != {"ROTATE"}):
        raise ValueError(f"option {option!r} holds action keywords {[k for k, _ in found]} of "
                         f"the scenario's actions {list(scenario_actions(play))}; need exactly one")
    return found[0][1]


def check_vocabulary(scenarios: dict) -> None:
    """Raise VocabularyError when declared keywords or option texts are ambiguous (see the
    module docstring). `scenarios`: name -> scenario class (each with an `environment`)."""
    owner: dict[str, tuple[str, str]] = {k: ("upstream", a) for k, a in ACTION_KEYWORDS.items()}
    for name, cls in scenarios.items():
        for action, keywords in cls.environment.actions.items():
            for keyword in keywords:
                known = owner.get(keyword)
                if known and known[1] != action:
                    raise VocabularyError(
                        f"scenario {name!r}: keyword {keyword!r} names {action}, but {known[0]} "
                        f"already uses it for {known[1]}")
                if any(marker in keyword for marker in ABSTAIN_MARKERS):
                    raise VocabularyError(f"scenario {name!r}: keyword {keyword!r} holds an "
                                          f"abstain marker {ABSTAIN_MARKERS}")
                owner.setdefault(keyword, (f"scenario {name!r}", action))
    keywords = sorted(owner)
    for inner in keywords:
        for outer in keywords:
            if inner != outer and inner in outer:
                raise VocabularyError(
                    f"keyword {inner!r} ({owner[inner][0]}) is inside keyword {outer!r} "
                    f"({owner[outer][0]}): an option holding the longer one would name both")
    texts = [("the abstain options", o, set()) for o in ABSTAIN_OPTIONS]
    texts += [(f"scenario {n!r}", o, {k for ks in cls.environment.actions.values() for k in ks})
              for n, cls in scenarios.items() for o in cls.environment.suggestions]
    for keyword, (where, action) in owner.items():
        if where == "upstream":
            continue
        for source, text, own_keywords in texts:
            if keyword not in own_keywords and keyword_in(keyword, text.lower(), "word"):
                raise VocabularyError(f"{where}: new keyword {keyword!r} ({action}) occurs in "
                                      f"the option {text!r} of {source}")
    known = known_keywords(scenarios)
    for name, cls in scenarios.items():
        for option in cls.environment.suggestions:
            if is_abstain(option):
                raise VocabularyError(f"scenario {name!r}: suggestion {option!r} reads as an "
                                      f"abstain option (it holds {ABSTAIN_MARKERS})")
            try:
                scenario_action_of(option, cls.environment, known)
            except ValueError as err:
                raise VocabularyError(f"scenario {name!r}: {err}") from None


def actions_in(option: str) -> set[str]:
    """Every action whose keyword occurs in the option."""
    low = option.lower()
    return {action for keyword, action in ACTION_KEYWORDS.items() if keyword in low}


def keywords_in(option: str) -> list[str]:
    low = option.lower()
    return [keyword for keyword in ACTION_KEYWORDS if keyword in low]


def action_of(option: str) -> str:
    """The single action an option requests; ValueError when it holds no keyword or several
    (upstream asserts on two keywords even of the same action, e.g. "details" + "drawing")."""
    found = keywords_in(option)
    if len(found) != 1:
        raise ValueError(f"option {option!r} holds action keywords {found}; need exactly one")
    return ACTION_KEYWORDS[found[0]]


@functools.lru_cache(maxsize=8192)  # called for every class name of every sample's draw
def format_category(name: str) -> str:
    """Category strings as upstream shows them: capitalised, ending with a period
    ("great_pyrenees" -> "Great_pyrenees.", "The Eiffel Tower" -> "The eiffel tower.")."""
    return name.strip().capitalize() + "."
