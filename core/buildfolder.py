"""What a build folder says about itself, and the one check of it that `validate`, `publish`, a
partial rebuild and the evaluation runtime run before trusting it.

- The folder says what it is: `reports/build.json` carries `status`, "building" from the
  moment a build starts until it ends, then "ok" or "failed" with the reason.
- `folder_problems`: a finished build whose status is "ok", whose every shard file has the size
  and sha256 that `build.json` records, and whose card fingerprints the same files; with
  `upstream=True`, also every file of the upstream export (DIR/upstream) as `build.json`'s
  `upstream_files` records it, and no link, FIFO or other non-regular file in the export.

Everything here reads a folder that may hold anything, so every function is total: a
`build.json` or a card that is not what a build writes (not JSON, a list, nested without end, a
field of the wrong type, not UTF-8, a FIFO, a folder) is a problem line, never an exception; a
path from `build.json` is read only when it lies inside DIR (no `..`, not absolute, no link
leading out) and names a regular file (a FIFO or a device is refused without blocking); reports
and the card are read up to a cap (`REPORT_MAX_BYTES`, `CARD_MAX_BYTES`), and a card's YAML may
not use aliases (a "billion laughs" front matter would otherwise be walked by every reader).

Integrity, not authenticity: the sizes and sha256 detect a file damaged, truncated, swapped or
mixed with another build's; nothing is keyed or signed, so whoever can write the folder can edit
a file and recompute its digests in build.json and the card. The readers stay bounded on what
such a folder holds (`validate` caps the integers a row's checks iterate over), but its rows are
the forger's.
"""
from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import posixpath
import stat

import yaml

from proactivebench_builder.core import fileio, phases
from proactivebench_builder.core.layout import (
    BUILD_REPORT, CARD, POOL_SETS, SHARD_PATTERN, TEMPORARY_PREFIX, TEST, TRAIN,
    TRAIN_CONFIG, TRAIN_DIR, UPSTREAM_DIR, UPSTREAM_SUFFIX, folder_label, report_url,
    shard_set_of, splits_of_set)

BUILDING, OK, FAILED = "building", "ok", "failed"

# Caps on what a reader holds in memory: far above what a build writes (a full build's report,
# with one entry per exported file, is about 20 MB; its card a few kB).
REPORT_MAX_BYTES = 256 * 2 ** 20
CARD_MAX_BYTES = 16 * 2 ** 20
MAX_SHAPE_PROBLEMS = 20  # a report wrong everywhere is a few lines, not one per entry


# ---- the status in build.json ------------------------------------------------------------------

class UnusableReport(ValueError):
    """build.json cannot be read as a build report; the message says why."""


def load_report(output: str) -> dict:
    """build.json as a dict; FileNotFoundError when there is none, UnusableReport when it is
    not a regular file, too large, not UTF-8 JSON, nested too deep or not a JSON object."""
    try:
        data = read_listed(output, BUILD_REPORT, REPORT_MAX_BYTES)
    except FileNotFoundError:
        raise
    except OSError as err:  # a link (leading out or not), a FIFO, a folder, too large
        raise UnusableReport(f"{BUILD_REPORT}: unreadable: {err.strerror or err}") from None
    try:
        report = json.loads(data)
    except RecursionError:
        raise UnusableReport(f"{BUILD_REPORT}: not a build report (JSON nested too deeply)") \
            from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise UnusableReport(f"{BUILD_REPORT}: not valid JSON ({err})") from None
    if not isinstance(report, dict):
        raise UnusableReport(f"{BUILD_REPORT}: not a build report (a JSON "
                             f"{type(report).__name__}, not an object)")
    return report


def read_report(output: str) -> dict | None:
    """build.json as a dict, or None when it is missing or unusable (see `load_report`)."""
    try:
        return load_report(output)
    except (FileNotFoundError, UnusableReport):
        return None


def mark_building(output: str) -> None:
    """From here until the build ends, the folder says a build is under way: a build killed
    part way leaves it so, and nothing trusts the folder until a build finishes."""
    fileio.write_bytes_atomic(report_url(output), _json({"status": BUILDING}))


