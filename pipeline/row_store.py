"""The build's row store: what crosses a shuffle is a key and a reference, not a row.

The local runner holds every grouped element in the build process between two stages and hands
each worker its whole part of a stage's input at once, so whatever crosses a shuffle is held in
memory by both, and grows with the data. A value that grows with the data (a candidate's frame
references, a built row) is therefore written once, packed (`results.packed`), to a file of this
store, and what crosses the shuffle is its reference (`results.RowRef`: file, offset, length)
with the few facts the next step decides on; the step that needs the value reads it back
(`fetch`, `fetch_many`).

A store file is written by one DoFn instance for one bundle (`RowStore`: opened at the first
value, closed when the bundle ends, before any later stage reads it) in the output folder, which
every worker of every runner reaches. Its name is a temporary file's (`fileio.temporary_name`,
ending in `-rows`): no card glob matches it, the next build's sweep of a killed build's leftovers
removes it, and the terminal step removes every store file once the shards are written
(`remove_store`). It holds about a hundredth of what the shards hold (references, prompts,
options; no frame bytes).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from proactivebench_builder.core import fileio, results
from proactivebench_builder.core.layout import TEMPORARY_NAME

STORE_SUFFIX = "-rows"
OPEN_FILES = 8  # store files a process keeps open for reading


class RowStore:
    """Append-only: `put` writes a value and returns its reference. One file per bundle, so a
    bundle retried by a runner writes a file of its own (the abandoned one is removed with the
    store)."""

    def __init__(self, output: str):
        self.output = output
        self._handle = None
        self._name = ""
        self._offset = 0

    def put(self, value) -> results.RowRef:
        data = results.packed(value)
        if self._handle is None:
            url = fileio.temporary_name(fileio.join(self.output, "store")) + STORE_SUFFIX
            fs, path = fileio.filesystem(url)
            fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self._handle = fs.open(path, "wb")
            self._name, self._offset = path.rsplit("/", 1)[-1], 0
        self._handle.write(data)
        ref = results.RowRef(self._name, self._offset, len(data))
        self._offset += len(data)
        return ref

    def close(self) -> None:
        """End the bundle's file (a later stage reads it only then)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.close()


_OPEN: OrderedDict = OrderedDict()  # (output, name) -> open file, the most recent last
_LOCK = threading.Lock()


def _read(output: str, ref: results.RowRef) -> bytes:
    with _LOCK:
        handle = _OPEN.pop((output, ref.name), None)
        if handle is None:
            fs, path = fileio.filesystem(fileio.join(output, ref.name))
            handle = fs.open(path, "rb")
            while len(_OPEN) >= OPEN_FILES:
                _OPEN.popitem(last=False)[1].close()
        _OPEN[(output, ref.name)] = handle
        handle.seek(ref.offset)
        data = handle.read(ref.length)
    if len(data) != ref.length:
        raise OSError(f"{ref.name}: the build's row store ends at {ref.offset + len(data)}, "
                      f"expected {ref.offset + ref.length} (changed while the build ran?)")
    return data


def fetch(output: str, ref: results.RowRef):
    """The value stored at `ref`."""
    return results.unpacked(_read(output, ref))


def fetch_many(output: str, refs: list) -> list:
    """The values stored at `refs`, in their order (read in file order)."""
    found = {}
    for ref in sorted(set(refs)):
        found[ref] = fetch(output, ref)
    return [found[ref] for ref in refs]


def close_all() -> None:
    """Close the store files this process has open (before the store is removed)."""
    with _LOCK:
        while _OPEN:
            _OPEN.popitem()[1].close()


def store_names(output: str) -> list[str]:
    return [n for n in fileio.list_names(output)
            if TEMPORARY_NAME.match(n) and n.endswith(STORE_SUFFIX)]


def remove_store(output: str) -> int:
    """Remove every store file in `output` (the terminal step, once every shard is written: the
    lock makes them this build's). Returns how many."""
    close_all()
    names = store_names(output)
    for name in names:
        fileio.remove(fileio.join(output, name))
    return len(names)
