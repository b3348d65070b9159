"""`run_pipeline.py inspect` and the build plots: images exist, decode and have the expected
size; every link in index.html resolves to a file; sampling is deterministic; COCO views follow
docs/sources.md, 'COCO views'."""
from __future__ import annotations

import glob
import os
import re
import shutil
from urllib.parse import unquote

import pytest
from PIL import Image

from conftest import file_bytes, file_text, read_json
from test_buildfolder import (assert_one_clear_line, built, resign,  # noqa: F401 - a fixture
                              rewrite_shards, run_inspect)
from test_cli_errors import refused
from proactivebench_builder.core import buildfolder
from proactivebench_builder.pipeline.commands import main as build
from proactivebench_builder.pipeline import plots
from proactivebench_builder.pipeline.commands.inspect import (
    SHEET_WIDTH, THUMB, inspect_folder, main, render_sheet, shown_positions)
from proactivebench_builder.transforms.coco.play import box_after as coco_box
from proactivebench_builder.transforms.coco.play import crop_box

PER_SCENARIO = 2


@pytest.fixture(scope="module")
def inspected(built_miniature, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("inspect"))
    inspect_folder(built_miniature, out, per_scenario=PER_SCENARIO, seed=0)
    return out


def configs_of(built: str) -> list[str]:
    first_shards = glob.glob(os.path.join(built, "*", "*-00000-of-*.parquet"))
    return sorted({os.path.basename(os.path.dirname(p)) for p in first_shards} - {"data"})


def sheet_paths(root: str) -> list[str]:
    """Contact sheets (OUT/<config>/*.png), not the plots drawn into OUT/plots."""
    return sorted(p for p in glob.glob(os.path.join(root, "*", "*.png"))
                  if os.path.basename(os.path.dirname(p)) != "plots")


def decoded(path: str) -> Image.Image:
    with Image.open(path) as image:
        image.load()
        return image.copy()


def test_one_sheet_per_sampled_row(built_miniature, inspected):
    report = read_json(os.path.join(built_miniature, "reports", "build.json"))
    rows = {e["config"]: e["rows"]["test"] or e["rows"]["filtered_out"]
            for e in report["scenarios"].values() if e["config"]}
    for config in configs_of(built_miniature):
        sheets = glob.glob(os.path.join(inspected, config, "*.png"))
        assert len(sheets) == min(PER_SCENARIO, rows[config]), config


def test_sheets_decode_with_the_expected_size(inspected):
    sheets = sheet_paths(inspected)
    assert sheets
    for path in sheets:
        image = decoded(path)
        assert image.width == SHEET_WIDTH, path
        assert image.height > THUMB + 100, path


def test_every_link_in_the_page_resolves(inspected):
    page = file_text(os.path.join(inspected, "index.html"))
    links = re.findall(r'(?:href|src)="([^"]+)"', page)
    files = [link for link in links if not link.startswith("#")]
    assert files, "the page links no sheet"
    for link in files:
        assert "://" not in link and not link.startswith("/"), f"not relative: {link}"
        assert os.path.isfile(os.path.join(inspected, unquote(link))), link
    anchors = {a[1:] for a in links if a.startswith("#")}
    for anchor in anchors:
        assert f'id="{anchor}"' in page


def test_sampling_is_deterministic(built_miniature, inspected, tmp_path):
    again = str(tmp_path / "again")
    inspect_folder(built_miniature, again, per_scenario=PER_SCENARIO, seed=0)
    names = lambda root: [os.path.relpath(p, root) for p in sheet_paths(root)]
    assert names(again) == names(inspected)
    for name in names(again):
        assert file_bytes(os.path.join(again, name)) == \
            file_bytes(os.path.join(inspected, name))


def test_command_line(built_miniature, tmp_path, capsys):
    out = str(tmp_path / "cli")
    assert main([built_miniature, "--out", out, "--per-scenario", "1", "--seed", "3"]) == 0
    assert os.path.isfile(os.path.join(out, "index.html"))
    assert "contact sheets" in capsys.readouterr().out


