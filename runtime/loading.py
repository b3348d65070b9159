"""Loading a built split as the samples `evaluate` plays: each a checked row held without its
frames' bytes, and how to read them again when it is played (`Sample`), so that memory holds
what is in play, never every frame of the split (a release of ~1.8 MB frames would need tens of
GB, and ~80k separately allocated frames pass the kernel's per-process mapping limit).
`iter_rows` gives the rows with their frames (`frames` + `frame_ids` inside each row), as the
environments take them.

Three sources, told apart by what a folder says of itself (`data_kind`):
- a build folder (our output): `DIR/reports/build.json` decides, whatever else lies in DIR (a
  stray `<config>_preprocessed.jsonl` does not turn it into an upstream folder). Only the shards
  build.json lists are read (`listed_shards`), each confined to DIR and opened only when it is a
  regular file: what evaluate plays is exactly what the build wrote (`check_data` has refused a
  folder whose shards differ from build.json, or that holds a shard it does not list);
- a Hugging Face Hub dataset id: `datasets.load_dataset(id, name=config, split=split)` (frames
  decoded to PIL images, which the environments accept); a Hub that cannot be reached (offline
  mode, no network, an endpoint that does not answer) is one line;
- the upstream layout (`DIR/<config>_preprocessed.jsonl` + image files, e.g. our
  `DIR/upstream/` export or the released `test/` folder): each record's frames are read from
  the files its template names, filled with upstream's slot rules.
  As upstream's loader, records with `strong_occlusions == False` are skipped. Upstream's FILTER
  (the released keep list, `core.released`) is applied when the caller asks (`keep_ids`):
  `evaluate` does for a folder whose records hold the released split (`released_split`: every
  config of the release keeps exactly the released count), not for our own export (already
  filtered). The
  folder is untrusted, as the build's sources are: a template is a plain `{slot}` pattern, the
  path it gives must stay inside DIR (no absolute path, no `..` or link leading out), and only
  a regular file no larger than MAX_FRAME_BYTES holding a decodable image of the format its
  name says (under PIL's decompression-bomb limit) is read.

Every row, from any source, is checked before it is played (`runtime.row_check`): a row that
breaks the record contract or its scenario's rules is named in one line (the JSONL file and
line, or the config and key), never played and never a traceback. The frames are read for those
checks and let go; when a sample is played they are read again (`Sample.read_frames`): a
build folder's by shard, row group and index (the row group last read is kept: samples are
played in shard order), a Hub dataset's by index, an upstream folder's from their files, checked
again. What changed since (a frame file, a shard's rows) is a BadRecord naming it.

Every config found in the data is played when a registered scenario declares it (its module's
`environment`); the others are named on stderr with the reason, never dropped silently.
"""
from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import io
import json
import logging
import os
import string
import sys
import threading
import urllib.error
import urllib.request
import warnings
from typing import Callable, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from proactivebench_builder import transforms
from proactivebench_builder.core import buildfolder, fileio
from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.core.images import EXTENSION_FORMATS
from proactivebench_builder.core.layout import (
    BUILD_REPORT, NOT_CONFIGS, POOL_SETS, SHARD_PATTERN, TEST, UNFILTERED, UPSTREAM_DIR,
    UPSTREAM_SUFFIX, folder_label, split_sets, upstream_jsonl_name)
from proactivebench_builder.core.records import UPSTREAM_COMMON_FIELDS, UPSTREAM_EXTRA_FIELDS
from proactivebench_builder.core.released import count_kept, released_counts, released_kept_ids
from proactivebench_builder.runtime import row_check
from proactivebench_builder.runtime.row_check import BadRecord

PARQUET_SPLITS = (TEST, UNFILTERED)
BUILD, UPSTREAM, HUB = "build", "upstream", "hub"
MAX_LINE_BYTES = 16 << 20     # one upstream-layout record (a few hundred bytes in the release)
MAX_FRAME_BYTES = 64 << 20    # one frame file (the release's largest are a few MB)

# Where a bad row is reported: called with (where, reason); None: raise at the first one.
OnBad = Callable[[str, str], None] | None