def mark_finished(output: str, reason: str | None) -> dict | None:
    """Record the outcome in build.json: "ok", or "failed" with `reason`. A build that failed
    before writing its report keeps a report that says only that."""
    report = read_report(output) or {}
    if report.get("status") == BUILDING and "scenarios" not in report:
        report = {}
    report["status"] = OK if reason is None else FAILED
    if reason is None:
        report.pop("failure", None)
    else:
        report["failure"] = reason
    fileio.write_bytes_atomic(report_url(output), _json(report))
    return report


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def dataset_info(files: list[dict]) -> list[dict]:
    """The `dataset_info:` block: per config, split sizes and a content fingerprint (sha256 over
    its shards). Besides informing the Hub viewer, it matters for local loading: `datasets`
    keys its cache of a folder with a `configs:` block on this YAML, not on the files, so
    without sizes and a fingerprint a rebuilt folder would load the previous build's rows.
    A shard of the pool's `test` set counts in both splits it serves (`test` and
    `unfiltered`); the download size counts every file once."""
    by_config: dict[str, list[dict]] = {}
    for f in files:
        by_config.setdefault(f["config"], []).append(f)
    infos = []
    for config, parts in sorted(by_config.items()):
        digest = hashlib.sha256("".join(f"{f['path']} {f['sha256']}\n" for f in sorted(
            parts, key=lambda f: f["path"])).encode()).hexdigest()
        splits = {}
        for f in parts:
            for split in _splits_of(f["split"]):
                entry = splits.setdefault(split, {"name": split, "num_bytes": 0,
                                                  "num_examples": 0})
                entry["num_bytes"] += f["bytes"]
                entry["num_examples"] += f["rows"]
        size = sum(f["bytes"] for f in parts)
        infos.append({"config_name": config, "description": f"content sha256:{digest}",
                      "splits": [splits[k] for k in sorted(splits)],
                      "download_size": size, "dataset_size": size})
    return infos


def _splits_of(shard_set: str) -> tuple[str, ...]:
    """The splits a listed file serves (a set this layout does not know: none)."""
    try:
        return splits_of_set(shard_set)
    except KeyError:
        return ()


# ---- the folder check ----------------------------------------------------------------------------

def folder_problems(folder: str, checksums: bool = True, upstream: bool = False) -> list[str]:
    """Why `folder` is not a finished, intact build ([] when it is): one problem when it is not
    a successfully finished build at all, else one per shard that differs from build.json;
    with `upstream`, also one per exported file that differs (`upstream_problems`)."""
    problems = status_problems(folder)
    if problems or not checksums:
        return problems
    folder = folder.rstrip("/")
    report = read_report(folder)
    problems = (shard_problems(folder, report) + card_problems(folder, report)
                + layout_problems(folder, report))
    return problems + (upstream_problems(folder, report) if upstream else [])


def status_problems(folder: str) -> list[str]:
    """[] when `folder` holds a build that finished with status "ok" and whose build.json has
    the shape a build writes, else one problem (a few for a report of the wrong shape)."""
    folder = folder.rstrip("/")
    if not fileio.is_dir(folder):
        return [f"{folder}: no such folder"]
    try:
        report = load_report(folder)
    except FileNotFoundError:
        return [f"{BUILD_REPORT}: missing: {folder} is not a finished build (build one with "
                "run_pipeline.py --output DIR)"]
    except UnusableReport as err:
        return [f"{err} (a damaged or foreign report)"]
    status = report.get("status")
    if status == BUILDING:
        return [f"{folder}: a build into this folder started and did not finish ({BUILD_REPORT} "
                "status 'building'); build again"]
    if status == FAILED:
        return [f"{folder}: its build failed: {report.get('failure', 'no reason recorded')}"]
    if status != OK:
        return [f"{BUILD_REPORT}: no build status (written by an older or unfinished build); "
                "build again"]
    return report_shape_problems(report)


# ---- the shape of build.json: what the readers rely on -------------------------------------------

def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_count_map(value) -> bool:
    return isinstance(value, dict) and all(_is_int(v) for v in value.values())


