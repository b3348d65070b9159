"""Loading a built split as rows the environments take (`frames` + `frame_ids` inside each row).

Three sources:
- a built folder (`DIR/<config>/*.parquet`, our output): read with pyarrow, one row group at a
  time, frames as {bytes, path} structs;
- a Hugging Face Hub dataset id: `datasets.load_dataset(id, name=config, split=split)` (frames
  decoded to PIL images, which the environments accept);
- the upstream layout (`DIR/<config>_preprocessed.jsonl` + image files, e.g. our
  `DIR/upstream/` export or the released `test/` folder): each record's frames are read once
  from the files its template names, filled with upstream's slot rules, and attached to the row.
  As upstream's loader, records with `strong_occlusions == False` are skipped; upstream's FILTER
  id list is not applied here (our export is already filtered; `--ids` can restrict).

Every config found in the data is played when a registered scenario declares it (its module's
`environment`); the others are named on stderr with the reason, never dropped silently.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Iterator

import pyarrow.parquet as pq

from proactivebench_builder import transforms
from proactivebench_builder.core import buildfolder
from proactivebench_builder.core.layout import (
    BUILD_REPORT, NOT_CONFIGS, TEST, UNFILTERED, UPSTREAM_SUFFIX, split_folder,
    upstream_jsonl_name)
from proactivebench_builder.core.records import UPSTREAM_COMMON_FIELDS, UPSTREAM_EXTRA_FIELDS
from proactivebench_builder.runtime import environments as envs

PARQUET_SPLITS = (TEST, UNFILTERED)


def check_data(data: str) -> None:
    """Refuse, before any work, a `--data` that is not something to evaluate: a local folder
    must be a successfully finished, intact build (core.buildfolder: status "ok", every shard
    as build.json records it, nothing more) or an upstream-layout folder (whose enclosing build, when it has
    one, must be such a build); a path that does not exist is not taken for a Hub id."""
    if os.path.isdir(data):
        parent = os.path.dirname(os.path.abspath(data))
        export = is_upstream_layout(data)
        if export:
            if not os.path.exists(os.path.join(parent, BUILD_REPORT)):
                return  # the released test/ folder, or another upstream-layout copy
            data = parent  # our own DIR/upstream export: its build must be trusted
        problems = buildfolder.folder_problems(data, upstream=export)  # and its export's digests
        if problems:
            raise SystemExit(f"--data {data}: " + problems[0] + (
                f" (and {len(problems) - 1} more problems; run_pipeline.py validate "
                f"{data} lists them)" if len(problems) > 1 else ""))
    elif (os.path.exists(data) or data.startswith(("/", ".", "~")) or data.count("/") != 1
          or os.path.isdir(data.split("/", 1)[0])):  # e.g. build/proactivebench, not built yet
        raise SystemExit(f"--data {data}: no such folder, and not a Hub dataset id (OWNER/NAME)")
    else:
        check_hub(data)


HUB_PROBE_TIMEOUT_S = 5.0


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def check_hub(dataset_id: str) -> None:
    """A Hub id needs the Hub: asked once, briefly, before any work, so that no network fails
    fast in one line naming offline use (`datasets` would retry for ~50 s and end in a long
    traceback). With HF_HUB_OFFLINE=1 the datasets cache answers instead (not probed)."""
    if hub_offline():
        return
    from huggingface_hub import constants  # lazy, as `datasets` below: only a Hub id needs it

    try:  # an HTTP answer below 500, even an error status, means the Hub is reachable
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"),
                               timeout=HUB_PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError as err:
        if err.code < 500:
            return
        raise SystemExit(f"--data {dataset_id}: the Hugging Face Hub ({constants.ENDPOINT}) "
                         f"answers HTTP {err.code}; offline, give a local folder, or set "
                         "HF_HUB_OFFLINE=1 to read the copy in the datasets cache") from None
    except (OSError, ValueError) as err:  # URLError, timeouts, DNS, refused: no Hub
        reason = getattr(err, "reason", err)
        raise SystemExit(
            f"--data {dataset_id}: the Hugging Face Hub ({constants.ENDPOINT}) cannot be "
            f"reached ({reason}); offline, give a local folder (a build, or the release's "
            "test/ folder), or set HF_HUB_OFFLINE=1 to read the copy in the datasets cache")


def sample_fingerprint(row: dict) -> str:
    """A digest of what a sample shows the model, the same for its Parquet row, its upstream
    export and its Hub row: the key, id, frame ids and the upstream fields (prompt, options,
    answer, steps...). Frame bytes are left out (Hub rows hold decoded images); they follow from
    the key, the frame ids and the build's seed."""
    fields = ("key", "frame_ids", *UPSTREAM_COMMON_FIELDS, *UPSTREAM_EXTRA_FIELDS)
    identity = json.dumps({f: row.get(f) for f in fields}, sort_keys=True, default=str)
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]