def data_kind(data: str) -> str:
    """BUILD, UPSTREAM or HUB: build.json decides first (see the module docstring); a folder
    without it is an upstream layout when it holds `*_preprocessed.jsonl` files, else a build
    that check_data refuses, saying what is missing."""
    if not os.path.isdir(data):
        return HUB
    if os.path.lexists(os.path.join(data, BUILD_REPORT)):
        return BUILD
    return UPSTREAM if glob.glob(os.path.join(glob.escape(data), "*" + UPSTREAM_SUFFIX)) \
        else BUILD


def is_build_export(data: str) -> bool:
    """Whether the upstream-layout folder `data` is our own DIR/upstream export (a build's
    report beside it), rather than the released test/ folder or another copy."""
    folder = os.path.abspath(data)
    return os.path.basename(folder) == UPSTREAM_DIR and os.path.lexists(
        os.path.join(os.path.dirname(folder), BUILD_REPORT))


def check_data(data: str) -> None:
    """Refuse, before any work, a `--data` that is not something to evaluate: a local folder
    must be a successfully finished, intact build (core.buildfolder: status "ok", every shard
    as build.json records it, nothing more) or an upstream-layout folder (our own DIR/upstream
    export is checked as its build); a path that does not exist is not taken for a Hub id."""
    kind = data_kind(data)
    export = False
    if kind == UPSTREAM:
        if not is_build_export(data):
            return  # the released test/ folder, or another upstream-layout copy
        # our own DIR/upstream export: its build must be trusted, and the export's files
        # must match their digests
        data, export = os.path.dirname(os.path.abspath(data)), True
    if kind in (BUILD, UPSTREAM):
        problems = buildfolder.folder_problems(data, upstream=export)
        if problems:
            raise UsageError(f"--data {data}: " + problems[0] + (
                f" (and {len(problems) - 1} more problems; run_pipeline.py validate "
                f"{data} lists them)" if len(problems) > 1 else ""))
    elif os.path.lexists(data) and not os.path.isdir(data):
        raise UsageError(f"--data {data}: not a folder (give a built folder, an upstream-layout "
                         "folder or a Hub dataset id OWNER/NAME)")
    elif (os.path.lexists(data) or data.startswith(("/", ".", "~")) or data.count("/") != 1
          or os.path.isdir(data.split("/", 1)[0])):  # e.g. build/proactivebench, not built yet
        raise UsageError(f"--data {data}: no such folder, and not a Hub dataset id (OWNER/NAME)")
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
        raise UsageError(f"--data {dataset_id}: the Hugging Face Hub ({constants.ENDPOINT}) "
                         f"answers HTTP {err.code}; offline, give a local folder, or set "
                         "HF_HUB_OFFLINE=1 to read the copy in the datasets cache") from None
    except (OSError, ValueError) as err:  # URLError, timeouts, DNS, refused: no Hub
        reason = getattr(err, "reason", err)
        raise UsageError(
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
    return data_kind(data) == UPSTREAM


def configs_in(data: str) -> list[str]:
    """Every config the data holds: `*_preprocessed.jsonl` files (upstream layout), the configs
    of the pool shards build.json lists (a build folder: a config whose test split is empty has
    `filtered_out` shards only), or a Hub dataset's configs."""
    kind = data_kind(data)
    if kind == UPSTREAM:
        return sorted(os.path.basename(p)[:-len(UPSTREAM_SUFFIX)] for p in glob.glob(
            os.path.join(glob.escape(data), "*" + UPSTREAM_SUFFIX)))
    if kind == BUILD:
        return sorted({f["config"] for f in report_files(data)
                       if f.get("split") in POOL_SETS and f["config"] not in NOT_CONFIGS})
    try:
        import datasets
        with quiet_hub():
            return [c for c in datasets.get_dataset_config_names(data) if c not in NOT_CONFIGS]
    except Exception as err:  # noqa: BLE001 (datasets raises many types; all mean "cannot list")
        raise hub_error(data, err) from None


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


class Sample(NamedTuple):
    """A checked row held without its frames (`row` has no `frames`) and how to read them again
    when it is played: `read_frames()` gives the row's `frames`, or raises BadRecord naming
    what changed since the row was checked."""
    row: dict
    read_frames: Callable[[], list]

    def playable(self) -> dict:
        """The row with its frames, as the environments take it."""
        return {**self.row, "frames": self.read_frames()}


def iter_samples(data: str, config: str, split: str = "test", on_bad: OnBad = None,
                 keep_ids: frozenset[int] | None = None) -> Iterator[Sample]:
    """The checked samples of a split of `config` in `data` (any of the three sources). A row
    that cannot be played is passed to `on_bad(where, reason)` and skipped, or, without
    `on_bad`, raises UsageError naming it. `keep_ids` (an upstream-layout folder): only the
    records with those ids, as upstream's loader applies its FILTER."""
    kind = data_kind(data)
    if kind == UPSTREAM:
        yield from upstream_samples(data, config, on_bad, keep_ids)
    elif kind == BUILD:
        yield from parquet_samples(data, config, split, on_bad)
    else:
        yield from hub_samples(data, config, split, on_bad)


def iter_rows(data: str, config: str, split: str = "test", on_bad: OnBad = None,
              keep_ids: frozenset[int] | None = None) -> Iterator[dict]:
    """`iter_samples`, each row with its frames: one row's frames in memory at a time."""
    for sample in iter_samples(data, config, split, on_bad, keep_ids):
        yield sample.playable()


def _checked(rows, config: str, on_bad: OnBad, where: Callable[[int, dict], str]):
    """(index, row) of each row once row_check passes it; a bad one reported (`on_bad`) or
    raised."""
    for index, row in enumerate(rows):
        try:
            row_check.check(row, config)
        except BadRecord as err:
            _bad(on_bad, where(index, row), str(err))
            continue
        yield index, row


def _without_frames(row: dict) -> dict:
    row.pop("frames", None)
    return row


def _bad(on_bad: OnBad, where: str, reason: str) -> None:
    if on_bad is None:
        raise UsageError(f"{where}: {reason}")
    on_bad(where, reason)


# ---- a build folder ----------------------------------------------------------------------------

def report_files(data: str) -> list[dict]:
    """The files build.json lists, as {path, config, split} entries naming a shard inside DIR
    (check_data has checked their checksums; anything else is not listed here)."""
    report = buildfolder.read_report(data) or {}
    files = report.get("files") if isinstance(report, dict) else None
    listed = []
    for entry in files if isinstance(files, list) else []:
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str)
                                                  for k in ("path", "config", "split")):
            continue
        folder, name = os.path.split(entry["path"])
        if folder == folder_label(entry["split"], entry["config"]) and \
                SHARD_PATTERN.match(name):
            listed.append(entry)
    return listed


