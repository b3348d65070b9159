"""The edges of `run_pipeline.py fetch` and of the source lock files: every input of
fetch (HTTP responses, archives, the destination folder, its own bookkeeping, signals) and of
`--verify_sources [--record]` (the lock files), tried with what can be wrong with it. Each case
ends in one line (a failed file, a refused command, a lock problem) or in correct handling,
never in a traceback, a hang, memory that follows what a file claims, or bytes under a final
name that were not verified.

The HTTP cases run against `Fake`, a loopback server whose answer to each path is written by
the test byte for byte (a lying Content-Length, a 200 to a Range request, a redirect loop, a
trickle, ...). No timing is asserted beyond deadlines that only a hang would miss."""
from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import tracemalloc
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from proactivebench_builder.fetch import download, extract as extraction, folder_state, source_lock
from proactivebench_builder.fetch.download import STATE_DIR, Downloader, FileSpec
from proactivebench_builder.fetch import plan as fetch_plan, sizes as fetch_sizes
from proactivebench_builder.pipeline.commands import fetch
from proactivebench_builder.fetch.plan import PlanError, plan
from proactivebench_builder.fetch.verify import record_sources, verify_sources

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = bytes(range(256)) * 64  # 16 kB, every byte value
NO_PINS = {"expected_files": {}, "checksums": {}}


# ---- the fake server -------------------------------------------------------------------------


class Fake:
    """A loopback server: `routes[path](handler)` writes the whole answer (status line, headers,
    body) itself; `log` holds (method, path, headers) per request."""

    def __init__(self):
        self.routes: dict = {}
        self.log: list[tuple[str, str, dict]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.answer()

            def do_HEAD(self):
                self.answer()

            def answer(self):
                with fake.lock:
                    fake.log.append((self.command, self.path, dict(self.headers)))
                route = fake.routes.get(self.path)
                if route is None:
                    raw(self, 404, {}, b"")
                    return
                try:
                    route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def gets(self, path: str | None = None) -> list[dict]:
        with self.lock:
            return [h for m, p, h in self.log if m == "GET" and (path is None or p == path)]


def raw(handler, status: int, headers: dict, body: bytes = b"", *, head_only=None) -> None:
    """Write one answer as given: no header is added but Connection: close."""
    reason = {200: "OK", 206: "Partial Content", 302: "Found", 404: "Not Found",
              416: "Range Not Satisfiable"}.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    lines.append("Connection: close")
    handler.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if handler.command != "HEAD" and not head_only:
        handler.wfile.write(body)
    handler.wfile.flush()


def serve(data: bytes, **headers):
    """A route answering `data` whole with its Content-Length (and `headers`)."""
    def route(h):
        raw(h, 200, {"Content-Length": str(len(data)), **headers}, data)
    return route


@pytest.fixture()
def fake():
    server = Fake()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def pins(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def fetch_one(folder, spec: FileSpec, **options):
    options = {"retries": 0, "retry_wait": 0, "timeout": 5, **options}
    return Downloader(**options).fetch(str(folder), spec)


def final_and_partial(folder, relative: str) -> tuple[str, str]:
    return (os.path.join(folder, relative),
            os.path.join(folder, STATE_DIR, "partial", relative + ".part"))


def one_line(text: str) -> bool:
    return "\n" not in text and "Traceback" not in text and text != ""


# ---- HTTP responses --------------------------------------------------------------------------


def test_a_content_length_shorter_than_the_pin_keeps_nothing(fake, tmp_path):
    fake.routes["/f"] = lambda h: raw(h, 200, {"Content-Length": "100"}, BODY)
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "the server has 100 bytes, the manifest pins 16384" in outcome.message
    assert not os.path.exists(tmp_path / "f")


def test_a_content_length_longer_than_the_body_is_a_cut_connection_resumed_later(fake, tmp_path):
    fake.routes["/f"] = lambda h: raw(h, 200, {"Content-Length": str(len(BODY))}, BODY[:5000])
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "after 5000 of 16384 bytes" in outcome.message
    final, partial = final_and_partial(tmp_path, "f")
    assert not os.path.exists(final) and os.path.getsize(partial) == 5000
    # the next run asks for the rest; a server that honours it completes the file
    def ranged(h):
        start = int(h.headers["Range"][len("bytes="):-1])
        raw(h, 206, {"Content-Length": str(len(BODY) - start),
                     "Content-Range": f"bytes {start}-{len(BODY) - 1}/{len(BODY)}"},
            BODY[start:])
    fake.routes["/f"] = ranged
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "fetched" and outcome.resumed_from == 5000
    assert open(final, "rb").read() == BODY and not os.path.exists(partial)


def endless(h, headers=None):
    """A body without a length that never ends (until the client goes away)."""
    lines = ["HTTP/1.1 200 OK", "Connection: close", *[f"{k}: {v}" for k, v in
                                                       (headers or {}).items()]]
    h.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    block = b"z" * 65536
    for _ in range(1 << 20):  # 64 GiB at most: the client stops long before
        h.wfile.write(block)


def test_a_body_longer_than_the_pinned_size_is_cut_at_the_pin(fake, tmp_path):
    fake.routes["/f"] = endless
    tracemalloc.start()
    try:
        outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", size=3 << 20,
                                               sha256="0" * 64))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome.status == "failed" and "sent more than 3145728 bytes" in outcome.message
    assert peak < 16 << 20
    final, partial = final_and_partial(tmp_path, "f")
    assert not os.path.exists(final)
    assert not os.path.exists(partial)  # bytes of another file: not kept to resume


def test_a_200_to_a_range_request_restarts_the_file_instead_of_appending(fake, tmp_path):
    final, partial = final_and_partial(tmp_path, "f")
    os.makedirs(os.path.dirname(partial))
    with open(partial, "wb") as handle:
        handle.write(BODY[:4000])
    fake.routes["/f"] = serve(BODY)  # ignores Range
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "fetched", outcome.message
    assert fake.gets("/f")[0]["Range"] == "bytes=4000-"
    assert open(final, "rb").read() == BODY  # not the prefix and then the whole body


def test_a_200_to_a_range_request_restarts_an_unpinned_file_too(fake, tmp_path):
    final, partial = final_and_partial(tmp_path, "f")
    os.makedirs(os.path.dirname(partial))
    with open(partial, "wb") as handle:
        handle.write(b"x" * 4000)
    fake.routes["/f"] = serve(BODY)
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"))
    assert outcome.status == "fetched" and open(final, "rb").read() == BODY


@pytest.mark.parametrize("content_range", [
    "bytes 0-16383/16384",            # the whole file, claimed as the asked-for rest
    "bytes 3000-16383/16384",         # another offset
    "bytes abc",                      # not a Content-Range
    "bytes " + "9" * 5000 + "-1/2",   # a number Python refuses to parse as an int
    "bytes 4000-16383/" + "9" * 5000,
])
def test_a_206_with_the_wrong_content_range_is_fetched_again_from_zero(fake, tmp_path,
                                                                      content_range):
    final, partial = final_and_partial(tmp_path, "f")
    os.makedirs(os.path.dirname(partial))
    with open(partial, "wb") as handle:
        handle.write(BODY[:4000])

    def route(h):
        if "Range" in h.headers:
            raw(h, 206, {"Content-Length": str(len(BODY)), "Content-Range": content_range}, BODY)
        else:
            serve(BODY)(h)
    fake.routes["/f"] = route
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "fetched", outcome.message
    assert open(final, "rb").read() == BODY
    assert [g.get("Range") for g in fake.gets("/f")] == ["bytes=4000-", None]


