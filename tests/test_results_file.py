"""runtime/results_file.py: one run writes a results file at a time; nothing is counted twice."""
from __future__ import annotations

import json

import pytest

from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.runtime import cli, results_file

QD = ("--scenarios", "QuickDraw")


def evaluate(capsys, *argv) -> tuple[int, list[str]]:
    status = cli.main(["evaluate", "--no_progress", *argv])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return status, err


def signature_of(*argv) -> dict:
    return cli.run_signature(cli.parse_args(["evaluate", *argv]))


def test_a_second_run_of_the_same_job_is_refused_in_one_line(built_miniature, tmp_path, capsys):
    """A job launched twice: while one evaluate of a model writes the file, another of the same
    model and settings is refused before any work, and the file holds each sample once."""
    results = str(tmp_path / "r.jsonl")
    argv = ("--data", built_miniature, "--model", "oracle", *QD, "--results", results)
    with results_file.one_writer(results, signature_of(*argv)):  # the first run, still going
        status, err = evaluate(capsys, *argv)
        assert status == 3 and len(err) == 1, err
        assert err[0].startswith("EVALUATE REFUSED: --results") and "same model" in err[0]
        assert "since" in err[0] and "pid" in err[0]
    assert evaluate(capsys, *argv)[0] == 0
    assert evaluate(capsys, *argv)[0] == 0  # a rerun plays nothing again
    keys = [json.loads(line)["key"] for line in open(results)]
    assert len(keys) == len(set(keys)) > 0


def test_runs_of_other_models_append_beside_it(built_miniature, tmp_path, capsys):
    results = str(tmp_path / "first_round.jsonl")
    common = ("--data", built_miniature, *QD, "--first-round-only", "--results", results)
    with results_file.one_writer(results, signature_of("--model", "random:1", *common)):
        assert evaluate(capsys, "--model", "random:2", *common)[0] == 0
    assert evaluate(capsys, "--model", "random:1", *common)[0] == 0
    lines = [json.loads(line) for line in open(results)]
    assert {line["model"] for line in lines} == {"random:1", "random:2"}
    assert len({(line["model"], line["key"]) for line in lines}) == len(lines)


def test_the_lock_is_removed_when_the_run_ends(built_miniature, tmp_path, capsys):
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", built_miniature, "--model", "oracle", *QD, "--results",
                    str(results))[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


def test_other_runs_lines_are_checked_but_not_held(tmp_path):
    """A results file eight models' runs share, 4 kB of answer text a line (32 MB): reading it
    for one run holds that run's lines only; a damaged line of another run is still named."""
    import tracemalloc

    path = tmp_path / "results.jsonl"
    with open(path, "w") as handle:
        for model in range(8):
            for i in range(1000):
                handle.write(json.dumps({"model": f"m{model}", "key": f"k{i}",
                                         "answer_text": "x" * 4000}) + "\n")
    tracemalloc.start()
    try:
        found = results_file.read(str(path), keep=lambda line: line["model"] == "m3")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [line["key"] for _, line in found.lines] == [f"k{i}" for i in range(1000)]
    assert peak < 12 << 20, peak  # this run's 4 MB of lines, not the file's 32 MB
    with open(path, "a") as handle:
        handle.write("not json\n" + json.dumps({"model": "m3", "key": "last"}) + "\n")
    with pytest.raises(UsageError, match="line 8001: not valid JSON"):
        results_file.read(str(path), keep=lambda line: line["model"] == "m3")


def test_a_results_file_inside_the_data_folder_is_refused(built_miniature, capsys):
    """A results file (and its lock) inside a build folder would be a file its build did not
    write: refused in one line before any work."""
    import os

    inside = os.path.join(built_miniature, "reports", "results.jsonl")
    status, err = evaluate(capsys, "--data", built_miniature, "--model", "oracle",
                           "--results", inside, *QD)
    assert status == 2 and len(err) == 1 and "is inside --data" in err[0], err
    assert not os.path.exists(inside)


def test_a_results_url_is_refused_in_one_line(built_miniature, tmp_path, capsys, monkeypatch):
    """--results s3://... would be written as a local folder named `s3:`: refused before any
    work, nothing written."""
    import os

    monkeypatch.chdir(tmp_path)
    status, err = evaluate(capsys, "--data", built_miniature, "--model", "oracle",
                           "--results", "s3://bucket/results.jsonl", *QD)
    assert status == 2 and len(err) == 1 and "a results file is a local file" in err[0], err
    assert os.listdir(tmp_path) == []