def listed_shards(data: str, config: str, split: str = "test") -> list[str]:
    """Paths (relative to DIR) of the shards build.json lists for a split of a config, in the
    order its rows come (`core.layout.split_sets`: `unfiltered` is the `test` set, then the
    `filtered_out` set; each in id order)."""
    files = report_files(data)
    return [path for shard_set in split_sets(split) for path in sorted(
        f["path"] for f in files if f["config"] == config and f["split"] == shard_set)]


def parquet_samples(data: str, config: str, split: str = "test", on_bad: OnBad = None
                    ) -> Iterator[Sample]:
    frames = ParquetFrames(data)
    for relative in listed_shards(data, config, split):
        where = f"--data {data}: {relative}"
        try:
            with open_inside(data, relative) as handle:
                parquet = pq.ParquetFile(handle)
                columns = columns_but_frame_bytes(parquet)
                for group in range(parquet.num_row_groups):
                    rows = parquet.read_row_group(group, columns=columns).to_pylist()
                    for index, row in _checked(rows, config, on_bad,
                                               lambda i, row: f"{where}: row {row.get('key')!r}"):
                        yield Sample(_without_frames(row), functools.partial(
                            frames.read, relative, group, index, row.get("key")))
        except Outside as err:
            raise UsageError(f"--data {data}: {err}") from None
        except (OSError, pa.ArrowException) as err:
            raise UsageError(f"{where}: {_os_reason(err)}") from None


FRAMES = "frames"


def columns_but_frame_bytes(parquet: pq.ParquetFile) -> list[str] | None:
    """The columns a row is checked on: all but the frames' image bytes, whose other leaves
    (their paths) still give one item per frame, as the checks count them. None (every column)
    when the frames have no other leaf."""
    leaves = [parquet.schema.column(i).path for i in range(len(parquet.schema))]
    frame_leaves = [p for p in leaves if p.startswith(FRAMES + ".") and
                    not p.endswith(".bytes")]
    if FRAMES in parquet.schema_arrow.names and not frame_leaves:
        return None
    return [n for n in parquet.schema_arrow.names if n != FRAMES] + frame_leaves


