"""`run_pipeline.py fetch --sources_root DIR [--scenarios a,b] [--mirror URL] ...`

Downloads every source that has a public direct URL into DIR/<source_subdir>, in the layout the
build reads (each manifest's `downloads:` section says what, from where, with which published
size and digests; `fetch/plan.py` describes it), and prints the exact steps for what
cannot be fetched (Google Drive archives, YouTube videos). The work is done by
`fetch/download.py`: parallel (`--jobs`), resumable (an interrupted file continues with an HTTP
Range request, in this run's retries or the next run), verified (size and digests where known,
else what the server declares), idempotent (a verified file is skipped), with a progress bar
on a terminal. Archives the build reads unpacked are extracted safely (`fetch/extract.py`).

Each failed file is one line on stderr; the others go on. Exit status: 0 when every file is in
place and verified, 1 when any failed (run again: finished files are skipped and partial ones
resumed), 2 for a mistake refused before any work (a misspelled flag, an unknown scenario, a
sources root or source folder that is not a usable local folder, a disk too small for the
published sizes), 3 when another fetch is writing one of the source folders (one fetch per
folder: the build's kind of lock, `core/locks.py`, on
`<folder>/.proactivebench-fetch/fetch.lock`), 130 on Ctrl-C, 143 on SIGTERM, 129 on SIGHUP
(every connection is cut at once; what was received stays in the partial files, resumed by
the next run).

Afterwards, `python run_pipeline.py --sources_root DIR --verify_sources --record` locks what
was downloaded (relative path, size, sha256 of every file; see docs/sources.md).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
import threading
import urllib.parse
from collections import Counter

from tqdm import tqdm

from proactivebench_builder.core import phases
from proactivebench_builder.core.cli import (
    DEBUG_HELP, CommandParser, non_negative_int, positive_float, positive_int, unknown_name)
from proactivebench_builder.fetch.download import Downloader, mirrored
from proactivebench_builder.fetch.folder_state import STATE_DIR, fetch_record
from proactivebench_builder.core.errors import CommandError, OutputError, UsageError
from proactivebench_builder.core.locks import ExclusiveLock, Held
from proactivebench_builder.fetch import sizes as fetch_sizes
from proactivebench_builder.pipeline.commands import subcommand
from proactivebench_builder.pipeline.commands.output_folder import check_can_write
from proactivebench_builder.pipeline.commands.release_labels import needs_release_labels
from proactivebench_builder.fetch.plan import (
    RESERVED_NAMES, SOURCES_ROOT_PLACEHOLDER, PlanError, plan, write_manual_list)
from proactivebench_builder.core.phases import human_size
from proactivebench_builder.pipeline.progress import enabled
from proactivebench_builder.transforms import load_scenarios, manifest_of

HELP = "download the sources that have public URLs into --sources_root; print the manual steps"

PROG = "run_pipeline.py fetch"
DEFAULT_JOBS = 4
LOCK_FILE = "fetch.lock"  # in each source folder's .proactivebench-fetch/


class FetchLocked(CommandError):
    """Another fetch is writing one of the source folders (exit 3, as a locked build)."""
    exit_code = 3
    prefix = None


def declare_flags(p: CommandParser) -> None:
    p.add_argument("--sources_root", required=True, metavar="DIR",
                   help="local folder receiving one folder per source (created if missing); "
                        "the build's --sources_root afterwards")
    p.add_argument("--scenarios", default="all",
                   help="comma-separated scenarios to fetch (default: every scenario whose "
                        "manifest has a downloads: section)")
    p.add_argument("--source", action="append", default=[], metavar="SCENARIO=DIR",
                   help="fetch one scenario into this folder instead of "
                        "DIR/<source_subdir> (repeatable)")
    p.add_argument("--mirror", default=None, metavar="URL",
                   help="fetch https://HOST/PATH from URL/HOST/PATH instead (a mirror or cache "
                        "laid out by host; the tests' local server)")
    p.add_argument("--jobs", type=positive_int, default=DEFAULT_JOBS,
                   help="files downloaded at once (default: %(default)s)")
    p.add_argument("--retries", type=non_negative_int, default=3,
                   help="retries of a file after a dropped connection, a timeout or an HTTP "
                        "429/5xx, each resuming where the last stopped (default: %(default)s)")
    p.add_argument("--retry_wait", type=_non_negative_float, default=2.0, metavar="SECONDS",
                   help="backoff between retries (urllib3's Retry): the first at once, the "
                        "next after 2 x SECONDS, doubling; a server's Retry-After is honoured, "
                        "every wait at most 120 s (default: %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=60.0, metavar="SECONDS",
                   help="give up on a connection silent for this long, or slower than 1 kB/s "
                        "over this long (it is retried, resuming; default: %(default)s)")
    p.add_argument("--no_train", action="store_true",
                   help="skip the files only the train split reads (`train_only` in the manifests)")
    p.add_argument("--remove_archives", action="store_true",
                   help="delete each archive once extracted (fetch remembers the extraction, "
                        "so a rerun does not download it again)")
    p.add_argument("--rehash", action="store_true",
                   help="read every file in place again to verify it, instead of trusting "
                        "fetch's record of its size and modification time")
    p.add_argument("--dry_run", action="store_true",
                   help="list what would be fetched and print the manual steps; no network")
    phases.add_flags(p, "the progress bar")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


# ---- checks before any work ------------------------------------------------------------------


def load_plans(names=None) -> dict:
    """scenario -> SourcePlan for every registered scenario whose manifest has downloads
    (tests replace this to fetch from miniature copies with their own pins)."""
    plans = {}
    for name in sorted(names or load_scenarios()):
        manifest = manifest_of(name)
        if "downloads" not in manifest:
            continue
        try:
            plans[name] = plan(manifest)
        except PlanError as err:
            raise UsageError(str(err)) from None
    return plans


def chosen(plans: dict, scenarios: str) -> dict:
    if scenarios.strip() in ("", "all"):
        return plans
    names = [s.strip() for s in scenarios.split(",") if s.strip()]
    for name in names:
        if name not in plans:
            if name in load_scenarios():
                raise UsageError(f"--scenarios: {name}'s manifest has no downloads: section "
                                 f"(nothing to fetch)")
            raise UsageError("--scenarios: " + unknown_name("scenario", name, plans))
    return {n: plans[n] for n in names}


def local_folder(flag: str, value: str) -> str:
    """An absolute local folder that exists or can be created, refused in one line otherwise."""
    if "://" in value:
        raise UsageError(f"{flag} {value}: fetch writes to a local folder (copy it to a bucket "
                         f"afterwards, e.g. gsutil -m rsync -r)")
    path = os.path.abspath(os.path.expanduser(value))
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {value} is a file, not a folder")
    check_can_write(flag, value, path)
    return path


def folders_of(args, plans: dict) -> tuple[str, dict[str, str]]:
    root = local_folder("--sources_root", args.sources_root)
    overrides = {}
    for item in args.source:
        name, sep, value = item.partition("=")
        if not sep or not value:
            raise UsageError(f"--source expects SCENARIO=DIR, got {item!r}")
        if name not in plans:
            raise UsageError(f"--source {item!r}: " + unknown_name("scenario", name, plans))
        overrides[name] = local_folder(f"--source {name}=", value)
    return root, {n: overrides.get(n) or os.path.join(root, p.subdir) for n, p in plans.items()}


def check_mirror(mirror: str | None) -> None:
    if mirror is None:
        return
    try:
        parts = urllib.parse.urlsplit(mirror)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
        raise UsageError(f"--mirror {mirror}: expected an http(s) URL such as "
                         f"http://127.0.0.1:8000/mirror")


def expected_size(spec, approx: dict) -> tuple[int | None, bool]:
    """(bytes, whether approximate) of a file to fetch: its published size, else the
    manifest's approximate one (ImageNet-C's publisher gives none in bytes), else (None, False)."""
    if spec.size:
        return spec.size, False
    found = approx.get(spec.path)
    return found, found is not None


def check_space(jobs: list, root: str, approx: dict) -> None:
    """Refuse when the files whose sizes are known (published, or approximate) do not fit
    (archives count twice: they are kept and extracted)."""
    needed = 0
    for folder, spec in jobs:
        size, _ = expected_size(spec, approx.get(folder, {}))
        if size and not os.path.exists(os.path.join(folder, *spec.path.split("/"))):
            needed += size * (2 if spec.extract else 1)
    if not needed:
        return
    existing = root
    while not os.path.exists(existing):  # the root may not exist yet
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    if needed > free:
        raise UsageError(f"--sources_root {root}: the files to fetch need at least "
                         f"{human_size(needed)} (published or approximate sizes, archives "
                         f"counted with their contents), {human_size(free)} is free")


# ---- the command -----------------------------------------------------------------------------


def fetch_command(args: argparse.Namespace) -> int:
    check_mirror(args.mirror)
    plans = chosen(load_plans(), args.scenarios)
    root, folders = folders_of(args, plans)
    chosen_files = [(name, planned) for name, source_plan in plans.items()
                    for planned in source_plan.files
                    if not (args.no_train and planned.train_only)]
    if args.dry_run:
        return dry_run(plans, folders, chosen_files, root, args.mirror)
    jobs, owners, approx = [], [], {}
    for name, planned in chosen_files:
        jobs.append((folders[name], planned.spec))
        owners.append(name)
        if planned.approx_size:
            approx.setdefault(folders[name], {})[planned.spec.path] = planned.approx_size
    check_space(jobs, root, approx)
    written = sorted({folder for folder, _ in jobs})  # not for manual-only sources: the build
    for folder in written:                             # names a missing folder
        make_source_folder(folder)
    with FolderLocks(written):
        if jobs:
            print(f"fetch: {len(jobs)} files of {', '.join(sorted(set(owners)))} into {root}"
                  + (f" (through {args.mirror})" if args.mirror else ""), flush=True)
        outcomes = download(jobs, owners, args)
        lists = write_lists(plans, folders)
    failed = [o for o in outcomes if o.status == "failed"]
    unreachable = unreachable_summary(failed)
    if unreachable:
        print(f"{PROG}: FAILED {unreachable}", file=sys.stderr)
    manual = print_manual_steps(plans, folders, root, lists)
    fetched = sum(o.status == "fetched" for o in outcomes)
    print(f"fetch: {fetched} fetched, {len(outcomes) - fetched - len(failed)} already in place "
          f"and verified, {len(failed)} failed (of {len(outcomes)} files"
          + (f"; {manual} source(s) need the manual steps above)" if manual else ")"))
    if failed:
        print(f"fetch: run the same command again to retry the {len(failed)} failed file(s); "
              f"finished files are skipped, partial ones resumed", file=sys.stderr)
        return 1
    when = " (once the manual steps above are done)" if manual else ""
    print(f"\nnext{when}: {next_steps(plans, root)}")
    return 0


# A download that could not reach its host: "<path>: cannot connect (<reason>; <url>) ...".
CANNOT_CONNECT = re.compile(r"cannot connect \((?P<reason>.*); (?P<url>\S+)\)")


def unreachable_host(outcome) -> str | None:
    """The host a failed download could not connect to, None for any other outcome. Such
    failures are said once for all (`unreachable_summary`): offline, every file fails alike."""
    found = CANNOT_CONNECT.search(outcome.message) if outcome.status == "failed" else None
    return (urllib.parse.urlsplit(found["url"]).hostname or found["url"]) if found else None


def unreachable_summary(failed: list) -> str | None:
    """'346 files: cannot connect to storage.googleapis.com (345), github.com (1) ...', one
    line, or None when every failure reached its host."""
    hosts = Counter(h for h in map(unreachable_host, failed) if h)
    if not hosts:
        return None
    first = next(CANNOT_CONNECT.search(o.message)["reason"] for o in failed
                 if unreachable_host(o))
    return (f"{sum(hosts.values())} files: cannot connect to "
            + ", ".join(f"{h} ({n})" for h, n in hosts.most_common())
            + f" (no network, or the host is down? e.g. {first})")


def make_source_folder(folder: str) -> None:
    """Create a source folder, refused in one line (before any download) when something that
    is not a folder is in its place."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        what = "a link to nothing" if os.path.islink(folder) else "a file"
        raise UsageError(f"{folder} is {what}, not a folder (move it away, or fetch this "
                         f"source elsewhere with --source SCENARIO=DIR)")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{folder} cannot be made: {err.strerror or err}") from None
    bookkeeping = os.path.join(folder, STATE_DIR)
    if os.path.lexists(bookkeeping) and (os.path.islink(bookkeeping)
                                         or not os.path.isdir(bookkeeping)):
        raise UsageError(f"{bookkeeping} is not fetch's folder (a link or a file); remove it")