# field -> test of its value, for the fields a reader uses (a field may be absent)
_SCENARIO_FIELDS = {
    "config": lambda v: v is None or isinstance(v, str),
    **{f: _is_int for f in ("raw_items", "samples", "kept", "dead_letters")},
    **{f: _is_count_map for f in ("excluded", "dead_letters_by_reason", "shards", "rows",
                                  "bytes")},
    "accounted": lambda v: isinstance(v, bool),
    "bad_fraction": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}
_TRAIN_SCENARIO_FIELDS = {
    **{f: _is_int for f in ("raw_items", "examples", "dead_letters")},
    "excluded": _is_count_map, "accounted": lambda v: isinstance(v, bool),
}
_TRAIN_FIELDS = {f: _is_int for f in ("rows", "shards", "examples", "bytes")}
_FILE_FIELDS = {"path": str, "bytes": int, "sha256": str, "config": str, "split": str,
                "rows": int}
_EXPORT_FIELDS = {"path": str, "bytes": int, "sha256": str, "config": str}
_REPORT_FIELDS = {"path": str, "bytes": int, "sha256": str}
_LISTS = {"files": _FILE_FIELDS, "upstream_files": _EXPORT_FIELDS,
          "report_files": _REPORT_FIELDS}  # build.json's lists of files, by key


def _field_problems(entry, fields: dict, where: str) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{where} is a {type(entry).__name__}, not an object"]
    bad = sorted(f for f, test in fields.items() if f in entry and not test(entry[f]))
    return [f"{where}: {', '.join(bad)} of the wrong type"] if bad else []


def _listed_entry_problems(entry, fields: dict, where: str) -> list[str]:
    """A `files` / `upstream_files` entry: every field present with its type, a path inside DIR."""
    if not isinstance(entry, dict):
        return [f"{where} is a {type(entry).__name__}, not an object"]
    bad = sorted(f for f, kind in fields.items()
                 if not (_is_int(entry.get(f)) if kind is int else isinstance(entry.get(f), kind)))
    if bad:
        return [f"{where}: {', '.join(bad)} missing or of the wrong type"]
    problem = relative_path_problem(entry["path"])
    return [f"{where}: path {entry['path']!r}: {problem}"] if problem else []


def report_shape_problems(report: dict) -> list[str]:
    """What in build.json does not have the shape a build writes ([] when all does): the fields
    every reader uses, each of its type, and every listed path inside the folder. The readers
    check this first and then trust the shape."""
    problems = []
    scenarios = report.get("scenarios")
    if not isinstance(scenarios, dict):
        problems.append("'scenarios' is not an object")
    else:
        for name, entry in scenarios.items():
            problems += _field_problems(entry, _SCENARIO_FIELDS, f"scenario {name!r}")
    train = report.get("train")
    if train is not None:
        problems += _field_problems(train, _TRAIN_FIELDS, "'train'")
        train_scenarios = train.get("scenarios", {}) if isinstance(train, dict) else {}
        if not isinstance(train_scenarios, dict):
            problems.append("'train': 'scenarios' is not an object")
        else:
            for name, entry in train_scenarios.items():
                problems += _field_problems(entry, _TRAIN_SCENARIO_FIELDS,
                                            f"train scenario {name!r}")
    for key, fields in _LISTS.items():
        entries = report.get(key, [])
        if not isinstance(entries, list):
            problems.append(f"{key!r} is not a list")
            continue
        seen = set()
        for index, entry in enumerate(entries):
            found = _listed_entry_problems(entry, fields, f"{key}[{index}]")
            if not found and entry["path"] in seen:
                found = [f"{key}[{index}]: {entry['path']} is listed twice"]
            problems += found
            if not found:
                seen.add(entry["path"])
            if len(problems) > MAX_SHAPE_PROBLEMS:
                break
    for key in ("stamp", "sources"):
        if not isinstance(report.get(key, {}), dict):
            problems.append(f"{key!r} is not an object")
    if len(problems) > MAX_SHAPE_PROBLEMS:
        problems = problems[:MAX_SHAPE_PROBLEMS] + [f"... and more ({BUILD_REPORT} is wrong "
                                                    "throughout)"]
    return [f"{BUILD_REPORT}: {p} (a damaged or foreign report)" for p in problems]


