"""Downloading files over HTTP(S) into a local folder: parallel, resumable, verified, idempotent.

One `FileSpec` names a URL, where its file goes (relative to a folder), what is known of it
(`size`, `md5`, `sha256`: the publishers' pins) and, for an archive the reader needs unpacked,
how to extract it (`fetch/extract.py`). `Downloader.fetch_all` fetches a list of them on a thread
pool and returns one `Outcome` per file; one file's failure never stops the others, and its
message is one line.

How each file is handled:

- **Idempotent.** A file already in place is skipped once verified: against its pins (size,
  md5, sha256), or, with none, against what the server declares (its size, and the digest some
  servers send: Google Cloud Storage's `x-goog-hash` md5, the Hugging Face Hub's
  `X-Linked-Etag`, the sha256 of an LFS file). What was verified is remembered in the folder's
  bookkeeping (`fetch/folder_state.py`), so a later run trusts a file whose size and
  modification time are unchanged without reading it again (`rehash=True` reads everything
  again). A file that fails its pins is fetched again. The size a server announces for a file
  nothing pins is remembered there too, as soon as its download starts, so that
  `fetch --dry_run` knows it offline.
- **Resumable.** Bytes go to `<folder>/.proactivebench-fetch/partial/<path>.part`; a dropped
  connection keeps them, and the next attempt (a retry in this run, or the next run) asks for
  the rest with an HTTP `Range` request. A server that ignores the range (200) restarts the
  file; a partial that turns out not to be a prefix of the file (wrong digest at the end) is
  removed and the file fetched from zero once more.
- **Verified.** The digests are computed while the bytes stream in (the resumed prefix is read
  once first); the file is renamed to its final name only when its size and every known digest
  agree. A server that sends more bytes than the pinned or announced size is cut off.
- **Bounded.** Memory holds one 1 MiB block per running download; `Accept-Encoding: identity`
  and reading the raw stream keep a server's transfer compression from altering the bytes (a
  server that compresses anyway gets its bytes checked by the pins, and nothing unpinned is
  kept from it). Time is bounded too: connecting and every read by urllib3's timeouts
  (`timeout`), a body that receives less than `min_speed` bytes a second over any `timeout`
  seconds by a check between its reads, and the headers by a deadline of `timeout` seconds (a
  server trickling them forever defeats a per-read timeout); a cut request is retried from
  where it stopped like a dropped one.
- **Retried.** urllib3's `Retry` retries a connection error, a timeout and an HTTP 429/5xx
  with exponential backoff (`retry_wait`) and the server's `Retry-After`; a body cut short
  resumes on the same count, so `retries` bounds every kind of retry of one file together.
- **Honest.** A reply that cannot be the file is refused and never kept: an HTML page where a
  data file is asked for, a body with no length at all (neither Content-Length nor chunked
  encoding, so a cut connection looks like the end) that nothing pins, a redirect from https
  down to http, a Content-Length or Content-Range that is not a plain number. Redirects are
  followed by `requests` (at most 30; credentials of the URL never go to another host).
- **Safe.** A destination is never written through a link: a final path that is a symbolic link,
  or whose folder resolves outside the target folder, is a failure for that file; the same holds
  for fetch's own folder (`.proactivebench-fetch/`), and a partial file that is not a regular
  file (a FIFO, a folder) is a failure naming it, never opened.
- **Stoppable.** `stop()` (Ctrl-C, SIGTERM) cuts every connection at once; what was received
  stays in its partial file, an extraction removes its temporary file, and such outcomes are
  "interrupted", not failures.
- **Testable.** `mirror` fetches `https://HOST/PATH` from `MIRROR/HOST/PATH` instead (a local
  server in the tests, or a cache that mirrors several hosts).

Progress is reported through two callbacks (bytes received, bytes expected), which the command
connects to a tqdm bar, and a third names the long steps that receive nothing (verifying a copy
in place, extracting an archive). This module imports nothing of the project outside the core
(it is part of it); its one third-party dependency is `requests` (and its urllib3).
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import hashlib
import os
import re
import socket
import stat
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

from proactivebench_builder.core.phases import human_size
from proactivebench_builder.fetch import extract as extraction
from proactivebench_builder.fetch.folder_state import (
    STATE_DIR, FolderState, destination_paths, file_kind, matches_pins, verified_before)

CHUNK = 1 << 20
DEFAULT_MAX_BYTES = 256 << 30  # the cap for a file whose size nobody announces
MIN_SPEED = 1024  # bytes a second, over any `timeout` seconds, below which a request is cut
USER_AGENT = "proactivebench-builder-fetch/1"
MD5_PATTERN = re.compile(r"^[0-9a-f]{32}$")
SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
NUMBER = re.compile(r"[0-9]{1,19}")  # a header's byte count: ASCII digits, at most 2^63
HTML_SUFFIXES = (".html", ".htm")


class FetchError(Exception):
    """One file could not be fetched; the message is one line."""


class _Dropped(FetchError):
    """The body stopped coming (connection lost or closed, too slow): resumed by a retry.
    `retry` is urllib3's Retry as the request left it (the file's retries so far)."""

    def __init__(self, message: str, retry: Retry):
        super().__init__(message)
        self.retry = retry


class _Interrupted(FetchError):
    """The download was stopped (`Downloader.stop`); what was received is kept to resume."""


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

    @property
    def pinned(self) -> bool:
        return self.size is not None or bool(self.md5 or self.sha256)


@dataclass
class Outcome:
    folder: str
    path: str
    status: str                     # "fetched", "skipped", "failed" or "interrupted"
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
    note: str = ""                  # what the server did that may explain a mismatch


def mirrored(url: str, mirror: str | None) -> str:
    """`url` as fetched through `mirror`: https://HOST/PATH?Q -> MIRROR/HOST/PATH?Q."""
    if not mirror:
        return url
    parts = urllib.parse.urlsplit(url)
    tail = parts.netloc + parts.path + (f"?{parts.query}" if parts.query else "")
    return mirror.rstrip("/") + "/" + tail