def test_a_server_that_always_answers_a_wrong_206_is_one_line(fake, tmp_path):
    def route(h):
        raw(h, 206, {"Content-Length": "10", "Content-Range": "bytes 5-14/16384"}, BODY[:10])
    fake.routes["/f"] = route
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and one_line(outcome.message), outcome.message
    assert not os.path.exists(tmp_path / "f")


@pytest.mark.parametrize("length", ["\u00b2", "1" * 5000, "-5", " 12", "0x10"])
def test_a_content_length_that_is_not_a_number_is_one_line(fake, tmp_path, length):
    """'²' is a digit to str.isdigit() but not to int(); 5000 digits pass isdigit() and exceed
    Python's int parsing limit."""
    fake.routes["/f"] = lambda h: raw(h, 200, {"Content-Length": length}, BODY)
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status in ("failed", "fetched") and (outcome.status == "fetched"
                                                          or one_line(outcome.message))
    if outcome.status == "fetched":
        assert open(tmp_path / "f", "rb").read() == BODY


@pytest.mark.parametrize("length", ["\u00b2", "1" * 5000])
def test_a_probe_with_a_content_length_that_is_not_a_number_is_harmless(fake, tmp_path, length):
    """A file in place without pins is checked against what a HEAD request says of it."""
    (tmp_path / "f").write_bytes(BODY)
    fake.routes["/f"] = lambda h: raw(h, 200, {"Content-Length": length}, BODY)
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"))
    assert outcome.status in ("failed", "fetched", "skipped")
    assert outcome.status != "failed" or one_line(outcome.message)


def test_a_redirect_to_another_host_forwards_no_credentials(fake, tmp_path):
    """A URL with credentials in it (or a .netrc entry) authenticates to its own host only."""
    fake.routes["/secret"] = lambda h: raw(h, 302, {"Location": fake.url("/open", "localhost"),
                                                    "Content-Length": "0"})
    fake.routes["/open"] = serve(BODY)
    url = fake.url("/secret").replace("http://", "http://user:hunter2@")
    outcome = fetch_one(tmp_path, FileSpec(url=url, path="f", **pins(BODY)))
    assert outcome.status == "fetched", outcome.message
    first, second = fake.gets("/secret")[0], fake.gets("/open")[0]
    assert first["Authorization"].startswith("Basic ")
    assert "Authorization" not in second and "Cookie" not in second
    assert second["Host"].startswith("localhost:")


def test_a_redirect_loop_is_bounded_and_one_line(fake, tmp_path):
    fake.routes["/a"] = lambda h: raw(h, 302, {"Location": "/b", "Content-Length": "0"})
    fake.routes["/b"] = lambda h: raw(h, 302, {"Location": "/a", "Content-Length": "0"})
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/a"), path="f", **pins(BODY)),
                        retries=3)
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "redirects" in outcome.message
    assert len(fake.gets()) <= 31  # requests' own bound, once: a loop is not worth retrying


def test_a_redirect_to_a_file_url_is_one_line_and_reads_nothing(fake, tmp_path):
    fake.routes["/f"] = lambda h: raw(h, 302, {"Location": "file:///etc/passwd",
                                               "Content-Length": "0"})
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"), retries=2)
    assert outcome.status == "failed" and one_line(outcome.message)
    assert len(fake.gets()) == 1  # not a transient failure: no retry
    assert not os.path.exists(tmp_path / "f")


def test_a_redirect_to_a_location_that_is_not_utf8_is_one_line(fake, tmp_path):
    """requests decodes Location as UTF-8, strictly (found by fuzzing)."""
    def route(h):
        h.wfile.write(b"HTTP/1.1 302 Found\r\nLocation: /\x80\r\nContent-Length: 0\r\n"
                      b"Connection: close\r\n\r\n")
    fake.routes["/f"] = route
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and one_line(outcome.message), outcome.message
    assert "cannot be followed" in outcome.message


def test_a_partial_file_longer_than_the_pin_is_not_resumed(fake, tmp_path):
    final, partial = final_and_partial(tmp_path, "f")
    os.makedirs(os.path.dirname(partial))
    with open(partial, "wb") as handle:
        handle.truncate(len(BODY) * 1000)
    fake.routes["/f"] = serve(BODY)
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "fetched" and open(final, "rb").read() == BODY
    assert "Range" not in fake.gets("/f")[0]


def test_a_zip_of_an_unknown_version_is_one_line(tmp_path):
    data = bytearray(zip_bytes([("x", b"1")]))
    at = data.index(b"PK\x01\x02") + 6
    data[at] = 64  # "needs version 6.4 to extract": zipfile raises NotImplementedError
    refused(tmp_path, "a.zip", bytes(data), "corrupt archive")


def test_redirects_from_https_down_to_http_are_refused():
    """Checked on the history of a response: https://a -> http://b is a downgrade."""
    class R:
        def __init__(self, url):
            self.url = url
    problem = download.downgrade([R("https://a/x"), R("http://b/x")])
    assert problem and "http://b/x" in problem
    assert download.downgrade([R("https://a/x"), R("https://b/x")]) is None
    assert download.downgrade([R("http://a/x"), R("http://b/x")]) is None


def test_an_html_page_answered_for_an_archive_is_not_kept(fake, tmp_path):
    page = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>"
    fake.routes["/data.zip"] = serve(page, **{"Content-Type": "text/html; charset=utf-8"})
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/data.zip"), path="data.zip"))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "HTML page" in outcome.message
    final, partial = final_and_partial(tmp_path, "data.zip")
    assert not os.path.exists(final) and not os.path.exists(partial)


def test_a_trickling_server_is_stopped_by_the_speed_floor(fake, tmp_path):
    """One byte every 0.2 s never trips a 1 s silence timeout; it is far below the floor."""
    def trickle(h):
        h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\n\r\n".encode())
        for byte in BODY:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(0.2)
    fake.routes["/f"] = trickle
    start = time.monotonic()
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)),
                        timeout=1, retries=1)
    took = time.monotonic() - start
    assert outcome.status == "failed" and one_line(outcome.message), outcome.message
    assert "slower than" in outcome.message
    assert took < 10
    final, partial = final_and_partial(tmp_path, "f")
    assert not os.path.exists(final) and os.path.getsize(partial) > 0  # kept to resume


def test_a_body_cut_without_any_length_is_not_taken_for_the_whole_file(fake, tmp_path):
    """No Content-Length, no chunked encoding: the end of the body is the end of the
    connection, so a cut one cannot be told from a complete one; nothing pins the file."""
    fake.routes["/f"] = lambda h: (h.wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
                                                 + BODY[:5000]))
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "no length" in outcome.message
    assert not os.path.exists(tmp_path / "f")


