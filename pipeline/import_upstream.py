"""Importing an upstream release (`--import_upstream DIR`) as a source of samples.

DIR is a released `test/` folder: `<config>_preprocessed.jsonl` plus the extracted image folders
its templates point into (or our own `upstream/` export). Each line becomes a row of the record
contract, keeping upstream's `id`; frames are read from the image files the template names.
Records of the real release carry no `key`, `frame_ids` or `source`, so they are derived: the key
from the config and id, the frame ids from how each upstream environment walks its frames.
Our own export carries them, so export -> import gives back identical rows.

Before any work the driver reads every record and judges it (`pipeline.import_check`:
the same parsing and row as here, what `validate` checks, and that the kept records' first and
reference frames are where their templates point), and learns what the folder is (our own
export, placeholder answers). A record is read again here, in a worker, for the build: the
folder is untrusted and may change in between, so every check below still holds on its own.
"""
from __future__ import annotations

import json
import posixpath
import string

import apache_beam as beam

from proactivebench_builder.core import contract, fileio, results
from proactivebench_builder.core.contract import MAX_FRAMES, expected_text
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.core.layout import upstream_jsonl_name as jsonl_name
from proactivebench_builder.core.records import (
    CROP_KEYS, UPSTREAM_COMMON_FIELDS, UPSTREAM_EXTRA_FIELDS, empty_row)
from proactivebench_builder.pipeline.scenarios import scenario_instance
from proactivebench_builder.pipeline.spread import Spread
from proactivebench_builder.transforms import behaviour_for_config, manifest_of

# A record is about a kilobyte; a longer line is a dead letter, skipped unread.
MAX_LINE_BYTES = 16 << 20
# The integer fields from which frame lists are derived.
FRAME_COUNT_FIELDS = ("first_image", "num_images", "reference_image", "step_size", "max_steps")
# What a record's fields must be: the record contract's Arrow types, a pixel count an integer or
# a fraction (the shards keep which).
_TYPES = {f.name: f.type for f in contract.TYPES}
_CHECKED_FIELDS = UPSTREAM_COMMON_FIELDS + UPSTREAM_EXTRA_FIELDS + (
    "question_type", "key", "frame_ids", "source")


class BadRecord(ValueError):
    """A line of the release that cannot become a row (its reason names what is wrong)."""


def upstream_frame_ids(config: str, record: dict) -> list[int]:
    """The frame ids an upstream environment can show, in play order: the record's own when it
    names them (our export), else as the config's scenario declares for upstream's records."""
    if record.get("frame_ids") is not None:
        return list(record["frame_ids"])
    return behaviour_for_config(config).upstream_frame_ids(record)


def parse_record(line: bytes | None) -> dict:
    """The JSON object of one line, with the fields every environment reads and every field the
    record contract has of the type it has there; raise BadRecord naming the first field wrong."""
    return check_record(decode_record(line))


def decode_record(line: bytes | None) -> dict:
    """The JSON object of one line; BadRecord for an over-long line, bytes that are not UTF-8,
    text that is not JSON (JSON's NaN and Infinity are not numbers a record may hold) or JSON
    that is not an object."""
    if line is None:
        raise BadRecord(f"a line longer than {MAX_LINE_BYTES >> 20} MiB")
    try:
        record = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise BadRecord(f"not UTF-8 text ({err})") from None
    except RecursionError:
        raise BadRecord("a value nested too deeply to decode") from None
    except ValueError as err:  # JSONDecodeError, NaN or Infinity
        raise BadRecord(f"not a JSON record ({str(err)[:300]})") from None
    if not isinstance(record, dict):
        raise BadRecord(f"a JSON {type(record).__name__}, not an object")
    return record


