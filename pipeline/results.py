"""Result values. Errors are values: every raw item becomes a candidate or a dead letter, and
counts travel as values too, because the DaskRunner has neither tagged outputs nor metrics."""
from __future__ import annotations


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


def is_kind(kind: str):
    return lambda value: value["kind"] == kind
