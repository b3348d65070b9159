"""What a command says it is doing (`core/phases.py`): the choice of bars, lines or nothing, a
phase's line written before its work, a bar's count, and nothing outside a command."""
from __future__ import annotations

import threading

from conftest import FakeStream
from proactivebench_builder.core import phases


def test_bars_on_a_terminal_lines_elsewhere_nothing_with_no_progress():
    assert phases.mode_for(None, FakeStream(tty=True)) == phases.BAR
    assert phases.mode_for(None, FakeStream(tty=False)) == phases.LINES
    assert phases.mode_for(None, object()) == phases.LINES  # no isatty at all
    assert phases.mode_for(True, FakeStream(tty=False)) == phases.BAR      # --progress
    assert phases.mode_for(False, FakeStream(tty=True)) is None            # --no_progress


def test_a_phase_line_is_written_before_its_work():
    stream = FakeStream(tty=False)
    with phases.showing(phases.LINES, "run_pipeline.py validate", stream=stream):
        with phases.phase("checking the sha256 of 3 shards", total=2_500_000, unit="B"):
            assert stream.getvalue() == ("run_pipeline.py validate: checking the sha256 of 3 "
                                         "shards (2.5 MB)\n")
        with phases.phase("asking the Hub for me/x"):
            pass
    assert stream.getvalue().splitlines()[1] == "run_pipeline.py validate: asking the Hub for me/x"


def test_lines_can_go_to_a_log():
    said = []
    with phases.showing(phases.LINES, write=said.append, stream=FakeStream(tty=False)):
        with phases.phase("checking every row", total=260, unit="rows"):
            pass
    assert said == ["checking every row (260 rows)"]


def test_a_bar_counts_updates_from_several_threads():
    stream = FakeStream(tty=True)
    with phases.showing(phases.BAR, stream=stream):
        with phases.phase("hashing", total=400, unit="files") as step:
            workers = [threading.Thread(target=lambda: [step.update() for _ in range(100)])
                       for _ in range(4)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            assert step.bar.n == 400
    assert "hashing" in stream.getvalue() and "400/400" in stream.getvalue()


def test_nothing_is_shown_outside_a_command_or_with_no_progress():
    stream = FakeStream(tty=True)
    with phases.phase("unseen", total=3) as step:
        step.update()
    with phases.showing(None, stream=stream):
        with phases.phase("unseen either"):
            pass
    assert stream.getvalue() == ""


def test_showing_restores_what_was_shown_before():
    outer, inner = FakeStream(tty=False), FakeStream(tty=False)
    with phases.showing(phases.LINES, stream=outer):
        with phases.showing(None, stream=inner):
            with phases.phase("quiet"):
                pass
        with phases.phase("said"):
            pass
    assert outer.getvalue() == "said\n" and inner.getvalue() == ""
