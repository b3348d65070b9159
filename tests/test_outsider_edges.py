"""What an outside tester found on the command line and in build folders (issue 22's last
round): each case was a traceback, a silent change of job or a wrong verdict before.

- a build argument that is not UTF-8 (a path of other bytes) is one line before any work;
- a flag that takes one value, given twice, is refused (argparse kept the last one: two
  --predictions filtered by the second alone); so is one --set parameter given twice;
- an empty --predictions, --keep_list, --import_upstream or --output ("$UNSET") is refused, not
  read as the flag not given; --source NAME= is refused;
- an unknown subcommand is named even with --help;
- inspect --out naming a file is one line;
- a copy published without --with_upstream validates and publishes again;
- the reports build.json names (dead letters, filter report) are covered by its digests;
- a UTF-8 byte-order mark opening an upstream JSONL is not a bad first record;
- evaluate --data naming a file says it is not a folder."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import IN_PROCESS, RUNNER
from proactivebench_builder.pipeline.commands import main as build
from proactivebench_builder.runtime import cli as runtime_cli


def refused(capsys, call) -> str:
    """The one stderr line of a command that exits 2."""
    with pytest.raises(SystemExit) as exit_:
        raise SystemExit(call())
    assert exit_.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_build_argument_that_is_not_utf8_is_one_line_before_any_work(capsys, tmp_path):
    output = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xff")
    for argv in (["--output", output], [f"--output={output}"],
                 ["--sources_root", output, "--output", str(tmp_path / "ok")]):
        line = refused(capsys, lambda: build.main(["--scenarios", "quickdraw", RUNNER, *argv]))
        assert "is not UTF-8 text" in line and "\\xff" in line
    assert os.listdir(tmp_path) == []  # nothing made


@pytest.mark.parametrize("argv, flag", [
    (["--predictions", "a.jsonl", "--predictions", "b.jsonl"], "--predictions given 2 times"),
    (["--output=/tmp/a", "--output", "/tmp/b"], "--output given 2 times"),
    (["--keep_list", "released", "--keep-list", "released"], "--keep_list given 2 times"),
    (["--seed", "1", "--seed", "2"], "--seed given 2 times"),
])
def test_a_flag_taking_one_value_given_twice_is_refused(capsys, argv, flag):
    assert flag in refused(capsys, lambda: build.main([RUNNER, *argv]))


def test_evaluate_refuses_a_model_given_twice(capsys, tmp_path):
    line = refused(capsys, lambda: runtime_cli.main([
        "evaluate", "--data", str(tmp_path), "--model", "oracle", "--model", "random:1"]))
    assert "--model given 2 times" in line


def test_one_set_parameter_given_twice_is_refused(capsys):
    line = refused(capsys, lambda: build.main([
        RUNNER, "--scenarios", "quickdraw", "--set", "quickdraw.samples_per_class=2",
        "--set", "quickdraw.samples_per_class=3"]))
    assert "quickdraw.samples_per_class given twice" in line


@pytest.mark.parametrize("flag", ["--predictions", "--keep_list", "--import_upstream", "--output"])
def test_an_empty_value_is_refused_not_read_as_the_flag_not_given(capsys, flag):
    assert "must not be empty" in refused(capsys, lambda: build.main([RUNNER, flag, ""]))


def test_a_source_without_a_folder_is_refused(capsys):
    line = refused(capsys, lambda: build.main([RUNNER, "--scenarios", "quickdraw", "--source",
                                               "quickdraw="]))
    assert "--source expects SCENARIO=URL" in line


def test_an_unknown_subcommand_is_named_even_with_help(capsys):
    assert "unknown subcommand 'valdate'" in refused(
        capsys, lambda: build.main(["valdate", "--help"]))


def test_inspect_out_naming_a_file_is_one_line(capsys, built_miniature, tmp_path):
    (tmp_path / "afile").write_text("mine")
    line = refused(capsys, lambda: build.main(["inspect", built_miniature, "--out",
                                               str(tmp_path / "afile")]))
    assert "is a file" in line
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.fixture(scope="module")
def published(built_miniature, tmp_path_factory) -> str:
    target = str(tmp_path_factory.mktemp("published") / "copy")
    assert build.main(["publish", built_miniature, "--to", target]) == 0
    assert not os.path.exists(os.path.join(target, "upstream"))
    return target


def test_a_copy_published_without_the_export_validates_and_publishes_again(
        published, tmp_path, capsys):
    assert build.main(["validate", published]) == 0
    assert "upstream export" in capsys.readouterr().out  # said, not checked
    assert build.main(["publish", published, "--to", str(tmp_path / "again")]) == 0


@pytest.mark.parametrize("name, damage", [
    ("dead_letters.jsonl", b"garbage\n"),
    ("filter.json", b"\x00\x01"),
])
def test_the_reports_build_json_names_are_covered_by_its_digests(
        built_miniature, tmp_path, capsys, name, damage):
    report = json.loads(open(os.path.join(built_miniature, "reports", "build.json")).read())
    assert {e["path"] for e in report["report_files"]} == {
        "reports/dead_letters.jsonl", "reports/filter.json"}
    copy = str(tmp_path / "copy")
    shutil.copytree(built_miniature, copy)
    with open(os.path.join(copy, "reports", name), "wb") as handle:
        handle.write(damage)
    assert build.main(["validate", copy, "--skip_frames"]) == 1
    assert f"reports/{name}:" in capsys.readouterr().out
    assert build.main(["publish", copy, "--to", str(tmp_path / "pub")]) != 0
    assert not os.path.exists(tmp_path / "pub" / "reports" / name)


def test_a_byte_order_mark_opening_an_upstream_jsonl_is_not_a_bad_record(built_miniature,
                                                                        tmp_path, capsys):
    upstream = tmp_path / "upstream"
    shutil.copytree(os.path.join(built_miniature, "upstream"), upstream)
    jsonl = upstream / "QuickDraw_preprocessed.jsonl"
    lines = jsonl.read_bytes()
    jsonl.write_bytes(b"\xef\xbb\xbf" + lines)
    out = tmp_path / "imported"
    build.main([RUNNER, IN_PROCESS, "--import_upstream", str(upstream), "--scenarios",
                "quickdraw", "--output", str(out), "--no_progress"])
    report = json.loads((out / "reports" / "build.json").read_text())
    assert report["scenarios"]["quickdraw"]["dead_letters"] == 0
    assert report["scenarios"]["quickdraw"]["samples"] == lines.count(b"\n")
    assert runtime_cli.main(["evaluate", "--data", str(upstream), "--model", "oracle",
                             "--scenarios", "QD", "--results", str(tmp_path / "r.jsonl"),
                             "--no_progress"]) == 0


def test_evaluate_data_naming_a_file_says_it_is_not_a_folder(capsys, built_miniature):
    line = refused(capsys, lambda: runtime_cli.main([
        "evaluate", "--data", os.path.join(built_miniature, "README.md"), "--model", "oracle",
        "--results", "r.jsonl"]))
    assert "not a folder" in line
