"""Importing an upstream release (`--import_upstream DIR`) as a source of samples.

DIR is a released `test/` folder: `<config>_preprocessed.jsonl` plus the extracted image folders
its templates point into (or our own `upstream/` export). Each line becomes a row of the record
contract, keeping upstream's `id`; frames are read from the image files the template names.
Records of the real release carry no `key`, `frame_ids` or `source`, so they are derived: the key
from the config and id, the frame ids from how each upstream environment walks its frames.
Our own export carries them, so export -> import gives back identical rows.
"""
from __future__ import annotations

import hashlib
import json

import apache_beam as beam

from proactivebench_builder.core import fileio, results
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.core.layout import upstream_jsonl_name as jsonl_name
from proactivebench_builder.core.records import UPSTREAM_EXTRA_FIELDS, empty_row
from proactivebench_builder.pipeline.scenarios import scenario_instance
from proactivebench_builder.pipeline.spread import Spread
from proactivebench_builder.transforms import behaviour_for_config, manifest_of


def present_configs(folder: str, config_to_scenario: dict) -> list[str]:
    return [c for c in sorted(config_to_scenario)
            if fileio.exists(fileio.join(folder, jsonl_name(c)))]


# The released JSONL files are 41 kB to 2.5 MB; the driver reads their ids before any work, so a
# file far beyond that is refused rather than read (it is not the release).
MAX_DRIVER_JSONL_BYTES = 256 << 20


def record_ids(folder: str, config: str) -> list[tuple[int, object]]:
    """(id, strong_occlusions) of every readable record of `<config>_preprocessed.jsonl`, read
    in the driver (before any work) to check the release's counts. A line that is not a record
    with an integer id is skipped here: the build makes it a dead letter."""
    url = fileio.join(folder, jsonl_name(config))
    fs, path = fileio.filesystem(url)
    size = fs.size(path)
    if size is not None and size > MAX_DRIVER_JSONL_BYTES:
        raise ValueError(f"{url}: {size:,} bytes, far more than a released JSONL file "
                         f"(at most {MAX_DRIVER_JSONL_BYTES:,} bytes are read)")
    found = []
    with fs.open(path, "rb") as handle:
        for line in handle:
            try:
                record = json.loads(line)
                found.append((int(record["id"]), record.get("strong_occlusions")))
            except (ValueError, KeyError, TypeError):  # (json's errors are ValueErrors)
                continue
    return found


def fingerprint(folder: str, configs: list[str]) -> str:
    """Identifies the imported release: sha256 over its JSONL files."""
    digest = hashlib.sha256()
    for config in configs:
        digest.update(config.encode())
        digest.update(fileio.read_bytes(fileio.join(folder, jsonl_name(config))))
    return "upstream:" + digest.hexdigest()


def upstream_frame_ids(config: str, record: dict) -> list[int]:
    """The frame ids an upstream environment can show, in play order: the record's own when it
    names them (our export), else as the config's scenario declares for upstream's records."""
    if record.get("frame_ids") is not None:
        return list(record["frame_ids"])
    return behaviour_for_config(config).upstream_frame_ids(record)


class ReadRecords(beam.DoFn):
    def __init__(self, config: BuildConfig):
        self.config = config

    def process(self, config: str):
        scenario = self.config.config_to_scenario[config]
        url = fileio.join(self.config.import_upstream, jsonl_name(config))
        with fileio.open_source(url) as handle:
            for number, line in enumerate(handle, start=1):
                yield scenario, config, number, line.decode("utf-8", errors="replace")


class ImportRecord(beam.DoFn):
    def __init__(self, config: BuildConfig):
        self.config = config

    def process(self, element):
        name, config, number, line = element
        folder = self.config.import_upstream
        where = f"{jsonl_name(config)}:{number}"
        yield results.Count(name, "raw_items")
        try:
            record = json.loads(line)
            row = self._row(name, config, record)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            yield results.DeadLetter(name, where, f"malformed upstream record: {err}")
            return
        scenario = scenario_instance(name, self.config, folder)
        try:
            urls = [fileio.join(folder, scenario.frame_path(row, f)) for f in row["frame_ids"]]
            for url in urls:
                scenario.validate_file_frame(url)
        except BadItem as err:
            yield results.DeadLetter(name, err.path or where, err.reason, row["key"])
            return
        row["frame_refs"] = [{"kind": "file", "url": u} for u in urls]
        yield results.Sample(name, row["key"], row)

    def _row(self, name: str, config: str, record: dict) -> dict:
        row = empty_row()
        for field in ("id", "image_template", "first_image", "num_images", "reference_image",
                      "prompt", "options", "categories", "answer"):
            row[field] = record[field]
        row["id"] = int(row["id"])
        for field in UPSTREAM_EXTRA_FIELDS + ("question_type",):
            row[field] = record.get(field)
        if row["crop"] is not None:
            row["crop"] = {k: float(row["crop"][k]) for k in ("top", "left", "height", "width")}
        for field in ("horizontal_step", "vertical_step"):
            if row[field] is not None:
                row[field] = float(row[field])
        row["key"] = record.get("key") or f"{config}/{row['id']}"
        row["frame_ids"] = upstream_frame_ids(config, record)
        manifest = manifest_of(name)
        row["source"] = record.get("source") or {
            "dataset": manifest["dataset"], "license": manifest["license"],
            "files": [f"{jsonl_name(config)}#id={row['id']}"]}
        return row


class ImportUpstream(beam.PTransform):
    """Result values (samples, dead letters, counts) from an upstream release folder."""

    def __init__(self, config: BuildConfig):
        super().__init__()
        self.config = config

    def expand(self, pbegin):
        configs = list(self.config.import_configs)
        return (pbegin
                | "UpstreamConfigs" >> beam.Create(configs, reshuffle=False)
                | "ReadRecords" >> beam.ParDo(ReadRecords(self.config))
                | "SpreadRecords" >> Spread()
                | "ImportRecords" >> beam.ParDo(ImportRecord(self.config)))
