"""The terminal step: everything the build produced flows here, and it writes the reports,
the upstream JSONL files and the dataset card. It is the commit point of a build: shards are
complete files by the time it runs, and it removes shard files and exported files a previous run
left behind. build.json lists every shard and every exported file with its size and sha256."""
from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, defaultdict

import apache_beam as beam

from proactivebench_builder.core import buildfolder, fileio, results
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.layout import (
    BUILD_REPORT, CARD, DEAD_LETTERS, FILTER_REPORT, POOL_SETS, REPORTS_DIR, TEST, TRAIN,
    TRAIN_CONFIG, UNFILTERED, UPSTREAM_DIR, relative_to, set_glob, shard_folder)
from proactivebench_builder.pipeline import dataset_card, failures, row_store, upstream_export
from proactivebench_builder.pipeline.partial_rebuild import kept_configs, merge_reports
from proactivebench_builder.pipeline.train import summarize_train

LOG = logging.getLogger(__name__)


def reason_group(reason: str) -> str:
    """Dead letters are counted by the part of their reason before any detail."""
    return reason.split(":", 1)[0].strip()


def summarize(values: list, scenarios: list[str]) -> dict:
    """Per scenario: raw items seen, rule exclusions, samples, kept, dead letters by reason,
    shards, rows and bytes per shard set (the pool's `test` and `filtered_out` rows), and
    whether inputs = samples + dead letters + exclusions."""
    per = {name: {"config": None, "raw_items": 0, "excluded": Counter(), "samples": 0,
                  "kept": 0, "dead_letters": Counter(), "shards": Counter(), "bytes": Counter(),
                  "rows": Counter(), "dropped": Counter()}
           for name in scenarios}
    for v in values:
        entry = per.get(getattr(v, "scenario", None))
        if entry is None:
            continue
        if isinstance(v, results.Count) and v.what == "raw_items":
            entry["raw_items"] += v.n
        elif isinstance(v, results.Count) and v.what.startswith("excluded:"):
            entry["excluded"][v.what.split(":", 1)[1]] += v.n
        elif isinstance(v, results.DeadLetter):
            entry["dead_letters"][reason_group(v.reason)] += 1
        elif isinstance(v, results.PoolReport):
            entry["config"] = v.config
            entry["samples"], entry["kept"] = v.samples, v.kept
            entry["frames_not_shown"] = list(v.frames_not_shown)
        elif isinstance(v, results.Dropped):  # a sample whose frame changed after validation
            entry["dropped"][v.split] += 1
            entry["dropped"]["kept"] += bool(v.in_test)
        elif isinstance(v, results.ShardWritten):
            entry["shards"][v.split] += 1
            entry["bytes"][v.split] += v.bytes
            entry["rows"][v.split] += v.rows
    report = {}
    for name, e in per.items():
        # a sample dropped while its shard was written is a dead letter, not a sample (and not
        # kept, when it was in the test set)
        e["samples"] -= sum(e["dropped"][s] for s in POOL_SETS)
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
            "shards": {s: e["shards"][s] for s in POOL_SETS},
            "rows": {s: e["rows"][s] for s in POOL_SETS},
            "bytes": {s: e["bytes"][s] for s in POOL_SETS},
            "frames_not_shown": e.get("frames_not_shown", []),
        }
    return report


