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
from proactivebench_builder.core.errors import OutputError, SourceError


@contextlib.contextmanager
def recorded(folder: str | None):
    """Record a SourceError or an OSError raised inside (then let it go on up)."""
    try:
        yield
    except SourceError as err:
        _write(folder, {"type": "SourceError", "message": str(err).splitlines()[0]})
        raise
    except OSError as err:
        if err.errno:
            _write(folder, {"type": "OSError", "errno": err.errno, "strerror": err.strerror,
                            "filename": err.filename})
        raise


def _write(folder: str | None, record: dict) -> None:
    if not folder:
        return
    try:
        fileio.write_bytes_atomic(fileio.join(folder, f"{uuid.uuid4().hex}.json"),
                                  json.dumps(record).encode("utf-8"))
    except OSError:  # nowhere to record it: the runner's error is all there is
        pass


def first_recorded(folder: str | None):
    """The typed error of a failure recorded in `folder` (the first by name), or None."""
    if not folder or not fileio.is_dir(folder):
        return None
    for name in fileio.list_names(folder):
        try:
            record = json.loads(fileio.read_bytes(fileio.join(folder, name)))
        except (OSError, ValueError):
            continue
        if record.get("type") == "SourceError":
            return SourceError(record.get("message", ""))
        if record.get("type") == "OSError":
            return OutputError.of(OSError(record["errno"], record.get("strerror"),
                                          record.get("filename")))
    return None


def raise_recorded(folder: str | None, err: BaseException) -> None:
    """Raise the typed error a worker recorded for `err` (the runner's failure), if one did."""
    typed = first_recorded(folder)
    if typed is not None:
        raise typed from err


def clear(folder: str | None) -> None:
    if folder and fileio.is_dir(folder):
        fs, path = fileio.filesystem(folder)
        fs.rm(path, recursive=True)
