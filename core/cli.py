"""The command-line plumbing every command shares, so that they all treat a mistake the same way.

- `CommandParser`: an `argparse.ArgumentParser` that accepts each flag with `_` or `-` between its
  words (`--sources_root` and `--sources-root`; --help shows the spelling it was declared with),
  refuses an unknown or misspelled flag before any work (exit 2, one line on stderr naming the
  closest valid flag), does not guess abbreviations (argparse would read `--scenario` as
  `--scenarios` but Beam's parser would not), and reports every error in one line.
- value types with a range (`fraction`, `positive_int`, ...) that argparse reports as one line.
- `run_command`: the entry points' wrapper: a user's mistake (`core.errors.UsageError`, or any
  `SystemExit` with a message) one line and exit 2, a `core.errors.CommandError` one line and
  its own exit code, Ctrl-C one line and exit 130; `--debug` shows the traceback of each.
- `CtrlC`, `launch`: Ctrl-C handling, from the first import on. SIGTERM (a scheduler, `kill`,
  `timeout`) and SIGHUP (the terminal closed) take the same path as Ctrl-C: the same cleanup,
  one line, and exit 128 + the signal's number.
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
import os
import signal
import sys
import threading
import traceback

from proactivebench_builder.core.errors import CommandError

DEBUG_HELP = ("show the full traceback of a refused command or an interruption (a bug always "
              "shows its traceback)")
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C
# the signals that stop a command the way Ctrl-C does (what a scheduler or a closing terminal
# sends); each is turned into a `Stopped`, so every `except KeyboardInterrupt` and `finally`
# cleans up after it as after Ctrl-C
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


class Stopped(KeyboardInterrupt):
    """A command stopped by a signal other than Ctrl-C (SIGTERM, SIGHUP)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_reason(signum: int) -> str:
    """What stopped a command, in words: 'interrupted (Ctrl-C)', 'stopped by SIGTERM'."""
    if signum == signal.SIGINT:
        return "interrupted (Ctrl-C)"
    return f"stopped by {signal.Signals(signum).name}"


def canonical(flag: str) -> str:
    """The spelling-free form of a long flag: '--sources-root' and '--sources_root' are the same
    flag. Short flags and plain values are returned unchanged."""
    if not flag.startswith("--") or flag == "--":
        return flag
    return "--" + flag[2:].replace("-", "_")