def listed(report: dict, key: str = "files") -> list[dict]:
    """The well-formed entries of build.json's `files` or `upstream_files` (the others are
    reported by `report_shape_problems`)."""
    entries = report.get(key)
    fields = _LISTS[key]
    if not isinstance(entries, list):
        return []
    return [e for e in entries if not _listed_entry_problems(e, fields, "")]


# ---- paths from build.json: inside DIR, regular files --------------------------------------------

class NotListable(OSError):
    """A path build.json lists that is not read: outside DIR, a link, not a regular file."""


def relative_path_problem(path: str) -> str | None:
    """Why `path` (from build.json, or a folder given for inside a target) is not a plain
    relative path that stays inside its folder, or None."""
    if not path or "\0" in path:
        return "empty or holding a NUL byte"
    if path.startswith("/") or "://" in path:
        return "an absolute path: outside the folder"
    if any(p in ("", ".", "..") for p in path.split("/")):
        return "a '..', '.' or empty part: it could lead outside the folder"
    return None


def open_listed(folder: str, relative: str):
    """A binary file object of the regular file `relative` inside `folder`. Raises
    NotListable for a path leading outside the folder (through `..`, an absolute path or a
    link anywhere on the way), a symbolic link, or anything but a regular file (a FIFO is
    refused without blocking); FileNotFoundError and other OSErrors as opening raises them."""
    problem = relative_path_problem(relative)
    if problem:
        raise NotListable(errno.EINVAL, problem, relative)
    url = fileio.join(folder, relative)
    if not fileio.is_local(url):  # an object store: no links, no special files
        fs, path = fileio.filesystem(url)
        return fs.open(path, "rb")
    root = os.path.realpath(fileio.local_path(folder))
    path = fileio.local_path(url)
    mode = os.lstat(path).st_mode  # FileNotFoundError when missing
    if stat.S_ISLNK(mode):
        raise NotListable(errno.EINVAL, "a symbolic link (a build writes regular files only)",
                          relative)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise NotListable(errno.EINVAL, "outside the build folder (a link on the way)",
                          relative)
    try:
        return fileio.open_local_regular(path)
    except fileio.NotARegularFile as err:
        raise NotListable(err.errno, err.strerror, relative) from None


def read_listed(folder: str, relative: str, limit: int) -> bytes:
    """The bytes of a file of the folder, opened as `open_listed` opens it (a link or anything
    but a regular file inside the folder is refused); FileTooLarge above `limit` bytes."""
    with open_listed(folder, relative) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise fileio.FileTooLarge(errno.EFBIG, f"larger than the {limit:,} bytes it may hold",
                                  relative)
    return data


def size_and_sha256(folder: str, relative: str) -> tuple[int, str]:
    """(size, sha256) of a file build.json lists, streamed (see `open_listed`)."""
    with open_listed(folder, relative) as handle:
        return _streamed_size_and_sha256(handle)


def _streamed_size_and_sha256(handle, read=lambda n: None) -> tuple[int, str]:
    """(size, sha256) of an open file; `read(n)` is told of every block of `n` bytes read."""
    digest, size = hashlib.sha256(), 0
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
        size += len(block)
        read(len(block))
    return size, digest.hexdigest()


def _sizes_and_sha256(folder: str, paths: list[str], read=lambda n: None) -> list:
    """`size_and_sha256` of each path, or the exception it raised, in order. Files are hashed
    on one thread per core (reading and hashing release the interpreter lock: at full scale the
    build's final check reads ~10 GB of shards while every worker waits). `read(n)` is told
    of the bytes each file holds as it is read."""
    from concurrent.futures import ThreadPoolExecutor

    def measure(path: str):
        try:
            with open_listed(folder, path) as handle:
                return _streamed_size_and_sha256(handle, read)
        except Exception as err:  # noqa: BLE001 - the caller names it per path
            return err

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = max(1, min(len(paths), cores or 1))
    if workers == 1:
        return [measure(path) for path in paths]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(measure, paths))