def test_each_phase_is_said_before_its_work(built_miniature, tmp_path, stderr_at_calls):
    from proactivebench_builder.core import buildfolder
    from proactivebench_builder.pipeline.commands import inspect

    stderr_at_calls.watch(buildfolder, "_sizes_and_sha256")
    stderr_at_calls.watch(inspect, "render_sheet")
    assert main([built_miniature, "--out", str(tmp_path / "out"), "--per-scenario", "1"]) == 0
    said = [line.removeprefix("run_pipeline.py inspect: ") for line in stderr_at_calls.lines()]
    configs = len(configs_of(built_miniature))
    assert re.fullmatch(r"checking the sha256 of \d+ shards and reports \(.*B\)", said[0])
    assert said[1:] == [f"drawing 1 sampled row of each config ({configs} configs)"]
    first = {name: text.splitlines()[-1].removeprefix("run_pipeline.py inspect: ")
             for name, text in stderr_at_calls.at_first_call.items()}
    assert first == {"_sizes_and_sha256": said[0], "render_sheet": said[1]}


def test_default_output_is_inside_the_folder(built_miniature, tmp_path):
    copy = str(tmp_path / "built")
    shutil.copytree(built_miniature, copy, ignore=shutil.ignore_patterns("upstream"))
    assert main([copy, "--per-scenario", "1"]) == 0
    assert os.path.isfile(os.path.join(copy, "inspect", "index.html"))


def test_undecodable_frame_is_drawn_not_fatal():
    row = {"id": 0, "key": "X/1", "frame_ids": [0, 1], "first_image": 0, "reference_image": 1,
           "frames": [{"bytes": b"junk", "path": "a.png"}, {"bytes": b"", "path": "b.png"}],
           "prompt": "What is it?", "options": ["Add more details.", "I cannot tell."],
           "categories": ["A.", "B.", "C.", "D."], "answer": "A.", "num_images": 2}
    assert render_sheet(row, "QuickDraw", 32).width == SHEET_WIDTH


def test_shown_positions_keep_first_and_reference():
    shown = shown_positions(230, 117, 3, 32)
    assert 117 in shown and 3 in shown and 0 in shown and 229 in shown
    assert shown == sorted(set(shown)) and len(shown) <= 34
    assert shown_positions(5, 4, 0, 32) == [0, 1, 2, 3, 4]


COCO_CROP = {"left": 200.0, "top": 100.0, "width": 260.0, "height": 150.0}


@pytest.mark.parametrize("box", [coco_box, lambda row, k: crop_box(
    row, row["horizontal_step"] * k, row["vertical_step"] * k)])
def test_coco_views_follow_the_environment(box):
    # docs/sources.md ('COCO views'), checked against the upstream environment: a `left` move with
    # granularity 3 and h0 10 goes 190 -> 170; zoom (true sizes) goes (190,92,470,258) ->
    # (160,68,500,282) after granularity + 1 = 4 steps.
    left = {"crop": COCO_CROP, "direction": "left", "granularity": 3,
            "horizontal_step": 10.0, "vertical_step": 0.0}
    assert tuple(box(left, 1)) == (190, 100, 260, 150)
    assert tuple(box(left, 3)) == (170, 100, 260, 150)
    zoom = {"crop": COCO_CROP, "direction": "zoom", "granularity": 3,
            "horizontal_step": 10.0, "vertical_step": 8.0}
    assert tuple(box(zoom, 1)) == (190, 92, 470, 258)
    assert tuple(box(zoom, 4)) == (160, 68, 500, 282)


# ---- build plots ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plotted(built_miniature, tmp_path_factory) -> tuple[str, list[str]]:
    copy = str(tmp_path_factory.mktemp("plots") / "built")
    shutil.copytree(built_miniature, copy, ignore=shutil.ignore_patterns("upstream", "*.parquet"))
    for path in glob.glob(os.path.join(built_miniature, "*", "*.parquet")):
        target = os.path.join(copy, os.path.relpath(path, built_miniature))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(path, target)
    return copy, plots.write_build_plots(copy)