def header_number(value: str | None) -> int | None:
    """A byte count of a header (Content-Length), or None when it is not plain ASCII digits
    ('²' is a digit to str.isdigit() but not to int(); 5000 digits exceed int()'s limit)."""
    value = (value or "").strip()
    return int(value) if NUMBER.fullmatch(value) else None


def content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total) of a Content-Range header ('bytes 10-99/100', 'bytes */100');
    (None, None) for anything else."""
    match = re.fullmatch(r"\s*bytes\s+(?:([0-9]{1,19})-([0-9]{1,19})|\*)/([0-9]{1,19}|\*)\s*",
                         value or "")
    if not match or (match[1] is not None and int(match[2]) < int(match[1])):
        return None, None
    start = int(match[1]) if match[1] is not None else None
    total = int(match[3]) if match[3] != "*" else None
    return start, total


def downgrade(responses) -> str | None:
    """The first URL of a redirect chain reached over http after https, or None."""
    secure = False
    for response in responses:
        scheme = urllib.parse.urlsplit(response.url).scheme.lower()
        if scheme == "https":
            secure = True
        elif secure:
            return response.url
    return None


def declared_digests(responses) -> dict:
    """The whole-file digests servers announce in their headers, from a response and the
    redirects before it: Google Cloud Storage's `x-goog-hash: crc32c=...,md5=<base64>` (absent
    for composite objects) and the Hub's `X-Linked-Etag: "<sha256>"` (LFS files). A value that
    is not a digest is ignored."""
    found = {}
    for response in responses:
        headers = response.headers
        for item in headers.get("x-goog-hash", "").split(","):
            key, _, value = item.strip().partition("=")
            if key == "md5" and value:
                try:
                    digest = base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    continue
                if len(digest) == 16:
                    found["md5"] = digest.hex()
        etag = headers.get("x-linked-etag", "").strip().strip('"').lower()
        if etag.startswith("w/"):
            etag = ""
        if SHA256_PATTERN.match(etag):
            found["sha256"] = etag
    return found


def _hash_file(path: str, want_md5: bool, stopping: threading.Event | None = None) -> _Digests:
    sha, md5 = hashlib.sha256(), hashlib.md5() if want_md5 else None
    size = 0
    with _open_regular(path, os.O_RDONLY) as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            if stopping is not None and stopping.is_set():
                raise _Interrupted(f"{os.path.basename(path)}: interrupted while reading it")
            sha.update(block)
            if md5 is not None:
                md5.update(block)
            size += len(block)
    return _Digests(size, sha.hexdigest(), md5.hexdigest() if md5 else None)


def _open_regular(path: str, flags: int, mode: int = 0o644):
    """A file object of the regular file `path`, opened without following a link or blocking
    (a FIFO would wait for a peer forever); FetchError naming what it is otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as err:
        kinds = {errno.ELOOP: "a symbolic link", errno.ENXIO: "a named pipe (FIFO)"}
        if err.errno in kinds:  # O_NOFOLLOW met a link; a FIFO has no reader
            raise FetchError(f"{path} is {kinds[err.errno]}, not a file of fetch; remove "
                             f"it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FetchError(f"{path} is {file_kind(st.st_mode)}, not a file of fetch; remove it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb" if (flags & os.O_ACCMODE) == os.O_RDONLY else
                     ("ab" if flags & os.O_APPEND else "wb"))


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


