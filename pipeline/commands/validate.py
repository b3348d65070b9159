"""`run_pipeline.py validate DIR`: check a built folder against the record contract.

What is checked (each check names the file and the row's key in its message):

- the folder: `reports/build.json` is present and says every scenario is accounted for
  (raw items = samples + dead letters + exclusions); its per-split row and shard counts match the
  shards on disk; the dataset card's `configs:` block names exactly the config folders, and each
  of its `data_files` globs matches at least one shard; shard files in a folder are exactly
  `test-00000-of-0000N` .. `test-0000(N-1)-of-0000N`;
- each shard: columns, order and types equal `pipeline.records.arrow_schema()`, with the
  `datasets` feature metadata that makes `load_dataset` decode frames as images;
- each row: `answer` in `categories`, exactly 4 distinct categories, options present and
  non-empty (exactly one abstain option, every other option naming exactly one upstream action),
  `first_image`/`reference_image` in `frame_ids`, one decodable frame per frame id (decoded the
  way the build validates sources: fully, JPEG at 1/8 scale), and the step cap consistent with
  the frames, by the scenario's declared environment behaviour (see `step_rule`);
- across rows: `id` and `key` unique per config and split, and every test row is the unfiltered
  row of the same key with the same id.

Choices: the step-cap rules check that every frame the environment can reach within its step
cap is present, by the behaviour the config's scenario declares (`Behaviour.record_problems`
of its `Play`, in the scenario's folder). Options are matched against the scenario's own action
keywords. A config no registered scenario declares (e.g. a plug-in scenario validated without
PROACTIVEBENCH_SCENARIO_PATH) is one problem naming the way to make it visible; its options and
steps are not checked. A config listed by
the card without a test shard is reported: `load_dataset(..., split="test")` would fail on it.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from collections import defaultdict

import pyarrow.parquet as pq
import yaml

from proactivebench_builder.core import fileio
from proactivebench_builder.core.cli import DEBUG_HELP, CommandParser, run_command
from proactivebench_builder.core.images import BadImage, check_image
from proactivebench_builder.core.records import arrow_schema, train_arrow_schema
from proactivebench_builder.transforms import (
    PATH_VARIABLE, UnknownConfig, behaviour_for_config, load_scenarios, scenario_for_config)
from proactivebench_builder.core import vocabulary
from proactivebench_builder.core.play import Behaviour, Play

HELP = "check a built folder against the record contract (exit 1 listing every problem)"

TEST, UNFILTERED, TRAIN = "test", "unfiltered", "train"
TRAIN_DIR, TRAIN_CONFIG = "data", "default"  # DIR/data/train-*.parquet, the card's `default`
SHARD_RE = re.compile(r"^(test|train)-(\d{5})-of-(\d{5})\.parquet$")
BATCH_ROWS = 16  # rows decoded at a time: memory holds one small batch of frames
MAX_PRINTED = 200



# ---- the folder ---------------------------------------------------------------------------

def shard_folders(root: str) -> dict[tuple[str, str], list[str]]:
    """(split, config) -> sorted shard file names, for every folder holding Parquet shards:
    DIR/<config>/ is the test split, DIR/unfiltered/<config>/ the pool."""
    found = {}
    for split, base in ((TEST, root), (UNFILTERED, fileio.join(root, UNFILTERED))):
        for name in fileio.list_names(base):
            folder = fileio.join(base, name)
            if (split == TEST and name == TRAIN_DIR) or not fileio.is_dir(folder):
                continue
            shards = [n for n in fileio.list_names(folder) if n.endswith(".parquet")]
            if shards:
                found[(split, name)] = shards
    return found


def train_shards(root: str) -> list[str]:
    """Shard names of the train split (DIR/data/train-*.parquet), when the build wrote one."""
    return [n for n in fileio.list_names(fileio.join(root, TRAIN_DIR)) if n.endswith(".parquet")]


def read_json(url: str):
    return json.loads(fileio.read_bytes(url))


def check_build_report(root: str) -> tuple[dict | None, list[str]]:
    url = fileio.join(root, "reports", "build.json")
    if not fileio.exists(url):
        return None, ["reports/build.json: missing (every build writes it last; an absent "
                      "report means the build did not finish)"]
    try:
        report = read_json(url)
    except ValueError as err:
        return None, [f"reports/build.json: not valid JSON: {err}"]
    problems = []
    for name, entry in sorted(report.get("scenarios", {}).items()):
        if not entry.get("accounted", False):
            problems.append(f"reports/build.json: {name}: raw items ({entry.get('raw_items')}) "
                            "!= samples + dead letters + exclusions")
    train = report.get("train") or {}
    for name, entry in sorted(train.get("scenarios", {}).items()):
        balance = entry.get("examples", 0) + entry.get("dead_letters", 0) + sum(
            entry.get("excluded", {}).values())
        if not entry.get("accounted", False) or entry.get("raw_items") != balance:
            problems.append(f"reports/build.json: train split: {name}: raw items "
                            f"({entry.get('raw_items')}) != examples + dead letters + exclusions")
    if train.get("scenarios") and train.get("rows", 0) != train.get("examples"):
        problems.append(f"reports/build.json: train split: {train.get('rows', 0)} rows written "
                        f"for {train.get('examples')} examples")
    return report, problems


def check_report_counts(report: dict, rows: dict, folders: dict) -> list[str]:
    """build.json's per-split rows and shards against what is on disk."""
    problems = []
    for name, entry in sorted(report.get("scenarios", {}).items()):
        config = entry.get("config")
        if not config:
            continue
        for split in (TEST, UNFILTERED):
            claimed = entry.get("rows", {}).get(split)
            actual = rows.get((split, config), 0)
            if claimed is not None and claimed != actual:
                problems.append(f"reports/build.json: {name}: {claimed} {split} rows reported, "
                                f"{actual} in the shards")
            claimed_shards = entry.get("shards", {}).get(split)
            actual_shards = len(folders.get((split, config), []))
            if claimed_shards is not None and claimed_shards != actual_shards:
                problems.append(f"reports/build.json: {name}: {claimed_shards} {split} shards "
                                f"reported, {actual_shards} on disk")
    return problems


