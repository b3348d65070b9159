"""Importing an upstream release (`--import_upstream DIR`) as a source of samples.

DIR is a released `test/` folder: `<config>_preprocessed.jsonl` plus the extracted image folders
its templates point into (or our own `upstream/` export). Each line becomes a row of the record
contract, keeping upstream's `id`; frames are read from the image files the template names.
Records of the real release carry no `key`, `frame_ids` or `source`, so they are derived: the key
from the config and id, the frame ids from how each upstream environment walks its frames.
Our own export carries them, so export -> import gives back identical rows.

What the folder is, decided in the driver before any work (`folder_stand_ins`): records of our
own export (its marker file, `core.layout.EXPORT_MARKER`, or records carrying our `key` and
`source` fields) or records holding a scenario's known placeholder answers (e.g. MVP-N's
"Product 0041.") are not the release's, and the imported build says so in its `stand_ins`
(carrying over those the export's marker lists), so that its card does not claim the release
and `publish --repo_id` refuses it unless told.
"""
from __future__ import annotations

import hashlib
import json
import math
import posixpath
import string

import apache_beam as beam
import pyarrow as pa

from proactivebench_builder.core import fileio, results
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.core.layout import EXPORT_MARKER
from proactivebench_builder.core.layout import upstream_jsonl_name as jsonl_name
from proactivebench_builder.core.records import (
    CROP_KEYS, UPSTREAM_COMMON_FIELDS, UPSTREAM_EXTRA_FIELDS, arrow_schema, empty_row)
from proactivebench_builder.pipeline.dataset_card import STAND_IN_WORDS
from proactivebench_builder.pipeline.scenarios import scenario_instance
from proactivebench_builder.pipeline.spread import Spread
from proactivebench_builder.transforms import behaviour_for_config, get_scenario, manifest_of

# A record is about a kilobyte; a longer line is a dead letter, skipped unread.
MAX_LINE_BYTES = 16 << 20
# The frames one record may name (the release's longest sequence has a few hundred): bounds
# the frame lists derived from a record's numbers (num_images 10^9 would be a 10^9-list).
MAX_FRAMES = 10_000
# The integer fields from which frame lists are derived.
FRAME_COUNT_FIELDS = ("first_image", "num_images", "reference_image", "step_size", "max_steps")
# What a record's fields must be: the record contract's Arrow types (core.records), a pixel
# count an integer or a fractional number (the shards keep which).
_TYPES = {f.name: f.type for f in arrow_schema(fractional_pixels=True)}
_CHECKED_FIELDS = UPSTREAM_COMMON_FIELDS + UPSTREAM_EXTRA_FIELDS + (
    "question_type", "key", "frame_ids", "source")


class BadRecord(ValueError):
    """A line of the release that cannot become a row (its reason names what is wrong)."""


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
    with fileio.open_source(url) as handle:  # a FIFO is refused, never waited on
        for _, line in fileio.numbered_lines(handle, MAX_LINE_BYTES, skip_bom=True):
            try:
                record = json.loads(line)
            except (TypeError, ValueError, RecursionError):  # None (over-long), not JSON
                continue
            # an integer id only: 1.9, true or 1e400 are no record's id (the build makes
            # such a line a dead letter)
            if isinstance(record, dict) and type(record.get("id")) is int:
                found.append((record["id"], record.get("strong_occlusions")))
    return found


# Fields only our export writes (upstream's records have none of them).
BUILDER_FIELDS = ("key", "source")
BUILDER_KIND = "builder_export"  # the stand-in kind of records our export wrote
MAX_MARKER_BYTES = 1 << 20  # the marker lists a few lines per config
MAX_STAND_IN_CHARS = 400    # a stand-in's line (ours are ~300 characters at most)


