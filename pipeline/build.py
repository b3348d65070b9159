"""The Beam graph that builds the benchmark.

    (branch, scenario) jobs ─► list units ─► read units ─► build samples ─┬─► pool per scenario
                                                                           │   (ids, filter, shard
                                                                           │   plan) ─► write shards
                                                                           └─► dead letters, counts ─┐
    predictions / keep-list ──────────────────────────────────────────────► pool per scenario        │
                                                    shard infos, upstream lines, filter stats ───────┴─► reports

A job reads a scenario's test pool or its train split (`pipeline.train`): both branches share
every stage, and the train examples form one more pool (key TRAIN_POOL) with its own shards.

Every branch ends in one Flatten feeding one terminal step (`WriteReports`), and splits are
`Filter`s over one PCollection of result values: Beam's DaskRunner computes only the last
transform and mishandles tagged outputs, and this shape runs the same on every runner.
DoFns carry plain parameters and look scenarios up in the registry on the worker (as seqio does).
"""
from __future__ import annotations

import logging
import threading
from collections import Counter

import apache_beam as beam

from proactivebench_builder.pipeline import progress
from proactivebench_builder.core import results
from proactivebench_builder.pipeline.reports import WriteReports
from proactivebench_builder.pipeline.shards import (
    TEST, TRAIN, TRAIN_POOL, AssignIdsAndShards, WriteShard)

LOG = logging.getLogger(__name__)


def scenario_instance(name: str, params: dict, root: str | None = None):
    """A scenario object on the worker, built from plain parameters: the seed, its source root
    (or `root`) and the manifest parameters overridden with --set. Built once per thread for
    the same arguments (DoFns call this for every element; a scenario may keep per-instance
    readers, e.g. ChangeIt's open video, so instances are not shared between threads)."""
    root = root or params["sources"][name]
    overrides = params.get("overrides", {}).get(name, {})
    cache_key = (threading.get_ident(), name, params["seed"], root,
                 repr(sorted(overrides.items())))
    scenario = _SCENARIOS.get(cache_key)
    if scenario is None:
        from proactivebench_builder.pipeline.allocator import return_freed_buffers
        from proactivebench_builder.transforms import get_scenario

        return_freed_buffers()  # in every worker process (idempotent)

        scenario = get_scenario(name)(params["seed"], root)
        scenario.params.update(overrides)
        _SCENARIOS[cache_key] = scenario
    return scenario


_SCENARIOS: dict = {}


def branch_scenario(branch: str, name: str, params: dict):
    """The scenario object that reads `name`'s test pool (branch TEST) or train split (TRAIN)."""
    if branch == TRAIN:
        from proactivebench_builder.pipeline.train import train_scenario

        return train_scenario(name, params)
    return scenario_instance(name, params)


class ListUnits(beam.DoFn):
    """Names the units of raw reading of one (branch, scenario) job: its test pool or its train
    split. Both branches share the stages that follow (one queue of work per stage)."""

    def __init__(self, params: dict):
        self.params = params

    def process(self, job):
        branch, name = job
        scenario = branch_scenario(branch, name, self.params)
        units = scenario.list_train_units() if branch == TRAIN else scenario.list_units()
        LOG.info("%s: %d units of raw reading (%s)", name, len(units), branch)
        progress.report(self.params.get("progress_dir"), progress.LISTED,
                        f"{name}/train" if branch == TRAIN else name, len(units))
        progress.flush(self.params.get("progress_dir"))
        for unit in units:
            # A unit named by a non-UTF-8 file name cannot cross a Beam coder: it travels as
            # its escaped text and becomes a dead letter in ReadUnit.
            yield branch, name, results.utf8_unit(unit)


def reads_train_with_test(name: str, params: dict) -> bool:
    """Whether the test read of `name` also yields its train split: its train units are its
    test units, from the same root, so each file is read once per build (not once per split)."""
    from proactivebench_builder.transforms import get_scenario

    train = params.get("train_sources") or {}
    return (name in train and train[name] == params["sources"][name]
            and get_scenario(name).train_units_are_test_units)


