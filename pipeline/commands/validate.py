"""`run_pipeline.py validate DIR`: check a built folder against the record contract.

What is checked (each check names the file and the row's key in its message):

- the folder: `reports/build.json` is present and says every scenario is accounted for
  (raw items = samples + dead letters + exclusions); its per-set row and shard counts match the
  shards on disk; the dataset card's `configs:` block names exactly the config folders, and each
  of its `data_files` globs matches at least one shard; the shard files of each set of a config
  folder (the pool's `test` and `filtered_out` rows) are exactly `<set>-00000-of-0000N` ..
  `<set>-0000(N-1)-of-0000N`;
- each shard: columns, order and types equal `core.records.arrow_schema()` (its variant with
  fractional pixel counts where the shard holds them), with the
  `datasets` feature metadata that makes `load_dataset` decode frames as images;
- each row: `answer` in `categories`, exactly 4 distinct categories, options present and
  non-empty (exactly one abstain option, every other option naming exactly one upstream action),
  `first_image`/`reference_image` in `frame_ids`, one decodable frame per frame id (decoded the
  way the build validates sources: fully, JPEG at 1/8 scale), and the step cap consistent with
  the frames, by the scenario's declared environment behaviour (see `step_rule`);
- across rows: `id` and `key` unique per config across its whole pool (both sets: a row is in
  one of them only), and per config in the train split.

Choices: the step-cap rules check that every frame the environment can reach within its step
cap is present, by the behaviour the config's scenario declares (`Behaviour.record_problems`
of its `Play`, in the scenario's folder). Options are matched against the scenario's own action
keywords. A config no registered scenario declares (e.g. a plug-in scenario validated without
PROACTIVEBENCH_SCENARIO_PATH) is one problem naming the way to make it visible; its options and
steps are not checked. A config listed by
the card without a test shard is reported: `load_dataset(..., split="test")` would fail on it.
Last, every config and split the card declares is loaded through `datasets.load_dataset`, as
users load them (`load_problems`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections import defaultdict

import pyarrow.parquet as pq

from proactivebench_builder.core import buildfolder, contract, fileio, phases
from proactivebench_builder.core.cli import DEBUG_HELP, CommandParser
from proactivebench_builder.core.images import BadImage, check_image
from proactivebench_builder.core.layout import (
    BUILD_REPORT, POOL_SETS, TRAIN, TRAIN_CONFIG, TRAIN_DIR, folder_label)
from proactivebench_builder.core.play import Behaviour, Play
from proactivebench_builder.core.records import arrow_schema, schema_of, train_arrow_schema
from proactivebench_builder.pipeline.commands import subcommand
from proactivebench_builder.transforms import (
    PATH_VARIABLE, UnknownConfig, behaviour_for_config, load_scenarios, scenario_for_config)

HELP = "check a built folder against the record contract (exit 1 listing every problem)"

BATCH_ROWS = 16  # rows decoded at a time: memory holds one small batch of frames
POOL = "pool"    # FolderValidator.ids_by_key: a config's pool, both of its shard sets
MAX_PRINTED = 200



# ---- the folder ---------------------------------------------------------------------------

# ---- one shard ----------------------------------------------------------------------------

def schema_problems(actual, where: str, expected=None) -> list[str]:
    expected = expected or schema_of(actual)
    problems = []
    missing = [n for n in expected.names if n not in actual.names]
    extra = [n for n in actual.names if n not in expected.names]
    if missing:
        problems.append(f"{where}: missing columns {missing}")
    if extra:
        problems.append(f"{where}: unexpected columns {extra}")
    if not missing and not extra and actual.names != expected.names:
        problems.append(f"{where}: columns out of order: {actual.names}")
    for field in expected:
        if field.name in actual.names:
            got = actual.field(field.name).type
            if not got.equals(field.type):
                problems.append(f"{where}: column {field.name!r} is {got}, expected {field.type}")
    hf = (actual.metadata or {}).get(b"huggingface")
    if hf is None:
        problems.append(f"{where}: no `huggingface` schema metadata (frames would not load as "
                        "images)")
    elif _json_or_none(hf) != json.loads(expected.metadata[b"huggingface"]):
        problems.append(f"{where}: `huggingface` feature metadata differs from the contract")
    return problems


def _json_or_none(data: bytes):
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested without end
        return None


def has_columns(actual, expected) -> bool:
    """Every column of `expected` is in `actual`, with its type (rows can then be checked)."""
    return all(f.name in actual.names and actual.field(f.name).type.equals(f.type)
               for f in expected)


def iter_rows(url: str, columns: list[str] | None = None):
    """Rows of one shard, a small batch at a time (a FIFO or a folder in a shard's place is
    refused, never waited on: `fileio.open_source`)."""
    with fileio.open_source(url) as handle:
        parquet = pq.ParquetFile(handle)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            yield from batch.to_pylist()


def read_schema(url: str):
    with fileio.open_source(url) as handle:
        return pq.ParquetFile(handle).schema_arrow


# ---- one row ------------------------------------------------------------------------------

def declared_behaviour(config: str) -> Behaviour:
    """The behaviour the config's scenario declares (the generic frame ladder when none)."""
    try:
        return behaviour_for_config(config)
    except UnknownConfig:
        return Play().rules(config)


