"""Publishing a built folder, separately from the build: to a Hugging Face Hub dataset repo, or to
any fsspec URL (a local folder, gs://, s3://) in the same layout.

What is published (the "plan"):

- `README.md`, the dataset card the build rendered (its `configs:` block is how `load_dataset` and
  the Hub viewer find every config and split);
- every Parquet shard that a `configs:` entry of the card names (`<config>/test-*` and
  `<config>/filtered_out-*`, the pool written once, and `data/train-*` under a `default` config
  when a train split was added), so the published files are exactly the ones a reader can
  reach, each once;
- `reports/*` (build report, dead letters, filter report);
- with `--with_upstream`, the upstream export laid out as the upstream release's `test/` folder:
  `test/<config>_preprocessed.jsonl` as they are, and every image folder of `upstream/` packed as
  a deterministic zip `test/<folder>.zip` (stored, sorted members, fixed timestamps and
  permissions), so unzipping inside `test/` recreates the paths the templates name.

Choices made where upstream's release leaves it open (it does not publish its archive names):
the upstream zip names are not known, so there is one archive per top-level image folder, named
after it; a folder larger than `archive_max_bytes` (default 5 GB, the Hub's older per-file
recommendation) is split into `<folder>-00001-of-0000N.zip` parts in sorted member order. Images
are already compressed, so members are stored, not deflated (faster and byte-stable).

Before anything is planned the folder is checked (`validate_for_publishing`): the one check of
build folders (`core.buildfolder`: a finished "ok" build, every shard as `reports/build.json`
records it, the card naming them, no stray shard) and the record contract of every row (the
`validate` command's, which the publish command passes in). Token and repository are checked
next, before any archive is packed.

How it is published:

- Stale files, deleted: a file the plan does not contain is deleted only when this publish owns
  it: a file the card's `data_files` globs match (a rebuild with fewer shards leaves one, and
  `load_dataset` would read it as the build's, whoever wrote it), a file an earlier publish of
  this layout wrote, and a temporary file an interrupted publish left (named as
  `fileio.temporary_name` names them). Everything else in the target (the user's own files,
  `.gitattributes`) is left alone. A folder target records what each publish wrote in
  `.proactivebench-publish.json` (written last); on the Hub, `reports/*` and, with
  `--with_upstream`, the upstream prefix are taken as the earlier publish's.
- Hub: a file whose bytes are already on the remote (same LFS sha256, or same git blob id for
  small files) is skipped, so re-running after an interruption uploads only what is missing.
  When the upload fits `max_commit_bytes` and `max_commit_files`, everything is one atomic
  `create_commit` with `parent_commit` set (so a concurrent push makes it fail instead of
  mixing). Otherwise the data files go through
  `upload_folder` (resumable, several commits) from a staging folder holding only the missing
  files, and a final commit writes the card and deletes stale files, so the card names the new
  shards only once they are all present. `HfFileSystem` (one commit per file) is never used.
- fsspec URL: every missing file is first written under a temporary name (`.tmp-<unique>-<name>`,
  which no `configs:` glob matches), then all are renamed (data first, the card and the record
  of what was published last) and stale files are removed. A failure or an interruption
  (Ctrl-C; SIGTERM and SIGHUP end the same way, `core.cli`) removes every temporary file it
  wrote; leftovers of a killed run are removed as stale by the next one.

Where it writes: only inside the target. `--upstream_prefix` is a relative path without `..`;
the target and the staging folder may not be the build folder or inside it (publishing would
change what it publishes). Archives and staged uploads go to a folder of its own, made inside
`--staging_dir` (or the system's temporary folder) and removed at the end, whatever happened.
A full disk, in the target or the staging folder, ends in one line naming the path (exit 1),
with nothing partial left.

What is read: the build folder's files as `core.buildfolder` checks them (regular files inside
the folder; a link or a FIFO is refused), and with `--with_upstream` exactly the exported files
build.json lists, after checking their digests.

The Hub client is behind `HubClient`, whose methods are thin wrappers around single `HfApi`
calls, so tests replace only those calls (and run with `HF_HUB_OFFLINE=1`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import json
import os
import posixpath
import shutil
import stat
import tempfile
import zipfile

from proactivebench_builder.core import buildfolder, fileio, phases
from proactivebench_builder.core.cli import one_line
from proactivebench_builder.core.locks import ExclusiveLock, Held, describe
from proactivebench_builder.core.layout import (
    CARD, REPORTS_DIR, TEMPORARY_NAME, UPSTREAM_DIR, UPSTREAM_SUFFIX)

DEFAULT_UPSTREAM_PREFIX = "test"  # the upstream release ships its export under `test/`
TEMP_PREFIX = ".tmp-"
MANIFEST = ".proactivebench-publish.json"  # in a folder target: what the last publish wrote
TARGET_LOCK = ".proactivebench-publish.lock"  # in a local folder target, while a publish writes
MANIFEST_MAX_BYTES = 64 * 2 ** 20
CHUNK = 8 * 1024 * 1024
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest timestamp a zip can hold
DEFAULT_MAX_COMMIT_BYTES = 5 * 10 ** 9
DEFAULT_MAX_COMMIT_FILES = 100  # the Hub's recommendation for one commit
DEFAULT_ARCHIVE_MAX_BYTES = 5 * 10 ** 9
RESUME_HINT = "Re-run the same command to resume: files already on the target are skipped."


class PublishError(RuntimeError):
    """Publishing cannot go ahead; the message says why and what to do."""
    exit_code = 2


class PublishOutputError(PublishError):
    """A file could not be written (a full disk, permissions): `<strerror> (errno N): <path>`."""
    exit_code = 1  # as the build's own OutputError

    @classmethod
    def of(cls, err: OSError) -> "PublishOutputError":
        text = f"{err.strerror or os.strerror(err.errno)} (errno {err.errno})"
        return cls(text + (f": {err.filename}" if err.filename else "") + f". {RESUME_HINT}")


def naming(err: OSError, path: str) -> OSError:
    """`err` with `path` as its file name when it names none (shutil's copies name nothing)."""
    if err.errno and not err.filename:
        return OSError(err.errno, err.strerror, path)
    return err


class TargetHeld(PublishError):
    """Another publish is writing into the same folder target."""
    exit_code = 3  # as a build folder another build holds


class StoreFailed(PublishError):
    """A remote store (s3://, gs://, ...) failed mid-way: its connection cut, its endpoint gone.
    What was renamed into place is complete; what was not is under temporary names, removed
    when the store answers (else named), and a rerun resumes."""
    exit_code = 1


def store_failure(target: str, err: BaseException, left: list[str]) -> StoreFailed:
    """One line for a store's failure, whatever its client put in the message (aiohttp's and
    botocore's texts span lines)."""
    detail = " ".join(str(err).split())[:300]
    leftover = (f"; {len(left):,} temporary object(s) could not be removed now ({left[0]}"
                f"{', ...' if len(left) > 1 else ''}), the next publish removes them" if left
                else "; nothing it wrote is taken for complete")
    return StoreFailed(f"{target}: the store failed: {type(err).__name__}: {detail}{leftover}. "
                       f"{RESUME_HINT}")


class HubUnreachable(PublishError):
    """The Hub could not be contacted (no network, offline mode): a dry run plans without it."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def is_network_error(err: BaseException) -> bool:
    """Connection refused or reset, DNS, timeouts: OSErrors, and the transport errors of the
    HTTP client huggingface_hub uses (httpx, or httpx2 in its newer releases), matched by name so
    that either client works."""
    if isinstance(err, OSError):
        return True
    return any(cls.__name__ == "TransportError" and cls.__module__.startswith("httpx")
               for cls in type(err).__mro__)


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


# ----------------------------------------------------------------------------- the files


@dataclasses.dataclass(frozen=True)
class PlannedFile:
    """One file of the publication: where it goes, where its bytes are, and its digests."""

    path: str  # relative path in the target (repo path)
    source: str  # URL or local path of the bytes (a built file or a staged archive)
    size: int
    sha256: str
    git_sha1: str  # git blob id, what the Hub reports for small (non-LFS) files
    kind: str  # card | shard | report | upstream-jsonl | upstream-file | upstream-archive


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None = None
    git_sha1: str | None = None


def file_digests(url: str) -> tuple[int, str, str]:
    """(size, sha256, git blob sha1) in one streaming pass (a local FIFO or folder is refused:
    `fileio.open_source`)."""
    with fileio.open_source(url) as handle:
        return handle_digests(handle)


def handle_digests(handle) -> tuple[int, str, str]:
    """(size, sha256, git blob sha1) of an open file, read once (the blob id's header holds the
    size, so the size is taken from the open file first)."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(0)
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
    for chunk in iter(lambda: handle.read(CHUNK), b""):
        sha256.update(chunk)
        sha1.update(chunk)
    return size, sha256.hexdigest(), sha1.hexdigest()


def planned_file(path: str, source: str, kind: str) -> PlannedFile:
    """A file of the publication whose bytes are at `source` (a staged file)."""
    size, sha256, git_sha1 = file_digests(source)
    return PlannedFile(path, source, size, sha256, git_sha1, kind)


def built_file(path: str, folder: str, relative: str, kind: str) -> PlannedFile:
    """A file of the publication read from the build folder: a regular file inside it
    (`buildfolder.open_listed`: a link, a FIFO or a path leading out is refused)."""
    try:
        with buildfolder.open_listed(folder, relative) as handle:
            size, sha256, git_sha1 = handle_digests(handle)
    except buildfolder.NotListable as err:
        raise PublishError(f"{folder}: {relative}: {err.strerror}; not published") from None
    return PlannedFile(path, fileio.join(folder, relative), size, sha256, git_sha1, kind)


def list_files(url: str) -> list[str]:
    """Sorted relative paths of every file under a folder (temporary files excluded; a link is
    listed, never followed: `buildfolder.files_under`)."""
    return [p for p in buildfolder.files_under(url)
            if not posixpath.basename(p).startswith(TEMP_PREFIX)]


# ----------------------------------------------------------------------------- the card


def read_card_configs(folder: str) -> list[dict]:
    """The `configs:` entries of the card's YAML front matter ([] when there are none; the
    card is read as `core.buildfolder` reads it, which has checked it before)."""
    configs, _ = buildfolder.card_configs(folder)
    return configs or []


data_file_patterns = buildfolder.data_file_patterns


def card_globs(configs: list[dict]) -> list[str]:
    """Every `data_files` glob of the card: a file they match is read as the build's."""
    return [pattern for config in configs for _, pattern in data_file_patterns(config)]


def split_shards(configs: list[dict], files: list[str]) -> dict[tuple[str, str], list[str]]:
    """(config, split) -> the files its globs match, sorted."""
    matched = {}
    for config in configs:
        for split, pattern in data_file_patterns(config):
            key = (config.get("config_name", "default"), split)
            hits = [f for f in files if fnmatch.fnmatchcase(f, pattern)]
            matched[key] = sorted(set(matched.get(key, [])) | set(hits))
    return matched


# ----------------------------------------------------------------------------- validation


def validate_for_publishing(folder: str, check=None, upstream: bool = False) -> None:
    """Refuse a folder that is not an intact, finished build (core.buildfolder: its status, every
    shard's size and sha256, its card, nothing more than its report lists; with `upstream`, the
    export's files too), then one that `check(folder) -> [problems]` (the record contract, from
    the `validate` command) refuses."""
    problems = buildfolder.folder_problems(folder, upstream=upstream)
    if not problems and check is not None:
        problems = list(check(folder))
    if problems:
        raise PublishError(f"{folder} is not ready to publish:\n  - " + "\n  - ".join(problems))


# ----------------------------------------------------------------------------- archives


def write_deterministic_zip(members: list[tuple[str, str]], dest: str, folder: str) -> None:
    """A zip of (name in archive, path relative to `folder`) members, byte-identical on every
    run: sorted members, stored, fixed timestamp, permissions and creator system. Members are
    read as `buildfolder.open_listed` reads them (regular files inside the folder)."""
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    try:
        with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_STORED,
                             allowZip64=True) as archive:
            for name, relative in sorted(members):
                info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_STORED
                info.create_system = 3  # unix: the permission bits below mean the same everywhere
                info.external_attr = 0o100644 << 16
                with buildfolder.open_listed(folder, relative) as src:
                    info.file_size = src.seek(0, os.SEEK_END)
                    src.seek(0)
                    with archive.open(info, "w", force_zip64=True) as out:
                        shutil.copyfileobj(src, out, CHUNK)
    except buildfolder.NotListable as err:
        raise PublishError(f"{folder}: {err.filename}: {err.strerror}; not published") from None
    except OSError as err:
        raise naming(err, dest) from err


