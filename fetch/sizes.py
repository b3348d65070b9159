"""What `fetch --dry_run` can tell, offline, of each file it would fetch: where the file stands
in its source folder, and its size.

A file's size is known, in this order, from:

1. the manifest's pin (`size` in its `downloads:` section);
2. fetch's record in the source folder (`.proactivebench-fetch/state.json`,
   `fetch.folder_state.recorded_size`): the size of a file it verified, of an archive it
   extracted (and removed), or the size the server announced when a download started (a
   partial one too);
3. the manifest's approximate size (`approx_size`, never a pin);
4. the file in place, which fetch has not recorded (copied there by hand).

Otherwise it is unknown, and the manifest's `unknown_size` says why (e.g. QuickDraw's bucket
publishes no sizes: fetch learns them when it downloads).
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

from proactivebench_builder.fetch.folder_state import (
    destination_paths, matches_pins, recorded_size, verified_before)
from proactivebench_builder.core.phases import human_size

PUBLISHED, RECORDED, APPROXIMATE, ON_DISK = "published", "recorded", "approximate", "on disk"
NO_REASON = "its manifest gives no size"


@dataclass(frozen=True)
class KnownFile:
    """One file of the dry run: where it stands, and its size if anything tells it."""
    state: str                 # "to fetch", "present, ...", "partly fetched ...", ...
    size: int | None
    source: str | None         # PUBLISHED, RECORDED, APPROXIMATE, ON_DISK; None when unknown


def lstat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def known_file(planned, folder: str, record: dict) -> KnownFile:
    """Where `planned` (a fetch_plan.PlannedFile) stands in `folder`, whose fetch record is
    `record` (`fetch.folder_state.fetch_record`), and what tells its size."""
    spec = planned.spec
    dest, part = destination_paths(folder, spec)
    here, partial = lstat_or_none(dest), lstat_or_none(part)
    removed = record.get("extracted", {}).get(spec.path)
    if here is not None:
        verified = verified_before(spec, record.get("files", {}).get(spec.path), here)
        state = "present, verified by an earlier fetch" if verified else \
            "present (verified when run)"
    elif isinstance(removed, dict) and removed.get("archive_removed") and \
            matches_pins(spec, removed):
        state = "extracted, archive removed (skipped when run)"
    elif partial is not None:
        state = f"partly fetched ({human_size(partial.st_size)} received, resumed when run)"
    else:
        state = "to fetch"
    if spec.size is not None:
        return KnownFile(state, spec.size, PUBLISHED)
    recorded = recorded_size(record, spec)
    if recorded is not None:
        return KnownFile(state, recorded, RECORDED)
    if planned.approx_size:
        return KnownFile(state, planned.approx_size, APPROXIMATE)
    if here is not None and not os.path.islink(dest):
        return KnownFile(state, here.st_size, ON_DISK)
    return KnownFile(state, None, None)


def size_text(known: KnownFile) -> str:
    if known.size is None:
        return "size unknown"
    return {PUBLISHED: human_size(known.size),
            RECORDED: f"{human_size(known.size)} (recorded by fetch)",
            APPROXIMATE: f"~{human_size(known.size)} (approximate)",
            ON_DISK: f"{human_size(known.size)} (the file in place)"}[known.source]


def summary(files: list[tuple[str, object, KnownFile]]) -> list[str]:
    """The dry run's closing lines for (scenario, planned file, known) triples: the total of
    the known sizes, by where each comes from, then which sizes are unknown and why."""
    by_source: dict[str, int] = defaultdict(int)
    unknown: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, planned, known in files:
        if known.size is None:
            unknown[(name, planned.unknown_size or NO_REASON)].append(planned.spec.path)
        else:
            by_source[known.source] += known.size
    count = sum(1 for *_, known in files if known.size is not None)
    parts = [f"{'~' if source == APPROXIMATE else ''}{human_size(by_source[source])} "
             f"{'recorded by fetch' if source == RECORDED else source}"
             for source in (PUBLISHED, APPROXIMATE, RECORDED, ON_DISK) if source in by_source]
    total = sum(by_source.values())
    line = f"fetch --dry_run: {len(files)} files"
    if count:
        line += (f"; the {count} of known size come to {'~' if APPROXIMATE in by_source else ''}"
                 f"{human_size(total)} ({' + '.join(parts)})")
    missing = len(files) - count
    if missing:
        line += f"; {missing} of unknown size"
    lines = [line + "; nothing was downloaded"]
    for (name, reason), paths in sorted(unknown.items()):
        what = f"{name}/{paths[0]}" if len(paths) == 1 else f"{len(paths)} {name} files"
        lines.append(f"  size unknown for {what}: {' '.join(reason.split())}")
    return lines