def train_row_problems(row: dict) -> list[str]:
    """A train example: one decodable image, the ground truth and proactive actions among its
    options, a known config."""
    options = row.get("options") or []
    problems = []
    if not options or any(not (o or "").strip() for o in options):
        problems.append(f"options missing or empty: {options}")
    if row.get("ground_truth") not in options:
        problems.append(f"ground_truth {row.get('ground_truth')!r} not in options")
    stray = [a for a in row.get("proactive_actions") or [] if a not in options]
    if stray:
        problems.append(f"proactive_actions {stray} not in options")
    if not any(cls.config_name == row.get("config") for cls in load_scenarios().values()):
        problems.append(f"unknown config {row.get('config')!r}")
    images = row.get("images")
    if images is not None:
        if not images:
            problems.append("no image")
        for position, image in enumerate(images):
            try:
                check_image((image or {}).get("bytes") or b"", (image or {}).get("path") or "")
            except BadImage as err:
                problems.append(f"image {position} ({(image or {}).get('path')}): {err}")
    return problems


def unregistered_problem(config: str,
                         consequence: str = "its options and steps were not checked") -> str | None:
    """One line for a config whose scenario is not registered here: its options and steps can
    only be checked against the scenario's own declaration (one line, not one per row)."""
    if scenario_for_config(config) is not None:
        return None
    return (f"config {config!r} has no registered scenario, so {consequence}: make the "
            f"scenario's module visible with {PATH_VARIABLE}=FOLDER or an entry point of group "
            "proactivebench_builder.scenarios (README: Adding a scenario)")


def row_problems(row: dict, config: str, decode_frames: bool = True) -> list[str]:
    """Everything the record contract finds wrong with a row of `config` (core.contract)."""
    registered = scenario_for_config(config) is not None  # else one problem for the config
    return contract.problems(row, declared_behaviour(config) if registered else None,
                             decode_frames=decode_frames)


# ---- the whole folder -----------------------------------------------------------------------