def digest_problems(folder: str, entries: list[dict], what: str = "files") -> list[str]:
    """Every entry's file is a regular file inside `folder` with the size and sha256 it
    records (one problem per file that is not). The phase is shown as checking `what`."""
    problems = []
    with phases.phase(f"checking the sha256 of {len(entries):,} {what}",
                      total=sum(e["bytes"] for e in entries), unit="B") as step:
        measured = _sizes_and_sha256(folder, [entry["path"] for entry in entries], step.update)
    for entry, found in zip(entries, measured):
        path = entry["path"]
        if isinstance(found, FileNotFoundError):
            problems.append(f"{path}: missing (listed in {BUILD_REPORT})")
            continue
        if isinstance(found, NotListable):
            problems.append(f"{path}: {found.strerror}; not read (listed in {BUILD_REPORT})")
            continue
        if isinstance(found, OSError):  # e.g. a config "folder" that is a file: ENOTDIR
            problems.append(f"{path}: unreadable: {found.strerror or found} (listed in "
                            f"{BUILD_REPORT})")
            continue
        if isinstance(found, BaseException):
            raise found
        size, digest = found
        if size != entry["bytes"] or digest != entry["sha256"]:
            problems.append(f"{path}: {size} bytes, sha256 {digest[:16]}..., but "
                            f"{BUILD_REPORT} says {entry['bytes']} bytes, sha256 "
                            f"{entry['sha256'][:16]}... (changed or mixed output)")
    return problems


def shard_problems(folder: str, report: dict) -> list[str]:
    """Every file build.json lists has the size and sha256 it records: the shards, and the
    reports it names (dead letters, filter report; builds before these were listed name none)."""
    return digest_problems(folder, listed(report, "files") + listed(report, "report_files"),
                           "shards and reports")


# ---- the upstream export -------------------------------------------------------------------------

def upstream_problems(folder: str, report: dict) -> list[str]:
    """The export (DIR/upstream) is what the build wrote: every file `upstream_files` lists has
    its size and sha256; no link, FIFO, device or socket anywhere in it (a file a reader would
    follow out of the folder or block on); no `*_preprocessed.jsonl` the report does not list
    (a reader of the export would play it). Other unlisted files (e.g. images an earlier build
    exported) are never read: publishing and evaluating go by the JSONL files and the list."""
    upstream = fileio.join(folder, UPSTREAM_DIR)
    entries = report.get("upstream_files")
    if entries is None:
        if not fileio.is_dir(upstream):
            return []
        return [f"{UPSTREAM_DIR}/: {BUILD_REPORT} records no digests of the export (written "
                "by an older build); build again to check it"]
    if not fileio.is_dir(upstream):
        # the export is optional: a copy published without --with_upstream leaves it out and
        # keeps build.json as it is; no reader finds an export there, so there is none to check
        return []
    entries = listed(report, "upstream_files")
    names = {e["path"] for e in entries}
    problems = digest_problems(folder, entries, "exported files") if entries else []
    for name in fileio.list_names(upstream):
        path = f"{UPSTREAM_DIR}/{name}"
        if name.endswith(UPSTREAM_SUFFIX) and path not in names:
            problems.append(f"{path}: not written by this build (not listed in {BUILD_REPORT}):"
                            " a reader of the export would play it")
    if fileio.is_local(upstream):
        problems += [p for p in special_files(folder, UPSTREAM_DIR)
                     if p.split(":", 1)[0] not in names]
    return problems


def export_left_out(folder: str, report: dict) -> bool:
    """build.json lists an upstream export that is not in the folder (a published copy)."""
    return bool(report.get("upstream_files")) and not fileio.is_dir(
        fileio.join(folder, UPSTREAM_DIR))


def special_files(folder: str, relative: str) -> list[str]:
    """One problem per link, FIFO, socket or device under `folder/relative` (local folders;
    links to folders are not followed)."""
    root = fileio.local_path(fileio.join(folder, relative))
    problems = []
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(parent, name)
            mode = os.lstat(full).st_mode
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                continue
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            where = posixpath.join(relative, os.path.relpath(full, root).replace(os.sep, "/"))
            problems.append(f"{where}: {kind} in the export (a build writes regular files only)")
    return sorted(problems)


# ---- the card ------------------------------------------------------------------------------------

class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: a card never uses them, and a reader walking an alias bomb
    ("billion laughs") would loop for ever."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed in a card",
                                              event.start_mark)
        return super().compose_node(parent, index)