def test_build_plots_decode_with_the_expected_size(plotted):
    root, written = plotted
    report = read_json(os.path.join(root, "reports", "build.json"))["scenarios"]
    filters = read_json(os.path.join(root, "reports", "filter.json"))["scenarios"]
    reasons = sum(len(e["dead_letters_by_reason"]) for e in report.values())
    with_config = sum(1 for e in report.values() if e["config"])
    expected = {
        "samples_per_scenario.png": plots.bar_chart_height(len(report), 5),
        "frames_per_sample.png": plots.histogram_height(with_config),
        "dead_letters_by_reason.png": plots.bar_chart_height(reasons, 1),
        "filter_before_after.png": plots.bar_chart_height(len(filters), 2),
    }
    assert sorted(os.path.basename(p) for p in written) == sorted(expected)
    for path in written:
        image = decoded(path)
        assert image.size == (plots.WIDTH, expected[os.path.basename(path)]), path


def test_build_plots_are_byte_identical_when_redrawn(plotted):
    root, written = plotted
    before = {p: file_bytes(p) for p in written}
    plots.write_build_plots(root)
    assert {p: file_bytes(p) for p in written} == before


def test_frames_per_sample_reads_frame_ids_only(plotted):
    root, _ = plotted
    # the copy holds the shards only: frame counts need nothing else
    counts = plots.frame_counts(root, "QuickDraw")
    assert sum(counts.values()) > 0 and min(counts) >= 1


def test_dead_letter_chart_with_reasons():
    build = {"scenarios": {"quickdraw": {"dead_letters_by_reason": {"malformed line": 3,
                                                                    "unknown class": 1}}}}
    image = plots.dead_letters_chart(build)
    assert image.size == (plots.WIDTH, plots.bar_chart_height(2, 1))


def test_inspect_out_naming_a_file_is_one_line(capsys, built_miniature, tmp_path):
    (tmp_path / "afile").write_text("mine")
    line = refused(capsys, lambda: build.main(["inspect", built_miniature, "--out",
                                               str(tmp_path / "afile")]))
    assert "is a file" in line
    assert (tmp_path / "afile").read_text() == "mine"


def test_inspect_refuses_a_build_that_failed_or_did_not_finish(built, tmp_path, capsys):
    buildfolder.mark_finished(built, "too many bad inputs (test)")
    code, text = run_inspect(built, str(tmp_path / "a"), capsys)
    assert_one_clear_line(code, text, "too many bad inputs (test)")
    code, text = run_inspect(built, str(tmp_path / "b"), capsys, "--force")
    assert code == 0, text
    assert "too many bad inputs (test)" in text  # said, and drawn anyway
    with open(tmp_path / "b" / "index.html", encoding="utf-8") as handle:
        assert "too many bad inputs (test)" in handle.read()
    buildfolder.mark_building(built)
    code, text = run_inspect(built, str(tmp_path / "c"), capsys)
    assert_one_clear_line(code, text, "did not finish")


def test_inspect_refuses_a_damaged_shard(built, tmp_path, capsys):
    path = os.path.join(built, "QuickDraw", "test-00000-of-00001.parquet")
    os.remove(path)
    shutil.copy(os.path.join(built, "ImageNet-C", "test-00000-of-00001.parquet"), path)
    code, text = run_inspect(built, str(tmp_path / "a"), capsys)
    assert_one_clear_line(code, text, "QuickDraw/test-00000-of-00001.parquet")


def test_inspect_names_a_row_it_cannot_draw(built, tmp_path, capsys):
    """A re-signed shard whose rows have id null: one line per row, the others drawn."""
    def null_ids(rows):
        for row in rows:
            row["id"] = None
    rewrite_shards(built, "QuickDraw", null_ids)
    resign(built)
    code, text = run_inspect(built, str(tmp_path / "a"), capsys)
    assert "Traceback" not in text
    assert code == 0, text
    assert "QuickDraw" in text and "id None" in text, text
    assert os.path.exists(tmp_path / "a" / "index.html")
