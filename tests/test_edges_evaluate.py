"""The edges of `evaluate` (issue 22, points 1-4, and the inventory's sections F-J, L): what it
does with a damaged or odd --results file, which result lines it reuses, what it reads of an
upstream-layout folder or a build folder, Hub ids that cannot be reached, hostile model and judge
endpoints, and signals while a request is in flight. Each test names what happened before."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import build_once, file_text, read_jsonl
from proactivebench_builder.runtime import cli

PROG = cli.PROG


@pytest.fixture(scope="module")
def qd_build(tmp_path_factory, miniature_root) -> str:
    """A QuickDraw-only build (its shards, its upstream export); tests copy what they damage."""
    output, _ = build_once(tmp_path_factory, miniature_root, "quickdraw")
    return output


def evaluate(capsys, *argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `evaluate` run in this process."""
    try:
        status = cli.main(["evaluate", *argv])
    except SystemExit as exit_:  # argparse's own one-line error
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def run_cli(*argv, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    """`evaluate` in a process of its own (for what could block or grow without bound)."""
    return subprocess.run([sys.executable, "-m", "proactivebench_builder.runtime", "evaluate",
                           *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_line(err: str) -> str:
    """The single line a refusal prints (no traceback; the progress bar's lines left out)."""
    lines = [line for line in err.splitlines() if line.strip() and "sample/s]" not in line]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


QD = ["--model", "oracle", "--scenarios", "quickdraw"]


# ---- the --results file (point 1; inventory I) ------------------------------------------------

def test_a_torn_last_line_is_dropped_with_a_warning_and_recomputed(qd_build, tmp_path, capsys):
    """Before: a kill mid-write left half a last line and every rerun ended in a JSONDecodeError
    traceback. Now the half line is dropped (one warning line), its sample played again, and the
    file holds whole lines only."""
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
    whole = results.read_bytes()
    lines = whole.splitlines(keepends=True)
    results.write_bytes(b"".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    status, out, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    assert status == 0, err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and f"--results {results}: line {len(lines)}" in warning[0]
    assert "cut short" in warning[0] and "Traceback" not in err
    again = read_jsonl(results)
    assert len(again) == len(lines) and {r["key"] for r in again} == {
        json.loads(line)["key"] for line in lines}
    assert results.read_bytes().endswith(b"\n") and " 100.0" in out


def test_a_whole_last_line_without_its_newline_is_kept(qd_build, tmp_path, capsys):
    """A file whose last line lacks only its newline (an editor's save) loses nothing, and the
    next line written starts on a line of its own."""
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
    lines = results.read_bytes().splitlines(keepends=True)
    results.write_bytes(b"".join(lines[:-2]) + lines[-2].rstrip(b"\n"))  # one sample less
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    assert status == 0 and "warning" not in err, err
    assert len(read_jsonl(results)) == len(lines) - 1 + 1


def _signature_line(**fields) -> str:
    line = {"model": "oracle", "model_spec": "oracle", "mode": "mcqa", "hint": False,
            "random_suggestions": False, "history": False, "first_round_only": False, "seed": 0,
            "judge": None, "config": "QuickDraw"}
    line.update(fields)
    return json.dumps(line)


@pytest.mark.parametrize("bad, what", [
    (b"[1, 2]\n", "not a JSON object"),
    (b'{"model": "caf\xe9"}\n', "not UTF-8"),
    (b"[" * 100000 + b"]" * 100000 + b"\n", "nested too deeply"),
    (b'{"model": "oracle", "x": \n', "not valid JSON"),
    (_signature_line(key=["a"]).encode() + b"\n", "'key'"),
    (_signature_line(key="QuickDraw/x", sample_fingerprint=5).encode() + b"\n",
     "'sample_fingerprint'"),
])
def test_a_damaged_line_is_named_by_its_number(qd_build, tmp_path, capsys, bad, what):
    """Before: AttributeError / UnicodeDecodeError / RecursionError / JSONDecodeError /
    TypeError (unhashable) tracebacks. Now one line naming the file and the line, exit 2; the
    file is left as it was."""
    results = tmp_path / "r.jsonl"
    good = b'{"model": "someone else"}\n'
    results.write_bytes(good + bad + good)
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    line = one_line(err)
    assert status == 2 and f"--results {results}: line 2: " in line and what in line, line
    assert results.read_bytes() == good + bad + good


def test_a_reused_line_lacking_what_the_table_reads_is_named(qd_build, tmp_path, capsys):
    """Before: a line of this run for a current sample without `correct_prediction` or
    `num_turns` ended in a KeyError traceback in the table. Now one line naming it."""
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
    lines = read_jsonl(results)
    lines[3].pop("correct_prediction")
    lines[5]["num_turns"] = "two"
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    line = one_line(err)
    assert status == 2 and f"--results {results}: line 4: " in line
    assert "'correct_prediction'" in line, line


def test_first_round_lines_are_checked_too(qd_build, tmp_path, capsys):
    results = tmp_path / "p.jsonl"
    argv = ["--data", qd_build, "--model", "first-option", "--scenarios", "quickdraw",
            "--first_round_only", "--results", str(results)]
    assert evaluate(capsys, *argv)[0] == 0
    lines = read_jsonl(results)
    lines[0]["correct"] = "yes"
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    status, _, err = evaluate(capsys, *argv)
    assert status == 2 and "line 1: " in one_line(err) and "'correct'" in err


@pytest.mark.parametrize("kind", ["fifo", "dev-null", "dev-zero", "in-a-file", "link-loop",
                                  "folder"])
def test_a_results_path_that_is_not_a_regular_file_is_one_line(qd_build, tmp_path, kind):
    """Before: a FIFO blocked open() forever; /dev/zero grew memory ~1 GB/s; /dev/null played
    everything and printed "(no results)"; a path inside a file and a link loop ended in
    FileExistsError / ELOOP tracebacks. Now each is one line and exit 2, before any work."""
    path = tmp_path / "r.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-null":
        path = "/dev/null"
    elif kind == "dev-zero":
        path = "/dev/zero"
    elif kind == "in-a-file":
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "r.jsonl"
    elif kind == "link-loop":
        os.symlink(path, path)
    else:
        path.mkdir()
    done = run_cli("--data", qd_build, *QD, "--results", str(path), timeout=60)
    line = one_line(done.stderr)
    assert done.returncode == 2 and f"--results {path}" in line, line


def test_a_results_file_that_cannot_be_written_is_one_line(qd_build, tmp_path, capsys,
                                                           monkeypatch):
    """A full disk while a line is written: one line (exit 1), no half line left behind, and a
    rerun resumes."""
    from proactivebench_builder.runtime import results_file

    results = tmp_path / "r.jsonl"
    writes = [0]
    real_write = os.write

    def failing_write(fd, data):
        writes[0] += 1
        if writes[0] == 3:
            real_write(fd, data[:len(data) // 2])
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(results_file.os, "write", failing_write)
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    line = one_line(err)
    assert status == 1 and "No space left on device" in line and str(results) in line
    assert len(read_jsonl(results)) == 2 and results.read_bytes().endswith(b"\n")
    monkeypatch.setattr(results_file.os, "write", real_write)
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
