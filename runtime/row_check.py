"""What a row must be before `evaluate` plays it, wherever it comes from (our Parquet shards, a
Hub dataset, an upstream-layout JSONL line): the record contract's checks (`core.contract`, the
ones `validate` runs on a build's rows) with its scenario's rules. A row that breaks one is a
`BadRecord` naming the first thing wrong, never played.
"""
from __future__ import annotations

from proactivebench_builder import transforms
from proactivebench_builder.core import contract, records


class BadRecord(ValueError):
    """A row that cannot be played; the message says why (one line)."""


def contract_row(record: dict) -> dict:
    """A row of the record contract from an upstream-layout record: its columns (anything else,
    `frames` included, is left out: frames come from the files the template names)."""
    row = records.empty_row()
    row.update({k: v for k, v in record.items() if k in row and k != "frames"})
    return row


def check(row: dict, config: str) -> None:
    """Raise BadRecord naming the first thing that keeps `row` (with its `frame_ids`) from
    being played as `config`."""
    problem = contract.first_problem(row, transforms.behaviour_for_config(config))
    if problem:
        raise BadRecord(problem)


def check_fields(row: dict) -> None:
    """The types, presence and bounds of an upstream record's fields, before anything is
    derived from them (its key, the frames it needs)."""
    missing = [f for f in records.UPSTREAM_COMMON_FIELDS if row.get(f) is None]
    problems = contract.type_problems(row) or (
        [f"lacks {', '.join(missing)}"] if missing else []) or contract.bound_problems(row)
    if problems:
        raise BadRecord(problems[0])


def reachable_ids(record: dict, config: str) -> list[int]:
    """The frame ids an episode of `record` can show (what an upstream record without
    `frame_ids` needs), at most contract.MAX_FRAMES of them."""
    try:
        ids = transforms.behaviour_for_config(config).reachable_frame_ids(record)
    except contract.UNUSABLE as err:
        raise BadRecord(f"{config} cannot play it ({type(err).__name__}: {err})") from None
    if len(ids) > contract.MAX_FRAMES:
        raise BadRecord(f"it can show {len(ids):,} frames (at most {contract.MAX_FRAMES:,})")
    return list(ids)
