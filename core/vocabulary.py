"""The option vocabulary: which option requests which action.

Upstream recognises an option by lower-cased substrings: an option containing "cannot" or
"do not" is an abstain option; otherwise the first matching keyword names its action
(`docs/environments.md`). Upstream's keyword table is the union of the actions its seven
scenarios declare, in the paper's order (`upstream_table`); each scenario declares its own
actions in its play declaration (`core.play.Play.actions`), and the registry checks them when it
loads (`check_vocabulary`): no keyword inside another, none occurring in another scenario's option
texts or in an abstain option, and every declared option text of a scenario names exactly one of
its actions.

Matching is scoped to a scenario's actions (`scenario_action_of(option, play, known)`), as
upstream limits its search to the environment's action space, and is whole-word unless the
scenario keeps upstream's substring rule (the seven upstream scenarios do, for bit-compatibility
with released records: MVP-N's "viewpoint" names ROTATE by "view", QuickDraw's "sketching" DETAILS
by "sketch"). `action_of(option, table)` is upstream's unscoped rule over a whole table.

Nothing here knows a scenario: tables are built from the declarations the caller passes in.
"""
from __future__ import annotations

import functools
import re

from proactivebench_builder.core.errors import ScenarioError

ABSTAIN_MARKERS = ("cannot", "do not")

# The abstain pool seen in the paper's examples (App. A, App. D): shared by every scenario.
ABSTAIN_OPTIONS = (
    "I cannot tell.",
    "I cannot answer this question.",
    "I do not know what is this object.",
)


class VocabularyError(ScenarioError):
    """A scenario's action keywords clash with another's, or its options do not name an action."""


def keyword_in(keyword: str, text: str, matching: str) -> bool:
    """Whether `keyword` occurs in lower-cased `text` under the scenario's matching rule."""
    if matching == "substring":
        return keyword in text
    return re.search(r"(?<![0-9a-z])" + re.escape(keyword) + r"(?![0-9a-z])", text) is not None


def is_abstain(option: str) -> bool:
    low = option.lower()
    return any(marker in low for marker in ABSTAIN_MARKERS)


@functools.lru_cache(maxsize=8192)  # called for every class name of every sample's draw
def format_category(name: str) -> str:
    """Category strings as upstream shows them: capitalised, ending with a period
    ("great_pyrenees" -> "Great_pyrenees.", "The Eiffel Tower" -> "The eiffel tower.")."""
    return name.strip().capitalize() + "."


MAX_LABEL_CHARS = 200


def is_label(text) -> bool:
    """A label read from untrusted records (a category, an answer): one printable line of
    reasonable length."""
    return (isinstance(text, str) and 0 < len(text.strip()) <= MAX_LABEL_CHARS
            and text.isprintable())


# ---- keyword tables ------------------------------------------------------------------------------

def keyword_table(plays) -> dict[str, str]:
    """keyword -> action over play declarations, in order (a keyword keeps its first action)."""
    table: dict[str, str] = {}
    for play in plays:
        for action, keywords in play.actions.items():
            for keyword in keywords:
                table.setdefault(keyword, action)
    return table


def upstream_table(scenarios: dict) -> dict[str, str]:
    """Upstream's keyword table: the actions of the scenarios that are upstream's own
    (`Play.upstream_order` set), in the paper's order."""
    upstream = sorted((cls.environment.upstream_order, cls.environment)
                      for cls in scenarios.values() if cls.environment.upstream_order is not None)
    return keyword_table(play for _, play in upstream)


def known_table(scenarios: dict) -> dict[str, str]:
    """keyword -> action of upstream's table and every scenario's declaration."""
    table = upstream_table(scenarios)
    for keyword, action in keyword_table(cls.environment for cls in scenarios.values()).items():
        table[keyword] = action
    return table


def scenario_keywords(play, known: dict) -> list[tuple[str, str]]:
    """(keyword, action) pairs an option of this scenario is matched against, in order:
    its declared actions, or every known keyword (`known`) when it declares none."""
    if play.actions:
        return [(k, action) for action, keywords in play.actions.items() for k in keywords]
    return list(known.items())


def scenario_actions(play, known: dict) -> tuple[str, ...]:
    return tuple(dict.fromkeys(action for _, action in scenario_keywords(play, known)))


def matched_keywords(option: str, play, known: dict) -> list[tuple[str, str]]:
    low = option.lower()
    return [(k, a) for k, a in scenario_keywords(play, known)
            if keyword_in(k, low, play.keyword_matching)]


def scenario_action_of(option: str, play, known: dict) -> str:
    """The single action of `play`'s actions that an option requests; ValueError otherwise
    (several keywords are allowed only when they all name ROTATE, as upstream allows)."""
    found = matched_keywords(option, play, known)
    actions = {a for _, a in found}
    if not found or (len(found) > 1 and actions != {"ROTATE"}):
        raise ValueError(f"option {option!r} holds action keywords {[k for k, _ in found]} of "
                         f"the scenario's actions {list(scenario_actions(play, known))}; need "
                         "exactly one")
    return found[0][1]


def keywords_in(option: str, table: dict) -> list[str]:
    low = option.lower()
    return [keyword for keyword in table if keyword in low]


def action_of(option: str, table: dict) -> str:
    """Upstream's unscoped rule: the single action an option requests by `table`; ValueError
    when it holds no keyword or several (upstream asserts on two keywords even of the same
    action, e.g. "details" + "drawing")."""
    found = keywords_in(option, table)
    if len(found) != 1:
        raise ValueError(f"option {option!r} holds action keywords {found}; need exactly one")
    return table[found[0]]


# ---- the registry's check ------------------------------------------------------------------------

def check_vocabulary(scenarios: dict) -> None:
    """Raise VocabularyError when declared keywords or option texts are ambiguous (see the
    module docstring). `scenarios`: name -> scenario class (each with an `environment`)."""
    owner: dict[str, tuple[str, str]] = {k: ("upstream", a)
                                         for k, a in upstream_table(scenarios).items()}
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
    upstream = upstream_table(scenarios)
    for name, cls in scenarios.items():
        for option in cls.environment.probe_suggestions:
            try:
                action_of(option, upstream)
            except ValueError as err:
                raise VocabularyError(f"scenario {name!r}: probe suggestion: {err}") from None
    known = known_table(scenarios)
    for name, cls in scenarios.items():
        for option in cls.environment.suggestions:
            if is_abstain(option):
                raise VocabularyError(f"scenario {name!r}: suggestion {option!r} reads as an "
                                      f"abstain option (it holds {ABSTAIN_MARKERS})")
            try:
                scenario_action_of(option, cls.environment, known)
            except ValueError as err:
                raise VocabularyError(f"scenario {name!r}: {err}") from None