class FolderValidator:
    """Walks a built folder once; `problems` lists everything found, `rows` counts rows read per
    (shard set, config); `ids_by_key` holds key -> id per config's pool (POOL, config) and for
    the train split (TRAIN, TRAIN_CONFIG)."""

    def __init__(self, root: str, decode_frames: bool = True, check_status: bool = True):
        self.root = root.rstrip("/")
        self.decode_frames = decode_frames
        self.check_status = check_status  # the build's own final check runs before its status
        self.problems: list[str] = []
        self.step = phases.Phase()  # the rows phase, once under way
        self.report: dict | None = None  # build.json, once read
        self.rows: dict[tuple[str, str], int] = defaultdict(int)
        self.ids_by_key: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        self.ids: dict[tuple[str, str], set[int]] = defaultdict(set)

    def run(self) -> list[str]:
        """The folder as the one check of build folders sees it (core.buildfolder: its status,
        checksums, card and layout), then every row against the record contract."""
        if self.check_status:  # a failed or unfinished build is refused as a whole
            self.problems += buildfolder.status_problems(self.root)
            if self.problems:
                return self.problems
            report = buildfolder.read_report(self.root)
            self.problems += (buildfolder.shard_problems(self.root, report)
                              + buildfolder.card_problems(self.root, report)
                              + buildfolder.stray_files(self.root, report,
                                                        buildfolder.shard_folders(self.root),
                                                        buildfolder.train_shards(self.root))
                              + buildfolder.upstream_problems(self.root, report))
        report, problems = buildfolder.check_build_report(self.root)
        self.report = report
        self.problems += problems
        folders = buildfolder.shard_folders(self.root)
        if not folders:
            self.problems.append("no Parquet shards found (expected DIR/<config>/test-*.parquet)")
        train = buildfolder.train_shards(self.root)
        self.problems += buildfolder.check_card(self.root, folders, train)
        for config in sorted({config for _, config in folders}):
            self.problems += [p for p in [unregistered_problem(config)] if p]
        with phases.phase(self.rows_phase(), total=reported_rows(report),
                          unit="rows") as self.step:
            for (shard_set, config), names in sorted(folders.items()):
                self.problems += buildfolder.check_shard_names(shard_set, config, names)
                for name in names:
                    self.check_shard(shard_set, config, name)
            if train:
                self.problems += buildfolder.check_shard_names(TRAIN, TRAIN_CONFIG, train)
                for name in train:
                    self.check_train_shard(name)
        if report is not None:
            self.problems += buildfolder.check_report_counts(report, self.rows, folders)
            self.problems += self.check_train_counts(report, train)
        return self.problems

    def rows_phase(self) -> str:
        frames = "" if self.decode_frames else " (frames not read)"
        return f"checking every row against the record contract{frames}"

    def confined(self, where: str) -> bool:
        """Whether the shard `where` is a regular file inside the folder (a link leading out or
        a FIFO is one problem, never read: `buildfolder.open_listed`)."""
        try:
            buildfolder.open_listed(self.root, where).close()
        except buildfolder.NotListable as err:
            self.problems.append(f"{where}: {err.strerror}; not read")
            return False
        except OSError:
            pass  # reading it says what is wrong
        return True

    def check_train_shard(self, name: str) -> None:
        where = f"{TRAIN_DIR}/{name}"
        url = fileio.join(self.root, TRAIN_DIR, name)
        if not self.confined(where):
            return
        try:
            schema = read_schema(url)
        except Exception as err:  # any unreadable file is one problem, not a crash
            self.problems.append(f"{where}: unreadable Parquet: {type(err).__name__}: {err}")
            return
        expected = train_arrow_schema()
        self.problems += schema_problems(schema, where, expected)
        if not has_columns(schema, expected):
            return
        columns = [c for c in expected.names if self.decode_frames or c != "images"]
        seen = self.ids_by_key[(TRAIN, TRAIN_CONFIG)]
        for row in iter_rows(url, columns):
            self.rows[(TRAIN, TRAIN_CONFIG)] += 1
            self.step.update()
            key = row.get("key")
            for problem in train_row_problems(row):
                self.problems.append(f"{where}: key {key!r}: {problem}")
            if (row.get("config"), key) in seen:
                self.problems.append(f"{where}: key {key!r} appears twice in the train split")
            seen[(row.get("config"), key)] = row.get("frame_id")
            if key in self.ids_by_key.get((POOL, row.get("config")), {}):
                self.problems.append(f"{where}: key {key!r} is also in the {row.get('config')} "
                                     "test pool (train and test must be disjoint)")

    def check_train_counts(self, report: dict, train: list[str]) -> list[str]:
        claimed = report.get("train") or {}
        actual = self.rows.get((TRAIN, TRAIN_CONFIG), 0)
        problems = []
        if claimed.get("rows", 0) != actual:
            problems.append(f"reports/build.json: {claimed.get('rows', 0)} train rows reported, "
                            f"{actual} in the shards")
        if claimed.get("shards", 0) != len(train):
            problems.append(f"reports/build.json: {claimed.get('shards', 0)} train shards "
                            f"reported, {len(train)} on disk")
        return problems

    def check_shard(self, shard_set: str, config: str, name: str) -> None:
        where = f"{folder_label(shard_set, config)}/{name}"
        url = fileio.join(self.root, *where.split("/"))
        if not self.confined(where):
            return
        try:
            schema = read_schema(url)
        except Exception as err:  # any unreadable file is one problem, not a crash
            self.problems.append(f"{where}: unreadable Parquet: {type(err).__name__}: {err}")
            return
        self.problems += schema_problems(schema, where)
        if not has_columns(schema, schema_of(schema)):
            return  # rows cannot be checked without every column, of its type
        columns = [c for c in arrow_schema().names if self.decode_frames or c != "frames"]
        before = self.rows[(shard_set, config)]
        for row in iter_rows(url, columns):
            self.rows[(shard_set, config)] += 1
            self.step.update()
            key = row.get("key")
            for problem in row_problems(row, config):
                self.problems.append(f"{where}: key {key!r}: {problem}")
            self.check_unique(config, where, row)
        if self.rows[(shard_set, config)] == before:
            self.problems.append(f"{where}: 0 rows (datasets.load_dataset cannot read a 0-row "
                                 "shard: an empty set has no shard)")

    def check_unique(self, config: str, where: str, row: dict) -> None:
        """A key and an id appear once in a config's pool, whichever of its sets holds them
        (the `test` and `filtered_out` sets are disjoint parts of one pool)."""
        seen, ids = self.ids_by_key[(POOL, config)], self.ids[(POOL, config)]
        key, row_id = row.get("key"), row.get("id")
        if key in seen:
            self.problems.append(f"{where}: key {key!r} appears twice in the {config} pool")
        elif row_id in ids:
            self.problems.append(f"{where}: id {row_id} appears twice in the {config} pool "
                                 f"(key {key!r})")
        seen[key] = row_id
        ids.add(row_id)


