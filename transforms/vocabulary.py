"""The option vocabulary that the upstream environments understand.

Upstream recognises an option by lower-cased substrings: an option containing "cannot" or
"do not" is an abstain option; otherwise the first matching keyword below names its action
(`docs/environments.md`). Every option string a scenario writes must match
exactly one action, which `action_of` checks and the tests enforce for every pool.
"""
from __future__ import annotations

import functools

ABSTAIN_MARKERS = ("cannot", "do not")

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