def card_configs(root: str) -> tuple[list[dict] | None, list[str]]:
    url = fileio.join(root, "README.md")
    if not fileio.exists(url):
        return None, ["README.md: missing dataset card"]
    text = fileio.read_bytes(url).decode("utf-8")
    if not text.startswith("---\n") or "\n---" not in text[4:]:
        return None, ["README.md: no YAML front matter (--- ... ---)"]
    try:
        meta = yaml.safe_load(text[4:text.index("\n---", 4)]) or {}
    except yaml.YAMLError as err:
        return None, [f"README.md: front matter is not YAML: {err}"]
    configs = meta.get("configs")
    if not isinstance(configs, list):
        return None, ["README.md: front matter has no `configs:` list"]
    return configs, []


def check_card(root: str, folders: dict, train: list[str] = ()) -> list[str]:
    """The card's configs name exactly the config folders (plus `default` for the train
    split), and each data_files glob matches at least one shard."""
    configs, problems = card_configs(root)
    if configs is None:
        return problems
    on_disk = {f"{c}/{n}" if s == TEST else f"{UNFILTERED}/{c}/{n}"
               for (s, c), names in folders.items() for n in names}
    on_disk |= {f"{TRAIN_DIR}/{n}" for n in train}
    named = set()
    for entry in configs:
        name = entry.get("config_name")
        named.add(name)
        for files in entry.get("data_files") or []:
            pattern = files.get("path", "")
            if not any(fnmatch.fnmatch(p, pattern) for p in on_disk):
                problems.append(f"README.md: config {name!r} split {files.get('split')!r}: "
                                f"no shard matches {pattern!r}")
    folder_configs = {c for _, c in folders} | ({TRAIN_CONFIG} if train else set())
    for config in sorted(folder_configs - named):
        problems.append(f"README.md: config folder {config!r} is not in the card's configs")
    for config in sorted(n for n in named - folder_configs if n):
        problems.append(f"README.md: card config {config!r} has no shard folder")
    return problems


