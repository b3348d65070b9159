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

import contextlib
import csv
import io
import json
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from proactivebench_builder.core import fileio
from proactivebench_builder.core.cli import closest
from proactivebench_builder.core.config import network_url

SCHEMA_VERSION = 1
REQUIRED = ("model", "config", "correct")
OPTIONAL = ("schema_version", "key", "id", "answer_text", "chosen_option", "split", "confidence",
            "delta")
TEST_SPLIT, TRAIN_SPLIT = "test", "train"
# the released train split's confidence columns, by the model family whose name fills them
CONFIDENCE_FAMILIES = ("qwen", "llava")
# Memory is bounded by these, never by what a file holds or claims: the released benchmark's
# predictions are ~30 MB for 7 models; a file above the cap is refused, not read.
MAX_BYTES = 512 << 20
MAX_ROWS = 20_000_000


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
    """Every row of a predictions file, normalised and validated on its own. The file is read
    a row at a time, and each row keeps only what the filter and the train split read (model,
    config, key or id, correctness, split, confidence, delta): memory follows the rows, not
    what else a file holds (a long `answer_text` per row)."""
    lower = url.lower()
    if not lower.endswith((".parquet", ".jsonl", ".json", ".csv")):
        raise PredictionsError(f"{url}: unknown predictions format (use .parquet, .jsonl or .csv)")
    with open_input(url, "predictions file", MAX_BYTES, PredictionsError) as handle:
        if lower.endswith(".parquet"):
            rows = _parquet_rows(handle, url)
        elif lower.endswith((".jsonl", ".json")):
            rows = _json_lines(handle, url)
        else:
            rows = _csv_rows(handle, url)
        normalised = [_normalise(row, f"{url}: {where}") for where, row in rows]
    if not normalised:
        raise PredictionsError(f"{url}: the predictions file is empty")
    _check_duplicates(normalised, url)
    return normalised


def read_input(url: str, what: str, limit: int, error: type) -> bytes:
    """The bytes of a user's input file (a keep list): a regular file or a storage URL, at most
    `limit` bytes; anything else is `error` naming it."""
    with open_input(url, what, limit, error) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise error(f"{url}: larger than the {limit:,} bytes a {what} may hold")
    return data


@contextlib.contextmanager
def open_input(url: str, what: str, limit: int, error: type):
    """A binary file object of a user's input file: a regular file or a storage URL, refused
    (`error` naming it) when it is anything else or larger than `limit` bytes; errors while it
    is read are `error` too."""
    if network_url(url):
        raise error(f"{url}: a build reads its {what} from a file or a storage URL (gs://, s3://, "
                    "...), not over the network: download it first")
    try:
        handle = fileio.open_source(url)
    except FileNotFoundError:
        raise error(f"{what} not found: {url}") from None
    except OSError as err:  # a FIFO, a device, a folder, permissions
        raise error(f"{url}: {err.strerror or err}") from None
    except (ImportError, ValueError) as err:  # fsspec: an unknown protocol or its missing package
        raise error(f"{url}: cannot be read ({' '.join(str(err).split())[:200]})") from None
    with handle:
        size = _size(handle)
        if size is not None and size > limit:
            raise error(f"{url}: larger than the {limit:,} bytes a {what} may hold")
        try:
            yield _Capped(handle, limit, lambda: error(
                f"{url}: larger than the {limit:,} bytes a {what} may hold"))
        except OSError as err:
            raise error(f"{url}: {err.strerror or err}") from None


