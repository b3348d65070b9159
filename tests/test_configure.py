"""pipeline/commands/configure.py: the build's configuration, refused before any work when it
cannot be right."""
from __future__ import annotations

import os

import pytest

from conftest import RUNNER
from proactivebench_builder.pipeline.commands import main as cli


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