def archive_parts(names: list[str], sizes: dict[str, int], max_bytes: int) -> list[list[str]]:
    """Sorted members cut into consecutive parts of at most `max_bytes` (a larger member gets
    a part of its own)."""
    parts, current, used = [], [], 0
    for name in sorted(names):
        if current and used + sizes[name] > max_bytes:
            parts.append(current)
            current, used = [], 0
        current.append(name)
        used += sizes[name]
    return parts + ([current] if current else [])


def archive_name(folder: str, index: int, count: int) -> str:
    return f"{folder}.zip" if count == 1 else f"{folder}-{index + 1:05d}-of-{count:05d}.zip"


def exported_files(folder: str) -> dict[str, int]:
    """The export's files as build.json lists them (path relative to DIR/upstream -> size):
    what the build wrote, never an earlier build's leftover beside it."""
    report = buildfolder.read_report(folder) or {}
    prefix = UPSTREAM_DIR + "/"
    return {e["path"][len(prefix):]: e["bytes"]
            for e in buildfolder.listed(report, "upstream_files") if e["path"].startswith(prefix)}


def refuse_without_export(folder: str, exported: dict[str, int] | None = None) -> None:
    """--with_upstream on a build that wrote no upstream export: one line saying how to make
    it (before any work)."""
    exported = exported_files(folder) if exported is None else exported
    if not any(f.endswith(UPSTREAM_SUFFIX) and "/" not in f for f in exported):
        raise PublishError(f"--with_upstream: {folder} has no upstream export (a build writes "
                           "it only when asked: build with --upstream_export), or publish "
                           "without --with_upstream")


