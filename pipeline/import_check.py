"""What `--import_upstream DIR` learns and checks of the folder before any work.

Each chosen `<config>_preprocessed.jsonl` is read once, here in the driver (the release's are
41 kB to 2.5 MB), and every record is judged as the build and `validate` would judge it after
reading every image:

- the fields upstream's environment for the config reads of every record (every environment's,
  `core.records.UPSTREAM_COMMON_FIELDS`, and the scenario's `Play.record_fields`) are present,
  and every field of the record contract it holds has the contract's type;
- the row the import derives from it keeps the record contract and its scenario's rules (what
  `validate` checks of a row, frames aside), and its id is its own;
- for the records the filter keeps, the first frame an episode shows and the reference frame
  are regular files where the template points (looked up, never read).

What would fail the build at its end fails here, in one line naming the config, the line, the
record, the field and what was expected: under `--keep_list released`, a record the released
keep list keeps that cannot be imported or lacks a frame (the release's counts would not hold);
under any filter, more of them than `--max_bad_fraction` allows. Fewer are said in one warning
line and become dead letters. The same reading gives the ids the released counts are checked
on, and what in the records stands in for the release (our own export's fields, placeholder
answers).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field

from proactivebench_builder.core import contract, fileio
from proactivebench_builder.core.errors import ScenarioCodeError, UsageError
from proactivebench_builder.core.layout import EXPORT_MARKER
from proactivebench_builder.core.layout import upstream_jsonl_name as jsonl_name
from proactivebench_builder.core.records import UPSTREAM_COMMON_FIELDS
from proactivebench_builder.pipeline.dataset_card import STAND_IN_WORDS
from proactivebench_builder.pipeline.import_upstream import (
    MAX_LINE_BYTES, BadRecord, check_record, decode_record, frame_paths, record_row)
from proactivebench_builder.transforms import behaviour_for_config, get_scenario
from proactivebench_builder.transforms.base import code_failure

LOG = logging.getLogger("proactivebench_builder")

# The released JSONL files are 41 kB to 2.5 MB; one far beyond that is not the release and is
# refused rather than read into the driver.
MAX_DRIVER_JSONL_BYTES = 256 << 20
# Fields only our export writes (upstream's records have none of them).
BUILDER_FIELDS = ("key", "source")
BUILDER_KIND = "builder_export"  # the stand-in kind of records our export wrote
MAX_MARKER_BYTES = 1 << 20  # the marker lists a few lines per config
MAX_STAND_IN_CHARS = 400    # a stand-in's line (ours are ~300 characters at most)


def present_configs(folder: str, config_to_scenario: dict) -> list[str]:
    return [c for c in sorted(config_to_scenario)
            if fileio.exists(fileio.join(folder, jsonl_name(c)))]


@dataclass
class ConfigScan:
    """What one config's JSONL holds, as read before any work."""
    config: str
    name: str                                          # its scenario
    records: int = 0                                   # lines read
    ids: list = field(default_factory=list)            # (id, strong_occlusions) of every record
    bad: list = field(default_factory=list)            # (line, id or None, reason)
    rows: dict = field(default_factory=dict)           # id -> the row derived (no frames)
    builder: int = 0                                   # records carrying our export's fields
    placeholders: int = 0                              # records answering with a placeholder
    placeholder_example: str | None = None


def upstream_fields(config: str) -> tuple[str, ...]:
    """The fields upstream's environment for `config` reads of every record."""
    return UPSTREAM_COMMON_FIELDS + tuple(behaviour_for_config(config).play.record_fields)