def test_a_chunked_body_cut_before_its_end_is_a_lost_connection(fake, tmp_path):
    def route(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        h.wfile.write(b"1000\r\n" + BODY[:4096] + b"\r\n")
    fake.routes["/f"] = route
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert not os.path.exists(tmp_path / "f")


def test_a_chunked_body_is_kept_whole(fake, tmp_path):
    def route(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for k in range(0, len(BODY), 5000):
            piece = BODY[k:k + 5000]
            h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")
    fake.routes["/f"] = route
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"))
    assert outcome.status == "fetched" and open(tmp_path / "f", "rb").read() == BODY


def test_a_gzip_content_encoding_never_changes_the_bytes_silently(fake, tmp_path):
    squeezed = gzip.compress(BODY)
    fake.routes["/f"] = serve(squeezed, **{"Content-Encoding": "gzip"})
    # pinned: the compressed bytes fail the pin, and the line says why
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and "Content-Encoding: gzip" in outcome.message
    assert not os.path.exists(tmp_path / "f")
    # unpinned: which bytes are the file cannot be told; nothing is kept
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "Content-Encoding: gzip" in outcome.message
    assert not os.path.exists(tmp_path / "f")


def test_an_archive_served_with_a_gzip_content_encoding_is_kept_as_its_pins_say(fake, tmp_path):
    """A server configured to label .tar.gz files `Content-Encoding: gzip` sends the archive's
    own bytes: the pins say they are the file."""
    archive = gzip.compress(b"\0" * 10240)
    fake.routes["/a.tar.gz"] = serve(archive, **{"Content-Encoding": "gzip"})
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/a.tar.gz"), path="a.tar.gz",
                                           **pins(archive)))
    assert outcome.status == "fetched" and open(tmp_path / "a.tar.gz", "rb").read() == archive


def test_a_digest_the_server_declares_and_the_bytes_miss_keeps_nothing(fake, tmp_path):
    import base64
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    fake.routes["/f"] = serve(BODY, **{"x-goog-hash": f"crc32c=AAAAAA==,md5={wrong}"})
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f"))
    assert outcome.status == "failed" and "the server declares" in outcome.message
    final, partial = final_and_partial(tmp_path, "f")
    assert not os.path.exists(final) and not os.path.exists(partial)


@pytest.mark.parametrize("value", ["", "garbage", "md5=!!!", "md5=" + "A" * 5000, "md5==,=,,"])
def test_malformed_digest_headers_are_ignored(value):
    class R:
        headers = {"x-goog-hash": value, "x-linked-etag": value}
    assert download.declared_digests([R()]) in ({}, )


def answers(*routes):
    """A route answering each request with the next of `routes` (the last one thereafter)."""
    left = list(routes)
    def route(h):
        (left.pop(0) if len(left) > 1 else left[0])(h)
    return route


def test_a_busy_server_is_asked_again_after_its_retry_after(fake, tmp_path):
    busy = lambda h: raw(h, 503, {"Retry-After": "0", "Content-Length": "0"})  # noqa: E731
    fake.routes["/f"] = answers(busy, lambda h: raw(h, 429, {"Content-Length": "0"}),
                                serve(BODY))
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)),
                        retries=2)
    assert outcome.status == "fetched", outcome.message
    assert len(fake.gets("/f")) == 3


def test_a_server_busy_beyond_the_retries_is_one_line(fake, tmp_path):
    fake.routes["/f"] = lambda h: raw(h, 503, {"Content-Length": "0"})
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)),
                        retries=1)
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "HTTP 503" in outcome.message and "run fetch again" in outcome.message
    assert len(fake.gets("/f")) == 2


def test_a_cut_body_and_a_busy_server_share_the_file_s_retries(fake, tmp_path):
    """One budget per file: a 503 retried by urllib3 and a body resumed with Range count
    alike."""
    cut = lambda h: raw(h, 200, {"Content-Length": str(len(BODY))}, BODY[:5000])  # noqa: E731
    busy = lambda h: raw(h, 503, {"Content-Length": "0"})  # noqa: E731
    fake.routes["/f"] = answers(cut, busy, busy, serve(BODY))
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)),
                        retries=2)
    assert outcome.status == "failed" and "HTTP 503" in outcome.message, outcome.message
    assert len(fake.gets("/f")) == 3
    assert fake.gets("/f")[1]["Range"] == "bytes=5000-"


def test_a_long_retry_after_is_ended_by_stop(fake, tmp_path):
    fake.routes["/f"] = lambda h: raw(h, 503, {"Retry-After": "3600", "Content-Length": "0"})
    downloader = Downloader(retries=1, retry_wait=0, timeout=5)
    result = []
    worker = threading.Thread(target=lambda: result.append(downloader.fetch(
        str(tmp_path), FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))))
    worker.start()
    deadline = time.monotonic() + 30
    while not fake.gets("/f"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    downloader.stop()
    worker.join(30)
    assert not worker.is_alive()
    assert result[0].status == "interrupted", result[0]


def test_headers_trickling_forever_are_cut_too(fake, tmp_path):
    """A header line that grows one byte at a time never trips a silence timeout."""
    def trickle(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        for _ in range(600):
            h.wfile.write(b"a")
            h.wfile.flush()
            time.sleep(0.2)
    fake.routes["/f"] = trickle
    start = time.monotonic()
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)),
                        timeout=1)
    assert outcome.status == "failed" and "slower than" in outcome.message, outcome.message
    assert time.monotonic() - start < 10


# ---- archives --------------------------------------------------------------------------------


def tar_bytes(*members, fmt=tarfile.GNU_FORMAT) -> bytes:
    """A tar of (TarInfo, data) pairs, written as given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def info(name, data=b"", kind=tarfile.REGTYPE, link="", size=None):
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, link
    member.size = len(data) if size is None else size
    return member, data if kind == tarfile.REGTYPE else None


def header_block(name: str, size: int, kind: bytes, fmt=tarfile.GNU_FORMAT) -> bytes:
    member = tarfile.TarInfo(name)
    member.type, member.size = kind, size
    return member._create_header(member.get_info(), fmt, "utf-8", "strict")


def write(path, data: bytes) -> str:
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def extract_into(tmp_path, name: str, data: bytes, **options):
    archive = write(tmp_path / name, data)
    target = tmp_path / "out"
    return extraction.extract(archive, str(target), **options), target


def refused(tmp_path, name: str, data: bytes, message: str, **options) -> str:
    with pytest.raises(extraction.UnsafeArchive) as caught:
        extract_into(tmp_path, name, data, **options)
    text = str(caught.value)
    assert one_line(text) and message in text, text
    return text


def gzip_stream(pieces) -> bytes:
    """gzip of the concatenated pieces, streamed (a piece may be a (block, count) repeat)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1, mtime=0) as gz:
        for piece in pieces:
            if isinstance(piece, tuple):
                block, count = piece
                for _ in range(count):
                    gz.write(block)
            else:
                gz.write(piece)
    return out.getvalue()


@pytest.mark.parametrize("kind, label", [(tarfile.GNUTYPE_LONGNAME, "GNU long name"),
                                         (tarfile.XHDTYPE, "PAX")])