class FolderLocks:
    """`with FolderLocks(folders):` the only fetch writing these source folders; raises
    FetchLocked naming the holder otherwise. Each is the build's kind of lock (`core/locks.py`:
    an flock the kernel releases however its holder ends, so it is never stale) on
    `<folder>/.proactivebench-fetch/fetch.lock`, which names its holder for the message."""

    def __init__(self, folders):
        self.folders = list(folders)
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        with contextlib.ExitStack() as stack:  # a refused folder releases those taken
            for folder in self.folders:
                path = os.path.join(folder, STATE_DIR, LOCK_FILE)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                try:
                    stack.enter_context(ExclusiveLock(path, "fetch's lock file",
                                                      keep_file=True))
                except Held as held:
                    raise FetchLocked(f"another fetch is writing {folder}: {held}; run this "
                                      f"one when it ends") from None
                except OutputError as err:  # a link, a FIFO, a folder in its place
                    raise UsageError(str(err)) from None
            self.stack = stack.pop_all()
        return self

    def __exit__(self, *exc):
        self.stack.close()
        return False


def download(jobs: list, owners: list, args) -> list:
    owner_of = {(folder, spec.path): name for (folder, spec), name in zip(jobs, owners)}
    bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, desc="fetch",
               file=sys.stderr, disable=not enabled(args.progress, sys.stderr), leave=False,
               dynamic_ncols=True)
    lock = threading.Lock()

    def received(n: int) -> None:  # called from every download thread
        with lock:
            bar.update(n)

    def grow(n: int) -> None:
        with lock:
            bar.total = max(0, (bar.total or 0) + n)
            bar.refresh()

    def done(outcome) -> None:
        if outcome.status == "interrupted":  # Ctrl-C, SIGTERM: the command says it once
            return
        name = owner_of[(outcome.folder, outcome.path)]
        with lock:
            if outcome.status == "failed" and not unreachable_host(outcome):
                message = outcome.message.removeprefix(f"{outcome.path}: ")
                tqdm.write(f"{PROG}: FAILED {name}/{outcome.path}: {message}", file=sys.stderr)
            elif outcome.status == "fetched":
                resumed = (f", resumed at byte {outcome.resumed_from}"
                           if outcome.resumed_from else "")
                extracted = ", extracted" if outcome.extracted else ""
                again = f"; the copy in place had {outcome.message}" if outcome.message else ""
                tqdm.write(f"fetched {name}/{outcome.path} ({human_size(outcome.bytes)} received"
                           f"{resumed}{extracted}{again})", file=sys.stdout)
            elif outcome.extracted:
                tqdm.write(f"extracted {name}/{outcome.path}", file=sys.stdout)

    def step(folder: str, path: str, what: str) -> None:  # said unless --no_progress
        if args.progress is not False:
            with lock:
                tqdm.write(f"fetch: {owner_of[(folder, path)]}/{path}: {what}", file=sys.stderr)

    downloader = Downloader(mirror=args.mirror, retries=args.retries,
                            retry_wait=args.retry_wait, timeout=args.timeout,
                            rehash=args.rehash, remove_archives=args.remove_archives,
                            reserved=RESERVED_NAMES, on_bytes=received, on_total=grow,
                            on_done=done, on_phase=step)
    try:
        return downloader.fetch_all(jobs, workers=args.jobs)
    finally:
        bar.close()


