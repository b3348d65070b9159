"""The Beam graph that builds the benchmark.

    (branch, scenario) jobs ─► list units ─► read units ─► build samples ─┬─► pool per scenario
                                                                           │   (ids, filter, shard
                                                                           │   plan) ─► write shards
                                                                           └─► dead letters, counts ─┐
    predictions / keep-list ──────────────────────────────────────────────► pool per scenario        │
                                                    shard infos, upstream lines, filter stats ───────┴─► reports

A job reads a scenario's test pool or its train split (`pipeline.train`): both branches share
every stage (`pipeline.reading`, `pipeline.shards`), and the train examples form one more pool
(key TRAIN_POOL) with its own shards.

Every branch ends in one Flatten feeding one terminal step (`WriteReports`), and splits are
`Filter`s over one PCollection of result values (`core.results`): Beam's DaskRunner computes
only the last transform and mishandles tagged outputs, and this shape runs the same on every
runner. DoFns carry the typed configuration and look scenarios up in the registry on the worker
(as seqio does).
"""
from __future__ import annotations

import apache_beam as beam

from proactivebench_builder.core import results
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.layout import TEST, TRAIN
from proactivebench_builder.pipeline.import_upstream import ImportUpstream
from proactivebench_builder.pipeline.reading import BuildSample, ListUnits, ReadUnit
from proactivebench_builder.pipeline.reports import WriteReports
from proactivebench_builder.pipeline.scenarios import reads_train_with_test
from proactivebench_builder.pipeline.shards import AssignIdsAndShards, KeyByPool, WriteShard
from proactivebench_builder.pipeline.spread import Spread


def _is_sample(value) -> bool:
    return isinstance(value, results.Sample)


def _is_train_example(value) -> bool:
    return isinstance(value, results.TrainExample)


def _is_report(value) -> bool:
    return isinstance(value, (results.DeadLetter, results.Count))


def _is_shard_row(value) -> bool:
    return isinstance(value, results.ShardRow)


def _is_pool_report(value) -> bool:
    return not isinstance(value, results.ShardRow)


# Values cross the shuffles packed (results.packed): the local runner's build process holds
# every grouped value between stages, and holds a byte string far smaller than the objects;
# what grows with the data (items, rows) crosses them as references into the row store
# (pipeline.row_store): ReadUnit stores candidates' items, KeyByPool the rows.

def _by_shard(value):
    # a plain tuple on the wire: Beam encodes it deterministically itself (a named tuple only
    # through its slower fallback, with a warning per bundle); WriteShard names it again
    return tuple(value.shard), results.packed(value.row)


def _under_one_key(value):
    return None, results.packed(value)


def build_jobs(config: BuildConfig) -> list[tuple[str, str]]:
    """The (branch, scenario) jobs of raw reading: each scenario's test pool (none when an
    upstream release is imported) and the train splits not read with their test pools."""
    jobs = [] if config.import_upstream else [(TEST, n) for n in sorted(config.scenarios)]
    jobs += [(TRAIN, n) for n in sorted(config.train_sources)
             if not ((TEST, n) in jobs and reads_train_with_test(n, config))]
    return jobs


class BuildBenchmark(beam.PTransform):
    """The whole build: from scenario names (and optional selection inputs) to the written
    output folder. Its output is one PCollection holding the build summary."""

    def __init__(self, config: BuildConfig, selection_inputs=None):
        super().__init__()
        self.config = config
        self.selection_inputs = selection_inputs

    def expand(self, pbegin):
        c = self.config
        parts = []
        if c.import_upstream:
            parts.append(pbegin | "ImportUpstream" >> ImportUpstream(c))
        jobs = build_jobs(c)
        if jobs:
            parts.append(
                pbegin
                | "Jobs" >> beam.Create(jobs, reshuffle=False)  # Spread redistributes
                | "ListUnits" >> beam.ParDo(ListUnits(c))
                | "SpreadUnits" >> Spread()
                | "ReadUnits" >> beam.ParDo(ReadUnit(c))
                # units differ a lot in size (a COCO read shard, a QuickDraw file): spread the
                # small candidates again so both workers share the validation work
                | "SpreadCandidates" >> Spread(c.failures_dir)
                | "BuildSamples" >> beam.ParDo(BuildSample(c)))
        raw = parts[0] if len(parts) == 1 else parts | "RawValues" >> beam.Flatten()
        samples = raw | "Samples" >> beam.Filter(_is_sample)
        train_examples = raw | "TrainExamples" >> beam.Filter(_is_train_example)
        side_reports = raw | "DeadLettersAndCounts" >> beam.Filter(_is_report)

        pool_inputs = [samples | "KeySamples" >> beam.ParDo(KeyByPool(c)),
                       train_examples | "KeyTrainExamples" >> beam.ParDo(KeyByPool(c))]
        if self.selection_inputs is not None:
            pool_inputs.append(self.selection_inputs(pbegin)
                               | "PackSelection" >> beam.Map(results.packed_kv))
        pooled = (
            pool_inputs
            | "PoolInputs" >> beam.Flatten()
            | "GroupByPool" >> beam.GroupByKey()
            | "AssignIdsAndShards" >> beam.ParDo(AssignIdsAndShards(c))
        )
        shard_rows = pooled | "ShardRows" >> beam.Filter(_is_shard_row)
        pool_reports = pooled | "PoolReports" >> beam.Filter(_is_pool_report)
        written = (
            shard_rows
            | "KeyByShard" >> beam.Map(_by_shard)
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(WriteShard(c))
        )
        # one value that is nothing, so the terminal step runs (and says what was built) even
        # when no stage produced a value: a scenario whose units yield nothing at all
        always = pbegin | "ReportsAlways" >> beam.Create([None])
        return (
            (side_reports, pool_reports, written, always)
            | "AllReports" >> beam.Flatten()
            | "OneKey" >> beam.Map(_under_one_key)
            | "Gather" >> beam.GroupByKey()
            | "WriteReports" >> beam.ParDo(WriteReports(c))
        )