def check_record(record: dict, required: tuple = UPSTREAM_COMMON_FIELDS, reader: str = "") -> dict:
    """`record` when it holds the `required` fields (which `reader`, e.g. "upstream's MVP-N
    environment", reads) and every field of the record contract it holds has the contract's
    type (a pixel count: an integer or a fraction); else BadRecord naming the field and what
    was expected."""
    for field in required:
        if record.get(field) is None:
            raise BadRecord(f"{field} is absent (expected {expected_text(_TYPES[field])}"
                            + (f"; {reader} reads it)" if reader else ")"))
    for field in _CHECKED_FIELDS:
        if contract.value_problem(record.get(field), _TYPES[field]) is not None:
            raise BadRecord(f"{field} is {_shown(record[field])}, expected "
                            f"{expected_text(_TYPES[field])}")
    crop = record.get("crop")
    if crop is not None and any(crop.get(k) is None for k in CROP_KEYS):
        raise BadRecord(f"crop is {_shown(crop)}, expected {expected_text(_TYPES['crop'])}")
    for field in FRAME_COUNT_FIELDS:
        if record.get(field) is not None and not -MAX_FRAMES <= record[field] <= MAX_FRAMES:
            raise BadRecord(f"{field} {record[field]} is beyond the {MAX_FRAMES:,} frames a "
                            "record may have")
    check_template(record["image_template"])
    return record


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a record may hold")


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def check_template(template: str) -> None:
    """A frame template holds plain `{name}` slots only: a format spec (`{image:>999999999}`
    would allocate a gigabyte), a conversion or an attribute or index lookup is refused."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as err:
        raise BadRecord(f"image_template {_shown(template)}: {err}") from None
    for _, name, spec, conversion in fields:
        if name is not None and not (name.isidentifier() and not spec and conversion is None):
            raise BadRecord(f"image_template {_shown(template)}: a slot may only be {{name}}")


def frame_paths(scenario, row: dict) -> list[str]:
    """The release-relative path of each frame of `row`; BadRecord for a template that leads
    out of the release folder (absolute, or up through `..`)."""
    paths = []
    for frame_id in row["frame_ids"]:
        path = scenario.frame_path(row, frame_id)
        normal = posixpath.normpath(path)
        if posixpath.isabs(normal) or normal == ".." or normal.startswith("../"):
            raise BadRecord(f"image_template {_shown(row['image_template'])} leads outside the "
                            f"release folder ({_shown(path)})")
        paths.append(path)
    return paths


class ReadRecords(beam.DoFn):
    def __init__(self, config: BuildConfig):
        self.config = config

    def process(self, config: str):
        """(scenario, config, line number, the line's bytes or None when over MAX_LINE_BYTES):
        bytes, decoded by ImportRecord, where a line that is not UTF-8 is a dead letter."""
        scenario = self.config.config_to_scenario[config]
        url = fileio.join(self.config.import_upstream, jsonl_name(config))
        with fileio.open_source(url) as handle:
            for number, line in fileio.numbered_lines(handle, MAX_LINE_BYTES, skip_bom=True):
                yield scenario, config, number, line


class ImportRecord(beam.DoFn):
    def __init__(self, config: BuildConfig):
        self.config = config

    def process(self, element):
        name, config, number, line = element
        folder = self.config.import_upstream
        where = f"{jsonl_name(config)}:{number}"
        yield results.Count(name, "raw_items")
        scenario = scenario_instance(name, self.config, folder)
        try:
            row = record_row(name, config, parse_record(line))
            paths = frame_paths(scenario, row)
        except BadRecord as err:
            yield results.DeadLetter(name, where, f"malformed upstream record: {err}")
            return
        except Exception as err:  # noqa: BLE001 - a record the scenario cannot read: its own
            yield results.DeadLetter(name, where, f"malformed upstream record: "
                                                  f"{type(err).__name__}: {str(err)[:300]}")
            return
        row["frame_refs"] = [{"kind": "file", "url": fileio.join(folder, p)} for p in paths]
        try:
            for ref in row["frame_refs"]:
                scenario.validate_file_frame(ref["url"])
        except BadItem as err:
            yield results.DeadLetter(name, err.path or where, err.reason, row["key"])
            return
        finally:  # the writer then proves it writes the bytes validated here
            scenario.seal_frame_refs(row)
        yield results.Sample(name, row["key"], row)


def record_row(name: str, config: str, record: dict) -> dict:
    """The row (without frames) of a checked record (parse_record) of scenario `name`'s
    config; BadRecord for what only the row shows."""
    row = empty_row()
    for field in UPSTREAM_COMMON_FIELDS:
        row[field] = record[field]
    for field in UPSTREAM_EXTRA_FIELDS + ("question_type",):
        row[field] = record.get(field)
    if row["crop"] is not None:  # in the contract's key order (the values as they are)
        row["crop"] = {k: row["crop"].get(k) for k in CROP_KEYS}
    row["key"] = record.get("key") or f"{config}/{row['id']}"
    if not row["key"].startswith(f"{config}/"):
        raise BadRecord(f"key {_shown(row['key'])} is not a key of {config}")
    frame_ids = upstream_frame_ids(config, record)
    if not 0 < len(frame_ids) <= MAX_FRAMES or len(set(frame_ids)) != len(frame_ids):
        raise BadRecord(f"{len(frame_ids)} frame ids ({len(set(frame_ids))} distinct): a "
                        f"record has 1 to {MAX_FRAMES:,} distinct frames")
    row["frame_ids"] = frame_ids
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