def folder_stand_ins(folder: str, config_to_scenario: dict[str, str]) -> dict[str, list[dict]]:
    """scenario -> what in the imported records stands in for the benchmark's data: that they
    come from our export (its marker, or our own fields in them), the stand-ins the marker
    carries (what the exported build was), and the placeholder answers they hold.
    `config_to_scenario`: the imported configs. Read in the driver, before any work (the JSONL
    files are small: `record_ids` reads them too)."""
    marker = read_marker(folder)
    found = {}
    for config, name in sorted(config_to_scenario.items()):
        scan = scan_records(folder, config, get_scenario(name))
        evidence = ([f"{EXPORT_MARKER} beside them"] if marker is not None else []) + (
            [f"{scan['builder']:,} of {scan['records']:,} carry its own fields "
             f"({', '.join(BUILDER_FIELDS)})"] if scan["builder"] else [])
        items = [{"kind": BUILDER_KIND,
                  "what": "records written by a ProactiveBench builder's upstream export ("
                          + "; ".join(evidence) + "), not the upstream release's"}
                 ] if evidence else []
        items += [{"kind": item["kind"], "what": f"the exported build: {item['what']}"}
                  for item in (marker or {}).get(config, []) if item["kind"] != BUILDER_KIND]
        if scan["placeholders"]:
            items.append({"kind": "placeholders", "what": (
                f"{scan['placeholders']:,} of {scan['records']:,} records answer with a "
                f"placeholder (e.g. {scan['example']!r}), not a label of the release")})
        if items:
            found[name] = items
    return found


def read_marker(folder: str) -> dict[str, list[dict]] | None:
    """config -> stand-ins, as the folder's export marker lists them; None without a marker. A
    marker that cannot be read still says the folder is an export: {} then."""
    url = fileio.join(folder, EXPORT_MARKER)
    if not fileio.exists(url):
        return None
    try:
        listed = json.loads(fileio.read_bytes(url, limit=MAX_MARKER_BYTES)).get("stand_ins")
    except (OSError, ValueError, AttributeError, RecursionError):
        return {}
    if not isinstance(listed, dict):
        return {}
    return {str(config): [carried(item) for item in items if carried(item)]
            for config, items in listed.items() if isinstance(items, list)}


def carried(item) -> dict | None:
    """A stand-in of the marker as the imported build records it: a known kind, and its text as
    one line of at most MAX_STAND_IN_CHARS (the marker is the folder's, as untrusted as its
    records; what it says goes into the card). None for anything else."""
    if not (isinstance(item, dict) and item.get("kind") in STAND_IN_WORDS
            and isinstance(item.get("what"), str)):
        return None
    what = " ".join(item["what"].split())
    if len(what) > MAX_STAND_IN_CHARS:
        what = what[:MAX_STAND_IN_CHARS - 3] + "..."
    return {"kind": item["kind"], "what": what}


def scan_records(folder: str, config: str, scenario_cls) -> dict:
    """How many records of `<config>_preprocessed.jsonl` there are, how many carry our export's
    own fields, and how many answer with one of the scenario's placeholders (with an example).
    A line that is not a record is skipped here: the build makes it a dead letter."""
    scan = {"records": 0, "builder": 0, "placeholders": 0, "example": None}
    with fileio.open_source(fileio.join(folder, jsonl_name(config))) as handle:
        for _, line in fileio.numbered_lines(handle, MAX_LINE_BYTES, skip_bom=True):
            try:
                record = json.loads(line)
            except (TypeError, ValueError, RecursionError):  # (None: an over-long line)
                continue
            if not isinstance(record, dict):
                continue
            scan["records"] += 1
            scan["builder"] += any(record.get(f) is not None for f in BUILDER_FIELDS)
            if scenario_cls.is_placeholder_answer(record.get("answer")):
                scan["placeholders"] += 1
                scan["example"] = scan["example"] or record["answer"]
    return scan