def test_an_extended_tar_header_claiming_memory_is_refused_before_it_is_read(tmp_path, kind,
                                                                             label):
    """64 MiB of header in a 64 kB archive: tarfile would read all of it into memory first."""
    declared = 64 << 20
    if kind == tarfile.XHDTYPE:
        body = [f"{declared} comment=".encode(), (b"a" * (1 << 20), 63),
                b"a" * ((1 << 20) - len(f"{declared} comment=") - 1) + b"\n"]
    else:
        body = [(b"a" * (1 << 20), 64)]
    data = gzip_stream([header_block("././@LongLink", declared, kind), *body,
                        tar_bytes(info("x.jpg", b"abcd"))])
    assert len(data) < 1 << 20
    tracemalloc.start()
    try:
        refused(tmp_path, "a.tar.gz", data, f"a tar header ({label}) of {declared} bytes")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_pax_global_headers_are_bounded_together(tmp_path):
    one = tarfile.TarInfo("pax_global_header")
    members = b""
    for k in range(8):
        record = f"comment=" + "c" * (200 << 10) + "\n"
        record = f"{len(record) + len(str(len(record) + 8)) + 1} {record}"
        record = f"{len(record)} " + record.split(" ", 1)[1]
        payload = record.encode()
        header = header_block("pax_global_header", len(payload), tarfile.XGLTYPE,
                              tarfile.USTAR_FORMAT)
        members += header + payload + b"\0" * (-len(payload) % 512)
    refused(tmp_path, "a.tar", members + tar_bytes(info("x", b"1")),
            "PAX global headers of more than")


def test_a_gnu_sparse_map_claiming_endless_entries_is_refused_at_once(tmp_path):
    """PAX GNU.sparse 1.0: tarfile reads the map's declared number of fields, one block at a
    time, past the end of the stream (billions of iterations)."""
    pax = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "s",
           "GNU.sparse.realsize": "10"}
    member = tarfile.TarInfo("s")
    member.size = 512
    member.pax_headers = pax
    data = tar_bytes((member, b"999999999999\n".ljust(512, b"\0")), fmt=tarfile.PAX_FORMAT)
    start = time.monotonic()
    refused(tmp_path, "a.tar", data, "a sparse file")
    assert time.monotonic() - start < 5


def test_an_old_gnu_sparse_member_is_refused(tmp_path):
    block = bytearray(header_block("s", 10, tarfile.GNUTYPE_SPARSE))
    data = bytes(block) + b"\0" * 1024
    refused(tmp_path, "a.tar", data, "a sparse file")


def test_a_chain_of_extended_headers_is_one_line(tmp_path):
    """Each GNU long-name header makes tarfile read the next header recursively."""
    chain = b"".join(header_block("././@LongLink", 2, tarfile.GNUTYPE_LONGNAME) + b"x\0" +
                     b"\0" * 510 for _ in range(3000))
    with pytest.raises(extraction.UnsafeArchive) as caught:
        extract_into(tmp_path, "a.tar", chain + tar_bytes(info("x", b"1")))
    assert one_line(str(caught.value))
    # refused by its length, not by a RecursionError deep in tarfile's stack (where a garbage
    # collection once ran finalizers that failed too)
    assert "extended tar headers in a row" in str(caught.value)


def test_a_tar_named_tar_is_never_decompressed_as_bzip2(tmp_path):
    import bz2
    data = bz2.compress(tar_bytes(info("x", b"1")))
    refused(tmp_path, "a.tar", data, "corrupt")


def test_a_header_that_cannot_be_read_is_not_the_end_of_the_archive(tmp_path):
    data = bytearray(tar_bytes(info("a", b"1" * 600), info("b", b"2"), info("c", b"3")))
    data[1536 + 148:1536 + 156] = b"0000000\0"  # b's checksum, wrong
    text = refused(tmp_path, "a.tar", bytes(data), "unreadable tar header")
    assert "corrupt or cut" in text


def test_a_tar_cut_inside_a_header_is_an_error(tmp_path):
    data = tar_bytes(info("a", b"1"), info("b", b"2"))[:512 * 2 + 100]
    refused(tmp_path, "a.tar", data, "tar header")


@pytest.mark.parametrize("kind", [tarfile.FIFOTYPE, tarfile.BLKTYPE, tarfile.CHRTYPE])
def test_special_tar_members_are_refused(tmp_path, kind):
    refused(tmp_path, "a.tar", tar_bytes(info("node", kind=kind)), "a special file")


def test_a_link_then_a_write_through_it_writes_nothing_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    data = tar_bytes(info("d", kind=tarfile.SYMTYPE, link=str(outside)),
                     info("d/x", b"owned"))
    refused(tmp_path, "a.tar", data, "a link")
    assert list(outside.iterdir()) == []
    data = tar_bytes(info("d", kind=tarfile.LNKTYPE, link="/etc/passwd"), info("d", b"owned"))
    refused(tmp_path, "b.tar", data, "a link")


def test_a_member_declaring_a_huge_size_with_nothing_behind_it_is_refused_at_once(tmp_path):
    block = header_block("x.jpg", 1 << 44, tarfile.REGTYPE)
    start = time.monotonic()
    refused(tmp_path, "a.tar.gz", gzip.compress(block + b"\0" * 1024), "declares")
    assert time.monotonic() - start < 5


def test_many_empty_members_count_against_the_ratio(tmp_path):
    """40,000 empty members in a 90 kB archive: each header block counts."""
    block = header_block("d/", 0, tarfile.DIRTYPE)
    data = gzip.compress(block * 40_000, 9)
    refused(tmp_path, "a.tar.gz", data, "times the archive's size",
            limits=extraction.Limits(ratio_floor=1 << 20, max_ratio=10))


def zip_bytes(entries, method=zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in entries:
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data,
                        compress_type=method)
    return buffer.getvalue()


def test_a_zip_bomb_is_refused_by_its_ratio_before_a_byte_is_written(tmp_path):
    data = zip_bytes([(f"zeros{k}", b"\0" * (30 << 20)) for k in range(4)])
    assert len(data) < 1 << 20
    refused(tmp_path, "bomb.zip", data, "times the archive's size")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_overlapping_zip_entries_are_refused(tmp_path):
    """Many directory entries pointing at one compressed member (a 'better zip bomb')."""
    one = zip_bytes([("a", b"\0" * (8 << 20))])
    with zipfile.ZipFile(io.BytesIO(one)) as zf:
        first = zf.infolist()[0]
    local_end = one.index(b"PK\x01\x02")
    body, directory_entry = one[:local_end], one[local_end:one.index(b"PK\x05\x06")]
    copies = 20
    entries = b""
    for k in range(copies):
        name = f"f{k:02d}".encode()  # same length as... any: the offset stays 0
        entry = bytearray(directory_entry)
        entry[28:30] = len(name).to_bytes(2, "little")
        entries += bytes(entry[:46]) + name
    end = (b"PK\x05\x06" + b"\0" * 4 + copies.to_bytes(2, "little") * 2 +
           len(entries).to_bytes(4, "little") + len(body).to_bytes(4, "little") + b"\0\0")
    data = body + entries + end
    with pytest.raises(extraction.UnsafeArchive) as caught:
        extract_into(tmp_path, "bomb.zip", data)
    assert one_line(str(caught.value))
    written = sum(f.stat().st_size for f in (tmp_path / "out").rglob("*") if f.is_file())
    assert written <= 64 << 20


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_zip_members_compressed_without_a_bound_are_refused(tmp_path, method):
    refused(tmp_path, "a.zip", zip_bytes([("x", b"\0" * 1000)], method), "compression method")


def test_an_encrypted_zip_member_is_one_line(tmp_path):
    data = bytearray(zip_bytes([("x", b"secret")], zipfile.ZIP_STORED))
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature)
        data[at + flags_at] |= 1
    refused(tmp_path, "a.zip", bytes(data), "encrypted")