def upstream_files(folder: str, staging: str, prefix: str, max_bytes: int) -> list[PlannedFile]:
    """The upstream export as the upstream release's `test/`: top-level files as they are, each
    top-level image folder packed into zip archive(s) written under `staging`."""
    exported = exported_files(folder)
    refuse_without_export(folder, exported)
    planned = []
    groups = {}
    for name in sorted(exported):
        top, sep, _ = name.partition("/")
        if sep:
            groups.setdefault(top, []).append(name)
        else:
            kind = "upstream-jsonl" if name.endswith(UPSTREAM_SUFFIX) else "upstream-file"
            planned.append(built_file(f"{prefix}/{name}", folder, f"{UPSTREAM_DIR}/{name}", kind))
    packed = sum(len(names) for names in groups.values())
    with phases.phase(f"packing the upstream export's {packed:,} images into zips",
                      total=sum(exported[n] for names in groups.values() for n in names),
                      unit="B") as step:
        for top, names in sorted(groups.items()):
            parts = archive_parts(names, exported, max_bytes)
            for index, members in enumerate(parts):
                repo_path = f"{prefix}/{archive_name(top, index, len(parts))}"
                dest = os.path.join(staging, "archives", *repo_path.split("/"))
                write_deterministic_zip([(n, f"{UPSTREAM_DIR}/{n}") for n in members], dest,
                                        folder)
                planned.append(planned_file(repo_path, dest, "upstream-archive"))
                step.update(sum(exported[n] for n in members))
    return planned


