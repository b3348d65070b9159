"""`run_pipeline.py release_labels --release DIR` (pipeline/commands/release_labels.py): a
release JSONL that is not a small regular file, or lines that are not records, are one line or
a note, never a traceback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import RUN_PIPELINE


def release_labels(tmp_path, jsonl: bytes | None, make=None) -> subprocess.CompletedProcess:
    release = tmp_path / "release"
    release.mkdir()
    target = release / "MVP-N_preprocessed.jsonl"
    if make is not None:
        make(str(target))
    else:
        target.write_bytes(jsonl)
    return subprocess.run(
        [sys.executable, RUN_PIPELINE, "release_labels", "--release", str(release),
         "--source", f"mvpn={tmp_path / 'mvpn'}", "--scenarios", "mvpn"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))


@pytest.mark.build
def test_release_lines_that_are_not_records_are_notes(tmp_path):
    result = release_labels(tmp_path, b'[1]\n"x"\n\xff\xfe\n{"image_template": 5, "answer": [1]}\n')
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "no labels in the records of mvpn" in result.stderr
    assert not (tmp_path / "mvpn").exists()


@pytest.mark.build
@pytest.mark.parametrize("make, what", [
    (os.mkfifo, "not a regular file"),
    (lambda path: open(path, "wb").truncate(300 << 20), "far more than a released JSONL file"),
], ids=["fifo", "huge"])
def test_a_release_jsonl_that_is_not_a_small_regular_file_is_one_line(tmp_path, make, what):
    result = release_labels(tmp_path, None, make)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and what in lines[0], result.stderr


@pytest.mark.build
def test_a_release_line_nested_too_deeply_is_not_a_traceback(tmp_path):
    result = release_labels(tmp_path, b"[" * 100000 + b"]" * 100000 + b"\n")
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode in (1, 2)
