"""Downloading files over HTTP(S) into a local folder: parallel, resumable, verified, idempotent.

One `FileSpec` names a URL, where its file goes (relative to a folder), what is known of it
(`size`, `md5`, `sha256`: the publishers' pins) and, for an archive the reader needs unpacked,
how to extract it (`core/extract.py`). `Downloader.fetch_all` fetches a list of them on a thread
pool and returns one `Outcome` per file; one file's failure never stops the others, and its
message is one line.

How each file is handled:

- **Idempotent.** A file already in place is skipped once verified: against its pins (size,
  md5, sha256), or, with none, against what the server declares (its size, and the digest some
  servers send: Google Cloud Storage's `x-goog-hash` md5, the Hugging Face Hub's
  `X-Linked-Etag`, the sha256 of an LFS file). What was verified is remembered in
  `<folder>/.proactivebench-fetch/state.json` (size, modification time, digests), so a later run
  trusts a file whose size and modification time are unchanged without reading it again
  (`rehash=True` reads everything again). A file that fails its pins is fetched again.
- **Resumable.** Bytes go to `<folder>/.proactivebench-fetch/partial/<path>.part`; a dropped
  connection keeps them, and the next attempt (a retry in this run, or the next run) asks for
  the rest with an HTTP `Range` request. A server that ignores the range (200) restarts the
  file; a partial that turns out not to be a prefix of the file (wrong digest at the end) is
  removed and the file fetched from zero once more.
- **Verified.** The digests are computed while the bytes stream in (the resumed prefix is read
  once first); the file is renamed to its final name only when its size and every known digest
  agree. A server that sends more bytes than the pinned or announced size is cut off.
- **Bounded.** Memory holds one 1 MiB block per running download; `Accept-Encoding: identity`
  and reading the raw stream keep a server's transfer compression from altering the bytes.
- **Safe.** A destination is never written through a link: a final path that is a symbolic link,
  or whose folder resolves outside the target folder, is a failure for that file.
- **Testable.** `mirror` fetches `https://HOST/PATH` from `MIRROR/HOST/PATH` instead (a local
  server in the tests, or a cache that mirrors several hosts).

Progress is reported through two callbacks (bytes received, bytes expected), which the command
connects to a tqdm bar. This module imports nothing of the project (it is part of the core);
its one third-party dependency is `requests`.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import stat
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import requests
import urllib3

from proactivebench_builder.core import extract as extraction

STATE_DIR = ".proactivebench-fetch"  # fetch's bookkeeping inside each source folder
STATE_FILE = "state.json"
PARTIAL_DIR = "partial"
CHUNK = 1 << 20
DEFAULT_MAX_BYTES = 256 << 30  # the cap for a file whose size nobody announces
USER_AGENT = "proactivebench-builder-fetch/1"
MD5_PATTERN = re.compile(r"^[0-9a-f]{32}$")
SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")


class FetchError(Exception):
    """One file could not be fetched; the message is one line."""


class _Transient(FetchError):
    """A failure worth retrying (connection lost, timeout, HTTP 5xx/429)."""


class _Restart(Exception):
    """The partial file cannot be continued: fetch from zero."""


@dataclass(frozen=True)
class ExtractSpec:
    into: str = "."                 # folder (relative to the target folder) to extract into
    strip_components: int = 0       # leading folders dropped from every member's path
    limits: extraction.Limits = extraction.Limits()


@dataclass(frozen=True)
class FileSpec:
    url: str
    path: str                       # where the file goes, relative to the target folder (posix)
    size: int | None = None
    md5: str | None = None
    sha256: str | None = None
    extract: ExtractSpec | None = None
    max_bytes: int = DEFAULT_MAX_BYTES


@dataclass
class Outcome:
    folder: str
    path: str
    status: str                     # "fetched", "skipped" or "failed"
    message: str = ""
    bytes: int = 0                  # bytes received over the network
    resumed_from: int = 0           # offset of the last Range request (0: from the start)
    extracted: bool = False


@dataclass
class _Digests:
    size: int
    sha256: str
    md5: str | None = None
    declared: dict = field(default_factory=dict)   # digests the server announced


def mirrored(url: str, mirror: str | None) -> str:
    """`url` as fetched through `mirror`: https://HOST/PATH?Q -> MIRROR/HOST/PATH?Q."""
    if not mirror:
        return url
    parts = urllib.parse.urlsplit(url)
    tail = parts.netloc + parts.path + (f"?{parts.query}" if parts.query else "")
    return mirror.rstrip("/") + "/" + tail


