"""A user's mistakes on the command line: every command refuses an unknown or
misspelled flag before any work (exit 2, one line naming the closest valid flag), accepts each
flag with '_' or '-', passes Beam's real options through, refuses unusable values, outputs,
models and scenarios in one line (a flag that takes one value given twice, an empty value, an
argument that is not UTF-8 included), and stops on Ctrl-C with one line, exit 130 and nothing
partial under a final name; the known noise (Beam's apitools warning, OpenCV's VP80 notice) is
gone from a command's output.

The mistakes are the ones a user makes (typos seen in the issue: `--sources-root` before it was
accepted, `--scenario`, `--ouput`). Commands run in a subprocess where the exit status, the
whole stderr or a signal matter; in-process otherwise (Beam takes seconds to import)."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from conftest import DEADLINE_S, RUNNER, copy_sources, read_json
from test_configure import refused_build
from proactivebench_builder.pipeline.commands import beam_flags, main as build
from proactivebench_builder.pipeline.commands import main as main_command
from proactivebench_builder.core.cli import CommandParser, canonical
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.runtime import cli as runtime_cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PIPELINE = os.path.join(REPO, "run_pipeline.py")
EVALUATE = [sys.executable, "-m", "proactivebench_builder.runtime", "evaluate"]


def command(args: list[str], cwd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def refused(capsys, call) -> str:
    """Run a command expected to refuse its arguments; returns its one stderr line."""
    with pytest.raises(SystemExit) as exit_:
        status = call()
        raise SystemExit(status)
    assert exit_.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# ---- unknown and misspelled flags: exit 2, one line, the closest flag named ------------------


@pytest.mark.parametrize("argv, suggestion", [
    (["--sources-rot", "/data/x"], "--sources_root"),
    (["--scenario", "quickdraw"], "--scenarios"),          # argparse would take it as a prefix
    (["--ouput", "X"], "--output"),
    (["--max-bad-fractoin=0.1"], "--max_bad_fraction"),
    (["--runner=FnApiRunner", "--direct_num_worker=2"], "--direct_num_workers"),   # Beam's
    (["--runer", "DaskRunner"], "--runner"),
    (["--dask_client_addres=tcp://127.0.0.1:1"], "--dask_client_address"),
])
def test_build_refuses_a_misspelled_flag_naming_the_closest(capsys, argv, suggestion):
    line = refused(capsys, lambda: build.main(argv))
    assert line.startswith("run_pipeline.py: error: unknown flag ")
    assert f"did you mean {suggestion}?" in line


@pytest.mark.build
def test_build_typo_exits_2_before_any_work(tmp_path):
    """The issue's cases, as a user runs them: nothing is written (not even the miniature
    sources the default build would generate in the working folder), exit 2, one line."""
    for argv, suggestion in ((["--sources-rot", "/data/x"], "--sources_root"),
                             (["--scenario", "quickdraw"], "--scenarios"),
                             (["--ouput", "X"], "--output")):
        result = command([sys.executable, RUN_PIPELINE, *argv, RUNNER], cwd=str(tmp_path))
        assert result.returncode == 2, result.stderr
        assert stderr_lines(result) == [
            f"run_pipeline.py: error: unknown flag {argv[0]}; did you mean {suggestion}? "
            "(run run_pipeline.py --help for every flag)"]
        assert result.stdout == ""
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("subcommand, argv, suggestion", [
    ("validate", ["DIR", "--skip-frame"], "--skip_frames"),
    ("inspect", ["DIR", "--per-scenarios", "2"], "--per_scenario"),
    ("inspect", ["DIR", "--output", "x"], "--out"),
    ("publish", ["DIR", "--to", "x", "--dry-rn"], "--dry_run"),
    ("publish", ["DIR", "--repo", "me/x"], "--repo_id"),
])
def test_subcommands_refuse_a_misspelled_flag(capsys, subcommand, argv, suggestion):
    line = refused(capsys, lambda: build.main([subcommand, *argv]))
    assert line.startswith(f"run_pipeline.py {subcommand}: error: unknown flag ")
    assert f"did you mean {suggestion}?" in line


def test_evaluate_refuses_a_misspelled_flag(capsys, tmp_path):
    line = refused(capsys, lambda: runtime_cli.main([
        "evaluate", "--data", str(tmp_path), "--model", "oracle", "--results",
        str(tmp_path / "r.jsonl"), "--first-round-onl"]))
    assert "unknown flag --first-round-onl; did you mean --first_round_only?" in line
    assert not os.path.exists(tmp_path / "r.jsonl")


@pytest.mark.build
def test_typos_exit_2_in_every_command_as_a_user_runs_them(tmp_path):
    """Exit status and whole stderr of each command, in a subprocess."""
    cases = [
        ([sys.executable, RUN_PIPELINE, "validate", "DIR", "--skip-frame"], "--skip_frames"),
        ([sys.executable, RUN_PIPELINE, "inspect", "DIR", "--per-scenarios", "2"],
         "--per_scenario"),
        ([sys.executable, RUN_PIPELINE, "publish", "DIR", "--to", "x", "--dry-rn"], "--dry_run"),
        ([*EVALUATE, "--data", "DIR", "--model", "oracle", "--results", "r.jsonl",
          "--first-round-onl"], "--first_round_only"),
    ]
    for args, suggestion in cases:
        result = command(args, cwd=str(tmp_path))
        assert result.returncode == 2, result.stderr
        lines = stderr_lines(result)
        assert len(lines) == 1 and f"did you mean {suggestion}?" in lines[0], lines
    assert os.listdir(tmp_path) == []


def test_the_export_asked_for_and_refused_at_once_is_one_line(capsys, tmp_path):
    """--no_upstream_export asks for the default (no export); with --upstream_export the
    command contradicts itself, refused before any work."""
    line = refused(capsys, lambda: build.main([
        "--output", str(tmp_path / "out"), "--upstream_export", "--no_upstream_export"]))
    assert "--no_upstream_export" in line and "--upstream_export" in line
    assert not os.path.exists(tmp_path / "out")


def test_unknown_subcommand_names_the_closest(capsys):
    line = refused(capsys, lambda: build.main(["valdate", "DIR"]))
    assert "unknown subcommand 'valdate'; did you mean validate?" in line
    line = refused(capsys, lambda: runtime_cli.main(["evalute", "--data", "DIR"]))
    assert line == ("python -m proactivebench_builder.runtime: error: unknown subcommand "
                    "'evalute'; did you mean evaluate? (subcommands: evaluate)")


def test_a_registered_subcommand_is_listed_parsed_and_run(capsys, monkeypatch):
    """All a new module in pipeline/commands/ does to become a subcommand: register itself
    (nothing else is edited); its flags are checked as every command's are, and a refusal while
    it runs is its own one line."""
    from proactivebench_builder.core.errors import UsageError
    from proactivebench_builder.pipeline import commands

    monkeypatch.setattr(commands, "_REGISTERED", dict(commands._REGISTERED))
    greeted = []

    def declare(parser):
        parser.add_argument("--greeting_text", required=True)

    def greet(args):
        if args.greeting_text == "boo":
            raise UsageError("--greeting_text: not a greeting")
        greeted.append(args.greeting_text)
        return 0

    commands.subcommand("hello", "say hello", "Says hello.", declare, greet)
    assert build.main(["hello", "--greeting-text", "hi"]) == 0 and greeted == ["hi"]
    assert "say hello" in help_text(capsys, build.main, ["--help"])
    assert "Says hello." in help_text(capsys, build.main, ["hello", "--help"])
    assert refused(capsys, lambda: build.main(["hello", "--greeting_txt", "x"])).startswith(
        "run_pipeline.py hello: error: unknown flag --greeting_txt; did you mean "
        "--greeting_text?")
    assert refused(capsys, lambda: build.main(["hello", "--greeting_text", "a",
                                               "--greeting_text", "b"])) == (
        "run_pipeline.py hello: error: --greeting_text given 2 times; it takes one value "
        "(give it once)")
    assert refused(capsys, lambda: build.main(["hello", "--greeting_text", "boo"])) == (
        "run_pipeline.py hello: error: --greeting_text: not a greeting")
    assert "did you mean hello?" in refused(capsys, lambda: build.main(["helo"]))
    assert greeted == ["hi"]


def test_the_build_flags_do_not_reach_a_subcommand(capsys):
    """run_pipeline.py's parser declares the build's flags (for --help): a subcommand's words
    are still its own parser's to check (inspect has a --seed of its own; validate has none)."""
    assert refused(capsys, lambda: build.main(["inspect", "DIR", "--seed", "1", "--seed",
                                               "2"])).startswith(
        "run_pipeline.py inspect: error: --seed given 2 times")
    assert refused(capsys, lambda: build.main(["validate", "DIR", "--seed", "1"])).startswith(
        "run_pipeline.py validate: error: unknown flag --seed")


