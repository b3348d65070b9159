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
| split           | string        | no       | `test` (default): a sample of the pool the filter    |
|                 |               |          | judges; `train`: an example of the train split       |
| confidence      | float         | no       | the model's confidence in its first-round answer     |
| delta           | {key: float}  | no       | per-key changes of that confidence (an object, or a  |
|                 |               |          | list of {key, value}; in CSV a JSON object)          |

Files are Parquet (`.parquet`), JSON lines (`.jsonl`, `.json`) or CSV (`.csv`, `correct` as
true/false/1/0). The runtime's first-round mode writes exactly this schema (test rows, without
confidences).

The filter reads the `test` rows. The `train` rows fill the columns the released train split
has and the runtime cannot compute, `qwen_conf` / `qwen_delta` / `llava_conf` / `llava_delta`
(first-round confidences of the two post-trained models, per the paper Qwen2.5-VL-3B and
LLaVA-NeXT-Mistral-7B; their exact definition is unpublished): a train row's `confidence` and
`delta` go to the `qwen_*` columns when its model's name holds "qwen", to `llava_*` when it holds
"llava" (case-insensitive; a train row of another model, or of two models of one family, is
refused). Train examples that no row names keep these columns null.
"""
from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq

from proactivebench_builder.core import fileio

SCHEMA_VERSION = 1
REQUIRED = ("model", "config", "correct")
OPTIONAL = ("schema_version", "key", "id", "answer_text", "chosen_option", "split", "confidence",
            "delta")
TEST_SPLIT, TRAIN_SPLIT = "test", "train"
# the released train split's confidence columns, by the model family whose name fills them
CONFIDENCE_FAMILIES = ("qwen", "llava")


class PredictionsError(ValueError):
    """The predictions file cannot be used to filter; the message says why and where."""


def read_predictions(url: str, split: str | None = TEST_SPLIT) -> list[dict]:
    """The rows of a predictions file for `split` (None: every row), normalised and validated
    on their own (schema, types, duplicates); checks against a pool happen in
    `filters.leakage`."""
    rows = read_all_predictions(url)
    chosen = [r for r in rows if split is None or r["split"] == split]
    if not chosen and split == TEST_SPLIT:
        raise PredictionsError(f"{url}: no row of the test split (every row has split: train); "
                               "the filter needs the pool's first-round predictions")
    return chosen


def read_all_predictions(url: str) -> list[dict]:
    """Every row of a predictions file, normalised and validated on its own."""
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
    split = row.get("split") or TEST_SPLIT
    if split not in (TEST_SPLIT, TRAIN_SPLIT):
        raise PredictionsError(f"{where}: split {split!r} (expected {TEST_SPLIT} or "
                               f"{TRAIN_SPLIT})")
    return {"model": str(row["model"]), "config": str(row["config"]),
            "key": None if key is None else str(key),
            "id": None if sample_id in (None, "") else _integer(sample_id, where),
            "correct": _boolean(row["correct"], where), "split": split,
            "confidence": _confidence(row.get("confidence"), where),
            "delta": _delta(row.get("delta"), where)}


def _confidence(value, where: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if number != number or number in (float("inf"), float("-inf")):
        raise PredictionsError(f"{where}: confidence {value!r} is not a finite number")
    return number


def _delta(value, where: str) -> list[dict] | None:
    """[{key, value}] from an object, a list of {key, value} (or of [key, value] pairs, how a
    Parquet map reads back), or a JSON object in a CSV cell."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise PredictionsError(f"{where}: delta {value!r} is not a JSON object") from None
    pairs = value.items() if isinstance(value, dict) else value
    out = []
    try:
        for pair in pairs:
            k, v = (pair["key"], pair["value"]) if isinstance(pair, dict) else pair
            out.append({"key": str(k), "value": _confidence(v, where)})
    except (TypeError, ValueError, KeyError):
        raise PredictionsError(f"{where}: delta must map keys to numbers") from None
    return out


def confidence_family(model: str, where: str) -> str:
    found = [f for f in CONFIDENCE_FAMILIES if f in model.lower()]
    if len(found) != 1:
        raise PredictionsError(f"{where}: train predictions fill the release's "
                               f"{'/'.join(f + '_conf' for f in CONFIDENCE_FAMILIES)} columns, so "
                               f"the model's name must hold exactly one of "
                               f"{', '.join(CONFIDENCE_FAMILIES)}; got {model!r}")
    return found[0]


def train_confidences(url: str) -> dict[tuple[str, str], dict]:
    """(config, key) -> {qwen_conf, qwen_delta, llava_conf, llava_delta} (only the columns its
    rows give) from the train rows of a predictions file; {} when it has none."""
    found: dict[tuple[str, str], dict] = {}
    family_model: dict[str, str] = {}
    for row in read_predictions(url, TRAIN_SPLIT):
        where = f"{url}: model {row['model']!r}"
        if row["key"] is None:
            raise PredictionsError(f"{where}: a train prediction names its example by `key`")
        family = confidence_family(row["model"], where)
        if family_model.setdefault(family, row["model"]) != row["model"]:
            raise PredictionsError(f"{url}: train predictions of two {family} models "
                                   f"({family_model[family]!r}, {row['model']!r}) for one "
                                   f"{family}_conf column")
        entry = found.setdefault((row["config"], row["key"]), {})
        entry[f"{family}_conf"] = row["confidence"]
        entry[f"{family}_delta"] = row["delta"]
    return found


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
        ident = (row["model"], row["config"], row["split"], sample_ref(row))
        if ident in seen:
            dupes.append(ident)
        seen.add(ident)
    if dupes:
        shown = ", ".join(f"{m} / {c} / {s}" for m, c, _, s in dupes[:5])
        raise PredictionsError(f"{url}: {len(dupes)} duplicate model x sample rows, e.g. {shown}")