def read_card(folder: str) -> tuple[str | None, str | None]:
    """(the card's text, None), or (None, why it cannot be read)."""
    try:
        data = read_listed(folder, CARD, CARD_MAX_BYTES)
    except FileNotFoundError:
        return None, "README.md (the dataset card) is missing"
    except OSError as err:
        return None, f"README.md: unreadable: {err.strerror or err}"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return None, f"README.md: not UTF-8 ({err})"


def front_matter(text: str) -> tuple[dict | None, str | None]:
    """(the YAML front matter between the leading `---` lines as a dict, None), or (None, why
    it cannot be read)."""
    if not text.startswith("---\n") or "\n---" not in text[4:]:
        return None, "README.md: no YAML front matter (--- ... ---)"
    try:
        meta = yaml.load(text[4:text.index("\n---", 4)], Loader=_NoAliasLoader)
    except yaml.YAMLError as err:
        return None, f"README.md: front matter is not YAML: {' '.join(str(err).split())}"
    except RecursionError:
        return None, "README.md: front matter nested too deeply"
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return None, f"README.md: front matter is a {type(meta).__name__}, not a mapping"
    return meta, None


def card_meta(folder: str) -> tuple[dict | None, str | None]:
    """The card's front matter (see `read_card`, `front_matter`)."""
    text, problem = read_card(folder)
    return (None, problem) if text is None else front_matter(text)


def data_file_patterns(config: dict) -> list[tuple[str, str]]:
    """(split, glob) pairs of one `configs:` entry (`data_files` a string, or a list of strings
    or of {split, path} with `path` a string or a list); parts of another shape are left out
    (`check_card` reports them)."""
    data_files = config.get("data_files") or []
    if isinstance(data_files, str):
        data_files = [{"split": "train", "path": data_files}]
    pairs = []
    for entry in data_files if isinstance(data_files, list) else []:
        if isinstance(entry, str):
            entry = {"split": "train", "path": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("split", "train"), str):
            continue
        paths = entry.get("path")
        for pattern in [paths] if isinstance(paths, str) else (
                paths if isinstance(paths, list) else []):
            if isinstance(pattern, str):
                pairs.append((entry.get("split", "train"), pattern))
    return pairs


def card_problems(folder: str, report: dict) -> list[str]:
    """The card's per-config content fingerprint names the files build.json lists."""
    meta, problem = card_meta(folder)
    if meta is None:
        return [problem]
    infos = meta.get("dataset_info") or []
    described = {(i.get("config_name"), i.get("description"))
                 for i in (infos if isinstance(infos, list) else []) if isinstance(i, dict)
                 and isinstance(i.get("config_name"), str)
                 and isinstance(i.get("description"), str)}
    problems = []
    for info in dataset_info(listed(report, "files")):
        if (info["config_name"], info["description"]) not in described:
            problems.append(f"README.md: config {info['config_name']!r}: the card's content "
                            f"fingerprint does not match the shards {BUILD_REPORT} lists")
    return problems


# ---- what the folder holds -----------------------------------------------------------------

def shard_folders(root: str) -> dict[tuple[str, str], list[str]]:
    """(shard set, config) -> sorted shard file names, for every config folder DIR/<config>/
    holding Parquet files: its `test` and `filtered_out` sets (`core.layout`). A Parquet file
    named for neither is listed under `test`, where `check_shard_names` names it."""
    found: dict[tuple[str, str], list[str]] = {}
    for config in fileio.list_names(root):
        folder = fileio.join(root, config)
        if config == TRAIN_DIR or not fileio.is_dir(folder):
            continue
        for name in fileio.list_names(folder):
            if name.endswith(".parquet"):
                found.setdefault((shard_set_of(name) or TEST, config), []).append(name)
    return found


def train_shards(root: str) -> list[str]:
    """Shard names of the train split (DIR/data/train-*.parquet), when the build wrote one."""
    return [n for n in fileio.list_names(fileio.join(root, TRAIN_DIR)) if n.endswith(".parquet")]


