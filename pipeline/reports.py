"""The terminal step: everything the build produced flows here, and it writes the reports,
the upstream JSONL files and the dataset card. It is the commit point of a build: shards are
complete files by the time it runs, and it removes shard files a previous run left behind."""
from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict

import apache_beam as beam

from proactivebench_builder.pipeline import dataset_card, upstream_export
from proactivebench_builder.core import fileio
from proactivebench_builder.pipeline.shards import TEST, UNFILTERED, split_folder

LOG = logging.getLogger(__name__)
REPORTS_DIR = "reports"


def reason_group(reason: str) -> str:
    """Dead letters are counted by the part of their reason before any detail."""
    return reason.split(":", 1)[0].strip()


def summarize(values: list[dict], scenarios: list[str]) -> dict:
    """Per scenario: raw items seen, rule exclusions, samples, kept, dead letters by reason,
    shards and bytes per split, and whether inputs = samples + dead letters + exclusions."""
    per = {name: {"config": None, "raw_items": 0, "excluded": Counter(), "samples": 0,
                  "kept": 0, "dead_letters": Counter(), "shards": Counter(), "bytes": Counter(),
                  "rows": Counter(), "dropped": Counter()}
           for name in scenarios}
    for v in values:
        entry = per.get(v.get("scenario"))
        if entry is None:
            continue
        kind = v["kind"]
        if kind == "count" and v["what"] == "raw_items":
            entry["raw_items"] += v["n"]
        elif kind == "count" and v["what"].startswith("excluded:"):
            entry["excluded"][v["what"].split(":", 1)[1]] += v["n"]
        elif kind == "dead_letter":
            entry["dead_letters"][reason_group(v["reason"])] += 1
        elif kind == "pool":
            entry["config"] = v["config"]
            entry["samples"], entry["kept"] = v["samples"], v["kept"]
        elif kind == "dropped":  # a sample whose frame changed after it was validated
            entry["dropped"][v["split"]] += 1
            entry["dropped"]["kept"] += bool(v["in_test"])
        elif kind == "shard":
            entry["shards"][v["split"]] += 1
            entry["bytes"][v["split"]] += v["bytes"]
            entry["rows"][v["split"]] += v["rows"]
    report = {}
    for name, e in per.items():
        # a sample dropped while its shard was written is a dead letter, not a sample; the test
        # split loses it too (written from the same shard, or dropped again when written apart)
        e["samples"] -= e["dropped"][UNFILTERED]
        e["kept"] -= e["dropped"]["kept"]
        dead = sum(e["dead_letters"].values())
        excluded = sum(e["excluded"].values())
        report[name] = {
            "config": e["config"], "raw_items": e["raw_items"],
            "excluded": dict(sorted(e["excluded"].items())), "samples": e["samples"],
            "kept": e["kept"], "dead_letters": dead,
            "dead_letters_by_reason": dict(sorted(e["dead_letters"].items())),
            "accounted": e["raw_items"] == e["samples"] + dead + excluded,
            "bad_fraction": dead / e["raw_items"] if e["raw_items"] else 0.0,
            "shards": {s: e["shards"][s] for s in (TEST, UNFILTERED)},
            "rows": {s: e["rows"][s] for s in (TEST, UNFILTERED)},
            "bytes": {s: e["bytes"][s] for s in (TEST, UNFILTERED)},
        }
    return report


class WriteReports(beam.DoFn):
    def __init__(self, params: dict):
        self.params = params

    def process(self, element):
        _, values = element
        values = list(values)
        p = self.params
        output = p["output"]
        scenarios = sorted(p["scenarios"])
        report = summarize(values, scenarios)
        dead = [{k: v[k] for k in ("scenario", "path", "reason", "key")}
                for v in values if v["kind"] == "dead_letter"]
        shards = [v for v in values if v["kind"] == "shard"]
        filters = {v["scenario"]: v["filter"] for v in values if v["kind"] == "pool"}
        files = [{"path": _relative(s["path"], output), "rows": s["rows"], "bytes": s["bytes"],
                  "sha256": s["sha256"], "config": s["config"], "split": s["split"]}
                 for s in shards]
        # the sources let a later build tell whether it makes the same pool (filters/coverage.py)
        sources = {n: p["sources"][n] for n in scenarios if n in p.get("sources", {})}
        train = None
        if p.get("train_sources"):
            from proactivebench_builder.pipeline.train import summarize_train

            train = summarize_train(values)
        stamp = p.get("stamp", {})
        if p.get("update"):  # some scenarios rebuilt into a folder that keeps the others
            from proactivebench_builder.pipeline.partial_rebuild import merge_reports

            merged = merge_reports(output, p["update"], report, filters, files, dead, sources)
            report, filters, files = merged["report"], merged["filters"], merged["files"]
            dead, sources, stamp = merged["dead"], merged["sources"], p["update"]["stamp"]
            train = merged["train"] or train

        dead = sorted(dead, key=lambda v: (v["scenario"], v["path"], v["reason"], v["key"]))
        dead_text = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in dead)
        fileio.write_bytes_atomic(fileio.join(output, REPORTS_DIR, "dead_letters.jsonl"),
                                  dead_text.encode("utf-8"))

        lines = defaultdict(dict)
        for v in values:
            if v["kind"] == "upstream_line":
                lines[v["config"]][v["id"]] = v["line"]
        for config, by_id in sorted(lines.items()):
            upstream_export.write_jsonl(output, config, by_id)

        self._remove_stale_shards(output, shards)
        fileio.write_bytes_atomic(fileio.join(output, REPORTS_DIR, "filter.json"),
                                  _json({"settings": p["selection"], "scenarios": filters}))
        files = sorted(files, key=lambda f: f["path"])
        # "building" until the launcher has checked the build and records "ok" or "failed"
        # (pipeline.integrity): nothing trusts a folder whose build did not get that far
        build = {"scenarios": report, "stamp": stamp, "files": files, "sources": sources,
                 "upstream_export": bool(p.get("export_upstream", True)), "status": "building"}
        extra_configs = []
        if train is not None:
            build["train"] = train
            if train.get("rows"):
                extra_configs.append({"config_name": "default", "data_files": [
                    {"split": "train", "path": "data/train-*.parquet"}]})
        fileio.write_bytes_atomic(fileio.join(output, REPORTS_DIR, "build.json"), _json(build))
        card = dataset_card.render(report, filters, dict(p, stamp=stamp), extra_configs, train,
                                   files)
        fileio.write_bytes_atomic(fileio.join(output, "README.md"), card.encode("utf-8"))
        LOG.info("reports written to %s", fileio.join(output, REPORTS_DIR))
        yield build

    def _remove_stale_shards(self, output: str, shards: list[dict]) -> None:
        """A previous build may have written a different number of shards; leftovers would be
        read by `load_dataset`'s glob, so every shard file not written now is removed."""
        written = {s["path"] for s in shards}
        folders = {(s["split"], s["config"]) for s in shards}
        for split, config in folders:
            folder = split_folder(output, split, config)
            for name in fileio.list_names(folder):
                url = fileio.join(folder, name)
                if name.endswith(".parquet") and url not in written:
                    LOG.info("removing stale shard %s", url)
                    fileio.remove(url)


def _relative(url: str, output: str) -> str:
    return url[len(output.rstrip("/")) + 1:] if url.startswith(output.rstrip("/") + "/") else url


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
