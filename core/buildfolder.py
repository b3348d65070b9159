"""What a build folder says about itself, and the one check of it that `validate`, `publish`, a
partial rebuild and the evaluation runtime run before trusting it.

- The folder says what it is: `reports/build.json` carries `status`, "building" from the
  moment a build starts until it ends, then "ok" or "failed" with the reason.
- `folder_problems`: a finished build whose status is "ok", whose every shard file has the size
  and sha256 that `build.json` records, and whose card fingerprints the same files.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os

import yaml

from proactivebench_builder.core import fileio
from proactivebench_builder.core.layout import (
    BUILD_REPORT, CARD, SHARD_PATTERN, TEMPORARY_PREFIX, TEST, TRAIN, TRAIN_CONFIG, TRAIN_DIR,
    UNFILTERED, folder_label, report_url)

BUILDING, OK, FAILED = "building", "ok", "failed"


# ---- the status in build.json ------------------------------------------------------------------

def read_report(output: str) -> dict | None:
    try:
        return json.loads(fileio.read_bytes(report_url(output)))
    except (FileNotFoundError, ValueError):
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
    without sizes and a fingerprint a rebuilt folder would load the previous build's rows."""
    by_config: dict[str, list[dict]] = {}
    for f in files:
        by_config.setdefault(f["config"], []).append(f)
    infos = []
    for config, parts in sorted(by_config.items()):
        digest = hashlib.sha256("".join(f"{f['path']} {f['sha256']}\n" for f in sorted(
            parts, key=lambda f: f["path"])).encode()).hexdigest()
        splits = {}
        for f in parts:
            entry = splits.setdefault(f["split"], {"name": f["split"], "num_bytes": 0,
                                                   "num_examples": 0})
            entry["num_bytes"] += f["bytes"]
            entry["num_examples"] += f["rows"]
        size = sum(f["bytes"] for f in parts)
        infos.append({"config_name": config, "description": f"content sha256:{digest}",
                      "splits": [splits[k] for k in sorted(splits)],
                      "download_size": size, "dataset_size": size})
    return infos


# ---- the folder check ----------------------------------------------------------------------------

def folder_problems(folder: str, checksums: bool = True) -> list[str]:
    """Why `folder` is not a finished, intact build ([] when it is): one problem when it is not
    a successfully finished build at all, else one per shard that differs from build.json."""
    problems = status_problems(folder)
    if problems or not checksums:
        return problems
    report = read_report(folder)
    return (shard_problems(folder, report) + card_problems(folder, report)
            + layout_problems(folder, report))


def status_problems(folder: str) -> list[str]:
    """[] when `folder` holds a build that finished with status "ok", else one problem."""
    folder = folder.rstrip("/")
    if not fileio.is_dir(folder):
        return [f"{folder}: no such folder"]
    if not fileio.exists(report_url(folder)):
        return [f"{BUILD_REPORT}: missing: {folder} is not a finished build (build one with "
                "run_pipeline.py --output DIR)"]
    report = read_report(folder)
    if report is None:
        return [f"{BUILD_REPORT}: not valid JSON (a damaged or foreign report)"]
    status = report.get("status")
    if status == BUILDING:
        return [f"{folder}: a build into this folder started and did not finish ({BUILD_REPORT} "
                "status 'building'); build again"]
    if status == FAILED:
        return [f"{folder}: its build failed: {report.get('failure', 'no reason recorded')}"]
    if status != OK:
        return [f"{BUILD_REPORT}: no build status (written by an older or unfinished build); "
                "build again"]
    return []