def unit_values(scenario, unit, read, labels=()):
    """The result values of reading one unit with `read` (the scenario's `read_unit` or
    `read_train_unit`): a unit named by a non-UTF-8 file name, or one that fails as a whole,
    becomes one dead letter (under each of `labels`, default the scenario's name: a unit read
    once for both splits fails in both), never a crash; every value is made safe to cross a coder.

    Counts are summed over the unit and emitted once at its end (also when it fails part way):
    a scenario counts per raw item, and a real QuickDraw file holds ~150k drawings, so one value
    per item would put tens of millions of elements through every shuffle after this stage."""
    name = scenario.name
    labels = labels or (name,)
    if isinstance(unit, dict):  # a unit named by a non-UTF-8 file name (results.utf8_unit)
        for label in labels:
            yield results.count(label, "raw_items", 1)
            yield dict(scenario.dead_letter(unit["not_utf8"],
                                            results.non_utf8_reason(unit["text"])), scenario=label)
        return
    counts, resolved = Counter(), Counter()
    try:
        for value in read(unit):
            if value["kind"] == "count":
                counts[value["scenario"], value["what"]] += value["n"]
                if value["what"].startswith("excluded:"):
                    resolved[value["scenario"]] += value["n"]
            else:
                resolved[value["scenario"]] += 1
                yield results.utf8_safe(value)
    except Exception as err:  # noqa: BLE001 - errors are values here
        LOG.warning("%s: unit %s failed: %s", name, unit, err)
        # Items counted before the failure but not yet resolved (e.g. drawings waiting for
        # their rank) are lost with the unit: its one dead letter (per label) stands for them
        # and for the rest of the unit, so raw items = samples + dead letters + exclusions
        # still holds.
        for label in labels:
            unresolved = max(0, counts[label, "raw_items"] - resolved[label])
            counts[label, "raw_items"] += 1 - unresolved
            detail = (f" ({unresolved} raw items read before the failure are lost with it)"
                      if unresolved else "")
            yield results.utf8_safe(dict(scenario.dead_letter(
                unit, f"unreadable source unit: {type(err).__name__}: {err}{detail}"),
                scenario=label))
    for (label, what), n in sorted(counts.items()):
        yield results.count(label, what, n)


def bad_item_letter(scenario, label: str, key: str, err) -> dict:
    """The dead letter of a raw item that could not become a sample (or train example): its
    source path relative to the root when the scenario named one, else its key."""
    path = scenario.relative(err.path) if err.path else key
    return results.dead_letter(label, path, err.reason, key)


class ReadUnit(beam.DoFn):
    """Raw reading; a unit that fails as a whole becomes one dead letter, never a crash."""

    def __init__(self, params: dict):
        self.params = params

    def process(self, element):
        branch, name, unit = element
        if branch == TRAIN:
            from proactivebench_builder.pipeline.train import read_train_unit

            yield from read_train_unit(name, unit, self.params)
            progress.report(self.params.get("progress_dir"), progress.READ, f"{name}/train")
            return
        scenario = scenario_instance(name, self.params)
        if reads_train_with_test(name, self.params):
            yield from unit_values(scenario, unit, scenario.read_unit_with_train,
                                   (name, results.train_label(name)))
        else:
            yield from unit_values(scenario, unit, scenario.read_unit)
        progress.report(self.params.get("progress_dir"), progress.READ, name)

    def finish_bundle(self):
        progress.flush(self.params.get("progress_dir"))


class BuildSample(beam.DoFn):
    def __init__(self, params: dict):
        self.params = params

    def process(self, value):
        if value["kind"] != "candidate":
            yield value
            return
        for built in self.built(value):
            if built["kind"] in ("sample", "train_example"):
                progress.report(self.params.get("progress_dir"), progress.BUILT,
                                value["scenario"])
            yield built

    def finish_bundle(self):
        progress.flush(self.params.get("progress_dir"))

    def built(self, value):
        from proactivebench_builder.core.records import check_row
        from proactivebench_builder.pipeline.train import train_example_values
        from proactivebench_builder.core.errors import BadItem

        if results.is_train_label(value["scenario"]):
            yield from train_example_values(value, self.params)
            return
        name, key = value["scenario"], value["key"]
        scenario = scenario_instance(name, self.params)
        row = None
        try:
            row = scenario.build_sample(key, value["item"])
            check_row(row)
        except BadItem as err:
            yield bad_item_letter(scenario, name, key, err)
            return
        except ValueError as err:
            yield results.dead_letter(name, key, f"inconsistent sample: {err}", key)
            return
        except Exception as err:  # noqa: BLE001 - one odd item is its own dead letter
            LOG.warning("%s: %s failed", name, key, exc_info=True)
            yield results.dead_letter(name, key, f"unexpected error: {type(err).__name__}: "
                                                 f"{err}", key)
            return
        finally:
            scenario.seal_frame_refs(row)  # the validated bytes' digests, then forgets them
        yield results.sample(name, row)


