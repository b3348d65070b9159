"""filters/predictions.py: a predictions file is read a row at a time, and a row keeps only what
the filter and the train split read, so memory follows the rows, not what else they hold; a
malformed file, one that is not a regular file or is out of reach, or rows naming an unknown
config stop the build before any work in one line naming it."""
from __future__ import annotations

import csv
import json
import os
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_configure import refused_build
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


GOOD = {"model": "m", "config": "QuickDraw", "key": "QuickDraw/cat/1", "correct": True}


def _jsonl(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


@pytest.mark.parametrize("name, content, says", [
    ("p.jsonl", _jsonl(GOOD, "[1]"), "line 2"),
    ("p.jsonl", _jsonl(GOOD, "7"), "line 2"),
    ("p.jsonl", "[" * 100000 + "]" * 100000 + "\n", "line 1"),
    ("p.jsonl", _jsonl(dict(GOOD, id=1.9, key=None)), "1.9"),
    ("p.jsonl", _jsonl(dict(GOOD, id=True, key=None)), "True"),
    ("p.jsonl", _jsonl(dict(GOOD, id="1.5", key=None)), "1.5"),
    ("p.jsonl", _jsonl(dict(GOOD, id=1e400, key=None)), "id"),
    ("p.jsonl", _jsonl(dict(GOOD, model=["a"])), "model"),
    ("p.jsonl", _jsonl(dict(GOOD, key={"a": 1})), "key"),
    ("p.jsonl", b"\xff\xfe{}\n", "UTF-8"),
    ("p.csv", "model,config,key,correct\nm,QuickDraw,\"" + "k" * 140000 + "\",true\n", "after line 1"),
    ("p.csv", "model,config,key,correct\nm,QuickDraw,k,true,extra\n", "line 2"),
    ("p.csv", "model,config,key,correct\nm,Quick\x00Draw,k,true\n", "p.csv"),
    ("p.parquet", "not parquet", "p.parquet"),
])
def test_a_malformed_predictions_file_is_one_line_naming_it(capsys, tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    line = refused_build(capsys, tmp_path, f"--predictions={path}")
    assert "cannot filter" in line and says in line and name in line, line


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_predictions_that_are_not_a_regular_file_are_refused(capsys, tmp_path, kind):
    path = tmp_path / "p.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()
    line = refused_build(capsys, tmp_path, f"--predictions={path}")
    assert str(path) in line, line


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/p.jsonl", "https://example.org/p.jsonl",
                                 "nosuch://x/p.jsonl"])
def test_predictions_at_a_url_the_build_may_not_reach_are_one_line(capsys, tmp_path, url):
    line = refused_build(capsys, tmp_path, f"--predictions={url}")
    assert url in line, line


@pytest.mark.parametrize("config, guess", [("Quickdraw", "QuickDraw"), ("quickdraw", "QuickDraw"),
                                           ("coco", "coco2014"), ("Nonsense", None)])
def test_predictions_naming_an_unknown_config_are_refused_naming_the_closest(capsys, tmp_path,
                                                                             config, guess):
    """Today such rows were ignored: with other rows covering the config, every sample was
    judged by fewer models and kept, and filter.json said nothing of them."""
    path = tmp_path / "p.jsonl"
    path.write_text(_jsonl(GOOD, dict(GOOD, model="n"), dict(GOOD, model="o", config=config)))
    line = refused_build(capsys, tmp_path, f"--predictions={path}")
    assert repr(config) in line and "1 row" in line, line
    if guess:
        assert f"did you mean {guess!r}" in line, line


def test_a_csv_with_cr_line_endings_reads_like_crlf(tmp_path):
    from proactivebench_builder.filters.predictions import read_predictions

    path = tmp_path / "p.csv"
    path.write_text("model,config,key,correct\rm,QuickDraw,k,true\r", newline="")
    assert read_predictions(str(path)) == [
        {"model": "m", "config": "QuickDraw", "key": "k", "id": None, "correct": True,
         "split": "test", "confidence": None, "delta": None}]