def shard_problems(folder: str, report: dict) -> list[str]:
    """Every file build.json lists has the size and sha256 it records."""
    problems = []
    for entry in report.get("files") or []:
        url = fileio.join(folder, entry["path"])
        try:
            size, digest = _size_and_sha256(url)
        except FileNotFoundError:
            problems.append(f"{entry['path']}: missing (listed in {BUILD_REPORT})")
            continue
        if size != entry.get("bytes") or digest != entry.get("sha256"):
            problems.append(f"{entry['path']}: {size} bytes, sha256 {digest[:16]}..., but "
                            f"{BUILD_REPORT} says {entry.get('bytes')} bytes, sha256 "
                            f"{str(entry.get('sha256'))[:16]}... (changed or mixed output)")
    return problems


def card_problems(folder: str, report: dict) -> list[str]:
    """The card's per-config content fingerprint names the files build.json lists."""
    try:
        card = fileio.read_bytes(fileio.join(folder, CARD)).decode("utf-8")
    except FileNotFoundError:
        return ["README.md (the dataset card) is missing"]
    described = set()
    if card.startswith("---"):
        try:
            front = yaml.safe_load(card.split("---", 2)[1]) or {}
            described = {(i.get("config_name"), i.get("description"))
                         for i in front.get("dataset_info") or []}
        except (yaml.YAMLError, AttributeError, IndexError):
            return ["README.md: unreadable YAML front matter"]
    problems = []
    for info in dataset_info(report.get("files") or []):
        if (info["config_name"], info["description"]) not in described:
            problems.append(f"README.md: config {info['config_name']!r}: the card's content "
                            f"fingerprint does not match the shards {BUILD_REPORT} lists")
    return problems


def _size_and_sha256(url: str) -> tuple[int, str]:
    fs, path = fileio.filesystem(url)
    digest, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


# ---- what the folder holds -----------------------------------------------------------------

def shard_folders(root: str) -> dict[tuple[str, str], list[str]]:
    """(split, config) -> sorted shard file names, for every folder holding Parquet shards:
    DIR/<config>/ is the test split, DIR/unfiltered/<config>/ the pool."""
    found = {}
    for split, base in ((TEST, root), (UNFILTERED, fileio.join(root, UNFILTERED))):
        for name in fileio.list_names(base):
            folder = fileio.join(base, name)
            if (split == TEST and name == TRAIN_DIR) or not fileio.is_dir(folder):
                continue
            shards = [n for n in fileio.list_names(folder) if n.endswith(".parquet")]
            if shards:
                found[(split, name)] = shards
    return found


def train_shards(root: str) -> list[str]:
    """Shard names of the train split (DIR/data/train-*.parquet), when the build wrote one."""
    return [n for n in fileio.list_names(fileio.join(root, TRAIN_DIR)) if n.endswith(".parquet")]


def check_build_report(root: str) -> tuple[dict | None, list[str]]:
    url = fileio.join(root, BUILD_REPORT)
    if not fileio.exists(url):
        return None, [f"{BUILD_REPORT}: missing (every build writes it last; an absent "
                      "report means the build did not finish)"]
    try:
        report = json.loads(fileio.read_bytes(url))
    except ValueError as err:
        return None, [f"{BUILD_REPORT}: not valid JSON: {err}"]
    problems = []
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
    """build.json's per-split rows and shards against what is on disk."""
    problems = []
    for name, entry in sorted(report.get("scenarios", {}).items()):
        config = entry.get("config")
        if not config:
            continue
        for split in (TEST, UNFILTERED):
            claimed = entry.get("rows", {}).get(split)
            actual = rows.get((split, config), 0)
            if claimed is not None and claimed != actual:
                problems.append(f"{BUILD_REPORT}: {name}: {claimed} {split} rows reported, "
                                f"{actual} in the shards")
            claimed_shards = entry.get("shards", {}).get(split)
            actual_shards = len(folders.get((split, config), []))
            if claimed_shards is not None and claimed_shards != actual_shards:
                problems.append(f"{BUILD_REPORT}: {name}: {claimed_shards} {split} shards "
                                f"reported, {actual_shards} on disk")
    return problems