class ParquetFrames:
    """The frames of a build folder's rows, read again when a sample is played: by shard, row
    group and index, a row group at a time. The last row group read is kept, as samples are
    played in shard order (one thread reads them, ahead of the threads that play)."""

    def __init__(self, data: str):
        self.data = data
        self._lock = threading.Lock()
        self._group: tuple[str, int] | None = None
        self._keys = self._frames = None

    def read(self, relative: str, group: int, index: int, key) -> list:
        with self._lock:
            if self._group != (relative, group):
                self._group = self._keys = self._frames = None  # let the last one go first
                self._keys, self._frames = self._read_group(relative, group)
                self._group = (relative, group)
            keys, frames = self._keys, self._frames
        if index >= len(keys) or keys[index].as_py() != key:
            raise BadRecord(f"{relative} changed since it was checked (row {key!r} is no longer "
                            f"row {index} of row group {group})")
        return frames[index].as_py()

    def _read_group(self, relative: str, group: int):
        try:
            with open_inside(self.data, relative) as handle:
                table = pq.ParquetFile(handle).read_row_group(group, columns=["key", FRAMES])
        except (OSError, pa.ArrowException) as err:
            raise BadRecord(f"{relative}: {_os_reason(err)}") from None
        return table.column("key"), table.column(FRAMES)


def open_inside(root: str, relative: str):
    """A binary file object of `relative` under `root`, once it resolves inside `root` (links
    included) and is a regular file; OSError saying what it is otherwise."""
    return fileio.open_local_regular(inside(root, relative))


class Outside(OSError):
    """A path (a template, a link) that leads outside the folder it must stay in."""


def inside(root: str, relative: str) -> str:
    """The real path of `relative` under `root`; Outside when it is absolute or resolves (by
    `..` or a link) outside `root`."""
    if not relative or os.path.isabs(relative):
        raise Outside(f"{relative or repr(relative)}: an absolute path, outside the folder")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, relative))
    if os.path.commonpath([real_root, real]) != real_root:
        shown = "" if real == os.path.normpath(os.path.join(real_root, relative)) \
            else f" (a link to {real})"
        raise Outside(f"{relative} leads outside the folder{shown}")
    return real


def _os_reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror and not isinstance(err, Outside):
        return err.strerror if isinstance(err, fileio.NotARegularFile) else \
            f"{err.strerror} (errno {err.errno})"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


# ---- a Hub dataset -------------------------------------------------------------------------------

def hub_samples(dataset_id: str, config: str, split: str = "test", on_bad: OnBad = None
                ) -> Iterator[Sample]:
    try:
        import datasets
        with quiet_hub():
            dataset = datasets.load_dataset(dataset_id, name=config, split=split)
    except ValueError as err:
        if "Unknown split" in str(err):  # the config has no rows in this split: the card
            return                       # leaves an empty split out (datasets' own wording)
        raise hub_error(dataset_id, err) from None
    except Exception as err:  # noqa: BLE001 (datasets raises many types; see hub_error)
        raise hub_error(dataset_id, err) from None
    where = f"--data {dataset_id}: {config}"
    try:
        for index, row in _checked(dataset, config, on_bad, lambda i, row: f"{where} row {i}"):
            yield Sample(_without_frames(row), functools.partial(hub_frames, dataset, index))
    except HUB_FRAME_ERRORS as err:
        raise UsageError(f"{where}: {type(err).__name__}: {err}") from None


HUB_FRAME_ERRORS = (OSError, ValueError, Image.DecompressionBombError)  # a frame it decodes


def hub_frames(dataset, index: int) -> list:
    """The frames of row `index` of a loaded Hub dataset (memory-mapped: read when asked)."""
    try:
        return dataset[index][FRAMES]
    except HUB_FRAME_ERRORS as err:
        raise BadRecord(f"row {index}: {type(err).__name__}: {err}") from None