def write_lists(plans: dict, folders: dict) -> dict:
    """scenario -> (path, lines) of each manual list written (e.g. ChangeIt's videos)."""
    written = {}
    for name, source_plan in plans.items():
        if source_plan.manual_list and os.path.isdir(folders[name]):
            result = write_manual_list(source_plan, folders[name])
            if result:
                written[name] = result
    return written


def manual_text(source_plan, folder: str, root: str) -> str:
    """The plan's manual steps with the real folders: <sources_root>/<subdir> becomes the
    scenario's folder (it may be a --source override), any other <sources_root> the root."""
    text = source_plan.manual_steps()
    text = text.replace(f"{SOURCES_ROOT_PLACEHOLDER}/{source_plan.subdir}", folder)
    return text.replace(SOURCES_ROOT_PLACEHOLDER, root)


def print_manual_steps(plans: dict, folders: dict, root: str, lists: dict) -> int:
    shown = 0
    for name, source_plan in plans.items():
        if not source_plan.manual:
            continue
        shown += 1
        print(f"\n== {name}: manual steps ({folders[name]}) ==")
        print(manual_text(source_plan, folders[name], root))
        if name in lists:
            path, count = lists[name]
            print(f"({path}: {count} lines, written now)")
        elif source_plan.manual_list:
            print(f"({source_plan.manual_list['write']} is written once the files it is made "
                  f"from are fetched)")
    return shown