class _FolderState:
    """`<folder>/.proactivebench-fetch/state.json`: what this tool verified, per relative path.
    Shared by the threads fetching into one folder; written atomically after every change."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, STATE_DIR, STATE_FILE)
        self.lock = threading.Lock()
        self.data = {"files": {}, "extracted": {}}
        try:
            with open(self.path, encoding="utf-8") as handle:
                loaded = json.load(handle)
            if isinstance(loaded, dict):
                for key in self.data:
                    if isinstance(loaded.get(key), dict):
                        self.data[key] = loaded[key]
        except (OSError, ValueError):
            pass  # no state (or an unreadable one): every file is verified from its bytes

    def get(self, kind: str, path: str) -> dict | None:
        with self.lock:
            value = self.data[kind].get(path)
            return dict(value) if isinstance(value, dict) else None

    def put(self, kind: str, path: str, value: dict | None) -> None:
        with self.lock:
            if value is None:
                self.data[kind].pop(path, None)
            else:
                self.data[kind][path] = value
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.tmp-{os.getpid()}-{threading.get_ident()}"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(self.data, handle, indent=1, sort_keys=True)
                handle.write("\n")
            os.replace(tmp, self.path)


def declared_digests(responses) -> dict:
    """The whole-file digests servers announce in their headers, from a response and the
    redirects before it: Google Cloud Storage's `x-goog-hash: crc32c=...,md5=<base64>` (absent
    for composite objects) and the Hub's `X-Linked-Etag: "<sha256>"` (LFS files)."""
    found = {}
    for response in responses:
        headers = response.headers
        for item in headers.get("x-goog-hash", "").split(","):
            key, _, value = item.strip().partition("=")
            if key == "md5" and value:
                try:
                    found["md5"] = base64.b64decode(value, validate=True).hex()
                except (binascii.Error, ValueError):
                    pass
        etag = headers.get("x-linked-etag", "").strip().strip('"').lower()
        if etag.startswith("w/"):
            etag = ""
        if SHA256_PATTERN.match(etag):
            found["sha256"] = etag
    return found


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total) of a Content-Range header ('bytes 10-99/100', 'bytes */100')."""
    match = re.match(r"^\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*$", value or "")
    if not match:
        return None, None
    start = int(match[1]) if match[1] is not None else None
    total = int(match[2]) if match[2] != "*" else None
    return start, total


def _hash_file(path: str, want_md5: bool) -> _Digests:
    sha, md5 = hashlib.sha256(), hashlib.md5() if want_md5 else None
    size = 0
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            sha.update(block)
            if md5 is not None:
                md5.update(block)
            size += len(block)
    return _Digests(size, sha.hexdigest(), md5.hexdigest() if md5 else None)


def _mismatch(spec: FileSpec, digests: _Digests, declared: dict | None = None) -> str | None:
    """What disagrees between a file and its pins (then the server's declared digests), or
    None when everything known agrees."""
    if spec.size is not None and digests.size != spec.size:
        return f"size {digests.size} bytes, the manifest pins {spec.size}"
    if spec.sha256 and digests.sha256 != spec.sha256:
        return f"sha256 {digests.sha256}, the manifest pins {spec.sha256}"
    if spec.md5 and digests.md5 != spec.md5:
        return f"md5 {digests.md5}, the manifest pins {spec.md5}"
    for kind, value in sorted((declared or {}).items()):
        if kind == "sha256" and digests.sha256 != value:
            return f"sha256 {digests.sha256}, the server declares {value}"
        if kind == "md5" and digests.md5 is not None and digests.md5 != value:
            return f"md5 {digests.md5}, the server declares {value}"
    return None


class Downloader:
    """Fetches `FileSpec`s into folders; see the module docstring."""

    def __init__(self, *, mirror: str | None = None, retries: int = 3, retry_wait: float = 2.0,
                 timeout: float = 60.0, rehash: bool = False, remove_archives: bool = False,
                 on_bytes=None, on_total=None, on_done=None, session_factory=None):
        self.mirror = mirror
        self.retries = retries
        self.retry_wait = retry_wait
        self.timeout = timeout
        self.rehash = rehash
        self.remove_archives = remove_archives
        self.on_bytes = on_bytes or (lambda n: None)
        self.on_total = on_total or (lambda n: None)
        self.on_done = on_done or (lambda outcome: None)  # called as each file finishes
        self._session_factory = session_factory or requests.Session
        self._local = threading.local()
        self._states: dict[str, _FolderState] = {}
        self._states_lock = threading.Lock()
        self.stopping = threading.Event()

    # ---- plumbing ------------------------------------------------------------------------

    def session(self) -> requests.Session:
        """One session per thread (a requests.Session is not shared across threads)."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._session_factory()
            session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
            self._local.session = session
        return session

    def state(self, folder: str) -> _FolderState:
        with self._states_lock:
            if folder not in self._states:
                self._states[folder] = _FolderState(folder)
            return self._states[folder]

    def url(self, spec: FileSpec) -> str:
        return mirrored(spec.url, self.mirror)

    # ---- the public entry points ---------------------------------------------------------

    def fetch_all(self, jobs: list[tuple[str, FileSpec]], workers: int = 4) -> list[Outcome]:
        """Fetch every (folder, spec); the outcomes come back in the order of `jobs`."""
        if workers <= 1 or len(jobs) <= 1:
            return [self.fetch(folder, spec) for folder, spec in jobs]
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch")
        try:
            futures = [pool.submit(self.fetch, folder, spec) for folder, spec in jobs]
            return [future.result() for future in futures]
        except BaseException:
            # Ctrl-C (or a bug): the running downloads stop at their next block, keeping their
            # partial files for the next run; the queued ones never start.
            self.stopping.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def fetch(self, folder: str, spec: FileSpec) -> Outcome:
        """Fetch (or skip) one file, then extract it when its spec says so. Never raises for a
        failure of this file: it is the outcome's one-line message."""
        outcome = Outcome(folder, spec.path, "skipped")
        try:
            self._fetch(folder, spec, outcome)
            if spec.extract is not None:
                self._extract(folder, spec, outcome)
        except FetchError as err:
            outcome.status, outcome.message = "failed", str(err)
        except extraction.UnsafeArchive as err:
            outcome.status, outcome.message = "failed", f"not extracted: {err}"
        except OSError as err:
            where = err.filename or os.path.join(folder, spec.path)
            outcome.status = "failed"
            outcome.message = f"{err.strerror or err} (errno {err.errno}): {where}"
        self.on_done(outcome)
        return outcome

    # ---- one file ------------------------------------------------------------------------

    def _paths(self, folder: str, spec: FileSpec) -> tuple[str, str]:
        dest = os.path.join(folder, *spec.path.split("/"))
        part = os.path.join(folder, STATE_DIR, PARTIAL_DIR, *spec.path.split("/")) + ".part"
        return dest, part

    def _check_destination(self, folder: str, dest: str, spec: FileSpec) -> None:
        """Refuse a destination reached through a link out of `folder` (judged on the nearest
        folder that exists, so nothing is created outside first) or that is itself a link."""
        real_folder = os.path.realpath(folder)
        parent = os.path.dirname(dest)
        while not os.path.lexists(parent) and len(parent) > len(folder):
            parent = os.path.dirname(parent)
        parent = os.path.realpath(parent)
        if os.path.commonpath([parent, real_folder]) != real_folder:
            raise FetchError(f"{spec.path}: its folder resolves outside {folder} (a link on the "
                             f"way); not written")
        if os.path.islink(dest):
            raise FetchError(f"{spec.path} is a symbolic link; not replaced")

    def _fetch(self, folder: str, spec: FileSpec, outcome: Outcome) -> None:
        dest, part = self._paths(folder, spec)
        state = self.state(folder)
        if spec.extract is not None and not os.path.lexists(dest):
            done = state.get("extracted", spec.path)
            if done and done.get("archive_removed") and self._matches_pins(spec, done):
                outcome.message = "already extracted (archive removed)"
                return
        self._check_destination(folder, dest, spec)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.lexists(dest):
            verdict = self._verify_present(folder, spec, dest, part, state)
            if verdict is None:
                outcome.message = "verified"
                return
            outcome.message = verdict
        attempts = 1 + max(0, self.retries)
        restarted = False
        for attempt in range(attempts):
            try:
                digests, outcome.resumed_from, received = self._download(spec, part)
                outcome.bytes += received
            except _Restart:
                self._remove(part)
                if restarted:
                    raise FetchError(f"{spec.path}: the server cannot continue the partial "
                                     f"download and restarting did not help") from None
                restarted = True
                continue
            except _Transient as err:
                if attempt + 1 >= attempts:
                    raise FetchError(f"{err} (run fetch again to resume)") from None
                time.sleep(self.retry_wait * (2 ** attempt))
                continue
            problem = _mismatch(spec, digests, digests.declared)
            if problem:
                self._remove(part)
                if outcome.resumed_from and not restarted:
                    restarted = True  # the kept prefix may belong to another file: once more
                    continue
                raise FetchError(f"{spec.path}: {problem} (the download was removed)")
            self._check_destination(folder, dest, spec)
            os.replace(part, dest)
            self._remember(state, spec, dest, digests)
            outcome.status = "fetched"
            return
        raise FetchError(f"{spec.path}: no complete download after {attempts} attempts")

    def _matches_pins(self, spec: FileSpec, record: dict) -> bool:
        return all(record.get(k) == getattr(spec, k) for k in ("size", "md5", "sha256")
                   if getattr(spec, k) is not None)

    def _remember(self, state: _FolderState, spec: FileSpec, dest: str, digests: _Digests):
        st = os.stat(dest, follow_symlinks=False)
        state.put("files", spec.path, {
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digests.sha256,
            "md5": digests.md5, "url": spec.url})

    def _verify_present(self, folder, spec, dest, part, state) -> str | None:
        """None when the file in place is verified (and remembered); else why it is fetched
        again, after moving a possibly-truncated copy to the partial path to resume from."""
        st = os.stat(dest, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise FetchError(f"{spec.path} exists and is not a regular file; not replaced")
        record = state.get("files", spec.path)
        if (record and not self.rehash and record.get("size") == st.st_size
                and record.get("mtime_ns") == st.st_mtime_ns
                and self._matches_pins(spec, record)
                and (spec.md5 is None or record.get("md5"))):
            return None
        if spec.size is not None and st.st_size != spec.size:
            reason = f"size {st.st_size} bytes, the manifest pins {spec.size}"
            if st.st_size < spec.size:
                self._to_partial(dest, part)
                return f"{reason}: resuming"
            self._remove(dest)
            return f"{reason}: fetching again"
        declared, total = {}, spec.size
        if spec.md5 is None and spec.sha256 is None:
            declared, total = self._probe(spec)
            if total is not None and st.st_size != total:
                if st.st_size < total:
                    self._to_partial(dest, part)
                    return f"size {st.st_size} bytes, the server has {total}: resuming"
                self._remove(dest)
                return f"size {st.st_size} bytes, the server has {total}: fetching again"
            if total is None and not declared:
                self._to_partial(dest, part)
                return "cannot be verified (no pin, no size from the server): fetching again"
        digests = _hash_file(dest, want_md5=bool(spec.md5 or "md5" in declared))
        problem = _mismatch(spec, digests, declared)
        if problem:
            self._remove(dest)
            return f"{problem}: fetching again"
        self._remember(state, spec, dest, digests)
        return None

    def _probe(self, spec: FileSpec) -> tuple[dict, int | None]:
        """What the server says of the whole file without sending it: (declared digests,
        size), from a HEAD request; ({}, None) when it says nothing usable."""
        try:
            response = self.session().head(self.url(spec), allow_redirects=True,
                                           timeout=self.timeout)
        except requests.RequestException:
            return {}, None
        if response.status_code != 200:
            return {}, None
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        return declared_digests([*response.history, response]), total

    def _to_partial(self, dest: str, part: str) -> None:
        os.makedirs(os.path.dirname(part), exist_ok=True)
        if os.path.lexists(part):
            os.remove(part)
        os.replace(dest, part)

    @staticmethod
    def _remove(path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def _download(self, spec: FileSpec, part: str) -> tuple[_Digests, int, int]:
        """Fetch the rest of `part` (all of it when absent); returns (digests of the whole
        file, the offset resumed from, bytes received)."""
        os.makedirs(os.path.dirname(part), exist_ok=True)
        if os.path.islink(part):
            os.remove(part)
        offset = os.path.getsize(part) if os.path.exists(part) else 0
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        url = self.url(spec)
        try:
            response = self.session().get(url, headers=headers, stream=True,
                                          timeout=self.timeout, allow_redirects=True)
        except requests.Timeout:
            raise _Transient(f"{spec.path}: timed out after {self.timeout:g} s ({url})") from None
        except requests.RequestException as err:
            raise _Transient(f"{spec.path}: cannot connect ({_short(err)}; {url})") from None
        with response:
            declared = declared_digests([*response.history, response])
            status = response.status_code
            if status == 416 and offset:
                _, total = _content_range(response.headers.get("Content-Range"))
                if total == offset:  # the partial is already the whole file
                    digests = _hash_file(part, want_md5=bool(spec.md5 or "md5" in declared))
                    digests.declared = declared
                    return digests, offset, 0
                raise _Restart()
            if status == 206 and offset:
                start, total = _content_range(response.headers.get("Content-Range"))
                if start != offset:
                    raise _Restart()
            elif status == 200:
                offset, total = 0, None
                length = response.headers.get("Content-Length")
                if length and length.isdigit():
                    total = int(length)
            elif status in (429,) or status >= 500:
                raise _Transient(f"{spec.path}: HTTP {status} {response.reason} ({url})")
            else:
                raise FetchError(f"{spec.path}: HTTP {status} {response.reason} ({url})")
            if spec.size is not None and total is not None and total != spec.size:
                raise FetchError(f"{spec.path}: the server has {total} bytes, the manifest pins "
                                 f"{spec.size} ({url})")
            expected = spec.size if spec.size is not None else total
            if expected is not None:
                self.on_total(expected - offset)  # the progress bar's total grows per download
            return self._receive(spec, part, response, offset, expected, declared, url)

    def _receive(self, spec, part, response, offset, expected, declared, url):
        want_md5 = bool(spec.md5 or "md5" in declared)
        sha, md5 = hashlib.sha256(), hashlib.md5() if want_md5 else None
        if offset:  # the kept prefix is read once, so the digests cover the whole file
            fd = os.open(part, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as handle:
                for block in iter(lambda: handle.read(CHUNK), b""):
                    sha.update(block)
                    if md5 is not None:
                        md5.update(block)
        cap = expected if expected is not None else spec.max_bytes
        received = 0
        mode = "ab" if offset else "wb"
        try:
            with open(part, mode) as out:
                for block in response.raw.stream(CHUNK, decode_content=False):
                    if self.stopping.is_set():
                        raise FetchError(f"{spec.path}: interrupted after {offset + received} "
                                         f"bytes (kept, to resume)")
                    if offset + received + len(block) > cap:
                        raise FetchError(f"{spec.path}: the server sent more than "
                                         f"{cap} bytes ({url}); stopped")
                    out.write(block)
                    sha.update(block)
                    if md5 is not None:
                        md5.update(block)
                    received += len(block)
                    self.on_bytes(len(block))
        except (requests.RequestException, urllib3.exceptions.HTTPError) as err:
            if expected is not None:  # what will not come in this attempt leaves the total
                self.on_total(-(expected - offset - received))
            got = offset + received
            of = f" of {expected}" if expected is not None else ""
            reason = _short(err)
            why = "" if reason.startswith(("IncompleteRead", "Connection broken")) \
                else f" ({reason})"  # a cut stream: the byte counts say it all
            raise _Transient(f"{spec.path}: connection lost after {got}{of} bytes{why}") \
                from None
        size = offset + received
        if expected is not None and size < expected:
            self.on_total(-(expected - size))
            raise _Transient(f"{spec.path}: connection closed after {size} of {expected} bytes")
        return _Digests(size, sha.hexdigest(), md5.hexdigest() if md5 else None,
                        declared), offset, received

    # ---- extraction ----------------------------------------------------------------------

    def _extract(self, folder: str, spec: FileSpec, outcome: Outcome) -> None:
        """Extract the (verified) archive unless this very archive was extracted before."""
        dest, _ = self._paths(folder, spec)
        state = self.state(folder)
        record = state.get("files", spec.path)
        done = state.get("extracted", spec.path)
        if not os.path.exists(dest):
            return  # removed after an earlier extraction (checked in _fetch)
        if done and record and done.get("sha256") == record.get("sha256") \
                and done.get("into") == spec.extract.into and outcome.status == "skipped":
            self._maybe_remove_archive(state, spec, dest, done)
            return
        target = os.path.join(folder, *[p for p in spec.extract.into.split("/") if p])
        files, size = extraction.extract(dest, target,
                                         strip_components=spec.extract.strip_components,
                                         limits=spec.extract.limits)
        done = {"into": spec.extract.into, "files": files, "bytes": size,
                "size": record.get("size") if record else os.path.getsize(dest),
                "sha256": record.get("sha256") if record else None,
                "md5": record.get("md5") if record else None}
        state.put("extracted", spec.path, done)
        outcome.extracted = True
        self._maybe_remove_archive(state, spec, dest, done)

    def _maybe_remove_archive(self, state, spec, dest, done) -> None:
        if self.remove_archives and os.path.exists(dest):
            os.remove(dest)
            state.put("extracted", spec.path, {**done, "archive_removed": True})
            state.put("files", spec.path, None)


def _short(err: BaseException) -> str:
    """The innermost reason of a requests/urllib3 error, on one line."""
    seen = err
    while True:
        inner = getattr(seen, "reason", None) or seen.__context__ or seen.__cause__
        if inner is None or inner is seen or not isinstance(inner, BaseException):
            break
        seen = inner
    text = str(seen).splitlines()[0] if str(seen) else type(seen).__name__
    return text[:200]