def closest(word: str, candidates, cutoff: float = 0.6) -> str | None:
    """The candidate nearest to a mistyped word, or None when nothing is close."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return found[0] if found else None


def unknown_name(kind: str, name: str, known) -> str:
    """'unknown scenario 'quickdrw'; did you mean 'quickdraw'? (known: ...)' (any case)."""
    by_lower = {k.lower(): k for k in known}
    guess = closest(name.lower(), by_lower)
    hint = f"; did you mean {by_lower[guess]!r}?" if guess else ""
    return f"unknown {kind} {name!r}{hint} (known: {', '.join(by_lower.values())})"


class CommandParser(argparse.ArgumentParser):
    """See the module docstring. What the checks need to know of the flags (their spellings,
    which take one value, the subcommands) is recorded as they are declared, through
    argparse's public methods."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        self.flag_actions: dict[str, argparse.Action] = {}  # every flag declared -> its action
        self.single_valued: set[argparse.Action] = set()  # declared with argparse's plain 'store'
        self.subcommands: argparse.Action | None = None  # what add_subparsers returned
        self.unknown_subcommand_note = ""
        super().__init__(*args, **kwargs)

    # ---- what was declared ----

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        return self.record(super().add_argument(*args, **kwargs), kwargs)

    def add_argument_group(self, *args, **kwargs):
        return self.recording(super().add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, **kwargs):
        return self.recording(super().add_mutually_exclusive_group(**kwargs))

    def recording(self, group):
        """`group`, whose flags are recorded as this parser's own (a group declares its flags
        into the parser without calling the parser's add_argument)."""
        add_argument, add_exclusive = group.add_argument, group.add_mutually_exclusive_group
        group.add_argument = lambda *args, **kwargs: self.record(add_argument(*args, **kwargs),
                                                                 kwargs)
        group.add_mutually_exclusive_group = lambda **kwargs: self.recording(
            add_exclusive(**kwargs))
        return group

    def record(self, action: argparse.Action, declared: dict) -> argparse.Action:
        for flag in action.option_strings:
            self.flag_actions[flag] = action
        if declared.get("action") in (None, "store"):
            self.single_valued.add(action)
        return action

    def add_subparsers(self, *, unknown_note: str = "", **kwargs):
        """argparse's, plus `unknown_note`: what the line refusing an unknown subcommand adds
        after the list of subcommands (e.g. what else the first word could have been)."""
        self.subcommands = super().add_subparsers(**kwargs)
        self.unknown_subcommand_note = unknown_note
        return self.subcommands

    def long_flags(self) -> dict[str, str]:
        """Canonical form -> the spelling the flag was declared with (what --help shows)."""
        return {canonical(s): s for s in self.flag_actions if s.startswith("--")}

    # ---- checks ----

    def format_help(self) -> str:
        """The help, ending with the note on spelling (its example: one of this command's own
        flags)."""
        example = next((f for f in self.long_flags().values() if "_" in f), None)
        if example is None:
            return super().format_help()
        return (super().format_help().rstrip("\n") + "\n\nEvery flag is accepted with '_' or "
                f"'-' between its words: {example} or {example.replace('_', '-')}.\n")

    def normalise(self, args: list[str]) -> list[str]:
        """Each known long flag rewritten to its declared spelling (values untouched; nothing
        after a bare `--`)."""
        flags = self.long_flags()
        out = []
        for i, arg in enumerate(args):
            if arg == "--":
                out.extend(args[i:])
                break
            if arg.startswith("--"):
                flag, eq, value = arg.partition("=")
                declared = flags.get(canonical(flag))
                if declared:
                    arg = declared + eq + value
            out.append(arg)
        return out

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        if self.subcommands is None:
            args = self.normalise(args)
            self.refuse_repeats(args)
            self.refuse_unknown_flags(args)
        else:  # the words from the subcommand's name on are its parser's to check
            at = self.subcommand_position(args)
            own = self.normalise(args[:at])
            self.refuse_repeats(own)
            if at < len(args):
                self.refuse_unknown_subcommand(args[at])
            args = own + args[at:]
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.refuse(extras)
        return namespace, extras

    @staticmethod
    def subcommand_position(args: list[str]) -> int:
        """Where the subcommand's name is: the first word that is not a flag (the flags a
        parser with subcommands takes before it are switches); len(args) when none is."""
        return next((i for i, arg in enumerate(args) if not arg.startswith("-")), len(args))

    def refuse_unknown_flags(self, args: list[str]) -> None:
        """Exit 2 naming the first unknown flag, before argparse reads the others: an unknown
        flag is often why a required one looks missing. (Nothing after a lone `--`.)"""
        unknown = [a for a in args if a.startswith("--") and a != "--"
                   and a.partition("=")[0] not in self.flag_actions]
        if unknown and "--" not in args[:args.index(unknown[0])]:
            self.refuse(unknown)

    def refuse_unknown_subcommand(self, word: str) -> None:
        """Exit 2 naming a word that is no subcommand and the closest one (argparse would say
        'invalid choice' and list them, or print the help first when --help follows)."""
        names = sorted(self.subcommands.choices)
        if word not in names:
            guess = closest(word, names)
            hint = f"; did you mean {guess}?" if guess else ""
            note = f"; {self.unknown_subcommand_note}" if self.unknown_subcommand_note else ""
            self.error(f"unknown subcommand {word!r}{hint} (subcommands: {', '.join(names)}"
                       f"{note})")

    def refuse_repeats(self, args: list[str]) -> None:
        """Exit 2 when a flag that takes one value is given twice (argparse keeps the last one
        silently: `--predictions a --predictions b` would filter by b alone). Repeatable flags
        (--set, --source, --model, ...) and on/off switches are not counted."""
        given: dict[argparse.Action, list[str]] = {}
        for arg in args:
            if arg == "--":
                break
            flag = arg.partition("=")[0]
            action = self.flag_actions.get(flag) if arg.startswith("--") else None
            if action in self.single_valued:
                given.setdefault(action, []).append(flag)
        for flags in given.values():
            if len(flags) > 1:
                self.error(f"{flags[0]} given {len(flags)} times; it takes one value (give it "
                           "once)")

    def refuse(self, extras: list[str]) -> None:
        """Exit 2 naming the first unknown flag and the closest known one (or the first stray
        value when every flag is known)."""
        for arg in extras:
            if arg.startswith("-") and not _is_number(arg):
                self.error(unknown_flag(arg.partition("=")[0], self.long_flags(), self.prog))
        self.error(f"unexpected argument {extras[0]!r} (run {self.prog} --help for usage)")

    def error(self, message: str):
        """One line on stderr and exit 2 (argparse would print the whole usage first)."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def unknown_flag(flag: str, flags: dict[str, str], prog: str) -> str:
    """'unknown flag --ouput; did you mean --output?' from canonical -> declared spellings."""
    guess = closest(canonical(flag), flags)
    hint = f"; did you mean {flags[guess]}?" if guess else ""
    return f"unknown flag {flag}{hint} (run {prog} --help for every flag)"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---- value types with a range ----------------------------------------------------------------


def _number(kind, text: str, check, expected: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    if value != value or not check(value):  # value != value: NaN passes no range
        raise argparse.ArgumentTypeError(f"must be {expected}, got {text}")
    return value


def non_empty(text: str) -> str:
    """A value that must not be empty: an unset shell variable (`--predictions "$PRED"`) would
    otherwise read as the flag not given and build another job."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def fraction(text: str) -> float:
    """A number in [0, 1]."""
    return _number(float, text, lambda v: 0.0 <= v <= 1.0, "between 0 and 1")