def scan_config(folder: str, config: str, name: str) -> ConfigScan:
    """Read `<config>_preprocessed.jsonl` once and judge every record (see the module)."""
    scan = ConfigScan(config, name)
    url = fileio.join(folder, jsonl_name(config))
    fs, path = fileio.filesystem(url)
    size = fs.size(path)
    if size is not None and size > MAX_DRIVER_JSONL_BYTES:
        raise ValueError(f"{url}: {size:,} bytes, far more than a released JSONL file "
                         f"(at most {MAX_DRIVER_JSONL_BYTES:,} bytes are read)")
    scenario_cls = get_scenario(name)
    required = upstream_fields(config)
    with fileio.open_source(url) as handle:  # a FIFO is refused, never waited on
        for number, line in fileio.numbered_lines(handle, MAX_LINE_BYTES, skip_bom=True):
            scan.records += 1
            try:
                record = decode_record(line)
            except BadRecord as err:
                scan.bad.append((number, None, str(err)))
                continue
            record_id = record.get("id") if type(record.get("id")) is int else None
            if record_id is not None:  # what upstream's loader counts (released counts)
                scan.ids.append((record_id, record.get("strong_occlusions")))
            scan.builder += any(record.get(f) is not None for f in BUILDER_FIELDS)
            if scenario_cls.is_placeholder_answer(record.get("answer")):
                scan.placeholders += 1
                scan.placeholder_example = scan.placeholder_example or record["answer"]
            problem = record_problem(config, name, record, required)
            if problem is None and record_id in scan.rows:
                problem = f"id {record_id} repeats (each record of a config has its own id)"
            if problem is not None:
                scan.bad.append((number, record_id, problem))
            else:
                scan.rows[record_id] = record_row(name, config, record)
    return scan


def record_problem(config: str, name: str, record: dict, required: tuple) -> str | None:
    """Why the record cannot become a row the build writes and `validate` accepts (None: it
    can): a field upstream reads absent or of the wrong type, then what `validate` checks."""
    try:
        check_record(record, required, f"upstream's {config} environment")
        row = record_row(name, config, record)
        frame_paths(get_scenario(name).environment, row)  # a template leading out of the folder
    except BadRecord as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - a record of the fields and types upstream reads
        line = code_failure(err, get_scenario(name))  # that the scenario's own hooks raise on
        if line is not None:
            raise ScenarioCodeError(line) from err
        return f"its scenario cannot read it ({type(err).__name__}: {str(err)[:200]})"
    return contract.first_problem(row, behaviour_for_config(config))


def where(config: str, line: int, record_id) -> str:
    return f"{jsonl_name(config)} line {line:,}" + (
        f" (id {record_id})" if record_id is not None else "")


def check_records(folder: str, scan: ConfigScan, kept: frozenset | None,
                  max_bad_fraction: float, released: bool) -> None:
    """Refuse (UsageError, one line) bad records that would fail the build after the work;
    warn of the others (`kept`: the ids the filter keeps, None: every record)."""
    if not scan.bad:
        return
    line, record_id, reason = scan.bad[0]
    bad_kept = [b for b in scan.bad if kept is None or b[1] in kept or b[1] is None]
    counted = (f"{len(scan.bad):,} of {scan.records:,} records of {scan.config} cannot be "
               f"imported; the first, {where(scan.config, line, record_id)}: {reason}")
    if released and bad_kept:
        why = (f"the released keep list keeps {len(bad_kept):,} of them" if len(bad_kept) > 1
               else "the released keep list keeps it")
    elif len(scan.bad) > max_bad_fraction * scan.records:
        why = f"more than --max_bad_fraction {max_bad_fraction:g} of them"
    else:
        LOG.warning("--import_upstream %s: %s (each becomes a dead letter)", folder, counted)
        return
    raise UsageError(f"--import_upstream {folder}: {counted} ({why}; no image was read)")


def shown_first_and_reference(scan: ConfigScan, row: dict) -> list[str]:
    """The paths of the first frame an episode of `row` shows and of its reference frame."""
    behaviour = behaviour_for_config(scan.config)
    first = behaviour.shown_frame(row, row["first_image"], None)
    return list(dict.fromkeys(behaviour.play.frame_path(row, f)
                              for f in (first, row["reference_image"])))


def check_frames(folder: str, scans: list[ConfigScan], kept_of: dict, max_bad_fraction: float,
                 released: bool) -> None:
    """Every kept record's first and reference frames are files where its template points;
    else one line saying where they were expected and where some were found. `kept_of`:
    config -> the ids the filter keeps (absent: every record)."""
    missing, checked = [], 0
    for scan in scans:
        kept = kept_of.get(scan.config)
        for record_id, row in scan.rows.items():
            if kept is not None and record_id not in kept:
                continue
            checked += 1
            absent = [p for p in shown_first_and_reference(scan, row)
                      if not is_regular_file(fileio.join(folder, p))]
            if absent:
                missing.append((scan.config, record_id, absent[0]))
    if not missing:
        return
    config, record_id, path = missing[0]
    what = (f"{len(missing):,} of the {checked:,} records kept lack their first or reference "
            f"frame (the first, {config} id {record_id}: no {fileio.join(folder, path)})")
    if not released and len(missing) <= max_bad_fraction * checked:
        LOG.warning("--import_upstream %s: %s; each becomes a dead letter", folder, what)
        return
    raise UsageError(f"--import_upstream {folder}: the images are not where the records' "
                     f"templates point: {what}{found_elsewhere(folder, path)}")


