"""Result values. Errors are values: every raw item becomes a candidate or a dead letter, and
counts travel as values too, because the DaskRunner has neither tagged outputs nor metrics."""
from __future__ import annotations

import json


def candidate(scenario: str, key: str, item: dict) -> dict:
    return {"kind": "candidate", "scenario": scenario, "key": key, "item": item}


def sample(scenario: str, row: dict) -> dict:
    return {"kind": "sample", "scenario": scenario, "key": row["key"], "row": row}


def dead_letter(scenario: str, path: str, reason: str, key: str = "") -> dict:
    return {"kind": "dead_letter", "scenario": scenario, "path": path, "reason": reason,
            "key": key}


def count(scenario: str, what: str, n: int = 1) -> dict:
    """`what` is "raw_items" (everything read) or "excluded:<rule>" (left out by a documented
    selection rule, e.g. a drawing the game did not recognise, or not drawn by subsampling)."""
    return {"kind": "count", "scenario": scenario, "what": what, "n": n}


# ---- names that are not UTF-8 ----------------------------------------------------------------
# A file name read from disk whose bytes are not UTF-8 arrives with surrogate escapes, which no
# Beam coder can encode: such values are turned into dead letters with the name made readable.

def not_utf8(value):
    """The first string inside `value` that UTF-8 cannot encode, else None. Nearly every value
    is fine, which one C-speed JSON encoding proves; only a failure walks the value."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return None
    except (UnicodeEncodeError, TypeError, ValueError):
        return _first_not_utf8(value)


def _first_not_utf8(value):
    """The first string inside `value` that UTF-8 cannot encode (a file name read from disk
    with bytes that are not UTF-8 arrives with surrogate escapes), else None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return None
    if isinstance(value, dict):
        value = list(value.keys()) + list(value.values())
    if isinstance(value, (list, tuple)):
        for part in value:
            bad = _first_not_utf8(part)
            if bad is not None:
                return bad
    return None


def escaped(text: str) -> str:
    """Readable, UTF-8-safe text of a name: the raw bytes that are not UTF-8 shown as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def non_utf8_reason(text: str) -> str:
    return f"non-UTF-8 file name: {text}"


def utf8_safe(value: dict) -> dict:
    """`value`, or, when it holds a non-UTF-8 name, what can cross a coder: a candidate becomes a
    dead letter of its key, a dead letter or count gets escaped text."""
    bad = not_utf8(value)
    if bad is None:
        return value
    if value["kind"] == "candidate":
        return dead_letter(value["scenario"], escaped(value["key"]),
                                   non_utf8_reason(escaped(bad)), escaped(value["key"]))
    return {k: escaped(v) if isinstance(v, str) else v for k, v in value.items()}


def utf8_unit(unit: str):
    """A unit of raw reading as it can cross a coder: a name that is not UTF-8 travels as its
    escaped text, to become one dead letter where it is read."""
    bad = not_utf8(unit)
    return {"not_utf8": escaped(unit), "text": escaped(bad)} if bad else unit


# ---- the train branch's label --------------------------------------------------------------

def train_label(name: str) -> str:
    """Results of the train branch are reported under `<scenario>/train`."""
    return f"{name}/train"


def is_train_label(label: str) -> bool:
    return label.endswith("/train")


def is_kind(kind: str):
    return lambda value: value["kind"] == kind