def template_folder(folder: str, config: str) -> str | None:
    """The folder the first record's image_template starts in (e.g. `MVP-N`), None when the
    template names no folder or no line is a record."""
    with fileio.open_source(fileio.join(folder, jsonl_name(config))) as handle:
        for _, line in fileio.numbered_lines(handle, MAX_LINE_BYTES, skip_bom=True):
            try:
                template = json.loads(line).get("image_template")
            except (TypeError, ValueError, AttributeError, RecursionError):
                continue
            top, sep, _ = template.partition("/") if isinstance(template, str) else ("", "", "")
            return top if sep and top not in ("", ".", "..") and "{" not in top else None
    return None


def fingerprint(folder: str, configs: list[str]) -> str:
    """Identifies the imported release: sha256 over its JSONL files (read a block at a time,
    regular files only)."""
    digest = hashlib.sha256()
    for config in configs:
        digest.update(config.encode())
        with fileio.open_source(fileio.join(folder, jsonl_name(config))) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return "upstream:" + digest.hexdigest()


def upstream_frame_ids(config: str, record: dict) -> list[int]:
    """The frame ids an upstream environment can show, in play order: the record's own when it
    names them (our export), else as the config's scenario declares for upstream's records."""
    if record.get("frame_ids") is not None:
        return list(record["frame_ids"])
    return behaviour_for_config(config).upstream_frame_ids(record)


def parse_record(line: bytes | None) -> dict:
    """The JSON object of one line, every field the record contract has of the type it has
    there; raise BadRecord. (JSON's NaN and Infinity are not numbers a record may hold.)"""
    if line is None:
        raise BadRecord(f"a line longer than {MAX_LINE_BYTES >> 20} MiB")
    try:
        record = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise BadRecord(f"not UTF-8 text ({err})") from None
    except RecursionError:
        raise BadRecord("a value nested too deeply to decode") from None
    except ValueError as err:  # JSONDecodeError, NaN or Infinity
        raise BadRecord(str(err)[:300]) from None
    if not isinstance(record, dict):
        raise BadRecord(f"a JSON {type(record).__name__}, not an object")
    missing = [f for f in UPSTREAM_COMMON_FIELDS if record.get(f) is None]
    if missing:
        raise BadRecord(f"missing fields {missing}")
    for field in _CHECKED_FIELDS:
        if not _conforms(record.get(field), _TYPES[field]):
            raise BadRecord(f"{field} is not {_TYPES[field]}: {_shown(record[field])}")
    for field in FRAME_COUNT_FIELDS:
        if record.get(field) is not None and not -MAX_FRAMES <= record[field] <= MAX_FRAMES:
            raise BadRecord(f"{field} {record[field]} is beyond the {MAX_FRAMES:,} frames a "
                            "record may have")
    check_template(record["image_template"])
    return record


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a record may hold")


def _conforms(value, dtype: pa.DataType) -> bool:
    """Whether `value` (decoded JSON) is a value of the Arrow type `dtype`, or null: exactly
    (an int64 column takes no bool, no float and nothing beyond 64 bits; a float64 column a
    finite number; a string column text that UTF-8 can encode)."""
    if value is None:
        return True
    if pa.types.is_int64(dtype):
        return type(value) is int and -(1 << 63) <= value < (1 << 63)
    if pa.types.is_float64(dtype):
        return type(value) in (int, float) and math.isfinite(value)
    if pa.types.is_boolean(dtype):
        return type(value) is bool
    if pa.types.is_string(dtype):
        return type(value) is str and _encodable(value)
    if pa.types.is_list(dtype):
        return type(value) is list and all(_conforms(v, dtype.value_type) for v in value)
    if pa.types.is_struct(dtype):
        names = {f.name for f in dtype}
        return type(value) is dict and set(value) <= names and all(
            _conforms(value.get(f.name), f.type) for f in dtype)
    return False


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")  # JSON's "\ud800" escapes decode to lone surrogates
    except UnicodeEncodeError:
        return False
    return True


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
            row = self._row(name, config, parse_record(line))
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

    def _row(self, name: str, config: str, record: dict) -> dict:
        """The row of a checked record (parse_record); BadRecord for what only the row shows."""
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
