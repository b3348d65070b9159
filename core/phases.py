"""What a command is doing while it works, on stderr: the phases of `validate`, `inspect`,
`publish` and the build's checks around its pipeline (docs/progress.md). The build's pipeline
has its own display (pipeline/progress.py); fetch's downloads have their own bar.

- On a terminal, each phase is a tqdm bar (how far it is of its total, its rate and the time
  left), left on the screen as one line once the phase ends.
- Elsewhere (a pipe, a log file, CI), each phase is one line as it starts, so a log says what
  the command was doing when it stopped.
- A command's `--no_progress` shows neither; `--progress` draws the bars into a file too.

Whatever is shown goes to stderr: stdout stays what scripts read. A phase is shown only inside
`showing(...)`, which each command enters with its choice; library callers (the evaluation
runtime, tests calling a function) see nothing. Updates may come from several threads.
"""
from __future__ import annotations

import contextlib
import sys
import threading

from tqdm import tqdm

BAR, LINES = "bar", "lines"  # how phases are shown; None: not at all

_shown = {"mode": None, "write": None, "stream": None}


def mode_for(choice: bool | None, stream=None) -> str | None:
    """--progress (True) draws bars, --no_progress (False) shows nothing; without either (None),
    bars on a terminal and one line per phase elsewhere."""
    if choice is False:
        return None
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return BAR if choice or (isatty and isatty()) else LINES


def add_flags(parser, what: str = "the progress bars") -> None:
    """A command's --progress / --no_progress (`args.progress`: True, False or None)."""
    parser.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help=f"draw {what} on stderr even when it is not a terminal")
    parser.add_argument("--no_progress", dest="progress", action="store_false",
                        help="show no progress on stderr (by default: bars on a terminal, one "
                             "line per phase elsewhere)")


@contextlib.contextmanager
def showing(mode: str | None, prog: str = "", write=None, stream=None):
    """Phases inside the block are shown by `mode` (BAR, LINES or None): bars on `stream`
    (stderr), lines through `write(text)` (default: "<prog>: <text>" on stderr)."""
    stream = stream or sys.stderr

    def default_write(text: str) -> None:
        stream.write(f"{prog}: {text}\n" if prog else f"{text}\n")
        stream.flush()

    before = dict(_shown)
    _shown.update(mode=mode, write=write or default_write, stream=stream)
    try:
        yield
    finally:
        _shown.update(before)


class Phase:
    """One phase under way: `update(n)` adds `n` to what is done (from any thread)."""

    def __init__(self, bar=None):
        self.bar = bar
        self.lock = threading.Lock()

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            with self.lock:
                self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def human_size(n: int) -> str:
    """Bytes in decimal units, as publishers give download sizes: 432 B, 1.4 GB."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


def count_text(total: int, unit: str) -> str:
    if unit == "B":
        return human_size(total)
    return f"{total:,} {unit}" if unit else f"{total:,}"


@contextlib.contextmanager
def phase(what: str, total: int | None = None, unit: str = ""):
    """`with phase("hashing the shards", total=n_bytes, unit="B") as step: step.update(k)`:
    says what the command is doing (see the module docstring); `unit="B"` counts bytes."""
    mode = _shown["mode"]
    if mode == LINES:
        _shown["write"](what + (f" ({count_text(total, unit)})" if total else ""))
    bar = None
    if mode == BAR:
        counted = {} if total or unit else {"bar_format": "{desc}: {elapsed}"}  # one step
        bar = tqdm(total=total, desc=what, unit=unit or "it", unit_scale=unit == "B",
                   unit_divisor=1000, file=_shown["stream"], leave=True, dynamic_ncols=True,
                   **counted)
    step = Phase(bar)
    try:
        yield step
    finally:
        step.close()
