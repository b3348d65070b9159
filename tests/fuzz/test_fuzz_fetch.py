"""Property-based fuzzing of fetch's and the lock's parsers of untrusted bytes:

- lock files (`fetch/source_lock.py`): any lines, valid or not, give a list of one-line problems
  and nothing else, and never read outside the folder;
- archives (`fetch/extract.py`): mutated tar, tar.gz and zip bytes extract or raise
  UnsafeArchive, write nothing outside the target, and keep memory bounded;
- HTTP headers (`fetch/download.py`): Content-Length, Content-Range and the digest headers parse
  to a plain number, (start, total) or nothing, never an exception;
- HTTP answers (`Downloader.fetch` against a loopback server saying whatever the strategy
  draws): a file gets its final name only with the pinned bytes; any other outcome is one line;
- manifests' `downloads:` sections (`fetch/plan.py`, a plug-in's too): any YAML-like
  value is a plan or a PlanError.

The suite runs a short budget (PB_FUZZ_EXAMPLES, default 60 per target, derandomized); a longer
run is `PB_FUZZ_EXAMPLES=20000 python -m pytest tests/fuzz/test_fuzz_fetch.py` (fuzz_budget.py).
Every crash found is kept below as an explicit @example."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import threading
import tracemalloc
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fuzz_budget import EXAMPLES, FUZZ  # tests/fuzz/ (no __init__.py) is on sys.path

from proactivebench_builder.fetch import download, extract as extraction, folder_state, source_lock
from proactivebench_builder.fetch.download import Downloader, FileSpec
from proactivebench_builder.fetch.plan import PlanError, plan

MEMORY_LIMIT = 64 << 20  # bytes a single example may allocate at its peak


def one_line(text) -> bool:
    return isinstance(text, str) and text != "" and "\n" not in text and "Traceback" not in text


# ---- lock files ------------------------------------------------------------------------------

HEADER = {"format": source_lock.FORMAT, "version": 1, "algorithm": "sha256", "scenario": "demo"}
SHA = hashlib.sha256(b"x").hexdigest()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)
paths = st.one_of(st.sampled_from(["a", "a/x", "b", "b/c/d", "..", "../x", "/etc/passwd", "",
                                   "a//b", "./a", "x"]),
                  st.text(alphabet="ab/.\\\x00\udce9", max_size=12))
entries = st.one_of(
    st.builds(lambda p, s, h: {"path": p, "size": s, "sha256": h}, paths,
              st.integers(-1, 2**70), st.sampled_from([SHA, "0" * 64, "z" * 64, "", 5])),
    st.builds(lambda p, t: {"path": p, "symlink": t}, paths, st.one_of(st.text(max_size=8),
                                                                       st.integers())),
    st.builds(lambda f, b: {"end": True, "files": f, "bytes": b}, st.integers(0, 3),
              st.integers(0, 5)),
    st.dictionaries(st.sampled_from(["path", "size", "sha256", "symlink", "end", "x"]),
                    json_values, max_size=4),
    json_values)
lock_lines = st.lists(st.one_of(
    entries.map(lambda obj: json.dumps(obj).encode() + b"\n"),
    st.binary(max_size=30),
    st.sampled_from([b"\n", b"[" * 5000 + b"\n", b"{\"path\": \"a\"", b"\xff\xfe\n",
                     b"{\"size\": " + b"9" * 5000 + b"}\n"])), max_size=8)


def _lock_folder() -> str:
    folder = tempfile.mkdtemp(prefix="fuzz-lock-")
    os.makedirs(os.path.join(folder, "a"))
    with open(os.path.join(folder, "a", "x"), "wb") as handle:
        handle.write(b"x")
    with open(os.path.join(folder, "b"), "wb") as handle:
        handle.write(b"x")
    return folder


@FUZZ
@given(header=st.one_of(st.just(HEADER), st.dictionaries(st.sampled_from(list(HEADER)),
                                                         json_values, max_size=4)),
       lines=lock_lines)
@example(header=HEADER, lines=[b'{"path": "a/l", "symlink": "x", "size": "big"}\n'])
@example(header=HEADER, lines=[b"[" * 100_000 + b"\n"])
def test_any_lock_file_gives_one_line_problems_only(header, lines):
    folder = _lock_folder()
    try:
        with open(os.path.join(folder, source_lock.LOCK_NAME), "wb") as handle:
            handle.write(json.dumps(header).encode() + b"\n")
            handle.writelines(lines)
        problems = source_lock.compare(folder, "demo")
        assert isinstance(problems, list)
        assert all(one_line(p) for p in problems), problems
    finally:
        shutil.rmtree(folder)


# ---- archives --------------------------------------------------------------------------------


def _seed_tar(fmt=tarfile.GNU_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in (("top/", None), ("top/a.txt", b"alpha" * 40),
                           ("top/sub/b.bin", bytes(range(256))), ("c" * 120, b"long")):
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _seed_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:  # fixed dates: same bytes
        for name, data, method in (("top/", b"", zipfile.ZIP_STORED),
                                   ("top/a.txt", b"alpha" * 40, zipfile.ZIP_DEFLATED),
                                   ("top/sub/b.bin", bytes(range(256)), zipfile.ZIP_DEFLATED),
                                   ("stored.txt", b"plain", zipfile.ZIP_STORED)):
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, compress_type=method)
    return buffer.getvalue()


SEEDS = {"tar": _seed_tar(), "pax.tar": _seed_tar(tarfile.PAX_FORMAT), "zip": _seed_zip()}
mutations = st.lists(st.tuples(st.integers(0, 4095), st.binary(min_size=1, max_size=12)),
                     max_size=6)


def _mutate(data: bytes, edits, cut: int | None) -> bytes:
    out = bytearray(data)
    for at, piece in edits:
        at %= max(1, len(out))
        out[at:at + len(piece)] = piece
    return bytes(out[:cut] if cut is not None else out)


def _extract_checked(name: str, data: bytes) -> None:
    base = tempfile.mkdtemp(prefix="fuzz-extract-")
    try:
        archive = os.path.join(base, name)
        with open(archive, "wb") as handle:
            handle.write(data)
        target = os.path.join(base, "out")
        tracemalloc.start()
        try:
            extraction.extract(archive, target, strip_components=0,
                               limits=extraction.Limits(max_member_bytes=1 << 20,
                                                        ratio_floor=4 << 20),
                               protected={("top", "protected.txt")})
        except extraction.UnsafeArchive as err:
            assert one_line(str(err)), err
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < MEMORY_LIMIT, peak
        assert sorted(os.listdir(base)) == sorted({name, "out"} & set(os.listdir(base)))
        for root, dirs, files in os.walk(target):
            for entry in dirs + files:
                path = os.path.join(root, entry)
                assert not os.path.islink(path)
                assert os.path.realpath(path).startswith(os.path.realpath(target) + os.sep)
                assert not entry.startswith(".tmp-extract-")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@FUZZ
@given(seed=st.sampled_from(sorted(SEEDS)), edits=mutations,
       cut=st.one_of(st.none(), st.integers(0, 4096)), squeeze=st.booleans())
@example(seed="zip", edits=[(_seed_zip().index(b"PK\x01\x02") + 6, b"@")], cut=None,
         squeeze=False)  # "zip file version 6.4": NotImplementedError from zipfile
@example(seed="zip", edits=[(1344, b"\x01")], cut=None, squeeze=False)  # a header offset
# before the archive's start: zipfile seeks to a negative offset (OSError EINVAL)
@example(seed="zip", edits=[(1826, b"\x00")], cut=None, squeeze=False)  # a member's name
# cut to nothing: zipfile's is_dir() raised an IndexError (found by tools/fuzz.sh fetch)
def test_mutated_archives_extract_or_are_refused_in_one_line(seed, edits, cut, squeeze):
    data = _mutate(SEEDS[seed], edits, cut)
    if seed == "zip":
        _extract_checked("a.zip", data)
    elif squeeze:
        _extract_checked("a.tar.gz", gzip.compress(data, 1, mtime=0))
    else:
        _extract_checked("a.tar", data)


@FUZZ
@given(data=st.binary(max_size=2048), kind=st.sampled_from(["a.tar", "a.tar.gz", "a.zip"]))
@example(data=b"PK\x05\x06" + b"\0" * 18, kind="a.zip")
def test_arbitrary_bytes_named_as_an_archive_are_refused_in_one_line(data, kind):
    _extract_checked(kind, data)


# ---- HTTP headers ----------------------------------------------------------------------------

header_text = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=40),
    st.sampled_from(["\u00b2", "1" * 5000, "bytes 0-1/2", "bytes */10", "bytes 5-1/10",
                     "bytes " + "9" * 30 + "-1/2", "md5=" + "A" * 5000, "W/\"abc\""]),
    st.builds(lambda a, b, c: f"bytes {a}-{b}/{c}", st.integers(0, 2**70),
              st.integers(0, 2**70), st.one_of(st.integers(0, 2**70), st.just("*"))))


@FUZZ
@given(value=header_text)
def test_header_numbers_and_ranges_parse_or_are_nothing(value):
    number = download.header_number(value)
    assert number is None or (isinstance(number, int) and 0 <= number < 10 ** 19)
    start, total = download.content_range(value)
    assert start is None or (isinstance(start, int) and start >= 0)
    assert total is None or (isinstance(total, int) and total >= 0)


@FUZZ
@given(goog=header_text, etag=header_text)
def test_digest_headers_give_digests_or_nothing(goog, etag):
    class Response:
        headers = {"x-goog-hash": goog, "x-linked-etag": etag}
    found = download.declared_digests([Response()])
    assert set(found) <= {"md5", "sha256"}
    assert all(len(v) in (32, 64) and int(v, 16) >= 0 for v in found.values())


# ---- HTTP answers ----------------------------------------------------------------------------

BODY = bytes(range(256)) * 16
PINS = {"size": len(BODY), "sha256": hashlib.sha256(BODY).hexdigest()}


class _Answers:
    """A loopback server answering each request with the answer drawn for it."""

    def __init__(self):
        self.answer = b""
        holder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                try:
                    self.wfile.write(holder.answer)
                except OSError:
                    pass
                self.close_connection = True

            do_HEAD = do_GET

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/f"


_SERVER: list[_Answers] = []


def _server() -> _Answers:
    if not _SERVER:
        _SERVER.append(_Answers())
    return _SERVER[0]


statuses = st.sampled_from([200, 200, 206, 301, 302, 404, 416, 429, 500, 999])
header_names = st.sampled_from(["Content-Length", "Content-Range", "Content-Encoding",
                                "Content-Type", "Transfer-Encoding", "Location",
                                "x-goog-hash", "X-Linked-Etag"])
bodies = st.one_of(st.just(BODY), st.builds(lambda n: BODY[:n], st.integers(0, len(BODY))),
                   st.binary(max_size=64), st.builds(lambda b: gzip.compress(b), st.just(BODY)))


@settings(FUZZ, max_examples=max(10, EXAMPLES // 3))
@given(status=statuses, headers=st.lists(st.tuples(header_names, header_text), max_size=5),
       body=bodies, partial=st.one_of(st.none(), st.integers(1, len(BODY) + 10)))
@example(status=301, headers=[("Location", "\x80")], body=b"", partial=None)  # requests'
# strict UTF-8 decoding of Location: UnicodeDecodeError
def test_a_file_gets_its_final_name_only_with_the_pinned_bytes(status, headers, body,
                                                               partial):
    server = _server()
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers
                                        if "\r" not in v and "\n" not in v]
    lines.append("Connection: close")
    server.answer = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    folder = tempfile.mkdtemp(prefix="fuzz-http-")
    try:
        if partial is not None:  # what an earlier run left to resume
            part = os.path.join(folder, folder_state.STATE_DIR, folder_state.PARTIAL_DIR, "f.part")
            os.makedirs(os.path.dirname(part))
            with open(part, "wb") as handle:
                handle.write((BODY + b"??????????")[:partial])
        outcome = Downloader(retries=0, retry_wait=0, timeout=2).fetch(
            folder, FileSpec(url=server.url, path="f", **PINS))
        final = os.path.join(folder, "f")
        if outcome.status == "fetched":
            with open(final, "rb") as handle:
                assert handle.read() == BODY
        else:
            assert outcome.status == "failed" and one_line(outcome.message), outcome
            assert not os.path.exists(final)
    finally:
        shutil.rmtree(folder)


# ---- manifests' downloads sections -----------------------------------------------------------

file_entries = st.dictionaries(
    st.sampled_from(["url", "path", "size", "md5", "sha256", "pins_from", "record_only",
                     "extract", "train_only", "for_each", "colour"]),
    st.one_of(json_values, st.sampled_from(["https://example.org/x", "https://[::1/x", "a/b",
                                            "../x", "{item}.txt", "https://e.org/{item_url}",
                                            "0" * 32, "0" * 64, "why, a test", "classes"]),
              st.dictionaries(st.sampled_from(["into", "strip_components"]), json_values,
                              max_size=2)),
    max_size=8)
sections = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={
        "files": st.one_of(json_values, st.lists(file_entries, max_size=3)),
        "manual": st.one_of(json_values, st.just("do it")),
        "record_only": st.one_of(json_values, st.just("nobody pins it")),
        "manual_list": st.one_of(json_values, st.fixed_dictionaries({
            "glob": st.text(max_size=6), "regex": st.text(max_size=12),
            "line": st.text(max_size=12), "write": st.text(max_size=6)}))}))


@FUZZ
@given(section=sections, subdir=st.one_of(st.just("demo"), st.text(max_size=8), json_values),
       classes=st.one_of(st.just(["cat", "dog"]), json_values))
def test_any_downloads_section_is_a_plan_or_one_plan_error(section, subdir, classes):
    manifest = {"name": "demo", "source_subdir": subdir, "downloads": section,
                "classes": classes}
    try:
        plan(manifest)
    except PlanError as err:
        assert one_line(str(err)), err