def test_a_flag_that_is_only_a_prefix_is_not_guessed(capsys):
    """argparse's abbreviations would read --out as --output in the build (Beam's own parser
    does not): refused, like any other unknown flag."""
    line = refused(capsys, lambda: build.main(["--out", "x"]))
    assert "did you mean --output?" in line


# ---- both spellings -----------------------------------------------------------------------


def test_build_accepts_both_spellings_and_hands_beam_underscores():
    hyphens = beam_flags.parse_build_flags([
        "--sources-root=/s", "--no-train", "--max-bad-fraction", "0.5", "--final-validation",
        "off", "--direct-num-workers", "2", "--direct-running-mode=multi_processing",
        "--upstream-export"])
    underscores = beam_flags.parse_build_flags([
        "--sources_root=/s", "--no_train", "--max_bad_fraction", "0.5", "--final_validation",
        "off", "--direct_num_workers", "2", "--direct_running_mode=multi_processing",
        "--upstream_export"])
    assert hyphens == underscores
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

    from proactivebench_builder.pipeline.options import BuildOptions

    options = PipelineOptions(hyphens)
    opts = options.view_as(BuildOptions)
    assert (opts.sources_root, opts.no_train, opts.max_bad_fraction, opts.final_validation,
            opts.upstream_export) == ("/s", True, 0.5, "off", True)
    direct = options.view_as(DirectOptions)
    assert (direct.direct_num_workers, direct.direct_running_mode) == (2, "multi_processing")