# ---- what urllib3's timeouts and Retry do not bound ---------------------------------------------

TRANSIENT_STATUSES = frozenset({429, *range(500, 1000)})  # retried (Retry-After honoured)
_current = threading.local()  # the _Request this thread is making, for its connection


class _Stopped(Exception):
    """A wait between retries ended by `Downloader.stop`."""


class _Retry(Retry):
    """urllib3's Retry, whose waits end at once when the downloads are stopped and never last
    longer than its backoff_max, whatever a server's Retry-After says."""

    stopping: threading.Event | None = None

    def new(self, **kwargs):
        retry = super().new(**kwargs)
        retry.stopping = self.stopping
        return retry

    def sleep(self, response=None) -> None:
        wait = None
        if response is not None and self.respect_retry_after_header:
            try:
                wait = self.get_retry_after(response)
            except urllib3.exceptions.InvalidHeader:
                wait = None  # a Retry-After that is no time: the usual backoff
        if wait is None:
            wait = self.get_backoff_time()
        if self.stopping is not None and self.stopping.wait(min(wait, self.backoff_max)):
            raise _Stopped()


class _Request:
    """One request's socket, shut down (whatever read it is blocked in ends at once) by
    `Downloader.stop`, or when the response's headers take longer than `timeout`: urllib3's
    read timeout bounds each read, so a server sending one header byte a second would hold a
    request forever (test_headers_trickling_forever_are_cut_too). A body is checked by
    `_receive` between its reads."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.lock = threading.Lock()
        self.sock = None
        self.reason: str | None = None  # "slow" or "stopped" once cut

    def attach(self, sock) -> None:
        with self.lock:
            self.sock = sock
            if self.reason != "stopped":
                self.reason = None  # urllib3's next attempt: not cut yet
                return
        self._shutdown()

    def cut(self, reason: str) -> None:
        with self.lock:
            if self.reason != "stopped":
                self.reason = reason
        self._shutdown()

    def _shutdown(self) -> None:
        sock = self.sock
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError):
            pass  # already closed


class _BoundedHeaders:
    """A connection that tells the current _Request its socket, and cuts it when the headers
    have not all come within the request's timeout."""

    def getresponse(self, *args, **kwargs):
        request = getattr(_current, "request", None)
        if request is None or getattr(self, "sock", None) is None:
            return super().getresponse(*args, **kwargs)
        request.attach(self.sock)
        deadline = threading.Timer(request.timeout, request.cut, ("slow",))
        deadline.daemon = True
        deadline.start()
        try:
            response = super().getresponse(*args, **kwargs)
        finally:
            deadline.cancel()
        if request.reason is not None:  # what came before the cut is no answer (urllib3
            response.close()            # retries it as a read error)
            raise urllib3.exceptions.ProtocolError(f"cut: {request.reason}")
        return response