@contextlib.contextmanager
def quiet_hub():
    """huggingface_hub logs every failed attempt of its retries (two lines each, up to five);
    when the Hub cannot be reached, the one line of `hub_error` says so instead."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def hub_error(dataset_id: str, err: BaseException) -> UsageError:
    """One line for a Hub dataset that cannot be loaded, naming the cause by kind (the library's
    own message can hold local paths of a failed fallback, and a whole traceback's worth of
    detail)."""
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    kind = type(err).__name__
    offline = hub_offline()
    unreachable = isinstance(err, (ConnectionError, TimeoutError)) or any(
        word in kind for word in ("Connection", "Timeout", "Offline"))
    missing = isinstance(err, FileNotFoundError) or "NotFound" in kind
    if "Offline" in kind or (offline and (unreachable or missing)):
        why = ("Hugging Face offline mode is on (HF_HUB_OFFLINE) and it is not in the local "
               "cache")
    elif unreachable:
        why = f"the Hub at {endpoint} cannot be reached ({kind})"
    elif missing:
        why = (f"no such dataset at {endpoint}, or it could not be reached (a private dataset "
               "needs HF_TOKEN)")
    else:  # e.g. a config or split it does not hold: the library's first line says which
        detail = (str(err).strip().splitlines() or [""])[0].replace(os.getcwd(), ".")
        why = f"it could not be loaded from {endpoint} ({kind}: {detail[:200]})"
    return UsageError(f"--data {dataset_id}: {why}")


# ---- the upstream layout -------------------------------------------------------------------------

def fill_template(record: dict, config: str, image_id: int) -> str:
    """The relative image path upstream opens for a slot value: the template filled as the
    config's scenario declares (`Play.frame_path`, which reads only the record)."""
    return transforms.behaviour_for_config(config).play.frame_path(record, image_id)


def template_problem(template: str) -> str | None:
    """A template is plain text with `{name}` slots: no attribute or index access, conversion
    or format spec (`{image:>999999999}` would allocate what it asks for)."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as err:
        return f"image_template {template!r} is not a template ({err})"
    for _, name, spec, conversion in parts:
        if name is not None and (not name.isidentifier() or spec or conversion):
            slot = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            return f"image_template {template!r}: slot {{{slot}}} is not a plain {{name}} slot"
    return None


def frame_path(record: dict, config: str, image_id: int) -> str:
    """`fill_template`, with a template that names a slot its scenario does not fill refused
    (BadRecord) rather than raising."""
    problem = template_problem(record["image_template"])
    if problem:
        raise BadRecord(problem)
    try:
        return fill_template(record, config, image_id)
    except KeyError as err:
        raise BadRecord(f"image_template {record['image_template']!r} has a slot {{{err.args[0]}}} "
                        f"that {config} does not fill") from None
    except (IndexError, ValueError, TypeError) as err:
        raise BadRecord(f"image_template {record['image_template']!r}: {err}") from None


def read_frame(data_dir: str, relative: str) -> bytes:
    """The bytes of a frame file under `data_dir` (see the module docstring); BadRecord
    naming the file otherwise."""
    try:
        data = fileio.read_bytes(inside(data_dir, relative), limit=MAX_FRAME_BYTES)
    except Outside as err:
        raise BadRecord(f"frame {err}") from None
    except OSError as err:
        raise BadRecord(f"frame {relative}: {_os_reason(err)}") from None
    problem = image_problem(data, relative)
    if problem:
        raise BadRecord(f"frame {relative}: {problem}")
    return data


def image_problem(data: bytes, name: str) -> str | None:
    """What keeps `data` from being the image its name says, read from its header only (the
    whole image is decoded when it is shown; a bad one is then one line naming the sample):
    not an image, another format than its extension, more pixels than PIL's bomb limit."""
    try:
        with warnings.catch_warnings():  # the size is checked below, in words of our own
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                kind, (width, height) = image.format, image.size
    except Image.DecompressionBombError:
        return f"more pixels than PIL's decompression-bomb limit ({Image.MAX_IMAGE_PIXELS:,})"
    except Exception as err:  # noqa: BLE001 (PIL raises many types for bad data)
        return f"not an image ({type(err).__name__})"
    if width * height > Image.MAX_IMAGE_PIXELS:
        return (f"{width}x{height} pixels, more than PIL's decompression-bomb limit "
                f"({Image.MAX_IMAGE_PIXELS:,})")
    expected = EXTENSION_FORMATS.get(os.path.splitext(name)[1].lower())
    if expected and kind != expected:
        return f"{kind} data in a file named {os.path.basename(name)!r} (expected {expected})"
    return None


