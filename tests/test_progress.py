"""The progress channel of a local build: what workers write, what the driver sums and draws, and
when the display is on. No timing is asserted: times are passed in."""
from __future__ import annotations

import json
import os

from proactivebench_builder.pipeline import progress
from proactivebench_builder.pipeline.progress import LISTED, READ, State, render, time_left

from conftest import FakeStream, run


def records(folder: str) -> list[dict]:
    lines = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            lines += [json.loads(line) for line in handle]
    return lines


def test_a_worker_appends_its_counts_as_deltas_in_a_file_of_its_own(tmp_path):
    folder = str(tmp_path)
    progress.report(folder, LISTED, "quickdraw", 5)
    progress.report(folder, READ, "quickdraw")
    progress.report(folder, READ, "quickdraw/train")
    progress.flush(folder)
    progress.report(folder, READ, "quickdraw")
    progress.flush(folder)
    progress.flush(folder)  # nothing new: no line
    assert os.listdir(folder) == [f"{os.getpid()}.jsonl"]
    assert records(folder) == [{"listed\tquickdraw": 5, "read\tquickdraw": 1,
                                "read\tquickdraw/train": 1}, {"read\tquickdraw": 1}]


def test_without_a_folder_nothing_is_written_or_kept(tmp_path):
    progress.report(None, READ, "quickdraw")
    progress.flush(None)
    assert not progress._REPORTERS.get(None)


def test_the_driver_sums_complete_lines_once_and_waits_for_a_half_written_one(tmp_path):
    folder = tmp_path
    (folder / "11.jsonl").write_text('{"listed\\tcoco": 4}\n{"read\\tcoco": 1}\n')
    (folder / "12.jsonl").write_text('{"read\\tcoco": 2}\n{"read\\tco')  # a line being written
    (folder / "notes.txt").write_text("not a progress file")
    state = State(start=0.0)
    state.read_folder(str(folder), now=1.0)
    assert (state.of(LISTED, "coco"), state.of(READ, "coco")) == (4, 3)
    with open(folder / "12.jsonl", "a") as handle:
        handle.write('co": 1}\n')
    state.read_folder(str(folder), now=2.0)
    state.read_folder(str(folder), now=3.0)  # nothing new: nothing counted twice
    assert state.of(READ, "coco") == 4


def test_the_rendered_lines_for_a_given_state():
    state = State(start=100.0)
    state.add({"listed\tquickdraw": 4, "listed\tquickdraw/train": 4, "listed\tcoco": 2},
              now=110.0)
    state.add({"read\tquickdraw": 3, "read\tquickdraw/train": 1, "read\tcoco": 2,
               "built\tquickdraw": 30, "built\tquickdraw/train": 50, "built\tcoco": 7}, now=130.0)
    lines = render(state, now=130.0)
    # 6 of 10 units read in the 20 s since listing: 4 left take ~13 s
    assert lines[0] == "reading units 6/10 (60%), ~00:13 left to read, elapsed 00:30"
    assert lines[1:] == [
        "  coco        units         2/2  samples      7              ",
        "  quickdraw   units         4/8  samples     30  train     50"]


def test_the_headline_follows_the_phases():
    state = State(start=0.0)
    assert render(state, now=5.0) == ["listing units, elapsed 00:05"]
    state.add({"listed\tvsod": 2, "read\tvsod": 2, "built\tvsod": 9}, now=10.0)
    assert render(state, now=20.0)[0] == "building samples (9 built), elapsed 00:20"
    state.add({"planned\tvsod": 4, "planned\ttrain": 2}, now=30.0)
    state.add({"written\tvsod": 3}, now=60.0)
    lines = render(state, now=60.0)
    assert lines[0] == "writing shards 3/6 (50%), ~00:30 left, elapsed 01:00"
    assert lines[1:] == [
        "  train" + " " * 56 + "shards 0/2",  # the train split's shards, over every scenario
        "  vsod        units         2/2  samples      9                shards 3/4"]
    state.add({"written\tvsod": 1, "written\ttrain": 2}, now=70.0)
    assert render(state, now=3725.0)[0] == "writing shards 6/6 (100%), ~00:00 left, elapsed 1:02:05"


