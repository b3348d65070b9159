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
"""
from __future__ import annotations

import json

from proactivebench_builder.core import fileio
from proactivebench_builder.core.layout import upstream_dir, upstream_jsonl_name
from proactivebench_builder.core.records import UPSTREAM_COMMON_FIELDS, UPSTREAM_EXTRA_FIELDS

OWN_FIELDS = ("key", "question_type", "frame_ids", "source")


def write_image(output: str, relative_path: str, data: bytes) -> None:
    fileio.write_bytes_atomic(fileio.join(upstream_dir(output), relative_path), data)


def record(row: dict) -> dict:
    out = {f: row[f] for f in UPSTREAM_COMMON_FIELDS}
    out.update({f: row[f] for f in UPSTREAM_EXTRA_FIELDS if row.get(f) is not None})
    out.update({f: row[f] for f in OWN_FIELDS if row.get(f) is not None})
    return out


def jsonl_line(row: dict) -> str:
    return json.dumps(record(row), ensure_ascii=False)


def write_jsonl(output: str, config: str, lines_by_id: dict[int, str]) -> str:
    url = fileio.join(upstream_dir(output), upstream_jsonl_name(config))
    text = "".join(lines_by_id[i] + "\n" for i in sorted(lines_by_id))
    fileio.write_bytes_atomic(url, text.encode("utf-8"))
    return url