def checked_upstream_row(record: dict, config: str, data_dir: str) -> tuple[dict, list[str]]:
    """The checked row of an upstream record (without frames) and its frames' paths, each frame
    file read and checked (not kept); BadRecord naming the first thing wrong."""
    row = _without_frames(row_check.contract_row(record))
    row_check.check_fields(row)
    ids = row["frame_ids"] if row["frame_ids"] is not None else \
        row_check.reachable_ids(row, config)
    row.update(frame_ids=list(ids), key=row["key"] or f"{config}/{row['id']}")
    row_check.check(row, config)  # before any file is opened
    paths = [frame_path(row, config, image_id) for image_id in ids]
    for path in paths:
        read_frame(data_dir, path)
    return row, paths


def upstream_frames(data_dir: str, paths: list[str]) -> list[dict]:
    """The frames of an upstream record, read (and checked) again from their files."""
    return [{"bytes": read_frame(data_dir, path), "path": path} for path in paths]


def upstream_lines(data_dir: str, config: str) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) of `<config>_preprocessed.jsonl` in `data_dir`, opened inside it
    as a regular file; an over-long line comes as None (its rest skipped)."""
    name = upstream_jsonl_name(config)
    try:
        handle = open_inside(data_dir, name)
    except Outside as err:
        raise UsageError(f"--data {data_dir}: {err}") from None
    except OSError as err:
        raise UsageError(f"--data {data_dir}: {name}: {_os_reason(err)}") from None
    with handle:
        yield from fileio.numbered_lines(handle, MAX_LINE_BYTES, skip_bom=True)


def upstream_samples(data_dir: str, config: str, on_bad: OnBad = None,
                     keep_ids: frozenset[int] | None = None) -> Iterator[Sample]:
    name = upstream_jsonl_name(config)
    for number, raw in upstream_lines(data_dir, config):
        try:
            record = upstream_record(raw)
            if record is None or record.get("strong_occlusions") is False:
                continue
            if keep_ids is not None and not (type(record.get("id")) is int
                                             and record["id"] in keep_ids):
                continue  # not in the released split (its frames are never read)
            row, paths = checked_upstream_row(record, config, data_dir)
        except BadRecord as err:
            _bad(on_bad, f"--data {data_dir}: {name} line {number}", str(err))
            continue
        yield Sample(row, functools.partial(upstream_frames, data_dir, paths))


def upstream_ids(data_dir: str, config: str) -> list[tuple[int, object]]:
    """(id, strong_occlusions) of every record that parses with an integer id (the others are
    named when played): what the released keep list is counted against."""
    found = []
    for _, raw in upstream_lines(data_dir, config):
        try:
            record = upstream_record(raw)
        except BadRecord:
            continue
        if record is not None and type(record.get("id")) is int:  # (a list is unhashable)
            found.append((record["id"], record.get("strong_occlusions")))
    return found


def released_split(data_dir: str, configs: list[str]) -> dict[str, frozenset[int]] | None:
    """config -> the released keep list's ids, when the upstream-layout folder `data_dir` holds
    the release's records: every config of the release among `configs` keeps exactly the
    released count (a config of our own scenarios is not the release's: not filtered). None
    otherwise (our export, another copy, or a config keeping another count)."""
    counts, kept = released_counts(), released_kept_ids()
    ours = [c for c in configs if c in counts]
    if not ours or is_build_export(data_dir):
        return None
    if any(count_kept(c, upstream_ids(data_dir, c)) != counts[c] for c in ours):
        return None
    return {c: kept[c] for c in ours}


def upstream_record(raw: bytes | None) -> dict | None:
    """One JSONL line as a record (None for a blank line); BadRecord saying what is wrong
    (`raw` None: a line over MAX_LINE_BYTES, as fileio.numbered_lines gives it)."""
    if raw is None or len(raw) > MAX_LINE_BYTES:
        raise BadRecord(f"longer than {MAX_LINE_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRecord(f"not UTF-8 (byte {err.start})") from None
    if not text.strip():
        return None
    try:
        record = json.loads(text)
    except RecursionError:
        raise BadRecord("nested too deeply to be a record") from None
    except ValueError as err:
        raise BadRecord(f"not valid JSON ({err})") from None
    if not isinstance(record, dict):
        raise BadRecord(f"not a JSON object (a {type(record).__name__})")
    return record