def next_steps(plans: dict, root: str) -> str:
    """What comes after fetching, as README's route 2 says (one line): the labels only the
    release holds, for the scenarios that need them, then one build that verifies and locks
    every fetched source (all of them, so none is left unrecorded) into its own --output."""
    registered = load_scenarios()
    needing = [n for n in plans if n in registered and needs_release_labels(registered[n])]
    labels = (f"python run_pipeline.py release_labels --release RELEASE/test --sources_root "
              f"{root} (the labels of {', '.join(needing)} exist only in the release's records; "
              "README, Regenerating the benchmark), then " if needing else "")
    return (f"{labels}python run_pipeline.py --sources_root {root} --scenarios "
            f"{','.join(plans)} --verify_sources --record --output OUTPUT (locks the size and "
            "sha256 of every file, then builds; later --verify_sources builds check them)")


def dry_run(plans, folders, chosen_files, root, mirror) -> int:
    """Every file with where it stands and every size known offline (fetch/sizes.py),
    the total of the known sizes and why the others are unknown, then the manual steps."""
    records = {}  # source folder -> fetch's record in it
    listed = []
    for name, planned in chosen_files:
        folder, spec = folders[name], planned.spec
        if folder not in records:
            records[folder] = fetch_record(folder)
        known = fetch_sizes.known_file(planned, folder, records[folder])
        listed.append((name, planned, known))
        extract = ", extract" if spec.extract else ""
        print(f"{name}/{spec.path}: {known.state}, {fetch_sizes.size_text(known)}{extract} "
              f"<- {mirrored(spec.url, mirror)}")
    print("\n".join(fetch_sizes.summary(listed)))
    print_manual_steps(plans, folders, root, {})
    return 0


FETCH = subcommand("fetch", HELP, __doc__, declare_flags, fetch_command)
main, parser = FETCH.main, FETCH.parser