def check_shard_names(split: str, config: str, names: list[str]) -> list[str]:
    where = _folder_label(split, config)
    prefix = TRAIN if split == TRAIN else TEST
    parsed = [m if m and m.group(1) == prefix else None for m in map(SHARD_RE.match, names)]
    problems = [f"{where}/{n}: not a shard name ({prefix}-IIIII-of-NNNNN.parquet)"
                for n, m in zip(names, parsed) if not m]
    numbers = sorted((int(m.group(2)), int(m.group(3))) for m in parsed if m)
    counts = {count for _, count in numbers}
    if len(counts) > 1:
        problems.append(f"{where}: shards disagree on the shard count: {sorted(counts)} "
                        "(a leftover of an earlier build?)")
    elif counts and [i for i, _ in numbers] != list(range(counts.pop())):
        problems.append(f"{where}: shard indexes {[i for i, _ in numbers]} are not 0..N-1")
    return problems


def _folder_label(split: str, config: str) -> str:
    return {TEST: config, TRAIN: TRAIN_DIR}.get(split, f"{UNFILTERED}/{config}")


# ---- one shard ----------------------------------------------------------------------------

def schema_problems(actual, where: str, expected=None) -> list[str]:
    expected = expected or arrow_schema()
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
    elif json.loads(hf) != json.loads(expected.metadata[b"huggingface"]):
        problems.append(f"{where}: `huggingface` feature metadata differs from the contract")
    return problems


def iter_rows(url: str, columns: list[str] | None = None):
    """Rows of one shard, a small batch at a time."""
    fs, path = fileio.filesystem(url)
    with fs.open(path, "rb") as handle:
        parquet = pq.ParquetFile(handle)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            yield from batch.to_pylist()


def read_schema(url: str):
    fs, path = fileio.filesystem(url)
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle).schema_arrow


# ---- one row ------------------------------------------------------------------------------

def category_problems(row: dict) -> list[str]:
    categories = row.get("categories") or []
    problems = []
    if len(categories) != 4:
        problems.append(f"{len(categories)} categories, expected 4")
    if len(set(categories)) != len(categories):
        problems.append(f"categories repeat: {categories}")
    if any(not (c or "").strip() for c in categories):
        problems.append("an empty category")
    if row.get("answer") not in categories:
        problems.append(f"answer {row.get('answer')!r} not in categories {categories}")
    return problems


def declared_behaviour(config: str) -> Behaviour:
    """The behaviour the config's scenario declares (the generic frame ladder when none)."""
    try:
        return behaviour_for_config(config)
    except UnknownConfig:
        return Play().rules(config)


def option_problems(row: dict, config: str = "") -> list[str]:
    options = row.get("options") or []
    if not options:
        return ["no options"]
    if any(not (o or "").strip() for o in options):
        return [f"an empty option in {options}"]
    problems = []
    abstain = [o for o in options if vocabulary.is_abstain(o)]
    if len(abstain) != 1:
        problems.append(f"{len(abstain)} abstain options, expected 1: {options}")
    behaviour = declared_behaviour(config)
    for option in options:
        if not vocabulary.is_abstain(option):
            try:
                behaviour.action_of(option)
            except ValueError as err:
                problems.append(str(err))
    if len(abstain) == len(options):
        problems.append("no proactive option")
    return problems


def frame_id_problems(row: dict) -> list[str]:
    ids = row.get("frame_ids") or []
    problems = []
    if not ids:
        problems.append("no frame_ids")
    if len(ids) != len(set(ids)):
        problems.append(f"frame ids repeat: {ids}")
    for slot in ("first_image", "reference_image"):
        if row.get(slot) not in ids:
            problems.append(f"{slot}={row.get(slot)} is not in frame_ids {ids}")
    return problems


