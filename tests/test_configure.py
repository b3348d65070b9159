"""pipeline/commands/configure.py: the build's configuration, refused before any work when it
cannot be right."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import RUN_PIPELINE, RUNNER
from proactivebench_builder.pipeline.commands import main as cli
from proactivebench_builder.pipeline.commands import main as main_command


def refused(capsys, *argv) -> str:
    assert cli.main([RUNNER, "--no_progress", *argv]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("where", ["quickdraw/out", "out", ""])
def test_an_output_inside_or_holding_the_sources_is_refused(tmp_path, capsys, miniature_root,
                                                           where):
    """Built inside its sources, the next build would read its own output as source files, and
    clearing the output would delete sources: refused before any work."""
    output = os.path.join(miniature_root, where) if where else os.path.dirname(miniature_root)
    before = sorted(os.listdir(miniature_root))
    line = refused(capsys, f"--sources_root={miniature_root}", "--scenarios=quickdraw",
                   f"--output={output}")
    assert "a build writes apart from what it reads" in line or "holds files no build wrote" \
        in line, line
    assert sorted(os.listdir(miniature_root)) == before


def test_a_source_folder_given_alone_is_kept_apart_too(tmp_path, capsys, miniature_root):
    source = os.path.join(miniature_root, "quickdraw")
    line = refused(capsys, f"--source=quickdraw={source}", "--scenarios=quickdraw",
                   f"--sources_root={tmp_path}", f"--output={source}/build")
    assert f"is inside the source of quickdraw ({source})" in line


def test_an_import_whose_folder_is_inside_the_output_is_refused(tmp_path, capsys):
    output = tmp_path / "build"  # a build's folder (its report), holding its export
    (output / "upstream").mkdir(parents=True)
    (output / "reports").mkdir()
    (output / "reports" / "build.json").write_text('{"status": "ok"}')
    line = refused(capsys, f"--import_upstream={output / 'upstream'}", f"--output={output}")
    assert f"holds --import_upstream ({output / 'upstream'})" in line


def refused_build(capsys, tmp_path, *args: str, scenarios: str = "quickdraw") -> str:
    """Run a build expected to stop before any work; returns its one stderr line. The sources
    root does not exist: a build that got past the check would stop there, naming it instead."""
    output = str(tmp_path / "out")
    try:
        given = {arg.partition("=")[0] for arg in args}  # a flag may be given once
        defaults = [f for f in (f"--output={output}", f"--sources_root={tmp_path}/nosources",
                                f"--scenarios={scenarios}", RUNNER)
                    if f.partition("=")[0] not in given]
        code = main_command.main([*defaults, *args])
    except SystemExit as stopped:  # argparse's own one-line error for a flag's value
        code = stopped.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, lines)
    assert "source folders not found" not in lines[0], lines[0]
    assert not os.path.exists(output)
    return lines[0]


@pytest.mark.parametrize("value", [
    "[1", "{a: 1", "a: b: c", "*", "*anchor", "&a [*a, *a]", "!!python/object/apply:os.system [id]",
    "!!binary xyz", "'unclosed", "[" * 5000 + "]" * 5000, "\x00", "\ufeff[1"])
def test_a_set_value_that_is_not_plain_yaml_is_one_line(capsys, tmp_path, value):
    line = refused_build(capsys, tmp_path, f"--set=quickdraw.samples_per_class={value}")
    assert "quickdraw.samples_per_class" in line


def test_consistent_overrides_of_related_parameters_pass(tmp_path):
    """Both sides moved together: no rule is broken (the checks judge the values in force)."""
    from proactivebench_builder.pipeline.commands.configure import parameter_overrides
    from proactivebench_builder.transforms import load_scenarios

    scenarios = load_scenarios()
    got = parameter_overrides(["coco.granularity_min=6", "coco.granularity_max=7",
                               "coco.direction_weights={zoom: 2}", "mvpn.min_views=3",
                               "quickdraw.render_size=64", "quickdraw.render_padding=8"],
                              scenarios)
    assert got["coco"] == {"granularity_min": 6, "granularity_max": 7,
                           "direction_weights": {"zoom": 2}}
    assert got["quickdraw"] == {"render_size": 64, "render_padding": 8}


@pytest.mark.parametrize("flag, says", [
    ("--source=quickdraw=http://127.0.0.1:9/qd", "not the network"),
    ("--sources_root=https://127.0.0.1:9/sources", "not the network"),
    ("--sources_root=nosuch://x", "Protocol not known"),
    ("--import_upstream=http://127.0.0.1:9/release", "not the network"),
    ("--import_upstream=nosuch://x/release", "Protocol not known"),
])
def test_a_source_url_the_build_may_not_read_is_one_line(capsys, tmp_path, flag, says):
    """Today: an ImportError (HTTPFileSystem needs aiohttp) or ValueError traceback."""
    line = refused_build(capsys, tmp_path, flag)
    assert flag.split("=")[-1] in line and says in line, line


def test_an_upstream_release_whose_jsonl_is_a_fifo_is_one_line(capsys, tmp_path):
    folder = tmp_path / "release"
    folder.mkdir()
    os.mkfifo(folder / "QuickDraw_preprocessed.jsonl")
    line = refused_build(capsys, tmp_path, f"--import_upstream={folder}")
    assert "QuickDraw_preprocessed.jsonl" in line and "FIFO" in line, line


def released_counts_check(tmp_path, make) -> subprocess.CompletedProcess:
    """A build that checks the release's counts before any work (--keep_list released) on a
    release folder holding only QuickDraw's JSONL, made by `make(path)`."""
    release = tmp_path / "release"
    release.mkdir()
    make(str(release / "QuickDraw_preprocessed.jsonl"))
    return subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", "--no_progress",
         "--scenarios=quickdraw", f"--import_upstream={release}", "--keep_list=released",
         f"--output={tmp_path / 'out'}"],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path))


@pytest.mark.build
def test_a_release_that_is_not_the_release_is_one_line_before_any_work(tmp_path):
    result = released_counts_check(
        tmp_path, lambda path: open(path, "wb").write(b'{"id": 1}\n[1]\nnot json\n'))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert "is not the release's test/ folder" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.build
def test_a_release_line_nested_too_deeply_is_skipped_by_the_count(tmp_path):
    result = released_counts_check(tmp_path, lambda path: open(path, "wb").write(b"[" * 100000 + b"\n"))
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 2


def _fifo_check(tmp_path) -> str:
    try:
        result = released_counts_check(tmp_path, os.mkfifo)
    except subprocess.TimeoutExpired:
        return "hang"
    return result.stderr


@pytest.mark.build
def test_a_release_jsonl_that_is_a_fifo_is_one_line_when_counted(tmp_path):
    stderr = _fifo_check(tmp_path)
    assert stderr != "hang", "the build blocked on the FIFO"
    assert "named pipe" in stderr and "Traceback" not in stderr, stderr[-2000:]
