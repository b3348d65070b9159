"""Stored first-round predictions: the schema, reading it from any fsspec URL, and validation.

Schema version 1, one row per (model, sample):

| column          | type          | required | meaning                                              |
|-----------------|---------------|----------|------------------------------------------------------|
| schema_version  | int           | no       | 1                                                    |
| model           | string        | yes      | the probing model's name                             |
| config          | string        | yes      | the scenario config (upstream name, e.g. QuickDraw)  |
| key             | string        | one of   | the sample's `key` (preferred: stable across builds) |
| id              | int           | key/id   | the sample's `id` in the same pool                   |
| answer_text     | string        | no       | the model's raw first-round answer                   |
| chosen_option   | string        | no       | the option the answer was parsed to (null if none)   |
| correct         | bool          | yes      | whether the first-round answer was the right category|

Files are Parquet (`.parquet`), JSON lines (`.jsonl`, `.json`) or CSV (`.csv`, `correct` as
true/false/1/0). The runtime's first-round mode writes exactly this schema.
"""
from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq

from proactivebench_builder.core import fileio

SCHEMA_VERSION = 1
REQUIRED = ("model", "config", "correct")
OPTIONAL = ("schema_version", "key", "id", "answer_text", "chosen_option")


class PredictionsError(ValueError):
    """The predictions file cannot be used to filter; the message says why and where."""


def read_predictions(url: str) -> list[dict]:
    """Every row of a predictions file, normalised and validated on its own (schema, types,
    duplicates); checks against a pool happen in `filters.leakage`."""
    lower = url.lower()
    try:
        data = fileio.read_bytes(url)
    except FileNotFoundError:
        raise PredictionsError(f"predictions file not found: {url}") from None
    if lower.endswith(".parquet"):
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    elif lower.endswith((".jsonl", ".json")):
        rows = _json_lines(data, url)
    elif lower.endswith(".csv"):
        rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    else:
        raise PredictionsError(f"{url}: unknown predictions format (use .parquet, .jsonl or .csv)")
    if not rows:
        raise PredictionsError(f"{url}: the predictions file is empty")
    normalised = [_normalise(row, url, n) for n, row in enumerate(rows, start=1)]
    _check_duplicates(normalised, url)
    return normalised


def _json_lines(data: bytes, url: str) -> list[dict]:
    rows = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise PredictionsError(f"{url}:{n}: not a JSON line ({err})") from None
    return rows


def _normalise(row: dict, url: str, n: int) -> dict:
    where = f"{url}: row {n}"
    missing = [c for c in REQUIRED if row.get(c) in (None, "")]
    if missing:
        raise PredictionsError(f"{where}: missing {missing}")
    key, sample_id = row.get("key") or None, row.get("id")
    if key is None and sample_id in (None, ""):
        raise PredictionsError(f"{where}: names no sample (give `key` or `id`)")
    version = row.get("schema_version")
    if version not in (None, "", SCHEMA_VERSION, str(SCHEMA_VERSION)):
        raise PredictionsError(f"{where}: schema_version {version!r}; this builder reads "
                               f"version {SCHEMA_VERSION}")
    return {"model": str(row["model"]), "config": str(row["config"]),
            "key": None if key is None else str(key),
            "id": None if sample_id in (None, "") else _integer(sample_id, where),
            "correct": _boolean(row["correct"], where)}


def _integer(value, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PredictionsError(f"{where}: id {value!r} is not an integer") from None


def _boolean(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise PredictionsError(f"{where}: correct={value!r} is not a boolean")


def sample_ref(row: dict) -> str:
    return f"key:{row['key']}" if row["key"] is not None else f"id:{row['id']}"


def _check_duplicates(rows: list[dict], url: str) -> None:
    seen, dupes = set(), []
    for row in rows:
        ident = (row["model"], row["config"], sample_ref(row))
        if ident in seen:
            dupes.append(ident)
        seen.add(ident)
    if dupes:
        shown = ", ".join(f"{m} / {c} / {s}" for m, c, s in dupes[:5])
        raise PredictionsError(f"{url}: {len(dupes)} duplicate model x sample rows, e.g. {shown}")