def positive_fraction(text: str) -> float:
    """A number in (0, 1]."""
    return _number(float, text, lambda v: 0.0 < v <= 1.0, "above 0 and at most 1")


def positive_int(text: str) -> int:
    return _number(int, text, lambda v: v >= 1, "at least 1")


def non_negative_int(text: str) -> int:
    return _number(int, text, lambda v: v >= 0, "0 or more")


def positive_float(text: str) -> float:
    return _number(float, text, lambda v: 0.0 < v < float("inf"), "a positive number")


def int_at_least(low: int):
    """An integer type that refuses values below `low` (e.g. --max_frames >= 2)."""
    def at_least(text: str) -> int:
        return _number(int, text, lambda v: v >= low, f"at least {low}")
    at_least.__name__ = f"int_at_least_{low}"
    return at_least


# ---- entry points ----------------------------------------------------------------------------


def run_command(prog: str, body, argv: list[str]) -> int:
    """Run `body(argv)` as a command: a user's mistake (a SystemExit with a message, such as a
    UsageError) is one line on stderr and exit 2; a `CommandError` is one line opened by its
    prefix and its own exit code; Ctrl-C is one line and exit 130 (what a shell expects). With
    --debug in argv these show their traceback. Any other exception is a bug and keeps its
    traceback."""
    debug = any(canonical(a) == "--debug" for a in argv)
    if not debug:
        quiet_store_clients()
    with CtrlC(quiet=not debug) as ctrl_c:
        try:
            return body(argv)
        except SystemExit as err:
            if not isinstance(err.code, str):  # argparse's own exit (--help, its one-line error)
                raise
            if debug:
                traceback.print_exc()
            print(f"{prog}: error: {one_line(err.code)}", file=sys.stderr)
            return 2
        except CommandError as err:
            if ctrl_c.pressed:
                return ctrl_c.report(prog)
            if debug:
                traceback.print_exc()
            opening = f"{prog}: error" if err.prefix is None else err.prefix
            print(f"{opening}: {one_line(str(err))}", file=sys.stderr)
            return err.exit_code
        except BaseException:
            # Beam re-raises a KeyboardInterrupt met inside a DoFn as a RuntimeError naming the
            # step, so the interruption is known by the signal, not by the exception's type.
            if not ctrl_c.pressed:
                raise
            if debug:
                traceback.print_exc()
            return ctrl_c.report(prog)


class _StoreClientNoise(logging.Filter):
    """asyncio's report of a store client's background task that failed ("Task exception was
    never retrieved": aiohttp's write of a request whose connection was cut): the request
    itself fails with that error, which the command reports in one line; the report adds a
    traceback per request. No code of ours runs on asyncio."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(("Task exception was never retrieved",
                                                   "Unclosed client session",
                                                   "Unclosed connector"))


def quiet_store_clients() -> None:
    """Library messages shown once, and only those that say something: asyncio's reports of a
    store client's failed background tasks left out; huggingface_hub's warnings (a 429 and its
    retry) printed by its own handler only, not a second time through the root handler Beam
    installs."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _StoreClientNoise) for f in logger.filters):
        logger.addFilter(_StoreClientNoise())
    hub = logging.getLogger("huggingface_hub")
    if hub.handlers:
        hub.propagate = False


def one_line(text: str) -> str:
    """A message as one line, whatever a library put in it (a server's error text spread over
    lines): its lines joined, so the last line a log or a CI summary keeps is the whole
    message, opened by what failed."""
    return " | ".join(line.strip() for line in str(text).splitlines() if line.strip())


