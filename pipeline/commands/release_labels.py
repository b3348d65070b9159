"""`run_pipeline.py release_labels --release DIR/test --sources_root ROOT [--scenarios a,b]`

Some labels of the benchmark are in no raw source: MVP-N's product names (its download names
classes by folder only) and VSOD's answers (speaker names, people counts, event types, which the
authors annotated by hand). They exist only in the upstream release's records. This command
reads the release's `<config>_preprocessed.jsonl` files (the `test/` folder of the Hugging Face
dataset `tdemin16/ProactiveBench`; only these small JSONL files are read, not the images) and
writes, into each scenario's source folder, the files its manifest reads:

- `mvpn/proactivebench_mvpn_class_names.yaml`: class folder -> product name;
- `vsod/proactivebench_vsod_labels.csv` (segment, question type, answer, frame pins) and
  `vsod/proactivebench_vsod_categories.yaml` (the answer vocabulary, also the wrong answers).

How a scenario reads its labels off the records is its own knowledge (`labels_from_release` of
its class, in its folder); this command only finds the files and writes what it returns. A build
that lacks them holds placeholders and says so (build.json, the card; `publish --repo_id`
refuses it).

Exit status: 0 when every file was written (or already held the same bytes), 1 when a scenario's
records gave no label at all, 2 for a mistake refused before anything is written (a missing
JSONL file, a folder that does not exist, a file that would be overwritten without
--overwrite).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys

from proactivebench_builder.core import fileio
from proactivebench_builder.core.cli import DEBUG_HELP, CommandParser, unknown_name
from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.core.layout import upstream_jsonl_name
from proactivebench_builder.pipeline.commands import subcommand
from proactivebench_builder.transforms import load_scenarios, manifest_of
from proactivebench_builder.transforms.base import Scenario

HELP = ("write the labels only the upstream release holds (product names, answers) into the "
        "source folders")
PROG = "run_pipeline.py release_labels"
MAX_JSONL_BYTES = 256 << 20  # the released files are 41 kB to 2.5 MB
MAX_PROBLEMS_SHOWN = 5


def declare_flags(p: CommandParser) -> None:
    p.add_argument("--release", required=True, metavar="DIR",
                   help="the release's test/ folder (holding <config>_preprocessed.jsonl), "
                        "local or any fsspec URL")
    p.add_argument("--sources_root", default=None, metavar="ROOT",
                   help="the build's --sources_root: each scenario's files go into "
                        "ROOT/<source_subdir>/ (created when missing)")
    p.add_argument("--source", action="append", default=[], metavar="SCENARIO=DIR",
                   help="write one scenario's files into this folder instead (repeatable)")
    p.add_argument("--scenarios", default="all",
                   help="comma-separated scenarios (default: every scenario that needs labels "
                        "from the release)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files that exist with other content (e.g. labels written by "
                        "hand)")
    p.add_argument("--dry_run", action="store_true",
                   help="derive and report, write nothing")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def needs_release_labels(cls) -> bool:
    return cls.labels_from_release.__func__ is not Scenario.labels_from_release.__func__


def placeholder_answers(cls, records) -> str | None:
    """A note when the records answer with the builder's own placeholders (e.g. "Product
    0041."): they are a builder's export, not the release, and the labels written from them
    are placeholders again (the build says so too, later)."""
    found = [r.get("answer") for _, r in records
             if isinstance(r, dict) and cls.is_placeholder_answer(r.get("answer"))]
    if not found:
        return None
    return (f"{len(found):,} of {len(records):,} records answer with a placeholder (e.g. "
            f"{found[0]!r}): these are not the release's records, and what is written from "
            "them is no label of the release")


def chosen_scenarios(spec: str) -> dict:
    registered = load_scenarios()
    candidates = {n: c for n, c in registered.items() if needs_release_labels(c)}
    if spec == "all":
        return candidates
    chosen = {}
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        if name not in registered:
            raise UsageError("--scenarios: " + unknown_name("scenario", name, registered))
        if name not in candidates:
            raise UsageError(f"--scenarios: {name} needs no labels from the release (those "
                             f"that do: {', '.join(sorted(candidates))})")
        chosen[name] = candidates[name]
    if not chosen:
        raise UsageError(f"--scenarios {spec!r} names no scenario")
    return chosen


def target_folders(args, scenarios: dict) -> dict[str, str]:
    overrides = {}
    for item in args.source:
        name, sep, url = item.partition("=")
        if not sep or name not in scenarios:
            raise UsageError(f"--source expects SCENARIO=DIR for one of "
                             f"{', '.join(sorted(scenarios))}, got {item!r}")
        overrides[name] = url
    missing = [n for n in scenarios if n not in overrides]
    if missing and not args.sources_root:
        raise UsageError("give --sources_root (the build's) or --source SCENARIO=DIR for "
                         + ", ".join(missing))
    if args.sources_root and not fileio.is_dir(args.sources_root):
        raise UsageError(f"--sources_root {args.sources_root}: no such folder")
    return {n: overrides.get(n) or fileio.join(args.sources_root, manifest_of(n)["source_subdir"])
            for n in scenarios}


def read_records(url: str) -> tuple[list[tuple[int, dict]], int, str]:
    """((line, record) of every JSON line, lines that are not JSON, provenance text). The file
    is untrusted: its size is bounded before it is read, and it must be a regular file."""
    fs, path = fileio.filesystem(url)
    info = fs.info(path)
    if info.get("type") != "file":
        raise UsageError(f"{url}: not a regular file")
    if (info.get("size") or 0) > MAX_JSONL_BYTES:
        raise UsageError(f"{url}: {info['size']:,} bytes, far more than a released JSONL file")
    data = fileio.read_bytes(url)
    records, bad = [], 0
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except (ValueError, RecursionError):  # not JSON, or nested deeper than json reads
            bad += 1
    name = url.rstrip("/").rsplit("/", 1)[-1]
    return records, bad, f"{name}, sha256 {hashlib.sha256(data).hexdigest()[:16]}"


def release_labels_command(args: argparse.Namespace) -> int:
    scenarios = chosen_scenarios(args.scenarios)
    release = args.release.rstrip("/")
    if not fileio.is_dir(release):
        raise UsageError(f"--release {release}: no such folder (the release's test/ folder: "
                         "README, Regenerating the benchmark)")
    jsonl = {n: fileio.join(release, upstream_jsonl_name(c.config_name))
             for n, c in scenarios.items()}
    absent = [url for url in jsonl.values() if not fileio.exists(url)]
    if absent:
        hint = ""
        if fileio.exists(fileio.join(release, "test", upstream_jsonl_name(
                next(iter(scenarios.values())).config_name))):
            hint = f"; the release keeps them in its test/ folder: --release {release}/test"
        raise UsageError(f"--release {release}: no {', '.join(u.rsplit('/', 1)[-1] for u in absent)}"
                         f"{hint}")
    folders = target_folders(args, scenarios)

    derived = {}
    for name, cls in sorted(scenarios.items()):
        records, bad, source = read_records(jsonl[name])
        labels = cls.labels_from_release(records, source)
        if bad:
            labels.problems.insert(0, f"{bad} lines are not JSON")
        placeholders = placeholder_answers(cls, records)
        if placeholders:
            labels.problems.insert(0, placeholders)
        derived[name] = labels
    # refuse before writing anything: a file written by hand is not replaced unasked
    clashes = []
    for name, labels in derived.items():
        for relative, data in labels.files.items():
            url = fileio.join(folders[name], relative)
            if fileio.exists(url) and fileio.read_bytes(url) != data and not args.overwrite:
                clashes.append(url)
    if clashes and not args.dry_run:
        raise UsageError(f"{', '.join(clashes)} already {'exist' if len(clashes) > 1 else 'exists'}"
                         " with other content; pass --overwrite to replace "
                         f"{'them' if len(clashes) > 1 else 'it'} (nothing was written)")

    empty = []
    for name, labels in derived.items():
        print(f"{name}: " + "; ".join(labels.summary))
        for problem in labels.problems[:MAX_PROBLEMS_SHOWN]:
            print(f"  note: {problem}")
        if len(labels.problems) > MAX_PROBLEMS_SHOWN:
            print(f"  ... and {len(labels.problems) - MAX_PROBLEMS_SHOWN} more")
        if not labels.labels:
            empty.append(name)
            continue  # nothing to write: files without a label would only hide the problem
        for relative, data in sorted(labels.files.items()):
            url = fileio.join(folders[name], relative)
            if args.dry_run:
                print(f"  would write {url} ({len(data):,} bytes)")
            elif fileio.exists(url) and fileio.read_bytes(url) == data:
                print(f"  unchanged {url}")
            else:
                fileio.write_bytes_atomic(url, data)
                print(f"  wrote {url} ({len(data):,} bytes)")
    if empty:
        print(f"{PROG}: no labels in the records of {', '.join(empty)}: is --release the "
              "release's test/ folder?", file=sys.stderr)
        return 1
    if args.dry_run:
        print("dry run: nothing was written")
    return 0


RELEASE_LABELS = subcommand("release_labels", HELP, __doc__, declare_flags,
                            release_labels_command)
main, parser = RELEASE_LABELS.main, RELEASE_LABELS.parser
