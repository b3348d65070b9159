"""Typed failures across the worker boundary.

An exception raised in a DoFn reaches the launcher only as the text Beam makes of it (a worker
process, a Dask worker and Dataflow all send back a traceback), so its type is lost. A DoFn that
can fail for a reason the user must be told in one line (a source folder its scenario cannot
read, a full disk) runs under `recorded(...)`: before the error goes on up, its type and fields
are written as a small JSON record into the build's failures folder. When the pipeline fails,
the launcher reads the first record back (`raise_recorded`) and raises the typed error (a
`SourceError`, an `OutputError`) instead of the runner's text; with no record, the runner's
error stays what it was: a bug, with its traceback.

The folder is a temporary folder of the launcher's machine on a local runner (so a full output
disk cannot stop the record) and `<output>/.failures` elsewhere (the output is a place every
worker reaches); it is removed once read.
"""
from __future__ import annotations

import contextlib
import json
import uuid

from proactivebench_builder.core import fileio
from proactivebench_builder.core.errors import (
    CommandError, OutputError, ScenarioCodeError, StoreFailed, command_error_class)
from proactivebench_builder.transforms import base, get_scenario


@contextlib.contextmanager
def recorded(folder: str | None, scenario: str | None = None):
    """Record an error raised inside (then let it go on up): a CommandError (a SourceError, a
    scenario's ManifestError, ...) and an OSError by their type, an error raised in the code of
    `scenario` (its listing, its frames: its author's to fix) as a ScenarioCodeError naming it,
    anything else (a bug) by its one line, for build.json's `failure`."""
    try:
        yield
    except CommandError as err:
        _write(folder, {"type": "command", "class": type(err).__name__,
                        "message": _first_line(err)})
        raise
    except OSError as err:
        if err.errno:
            _write(folder, {"type": "OSError", "errno": err.errno, "strerror": err.strerror,
                            "filename": err.filename})
        else:
            _write(folder, {"type": "bug", "message": f"{type(err).__name__}: {_first_line(err)}"})
        raise
    except Exception as err:
        line = _scenario_failure(err, scenario)
        if line:
            _write(folder, {"type": "command", "class": "ScenarioCodeError", "message": line})
        elif fileio.is_store_error(err):  # a remote output's store failed part way
            _write(folder, {"type": "command", "class": "OutputError", "message": (
                f"the store failed: {fileio.store_error_text(err)}; nothing it wrote is taken "
                "for complete (build.json does not say ok); run the same build again once the "
                "store answers")})
        else:
            _write(folder, {"type": "bug", "message": f"{type(err).__name__}: {_first_line(err)}"})
        raise


@contextlib.contextmanager
def store_failures_raised(scenario):
    """A remote store's client that fails while the scenario reads its source (a connection
    cut, an endpoint gone) raises StoreFailed: not a bad input, so not a dead letter; the same
    build run again reads it. A missing or unreadable file is still the input's."""
    try:
        yield
    except Exception as err:
        if isinstance(err, (ScenarioCodeError, StoreFailed)) or \
                not fileio.is_store_client_error(err):
            raise
        raise store_failed(scenario, err) from err


def store_failed(scenario, err: BaseException) -> StoreFailed:
    return StoreFailed(f"{scenario.name}: reading {scenario.root}: the store failed: "
                       f"{fileio.store_error_text(err)}; run the same build again")


def _scenario_failure(err: BaseException, scenario: str | None) -> str | None:
    if not scenario:
        return None
    try:
        return base.code_failure(err, get_scenario(results_scenario(scenario)))
    except Exception:  # noqa: BLE001 - no better line than the bug's own
        return None


def results_scenario(label: str) -> str:
    """The scenario a result label names (`<scenario>/train` for its train split)."""
    return label.split("/", 1)[0]


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0]


def _write(folder: str | None, record: dict) -> None:
    if not folder:
        return
    try:
        fileio.write_bytes_atomic(fileio.join(folder, f"{uuid.uuid4().hex}.json"),
                                  json.dumps(record).encode("utf-8"))
    except OSError:  # nowhere to record it: the runner's error is all there is
        pass


def _records(folder: str | None) -> list[dict]:
    if not folder or not fileio.is_dir(folder):
        return []
    found = []
    for name in fileio.list_names(folder):
        try:
            found.append(json.loads(fileio.read_bytes(fileio.join(folder, name))))
        except (OSError, ValueError):
            continue
    return found


def first_recorded(folder: str | None):
    """The typed error of a failure recorded in `folder` (the first by name), or None."""
    for record in _records(folder):
        if record.get("type") == "command":
            cls = command_error_class(record.get("class", "")) or CommandError
            return cls(record.get("message", ""))
        if record.get("type") == "OSError":
            return OutputError.of(OSError(record["errno"], record.get("strerror"),
                                          record.get("filename")))
    return None


def raise_recorded(folder: str | None, err: BaseException) -> None:
    """Raise the typed error a worker recorded for `err` (the runner's failure), if one did;
    else note on `err` the one line a worker recorded of it (`failure_line`), for the report."""
    typed = first_recorded(folder)
    if typed is not None:
        raise typed from err
    bugs = [r["message"] for r in _records(folder) if r.get("type") == "bug"]
    if bugs:
        err.failure_line = bugs[0]


def clear(folder: str | None) -> None:
    if folder and fileio.is_dir(folder):
        fs, path = fileio.filesystem(folder)
        fs.rm(path, recursive=True)