def test_a_zip_member_with_corrupt_deflate_data_is_one_line(tmp_path):
    data = bytearray(zip_bytes([("x", os.urandom(4000) + b"\0" * 4000)]))
    at = data.index(b"PK\x03\x04") + 30 + 1 + 100
    data[at:at + 50] = b"\xff" * 50
    refused(tmp_path, "a.zip", bytes(data), "corrupt")


def test_a_zip_name_flagged_utf8_that_is_not_is_one_line(tmp_path):
    data = bytearray(zip_bytes([("\u00e9t\u00e9.txt", b"x")], zipfile.ZIP_STORED))
    for signature, name_at in ((b"PK\x03\x04", 30), (b"PK\x01\x02", 46)):
        at = data.index(signature)
        data[at + name_at] = 0xFF  # breaks the UTF-8 of a name flagged UTF-8
    refused(tmp_path, "a.zip", bytes(data), "corrupt")


def test_duplicate_zip_members_are_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf, pytest.warns(UserWarning):
        zf.writestr("a.txt", b"first")
        zf.writestr("a.txt", b"second")
    refused(tmp_path, "a.zip", buffer.getvalue(), "appears twice")


def test_duplicate_tar_members_keep_the_last_as_tar_does(tmp_path):
    (files, _), target = extract_into(tmp_path, "a.tar", tar_bytes(info("a", b"first"),
                                                                   info("a", b"second")))
    assert (target / "a").read_bytes() == b"second" and files == 2


def test_a_legal_long_member_name_is_extracted_and_an_illegal_one_refused(tmp_path):
    legal = "n" * 250 + ".jpg"
    (files, _), target = extract_into(tmp_path, "a.tar", tar_bytes(info(legal, b"1")))
    assert (target / legal).read_bytes() == b"1"
    refused(tmp_path, "b.tar", tar_bytes(info("n" * 300, b"1")), "longer than 255 bytes")
    deep = "/".join(["d" * 200] * 30) + "/x"
    refused(tmp_path, "c.tar", tar_bytes(info(deep, b"1")), "longer than the 4096 bytes")


def test_a_member_name_that_is_not_utf8_is_extracted_under_its_bytes(tmp_path):
    member = tarfile.TarInfo("caf\udce9.jpg")
    member.size = 1
    data = tar_bytes((member, b"1"))
    (files, _), target = extract_into(tmp_path, "a.tar", data)
    assert os.listdir(bytes(target)) == [b"caf\xe9.jpg"]


@pytest.mark.parametrize("name", [".proactivebench-fetch/state.json",
                                  ".proactivebench-lock.jsonl", "a.tar", "other.zip"])
def test_an_archive_never_writes_fetchs_own_files_or_other_downloads(tmp_path, fake, name):
    """Extracted into the source folder, a member may not replace fetch's bookkeeping, the
    lock file, the archive itself or another file fetched into the folder."""
    data = tar_bytes(info(name, b"forged"))
    fake.routes["/a.tar"] = serve(data)
    folder = tmp_path / "src"
    spec = FileSpec(url=fake.url("/a.tar"), path="a.tar", **pins(data),
                    extract=download.ExtractSpec())
    downloader = Downloader(retries=0, reserved=fetch_plan.RESERVED_NAMES)
    downloader._planned[str(folder)] = {"a.tar", "other.zip"}
    outcome = downloader.fetch(str(folder), spec)
    assert outcome.status == "failed" and "not the archive's to write" in outcome.message
    assert not (folder / name).exists() or (folder / name).read_bytes() != b"forged"


def test_an_extraction_stopped_leaves_no_temporary_file(tmp_path):
    data = tar_bytes(info("big", b"x" * (3 << 20)))
    asked = iter([False] * 3 + [True] * 100)
    with pytest.raises(extraction.Interrupted):
        extract_into(tmp_path, "a.tar", data, should_stop=lambda: next(asked))
    assert [p.name for p in (tmp_path / "out").iterdir()] == []


# ---- the destination folder and fetch's own files ---------------------------------------------


DEMO_URL = "https://example.org/data/f.bin"
DEMO_PATH = "/example.org/data/f.bin"


def demo_plan(data: bytes = BODY, files=None, subdir="demo"):
    """A one-source plan fetching `data` as f.bin (served by `fake` through --mirror)."""
    entries = files or [{"url": DEMO_URL, "path": "f.bin", **pins(data),
                         "pins_from": "https://example.org/sums"}]
    return plan({"name": "demo", "source_subdir": subdir, "downloads": {"files": entries}})


def run_fetch(capsys, monkeypatch, fake, root, source_plan, *extra):
    monkeypatch.setattr(fetch, "load_plans", lambda names=None: {"demo": source_plan})
    code = fetch.main([f"--sources_root={root}", f"--mirror={fake.url('')}", "--no_progress",
                       "--retry_wait=0", "--retries=0", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_a_file_where_a_source_folder_goes_is_one_line_before_any_request(
        fake, tmp_path, capsys, monkeypatch):
    fake.routes[DEMO_PATH] = serve(BODY)
    root = tmp_path / "sources"
    root.mkdir()
    (root / "demo").write_text("a file")
    code, out, err = run_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "demo" in err and "not a folder" in err and "Traceback" not in err
    assert fake.gets() == []


def test_a_dangling_link_where_a_source_folder_goes_is_one_line(fake, tmp_path, capsys,
                                                               monkeypatch):
    root = tmp_path / "sources"
    root.mkdir()
    os.symlink(tmp_path / "nowhere", root / "demo")
    code, out, err = run_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert fake.gets() == []


def test_a_source_folder_that_is_a_link_to_a_folder_is_fetched_into(fake, tmp_path, capsys,
                                                                    monkeypatch):
    """The user's own choice (sources on another disk): followed, as documented."""
    fake.routes[DEMO_PATH] = serve(BODY)
    elsewhere = tmp_path / "big-disk"
    elsewhere.mkdir()
    root = tmp_path / "sources"
    root.mkdir()
    os.symlink(elsewhere, root / "demo")
    code, out, err = run_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 0, err
    assert (elsewhere / "f.bin").read_bytes() == BODY


def test_a_file_in_the_way_of_a_folder_fails_that_file_in_one_line(fake, tmp_path):
    (tmp_path / "simplified").write_text("not a folder")
    spec = FileSpec(url=fake.url("/f"), path="simplified/cat.ndjson", **pins(BODY))
    outcome = fetch_one(tmp_path, spec)
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "a file is in the way" in outcome.message and fake.gets() == []


def test_fetchs_folder_linked_out_of_the_source_folder_is_never_written_through(fake, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "src"
    folder.mkdir()
    os.symlink(outside, folder / STATE_DIR)
    fake.routes["/f"] = serve(BODY)
    outcome = fetch_one(folder, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and "resolves outside" in outcome.message
    assert list(outside.iterdir()) == [] and fake.gets() == []


def run_with_deadline(function, seconds: float, unblock):
    """function() in a thread; when it is still running after `seconds`, `unblock()` frees it
    and the test fails (a hang)."""
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", function()),
                              daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        unblock()
        thread.join(10)
        pytest.fail(f"still running after {seconds} s (a hang)")
    return result["value"]


def open_fifo_once(path):
    """Open a FIFO for reading and writing, which frees a writer (or reader) blocked on it."""
    def unblock():
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        os.close(fd)
    return unblock


def test_a_fifo_where_the_partial_file_goes_is_one_line_not_a_hang(fake, tmp_path):
    fake.routes["/f"] = serve(BODY)
    final, partial = final_and_partial(tmp_path, "f")
    os.makedirs(os.path.dirname(partial))
    os.mkfifo(partial)
    outcome = run_with_deadline(
        lambda: fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY))),
        20, open_fifo_once(partial))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "named pipe" in outcome.message and not os.path.exists(final)
    assert stat.S_ISFIFO(os.lstat(partial).st_mode)  # named, not removed


def test_a_link_where_the_partial_file_goes_is_not_followed(fake, tmp_path):
    fake.routes["/f"] = serve(BODY)
    target = tmp_path / "elsewhere.bin"
    target.write_bytes(b"mine")
    _, partial = final_and_partial(tmp_path / "src", "f")
    os.makedirs(os.path.dirname(partial))
    os.symlink(target, partial)
    outcome = fetch_one(tmp_path / "src", FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and "symbolic link" in outcome.message
    assert target.read_bytes() == b"mine"


@pytest.mark.parametrize("make", ["fifo", "nested", "huge", "list"])
def test_a_damaged_state_file_is_ignored_and_everything_verified_from_its_bytes(
        fake, tmp_path, make):
    fake.routes["/f"] = serve(BODY)
    state = tmp_path / STATE_DIR / "state.json"
    state.parent.mkdir()
    if make == "fifo":
        os.mkfifo(state)
    elif make == "nested":
        state.write_text("[" * 100_000 + "]" * 100_000)
    elif make == "huge":
        with open(state, "wb") as handle:
            handle.truncate(folder_state.STATE_LIMIT + 1)  # sparse
    else:
        state.write_text("[1, 2]")
    outcome = run_with_deadline(
        lambda: fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY))),
        20, open_fifo_once(state) if make == "fifo" else lambda: None)
    assert outcome.status == "fetched", outcome.message
    assert json.loads(state.read_text())["files"]["f"]["size"] == len(BODY)