def card_configs(root: str) -> tuple[list[dict] | None, list[str]]:
    url = fileio.join(root, CARD)
    if not fileio.exists(url):
        return None, ["README.md: missing dataset card"]
    text = fileio.read_bytes(url).decode("utf-8")
    if not text.startswith("---\n") or "\n---" not in text[4:]:
        return None, ["README.md: no YAML front matter (--- ... ---)"]
    try:
        meta = yaml.safe_load(text[4:text.index("\n---", 4)]) or {}
    except yaml.YAMLError as err:
        return None, [f"README.md: front matter is not YAML: {err}"]
    configs = meta.get("configs")
    if not isinstance(configs, list):
        return None, ["README.md: front matter has no `configs:` list"]
    return configs, []


def check_card(root: str, folders: dict, train=()) -> list[str]:
    """The card's configs name exactly the config folders (plus `default` for the train
    split), and each data_files glob matches at least one shard."""
    configs, problems = card_configs(root)
    if configs is None:
        return problems
    on_disk = {f"{c}/{n}" if s == TEST else f"{UNFILTERED}/{c}/{n}"
               for (s, c), names in folders.items() for n in names}
    on_disk |= {f"{TRAIN_DIR}/{n}" for n in train}
    named = set()
    for entry in configs:
        name = entry.get("config_name")
        named.add(name)
        for files in entry.get("data_files") or []:
            pattern = files.get("path", "")
            if not any(fnmatch.fnmatch(p, pattern) for p in on_disk):
                problems.append(f"README.md: config {name!r} split {files.get('split')!r}: "
                                f"no shard matches {pattern!r}")
    folder_configs = {c for _, c in folders} | ({TRAIN_CONFIG} if train else set())
    for config in sorted(folder_configs - named):
        problems.append(f"README.md: config folder {config!r} is not in the card's configs")
    for config in sorted(n for n in named - folder_configs if n):
        problems.append(f"README.md: card config {config!r} has no shard folder")
    return problems


def check_shard_names(split: str, config: str, names: list[str]) -> list[str]:
    where = folder_label(split, config)
    prefix = TRAIN if split == TRAIN else TEST
    parsed = [m if m and m.group(1) == prefix else None for m in map(SHARD_PATTERN.match, names)]
    problems = [f"{where}/{n}: not a shard name ({prefix}-IIIII-of-NNNNN.parquet)"
                for n, m in zip(names, parsed) if not m]
    numbers = sorted((int(m.group(2)), int(m.group(3))) for m in parsed if m)
    counts = {count for _, count in numbers}
    if len(counts) > 1:
        problems.append(f"{where}: shards disagree on the shard count: {sorted(counts)} "
                        "(a leftover of an earlier build?)")
    elif counts and [i for i, _ in numbers] != list(range(counts.pop())):
        problems.append(f"{where}: shard indexes {[i for i, _ in numbers]} are not 0..N-1")
    return problems

def stray_files(root: str, report: dict, folders: dict, train=()) -> list[str]:
    """Shard files on disk that the build report does not list: another build's, a copy, a
    leftover. Readers glob shard folders, so such a file would be read as the build's."""
    listed = {f["path"] for f in report.get("files") or []}
    on_disk = [f"{folder_label(s, c)}/{n}" for (s, c), names in folders.items() for n in names]
    on_disk += [f"{TRAIN_DIR}/{n}" for n in train]
    return [f"{path}: a Parquet file {BUILD_REPORT} does not list (another build's, or a copy)"
            for path in sorted(on_disk) if path not in listed]


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
    the lock is held, so none of them belongs to a running build. Returns how many."""
    fs, root = fileio.filesystem(output)
    if not fs.isdir(root) or not fileio.exists(report_url(output)):
        return 0  # not a folder a build has written (a killed one marked it "building" first)
    removed = 0
    for path in fs.find(root):
        if os.path.basename(path).startswith(TEMPORARY_PREFIX):
            fs.rm(path)
            removed += 1
    return removed
