"""The layout of a build folder, in one place: every path a build writes and every reader
(`validate`, `publish`, `inspect`, the runtime, a partial rebuild) looks for.

    DIR/README.md                                   the dataset card (a `configs:` block per config)
    DIR/<config>/test-0000i-of-0000N.parquet        the (filtered) test split
    DIR/unfiltered/<config>/test-*.parquet          the pool before leakage filtering
    DIR/data/train-*.parquet                        the train split (the card's `default` config)
    DIR/upstream/<config>_preprocessed.jsonl        the upstream layout, with the image files its
    DIR/upstream/<image folders>/...                templates name
    DIR/reports/build.json                          the build report (status, counts, checksums)
    DIR/reports/dead_letters.jsonl                  one line per rejected raw item
    DIR/reports/filter.json                         the filter settings and per-scenario counts
    DIR/reports/plots/*.png                         plots of the build
    DIR/.build.lock                                 held by the build writing the folder

Shard names follow `datasets.push_to_hub` (`<split>-<index:05d>-of-<count:05d>.parquet`); the
test and unfiltered splits both name their shards `test-...` (they are the `test` and
`unfiltered` splits of one config, told apart by folder).
"""
from __future__ import annotations

import re

from proactivebench_builder.core.fileio import join

TEST, UNFILTERED, TRAIN = "test", "unfiltered", "train"
TRAIN_DIR = "data"            # the train split's folder
TRAIN_CONFIG = "default"      # the card's config of the train split
REPORTS_DIR = "reports"
PLOTS_DIR = "reports/plots"
BUILD_REPORT = "reports/build.json"
DEAD_LETTERS = "reports/dead_letters.jsonl"
FILTER_REPORT = "reports/filter.json"
CARD = "README.md"
LOCK = ".build.lock"
UPSTREAM_DIR = "upstream"
UPSTREAM_SUFFIX = "_preprocessed.jsonl"
# Beside an export's JSONL files: what the build was (its stand-ins), so that an import of the
# export (or of `publish --with_upstream`'s copy) cannot pass it off as the upstream release.
EXPORT_MARKER = "proactivebench_builder_export.json"
TEMPORARY_PREFIX = ".tmp-"   # a file being written; no glob of the card matches it
# The whole name `fileio.temporary_name` gives one: prefix, run token, pid, counter, final name
# (a user's own `.tmp-notes.txt` does not match it).
TEMPORARY_NAME = re.compile(r"^\.tmp-[0-9a-f]{12}-\d+-\d+-")
FAILURES = ".tmp-failures"  # typed worker failures of a remote run (pipeline.failures)

SHARD_NAME = "{split}-{index:05d}-of-{count:05d}.parquet"
SHARD_PATTERN = re.compile(r"^(test|train)-(\d{5})-of-(\d{5})\.parquet$")

# Top-level folders of a build that are not configs.
NOT_CONFIGS = frozenset({UNFILTERED, TRAIN_DIR, REPORTS_DIR, UPSTREAM_DIR, TRAIN_CONFIG})


def split_folder(output: str, split: str, config: str) -> str:
    """Where a split of a config lives: DIR/<config>/ for the test split, DIR/unfiltered/<config>/
    for the pool before filtering, DIR/data/ for the train split."""
    if split == TEST:
        return join(output, config)
    if split == TRAIN:
        return join(output, TRAIN_DIR)
    return join(output, UNFILTERED, config)


def shard_name(split: str, index: int, count: int) -> str:
    """A shard's file name; the unfiltered pool's shards are named as the test split's."""
    return SHARD_NAME.format(split=TRAIN if split == TRAIN else TEST, index=index, count=count)


def shard_url(output: str, split: str, config: str, index: int, count: int) -> str:
    return join(split_folder(output, split, config), shard_name(split, index, count))


def split_glob(split: str, config: str) -> str:
    """The card's `data_files` path of a split (relative to DIR)."""
    if split == TRAIN:
        return f"{TRAIN_DIR}/{TRAIN}-*.parquet"
    if split == TEST:
        return f"{config}/{TEST}-*.parquet"
    return f"{UNFILTERED}/{config}/{TEST}-*.parquet"


def folder_label(split: str, config: str) -> str:
    """A split's folder relative to DIR, as messages name it."""
    return {TEST: config, TRAIN: TRAIN_DIR}.get(split, f"{UNFILTERED}/{config}")


def upstream_jsonl_name(config: str) -> str:
    return f"{config}{UPSTREAM_SUFFIX}"


def upstream_dir(output: str) -> str:
    return join(output, UPSTREAM_DIR)


def report_url(output: str, relative: str = BUILD_REPORT) -> str:
    return join(output, relative)


def relative_to(url: str, output: str) -> str:
    """`url` relative to the build folder `output` (unchanged when it lies elsewhere)."""
    prefix = output.rstrip("/") + "/"
    return url[len(prefix):] if url.startswith(prefix) else url
