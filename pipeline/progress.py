"""Progress of a long local build: per scenario, units read of units listed, samples built and
shards written, with an estimate of the time left (docs/progress.md).

The channel is a folder of small files, because DoFns may run in other processes
(`multi_processing`) and Beam's metrics are not available on every runner:

- on a worker, `report(folder, event, scenario)` adds to in-memory counts, and at most once per
  FLUSH_EVERY_S (and at the end of every bundle, `flush`) appends one JSON line of the counts
  added since the last line to `<folder>/<pid>.jsonl` (one file per process, a lock between
  its threads);
- on the driver, a `Display` thread reads the new complete lines of every file every
  POLL_EVERY_S, sums them (`State`) and redraws a few lines on stderr (`render`, drawn by tqdm).

Only a local build passes a folder to its DoFns (`params["progress_dir"]`): without one,
`report` does nothing, so other runners pay nothing. The display is on when stderr is a terminal,
unless `--no_progress`; `--progress` forces it on (e.g. into a log file).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections import Counter

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

FLUSH_EVERY_S = 1.0
POLL_EVERY_S = 1.0    # redraw on a terminal
PLAIN_EVERY_S = 10.0  # a plain block, when stderr is not a terminal (--progress into a file)
# events, reported per scenario label (`quickdraw`, `quickdraw/train`)
LISTED, READ, BUILT, PLANNED, WRITTEN = "listed", "read", "built", "planned", "written"
# profile records ("profile:<step>:<what>", what = wall_s, cpu_s, calls or bytes), written only
# when a folder is given; the benchmark's per-stage profile reads them (benchmarks/stage_profile.py)
PROFILE = "profile:"

# ---- the worker side --------------------------------------------------------------------------


class Reporter:
    """The counts one process adds, appended to its file as deltas."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, f"{os.getpid()}.jsonl")
        self.pending: Counter = Counter()
        self.lock = threading.Lock()
        self.last = time.monotonic()

    def add(self, event: str, label: str, n: int) -> None:
        with self.lock:
            self.pending[event + "\t" + label] += n
            if time.monotonic() - self.last >= FLUSH_EVERY_S:
                self._write()

    def add_profile(self, step: str, label: str, wall: float, cpu: float, nbytes: int) -> None:
        with self.lock:
            for what, n in (("wall_s", wall), ("cpu_s", cpu), ("calls", 1), ("bytes", nbytes)):
                if n:
                    self.pending[f"{PROFILE}{step}:{what}\t{label}"] += n

    def flush(self) -> None:
        with self.lock:
            self._write()

    def _write(self) -> None:
        self.last = time.monotonic()
        if not self.pending:
            return
        line = json.dumps(dict(self.pending), sort_keys=True) + "\n"
        self.pending.clear()
        try:  # one write of a short line in append mode: readers never see half of it mixed
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError:  # progress is a courtesy: never fail a build over it
            pass


_REPORTERS: dict[str, Reporter] = {}
_REPORTERS_LOCK = threading.Lock()


def reporter(folder: str) -> Reporter:
    with _REPORTERS_LOCK:
        if folder not in _REPORTERS or _REPORTERS[folder].path != os.path.join(
                folder, f"{os.getpid()}.jsonl"):  # a forked process gets a file of its own
            _REPORTERS[folder] = Reporter(folder)
        return _REPORTERS[folder]


def report(folder: str | None, event: str, label: str, n: int = 1) -> None:
    """Count `n` `event`s of scenario `label`; nothing when the build shows no progress."""
    if folder:
        reporter(folder).add(event, label, n)


def flush(folder: str | None) -> None:
    """Write what this process counted so far (called at the end of a bundle)."""
    if folder:
        reporter(folder).flush()


def record(folder: str | None, step: str, label: str, wall: float, cpu: float,
           nbytes: int = 0) -> None:
    """Add measured time and bytes of `step` for `label` (see `timed`)."""
    if folder:
        reporter(folder).add_profile(step, label, wall, cpu, nbytes)


class _Timed:
    """The wall and CPU time (this thread's) of one step of one scenario, and the bytes it
    reports through `add_bytes`; recorded when the block ends (also by an exception)."""

    __slots__ = ("folder", "step", "label", "nbytes", "_wall", "_cpu")

    def __init__(self, folder: str, step: str, label: str):
        self.folder, self.step, self.label, self.nbytes = folder, step, label, 0

    def add_bytes(self, n: int) -> None:
        self.nbytes += n

    def __enter__(self):
        self._wall, self._cpu = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc) -> None:
        reporter(self.folder).add_profile(self.step, self.label,
                                          time.perf_counter() - self._wall,
                                          time.thread_time() - self._cpu, self.nbytes)


