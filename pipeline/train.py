"""The train split for GRPO post-training (paper §5, App. C): single-turn examples mixing
ambiguous frames (an early stroke prefix, a tight crop) with unambiguous ones (the full drawing,
the wide view), so a model learns when to ask and when to answer.

It shares the stages of the test pool (`pipeline.reading`): the train units of scenarios that
offer a train split (`list_train_units` non-empty) are read, built and written in the same
stages as the test units (one stage each, so both workers stay busy instead of waiting at the
end of twice as many stages), each example with one frame reference; the split is written as
`data/train-*.parquet` (the card's `default` config) with the same deterministic shard writer
as the test split. Disjointness from the test pool is the scenario's job and holds by
construction (QuickDraw: the drawings ranked after the test picks; COCO: the train2014
annotations).
"""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter

import pyarrow.parquet as pq

from proactivebench_builder.core import fileio, results
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.layout import TRAIN, TRAIN_CONFIG, shard_url
from proactivebench_builder.core.records import train_arrow_schema
from proactivebench_builder.filters.predictions import train_confidences
from proactivebench_builder.pipeline.row_store import fetch_many
from proactivebench_builder.pipeline.scenarios import train_scenario
from proactivebench_builder.pipeline.writers import (
    FrameChanged, checked_frame, dropped_the_only_shard, shard_plan, write_parquet)

LOG = logging.getLogger(__name__)
TRAIN_ROWS_PER_SHARD = 1000  # ~50 MB of COCO crops; more shards let both workers render


def train_shard_rows(examples):
    """The whole train split's examples, each as a ShardRow of its train shard (one shard plan
    over all scenarios' examples, by hash of key)."""
    examples = sorted(examples, key=lambda v: v.key)
    keys = [v.key for v in examples]
    if len(set(keys)) != len(keys):
        raise ValueError("train examples repeat keys")
    plan = shard_plan(keys, TRAIN_ROWS_PER_SHARD, "train")
    # the examples each scenario contributed: the reports check raw items against them
    examples_by_label = Counter(v.scenario for v in examples)
    yield results.TrainPool(dict(sorted(examples_by_label.items())))
    for value in examples:
        index, count = plan[value.key]
        yield results.ShardRow(results.ShardKey(TRAIN, "", index, count), value)


_CONFIDENCES: dict = {}  # predictions URL -> its train rows' columns, read once per process


def confidences_for(config: BuildConfig) -> dict:
    """(config, key) -> the released confidence columns the build's predictions give (checked
    in the driver before any work); {} without predictions."""
    url = config.selection.predictions
    if not url:
        return {}
    if url not in _CONFIDENCES:
        _CONFIDENCES[url] = train_confidences(url)
    return _CONFIDENCES[url]


def write_train_shard(config: BuildConfig, index: int, count: int, values, ahead=None):
    """Render the frames of one train shard's examples and write it: its ShardWritten, and for
    an example whose frame changed since it was validated (checked as the test split's are:
    writers.checked_frame) a DeadLetter and a Dropped instead of its row. `ahead`
    (shards.produced_ahead on a thread) renders the next rows while the file is written."""
    values = sorted(values, key=lambda v: v.key)  # each row a reference (shards.KeyByPool)
    values = [dataclasses.replace(v, row=row)
              for v, row in zip(values, fetch_many(config.output, [v.row for v in values]))]
    confidences = confidences_for(config)
    written_rows, dropped = [], []

    def rows():
        for value in values:
            row = value.row
            try:
                data = checked_frame(train_scenario(value.name, config), row["image_ref"])
            except FrameChanged as err:
                dropped.append((value, err))
                continue
            written_rows.append(row)
            yield dict(row, images=[{"bytes": data, "path": f"{row['key']}.img"}],
                       **confidences.get((row["config"], row["key"]), {}))

    url = shard_url(config.output, TRAIN, TRAIN_CONFIG, index, count)
    written = write_parquet(url, ahead(rows) if ahead else rows(), train_arrow_schema(), 200)
    LOG.info("train: wrote %s (%d rows)", url, written["rows"])
    for value, err in dropped:
        LOG.warning("train: %s dropped: %s", value.key, err.reason)
        yield results.DeadLetter(value.scenario, err.path or value.key, err.reason, value.key)
        yield results.Dropped(value.scenario, TRAIN, False)
    if dropped_the_only_shard(url, written, count):
        return
    yield results.ShardWritten(TRAIN, TRAIN_CONFIG, TRAIN, url, written["rows"],
                               written["bytes"], written["sha256"], mix=_mix(written_rows))


def unused_confidences(output: str, files: list[dict], url: str) -> list[tuple[str, str]]:
    """(config, key) of the train predictions that name no example of the written train split
    (read from its shards' key columns): the driver reports them, as nothing is dropped
    silently."""
    wanted = set(train_confidences(url))
    if not wanted:
        return []
    for f in files:
        if f.get("split") != TRAIN:
            continue
        fs, path = fileio.filesystem(fileio.join(output, f["path"]))
        with fs.open(path, "rb") as handle:
            table = pq.read_table(handle, columns=["config", "key"])
        wanted -= set(zip(table.column("config").to_pylist(), table.column("key").to_pylist()))
    return sorted(wanted)


def _mix(rows) -> dict:
    mix = {}
    for row in rows:
        entry = mix.setdefault(row["config"], {"ambiguous": 0, "unambiguous": 0})
        entry["ambiguous" if row["ambiguous"] else "unambiguous"] += 1
    return mix


def summarize_train(values: list) -> dict:
    """Per scenario: raw items, exclusions, examples and dead letters of the train branch, and
    whether raw items = examples + dead letters + exclusions (as the test branch checks); the
    ambiguous/unambiguous mix, rows, shards and bytes of the written split."""
    report, examples = {}, Counter()
    for v in values:
        if isinstance(v, results.TrainPool):
            examples.update(v.examples)
            continue
        if isinstance(v, results.Dropped) and v.split == TRAIN:  # now a dead letter
            examples[v.scenario] -= 1
            continue
        if isinstance(v, results.ShardWritten) and v.split == TRAIN:
            for config, mix in v.mix.items():
                entry = report.setdefault("mix", {}).setdefault(config, Counter())
                entry.update(mix)
            report["rows"] = report.get("rows", 0) + v.rows
            report["shards"] = report.get("shards", 0) + 1
            report["bytes"] = report.get("bytes", 0) + v.bytes
            continue
        label = getattr(v, "scenario", "")
        if not results.is_train_label(label):
            continue
        entry = report.setdefault("scenarios", {}).setdefault(
            label[: -len("/train")], {"raw_items": 0, "excluded": Counter(), "dead_letters": 0})
        if isinstance(v, results.Count) and v.what == "raw_items":
            entry["raw_items"] += v.n
        elif isinstance(v, results.Count):
            entry["excluded"][v.what.split(":", 1)[1]] += v.n
        elif isinstance(v, results.DeadLetter):
            entry["dead_letters"] += 1
    for name, entry in report.get("scenarios", {}).items():
        entry["examples"] = examples[results.train_label(name)]
        entry["accounted"] = entry["raw_items"] == (
            entry["examples"] + entry["dead_letters"] + sum(entry["excluded"].values()))
        entry["excluded"] = dict(sorted(entry["excluded"].items()))
    report["examples"] = sum(examples.values())
    report["mix"] = {c: dict(m) for c, m in sorted(report.get("mix", {}).items())}
    return report