SPREAD_LANES = 256  # most partitions a spread stage can use on the DaskRunner


class Spread(beam.PTransform):
    """Redistribute elements across workers by a stable hash (a plain GroupByKey, which every
    runner supports; `beam.Reshuffle` relies on windowing machinery the DaskRunner lacks).

    On the DaskRunner a GroupByKey keeps the partition count of its input, and a Create of a
    few scenario names is a single partition, so the group would run on one worker. The input
    is therefore flattened with an empty collection made from a Create of SPREAD_LANES
    placeholders: it adds no element, but on Dask it brings its partitions (`--dask_npartitions`
    of them), over which the hash spreads the elements. On other runners it is just empty."""

    def expand(self, pcoll):
        from proactivebench_builder.core.seeding import stable_hash

        lanes = (
            pcoll.pipeline
            | "Lanes" >> beam.Create(list(range(SPREAD_LANES)))
            | "NoElements" >> beam.Filter(lambda _: False)
        )
        return (
            (pcoll, lanes)
            | "WithLanes" >> beam.Flatten()
            | "KeyByHash" >> beam.Map(lambda v: (stable_hash(repr(v)) % 4096, v))
            | "Group" >> beam.GroupByKey()
            | "Ungroup" >> beam.FlatMap(lambda kv: kv[1])
        )


class BuildBenchmark(beam.PTransform):
    """The whole build: from scenario names (and optional selection inputs) to the written
    output folder. Its output is one PCollection holding the build summary."""

    def __init__(self, params: dict, selection_inputs=None):
        super().__init__()
        self.params = params
        self.selection_inputs = selection_inputs

    def expand(self, pbegin):
        p = self.params
        parts = []
        if p.get("import_upstream"):
            from proactivebench_builder.pipeline.import_upstream import ImportUpstream

            parts.append(pbegin | "ImportUpstream" >> ImportUpstream(p))
        jobs = [] if p.get("import_upstream") else [(TEST, n) for n in sorted(p["scenarios"])]
        jobs += [(TRAIN, n) for n in sorted(p.get("train_sources") or {})
                 if not ((TEST, n) in jobs and reads_train_with_test(n, p))]
        if jobs:
            parts.append(
                pbegin
                | "Jobs" >> beam.Create(jobs, reshuffle=False)  # Spread redistributes
                | "ListUnits" >> beam.ParDo(ListUnits(p))
                | "SpreadUnits" >> Spread()
                | "ReadUnits" >> beam.ParDo(ReadUnit(p))
                # units differ a lot in size (a COCO read shard, a QuickDraw file): spread the
                # small candidates again so both workers share the validation work
                | "SpreadCandidates" >> Spread()
                | "BuildSamples" >> beam.ParDo(BuildSample(p)))
        raw = parts[0] if len(parts) == 1 else parts | "RawValues" >> beam.Flatten()
        samples = raw | "Samples" >> beam.Filter(results.is_kind("sample"))
        train_examples = raw | "TrainExamples" >> beam.Filter(results.is_kind("train_example"))
        side_reports = raw | "DeadLettersAndCounts" >> beam.Filter(
            lambda v: v["kind"] in ("dead_letter", "count"))

        pool_inputs = [samples | "KeySamples" >> beam.Map(lambda v: (v["scenario"], v)),
                       train_examples | "KeyTrainExamples" >> beam.Map(lambda v: (TRAIN_POOL, v))]
        if self.selection_inputs is not None:
            pool_inputs.append(self.selection_inputs(pbegin))
        pooled = (
            pool_inputs
            | "PoolInputs" >> beam.Flatten()
            | "GroupByPool" >> beam.GroupByKey()
            | "AssignIdsAndShards" >> beam.ParDo(AssignIdsAndShards(p))
        )
        shard_rows = pooled | "ShardRows" >> beam.Filter(results.is_kind("shard_row"))
        pool_reports = pooled | "PoolReports" >> beam.Filter(lambda v: v["kind"] != "shard_row")
        written = (
            shard_rows
            | "KeyByShard" >> beam.Map(lambda v: (v["shard"], v["row"]))
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(WriteShard(p))
        )
        return (
            (side_reports, pool_reports, written)
            | "AllReports" >> beam.Flatten()
            | "OneKey" >> beam.Map(lambda v: (None, v))
            | "Gather" >> beam.GroupByKey()
            | "WriteReports" >> beam.ParDo(WriteReports(p))
        )