def test_a_recorded_size_of_the_wrong_shape_gives_the_dry_run_no_size(tmp_path):
    """Entries of the wrong shape (a text, a boolean, a negative size, a list, another URL)
    give no size; a well-formed one does."""
    spec = FileSpec(url="https://example.org/x", path="x")
    planned = fetch_plan.PlannedFile(spec, unknown_size="nobody publishes it")
    record = {"files": {}, "extracted": {}, "sizes": {}}
    for bad in ({"url": spec.url, "size": "12"}, {"url": spec.url, "size": True},
                {"url": spec.url, "size": -1}, [12], {"url": "https://example.org/y", "size": 12}):
        record["sizes"]["x"] = bad
        assert fetch_sizes.known_file(planned, str(tmp_path), record).size is None, bad
    record["sizes"]["x"] = {"url": spec.url, "size": 12}
    assert fetch_sizes.known_file(planned, str(tmp_path), record) == fetch_sizes.KnownFile(
        "to fetch", 12, fetch_sizes.RECORDED)


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket"])
def test_a_destination_that_is_not_a_regular_file_is_named_and_kept(fake, tmp_path, kind):
    fake.routes["/f"] = serve(BODY)
    dest = tmp_path / "f"
    if kind == "fifo":
        os.mkfifo(dest)
    elif kind == "folder":
        dest.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(dest))
        sock.close()
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY)))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "not replaced" in outcome.message and fake.gets() == []


def test_a_second_fetch_into_the_same_folder_is_refused_at_once(fake, tmp_path, capsys,
                                                               monkeypatch):
    import fcntl
    fake.routes[DEMO_PATH] = serve(BODY)
    root = tmp_path / "sources"
    lock = root / "demo" / STATE_DIR / "fetch.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(json.dumps({"pid": 12345, "host": "elsewhere"}))
        held.flush()
        code, out, err = run_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 3 and len(error_lines(err)) == 1, err
    assert "another fetch" in err and "pid 12345" in err
    assert fake.gets() == [] and not (root / "demo" / "f.bin").exists()
    # released: the next fetch runs
    code, out, err = run_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 0, err


def test_a_link_in_place_of_the_fetch_lock_is_one_line_before_any_request(
        fake, tmp_path, capsys, monkeypatch):
    fake.routes[DEMO_PATH] = serve(BODY)
    root = tmp_path / "sources"
    lock = root / "demo" / STATE_DIR / "fetch.lock"
    lock.parent.mkdir(parents=True)
    (tmp_path / "elsewhere").write_text("mine")
    os.symlink(tmp_path / "elsewhere", lock)
    code, out, err = run_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "symbolic link" in err and "fetch's lock file" in err
    assert fake.gets() == [] and (tmp_path / "elsewhere").read_text() == "mine"


@pytest.fixture
def small_filesystem(tmp_path):
    """A 256 kB tmpfs when this machine lets us mount one, else None."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_a_full_disk_is_one_line_and_nothing_partial_under_a_final_name(
        fake, tmp_path, small_filesystem, monkeypatch, disk):
    big = os.urandom(600 << 10)
    fake.routes["/f"] = serve(big)
    if disk == "tmpfs":
        if small_filesystem is None:
            pytest.skip("mounting a tmpfs is not allowed here (the injected case runs)")
        folder = small_filesystem / "src"
    else:
        folder = tmp_path / "src"
        real_open = download._open_regular

        class Full(io.RawIOBase):
            def __init__(self, handle):
                self.handle = handle
            def write(self, block):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                self.handle.close()

        def no_space(path, flags, mode=0o644):
            handle = real_open(path, flags, mode)
            return Full(handle) if flags & os.O_WRONLY else handle
        monkeypatch.setattr(download, "_open_regular", no_space)
    outcome = fetch_one(folder, FileSpec(url=fake.url("/f"), path="f", **pins(big)))
    assert outcome.status == "failed" and one_line(outcome.message)
    assert "No space left on device (errno 28)" in outcome.message
    assert not (folder / "f").exists()
    leftovers = [p for p in folder.rglob("*") if p.is_file() and ".tmp-" in p.name]
    assert leftovers == []


# ---- signals -------------------------------------------------------------------------------


CHILD = textwrap.dedent("""
    import json, sys
    from proactivebench_builder.pipeline.commands import fetch
    from proactivebench_builder.fetch.plan import plan
    source_plan = plan(json.loads(sys.argv[1]))
    fetch.load_plans = lambda names=None: {"demo": source_plan}
    sys.exit(fetch.main(sys.argv[2:]))
