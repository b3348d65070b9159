"""The upstream layout: `upstream/<config>_preprocessed.jsonl` plus the image files its
templates name, so the published `proactivebench` package (which opens
`<data_dir>/<config>_preprocessed.jsonl` and `<data_dir>/<image_template filled>`) reads our
output unchanged with `data_dir = DIR/upstream`.

Each line holds the fields the upstream environments read, the scenario's non-null extras, and
our own `key`, `question_type`, `frame_ids` and `source` (upstream ignores unknown fields; we need
them to import an export back to identical rows).

Every registered scenario is exported the same way. Upstream's package plays only its seven
configs; our runtime plays any scenario's export (`evaluate --data DIR/upstream`), finding the
frames where the scenario's `frame_path` put them and playing them as its `environment`
declares (`transforms.environment.Play`).

Every exported file is covered like a shard: its size and sha256, taken from the bytes written
(no second read), travel with its line (`results.UpstreamLine.files`) to the terminal step,
which lists them in `reports/build.json` under `upstream_files` ({path, bytes, sha256, config},
paths relative to DIR), with the JSONL files it writes itself. `validate`, `publish
--with_upstream` and `evaluate --data DIR/upstream` check them (`core.buildfolder
.upstream_problems`).

Beside the JSONL files, `proactivebench_builder_export.json` (`EXPORT_MARKER`) says what the
build was: per config, what in it stands in for the benchmark's data (build.json's `stand_ins`).
It is listed like the other files, so `publish --with_upstream` carries it into the release-shaped
`test/` folder, and `--import_upstream` reads it: an export imported again keeps its stand-ins
instead of passing for the upstream release.

A copy of the export outside its build folder has no build.json beside it: nothing checks it, as
nothing checks the upstream release's own `test/` folder.
"""
from __future__ import annotations

import hashlib
import json

from proactivebench_builder.core import fileio
from proactivebench_builder.core.layout import (
    EXPORT_MARKER, UPSTREAM_DIR, upstream_dir, upstream_jsonl_name)
from proactivebench_builder.core.records import UPSTREAM_COMMON_FIELDS, UPSTREAM_EXTRA_FIELDS

OWN_FIELDS = ("key", "question_type", "frame_ids", "source")


def write_image(output: str, relative_path: str, data: bytes) -> tuple[str, int, str]:
    """Write one exported image; returns what build.json records of it (`exported_file`)."""
    fileio.write_bytes_atomic(fileio.join(upstream_dir(output), relative_path), data)
    return exported_file(relative_path, data)


def exported_file(relative_path: str, data: bytes) -> tuple[str, int, str]:
    """(path relative to DIR, size, sha256) of an exported file holding `data`."""
    return f"{UPSTREAM_DIR}/{relative_path}", len(data), hashlib.sha256(data).hexdigest()


def file_entry(config: str, exported: tuple[str, int, str]) -> dict:
    """An `upstream_files` entry of build.json."""
    path, size, sha256 = exported
    return {"path": path, "bytes": size, "sha256": sha256, "config": config}


def record(row: dict) -> dict:
    out = {f: row[f] for f in UPSTREAM_COMMON_FIELDS}
    out.update({f: row[f] for f in UPSTREAM_EXTRA_FIELDS if row.get(f) is not None})
    out.update({f: row[f] for f in OWN_FIELDS if row.get(f) is not None})
    return out


def jsonl_line(row: dict) -> str:
    return json.dumps(record(row), ensure_ascii=False)


def marker_bytes(stand_ins_by_config: dict[str, list[dict]]) -> bytes:
    """The export marker's content: deterministic (no time, no path), so that a rebuild writes
    the same bytes."""
    marker = {"built_by": "ProactiveBench builder",
              "about": "records of a ProactiveBench builder's upstream export, not the upstream "
                       "release's; stand_ins: per config, what in the build stood in for the "
                       "benchmark's data",
              "stand_ins": stand_ins_by_config}
    return (json.dumps(marker, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def write_marker(output: str, stand_ins_by_config: dict[str, list[dict]]) -> dict:
    """Write the export marker; returns its `upstream_files` entry (config "": it is the
    export's, not one config's)."""
    data = marker_bytes(stand_ins_by_config)
    fileio.write_bytes_atomic(fileio.join(upstream_dir(output), EXPORT_MARKER), data)
    return file_entry("", exported_file(EXPORT_MARKER, data))


def write_jsonl(output: str, config: str, lines_by_id: dict[int, str]) -> dict:
    """Write `<config>_preprocessed.jsonl`; returns its `upstream_files` entry."""
    name = upstream_jsonl_name(config)
    data = "".join(lines_by_id[i] + "\n" for i in sorted(lines_by_id)).encode("utf-8")
    fileio.write_bytes_atomic(fileio.join(upstream_dir(output), name), data)
    return file_entry(config, exported_file(name, data))