def test_hyphenated_sources_root_is_honoured(capsys, tmp_path):
    """Before, `--sources-root /data/x` built the miniature sources: now the folder given is the
    one read (here it holds nothing, which the build says before any work)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    line = refused(capsys, lambda: build.main([
        "--sources-root", str(empty), "--scenarios", "quickdraw", "--output",
        str(tmp_path / "out"), RUNNER]))
    assert "source folders not found" in line and str(empty / "quickdraw") in line
    assert not os.path.exists(tmp_path / "out")


def test_hyphenated_build_flags_build(tmp_path, miniature_root):
    output = str(tmp_path / "out")
    assert build.main([f"--output={output}", "--sources-root", miniature_root,
                       "--scenarios=quickdraw", "--no-train", "--no-upstream-export",
                       "--final-validation=off", RUNNER, "--direct-num-workers=1"]) == 0
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert set(report["scenarios"]) == {"quickdraw"}
    assert not os.path.exists(os.path.join(output, "upstream"))
    assert not os.path.exists(os.path.join(output, "data"))


def test_subcommands_and_evaluate_accept_both_spellings(tmp_path, built_miniature):
    from proactivebench_builder.pipeline.commands import inspect, publish, validate

    for flag in ("--skip_frames", "--skip-frames"):
        assert validate.main([built_miniature, flag]) == 0
    for flag in ("--per_scenario", "--per-scenario"):
        out = str(tmp_path / flag.strip("-"))
        assert inspect.main([built_miniature, "--out", out, flag, "1", "--max-frames", "2"]) == 0
    for flag in ("--dry_run", "--dry-run"):
        args = publish.parser().parse_args([built_miniature, "--to", "x", flag,
                                            "--max-commit-files", "5"])
        assert args.dry_run and args.max_commit_files == 5
    common = ["evaluate", "--data", "D", "--model", "oracle", "--results", "r.jsonl"]
    hyphens = runtime_cli.parse_args([*common, "--first-round-only", "--random-suggestions",
                                      "--oeg-samples", "3", "--max-retries", "1"])
    underscores = runtime_cli.parse_args([*common, "--first_round_only", "--random_suggestions",
                                          "--oeg_samples", "3", "--max_retries", "1"])
    assert hyphens == underscores and hyphens.first_round_only and hyphens.max_retries == 1


def help_text(capsys, main, argv) -> str:
    try:
        status = main(argv)
    except SystemExit as exit_:   # argparse's --help exits 0
        status = exit_.code
    assert status == 0
    return capsys.readouterr().out


def test_help_shows_one_spelling_and_says_both_are_accepted(capsys):
    from proactivebench_builder.pipeline.commands import inspect, publish, validate

    for main, argv in ((build.main, ["--help"]), (validate.main, ["--help"]),
                       (inspect.main, ["--help"]), (publish.main, ["--help"]),
                       (runtime_cli.main, ["evaluate", "--help"])):
        text = help_text(capsys, main, argv)
        options = text.split("options:", 1)[1]
        declared = re.findall(r"^\s+(--[a-z][a-z0-9_-]*)", options, re.MULTILINE)
        assert declared and all("-" not in flag[2:] for flag in declared), declared
        assert re.search(r"accepted with '_' or '-' between its words: --\w+ or --[\w-]+\.",
                         text), text[-300:]


# ---- Beam's own options pass through ----------------------------------------------------------


def test_real_beam_options_pass_through():
    argv = beam_flags.parse_build_flags([
        "--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:1", "--temp_location=/t",
        "--project=p", "--region=europe-west1", "--setup_file=./setup.py",
        "--direct_num_workers", "3", "--experiments=use_runner_v2", "--job-name=x"])
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
    from apache_beam.runners.dask.dask_runner import DaskOptions

    options = PipelineOptions(argv)
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location, cloud.job_name) == (
        "p", "europe-west1", "/t", "x")
    assert options.view_as(DaskOptions).address == "tcp://127.0.0.1:1"


def test_flags_after_a_lone_double_dash_go_to_beam_unchecked():
    """The way out for a runner service's option that this Beam release does not declare."""
    assert beam_flags.parse_build_flags(["--sources-root=/s", "--", "--some-service-option=1"]) == [
        "--sources_root=/s", "--some-service-option=1"]


