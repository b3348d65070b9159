"""The HTTP downloader (fetch/download.py) at its edges: every answer a server can give (a
lying Content-Length, a 200 to a Range request, a redirect loop, a trickle, a busy server, ...)
and every thing that can be in the way in the destination folder (a FIFO, a link, a folder, a
full disk), tried with what can be wrong with it. Each case ends in one line (a failed file) or
in correct handling, never in a traceback, a hang, memory that follows what a file claims, or
bytes under a final name that were not verified.

The HTTP cases run against `Fake`, a loopback server whose answer to each path is written by
the test byte for byte. The other fetch test files import it from here. No timing is asserted
beyond deadlines that only a hang would miss."""
from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import socket
import stat
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from proactivebench_builder.fetch import download
from proactivebench_builder.fetch.download import STATE_DIR, Downloader, FileSpec


BODY = bytes(range(256)) * 64  # 16 kB, every byte value


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