class _HTTPConnection(_BoundedHeaders, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_BoundedHeaders, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _Adapter(HTTPAdapter):
    """requests' adapter on connections that bound their headers (SOCKS proxies keep their own
    connections, and only the library's timeouts)."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy, **kwargs):
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = dict(_POOLS)
        return manager


class Downloader:
    """Fetches `FileSpec`s into folders; see the module docstring."""

    def __init__(self, *, mirror: str | None = None, retries: int = 3, retry_wait: float = 2.0,
                 timeout: float = 60.0, min_speed: int = MIN_SPEED, rehash: bool = False,
                 remove_archives: bool = False, reserved: tuple[str, ...] = (STATE_DIR,),
                 on_bytes=None, on_total=None, on_done=None, on_phase=None):
        self.mirror = mirror
        self.retries = retries
        self.retry_wait = retry_wait
        self.timeout = timeout
        self.min_speed = min_speed
        self.rehash = rehash
        self.remove_archives = remove_archives
        self.reserved = tuple(reserved)  # top-level names of a folder no archive may write
        self.on_bytes = on_bytes or (lambda n: None)
        self.on_total = on_total or (lambda n: None)
        self.on_done = on_done or (lambda outcome: None)  # called as each file finishes
        # (folder, path, what): a long step of a file starts that receives nothing (reading a
        # copy in place to verify it, extracting an archive)
        self.on_phase = on_phase or (lambda folder, path, what: None)
        self._local = threading.local()
        self._states: dict[str, FolderState] = {}
        self._states_lock = threading.Lock()
        self._planned: dict[str, set[str]] = {}  # folder -> the paths fetched into it
        self._requests: set[_Request] = set()  # the requests running, for stop()
        self._requests_lock = threading.Lock()
        self.stopping = threading.Event()

    # ---- plumbing ------------------------------------------------------------------------

    def retry(self) -> _Retry:
        """A file's retries, urllib3's: after a connection error, a timeout or an HTTP 429/5xx
        (its Retry-After honoured), with exponential backoff; a body cut short counts as one
        too (`_fetch` resumes it with a Range request)."""
        retry = _Retry(total=self.retries, backoff_factor=self.retry_wait,
                       status_forcelist=TRANSIENT_STATUSES, raise_on_status=False)
        retry.stopping = self.stopping
        return retry

    def session(self, retry: Retry) -> requests.Session:
        """This thread's session (a requests.Session is not shared across threads), its next
        request retried as `retry` says."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
            adapter = _Adapter()
            for prefix in ("http://", "https://"):  # one adapter: a redirect keeps its retries
                session.mount(prefix, adapter)
            self._local.session, self._local.adapter = session, adapter
        self._local.adapter.max_retries = retry  # requests takes retries per adapter only
        return session

    def state(self, folder: str) -> FolderState:
        with self._states_lock:
            if folder not in self._states:
                self._states[folder] = FolderState(folder)
            return self._states[folder]

    def url(self, spec: FileSpec) -> str:
        return mirrored(spec.url, self.mirror)

    def stop(self) -> None:
        """Stop every download now: running requests are cut (their partial files kept),
        waits between retries end, extractions stop at their next block, queued files never
        start."""
        self.stopping.set()
        with self._requests_lock:
            running = list(self._requests)
        for request in running:
            request.cut("stopped")

    @contextlib.contextmanager
    def _watched(self):
        """The _Request of the block's requests, which stop() and the headers' deadline cut."""
        request = _Request(self.timeout)
        with self._requests_lock:
            self._requests.add(request)
        if self.stopping.is_set():
            request.cut("stopped")
        _current.request = request
        try:
            yield request
        finally:
            _current.request = None
            with self._requests_lock:
                self._requests.discard(request)

    def _cut_short(self, spec: FileSpec, request: _Request, got: int, retry: Retry):
        """The failure of a request cut by stop() or for its slowness, after `got` bytes."""
        if request.reason == "stopped":
            return _Interrupted(f"{spec.path}: interrupted after {got} bytes (kept, to resume)")
        return _Dropped(f"{spec.path}: slower than {self.min_speed} bytes a second for "
                        f"{self.timeout:g} s, after {got} bytes", retry)

    # ---- the public entry points ---------------------------------------------------------

    def fetch_all(self, jobs: list[tuple[str, FileSpec]], workers: int = 4) -> list[Outcome]:
        """Fetch every (folder, spec); the outcomes come back in the order of `jobs`."""
        for folder, spec in jobs:
            self._planned.setdefault(folder, set()).add(spec.path)
        if workers <= 1 or len(jobs) <= 1:
            try:
                return [self.fetch(folder, spec) for folder, spec in jobs]
            except BaseException:
                self.stop()
                raise
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch")
        try:
            futures = [pool.submit(self.fetch, folder, spec) for folder, spec in jobs]
            return [future.result() for future in futures]
        except BaseException:
            # Ctrl-C, SIGTERM (or a bug): the running downloads are cut at once, keeping their
            # partial files for the next run; the queued ones never start.
            self.stop()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def fetch(self, folder: str, spec: FileSpec) -> Outcome:
        """Fetch (or skip) one file, then extract it when its spec says so. Never raises for a
        failure of this file: it is the outcome's one-line message."""
        outcome = Outcome(folder, spec.path, "skipped")
        try:
            if self.stopping.is_set():
                raise _Interrupted(f"{spec.path}: not started (stopped)")
            self._fetch(folder, spec, outcome)
            if spec.extract is not None:
                self._extract(folder, spec, outcome)
        except _Interrupted as err:
            outcome.status, outcome.message = "interrupted", str(err)
        except extraction.Interrupted:
            outcome.status, outcome.message = "interrupted", f"{spec.path}: extraction stopped"
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
        return destination_paths(folder, spec)

    def _check_inside(self, folder: str, path: str, label: str) -> None:
        """Refuse a path reached through a link out of `folder` (judged on the nearest folder
        that exists, so nothing is created outside first)."""
        real_folder = os.path.realpath(folder)
        parent = os.path.dirname(path)
        while not os.path.lexists(parent) and len(parent) > len(folder):
            parent = os.path.dirname(parent)
        parent = os.path.realpath(parent)
        if os.path.commonpath([parent, real_folder]) != real_folder:
            raise FetchError(f"{label}: its folder resolves outside {folder} (a link on the "
                             f"way); not written")

    def _check_destination(self, folder: str, dest: str, spec: FileSpec) -> None:
        """Refuse a destination reached through a link out of `folder` or that is itself a
        link; the same for the partial file's folder."""
        self._check_inside(folder, dest, spec.path)
        if os.path.islink(dest):
            raise FetchError(f"{spec.path} is a symbolic link; not replaced")
        _, part = self._paths(folder, spec)
        self._check_inside(folder, part, f"{spec.path}: fetch's partial file")

    def _make_folder(self, path: str, spec: FileSpec) -> None:
        try:
            os.makedirs(path, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise FetchError(f"{spec.path}: cannot make the folder {path}: a file is in the "
                             f"way") from None

    def _fetch(self, folder: str, spec: FileSpec, outcome: Outcome) -> None:
        dest, part = self._paths(folder, spec)
        state = self.state(folder)
        if spec.extract is not None and not os.path.lexists(dest):
            done = state.get("extracted", spec.path)
            if done and done.get("archive_removed") and matches_pins(spec, done):
                outcome.message = "already extracted (archive removed)"
                return
        self._check_destination(folder, dest, spec)
        self._make_folder(os.path.dirname(dest), spec)
        if os.path.lexists(dest):
            verdict = self._verify_present(folder, spec, dest, part, state)
            if verdict is None:
                outcome.message = "verified"
                return
            outcome.message = verdict
        retry = self.retry()
        restarted = False
        while True:
            try:
                digests, outcome.resumed_from, received = self._download(spec, part, state,
                                                                         retry)
                outcome.bytes += received
            except _Restart:  # not an attempt of its own: the same request from zero
                self._remove(part)
                if restarted:
                    raise FetchError(f"{spec.path}: the server cannot continue the partial "
                                     f"download and restarting did not help") from None
                restarted = True
                continue
            except _Dropped as dropped:
                retry = self._retry_after(spec, dropped)
                continue
            problem = _mismatch(spec, digests, digests.declared)
            if problem:
                self._remove(part)
                if outcome.resumed_from and not restarted:
                    restarted = True  # the kept prefix may belong to another file: once more
                    continue
                raise FetchError(f"{spec.path}: {problem}{digests.note} (the download was "
                                 f"removed)")
            self._check_destination(folder, dest, spec)
            os.replace(part, dest)
            self._remember(state, spec, dest, digests)
            outcome.status = "fetched"
            return

    def _retry_after(self, spec: FileSpec, dropped: _Dropped) -> Retry:
        """The Retry of the attempt resuming a body cut short, once urllib3's backoff has
        waited; FetchError when the file's retries are spent."""
        try:
            retry = dropped.retry.increment(
                "GET", self.url(spec), error=urllib3.exceptions.ProtocolError(str(dropped)))
        except (urllib3.exceptions.MaxRetryError, urllib3.exceptions.ProtocolError):
            raise FetchError(f"{dropped} (run fetch again to resume)") from None
        try:
            retry.sleep()
        except _Stopped:
            raise _Interrupted(f"{spec.path}: stopped before retrying") from None
        return retry

    def _remember(self, state: FolderState, spec: FileSpec, dest: str, digests: _Digests):
        st = os.stat(dest, follow_symlinks=False)
        state.put("files", spec.path, {
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digests.sha256,
            "md5": digests.md5, "url": spec.url})

    def _verify_present(self, folder, spec, dest, part, state) -> str | None:
        """None when the file in place is verified (and remembered); else why it is fetched
        again, after moving a possibly-truncated copy to the partial path to resume from."""
        st = os.stat(dest, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise FetchError(f"{spec.path} exists and is {file_kind(st.st_mode)}; not replaced")
        record = state.get("files", spec.path)
        if not self.rehash and verified_before(spec, record, st):
            return None
        if record and not (spec.md5 or spec.sha256) and record.get("url") != spec.url:
            self._remove(dest)  # fetched from another URL: another file, whatever its size
            return "fetched from another URL before: fetching again"
        if spec.size is not None and st.st_size != spec.size:
            reason = f"size {st.st_size} bytes, the manifest pins {spec.size}"
            if st.st_size < spec.size:
                self._to_partial(dest, part, spec)
                return f"{reason}: resuming"
            self._remove(dest)
            return f"{reason}: fetching again"
        declared, total = {}, spec.size
        if spec.md5 is None and spec.sha256 is None:
            declared, total = self._probe(spec)
            if total is not None and st.st_size != total:
                if st.st_size < total:
                    self._to_partial(dest, part, spec)
                    return f"size {st.st_size} bytes, the server has {total}: resuming"
                self._remove(dest)
                return f"size {st.st_size} bytes, the server has {total}: fetching again"
            if total is None and not declared:
                self._to_partial(dest, part, spec)
                return "cannot be verified (no pin, no size from the server): fetching again"
        self.on_phase(folder, spec.path,
                      f"verifying the copy in place ({human_size(st.st_size)})")
        digests = _hash_file(dest, want_md5=bool(spec.md5 or "md5" in declared),
                             stopping=self.stopping)
        problem = _mismatch(spec, digests, declared)
        if problem:
            self._remove(dest)
            return f"{problem}: fetching again"
        self._remember(state, spec, dest, digests)
        return None

    def _probe(self, spec: FileSpec) -> tuple[dict, int | None]:
        """What the server says of the whole file without sending it: (declared digests,
        size), from a HEAD request; ({}, None) when it says nothing usable."""
        with self._watched():
            try:
                response = self.session(self.retry()).head(
                    self.url(spec), allow_redirects=True, timeout=self.timeout)
            except (requests.RequestException, ValueError, _Stopped):  # ValueError: _download
                response = None
        if self.stopping.is_set():
            raise _Interrupted(f"{spec.path}: stopped while asking the server")
        if response is None or response.status_code != 200 or \
                downgrade([*response.history, response]):
            return {}, None
        total = header_number(response.headers.get("Content-Length"))
        return declared_digests([*response.history, response]), total

    def _to_partial(self, dest: str, part: str, spec: FileSpec) -> None:
        self._make_folder(os.path.dirname(part), spec)
        if os.path.lexists(part):
            self._remove_partial(part)
        os.replace(dest, part)

    def _remove_partial(self, part: str) -> None:
        """Remove a partial file of fetch's; anything else in its place is named, not
        removed."""
        st = os.lstat(part)
        if not stat.S_ISREG(st.st_mode):
            raise FetchError(f"{part} is {file_kind(st.st_mode)}, not a partial download of "
                             f"fetch; remove it")
        os.remove(part)

    @staticmethod
    def _remove(path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def _download(self, spec: FileSpec, part: str, state: FolderState,
                  retry: Retry) -> tuple[_Digests, int, int]:
        """Fetch the rest of `part` (all of it when absent); returns (digests of the whole
        file, the offset resumed from, bytes received)."""
        self._make_folder(os.path.dirname(part), spec)
        offset = 0
        if os.path.lexists(part):
            st = os.lstat(part)
            if not stat.S_ISREG(st.st_mode):  # a link is not followed, a FIFO never opened
                raise FetchError(f"{spec.path}: {part} is {file_kind(st.st_mode)}, not a partial "
                                 f"download of fetch; remove it")
            offset = st.st_size
            if offset > (spec.size if spec.size is not None else spec.max_bytes):
                os.remove(part)  # longer than the file can be: not a prefix of it
                offset = 0
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        url = self.url(spec)
        with self._watched() as request:
            try:
                response = self.session(retry).get(url, headers=headers, stream=True,
                                                   timeout=self.timeout, allow_redirects=True)
            except _Stopped:
                raise _Interrupted(f"{spec.path}: stopped before retrying") from None
            except requests.TooManyRedirects:
                raise FetchError(f"{spec.path}: too many redirects (more than 30; {url})") \
                    from None
            except (requests.exceptions.InvalidSchema, requests.exceptions.InvalidURL,
                    requests.exceptions.MissingSchema) as err:
                raise FetchError(f"{spec.path}: redirected to a URL that is not http(s) "
                                 f"({_short(err)}; {url})") from None
            except requests.RequestException as err:  # urllib3 retried it as far as allowed
                raise self._unanswered(spec, err, request, offset, url) from None
            except ValueError as err:  # requests decodes a Location header as UTF-8, strictly
                raise FetchError(f"{spec.path}: the server's answer cannot be followed "
                                 f"({type(err).__name__}: {_short(err)}; {url})") from None
            with response:
                return self._answer(spec, part, response, offset, url, request, state, retry)

    def _unanswered(self, spec, err, request, offset, url) -> FetchError:
        """The one-line failure of a request that got no answer, its retries spent."""
        again = " (run fetch again to resume)"
        if request.reason:
            failure = self._cut_short(spec, request, offset, None)
            return failure if isinstance(failure, _Interrupted) else FetchError(
                f"{failure}{again}")
        if _caused_by(err, urllib3.exceptions.TimeoutError) and \
                not _caused_by(err, urllib3.exceptions.NewConnectionError):
            return FetchError(f"{spec.path}: timed out after {self.timeout:g} s ({url}){again}")
        return FetchError(f"{spec.path}: cannot connect ({_short(err)}; {url}){again}")

    def _answer(self, spec, part, response, offset, url, request, state, retry):
        """Judge the response's status and headers, then receive its body."""
        chain = [*response.history, response]
        declared = declared_digests(chain)
        status = response.status_code
        lowered = downgrade(chain)
        if lowered:
            raise FetchError(f"{spec.path}: redirected from https down to http ({lowered}); "
                             f"not fetched")
        if status == 416 and offset:
            _, total = content_range(response.headers.get("Content-Range"))
            if total == offset:  # the partial is already the whole file
                digests = _hash_file(part, want_md5=bool(spec.md5 or "md5" in declared),
                                     stopping=self.stopping)
                digests.declared = declared
                return digests, offset, 0
            raise _Restart()
        if status == 206 and offset:
            start, total = content_range(response.headers.get("Content-Range"))
            if start != offset:
                raise _Restart()
        elif status == 200:
            offset, total = 0, header_number(response.headers.get("Content-Length"))
        elif status in TRANSIENT_STATUSES:  # urllib3 retried it as far as allowed
            raise FetchError(f"{spec.path}: HTTP {status} {response.reason} ({url}) (run fetch "
                             f"again to resume)")
        else:
            raise FetchError(f"{spec.path}: HTTP {status} {response.reason} ({url})")
        kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind == "text/html" and not spec.path.lower().endswith(HTML_SUFFIXES):
            raise FetchError(f"{spec.path}: the server answered an HTML page (Content-Type: "
                             f"text/html), not the file ({url}); not kept")
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        note = ""
        if encoding not in ("", "identity"):
            note = f" (the server sent it with Content-Encoding: {encoding})"
            if not (spec.pinned or declared):
                raise FetchError(f"{spec.path}: the server sent it with Content-Encoding: "
                                 f"{encoding}, though asked not to, and nothing pins the file, "
                                 f"so which bytes are the file cannot be told ({url}); not kept")
        if spec.size is not None and total is not None and total != spec.size:
            raise FetchError(f"{spec.path}: the server has {total} bytes, the manifest pins "
                             f"{spec.size}{note} ({url})")
        expected = spec.size if spec.size is not None else total
        if spec.size is None and total is not None:
            state.remember_size(spec, total)
        if expected is None and not getattr(response.raw, "chunked", False) and \
                not (spec.md5 or spec.sha256 or declared):
            raise FetchError(f"{spec.path}: the server sent no length (neither Content-Length "
                             f"nor chunked encoding) and nothing pins the file, so a cut "
                             f"connection cannot be told from its end ({url}); not kept")
        if expected is not None:
            self.on_total(expected - offset)  # the progress bar's total grows per download
        retry = getattr(response.raw, "retries", None) or retry  # as urllib3 left it
        digests, offset, received = self._receive(spec, part, response, offset, expected,
                                                  declared, url, request, retry)
        digests.note = note
        return digests, offset, received

    def _receive(self, spec, part, response, offset, expected, declared, url, request, retry):
        want_md5 = bool(spec.md5 or "md5" in declared)
        sha, md5 = hashlib.sha256(), hashlib.md5() if want_md5 else None
        if offset:  # the kept prefix is read once, so the digests cover the whole file
            with _open_regular(part, os.O_RDONLY) as handle:
                for block in iter(lambda: handle.read(CHUNK), b""):
                    sha.update(block)
                    if md5 is not None:
                        md5.update(block)
        cap = expected if expected is not None else spec.max_bytes
        received = 0
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if offset else os.O_TRUNC)
        oversent = False
        read = getattr(response.raw, "read1", None) or response.raw.read  # urllib3 < 2.1
        # the speed floor: urllib3's read timeout bounds a silence, not a trickle
        window_start, window_bytes = time.monotonic(), 0
        try:
            with _open_regular(part, flags) as out:
                while not request.reason:
                    # read1: what the socket has (at most CHUNK), so progress is counted as it
                    # comes and a cut connection ends the read at once
                    block = read(CHUNK, decode_content=False)
                    if not block:
                        break
                    if offset + received + len(block) > cap:
                        oversent = True
                        raise FetchError(f"{spec.path}: the server sent more than "
                                         f"{cap} bytes ({url}); stopped, nothing kept")
                    out.write(block)
                    sha.update(block)
                    if md5 is not None:
                        md5.update(block)
                    received += len(block)
                    self.on_bytes(len(block))
                    window_bytes += len(block)
                    elapsed = time.monotonic() - window_start
                    if elapsed >= self.timeout:
                        if window_bytes < self.min_speed * elapsed:
                            request.cut("slow")
                        window_start, window_bytes = time.monotonic(), 0
        except (requests.RequestException, urllib3.exceptions.HTTPError) as err:
            if expected is not None:  # what will not come in this attempt leaves the total
                self.on_total(-(expected - offset - received))
            got = offset + received
            if request.reason:
                raise self._cut_short(spec, request, got, retry) from None
            of = f" of {expected}" if expected is not None else ""
            reason = _short(err)
            why = "" if reason.startswith(("IncompleteRead", "Connection broken")) \
                else f" ({reason})"  # a cut stream: the byte counts say it all
            raise _Dropped(f"{spec.path}: connection lost after {got}{of} bytes{why}",
                           retry) from None
        except OSError as err:  # writing the partial file: a full disk
            raise FetchError(f"{spec.path}: {err.strerror or err} (errno {err.errno}) writing "
                             f"{part}; the {offset + received} bytes received are kept to "
                             f"resume") from None
        finally:
            if oversent:
                self._remove(part)
        size = offset + received
        if request.reason:  # cut at a block boundary (or a close-delimited body)
            if expected is not None:
                self.on_total(-(expected - size))
            raise self._cut_short(spec, request, size, retry)
        if expected is not None and size < expected:
            self.on_total(-(expected - size))
            raise _Dropped(f"{spec.path}: connection closed after {size} of {expected} bytes",
                           retry)
        return _Digests(size, sha.hexdigest(), md5.hexdigest() if md5 else None,
                        declared), offset, received

    # ---- extraction ----------------------------------------------------------------------

    def _protected(self, folder: str, spec: FileSpec) -> set[tuple[str, ...]]:
        """The paths, relative to the extraction target, no member may write: fetch's own
        names at the folder's top and every file fetched into the folder (the archive itself
        included)."""
        into = tuple(p for p in spec.extract.into.split("/") if p not in ("", "."))
        tops = {(name,) for name in self.reserved}
        paths = {tuple(p.split("/")) for p in self._planned.get(folder, set()) | {spec.path}}
        out = set()
        for path in tops | paths:
            if path[:len(into)] == into and len(path) > len(into):
                out.add(path[len(into):])
        return out

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
        self._check_inside(folder, os.path.join(target, "x"), f"{spec.path}: extraction")
        self.on_phase(folder, spec.path,
                      f"extracting it ({human_size(os.path.getsize(dest))})")
        files, size = extraction.extract(dest, target,
                                         strip_components=spec.extract.strip_components,
                                         limits=spec.extract.limits,
                                         protected=self._protected(folder, spec),
                                         should_stop=self.stopping.is_set)
        done = {"into": spec.extract.into, "files": files, "bytes": size, "url": spec.url,
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


def _caused_by(err: BaseException, kind: type) -> bool:
    """Whether `err`, or an error it wraps, is a `kind`."""
    seen = set()
    while isinstance(err, BaseException) and id(err) not in seen:
        if isinstance(err, kind):
            return True
        seen.add(id(err))
        err = (getattr(err, "reason", None) or (err.args[0] if err.args else None)
               or err.__context__ or err.__cause__)
    return False


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