def _size(handle) -> int | None:
    try:
        return os.fstat(handle.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return getattr(handle, "size", None)


class _Capped(io.RawIOBase):
    """A reader of at most `limit` bytes of `handle` (a file that grows while it is read, or a
    store that gave no size, still cannot make memory follow what it holds)."""

    def __init__(self, handle, limit: int, too_large):
        self._handle, self._left, self._too_large = handle, limit, too_large

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._handle.seekable()

    def seek(self, offset, whence=io.SEEK_SET):
        return self._handle.seek(offset, whence)

    def tell(self):
        return self._handle.tell()

    def readinto(self, buffer) -> int:
        data = self._handle.read(min(len(buffer), self._left + 1))
        if len(data) > self._left:
            raise self._too_large()
        self._left -= len(data)
        buffer[:len(data)] = data
        return len(data)


# The columns the filter and the train split read; others (answer_text, chosen_option, ...)
# are never kept.
USED = ("schema_version", "model", "config", "key", "id", "correct", "split", "confidence",
        "delta")
MAX_LINE_BYTES = 16 << 20  # one prediction row (its answer text included) is a few kB


def _used(row: dict) -> dict:
    return {k: row[k] for k in USED if k in row}


def _json_lines(handle, url: str):
    lines = fileio.numbered_lines(io.BufferedReader(handle), MAX_LINE_BYTES, skip_bom=True)
    for n, raw in lines:
        if raw is None:
            raise PredictionsError(f"{url}: line {n}: longer than {MAX_LINE_BYTES:,} bytes")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise PredictionsError(f"{url}: line {n}: not UTF-8 text (byte {err.start})") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise PredictionsError(f"{url}: line {n}: not a JSON line ({err})") from None
        except RecursionError:
            raise PredictionsError(f"{url}: line {n}: nested too deeply") from None
        if not isinstance(row, dict):
            raise PredictionsError(f"{url}: line {n}: not a JSON object but "
                                   f"{type(row).__name__}")
        yield f"line {n}", _used(row)


def _csv_rows(handle, url: str):
    # newline="": the csv module reads CR, LF and CRLF line ends, and line breaks inside quotes
    text = io.TextIOWrapper(io.BufferedReader(handle), encoding="utf-8-sig", newline="")
    reader = csv.DictReader(text)
    try:
        for row in reader:
            where = f"line {reader.line_num}"
            if None in row:  # DictReader files the fields beyond the header under None
                raise PredictionsError(f"{url}: {where}: more fields than the header has")
            yield where, _used(row)
    except csv.Error as err:
        raise PredictionsError(f"{url}: the row after line {reader.line_num}: {err}") from None
    except UnicodeDecodeError as err:
        raise PredictionsError(f"{url}: the row after line {reader.line_num}: not UTF-8 text "
                               f"({err.reason})") from None


def _parquet_rows(handle, url: str):
    try:
        parquet = pq.ParquetFile(handle)
        if parquet.metadata.num_rows > MAX_ROWS:
            raise PredictionsError(f"{url}: {parquet.metadata.num_rows:,} rows, more than the "
                                   f"{MAX_ROWS:,} a predictions file may hold")
        columns = [c for c in parquet.schema_arrow.names if c in USED]
        n = 0
        for batch in parquet.iter_batches(batch_size=65536, columns=columns):
            for row in batch.to_pylist():
                n += 1
                yield f"row {n}", row
    except (pa.ArrowException, OSError, ValueError) as err:
        if isinstance(err, PredictionsError):
            raise
        raise PredictionsError(f"{url}: not a readable Parquet file "
                               f"({' '.join(str(err).split())[:200]})") from None


def _normalise(row: dict, where: str) -> dict:
    missing = [c for c in REQUIRED if row.get(c) in (None, "")]
    if missing:
        raise PredictionsError(f"{where}: missing {missing}")
    key, sample_id = row.get("key"), row.get("id")
    if key in (None, "") and sample_id in (None, ""):
        raise PredictionsError(f"{where}: names no sample (give `key` or `id`)")
    version = row.get("schema_version")
    if version not in (None, "") and str(version) != str(SCHEMA_VERSION) \
            or isinstance(version, (bool, float)):
        raise PredictionsError(f"{where}: schema_version {version!r}; this builder reads "
                               f"version {SCHEMA_VERSION}")
    split = row.get("split") or TEST_SPLIT
    if split not in (TEST_SPLIT, TRAIN_SPLIT):
        raise PredictionsError(f"{where}: split {split!r} (expected {TEST_SPLIT} or "
                               f"{TRAIN_SPLIT})")
    return {"model": _string(row["model"], "model", where),
            "config": _string(row["config"], "config", where),
            "key": None if key in (None, "") else _string(key, "key", where),
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


def _string(value, column: str, where: str) -> str:
    if not isinstance(value, str):
        raise PredictionsError(f"{where}: {column}={value!r} is not a string")
    return value


def _integer(value, where: str) -> int:
    """A sample id: an integer (a CSV's digits); never a float (1.9 was read as 1) or a bool."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PredictionsError(f"{where}: id {value!r} is not a sample id (an integer, 0 or more)")
    return value


def _boolean(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1) or isinstance(value, str):
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
    raise PredictionsError(f"{where}: correct={value!r} is not a boolean")


def unknown_configs_problem(rows: list[dict], url: str, aliases: dict[str, str]) -> str | None:
    """Rows naming a config no registered scenario has, as one line naming the closest known
    one, or None. Such rows would be ignored: the samples they were meant for would be judged
    by fewer models, or not at all, without a word. `aliases`: every name a user may give for a
    config, lower case -> the config."""
    known = sorted(set(aliases.values()))
    counts = Counter(r["config"] for r in rows if r["config"] not in known)
    if not counts:
        return None
    config, n = sorted(counts.items())[0]
    others = f" (and {len(counts) - 1} other unknown configs)" if len(counts) > 1 else ""
    return (f"{url}: {n} {'row names' if n == 1 else 'rows name'} config {config!r}, which no "
            f"registered scenario has{others}" + closest_config_hint(config, aliases)
            + f" (known: {', '.join(known)})")


def closest_config_hint(name: str, aliases: dict[str, str]) -> str:
    """'; did you mean 'QuickDraw'?' for a config misspelt or given by another name, else ''."""
    guess = aliases.get(name.strip().lower())
    if guess is None:
        by_lower = {c.lower(): c for c in aliases.values()}
        found = closest(name.strip().lower(), by_lower)
        guess = by_lower[found] if found else None
    return f"; did you mean {guess!r}?" if guess else ""


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
        shown = ", ".join(f"{m!r} / {c!r} / {s!r}" for m, c, _, s in dupes[:5])
        raise PredictionsError(f"{url}: {len(dupes)} duplicate model x sample rows, e.g. {shown}")