def built_files(folder: str) -> list[PlannedFile]:
    """The card, every shard a `configs:` entry names, and the reports."""
    files = list_files(folder)
    shards = split_shards(read_card_configs(folder), files)
    chosen = {CARD: "card"}
    chosen.update({p: "shard" for paths in shards.values() for p in paths})
    chosen.update({p: "report" for p in files if p.startswith(REPORTS_DIR + "/")})
    planned = []
    with phases.phase("hashing the files to publish", total=len(chosen),
                      unit="files") as step:
        for p, kind in sorted(chosen.items()):
            planned.append(built_file(p, folder, p, kind))
            step.update()
    return planned


def collect_files(folder: str, staging: str, with_upstream: bool = False,
                  upstream_prefix: str = DEFAULT_UPSTREAM_PREFIX,
                  archive_max_bytes: int = DEFAULT_ARCHIVE_MAX_BYTES) -> list[PlannedFile]:
    planned = built_files(folder)
    if with_upstream:
        planned += upstream_files(folder, staging, upstream_prefix, archive_max_bytes)
    return sorted(planned, key=lambda f: f.path)


# ----------------------------------------------------------------------------- the plan


@dataclasses.dataclass
class Plan:
    target: str
    files: list[PlannedFile]
    upload: list[PlannedFile]
    skip: list[PlannedFile]
    delete: list[str]
    atomic: bool  # the Hub: one commit for everything; otherwise several, the card last
    commit_message: str
    how: str = ""  # how the target applies this plan, in words
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def upload_bytes(self) -> int:
        return sum(f.size for f in self.upload)

    @property
    def empty(self) -> bool:
        return not self.upload and not self.delete


def is_identical(planned: PlannedFile, remote: RemoteFile | None) -> bool:
    if remote is None or remote.size != planned.size:
        return False
    if remote.sha256 is not None:
        return remote.sha256 == planned.sha256
    return remote.git_sha1 is not None and remote.git_sha1 == planned.git_sha1


def is_managed(path: str, owned: set[str], globs: list[str]) -> bool:
    """Whether a remote path this publication does not hold is stale and deleted: a file an
    earlier publish wrote (`owned`), a file the card's `globs` match (it would be read as the
    build's), or a temporary file an interrupted publish left. Anything else (`.gitattributes`,
    files a user added) is left alone."""
    if path in owned or TEMPORARY_NAME.match(posixpath.basename(path)):
        return True
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in globs)


def make_plan(target: str, files: list[PlannedFile], remote: dict[str, RemoteFile],
              commit_message: str, owned: set[str], globs: list[str],
              max_commit_bytes: int, max_commit_files: int) -> Plan:
    wanted = {f.path for f in files}
    skip = [f for f in files if is_identical(f, remote.get(f.path))]
    upload = [f for f in files if not is_identical(f, remote.get(f.path))]
    delete = sorted(p for p in remote if p not in wanted and is_managed(p, owned, globs))
    atomic = (sum(f.size for f in upload) <= max_commit_bytes
              and len(upload) + len(delete) <= max_commit_files)
    return Plan(target, files, upload, skip, delete, atomic, commit_message)


def default_commit_message(folder: str) -> str:
    report = buildfolder.read_report(folder) or {}  # checked before (validate_for_publishing)
    stamp = report.get("stamp") or {}
    configs = sorted({e["config"] for e in report["scenarios"].values() if e.get("config")})
    return (f"Publish ProactiveBench build: {', '.join(configs)} "
            f"(code {stamp.get('code_version', '?')}, seed {stamp.get('seed', '?')})")