class _NotTimed:
    __slots__ = ()

    def add_bytes(self, n: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


_NOT_TIMED = _NotTimed()


def timed(folder: str | None, step: str, label: str):
    """`with timed(folder, "write", name) as t:` records the block's wall and CPU time (and
    `t.add_bytes(n)`) under `step` and `label`; nothing when the build keeps no progress
    folder. A block around a generator's body also counts what fused steps downstream do
    with its elements on the same thread (Beam runs them as each element is yielded)."""
    return _Timed(folder, step, label) if folder else _NOT_TIMED


# ---- the driver side --------------------------------------------------------------------------


class State:
    """The sums of every record read so far, and when each phase started."""

    def __init__(self, start: float):
        self.start = start
        self.counts: Counter = Counter()
        self.offsets: dict[str, int] = {}
        self.phase_start: dict[str, float] = {}

    def add(self, record: dict, now: float) -> None:
        for key, n in record.items():
            if key.startswith(PROFILE):  # for the benchmark, not the display
                continue
            event = key.split("\t", 1)[0]
            if event in (LISTED, PLANNED):  # reading starts once units are listed, writing
                self.phase_start.setdefault(event, now)  # once shards are planned
            self.counts[key] += n

    def read_folder(self, folder: str, now: float) -> None:
        """Add the complete lines appended to the folder's files since the last call."""
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as handle:
                    handle.seek(self.offsets.get(name, 0))
                    data = handle.read()
            except OSError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            self.offsets[name] = self.offsets.get(name, 0) + len(complete)
            for line in complete.splitlines():
                try:
                    self.add(json.loads(line), now)
                except ValueError:
                    continue

    def total(self, event: str) -> int:
        return sum(n for key, n in self.counts.items() if key.split("\t", 1)[0] == event)

    def scenarios(self) -> list[str]:
        """Scenario names (a train label counts under its scenario), sorted."""
        return sorted({key.split("\t", 1)[1].split("/", 1)[0] for key in self.counts})

    def of(self, event: str, scenario: str, train: bool | None = None) -> int:
        """The count of `event` for `scenario`: its test branch, its train branch, or both."""
        test = 0 if train is True else self.counts.get(f"{event}\t{scenario}", 0)
        return test + (0 if train is False else self.counts.get(f"{event}\t{scenario}/train", 0))


def time_left(done: int, total: int, started: float | None, now: float) -> float | None:
    """Seconds left at the rate since the phase started; None before anything is done."""
    if started is None or done <= 0 or total <= done or now <= started:
        return None if total > done or total == 0 else 0.0
    return (total - done) * (now - started) / done


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return (f"{hours}:" if hours else "") + f"{rest // 60:02d}:{rest % 60:02d}"


def percent(done: int, total: int) -> str:
    return f"{done}/{total} ({100 * done // total}%)" if total else f"{done}"


def phase(state: State, now: float) -> str:
    """The headline: what the build is doing, how far it is, and the time left. The estimate
    is for the phase under way, at its rate so far: reading units (their sizes differ, so it
    is rough) and then writing shards, the last long phase; building samples and assigning
    shards in between has no total to measure against."""
    listed, read = state.total(LISTED), state.total(READ)
    planned, written = state.total(PLANNED), state.total(WRITTEN)
    elapsed = f"elapsed {clock(now - state.start)}"
    if not listed:
        return f"listing units, {elapsed}"
    if read < listed:
        left = time_left(read, listed, state.phase_start.get(LISTED), now)
        return f"reading units {percent(read, listed)}, ~{clock(left)} left to read, {elapsed}"
    if not planned:
        return f"building samples ({state.total(BUILT)} built), {elapsed}"
    left = time_left(written, planned, state.phase_start.get(PLANNED), now)
    return f"writing shards {percent(written, planned)}, ~{clock(left)} left, {elapsed}"


def render(state: State, now: float) -> list[str]:
    """The lines of the display: the headline, then one line per scenario."""
    lines = [phase(state, now)]
    for name in state.scenarios():
        units = f"{state.of(READ, name)}/{state.of(LISTED, name)}"
        line = f"  {name:<11} units {units:>11}  samples {state.of(BUILT, name, False):>6}"
        if not state.of(LISTED, name):  # the train split's shards, over every scenario
            line = f"  {name:<11}" + " " * (len(line) - 13)
        train = state.of(BUILT, name, True)
        line += f"  train {train:>6}" if train else " " * 14
        planned = state.of(PLANNED, name)
        lines.append(line + (f"  shards {state.of(WRITTEN, name)}/{planned}" if planned else ""))
    return lines


def enabled(choice: bool | None, stream) -> bool:
    """--progress / --no_progress decide; without either, only a terminal gets the display."""
    if choice is not None:
        return choice
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Display(threading.Thread):
    """Polls the progress folder and draws the lines: on a terminal, in place every `every`
    seconds (one tqdm bar per line); elsewhere (`--progress` into a file), as a plain block
    every `plain_every` seconds; and once more, plainly, at the end."""

    def __init__(self, folder: str, stream, every: float = POLL_EVERY_S,
                 plain_every: float = PLAIN_EVERY_S):
        super().__init__(name="build-progress", daemon=True)
        self.folder, self.stream = folder, stream
        self.tty = enabled(None, stream)
        self.every = every if self.tty else plain_every
        self.state = State(time.monotonic())
        self.bars: list = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self.draw()

    def lines(self) -> list[str]:
        now = time.monotonic()
        self.state.read_folder(self.folder, now)
        return render(self.state, now)

    def draw(self) -> None:
        lines = self.lines()
        if not self.tty:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
            return

        while len(self.bars) < len(lines):
            self.bars.append(tqdm(total=0, position=len(self.bars), bar_format="{desc}",
                                  file=self.stream, leave=False, dynamic_ncols=True))
        for bar, line in zip(self.bars, lines):
            bar.set_description_str(line, refresh=False)
            bar.refresh()

    def stop(self) -> None:
        self._halt.set()
        self.join()
        for bar in self.bars:  # cleared from the screen: the final state is written below
            bar.close()
        self.stream.write(("\r" if self.tty else "") + "\n".join(self.lines()) + "\n")
        self.stream.flush()

    @contextlib.contextmanager
    def showing(self):
        """Draw while the body runs; log lines go above the display meanwhile. The folder is
        removed at the end."""
        self.start()
        try:
            with logging_redirect_tqdm(loggers=[logging.getLogger("proactivebench_builder"),
                                                logging.getLogger()]):
                yield self
        finally:
            self.stop()
            shutil.rmtree(self.folder, ignore_errors=True)