def reported_rows(report: dict | None) -> int | None:
    """The rows build.json says the shards hold (the pool's sets and train), None without a
    report of the shape a build writes."""
    if not isinstance(report, dict):
        return None
    rows = sum(count for entry in report.get("scenarios", {}).values()
               for shard_set, count in (entry.get("rows") or {}).items()
               if shard_set in POOL_SETS)
    return rows + (report.get("train") or {}).get("rows", 0)


@contextlib.contextmanager
def datasets_bars_hidden():
    """`datasets` draws a bar per data-file resolution: under the phase's own bar, noise."""
    from datasets.utils import logging as datasets_logging

    shown = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            datasets_logging.enable_progress_bar()


def load_problems(root: str) -> list[str]:
    """Every config and split the card declares, loaded the way users load them,
    `datasets.load_dataset(DIR, name=CONFIG, split=SPLIT)`, with a temporary cache (a folder's
    cache entry could otherwise answer for an earlier build) and in streaming mode, reading the
    first row: the card's configs and data files are resolved, and the Parquet reader reads,
    exactly as in a full load, without copying the whole build into an Arrow cache. (A 0-row
    shard once passed every other check and failed here: "BatchSize must be greater than 0".)"""
    configs, problems = buildfolder.card_configs(root)
    if configs is None:
        return problems
    splits = [(entry.get("config_name"), files.get("split")) for entry in configs
              for files in entry.get("data_files") or []]
    with phases.phase("loading every config split with datasets.load_dataset",
                      total=len(splits), unit="splits") as step, \
            tempfile.TemporaryDirectory(prefix="proactivebench-validate-") as cache, \
            datasets_bars_hidden():
        # lazy: importing `datasets` takes seconds, and the build's own final check never loads
        import datasets

        for name, split in splits:
            try:
                loaded = datasets.load_dataset(root, name=name, split=split, cache_dir=cache,
                                               streaming=True)
                next(iter(loaded.decode(False)), None)
            except Exception as err:  # noqa: BLE001 - any failure is what a user would meet
                text = (str(err).splitlines() or [""])[0]
                problems.append(f"datasets.load_dataset({root!r}, name={name!r}, "
                                f"split={split!r}) fails: {type(err).__name__}: {text}")
            step.update()
    return problems


def validate_folder(path: str, decode_frames: bool = True, check_status: bool = True) -> list[str]:
    """Human-readable problems of a built folder against the record contract ([] when none);
    with `check_status`, first its build status and every shard's checksum (core.buildfolder)."""
    return FolderValidator(path, decode_frames, check_status).run()


PROG = "run_pipeline.py validate"


def declare_flags(parser: CommandParser) -> None:
    parser.add_argument("dir", metavar="DIR", help="a built folder (local path or fsspec URL)")
    parser.add_argument("--skip_frames", action="store_true",
                        help="do not read or decode the frames (faster; checks metadata only)")
    phases.add_flags(parser)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def validate_command(args: argparse.Namespace) -> int:
    load_scenarios()  # an unusable scenario path is refused before any work
    validator = FolderValidator(args.dir, decode_frames=not args.skip_frames)
    with phases.showing(phases.mode_for(args.progress), PROG):
        problems = validator.run()
        if not problems:  # the folder is sound: now load it the way its users will
            problems = load_problems(args.dir.rstrip("/"))
    rows = sum(validator.rows.values())
    if not problems:
        print(f"OK: {args.dir}: {rows} rows in {len(validator.rows)} shard sets match the "
              "record contract")
        if isinstance(validator.report, dict) and buildfolder.export_left_out(args.dir,
                                                                              validator.report):
            print(f"note: the upstream export {BUILD_REPORT} lists is not in this folder (a "
                  "copy published without --with_upstream): not checked")
        return 0
    for problem in problems[:MAX_PRINTED]:
        print(problem)
    if len(problems) > MAX_PRINTED:
        print(f"... and {len(problems) - MAX_PRINTED} more")
    print(f"FAILED: {len(problems)} problems in {args.dir} ({rows} rows read)", file=sys.stderr)
    return 1


VALIDATE = subcommand("validate", HELP, __doc__, declare_flags, validate_command)
main = VALIDATE.main


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