def test_every_option_beam_knows_is_accepted(capsys):
    """The check is exactly Beam's list: no flag of any PipelineOptions subclass is called
    unknown (a value this test makes up may still be refused, as Beam would refuse it)."""
    parser = beam_flags.beam_flags_parser(["--runner=DaskRunner"])
    flags = [f for f in parser.flag_actions if f.startswith("--")]
    assert {"--runner", "--direct_running_mode", "--temp_location", "--project", "--region",
            "--setup_file", "--dask_client_address", "--sources_root",
            "--dask_npartitions"} <= set(flags)   # (the last: in a mutually exclusive group)
    for flag in flags:
        try:
            parser.parse_args([f"{flag}=1"] if parser.flag_actions[flag].nargs != 0
                              else [flag])
        except SystemExit:
            assert "unknown flag" not in capsys.readouterr().err
        except Exception:  # some of Beam's own actions fail on a made-up value, as in Beam
            pass


# ---- values, outputs, models, scenarios: one line, before any work ------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--seed", "abc"], "argument --seed: invalid int value: 'abc'"),
    (["--max_bad_fraction", "1.5"], "argument --max_bad_fraction: must be between 0 and 1"),
    (["--max_bad_fraction=-0.1"], "argument --max_bad_fraction: must be between 0 and 1"),
    (["--max_bad_fraction=nan"], "argument --max_bad_fraction: must be between 0 and 1"),
    (["--filter_threshold", "0"], "argument --filter_threshold: must be above 0 and at most 1"),
    (["--filter-threshold", "2"], "argument --filter_threshold: must be above 0 and at most 1"),
    (["--min_models", "0"], "argument --min_models: must be at least 1"),
    (["--min_models", "two"], "argument --min_models: expected an integer, got 'two'"),
    (["--final_validation", "quick"], "argument --final_validation: invalid choice: 'quick'"),
    (["--direct_num_workers", "x"], "argument --direct_num_workers: invalid int value: 'x'"),
    (["--scenarios", "quickdrw"], "--scenarios: unknown scenario 'quickdrw'; did you mean "
                                  "'quickdraw'?"),
    (["--scenarios", "rod,,vsdo"], "--scenarios: unknown scenario 'vsdo'; did you mean 'vsod'?"),
    (["--scenarios", ","], "--scenarios ',' names no scenario"),
    (["--scenarios", ""], "--scenarios '' names no scenario"),
    (["--source", "quickdrw=/x"], "unknown scenario 'quickdrw'; did you mean 'quickdraw'?"),
    (["--runner", "FnApiRuner"], "--runner: unknown runner 'FnApiRuner'; did you mean "
                                 "'FnApiRunner'?"),
])
def test_build_refuses_bad_values_in_one_line(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    runner = [] if "--runner" in argv else [RUNNER]  # a flag may be given once
    line = refused(capsys, lambda: build.main([*runner, *argv]))
    assert line.startswith("run_pipeline.py: error: ") and message in line, line
    assert os.listdir(tmp_path) == []   # not even the miniature sources


@pytest.mark.build
def test_output_that_is_a_file_is_refused_before_the_build(tmp_path):
    """Before, the build ran and then failed with a 110-line traceback."""
    existing = tmp_path / "a-file"
    existing.write_text("not a folder")
    work = tmp_path / "work"
    work.mkdir()
    result = command([sys.executable, RUN_PIPELINE, "--output", str(existing), RUNNER],
                     cwd=str(work))
    assert result.returncode == 2
    assert stderr_lines(result) == [
        f"run_pipeline.py: error: --output {existing} is an existing file, not a folder"]
    assert os.listdir(work) == []   # the default build would have written its miniature here
    assert existing.read_text() == "not a folder"


def test_output_that_holds_other_files_is_refused(capsys, tmp_path, monkeypatch):
    """A build writes over what it finds: a folder of someone's files (a tester pointed
    --output at the project's docs/) is not a place for it."""
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("mine")
    line = refused(capsys, lambda: build.main(["--output", str(docs), RUNNER]))
    assert f"--output {docs} holds files no build wrote (e.g. 'notes.md')" in line, line
    assert sorted(os.listdir(docs)) == ["notes.md"]
    assert sorted(os.listdir(tmp_path)) == ["docs"]   # not even the miniature sources


def test_output_that_cannot_be_created_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    existing = tmp_path / "a-file"
    existing.write_text("x")
    line = refused(capsys, lambda: build.main(["--output", str(existing / "sub"), RUNNER]))
    assert line.endswith(f"--output {existing / 'sub'} cannot be created: {existing} is a file")
    # /proc refuses new entries to everyone, root included (a chmod'ed folder would not stop
    # root, which is who runs these tests in CI)
    line = refused(capsys, lambda: build.main(["--output", "/proc/proactivebench/out", RUNNER]))
    assert "--output /proc/proactivebench/out cannot be written: /proc: " in line
    assert sorted(os.listdir(tmp_path)) == ["a-file"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_output_in_a_read_only_folder_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        line = refused(capsys, lambda: build.main(["--output", str(locked / "out"), RUNNER]))
    finally:
        locked.chmod(0o700)
    assert f"cannot be written: {locked}: Permission denied" in line


@pytest.mark.parametrize("extra, message", [
    (["--model", "oracel"], "--model: unknown model spec 'oracel'; did you mean 'oracle'?"),
    (["--model", "opneai:gpt"], "did you mean 'openai:'?"),
    (["--model", "random:x"], "--model: random:SEED needs an integer seed, got 'random:x'"),
    (["--model", "oracle", "--judge", "openai:"], "--judge: 'openai:' names no model"),
    (["--model", "oracle", "--scenarios", "quickdraw,imagenetc"],
     "--scenarios: unknown scenario 'imagenetc'; did you mean 'imagenet_c'?"),
    (["--model", "oracle", "--split", "tset"], "argument --split: invalid choice: 'tset'"),
    (["--model", "oracle", "--concurrency", "0"], "argument --concurrency: must be at least 1"),
    (["--model", "oracle", "--timeout", "-1"], "argument --timeout: must be a positive number"),
])
def test_evaluate_refuses_models_scenarios_and_values_in_one_line(capsys, tmp_path, extra,
                                                                   message):
    results = tmp_path / "r.jsonl"
    line = refused(capsys, lambda: runtime_cli.main([
        "evaluate", "--data", str(tmp_path), "--results", str(results), *extra]))
    assert line.startswith("python -m proactivebench_builder.runtime evaluate: error: ")
    assert message in line, line
    assert not results.exists()


@pytest.mark.build
def test_unknown_model_as_a_user_runs_it(tmp_path):
    """One line, exit 2."""
    result = command([*EVALUATE, "--data", str(tmp_path), "--model", "oracel", "--results",
                      str(tmp_path / "r.jsonl")], cwd=str(tmp_path))
    assert result.returncode == 2
    assert len(stderr_lines(result)) == 1 and "did you mean 'oracle'?" in result.stderr


def test_hf_adapter_names_an_install_that_works():
    from proactivebench_builder.runtime import model_specs, models

    assert "proactivebench-builder[" not in models.TRANSFORMERS_MISSING
    assert 'pip install -e ".[transformers]"' in models.TRANSFORMERS_MISSING
    installed = all(__import__("importlib").util.find_spec(m) for m in ("transformers", "torch"))
    if not installed:
        with pytest.raises(model_specs.ModelSpecError,
                           match=re.escape(models.TRANSFORMERS_MISSING)):
            model_specs.load_model("hf:Qwen/Qwen2.5-VL-3B-Instruct")


def test_debug_shows_the_traceback_of_a_refusal(capsys):
    assert build.main(["--scenarios", "nope", "--debug", RUNNER]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith(
        "run_pipeline.py: error: --scenarios: unknown scenario 'nope'")


def test_flags_declared_in_groups_are_checked_as_the_parser_s_own(capsys):
    parser = CommandParser(prog="x")
    parser.add_argument_group("some").add_argument("--in_group")
    either = parser.add_mutually_exclusive_group()
    either.add_argument("--one_way")
    either.add_argument("--other_way", action="store_true")
    args = parser.parse_args(["--in-group", "a", "--one-way=b"])
    assert (args.in_group, args.one_way, args.other_way) == ("a", "b", False)
    for argv, message in ((["--in_group", "a", "--in-group", "b"], "--in_group given 2 times"),
                          (["--one_wy", "b"], "unknown flag --one_wy; did you mean --one_way?")):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert message in capsys.readouterr().err


def test_spelling_is_normalised_only_for_flags():
    parser = CommandParser(prog="x")
    parser.add_argument("--some_flag")
    parser.add_argument("value", nargs="?")
    args = parser.parse_args(["--some-flag=a-b_c", "x-y"])
    assert (args.some_flag, args.value) == ("a-b_c", "x-y")
    assert canonical("--a-b_c") == "--a_b_c" and canonical("-x") == "-x"


# ---- the known noise ----------------------------------------------------------------------------


@pytest.mark.build
def test_no_known_noise_in_a_first_build(tmp_path):
    """A first build in an empty folder writes the miniature sources (ChangeIt's WebM video
    among them) and prints no warning that means nothing to a user."""
    result = command([sys.executable, RUN_PIPELINE, "--scenarios=changeit", RUNNER,
                      "--no_upstream_export"], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(tmp_path / "build" / "miniature_sources" / "changeit")
    output = result.stdout + result.stderr
    assert "apitools not found" not in output and "'VP80' is not supported" not in output
    assert "WARNING" not in output, output
    for args in ([sys.executable, RUN_PIPELINE, "--help"],
                 [sys.executable, RUN_PIPELINE, "validate", str(tmp_path / "build" /
                                                                "proactivebench")]):
        result = command(args, cwd=str(tmp_path))
        assert result.returncode == 0, result.stderr
        assert "apitools not found" not in result.stdout + result.stderr


# ---- Ctrl-C --------------------------------------------------------------------------------


CATEGORIES, DRAWINGS = 60, 12


def write_corpus(root: str) -> str:
    """A real-format QuickDraw corpus big enough that shards are still being written when the
    interrupt lands (60 categories x 12 drawings, 600 samples rendered as they are written)."""
    folder = os.path.join(root, "quickdraw", "simplified")
    os.makedirs(folder)
    for c, category in enumerate(manifest_of("quickdraw")["classes"][:CATEGORIES]):
        rng = random.Random(f"ctrl-c/{category}")
        with open(os.path.join(folder, f"{category}.ndjson"), "w", encoding="utf-8") as out:
            for d in range(DRAWINGS):
                strokes = [[[rng.randint(0, 255) for _ in range(4)],
                            [rng.randint(0, 255) for _ in range(4)]]
                           for _ in range(rng.randint(3, 7))]
                out.write(json.dumps({
                    "word": category, "countrycode": "US",
                    "timestamp": "2017-03-01 20:41:00.1 UTC", "recognized": True,
                    "key_id": str(5100000000000000 + c * 1000 + d), "drawing": strokes}) + "\n")
    return root


def temporary_files(output: str) -> list[str]:
    """The shards being written under `output` (not the build's other files written under a
    temporary name: build.json's first "building" is written so before the build starts)."""
    return [os.path.join(folder, n) for folder, _, names in os.walk(output) for n in names
            if n.startswith(".tmp-") and n.endswith(".parquet")]


def interrupt_while_writing(args: list[str], output: str) -> tuple[int, str]:
    """Start a build in its own process group, wait until a shard is being written under the
    output, then send SIGINT to the whole group, as a terminal's Ctrl-C does. Returns the exit
    status and what the build wrote on stderr after the interrupt."""
    process = subprocess.Popen([sys.executable, RUN_PIPELINE, f"--output={output}", *args],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not temporary_files(output):
            assert process.poll() is None, "the build ended before writing: " + "".join(lines)
            assert time.monotonic() < deadline, "no write began within 240 s"
            time.sleep(0.005)
        before = len(lines)
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=120)
        reader.join(timeout=30)
        return status, "".join(lines[before:])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.build
@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_ctrl_c_stops_the_build_in_one_line(tmp_path, mode):
    sources = write_corpus(str(tmp_path / "sources"))
    output = str(tmp_path / "out")
    workers = ["--direct_num_workers=2"] if mode == "multi_processing" else []
    status, after = interrupt_while_writing(
        [f"--sources_root={sources}", "--scenarios=quickdraw", "--no_train", RUNNER,
         f"--direct_running_mode={mode}", *workers], output)
    assert status == 130, after
    assert "Traceback" not in after and "Error" not in after, after
    assert after.strip().splitlines()[-1] == "run_pipeline.py: interrupted", after
    assert len(after.strip().splitlines()) <= 3, after
    # Nothing partial under a final name; no report claims a build: build.json, written as
    # "building" when the build starts, says it failed and why (core/buildfolder.py).
    for folder, _, names in os.walk(output):
        for name in names:
            if name.endswith(".parquet") and not name.startswith(".tmp-"):
                pq.read_table(os.path.join(folder, name))
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "failed" and report["failure"] == "interrupted (Ctrl-C)", report


@pytest.mark.build
@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_unusable_source_folder_is_one_line(tmp_path, workers):
    """A source folder its scenario cannot list (here: no .ndjson files) fails the build in one
    line, in-process and in worker processes, instead of Beam's tracebacks (twice, from the
    worker's stderr and from its relayed log records)."""
    (tmp_path / "src" / "quickdraw" / "simplified").mkdir(parents=True)
    result = command([sys.executable, RUN_PIPELINE, f"--sources_root={tmp_path / 'src'}",
                      "--scenarios=quickdraw", f"--output={tmp_path / 'out'}", RUNNER,
                      f"--direct_num_workers={workers}"], cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = [line for line in stderr_lines(result) if " INFO " not in line]
    assert lines == [f"BUILD FAILED: quickdraw: no .ndjson files under "
                     f"{tmp_path / 'src' / 'quickdraw' / 'simplified'} (expected the "
                     "'simplified' family, one file per category)"], result.stderr


# ---- keep lists ----------------------------------------------------------------------------

def test_a_mistyped_keep_list_keyword_says_which_was_meant(capsys, tmp_path):
    code = build.main([f"--output={tmp_path / 'out'}", f"--import_upstream={tmp_path}",
                       "--keep_list=relased", RUNNER])
    line = capsys.readouterr().err.strip()
    assert code != 0 and "\n" not in line
    assert "--keep_list 'relased': no such file; did you mean 'released'" in line


def test_build_takes_the_short_names_evaluate_takes():
    from proactivebench_builder.pipeline.commands.configure import choose_scenarios

    assert sorted(choose_scenarios("IN-C,QD")) == ["imagenet_c", "quickdraw"]
    assert sorted(choose_scenarios("ImageNet-C,quickdraw")) == ["imagenet_c", "quickdraw"]
    from proactivebench_builder.core.errors import UsageError

    with pytest.raises(UsageError, match="did you mean 'quickdraw'"):
        choose_scenarios("quickdrw")


def test_the_stamp_records_the_predictions_as_an_absolute_path(tmp_path, monkeypatch):
    from apache_beam.options.pipeline_options import PipelineOptions

    from proactivebench_builder.pipeline.commands.configure import selection_settings
    from proactivebench_builder.pipeline.options import BuildOptions
    from proactivebench_builder.transforms import config_aliases

    (tmp_path / "first_round.jsonl").write_text(json.dumps(
        {"model": "m", "config": "QuickDraw", "key": "QuickDraw/cat/1", "correct": True}) + "\n")
    monkeypatch.chdir(tmp_path)
    opts = PipelineOptions(["--predictions=first_round.jsonl"]).view_as(BuildOptions)
    selection = selection_settings(opts, config_aliases())
    assert selection.predictions == str(tmp_path / "first_round.jsonl")


def test_evaluate_shows_no_bar_when_asked_or_when_stderr_is_no_terminal(monkeypatch):
    args = runtime_cli.parse_args(["evaluate", "--data", "x", "--model", "oracle", "--results",
                                   "r.jsonl", "--no-progress"])
    assert args.no_progress and not runtime_cli.show_progress(args)

    class Terminal:
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert not runtime_cli.show_progress(args)
    args.no_progress = False
    assert runtime_cli.show_progress(args)
    monkeypatch.setattr(sys, "stderr", open(os.devnull, "w"))
    assert not runtime_cli.show_progress(args)


def test_importing_a_missing_folder_says_no_such_folder(capsys, tmp_path):
    code = build.main([f"--output={tmp_path / 'out'}", f"--import_upstream={tmp_path / 'nope'}",
                       RUNNER])
    line = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in line
    assert f"--import_upstream {tmp_path / 'nope'}: no such folder" in line
    assert not (tmp_path / "out").exists()


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


def test_evaluate_data_naming_a_file_says_it_is_not_a_folder(capsys, built_miniature):
    line = refused(capsys, lambda: runtime_cli.main([
        "evaluate", "--data", os.path.join(built_miniature, "README.md"), "--model", "oracle",
        "--results", "r.jsonl"]))
    assert "not a folder" in line


@pytest.mark.parametrize("value, says", [("-1", "at least 1"), ("0", "at least 1"),
                                         ("1000", "core")])
def test_an_unusable_worker_count_is_one_line(capsys, tmp_path, value, says):
    line = refused_build(capsys, tmp_path, f"--direct_num_workers={value}")
    assert "--direct_num_workers" in line and says in line, line


def test_an_output_the_launcher_cannot_read_back_is_one_line(tmp_path, miniature_root):
    sources = copy_sources(miniature_root, tmp_path, "quickdraw")
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", "--no_progress", "--no_train",
         "--direct_num_workers=2", "--scenarios=quickdraw", f"--sources_root={sources}",
         "--output=memory://inputs-gaps/out"],
        capture_output=True, text=True, timeout=DEADLINE_S, cwd=str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]


def run_fetch(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, RUN_PIPELINE, "fetch", "--sources_root", str(tmp_path / "sources"),
         "--scenarios", "rod", "--retries", "0", "--no_progress", *flags],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))


@pytest.mark.build
@pytest.mark.parametrize("mirror", ["nosuch://x", "file:///etc"])
def test_a_mirror_that_is_not_http_is_one_line_before_any_request(tmp_path, mirror):
    result = run_fetch(tmp_path, "--mirror", mirror)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "expected an http(s) URL" in lines[0], \
        result.stderr


@pytest.mark.build
def test_a_mirror_url_that_cannot_be_split_is_one_line(tmp_path):
    result = run_fetch(tmp_path, "--mirror", "http://[::1")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("flag, named", [
    ("--set=quickdraw.samples_per_class=-1", "quickdraw.samples_per_class"),
    ("--set=quickdraw.samples_per_class=abc", "quickdraw.samples_per_class"),
    ("--set=rod.read_from=tarball", "rod.read_from"),
    ("--set=coco.train_ambiguous_fraction=1.5", "coco.train_ambiguous_fraction"),
    ("--set=quickdraw.samples_per_class=true", "quickdraw.samples_per_class"),
    ("--max_bad_fraction=2", "--max_bad_fraction"),
    ("--filter_threshold=-0.1", "--filter_threshold"),
])
def test_bad_parameter_values_stop_before_any_work(flag, named, tmp_path, miniature_root, capsys):
    output = str(tmp_path / "out")
    try:
        code = main_command.main([f"--output={output}", f"--sources_root={miniature_root}",
                                   "--scenarios=quickdraw,rod,coco", RUNNER, flag])
    except SystemExit as stopped:  # argparse's own one-line error for a flag's value
        code = stopped.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and named in err[0], err
    assert not os.path.exists(output)