def frame_problems(row: dict) -> list[str]:
    """One decodable frame per frame id (a full decode; JPEG at 1/8 scale, which still reads
    every segment, like the build's own source validation)."""
    frames, ids = row.get("frames"), row.get("frame_ids") or []
    if frames is None:
        return []  # the column was not read (frames not checked)
    problems = []
    if len(frames) != len(ids):
        problems.append(f"{len(frames)} frames for {len(ids)} frame ids")
    for position, frame in enumerate(frames):
        data = (frame or {}).get("bytes")
        try:
            check_image(data or b"", (frame or {}).get("path") or "")
        except BadImage as err:
            problems.append(f"frame {position} ({(frame or {}).get('path')}): {err}")
    return problems


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


def unregistered_problem(config: str) -> str | None:
    """One line for a config whose scenario is not registered here: its options and steps can
    only be checked against the scenario's own declaration (one line, not one per row)."""
    if scenario_for_config(config) is not None:
        return None
    return (f"config {config!r} has no registered scenario, so its options and steps were not "
            f"checked: make the scenario's module visible with {PATH_VARIABLE}=FOLDER or an "
            "entry point of group proactivebench_builder.scenarios (README: Adding a scenario)")


def row_problems(row: dict, config: str) -> list[str]:
    problems = []
    for field in ("key", "id", "prompt", "image_template"):
        if row.get(field) in (None, ""):
            problems.append(f"{field} is empty")
    problems += category_problems(row)
    registered = scenario_for_config(config) is not None  # else: one problem for the config
    problems += option_problems(row, config) if registered else []
    problems += frame_id_problems(row)
    problems += declared_behaviour(config).record_problems(row) if registered else []
    problems += frame_problems(row)
    return problems


# ---- the whole folder -----------------------------------------------------------------------

