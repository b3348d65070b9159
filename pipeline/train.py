"""The train split for GRPO post-training (paper §5, App. C): single-turn examples mixing
ambiguous frames (an early stroke prefix, a tight crop) with unambiguous ones (the full drawing,
the wide view), so a model learns when to ask and when to answer.

Its own branch of the same graph, sharing the scenario modules: scenarios that offer a train
split (`list_train_units` non-empty) read their train sources, each example is built with one
frame reference, and the split is written as `data/train-*.parquet` (the card's `default` config)
with the same deterministic shard writer as the test split. Disjointness from the test pool is
the scenario's job and holds by construction (QuickDraw: the drawings ranked after the test
picks; COCO: the train2014 annotations).
"""
from __future__ import annotations

import logging

import apache_beam as beam

from proactivebench_builder.pipeline import fileio, results
from proactivebench_builder.pipeline.records import train_arrow_schema
from proactivebench_builder.pipeline.shards import TRAIN, split_folder
from proactivebench_builder.pipeline.writers import shard_name, shard_plan, write_parquet

LOG = logging.getLogger(__name__)
TRAIN_ROWS_PER_SHARD = 1000  # ~50 MB of COCO crops; more shards let both workers render


def train_label(name: str) -> str:
    """Results of the train branch are reported under `<scenario>/train`."""
    return f"{name}/train"


def _scenario(name: str, params: dict):
    from proactivebench_builder.pipeline.build import scenario_instance

    return scenario_instance(name, params, params["train_sources"][name])


class ListTrainUnits(beam.DoFn):
    def __init__(self, params):
        self.params = params

    def process(self, name):
        for unit in _scenario(name, self.params).list_train_units():
            yield name, results.utf8_unit(unit)


class ReadTrainUnit(beam.DoFn):
    def __init__(self, params):
        self.params = params

    def process(self, element):
        from proactivebench_builder.pipeline.build import unit_values

        name, unit = element
        scenario = _scenario(name, self.params)
        for value in unit_values(scenario, unit, scenario.read_train_unit):
            yield dict(value, scenario=train_label(name))


class BuildTrainExample(beam.DoFn):
    def __init__(self, params):
        self.params = params

    def process(self, value):
        if value["kind"] != "candidate":
            yield value
            return
        from proactivebench_builder.pipeline.build import bad_item_letter
        from proactivebench_builder.transforms.base import BadItem

        name = value["scenario"].rsplit("/", 1)[0]
        scenario = _scenario(name, self.params)
        try:
            example = scenario.build_train_example(value["key"], value["item"])
        except BadItem as err:
            yield bad_item_letter(scenario, value["scenario"], value["key"], err)
            return
        yield {"kind": "train_example", "scenario": value["scenario"], "name": name,
               "key": value["key"], "row": example}


class AssignTrainShards(beam.DoFn):
    def process(self, element):
        _, examples = element
        examples = sorted(examples, key=lambda v: v["key"])
        keys = [v["key"] for v in examples]
        if len(set(keys)) != len(keys):
            raise ValueError("train examples repeat keys")
        plan = shard_plan(keys, TRAIN_ROWS_PER_SHARD, "train")
        for value in examples:
            yield plan[value["key"]], value


class WriteTrainShard(beam.DoFn):
    def __init__(self, params):
        self.params = params

    def process(self, element):
        (index, count), values = element
        values = sorted(values, key=lambda v: v["key"])

        def rows():
            for value in values:
                row = value["row"]
                data = _scenario(value["name"], self.params).load_frame(row["image_ref"])
                yield dict(row, images=[{"bytes": data, "path": f"{row['key']}.img"}])

        url = fileio.join(split_folder(self.params["output"], TRAIN, "default"),
                          shard_name(TRAIN, index, count))
        written = write_parquet(url, rows(), train_arrow_schema(), 200)
        LOG.info("train: wrote %s (%d rows)", url, written["rows"])
        yield dict(written, kind="shard", scenario=TRAIN, config="default", split=TRAIN,
                   path=url, mix=_mix(v["row"] for v in values))


def _mix(rows) -> dict:
    mix = {}
    for row in rows:
        entry = mix.setdefault(row["config"], {"ambiguous": 0, "unambiguous": 0})
        entry["ambiguous" if row["ambiguous"] else "unambiguous"] += 1
    return mix


class BuildTrainSplit(beam.PTransform):
    """Result values of the train branch: dead letters, counts and written shard infos."""

    def __init__(self, params: dict):
        super().__init__()
        self.params = params

    def expand(self, pbegin):
        from proactivebench_builder.pipeline.build import Spread

        p = self.params
        values = (pbegin
                  | "TrainScenarios" >> beam.Create(sorted(p["train_sources"]))
                  | "ListTrainUnits" >> beam.ParDo(ListTrainUnits(p))
                  | "SpreadTrainUnits" >> Spread()
                  | "ReadTrainUnits" >> beam.ParDo(ReadTrainUnit(p))
                  | "SpreadTrainCandidates" >> Spread()
                  | "BuildTrainExamples" >> beam.ParDo(BuildTrainExample(p)))
        examples = values | "TrainExamples" >> beam.Filter(results.is_kind("train_example"))
        others = values | "TrainReports" >> beam.Filter(lambda v: v["kind"] != "train_example")
        written = (examples
                   | "OneTrainGroup" >> beam.Map(lambda v: (None, v))
                   | "GroupTrain" >> beam.GroupByKey()
                   | "AssignTrainShards" >> beam.ParDo(AssignTrainShards())
                   | "GroupTrainShards" >> beam.GroupByKey()
                   | "WriteTrainShards" >> beam.ParDo(WriteTrainShard(p)))
        return (others, written) | "TrainResults" >> beam.Flatten()


def summarize_train(values: list[dict]) -> dict:
    """Per scenario: raw items, exclusions, examples and dead letters of the train branch, and
    the ambiguous/unambiguous mix of the written split."""
    from collections import Counter

    report = {}
    for v in values:
        label = v.get("scenario", "")
        if v["kind"] == "shard" and v["split"] == TRAIN:
            for config, mix in v["mix"].items():
                entry = report.setdefault("mix", {}).setdefault(config, Counter())
                entry.update(mix)
            report["rows"] = report.get("rows", 0) + v["rows"]
            report["shards"] = report.get("shards", 0) + 1
            report["bytes"] = report.get("bytes", 0) + v["bytes"]
            continue
        if not label.endswith("/train"):
            continue
        entry = report.setdefault("scenarios", {}).setdefault(
            label[: -len("/train")], {"raw_items": 0, "excluded": Counter(), "dead_letters": 0})
        if v["kind"] == "count" and v["what"] == "raw_items":
            entry["raw_items"] += v["n"]
        elif v["kind"] == "count":
            entry["excluded"][v["what"].split(":", 1)[1]] += v["n"]
        elif v["kind"] == "dead_letter":
            entry["dead_letters"] += 1
    for entry in report.get("scenarios", {}).values():
        entry["excluded"] = dict(sorted(entry["excluded"].items()))
    report["mix"] = {c: dict(m) for c, m in sorted(report.get("mix", {}).items())}
    return report