""")


def stalling(total: int, first: int):
    """A route sending `first` bytes of a `total`-byte body, then nothing (the connection
    stays open): a reader blocks until its silence timeout."""
    def route(h):
        h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n".encode())
        h.wfile.write(b"s" * first)
        h.wfile.flush()
        time.sleep(120)
    return route


@pytest.mark.build
@pytest.mark.parametrize("signum, status, word", [(signal.SIGTERM, 143, "stopped by SIGTERM"),
                                                   (signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGKILL, -9, None)])
def test_a_signal_during_downloads_stops_at_once_and_leaves_nothing_partial_under_a_final_name(
        fake, tmp_path, signum, status, word):
    """Two files downloading on worker threads, each blocked in a read of a silent server
    (a 60 s silence timeout): the signal ends the command within seconds, in one line; the
    bytes received stay in the partial files, and a rerun resumes them."""
    total = 1 << 20
    data = b"s" * total
    files = [{"url": f"https://example.org/data/{n}", "path": n, **pins(data),
              "pins_from": "https://example.org/sums"} for n in ("a.bin", "b.bin")]
    for n in ("a.bin", "b.bin"):
        fake.routes[f"/example.org/data/{n}"] = stalling(total, 40_000)
    manifest = {"name": "demo", "source_subdir": "demo", "downloads": {"files": files}}
    root = tmp_path / "sources"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(manifest), f"--sources_root={root}",
         f"--mirror={fake.url('')}", "--no_progress", "--jobs=2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    partials = [root / "demo" / STATE_DIR / "partial" / f"{n}.part" for n in ("a.bin", "b.bin")]
    deadline = time.monotonic() + 60
    while not all(p.exists() and p.stat().st_size >= 40_000 for p in partials):
        assert time.monotonic() < deadline and child.poll() is None, child.communicate()
        time.sleep(0.1)
    sent = time.monotonic()
    child.send_signal(signum)
    out, err = child.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert child.returncode == status, err
    if word is not None:
        assert error_lines(err) == [f"run_pipeline.py fetch: {word}"], err
    assert not (root / "demo" / "a.bin").exists() and not (root / "demo" / "b.bin").exists()
    assert all(p.stat().st_size == 40_000 for p in partials)
    # the next run asks each for the rest
    def ranged(h):
        start = int(h.headers["Range"][len("bytes="):-1])
        raw(h, 206, {"Content-Length": str(total - start),
                     "Content-Range": f"bytes {start}-{total - 1}/{total}"}, data[start:])
    for n in ("a.bin", "b.bin"):
        fake.routes[f"/example.org/data/{n}"] = ranged
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(manifest), f"--sources_root={root}",
         f"--mirror={fake.url('')}", "--no_progress", "--jobs=2"],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (root / "demo" / "a.bin").read_bytes() == data
    assert "resumed at byte 40000" in done.stdout


# ---- the manifests' downloads sections --------------------------------------------------------


@pytest.mark.parametrize("change, message", [
    ({"url": "https://[::1/x"}, "not an http(s) URL"),
    ({"path": "a\nb"}, "not a plain relative path"),
])
def test_malformed_download_entries_are_a_plan_error(change, message):
    entry = {"url": "https://example.org/x", "path": "x", "record_only": "because, a test",
             **change}
    with pytest.raises(PlanError) as caught:
        plan({"name": "demo", "source_subdir": "demo", "downloads": {"files": [entry]}})
    assert message in str(caught.value)


@pytest.mark.parametrize("subdir", ["../elsewhere", "/etc", "", "a/../../b"])
def test_a_source_subdir_outside_the_sources_root_is_a_plan_error(subdir):
    with pytest.raises(PlanError, match="source_subdir"):
        plan({"name": "demo", "source_subdir": subdir, "downloads": {"files": [
            {"url": "https://example.org/x", "path": "x", "record_only": "a test, really"}]}})


@pytest.mark.parametrize("line", ["{a.b}", "{a[0]}", "{a!z}", "{a:{b}}"])
def test_a_manual_list_line_that_cannot_be_formatted_is_a_plan_error(line):
    section = {"manual": "do it by hand", "record_only": "nobody publishes sums",
               "manual_list": {"glob": "*", "regex": "(?P<a>.*)", "line": line, "write": "l.txt"}}
    with pytest.raises(PlanError, match="manual_list"):
        plan({"name": "demo", "source_subdir": "demo", "downloads": section})


def test_two_downloads_where_one_is_inside_the_other_are_a_plan_error():
    files = [{"url": "https://example.org/x", "path": p, "record_only": "a test, really"}
             for p in ("a", "a/b")]
    with pytest.raises(PlanError, match="both a file and a folder"):
        plan({"name": "demo", "source_subdir": "demo", "downloads": {"files": files}})


@pytest.mark.build
def test_a_plugins_manifest_with_a_bad_downloads_section_is_one_line(tmp_path):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    for name in ("focus_scenario.py", "focus.yaml"):
        src = os.path.join(REPO, "tests", "extra_scenario", name)
        with open(src, encoding="utf-8") as handle:
            text = handle.read()
        if name == "focus.yaml":
            text += "downloads:\n  files:\n    - {url: 'https://[::1/x', path: x, record_only: why}\n"
        (plugin / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "PROACTIVEBENCH_SCENARIO_PATH": str(plugin)}
    done = subprocess.run([sys.executable, os.path.join(REPO, "run_pipeline.py"), "fetch",
                           f"--sources_root={tmp_path / 'sources'}", "--dry_run"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == [
        "run_pipeline.py fetch: error: manifest focus.yaml: downloads.files[0]: url "
        "'https://[::1/x' is not an http(s) URL"], done.stderr


# ---- the lock files of --verify_sources [--record] ---------------------------------------------


@pytest.fixture()
def locked(tmp_path) -> str:
    """A small source folder, recorded."""
    folder = tmp_path / "src"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "x.json").write_bytes(b"{}")
    (folder / "b.jpg").write_bytes(b"jpeg")
    problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
    assert problems == [] and written
    return str(folder)


def lock_of(folder: str) -> str:
    return os.path.join(folder, source_lock.LOCK_NAME)


def rewrite_lock(folder: str, edit) -> None:
    with open(lock_of(folder), encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    with open(lock_of(folder), "w", encoding="utf-8") as handle:
        handle.writelines(edit(lines))


def compare(folder: str, scenario: str = "demo") -> list[str]:
    return verify_sources({scenario: folder}, {scenario: NO_PINS})


def assert_one_lock_problem(problems: list[str], message: str) -> None:
    assert len(problems) == 2 and message in problems[0], problems  # + the hint to re-record
    assert all(one_line(p) for p in problems)


def entry_line(**fields) -> str:
    return json.dumps(fields) + "\n"


@pytest.mark.parametrize("line, message", [
    ("[" * 100_000 + "]" * 100_000 + "\n", "line 2 is not JSON"),
    (entry_line(path="a/l", symlink="x", size="big"), "line 2"),
    (entry_line(path="a/l", symlink="x", size=10 ** 30), "line 2"),
    (entry_line(path="../../etc/passwd", size=1, sha256="0" * 64), "not a relative path"),
    (entry_line(path="/etc/passwd", size=1, sha256="0" * 64), "not a relative path"),
    (entry_line(path="a/x.json", size=2, sha256="z" * 64), "expected size and sha256"),
    (entry_line(path="a/x.json", size=True, sha256="0" * 64), "expected size and sha256"),
    (entry_line(path=["a"], size=2, sha256="0" * 64), "has no path"),
    ('{"path": "a", "size": ' + "9" * 5000 + "}\n", "line 2 is not JSON"),
    ("\xff\xfe\n", "line 2"),
])
def test_a_malformed_lock_line_is_one_problem(locked, line, message):
    rewrite_lock(locked, lambda lines: [lines[0], line, *lines[1:]])
    assert_one_lock_problem(compare(locked), message)


def test_a_torn_last_line_is_one_problem(locked):
    rewrite_lock(locked, lambda lines: [*lines[:-1], lines[-1][:10]])
    assert_one_lock_problem(compare(locked), "line 4 is not JSON")


def test_duplicate_lock_entries_are_one_problem(locked):
    rewrite_lock(locked, lambda lines: [lines[0], lines[1], *lines[1:]])
    assert_one_lock_problem(compare(locked), "out of order")


def test_a_lock_claiming_a_huge_size_is_one_problem(locked):
    rewrite_lock(locked, lambda lines: [lines[0], lines[1].replace('"size": 2', '"size": '
                                                                  + str(10 ** 40)), *lines[2:]])
    problems = compare(locked)
    assert problems and all(one_line(p) for p in problems)


def test_a_lock_of_another_scenario_is_one_problem(locked):
    assert_one_lock_problem(compare(locked, "other"), "recorded for scenario 'demo'")


def test_a_lock_header_with_a_boolean_version_is_refused(locked):
    rewrite_lock(locked, lambda lines: [lines[0].replace('"version": 1', '"version": true'),
                                        *lines[1:]])
    assert_one_lock_problem(compare(locked), "not a proactivebench-source-lock")


def test_a_lock_line_of_64_mib_costs_no_memory(locked):
    with open(lock_of(locked), "r+b") as handle:
        handle.seek(0, 2)
        handle.truncate(handle.tell() + (64 << 20))  # sparse: one line of zero bytes
    tracemalloc.start()
    try:
        problems = compare(locked)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problems and "longer than" in problems[0], problems
    assert peak < 16 << 20


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_a_lock_file_that_is_not_a_regular_file_is_one_problem(locked, tmp_path, kind):
    os.remove(lock_of(locked))
    if kind == "fifo":
        os.mkfifo(lock_of(locked))
    elif kind == "link":
        outside = tmp_path / "outside.jsonl"
        outside.write_text("{}\n")
        os.symlink(outside, lock_of(locked))
    else:
        os.mkdir(lock_of(locked))
    problems = run_with_deadline(lambda: compare(locked), 20, open_fifo_once(lock_of(locked))
                                 if kind == "fifo" else lambda: None)
    assert_one_lock_problem(problems, "not a regular file")


def test_names_that_are_not_utf8_are_recorded_and_compared(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    with open(os.path.join(bytes(folder), b"caf\xe9.jpg"), "wb") as handle:
        handle.write(b"jpeg")
    problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
    assert problems == [] and written, problems
    assert compare(str(folder)) == []
    with open(os.path.join(bytes(folder), b"caf\xe9.jpg"), "ab") as handle:
        handle.write(b"!")
    problems = compare(str(folder))
    assert problems and "caf" in problems[0] and all(one_line(p) for p in problems)


def test_a_folder_that_cannot_be_listed_is_one_problem(tmp_path):
    """A path deeper than PATH_MAX cannot be listed by its path."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "ok.txt").write_text("ok")
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(20):  # 20 x 250 bytes: past PATH_MAX, made relative to a descriptor
            os.mkdir("d" * 250, dir_fd=fd)
            child = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    try:
        problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
        assert written == [] and problems and all(one_line(p) for p in problems), problems
        assert "cannot be listed" in problems[0]
        assert not os.path.exists(lock_of(str(folder)))
    finally:
        shutil_rmtree_deep(folder)


