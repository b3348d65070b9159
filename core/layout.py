"""The layout of a build folder, in one place: every path a build writes and every reader
(`validate`, `publish`, `inspect`, the runtime, a partial rebuild) looks for.

    DIR/README.md                                   the dataset card (a `configs:` block per config)
    DIR/<config>/test-0000i-of-0000N.parquet        the pool's rows the filter keeps (split `test`)
    DIR/<config>/filtered_out-0000i-of-0000M.parquet  the pool's rows the filter leaves out
    DIR/data/train-*.parquet                        the train split (the card's `default` config)
    DIR/upstream/<config>_preprocessed.jsonl        the upstream layout, with the image files its
    DIR/upstream/<image folders>/...                templates name (only with --upstream_export)
    DIR/reports/build.json                          the build report (status, counts, checksums)
    DIR/reports/dead_letters.jsonl                  one line per rejected raw item
    DIR/reports/filter.json                         the filter settings and per-scenario counts
    DIR/reports/plots/*.png                         plots of the build
    DIR/.build.lock                                 held by the build writing the folder

The pool of a config is written once, as two disjoint shard sets (`POOL_SETS`): the split
`test` is the `test` set, the split `unfiltered` is both sets (the card's `data_files` list both
patterns), so every frame's bytes are stored once. Without a filter (or when it keeps every
row) there is no `filtered_out` set and both splits name the same files. Each set is cut into
consecutive runs in id order, so `unfiltered` reads the kept rows in id order, then the rows
left out in id order.

Shard names follow `datasets.push_to_hub` (`<set>-<index:05d>-of-<count:05d>.parquet`).
"""
from __future__ import annotations

import re

from proactivebench_builder.core.fileio import join

TEST, UNFILTERED, TRAIN = "test", "unfiltered", "train"   # the splits a user loads
# The shard set of a pool's rows the filter leaves out: not a split of its own (`unfiltered`
# is the `test` set and this one).
FILTERED_OUT = "filtered_out"
POOL_SETS = (TEST, FILTERED_OUT)
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

SHARD_NAME = "{shard_set}-{index:05d}-of-{count:05d}.parquet"
SHARD_PATTERN = re.compile(r"^(test|filtered_out|train)-(\d{5})-of-(\d{5})\.parquet$")

# Top-level folders of a build that are not configs.
NOT_CONFIGS = frozenset({UNFILTERED, TRAIN_DIR, REPORTS_DIR, UPSTREAM_DIR, TRAIN_CONFIG})


def split_sets(split: str) -> tuple[str, ...]:
    """The shard sets a split is read from, in the order its rows come: `test` is the pool's
    kept rows, `unfiltered` the kept rows and then those left out, `train` its own set."""
    return {TEST: (TEST,), UNFILTERED: POOL_SETS, TRAIN: (TRAIN,)}[split]


def splits_of_set(shard_set: str) -> tuple[str, ...]:
    """The splits whose rows a shard set holds (a `test` shard is in `unfiltered` too)."""
    return {TEST: (TEST, UNFILTERED), FILTERED_OUT: (UNFILTERED,), TRAIN: (TRAIN,)}[shard_set]


def shard_folder(output: str, shard_set: str, config: str) -> str:
    """Where a shard set lives: DIR/<config>/ for both sets of a pool, DIR/data/ for the train
    split."""
    return join(output, TRAIN_DIR if shard_set == TRAIN else config)


def shard_name(shard_set: str, index: int, count: int) -> str:
    return SHARD_NAME.format(shard_set=shard_set, index=index, count=count)


def shard_url(output: str, shard_set: str, config: str, index: int, count: int) -> str:
    return join(shard_folder(output, shard_set, config), shard_name(shard_set, index, count))


def set_glob(shard_set: str, config: str) -> str:
    """The card's `data_files` pattern of a shard set (relative to DIR)."""
    return f"{folder_label(shard_set, config)}/{shard_set}-*.parquet"


def folder_label(shard_set: str, config: str) -> str:
    """A shard set's folder relative to DIR, as messages name it."""
    return TRAIN_DIR if shard_set == TRAIN else config


def shard_set_of(name: str) -> str | None:
    """The shard set a file name in a config folder belongs to (`test-...`, `filtered_out-...`),
    None when it names none."""
    match = SHARD_PATTERN.match(name)
    return match.group(1) if match and match.group(1) in POOL_SETS else None


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