def say_interrupted(prog: str, signum: int = signal.SIGINT) -> None:
    """The one line; on a terminal, below the ^C it echoed. (After SIGHUP the terminal may be
    gone: nothing to say, then.)"""
    newline = "\n" if signum == signal.SIGINT and _isatty(sys.stderr) else ""
    words = "interrupted" if signum == signal.SIGINT else stop_reason(signum)
    with contextlib.suppress(OSError, ValueError):
        print(f"{newline}{prog}: {words}", file=sys.stderr, flush=True)


def _isatty(stream) -> bool:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return stream.isatty()
    return False


_AT_INTERRUPT: list = []
_STOPPED: list[int] = []  # the stop signals this process received (see launch)


@contextlib.contextmanager
def at_interrupt(callback):
    """While active, Ctrl-C calls `callback()` first thing, before the interrupted code
    unwinds (e.g. to end worker processes before the runner's teardown talks to them)."""
    _AT_INTERRUPT.append(callback)
    try:
        yield
    finally:
        _AT_INTERRUPT.remove(callback)


class CtrlC:
    """While active (in the main thread): the first Ctrl-C (or SIGTERM, SIGHUP: STOP_SIGNALS) is
    remembered and raises KeyboardInterrupt as usual (`Stopped` for the others); a second one,
    received while the first unwinds, ends the process at once, silently, with the same exit
    status.

    With `quiet`, the first signal also silences what the teardown of an interrupted run says:
    log records, exceptions of background threads, "Exception ignored" messages. Beam's
    threads report every broken connection and closed stream as the runner stops, which only
    restates that the user stopped it."""

    def __init__(self, quiet: bool = True):
        self.quiet = quiet
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def pressed(self) -> bool:
        return self.signum is not None

    @property
    def exit_status(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    def report(self, prog: str) -> int:
        """Say what stopped the command; its exit status."""
        say_interrupted(prog, self.signum or signal.SIGINT)
        return self.exit_status

    def _handle(self, signum, frame):
        if self.pressed:
            os._exit(self.exit_status)
        self.signum = signum
        _STOPPED.append(signum)
        if self.quiet:  # before the callbacks: one of them ends the worker processes, and the
            logging.disable(logging.CRITICAL)  # runner's thread watching them reports it at once
            threading.excepthook = lambda args: None
            sys.unraisablehook = lambda unraisable: None
        for callback in list(_AT_INTERRUPT):
            callback()
        raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                previous = signal.signal(signum, self._handle)
                self._previous[signum] = signal.SIG_DFL if previous is None else previous
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


def launch(prog: str, module: str) -> int:
    """What an entry point runs: import `module` and call its `main()`, with Ctrl-C during the
    import (Beam's takes seconds) the same one line and exit 130 as later."""
    ctrl_c = CtrlC()
    try:
        with ctrl_c:
            main = importlib.import_module(module).main
    except KeyboardInterrupt:
        return ctrl_c.report(prog)
    status = main()
    if _STOPPED:
        exit_without_finalizing(status)
    return status


def exit_without_finalizing(status: int) -> None:
    """End a command a stop signal interrupted, once it has said so, without the interpreter's
    finalization. The command's own cleanup ran while it unwound (locks released, temporary
    files removed: `finally` clauses), but an interrupted runner can leave threads inside C
    code (gRPC's, Arrow's), and finalizing around them sometimes aborts the process ("Fatal
    Python error: PyGILState_Release", SIGABRT) instead of ending it with the signal's status."""
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


# ---- known noise -----------------------------------------------------------------------------

# Logged on the root logger by Beam's import of its BigQuery client (apache_beam.io.gcp), in
# every process that imports Beam: the build never touches BigQuery, so it means nothing to
# our users. Matched by its exact opening so that no other warning is hidden.
BEAM_APITOOLS_NOISE = "apitools not found, and bigquery client libraries are not available"


class _KnownNoise:
    """A logging filter dropping records whose message opens with one of `prefixes`."""

    def __init__(self, prefixes: tuple[str, ...]):
        self.prefixes = prefixes

    def filter(self, record) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.prefixes))


def silence_known_noise(logger=None, prefixes: tuple[str, ...] = (BEAM_APITOOLS_NOISE,)) -> None:
    """Install the filter on `logger` (default: the root logger; once), before Beam is imported.
    A logger's filters see only the records logged on it, not those its children propagate."""
    logger = logger or logging.getLogger()
    if not any(isinstance(f, _KnownNoise) for f in logger.filters):
        logger.addFilter(_KnownNoise(prefixes))