def is_upstream_layout(data: str) -> bool:
    return os.path.isdir(data) and bool(glob.glob(os.path.join(data, "*" + UPSTREAM_SUFFIX)))


def configs_in(data: str) -> list[str]:
    """Every config the data holds: `*_preprocessed.jsonl` files (upstream layout), folders of
    Parquet shards (a built folder), or a Hub dataset's configs (all registered ones when the
    Hub cannot be asked)."""
    if os.path.isdir(data):
        if is_upstream_layout(data):
            return sorted(os.path.basename(p)[:-len(UPSTREAM_SUFFIX)]
                          for p in glob.glob(os.path.join(data, "*" + UPSTREAM_SUFFIX)))
        # a config whose test split is empty has shards in its pool only (no 0-row shard)
        return sorted(name for name in set(os.listdir(data)) | set(_names(data, UNFILTERED))
                      if name not in NOT_CONFIGS and any(
                          glob.glob(os.path.join(split_folder(data, split, name), "*.parquet"))
                          for split in PARQUET_SPLITS))
    try:
        import datasets
        return [c for c in datasets.get_dataset_config_names(data) if c not in NOT_CONFIGS]
    except Exception as err:  # offline or unknown id: fall back to what we can play
        print(f"evaluate: could not list the configs of {data!r} ({type(err).__name__}: {err}); "
              "trying every registered config", file=sys.stderr)
        return transforms.known_configs()


def _names(data: str, folder: str) -> list[str]:
    path = os.path.join(data, folder)
    return os.listdir(path) if os.path.isdir(path) else []


def available_configs(data: str) -> list[str]:
    """The configs of `data` that a registered scenario plays, upstream's seven first; each
    config found but not playable is named on stderr with the reason."""
    found, playable = configs_in(data), []
    for config in found:
        try:
            transforms.behaviour_for_config(config)
        except transforms.UnknownConfig as err:
            print(f"evaluate: skipping config {config!r} of {data}: {err}", file=sys.stderr)
            continue
        playable.append(config)
    return transforms.config_order(playable)


def iter_rows(data: str, config: str, split: str = "test") -> Iterator[dict]:
    if os.path.isdir(data):
        if is_upstream_layout(data):
            yield from iter_upstream_rows(data, config)
        else:
            yield from iter_parquet_rows(data, config, split)
    else:
        yield from iter_hub_rows(data, config, split)


def iter_parquet_rows(data: str, config: str, split: str = "test") -> Iterator[dict]:
    folder = split_folder(data, split, config)
    for path in sorted(glob.glob(os.path.join(folder, "*.parquet"))):
        parquet = pq.ParquetFile(path)
        for group in range(parquet.num_row_groups):
            yield from parquet.read_row_group(group).to_pylist()


def iter_hub_rows(dataset_id: str, config: str, split: str = "test") -> Iterator[dict]:
    import datasets
    try:
        rows = datasets.load_dataset(dataset_id, name=config, split=split)
    except ValueError as err:
        if "Unknown split" in str(err):  # the config has no rows in this split: the card
            return                       # leaves an empty split out (datasets' own wording)
        raise
    except (ConnectionError, OSError) as err:  # e.g. offline and not in the datasets cache
        text = (str(err).splitlines() or [""])[0]
        raise SystemExit(f"--data {dataset_id}: cannot load {config} ({text})"
                         + ("; HF_HUB_OFFLINE=1 reads only what the datasets cache holds: "
                            "load it once online, or give a local folder" if hub_offline()
                            else "")) from None
    yield from rows


def fill_template(record: dict, config: str, image_id: int) -> str:
    """The relative image path upstream opens for a slot value: the template filled as the
    config's scenario declares (`Play.frame_path`, which reads only the record)."""
    return transforms.behaviour_for_config(config).play.frame_path(record, image_id)


def attach_frames(record: dict, config: str, data_dir: str) -> dict:
    ids = record.get("frame_ids") or envs.reachable_frame_ids(record, config)
    frames = []
    for image_id in ids:
        path = fill_template(record, config, image_id)
        with open(os.path.join(data_dir, path), "rb") as handle:
            frames.append({"bytes": handle.read(), "path": path})
    row = dict(record, frame_ids=list(ids), frames=frames)
    row.setdefault("key", f"{config}/{record['id']}")
    return row


def iter_upstream_rows(data_dir: str, config: str) -> Iterator[dict]:
    path = os.path.join(data_dir, upstream_jsonl_name(config))
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("strong_occlusions") is False:
                continue
            yield attach_frames(record, config, data_dir)