def format_plan(plan: Plan) -> str:
    """Every file with its size and sha256, what happens to it, and the commit message."""
    action = {f.path: ("upload", f) for f in plan.upload}
    action.update({f.path: ("skip", f) for f in plan.skip})
    width = max([len(p) for p in list(action) + plan.delete] + [4])
    how = "nothing to do: the target already holds this build" if plan.empty else plan.how
    lines = [f"target: {plan.target}", *plan.notes, f"how: {how}",
             f"commit message: {plan.commit_message}", ""]
    for path in sorted(action):
        verb, f = action[path]
        note = "  (identical on the target, skipped)" if verb == "skip" else ""
        lines.append(f"  {verb:6s} {path:{width}s} {f.size:>14,d} B  sha256:{f.sha256}{note}")
    for path in plan.delete:
        lines.append(f"  {'delete':6s} {path:{width}s}  (stale: not part of this build)")
    lines += ["", f"upload {len(plan.upload)} files ({plan.upload_bytes:,d} B), skip "
              f"{len(plan.skip)} already on the target, delete {len(plan.delete)} stale"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- staging


def stage_files(files: list[PlannedFile], folder: str) -> dict[str, str]:
    """Lay `files` out under `folder` by their repo path: hard links of local sources (no copy),
    a copy when linking is impossible or the source is remote. Returns repo path -> local path."""
    staged = {}
    for f in files:
        dest = os.path.join(folder, *f.path.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.exists(dest):
            os.remove(dest)
        fs, path = fileio.filesystem(f.source)
        try:
            if not fileio.is_local(f.source):
                raise OSError("remote source")
            os.link(path, dest)
        except OSError:  # another device, no hard links, or a remote source: copy instead
            with fs.open(path, "rb") as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
        staged[f.path] = dest
    return staged


# ----------------------------------------------------------------------------- Hub target


class HubClient:
    """The Hub at the network boundary: each method is one `HfApi` call, with offline mode and
    missing repositories turned into clear `PublishError`s."""

    def __init__(self, token: str | None):
        from huggingface_hub import HfApi

        self.api = HfApi(token=token)

    def call(self, what: str, method: str, *args, **kwargs):
        from huggingface_hub.errors import (
            HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError)

        try:
            return getattr(self.api, method)(*args, **kwargs)
        except (RepositoryNotFoundError, RevisionNotFoundError):
            raise  # the caller knows what a missing repo or branch means
        except OfflineModeIsEnabled as err:
            raise HubUnreachable(f"cannot {what}: Hugging Face offline mode is on "
                                 "(HF_HUB_OFFLINE=1). Unset HF_HUB_OFFLINE to publish to the Hub, "
                                 "or publish to a folder with --to.",
                                 "Hugging Face offline mode is on") from err
        except HfHubHTTPError as err:
            status = getattr(getattr(err, "response", None), "status_code", None)
            if status in (401, 403):
                raise PublishError(f"cannot {what}: the Hub refused the token (HTTP {status}); "
                                   "check HF_TOKEN or `hf auth login`, and that the token may "
                                   "write to this repo") from err
            raise PublishError(f"cannot {what}: {one_line(str(err))}. {RESUME_HINT}") from err
        except Exception as err:  # connection refused, reset, timeout, DNS: the network
            if not is_network_error(err):
                raise
            reason = f"{hub_endpoint()} unreachable: {type(err).__name__}: {err}"
            raise HubUnreachable(f"cannot {what}: the Hub at {hub_endpoint()} cannot be reached "
                                 f"({type(err).__name__}: {one_line(str(err))}); check the "
                                 "network (and "
                                 f"HF_ENDPOINT if set). {RESUME_HINT}", reason) from err

    def head_commit(self, repo_id: str, revision: str | None) -> str | None:
        """The commit sha of `revision`, or None when the repo does not exist."""
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

        try:
            info = self.call(f"read dataset repo {repo_id}", "repo_info", repo_id,
                             repo_type="dataset", revision=revision)
        except RevisionNotFoundError as err:
            raise PublishError(f"dataset repo {repo_id} has no revision {revision!r}; create the "
                               "branch first (e.g. `hf repo branch create`)") from err
        except RepositoryNotFoundError:
            return None
        return info.sha

    def create_repo(self, repo_id: str, private: bool) -> None:
        self.call(f"create dataset repo {repo_id}", "create_repo", repo_id, repo_type="dataset",
                  private=private, exist_ok=True)

    def remote_files(self, repo_id: str, revision: str | None) -> dict[str, RemoteFile]:
        entries = self.call(f"list the files of {repo_id}", "list_repo_tree", repo_id,
                            recursive=True, repo_type="dataset", revision=revision)
        found = {}
        for entry in entries:
            if not hasattr(entry, "blob_id"):  # a folder
                continue
            sha256 = entry.lfs.sha256 if getattr(entry, "lfs", None) else None
            found[entry.path] = RemoteFile(entry.path, entry.size, sha256, entry.blob_id)
        return found

    def commit(self, repo_id: str, operations: list, message: str, revision: str | None,
               parent_commit: str | None):
        return self.call(f"commit to {repo_id}", "create_commit", repo_id, operations,
                         commit_message=message, repo_type="dataset", revision=revision,
                         parent_commit=parent_commit)

    def upload_folder(self, repo_id: str, folder: str, message: str, revision: str | None):
        return self.call(f"upload to {repo_id}", "upload_folder", repo_id=repo_id,
                         folder_path=folder, commit_message=message, repo_type="dataset",
                         revision=revision)


def resolve_token(required: bool) -> str | None:
    """The token from the usual places: HF_TOKEN, then the file `hf auth login` writes."""
    from huggingface_hub import get_token

    token = get_token()
    if token is None and required:
        raise PublishError("no Hugging Face token: set HF_TOKEN or run `hf auth login` "
                           "(a token with write access to the dataset repo)")
    return token


class HubTarget:
    """A dataset repo on the Hugging Face Hub."""

    def __init__(self, repo_id: str, revision: str | None = None, create: bool = False,
                 private: bool = False, client: HubClient | None = None):
        self.repo_id, self.revision, self.create, self.private = repo_id, revision, create, private
        self.client = client
        self.parent_commit = None
        self.exists = True

    def describe(self) -> str:
        return f"Hugging Face dataset repo {self.repo_id} (revision {self.revision or 'main'})"

    def prepare(self, dry_run: bool) -> list[str]:
        """Token and repo are checked before any heavy work; returns notes for the plan. A dry
        run that cannot reach the Hub still plans every file, and says what it could not tell."""
        if self.client is None:
            self.client = HubClient(resolve_token(required=not dry_run))
        try:
            with phases.phase(f"asking the Hub for {self.repo_id}"):
                self.parent_commit = self.client.head_commit(self.repo_id, self.revision)
        except HubUnreachable as err:
            if not dry_run:
                raise
            self.exists = False
            return [f"remote not contacted ({err.reason}): cannot tell which files are already "
                    "there (skipped) or stale (deleted); every file is listed as an upload"]
        if self.parent_commit is not None:
            return [f"repo {self.repo_id} exists, at commit {self.parent_commit}"]
        if not self.create:
            raise PublishError(f"dataset repo {self.repo_id} does not exist (or the token cannot "
                               "see it); pass --create to create it")
        if dry_run:
            self.exists = False
            return [f"repo {self.repo_id} does not exist: it would be created (--create)"]
        self.client.create_repo(self.repo_id, self.private)
        self.parent_commit = self.client.head_commit(self.repo_id, self.revision)
        return [f"created dataset repo {self.repo_id}"]

    def remote_files(self, files: list[PlannedFile]) -> dict[str, RemoteFile]:
        if not self.exists:
            return {}
        with phases.phase(f"listing the files of {self.repo_id} on the Hub"):
            return self.client.remote_files(self.repo_id, self.revision)

    def owned(self, remote: dict[str, RemoteFile], with_upstream: bool,
              upstream_prefix: str) -> tuple[set[str], list[str]]:
        """Remote files taken as an earlier publish's: a dataset repo's `reports/*` and, with
        --with_upstream, the upstream prefix (the repo records no list of what it published)."""
        return {p for p in remote if p.startswith(REPORTS_DIR + "/")
                or (with_upstream and p.startswith(upstream_prefix + "/"))}, []

    def record(self, files: list[PlannedFile], staging: str) -> list[PlannedFile]:
        return []

    def how(self, plan: Plan) -> str:
        if plan.atomic:
            return "one atomic commit (create_commit)"
        return ("resumable multi-commit upload of the data files (upload_folder), then one commit "
                "with the card and the deletions: too large for one commit")

    def apply(self, plan: Plan, staging: str) -> None:
        uploading = (f"uploading {len(plan.upload):,} files "
                     f"({phases.human_size(plan.upload_bytes)}) to {self.repo_id}")
        if plan.atomic:
            staged = stage_files(plan.upload, os.path.join(staging, "upload"))
            operations = add_operations(staged) + delete_operations(plan.delete)
            with phases.phase(f"{uploading} in one commit"):
                self.client.commit(self.repo_id, operations, plan.commit_message, self.revision,
                                   self.parent_commit)
            return
        # The card goes last, so it names the new shards only once they are all there.
        data = [f for f in plan.upload if f.path != CARD]
        card = [f for f in plan.upload if f.path == CARD]
        if data:
            data_root = os.path.join(staging, "upload-data")
            stage_files(data, data_root)
            with phases.phase(f"{uploading}: the data files, in several commits"):
                self.client.upload_folder(self.repo_id, data_root, plan.commit_message,
                                          self.revision)
        if card or plan.delete:
            staged = stage_files(card, os.path.join(staging, "upload-card"))
            operations = add_operations(staged) + delete_operations(plan.delete)
            with phases.phase(f"committing the card and {len(plan.delete)} deletions to "
                              f"{self.repo_id}"):
                self.client.commit(self.repo_id, operations, plan.commit_message + " (card)",
                                   self.revision, None)


def add_operations(staged: dict[str, str]) -> list:
    from huggingface_hub import CommitOperationAdd

    return [CommitOperationAdd(path_in_repo=path, path_or_fileobj=local)
            for path, local in sorted(staged.items())]


def delete_operations(paths: list[str]) -> list:
    from huggingface_hub import CommitOperationDelete

    return [CommitOperationDelete(path_in_repo=path) for path in paths]


# ----------------------------------------------------------------------------- fsspec target


class FsspecTarget:
    """A folder at any fsspec URL, in the same layout as the Hub repo."""

    def __init__(self, url: str):
        self.url = url if "://" in url else os.path.abspath(url)
        self.fs, self.root = fileio.filesystem(self.url)
        self.root = self.root.rstrip("/")

    def describe(self) -> str:
        return f"folder {self.url}"

    def how(self, plan: Plan) -> str:
        return "write every file under a temporary name, then rename (data first, card last)"

    @contextlib.contextmanager
    def exclusive(self, dry_run: bool):
        """One publish at a time into a local folder: each takes what the other wrote under a
        temporary name for a leftover and removes it. A lock file inside the folder, held from
        before the folder is read to the end (TargetHeld, one line, when another publish holds
        it). A dry run changes nothing and takes no lock; a remote store has no lock (its
        objects are renamed into place whole, and a rerun converges)."""
        if dry_run or not fileio.is_local(self.url):
            yield
            return
        os.makedirs(self.root, exist_ok=True)
        lock = ExclusiveLock(os.path.join(self.root, TARGET_LOCK), "the publish lock file")
        try:
            lock.__enter__()
        except Held as held:
            raise TargetHeld(f"{self.url} is being published into by another publish: "
                             f"{describe(held.holder)}; wait for it to end, then run this "
                             "publish again (it writes only what is missing)") from None
        try:
            yield
        finally:
            lock.release()

    def prepare(self, dry_run: bool) -> list[str]:
        if self.fs.exists(self.root) and not self.fs.isdir(self.root):
            raise PublishError(f"{self.url} exists and is not a folder")
        if self.fs.exists(self.root):
            return []
        return [f"{self.url} does not exist: it will be created"]

    def remote_files(self, files: list[PlannedFile]) -> dict[str, RemoteFile]:
        """Sizes of every file; sha256 only where a planned file of the same size could match
        (hashing the whole target on every run would read all of it). A FIFO or other special
        file of the target is never opened: it is replaced when a planned file goes there."""
        if not self.fs.isdir(self.root):
            return {}
        sizes = {f.path: f.size for f in files}
        found = {}
        present = self.sizes()
        same = [(path, size) for path, size in present if sizes.get(path) == size]
        with phases.phase(f"comparing the {len(same):,} files already in the target",
                          total=len(same), unit="files") \
                if same else contextlib.nullcontext(phases.Phase()) as step:
            for path, size in present:
                sha256 = None
                if sizes.get(path) == size:
                    try:
                        sha256 = file_digests(self.final_url(path))[1]
                    except fileio.NotARegularFile:
                        pass
                    step.update()
                found[path] = RemoteFile(path, size, sha256)
        return found

    def sizes(self) -> list[tuple[str, int]]:
        """(path, size) of every file in the target; locally a link is not followed (its size
        is -1: never taken for a planned file's bytes)."""
        if not fileio.is_local(self.url):
            return [(posixpath.relpath(full, self.root), info["size"])
                    for full, info in sorted(self.fs.find(self.root, detail=True).items())]
        found = []
        for path in buildfolder.files_under(self.url):
            if path == TARGET_LOCK:  # this publish's own lock, removed when it ends
                continue
            info = os.lstat(os.path.join(fileio.local_path(self.url), *path.split("/")))
            found.append((path, info.st_size if stat.S_ISREG(info.st_mode) else -1))
        return found

    def owned(self, remote: dict[str, RemoteFile], with_upstream: bool,
              upstream_prefix: str) -> tuple[set[str], list[str]]:
        """The files the last publish into this folder wrote, as it recorded them in
        MANIFEST (none when there is no record: then only files the card's globs match and
        temporary files are taken as stale)."""
        if MANIFEST not in remote:
            return set(), []
        try:
            data = json.loads(fileio.read_bytes(self.final_url(MANIFEST), MANIFEST_MAX_BYTES))
            files = data["files"]
            if not isinstance(files, list) or not all(isinstance(p, str) for p in files):
                raise TypeError("`files` is not a list of paths")
        except (OSError, ValueError, RecursionError, TypeError, KeyError) as err:
            return set(), [f"{MANIFEST} in the target is unreadable ({type(err).__name__}); only "
                           "files the card's globs match are taken as stale"]
        return set(files), []

    def record(self, files: list[PlannedFile], staging: str) -> list[PlannedFile]:
        """MANIFEST: the paths this publish puts in the folder (published after them)."""
        local = os.path.join(staging, "record", MANIFEST)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        listing = {"files": sorted(f.path for f in files), "written_by": "run_pipeline.py publish"}
        try:
            with open(local, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(listing, indent=2, sort_keys=True) + "\n")
        except OSError as err:
            raise naming(err, local) from err
        return [planned_file(MANIFEST, local, "record")]

    def final_url(self, path: str) -> str:
        return fileio.join(self.url, *path.split("/"))

    def apply(self, plan: Plan, staging: str) -> None:
        """Every file under a temporary name, then renamed: data first, the card and the
        record last, so the card never names a file that is not there yet. Whatever stops it
        (a full disk, Ctrl-C, SIGTERM, a remote store's connection cut) removes the temporary
        files not yet renamed; a remote store's failure is one line (StoreFailed) naming those
        it could not remove."""
        self.left = []
        try:
            self._apply(plan)
        except (PublishError, KeyboardInterrupt):
            raise
        except OSError as err:
            if err.errno and fileio.is_local(self.url):
                raise  # a full disk, permissions: PublishOutputError, naming the file
            raise store_failure(self.describe(), err, self.left) from err
        except Exception as err:  # noqa: BLE001 - the store client's own (botocore, aiohttp)
            if fileio.is_local(self.url):
                raise
            raise store_failure(self.describe(), err, self.left) from err

    def _apply(self, plan: Plan) -> None:
        pending = []
        try:
            with phases.phase(f"writing {len(plan.upload):,} files into the target",
                              total=plan.upload_bytes, unit="B") as step:
                for f in plan.upload:
                    pending.append((self.write_temporary(f), f))
                    step.update(f.size)
            pending.sort(key=lambda item: (item[1].kind == "record", item[1].path == CARD,
                                           item[1].path))
            while pending:
                temp, f = pending[0]
                self.fs.mv(temp, posixpath.join(self.root, f.path))
                pending.pop(0)
        finally:
            for temp, _ in pending:
                self.remove_quietly(temp)
        for path in plan.delete:
            self.fs.rm(posixpath.join(self.root, path))

    def write_temporary(self, f: PlannedFile) -> str:
        """Copies `f` next to its final place under a name no `configs:` glob matches; on any
        failure the temporary file is removed."""
        dest = posixpath.join(self.root, f.path)
        temp = fileio.temporary_name(dest)
        try:
            self.fs.makedirs(posixpath.dirname(dest), exist_ok=True)
            self.copy_bytes(f.source, temp)
        except BaseException as err:
            self.remove_quietly(temp)
            if isinstance(err, OSError) and fileio.is_local(self.url):
                raise naming(err, dest) from err
            raise
        return temp

    def copy_bytes(self, source: str, temp: str) -> None:
        with fileio.open_source(source) as inp, self.fs.open(temp, "wb") as out:
            shutil.copyfileobj(inp, out, CHUNK)

    def remove_quietly(self, path: str) -> None:
        """Remove a temporary file; one the store cannot remove now (its endpoint gone) is
        kept in `left`, for the failure's line (the next publish removes it). Once one could
        not be removed the others are not tried: each try would wait out the client's retries
        against a store that does not answer."""
        left = getattr(self, "left", None)
        if left:
            left.append(path)
            return
        try:
            if self.fs.exists(path):
                self.fs.rm(path)
        except Exception:  # noqa: BLE001 - whatever the store's client raises
            if left is not None:
                left.append(path)

    def local_root(self) -> str | None:
        return self.url if fileio.is_local(self.url) else None


# ----------------------------------------------------------------------------- publish


def publish(folder: str, target, *, dry_run: bool = False, with_upstream: bool = False,
            upstream_prefix: str = DEFAULT_UPSTREAM_PREFIX, commit_message: str | None = None,
            max_commit_bytes: int = DEFAULT_MAX_COMMIT_BYTES,
            max_commit_files: int = DEFAULT_MAX_COMMIT_FILES,
            archive_max_bytes: int = DEFAULT_ARCHIVE_MAX_BYTES,
            staging_dir: str | None = None, check=None) -> Plan:
    """Validate `folder` (and check it with `check`, see `validate_for_publishing`), plan
    against what `target` already holds, and (unless `dry_run`) upload what is missing and
    delete what is stale. Returns the plan."""
    check_upstream_prefix(upstream_prefix)
    refuse_inside(folder, getattr(target, "local_root", lambda: None)(), "the target")
    refuse_inside(folder, staging_dir, "--staging_dir")
    if with_upstream and buildfolder.read_report(folder) is not None:  # (else: not a build)
        refuse_without_export(folder)
    validate_for_publishing(folder, check, upstream=with_upstream)
    try:
        notes = target.prepare(dry_run)  # token and repo first: fail before any heavy work
        with getattr(target, "exclusive", _no_lock)(dry_run):
            return _publish(folder, target, notes, dry_run, with_upstream, upstream_prefix,
                            commit_message, max_commit_bytes, max_commit_files,
                            archive_max_bytes, staging_dir)
    except OSError as err:
        if not err.errno:
            raise
        raise PublishOutputError.of(err) from err


@contextlib.contextmanager
def _no_lock(dry_run: bool):
    yield  # the Hub: a commit is atomic on the server's side


def _publish(folder, target, notes, dry_run, with_upstream, upstream_prefix, commit_message,
             max_commit_bytes, max_commit_files, archive_max_bytes, staging_dir) -> Plan:
    if staging_dir is not None:
        os.makedirs(staging_dir, exist_ok=True)
    # a folder of its own, inside the user's staging folder too, removed whatever happens
    staging = tempfile.mkdtemp(prefix="proactivebench-publish-", dir=staging_dir)
    try:
        files = collect_files(folder, staging, with_upstream, upstream_prefix,
                              archive_max_bytes)
        files = sorted(files + target.record(files, staging), key=lambda f: f.path)
        message = commit_message or default_commit_message(folder)
        remote = target.remote_files(files)
        owned, owned_notes = target.owned(remote, with_upstream, upstream_prefix)
        globs = card_globs(read_card_configs(folder))
        plan = make_plan(target.describe(), files, remote, message, owned, globs,
                         max_commit_bytes, max_commit_files)
        plan.notes, plan.how = notes + owned_notes, target.how(plan)
        if not dry_run and not plan.empty:
            target.apply(plan, staging)
        return plan
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_upstream_prefix(prefix: str) -> None:
    """The export's folder in the target: a plain relative path (nothing written outside)."""
    problem = buildfolder.relative_path_problem(prefix)
    if problem:
        raise PublishError(f"--upstream_prefix {prefix!r}: {problem}; give a folder inside the "
                           f"target (default: {DEFAULT_UPSTREAM_PREFIX})")


def refuse_inside(folder: str, path: str | None, what: str) -> None:
    """Refuse a local `path` that is the build folder or lies inside it: publishing would
    change the folder it publishes (and a later validate would find files it did not write)."""
    if path is None or not fileio.is_local(path) or not fileio.is_local(folder):
        return
    root = os.path.realpath(fileio.local_path(folder))
    real = os.path.realpath(fileio.local_path(path))
    if os.path.commonpath([root, real]) == root:
        raise PublishError(f"{what} {path} is inside the build folder {folder} (or is it): "
                           "publishing would change what it publishes; choose a folder "
                           "outside it")