def test_time_left():
    assert time_left(0, 10, 0.0, 5.0) is None      # nothing done yet: no rate
    assert time_left(5, 10, 0.0, 10.0) == 10.0
    assert time_left(10, 10, 0.0, 10.0) == 0.0
    assert time_left(0, 0, None, 1.0) is None


def test_quiet_when_not_a_terminal_unless_asked():
    assert progress.enabled(None, FakeStream(tty=True))
    assert not progress.enabled(None, FakeStream(tty=False))
    assert not progress.enabled(None, object())  # no isatty at all
    assert progress.enabled(True, FakeStream(tty=False))       # --progress
    assert not progress.enabled(False, FakeStream(tty=True))   # --no_progress / --no-progress


def test_progress_flags_in_both_spellings():
    from apache_beam.options.pipeline_options import PipelineOptions

    from proactivebench_builder.pipeline.options import BuildOptions

    for argv, expected in (([], None), (["--progress"], True), (["--no_progress"], False),
                           (["--no-progress"], False)):
        assert PipelineOptions(argv).view_as(BuildOptions).progress is expected


def test_the_display_draws_every_line_and_removes_its_folder(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    (folder / "1.jsonl").write_text('{"listed\\tmvpn": 3, "read\\tmvpn": 1}\n')
    stream = FakeStream(tty=False)
    display = progress.Display(str(folder), stream, every=3600)
    with display.showing():
        pass
    text = stream.getvalue()
    assert "reading units 1/3 (33%)" in text and "mvpn        units         1/3" in text
    assert not folder.exists()


def test_a_build_with_progress_forced_on_reports_every_unit_and_shard(tmp_path, miniature_root,
                                                                       capfd):
    report = run(str(tmp_path / "out"), miniature_root, "quickdraw,mvpn", "--progress")
    err = capfd.readouterr().err
    lines = err.replace("\r", "\n").splitlines()
    assert any(line.startswith("writing shards") for line in lines)
    for name in ("quickdraw", "mvpn"):
        last = [line for line in lines if line.strip().startswith(name + " ")][-1]
        read, listed = last.split("units", 1)[1].split()[0].split("/")
        assert read == listed != "0", last
        assert f"samples {report['scenarios'][name]['samples']:>6}" in last, last
        written, planned = last.rsplit("shards", 1)[1].split()[0].split("/")
        assert written == planned != "0", last


def test_the_checks_after_the_pipeline_are_said_in_the_log_before_they_run(
        tmp_path, miniature_root, monkeypatch):
    """Stderr not a terminal: each check of the written folder is a line of the build's log,
    said before its work starts."""
    from proactivebench_builder.core import buildfolder
    from proactivebench_builder.pipeline.commands import build, validate

    class Log(list):
        def info(self, message, *args):
            self.append(message % args if args else message)

        warning = info

    log, at_call = Log(), {}  # the log, and its last line at the first call of each check

    def watch(owner, name: str) -> None:
        original = getattr(owner, name)

        def call(*args, **kwargs):
            at_call.setdefault(name, log[-1])
            return original(*args, **kwargs)
        monkeypatch.setattr(owner, name, call)

    monkeypatch.setattr(build, "LOG", log)
    watch(build, "write_build_plots")
    watch(buildfolder, "_sizes_and_sha256")
    watch(validate, "row_problems")
    report = run(str(tmp_path / "out"), miniature_root, "rod")
    checks = log[log.index(next(line for line in log if line.startswith("drawing"))):]
    rows = sum(report["scenarios"]["rod"]["rows"].values())
    assert checks[:3] == [
        "drawing the build's plots",
        f"checking the sha256 of {len(report['files']) + len(report['report_files'])} shards "
        f"and reports ({checks[1].split(' (')[1]}",
        f"checking every row against the record contract (frames not read) ({rows} rows)"]
    assert at_call == {"write_build_plots": checks[0], "_sizes_and_sha256": checks[1],
                       "row_problems": checks[2]}