class WriteReports(beam.DoFn):
    def __init__(self, config: BuildConfig):
        self.config = config

    def process(self, element):
        with failures.recorded(self.config.failures_dir):  # e.g. a full disk
            values = [results.unpacked(v) for v in element[1]]
            yield self.write([v for v in values if v is not None])  # (pipeline.build's always)

    def write(self, values: list) -> dict:
        c = self.config
        output = c.output
        row_store.remove_store(output)  # every shard is written: nothing reads it any more
        scenarios = sorted(c.scenarios)
        report = summarize(values, scenarios)
        for name in scenarios:  # what stands in for the benchmark's data (card, publish)
            report[name]["stand_ins"] = list(c.stand_ins.get(name, ()))
        dead = [v.as_dict() for v in values if isinstance(v, results.DeadLetter)]
        shards = [v for v in values if isinstance(v, results.ShardWritten)]
        filters = {v.scenario: v.filter for v in values if isinstance(v, results.PoolReport)}
        files = [{"path": relative_to(s.path, output), "rows": s.rows, "bytes": s.bytes,
                  "sha256": s.sha256, "config": s.config, "split": s.split} for s in shards]
        # the sources let a later build tell whether it makes the same pool (filters/coverage.py)
        sources = {n: c.sources[n] for n in scenarios if n in c.sources}
        train = summarize_train(values) if c.train_sources else None
        stamp = c.stamp
        if c.update:  # some scenarios rebuilt into a folder that keeps the others
            merged = merge_reports(output, c.update, report, filters, files, dead, sources)
            report, filters, files = merged["report"], merged["filters"], merged["files"]
            dead, sources, stamp = merged["dead"], merged["sources"], c.update["stamp"]
            train = merged["train"] or train

        dead = sorted(dead, key=lambda v: (v["scenario"], v["path"], v["reason"], v["key"]))
        dead_text = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in dead)
        written = {DEAD_LETTERS: dead_text.encode("utf-8")}  # reports build.json covers
        fileio.write_bytes_atomic(fileio.join(output, DEAD_LETTERS), written[DEAD_LETTERS])

        stand_ins = {report[n]["config"]: items  # (a scenario that made nothing has no config)
                     for n, items in dataset_card.stand_ins_of(report).items()
                     if report[n].get("config")}
        exported = self._write_export(output, values, stand_ins)
        rebuilt = [config for config, n in c.config_to_scenario.items() if n in c.scenarios]
        self._remove_stale_shards(output, shards, rebuilt)
        written[FILTER_REPORT] = _json({"settings": c.selection.as_dict(), "scenarios": filters})
        fileio.write_bytes_atomic(fileio.join(output, FILTER_REPORT), written[FILTER_REPORT])
        files = sorted(files, key=lambda f: f["path"])
        # "building" until the launcher has checked the build and records "ok" or "failed"
        # (core.buildfolder): nothing trusts a folder whose build did not get that far
        build = {"scenarios": report, "stamp": stamp, "files": files, "sources": sources,
                 "upstream_export": bool(c.export_upstream), "upstream_files": exported,
                 "status": "building", "stand_ins": dataset_card.stand_ins_of(report),
                 "report_files": [{"path": path, "bytes": len(data),
                                   "sha256": hashlib.sha256(data).hexdigest()}
                                  for path, data in sorted(written.items())]}
        extra_configs = []
        if train is not None:
            build["train"] = train
            if train.get("rows"):
                extra_configs.append({"config_name": TRAIN_CONFIG, "data_files": [
                    {"split": TRAIN, "path": set_glob(TRAIN, TRAIN_CONFIG)}]})
        fileio.write_bytes_atomic(fileio.join(output, BUILD_REPORT), _json(build))
        card = dataset_card.render(report, filters, stamp, extra_configs, train, files)
        fileio.write_bytes_atomic(fileio.join(output, CARD), card.encode("utf-8"))
        LOG.info("reports written to %s", fileio.join(output, REPORTS_DIR))
        return build

    def _write_export(self, output: str, values: list, stand_ins: dict) -> list[dict]:
        """Write the export's JSONL files; returns build.json's `upstream_files`: every file of
        the export this build wrote (the digests came with the lines, taken from the bytes
        written), plus, in an update, those of the configs it keeps, and the export's marker
        holding `stand_ins` (config -> what stands in for the benchmark's data). Files of an
        earlier export that are none of these are removed, so the export holds what the report
        says."""
        lines, exported = defaultdict(dict), {}
        for v in values:
            if isinstance(v, results.UpstreamLine):
                lines[v.config][v.id] = v.line
                for written in v.files:
                    exported[written[0]] = upstream_export.file_entry(v.config, written)
        for config, by_id in sorted(lines.items()):
            entry = upstream_export.write_jsonl(output, config, by_id)
            exported[entry["path"]] = entry
        known = True  # whether every file of the export that is to stay is listed now
        if self.config.update:
            previous = self.config.update["previous"]
            kept = kept_configs(previous, self.config.update["kept"])
            known = isinstance(previous.get("upstream_files"), list)
            for entry in buildfolder.listed(previous, "upstream_files"):
                if entry["config"] in kept:
                    exported.setdefault(entry["path"], entry)
        if exported:  # what the build was, for an import of the export (upstream_export.py)
            entry = upstream_export.write_marker(output, stand_ins)
            exported[entry["path"]] = entry
        if known:
            self._remove_stale_export(output, exported)
        return sorted(exported.values(), key=lambda e: e["path"])

    def _remove_stale_export(self, output: str, exported: dict) -> None:
        """An earlier build's exported files this build neither wrote nor keeps."""
        upstream = fileio.join(output, UPSTREAM_DIR)
        stale = [relative for relative in buildfolder.files_under(upstream)  # links not followed
                 if f"{UPSTREAM_DIR}/{relative}" not in exported]
        for relative in stale:
            buildfolder.remove_file(fileio.join(upstream, relative))
        if stale:
            LOG.info("removed %d files of an earlier upstream export from %s", len(stale),
                     fileio.join(output, UPSTREAM_DIR))

    def _remove_stale_shards(self, output: str, shards: list, rebuilt=()) -> None:
        """A previous build may have written a different number of shards; leftovers would be
        read by `load_dataset`'s glob, so every shard file not written now is removed from the
        folders written (and from a rebuilt config's folder whose sets are empty now, which
        have no shard). DIR/unfiltered/<config>/ holds no shard in this layout: shards a build
        of another layout left there, a second copy of a rebuilt config's rows, go too."""
        written = {s.path for s in shards}
        folders = {shard_folder(output, s.split, s.config) for s in shards}
        folders |= {shard_folder(output, TEST, config) for config in rebuilt}
        folders |= {fileio.join(output, UNFILTERED, config) for config in rebuilt}
        for folder in sorted(folders):
            for name in fileio.list_names(folder):
                url = fileio.join(folder, name)
                if name.endswith(".parquet") and url not in written:
                    LOG.info("removing stale shard %s", url)
                    fileio.remove(url)


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