def check_unzipped(folder: str, scans: list[ConfigScan]) -> None:
    """The release ships its images as *.zip archives beside the JSONL files: left zipped, the
    folders the records' templates start in are missing. Said first, before the counts and the
    records (the likeliest mistake of all), naming the archives."""
    archives = sorted(n for n in fileio.list_names(folder) if n.lower().endswith(".zip"))
    if not archives:
        return
    tops = {row["image_template"].split("/", 1)[0] for scan in scans
            for row in list(scan.rows.values())[:1] if "/" in row["image_template"]}
    missing = sorted(t for t in tops if not fileio.is_dir(fileio.join(folder, t)))
    if missing:
        raise UsageError(f"--import_upstream {folder}: unzip the archives first: "
                         f"{', '.join(archives)} (the records' images are in them: no "
                         f"{', '.join(f'{m}/' for m in missing)} in the folder yet): README, "
                         "Regenerating the benchmark")


def is_regular_file(url: str) -> bool:
    """A regular file (a folder, a FIFO or a link leading out are not frames)."""
    if not fileio.is_local(url):
        return fileio.exists(url) and not fileio.is_dir(url)
    try:
        with fileio.open_local_regular(fileio.local_path(url)):
            return True
    except OSError:
        return False


def found_elsewhere(folder: str, path: str) -> str:
    """Where a frame expected at `folder/path` is instead: one folder down (the archives
    unzipped under a top folder), or nowhere yet (archives still zipped, or no images at all),
    with what to do."""
    names = sorted(fileio.list_names(folder))
    for entry in names:
        below = fileio.join(folder, entry)
        if fileio.is_dir(below) and is_regular_file(fileio.join(below, path)):
            return (f"; it is at {fileio.join(below, path)}: the archives were unzipped one "
                    f"folder down, so move what {below} holds up into {folder}")
    archives = [n for n in names if n.lower().endswith(".zip")]
    if archives:
        return f"; unzip the archives there first: {', '.join(archives)}"
    top = path.split("/", 1)[0]
    if "/" in path and not fileio.is_dir(fileio.join(folder, top)):
        return (f"; {folder} holds no {top}/ folder: unzip the release's image archives there "
                "(README, Regenerating the benchmark)")
    return ""


# ---- what the folder is -----------------------------------------------------------------------

def folder_stand_ins(folder: str, scans: list[ConfigScan]) -> dict[str, list[dict]]:
    """scenario -> what in the imported records stands in for the benchmark: that they come
    from our export (its marker, or our own fields in them), the stand-ins the marker carries
    (what the exported build was), and the placeholder answers they hold."""
    marker = read_marker(folder)
    found = {}
    for scan in sorted(scans, key=lambda s: s.config):
        evidence = ([f"{EXPORT_MARKER} beside them"] if marker is not None else []) + (
            [f"{scan.builder:,} of {scan.records:,} carry its own fields "
             f"({', '.join(BUILDER_FIELDS)})"] if scan.builder else [])
        items = [{"kind": BUILDER_KIND,
                  "what": "records written by a ProactiveBench builder's upstream export ("
                          + "; ".join(evidence) + "), not the upstream release's"}
                 ] if evidence else []
        items += [{"kind": item["kind"], "what": f"the exported build: {item['what']}"}
                  for item in (marker or {}).get(scan.config, []) if item["kind"] != BUILDER_KIND]
        if scan.placeholders:
            items.append({"kind": "placeholders", "what": (
                f"{scan.placeholders:,} of {scan.records:,} records answer with a placeholder "
                f"(e.g. {scan.placeholder_example!r}), not a label of the release")})
        if items:
            found[scan.name] = items
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