class FolderValidator:
    """Walks a built folder once; `problems` lists everything found, `rows` counts rows read."""

    def __init__(self, root: str, decode_frames: bool = True, check_status: bool = True):
        self.root = root.rstrip("/")
        self.decode_frames = decode_frames
        self.check_status = check_status  # the build's own final check runs before its status
        self.problems: list[str] = []
        self.rows: dict[tuple[str, str], int] = defaultdict(int)
        self.ids_by_key: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        self.ids: dict[tuple[str, str], set[int]] = defaultdict(set)

    def run(self) -> list[str]:
        if self.check_status:  # a failed or unfinished build is refused as a whole
            from proactivebench_builder.pipeline import integrity

            self.problems += integrity.status_problems(self.root)
            if self.problems:
                return self.problems
            report = integrity.read_report(self.root)
            self.problems += (integrity.shard_problems(self.root, report)
                              + integrity.card_problems(self.root, report))
        report, problems = check_build_report(self.root)
        self.problems += problems
        folders = shard_folders(self.root)
        if not folders:
            self.problems.append("no Parquet shards found (expected DIR/<config>/test-*.parquet)")
        train = train_shards(self.root)
        self.problems += check_card(self.root, folders, train)
        for config in sorted({config for _, config in folders}):
            self.problems += [p for p in [unregistered_problem(config)] if p]
        for (split, config), names in sorted(folders.items()):
            self.problems += check_shard_names(split, config, names)
            for name in names:
                self.check_shard(split, config, name)
        self.check_test_within_pool(folders)
        if train:
            self.problems += check_shard_names(TRAIN, TRAIN_CONFIG, train)
            for name in train:
                self.check_train_shard(name)
        if report is not None:
            self.problems += check_report_counts(report, self.rows, folders)
            self.problems += self.check_train_counts(report, train)
        return self.problems

    def check_train_shard(self, name: str) -> None:
        where = f"{TRAIN_DIR}/{name}"
        url = fileio.join(self.root, TRAIN_DIR, name)
        try:
            schema = read_schema(url)
        except Exception as err:  # any unreadable file is one problem, not a crash
            self.problems.append(f"{where}: unreadable Parquet: {type(err).__name__}: {err}")
            return
        expected = train_arrow_schema()
        self.problems += schema_problems(schema, where, expected)
        if any(n not in schema.names for n in expected.names):
            return
        columns = [c for c in expected.names if self.decode_frames or c != "images"]
        seen = self.ids_by_key[(TRAIN, TRAIN_CONFIG)]
        for row in iter_rows(url, columns):
            self.rows[(TRAIN, TRAIN_CONFIG)] += 1
            key = row.get("key")
            for problem in train_row_problems(row):
                self.problems.append(f"{where}: key {key!r}: {problem}")
            if (row.get("config"), key) in seen:
                self.problems.append(f"{where}: key {key!r} appears twice in the train split")
            seen[(row.get("config"), key)] = row.get("frame_id")
            if key in self.ids_by_key.get((UNFILTERED, row.get("config")), {}):
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

    def check_shard(self, split: str, config: str, name: str) -> None:
        where = f"{_folder_label(split, config)}/{name}"
        url = fileio.join(self.root, *where.split("/"))
        try:
            schema = read_schema(url)
        except Exception as err:  # any unreadable file is one problem, not a crash
            self.problems.append(f"{where}: unreadable Parquet: {type(err).__name__}: {err}")
            return
        self.problems += schema_problems(schema, where)
        expected = arrow_schema().names
        if any(n not in schema.names for n in expected):
            return  # rows cannot be checked without every column
        columns = [c for c in expected if self.decode_frames or c != "frames"]
        for row in iter_rows(url, columns):
            self.rows[(split, config)] += 1
            key = row.get("key")
            for problem in row_problems(row, config):
                self.problems.append(f"{where}: key {key!r}: {problem}")
            self.check_unique(split, config, where, row)

    def check_unique(self, split: str, config: str, where: str, row: dict) -> None:
        seen, ids = self.ids_by_key[(split, config)], self.ids[(split, config)]
        key, row_id = row.get("key"), row.get("id")
        if key in seen:
            self.problems.append(f"{where}: key {key!r} appears twice in {split} {config}")
        elif row_id in ids:
            self.problems.append(f"{where}: id {row_id} appears twice in {split} {config} "
                                 f"(key {key!r})")
        seen[key] = row_id
        ids.add(row_id)

    def check_test_within_pool(self, folders: dict) -> None:
        """The test split is a filtered pool: same keys, same ids (ids come before filtering)."""
        for (split, config) in sorted(folders):
            if split != TEST:
                continue
            pool = self.ids_by_key.get((UNFILTERED, config))
            if pool is None:
                self.problems.append(f"{config}: test split without an unfiltered pool")
                continue
            for key, row_id in sorted(self.ids_by_key[(TEST, config)].items(),
                                      key=lambda kv: str(kv[0])):
                if key not in pool:
                    self.problems.append(f"{config}: test key {key!r} is not in the pool")
                elif pool[key] != row_id:
                    self.problems.append(f"{config}: test key {key!r} has id {row_id}, the "
                                         f"pool's row has id {pool[key]}")


def validate_folder(path: str, decode_frames: bool = True, check_status: bool = True) -> list[str]:
    """Human-readable problems of a built folder against the record contract ([] when none);
    with `check_status`, first its build status and every shard's checksum (integrity)."""
    return FolderValidator(path, decode_frames, check_status).run()


PROG = "run_pipeline.py validate"


def main(argv: list[str]) -> int:
    return run_command(PROG, validate_command, argv)


def validate_command(argv: list[str]) -> int:
    parser = CommandParser(prog=PROG, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", metavar="DIR", help="a built folder (local path or fsspec URL)")
    parser.add_argument("--skip_frames", action="store_true",
                        help="do not read or decode the frames (faster; checks metadata only)")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    args = parser.parse_args(argv)
    validator = FolderValidator(args.dir, decode_frames=not args.skip_frames)
    problems = validator.run()
    rows = sum(validator.rows.values())
    if not problems:
        print(f"OK: {args.dir}: {rows} rows in {len(validator.rows)} config splits match the "
              "record contract")
        return 0
    for problem in problems[:MAX_PRINTED]:
        print(problem)
    if len(problems) > MAX_PRINTED:
        print(f"... and {len(problems) - MAX_PRINTED} more")
    print(f"FAILED: {len(problems)} problems in {args.dir} ({rows} rows read)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