def shutil_rmtree_deep(folder) -> None:
    subprocess.run(["rm", "-rf", str(folder)], check=False)


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_pinned_checksum_on_a_special_file_names_what_it_is(tmp_path, kind):
    folder = tmp_path / "src"
    folder.mkdir()
    path = folder / "annotations.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    manifest = {"expected_files": {}, "checksums": {"annotations.json": "0" * 64}}
    problems = run_with_deadline(lambda: verify_sources({"demo": str(folder)},
                                                        {"demo": manifest}), 20,
                                 open_fifo_once(path) if kind == "fifo" else lambda: None)
    assert len(problems) == 1 and "not a regular file" in problems[0], problems


def test_a_thousand_nested_folders_are_walked_without_recursion(tmp_path):
    folder = tmp_path / "src"
    deep = str(folder)
    os.mkdir(deep)
    for _ in range(1500):  # one level at a time (pathlib's parents=True recurses)
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    with open(os.path.join(deep, "x"), "wb") as handle:
        handle.write(b"x")
    try:
        problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
        assert problems == [] and "recorded 1 files" in written[0]
        assert compare(str(folder)) == []
    finally:
        shutil_rmtree_deep(folder)  # shutil.rmtree (pytest's cleanup) recurses


def test_a_lock_that_cannot_be_written_is_one_problem(locked):
    """A folder in the lock's place (or a full disk, a read-only folder): nothing is recorded,
    the reason is one line."""
    os.remove(lock_of(locked))
    os.mkdir(lock_of(locked))
    problems, written = record_sources({"demo": locked}, {"demo": NO_PINS})
    assert written == [] and len(problems) == 1 and one_line(problems[0]), problems
    assert "cannot write the lock file" in problems[0]
    assert [n for n in os.listdir(locked) if ".tmp-" in n] == []


def test_a_full_disk_while_recording_is_one_problem(small_filesystem):
    if small_filesystem is None:
        pytest.skip("mounting a tmpfs is not allowed here")
    folder = small_filesystem / "src"
    folder.mkdir()
    for k in range(2000):  # empty files, long names: the lock outgrows the 256 kB disk
        (folder / f"{k:05d}-{'n' * 200}").write_bytes(b"")
    problems, written = record_sources({"demo": str(folder)}, {"demo": NO_PINS})
    assert written == [] and len(problems) == 1 and one_line(problems[0]), problems
    assert "No space left on device" in problems[0]
    assert [n for n in os.listdir(folder) if n.startswith(source_lock.LOCK_NAME)] == []


def test_a_locked_file_replaced_by_a_fifo_is_named_never_opened(locked):
    os.remove(os.path.join(locked, "b.jpg"))
    os.mkfifo(os.path.join(locked, "b.jpg"))
    problems = run_with_deadline(lambda: compare(locked), 20,
                                 open_fifo_once(os.path.join(locked, "b.jpg")))
    assert_one_lock_problem(problems, "b.jpg was a file, is now not a regular file")


# ---- of another identity ---------------------------------------------------------------------


def test_a_file_in_place_from_another_url_is_not_trusted_by_its_record(fake, tmp_path):
    """An unpinned file (record-only) whose manifest now names another URL (e.g. ChangeIt's
    archive at another commit) is fetched again, not trusted for its size and time."""
    fake.routes["/v1"] = serve(b"version one")  # the same size: the server's size (all that
    fake.routes["/v2"] = serve(b"version two")  # checks an unpinned file) cannot tell them
    assert fetch_one(tmp_path, FileSpec(url=fake.url("/v1"), path="f")).status == "fetched"
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/v2"), path="f"))
    assert outcome.status == "fetched", outcome
    assert (tmp_path / "f").read_bytes() == b"version two"


def test_an_extraction_remembered_for_another_url_is_not_trusted(fake, tmp_path):
    def archive(text: bytes) -> bytes:
        return tar_bytes(info("content.txt", text))
    fake.routes["/v1.tar"] = serve(archive(b"one"))
    fake.routes["/v2.tar"] = serve(archive(b"two"))
    for version, text in (("v1", b"one"), ("v2", b"two")):
        spec = FileSpec(url=fake.url(f"/{version}.tar"), path="a.tar",
                        extract=download.ExtractSpec())
        outcome = Downloader(retries=0, remove_archives=True).fetch(str(tmp_path), spec)
        assert outcome.status == "fetched", outcome
        assert (tmp_path / "content.txt").read_bytes() == text
