"""filters/predictions.py: a predictions file is read a row at a time, and a row keeps only what
the filter and the train split read, so memory follows the rows, not what else they hold."""
from __future__ import annotations

import csv
import json
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from proactivebench_builder.filters.predictions import read_all_predictions


def rows(answer: str) -> list[dict]:
    return [{"schema_version": 1, "model": f"m{m}", "config": "QuickDraw",
             "key": f"QuickDraw/cat/{i}", "answer_text": answer, "correct": i % 2 == 0}
            for m in range(4) for i in range(2000)]


def write(path, kind: str, answer: str) -> str:
    table = rows(answer)
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in table))
    elif kind == "csv":
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    else:
        pq.write_table(pa.Table.from_pylist(table), path)
    return str(path)


def peak_of(url: str) -> tuple[int, list[dict]]:
    tracemalloc.start()
    try:
        read = read_all_predictions(url)
        return tracemalloc.get_traced_memory()[1], read
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_memory_follows_the_rows_not_their_answer_texts(tmp_path, kind):
    """The same 8,000 rows with empty answer texts and with 4 kB ones (a 32 MB file): the
    peak is the same, and no row keeps its answer text."""
    short = write(tmp_path / f"short.{kind}", kind, "")
    long = write(tmp_path / f"long.{kind}", kind, "x" * 4000)
    short_peak, short_rows = peak_of(short)
    long_peak, long_rows = peak_of(long)
    assert long_rows == short_rows and "answer_text" not in long_rows[0]
    assert long_peak < 1.25 * short_peak + (2 << 20), (short_peak, long_peak)