def check_build_report(root: str) -> tuple[dict | None, list[str]]:
    try:
        report = load_report(root)
    except FileNotFoundError:
        return None, [f"{BUILD_REPORT}: missing (every build writes it last; an absent "
                      "report means the build did not finish)"]
    except UnusableReport as err:
        return None, [str(err)]
    problems = report_shape_problems(report)
    if problems:
        return None, problems
    for name, entry in sorted(report.get("scenarios", {}).items()):
        if not entry.get("accounted", False):
            problems.append(f"{BUILD_REPORT}: {name}: raw items ({entry.get('raw_items')}) "
                            "!= samples + dead letters + exclusions")
    train = report.get("train") or {}
    for name, entry in sorted(train.get("scenarios", {}).items()):
        balance = entry.get("examples", 0) + entry.get("dead_letters", 0) + sum(
            entry.get("excluded", {}).values())
        if not entry.get("accounted", False) or entry.get("raw_items") != balance:
            problems.append(f"{BUILD_REPORT}: train split: {name}: raw items "
                            f"({entry.get('raw_items')}) != examples + dead letters + exclusions")
    if train.get("scenarios") and train.get("rows", 0) != train.get("examples"):
        problems.append(f"{BUILD_REPORT}: train split: {train.get('rows', 0)} rows written "
                        f"for {train.get('examples')} examples")
    return report, problems


def check_report_counts(report: dict, rows: dict, folders: dict) -> list[str]:
    """build.json's per-set rows and shards against what is on disk."""
    problems = []
    for name, entry in sorted(report.get("scenarios", {}).items()):
        config = entry.get("config")
        if not config:
            continue
        for shard_set in POOL_SETS:
            claimed = entry.get("rows", {}).get(shard_set)
            actual = rows.get((shard_set, config), 0)
            if claimed is not None and claimed != actual:
                problems.append(f"{BUILD_REPORT}: {name}: {claimed} {shard_set} rows reported, "
                                f"{actual} in the shards")
            claimed_shards = entry.get("shards", {}).get(shard_set)
            actual_shards = len(folders.get((shard_set, config), []))
            if claimed_shards is not None and claimed_shards != actual_shards:
                problems.append(f"{BUILD_REPORT}: {name}: {claimed_shards} {shard_set} shards "
                                f"reported, {actual_shards} on disk")
    return problems


def card_configs(root: str) -> tuple[list[dict] | None, list[str]]:
    """The card's `configs:` entries, each a mapping with a string `config_name` (None and the
    problems when the card has no such list)."""
    meta, problem = card_meta(root)
    if meta is None:
        return None, [problem]
    configs = meta.get("configs")
    if not isinstance(configs, list):
        return None, ["README.md: front matter has no `configs:` list"]
    malformed = [c for c in configs
                 if not isinstance(c, dict) or not isinstance(c.get("config_name"), str)]
    if malformed:
        return None, [f"README.md: {len(malformed)} `configs:` entries are not mappings with a "
                      f"config_name (e.g. {str(malformed[0])[:80]})"]
    return configs, []


def check_card(root: str, folders: dict, train=()) -> list[str]:
    """The card's configs name exactly the config folders (plus `default` for the train
    split), and each data_files glob matches at least one shard."""
    configs, problems = card_configs(root)
    if configs is None:
        return problems
    on_disk = {f"{c}/{n}" for (_, c), names in folders.items() for n in names}
    on_disk |= {f"{TRAIN_DIR}/{n}" for n in train}
    named = set()
    for entry in configs:
        name = entry.get("config_name")
        named.add(name)
        patterns = data_file_patterns(entry)
        if not patterns:
            problems.append(f"README.md: config {name!r}: no data_files")
        for split, pattern in patterns:
            if not any(fnmatch.fnmatch(p, pattern) for p in on_disk):
                problems.append(f"README.md: config {name!r} split {split!r}: "
                                f"no shard matches {pattern!r}")
    folder_configs = {c for _, c in folders} | ({TRAIN_CONFIG} if train else set())
    for config in sorted(folder_configs - named):
        problems.append(f"README.md: config folder {config!r} is not in the card's configs")
    for config in sorted(n for n in named - folder_configs if n):
        problems.append(f"README.md: card config {config!r} has no shard folder")
    return problems


def check_shard_names(shard_set: str, config: str, names: list[str]) -> list[str]:
    """The names of one shard set are `<set>-00000-of-0000N` .. `<set>-0000(N-1)-of-0000N`."""
    where = folder_label(shard_set, config)
    expected = (f"{TRAIN}-IIIII-of-NNNNN.parquet" if shard_set == TRAIN else
                " or ".join(f"{s}-IIIII-of-NNNNN.parquet" for s in POOL_SETS))
    parsed = [m if m and m.group(1) == shard_set else None
              for m in map(SHARD_PATTERN.match, names)]
    problems = [f"{where}/{n}: not a shard name ({expected})"
                for n, m in zip(names, parsed) if not m]
    numbers = sorted((int(m.group(2)), int(m.group(3))) for m in parsed if m)
    counts = {count for _, count in numbers}
    if len(counts) > 1:
        problems.append(f"{where}: {shard_set} shards disagree on the shard count: "
                        f"{sorted(counts)} (a leftover of an earlier build?)")
    elif counts and [i for i, _ in numbers] != list(range(counts.pop())):
        problems.append(f"{where}: {shard_set} shard indexes {[i for i, _ in numbers]} are not "
                        "0..N-1")
    return problems


def stray_files(root: str, report: dict, folders: dict, train=()) -> list[str]:
    """Shard files on disk that the build report does not list: another build's, a copy, a
    leftover. Readers glob shard folders, so such a file would be read as the build's."""
    named = {f["path"] for f in listed(report, "files")}
    on_disk = [f"{folder_label(s, c)}/{n}" for (s, c), names in folders.items() for n in names]
    on_disk += [f"{TRAIN_DIR}/{n}" for n in train]
    return [f"{path}: a Parquet file {BUILD_REPORT} does not list (another build's, or a copy)"
            for path in sorted(on_disk) if path not in named]


def layout_problems(root: str, report: dict) -> list[str]:
    """The folder holds what its report says and nothing more: the card's configs and globs
    match the shard folders, shard names are 0..N-1 of N, no stray shard file."""
    folders, train = shard_folders(root), train_shards(root)
    problems = check_card(root, folders, train)
    for (split, config), names in sorted(folders.items()):
        problems += check_shard_names(split, config, names)
    if train:
        problems += check_shard_names(TRAIN, TRAIN_CONFIG, train)
    return problems + stray_files(root, report, folders, train)


# ---- leftovers of a killed build ---------------------------------------------------------------

def remove_leftovers(output: str) -> int:
    """Temporary files (`.tmp-*`) a killed build left anywhere under `output`; only called while
    the lock is held, so none of them belongs to a running build. Returns how many. A link to
    a folder is not followed: nothing outside `output` is removed."""
    fs, root = fileio.filesystem(output)
    if not fs.isdir(root) or not fileio.exists(report_url(output)):
        return 0  # not a folder a build has written (a killed one marked it "building" first)
    removed = 0
    for relative in files_under(output):
        if posixpath.basename(relative).startswith(TEMPORARY_PREFIX):
            remove_file(fileio.join(output, relative))
            removed += 1
    return removed


def remove_file(url: str) -> None:
    """Remove one file (a link: the link itself, never what it points to)."""
    if not fileio.is_local(url):
        fileio.remove(url)
        return
    try:
        os.remove(fileio.local_path(url))
    except FileNotFoundError:
        pass


def files_under(url: str) -> list[str]:
    """Sorted paths (relative to `url`, '/'-separated) of every file under a folder; a link is
    listed as a file of its own and never followed (fsspec's `find` follows links to folders,
    which would reach outside). [] when `url` is not a folder."""
    if not fileio.is_local(url):
        fs, root = fileio.filesystem(url)
        if not fs.isdir(root):
            return []
        root = root.rstrip("/")
        return sorted(posixpath.relpath(p, root) for p in fs.find(root))
    root = fileio.local_path(url)
    if not os.path.isdir(root):  # (`url` itself may be a link to a folder: it was given)
        return []
    found = []
    for parent, dirs, files in os.walk(root):  # followlinks=False: a link to a folder is in dirs
        links = [d for d in dirs if os.path.islink(os.path.join(parent, d))]
        for name in files + links:
            found.append(os.path.relpath(os.path.join(parent, name), root).replace(os.sep, "/"))
    return sorted(found)
