"""Rows of docs/inputs.md that no other test showed (issue 22: every input has a guarantee and a
test). Each test tries one input as docs/inputs.md describes it; each failed when it was written
(a traceback, a hang, a file read through a link) and passes since its fix.

Builds run in a child process with a deadline (a hang is a failure, never a stuck suite); FIFOs
are made by the test and never opened by it."""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import IN_PROCESS, builds, read_json, read_jsonl, worker_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PIPELINE = os.path.join(REPO, "run_pipeline.py")
DEADLINE_S = 600  # a hang, not slowness: a miniature build takes well under a minute


def copy_sources(miniature_root: str, tmp_path, *folders: str) -> str:
    root = str(tmp_path / "sources")
    for folder in folders:
        shutil.copytree(os.path.join(miniature_root, folder), os.path.join(root, folder))
    return root


def build(tmp_path, sources: str, scenarios: str, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    output = str(tmp_path / "out")
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", "--no_progress", "--no_train",
         "--max_bad_fraction=0.9", f"--scenarios={scenarios}", f"--sources_root={sources}",
         f"--output={output}", *worker_flags(extra), *extra],
        capture_output=True, text=True, timeout=DEADLINE_S, cwd=str(tmp_path))
    return result, output


def dead_letter_reasons(output: str) -> dict[str, str]:
    return {d["path"]: d["reason"]
            for d in read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))}


def make_socket(path: str) -> None:
    """A UNIX socket file (it stays on disk once the socket is closed; bound under a short
    name, AF_UNIX paths being limited to ~100 bytes, then moved into place)."""
    import tempfile

    short = tempfile.mkdtemp(prefix="sock", dir="/tmp")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(os.path.join(short, "s"))
    finally:
        sock.close()
    os.rename(os.path.join(short, "s"), path)
    os.rmdir(short)


def make_link_loop(path: str) -> None:
    os.symlink(os.path.basename(path), path)


def replace(path: str, make) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)
    make(path)


def balanced(report: dict) -> bool:
    """raw items = samples + dead letters + exclusions, per scenario (build.json's check)."""
    return all(s["accounted"] and s["raw_items"] == s["samples"] + s["dead_letters"]
               + sum(s.get("excluded", {}).values()) for s in report["scenarios"].values())


# ---- A. raw sources: what is not a regular file -----------------------------------------------

ODD_FILES = {  # relative to the sources root -> what takes the file's place
    "quickdraw/simplified/cat.ndjson": ("socket", make_socket),
    "coco/val2014/COCO_val2014_000000000042.jpg": ("link loop", make_link_loop),
    "ImageNet-C/gaussian_noise/5/n01440764/ILSVRC2012_val_00000001.JPEG": ("folder", os.mkdir),
    "mvpn/data/test_list/test_0000_100.pkl": ("socket", make_socket),
    "rod/rod_1.tar.gz": ("folder", os.mkdir),
}


def test_a_socket_a_link_loop_or_a_folder_in_place_of_a_source_file_is_a_dead_letter(
        tmp_path, miniature_root):
    """Never opened for reading (a socket cannot be, a loop never resolves): each is a counted
    dead letter naming its path, the build goes on and balances."""
    sources = copy_sources(miniature_root, tmp_path, "quickdraw", "coco", "ImageNet-C", "mvpn",
                           "rod")
    for relative, (_, make) in ODD_FILES.items():
        replace(os.path.join(sources, relative), make)
    result, output = build(tmp_path, sources, "quickdraw,coco,imagenet_c,mvpn,rod")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "ok" and balanced(report)
    reasons = dead_letter_reasons(output)
    for relative, (kind, _) in ODD_FILES.items():
        inside = relative.split("/", 1)[1]
        assert any(path.startswith(inside) for path in reasons), (relative, reasons)
        if kind == "socket":  # named as what it is (was "unreadable file: [Errno 6]")
            assert any(path.startswith(inside) and "a socket" in reason
                       for path, reason in reasons.items()), (relative, reasons)


@pytest.fixture(scope="module")
@builds
def video_fifo_build(tmp_path_factory, miniature_root):
    """A ChangeIt build whose one .webm video is a FIFO."""
    tmp_path = tmp_path_factory.mktemp("video_fifo")
    sources = copy_sources(miniature_root, tmp_path, "changeit")
    video = os.path.join(sources, "changeit", "downloads", "beer", "Zx9-cVb7nM1.webm")
    replace(video, os.mkfifo)
    return build(tmp_path, sources, "changeit")


def test_a_fifo_in_place_of_a_video_is_a_dead_letter_never_decoded(video_fifo_build):
    """OpenCV (FFmpeg) would block on a FIFO for ever: the video is refused before it is
    opened for reading, a dead letter naming it; the build goes on and balances."""
    result, output = video_fifo_build
    assert result.returncode == 0, result.stderr[-3000:]
    reasons = dead_letter_reasons(output)
    assert any("Zx9-cVb7nM1" in path and "named pipe" in reason
               for path, reason in reasons.items()), reasons
    assert balanced(read_json(os.path.join(output, "reports", "build.json")))


def test_a_fifo_in_place_of_a_video_is_an_ordinary_dead_letter(video_fifo_build):
    result, output = video_fifo_build
    assert "Traceback" not in result.stderr
    reasons = [r for p, r in dead_letter_reasons(output).items() if "Zx9-cVb7nM1" in p]
    assert reasons and all(not r.startswith("unexpected error") for r in reasons), reasons


def test_a_class_folder_linked_to_its_parent_is_read_once(tmp_path, miniature_root):
    """A link inside the root that loops (`n09999999 -> ..`) is no way out and no endless walk:
    the build ends, and what it reads through the link is accounted for."""
    sources = copy_sources(miniature_root, tmp_path, "ImageNet-C")
    os.symlink("..", os.path.join(sources, "ImageNet-C", "contrast", "5", "n09999999"))
    result, output = build(tmp_path, sources, "imagenet_c")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "ok" and balanced(report)


NEEDED = {  # a file every item of its scenario needs -> what takes its place
    "coco-annotations-fifo": ("coco", "coco/annotations/instances_val2014.json", os.mkfifo,
                              "named pipe"),
    "changeit-categories-fifo": ("changeit", "changeit/categories.csv", os.mkfifo, "named pipe"),
    "changeit-labels-socket": ("changeit", "changeit/labels.csv", make_socket, "labels.csv"),
    "vsod-labels-folder": ("vsod", "vsod/proactivebench_vsod_labels.csv", os.mkdir, "folder"),
}


@pytest.mark.parametrize("case", sorted(NEEDED))
def test_a_file_every_item_needs_that_is_not_a_regular_file_is_named(
        tmp_path, miniature_root, case):
    """Never opened for reading (a FIFO would block); the build fails naming the file, no
    traceback, nothing marked ok."""
    scenario, relative, make, what = NEEDED[case]
    sources = copy_sources(miniature_root, tmp_path, relative.split("/")[0])
    replace(os.path.join(sources, relative), make)
    result, output = build(tmp_path, sources, scenario)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    name = os.path.basename(relative)
    told = result.stderr
    if os.path.exists(os.path.join(output, "reports", "dead_letters.jsonl")):
        told += json.dumps(dead_letter_reasons(output))
    assert name in told and what in told, result.stderr[-3000:]


# ---- A. raw sources: parsers ------------------------------------------------------------------

def _entity_bomb() -> bytes:
    entities = ['<!ENTITY e0 "lol">'] + [
        f'<!ENTITY e{i} "{("&e%d;" % (i - 1)) * 10}">' for i in range(1, 10)]
    return (('<?xml version="1.0"?><!DOCTYPE annotation [' + "".join(entities) + "]>"
             "<annotation><size><width>&e9;</width><height>1</height></size></annotation>")
            .encode())


@pytest.mark.parametrize("xml", [
    _entity_bomb(),
    b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/hostname">]>'
    b"<annotation><size><width>&e;</width><height>1</height></size></annotation>",
], ids=["billion-laughs", "external-entity"])
def test_vsod_xml_entities_are_a_bad_item_and_expand_nothing(xml):
    """expat refuses external entities and stops entity expansion at its amplification limit
    (activated past 8 MiB of output): the peak is bounded by that limit (~64 MB traced, the same
    for 9 or 30 levels of nesting), not by what the file claims."""
    from proactivebench_builder.transforms.base import BadItem
    from proactivebench_builder.transforms.vsod.scenario import parse_annotation

    tracemalloc.start()
    try:
        with pytest.raises(BadItem, match="bad XML"):
            parse_annotation(xml)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 128 << 20


def test_a_list_pickle_claiming_a_huge_bytes_object_is_a_bad_pickle():
    """BINBYTES8 declaring 2^40 bytes in a 12-byte pickle: refused, nothing allocated."""
    from proactivebench_builder.transforms.base import BadItem
    from proactivebench_builder.transforms.mvpn.scenario import load_sample_list

    data = b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"."
    tracemalloc.start()
    try:
        with pytest.raises(BadItem, match="bad pickle"):
            load_sample_list(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


# ---- C. flags: --seed ---------------------------------------------------------------------------

def test_any_integer_seed_is_accepted_and_recorded(tmp_path, miniature_root):
    """--seed takes any integer (negative, beyond 64 bits): choices derive from a hash of
    (seed, scenario, key), and the seed is recorded as given."""
    from proactivebench_builder.core.seeding import rng_for

    for seed in (-(2 ** 70), 2 ** 70):
        assert rng_for(seed, "quickdraw", "k", "p").random() == \
            rng_for(seed, "quickdraw", "k", "p").random()
    assert rng_for(2 ** 70, "quickdraw", "k", "p").random() != \
        rng_for(-(2 ** 70), "quickdraw", "k", "p").random()
    sources = copy_sources(miniature_root, tmp_path, "quickdraw")
    result, output = build(tmp_path, sources, "quickdraw", f"--seed={-(2 ** 70)}")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "ok"
    assert str(-(2 ** 70)) in json.dumps(report)


# ---- release_labels --release DIR ---------------------------------------------------------------

def release_labels(tmp_path, jsonl: bytes | None, make=None) -> subprocess.CompletedProcess:
    release = tmp_path / "release"
    release.mkdir()
    target = release / "MVP-N_preprocessed.jsonl"
    if make is not None:
        make(str(target))
    else:
        target.write_bytes(jsonl)
    return subprocess.run(
        [sys.executable, RUN_PIPELINE, "release_labels", "--release", str(release),
         "--source", f"mvpn={tmp_path / 'mvpn'}", "--scenarios", "mvpn"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))


@pytest.mark.build
def test_release_lines_that_are_not_records_are_notes(tmp_path):
    result = release_labels(tmp_path, b'[1]\n"x"\n\xff\xfe\n{"image_template": 5, "answer": [1]}\n')
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "no labels in the records of mvpn" in result.stderr
    assert not (tmp_path / "mvpn").exists()


@pytest.mark.build
@pytest.mark.parametrize("make, what", [
    (os.mkfifo, "not a regular file"),
    (lambda path: open(path, "wb").truncate(300 << 20), "far more than a released JSONL file"),
], ids=["fifo", "huge"])
def test_a_release_jsonl_that_is_not_a_small_regular_file_is_one_line(tmp_path, make, what):
    result = release_labels(tmp_path, None, make)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and what in lines[0], result.stderr


@pytest.mark.build
def test_a_release_line_nested_too_deeply_is_not_a_traceback(tmp_path):
    result = release_labels(tmp_path, b"[" * 100000 + b"]" * 100000 + b"\n")
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode in (1, 2)


# ---- H. a Hub dataset of another identity -------------------------------------------------------

def test_a_hub_dataset_that_is_not_proactivebench_is_refused_row_by_row(
        tmp_path, capsys, monkeypatch):
    """A dataset id that loads but holds other rows (another dataset, another schema): each row
    is checked against the record contract before it is played; nothing is scored."""
    import datasets

    from proactivebench_builder.runtime import cli, loading

    monkeypatch.setattr(loading, "check_hub", lambda dataset_id: None)
    monkeypatch.setattr(datasets, "get_dataset_config_names", lambda *a, **k: ["QuickDraw"])
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *a, **k: [{"text": "a review", "label": 1},
                                         {"id": 0, "prompt": 5, "answer": None}])
    results = tmp_path / "r.jsonl"
    try:
        status = cli.main(["evaluate", "--data", "someone/OtherDataset", "--model", "oracle",
                           "--scenarios", "quickdraw", "--results", str(results)])
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    assert status == 2 and "Traceback" not in err, err
    assert "--data someone/OtherDataset: QuickDraw row 0" in err, err
    assert not results.exists() or results.read_text() == ""


# ---- C. environment: proxies ------------------------------------------------------------------

class _Proxy:
    """A loopback HTTP proxy that answers every request itself (a chat completion for a POST,
    `body` for a GET) and records the request line and headers."""

    def __init__(self, body: bytes = b""):
        self.requests: list[tuple[str, str, dict]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, data: bytes):
                proxy.requests.append((self.command, self.path, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer(json.dumps({"choices": [{"message": {"content": "via proxy"}}]})
                             .encode())

            def do_GET(self):
                self._answer(body)

            def do_HEAD(self):
                self._answer(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _only_this_proxy(monkeypatch, url: str) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                 "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", url)


def test_a_model_endpoint_is_reached_through_the_proxy_the_environment_names(monkeypatch):
    """http_proxy is honoured (urllib's rules, no_proxy included): the request, and the API key
    with it, go to the proxy, which is the user's to choose; redirects stay refused."""
    from proactivebench_builder.runtime.models import OpenAIChatModel

    proxy = _Proxy()
    try:
        _only_this_proxy(monkeypatch, proxy.url)
        model = OpenAIChatModel("m", base_url="http://model.invalid/v1", api_key="k",
                                timeout=10, max_retries=0)
        assert model.generate([{"role": "user", "content": "hi"}]) == "via proxy"
        method, path, headers = proxy.requests[0]
        assert method == "POST" and path == "http://model.invalid/v1/chat/completions"
        assert headers.get("Authorization") == "Bearer k"
    finally:
        proxy.close()


def test_fetch_downloads_through_the_proxy_the_environment_names(monkeypatch, tmp_path):
    """fetch (requests) honours http_proxy too; the bytes are verified against the pins the
    same way whatever carried them."""
    import hashlib

    from proactivebench_builder.fetch.download import Downloader, FileSpec

    body = bytes(range(256)) * 16
    proxy = _Proxy(body)
    try:
        _only_this_proxy(monkeypatch, proxy.url)
        spec = FileSpec(url="http://files.invalid/f.bin", path="f.bin", size=len(body),
                        sha256=hashlib.sha256(body).hexdigest())
        outcome = Downloader(retries=0, retry_wait=0, timeout=10).fetch(str(tmp_path), spec)
        assert outcome.status == "fetched", outcome.message
        assert (tmp_path / "f.bin").read_bytes() == body
        assert any(path == "http://files.invalid/f.bin" for _, path, _ in proxy.requests)
    finally:
        proxy.close()


# ---- the output folder's lock on a non-local output (a marker file) ---------------------------

@pytest.mark.parametrize("content", [
    json.dumps({"pid": 1, "host": "another-host", "command": "build", "started": "t"}).encode(),
    b"[1]", b"\xff" * 10, b"x" * 100000,
], ids=["another-host", "a-list", "not-utf8", "huge"])
def test_a_marker_left_on_a_remote_output_is_refused_naming_how_to_remove_it(content):
    """gs://, s3://: no lock primitive, a marker file. One held by a build elsewhere (or one
    that names no holder at all) is refused in one line saying how to remove it."""
    import uuid

    from proactivebench_builder.core import fileio
    from proactivebench_builder.core.errors import FolderLocked
    from proactivebench_builder.pipeline.folder_lock import BuildLock

    output = f"memory://inputs-gaps-{uuid.uuid4().hex}/out"
    fileio.write_bytes_atomic(f"{output}/.build.lock", content)
    with pytest.raises(FolderLocked, match=r"remove memory://.*\.build\.lock and build again"):
        with BuildLock(output):
            pass
    assert fileio.read_bytes(f"{output}/.build.lock") == content


@pytest.mark.build
def test_a_marker_of_a_dead_build_on_this_host_is_taken_over_and_removed():
    import socket as socket_
    import uuid

    from proactivebench_builder.core import fileio
    from proactivebench_builder.pipeline.folder_lock import BuildLock

    output = f"memory://inputs-gaps-{uuid.uuid4().hex}/out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    fileio.write_bytes_atomic(f"{output}/.build.lock", json.dumps(
        {"pid": int(dead.stdout), "host": socket_.gethostname()}).encode())
    with BuildLock(output):
        assert json.loads(fileio.read_bytes(f"{output}/.build.lock"))["pid"] == os.getpid()
    assert not fileio.exists(f"{output}/.build.lock")


# ---- --import_upstream: a line longer than the cap ----------------------------------------------

def test_an_overlong_upstream_line_is_skipped_unread_and_named():
    """A line over MAX_LINE_BYTES is yielded as None (its rest skipped a block at a time, never
    held), becomes a BadRecord naming the cap, and the next line is read as usual."""
    import io

    from proactivebench_builder.core.fileio import numbered_lines
    from proactivebench_builder.pipeline.import_upstream import BadRecord, parse_record

    data = b'{"a": 1}\n' + b"x" * (5 << 20) + b'\n{"b": 2}\n'
    tracemalloc.start()
    try:
        lines = list(numbered_lines(io.BytesIO(data), limit=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [number for number, _ in lines] == [1, 2, 3]
    assert lines[1][1] is None and lines[2][1] == b'{"b": 2}\n'
    assert peak < 4 << 20
    with pytest.raises(BadRecord, match="a line longer than 16 MiB"):
        parse_record(None)


# ---- --import_upstream DIR --keep_list released: the driver's count of the release's ids -------

def released_counts_check(tmp_path, make) -> subprocess.CompletedProcess:
    """A build that checks the release's counts before any work (--keep_list released) on a
    release folder holding only QuickDraw's JSONL, made by `make(path)`."""
    release = tmp_path / "release"
    release.mkdir()
    make(str(release / "QuickDraw_preprocessed.jsonl"))
    return subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", "--no_progress",
         "--scenarios=quickdraw", f"--import_upstream={release}", "--keep_list=released",
         f"--output={tmp_path / 'out'}"],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path))


@pytest.mark.build
def test_a_release_that_is_not_the_release_is_one_line_before_any_work(tmp_path):
    result = released_counts_check(
        tmp_path, lambda path: open(path, "wb").write(b'{"id": 1}\n[1]\nnot json\n'))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert "is not the release's test/ folder" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.build
def test_a_release_line_nested_too_deeply_is_skipped_by_the_count(tmp_path):
    result = released_counts_check(tmp_path, lambda path: open(path, "wb").write(b"[" * 100000 + b"\n"))
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 2


def _fifo_check(tmp_path) -> str:
    try:
        result = released_counts_check(tmp_path, os.mkfifo)
    except subprocess.TimeoutExpired:
        return "hang"
    return result.stderr


@pytest.mark.build
def test_a_release_jsonl_that_is_a_fifo_is_one_line_when_counted(tmp_path):
    stderr = _fifo_check(tmp_path)
    assert stderr != "hang", "the build blocked on the FIFO"
    assert "named pipe" in stderr and "Traceback" not in stderr, stderr[-2000:]


# ---- a partial rebuild reads the folder's previous reports --------------------------------------

@pytest.fixture(scope="module")
@builds
def two_scenario_build(tmp_path_factory, miniature_root):
    """A complete build of QuickDraw and ImageNet-C (no train split), for updates to copy."""
    tmp_path = tmp_path_factory.mktemp("two_scenarios")
    sources = copy_sources(miniature_root, tmp_path, "quickdraw", "ImageNet-C")
    result, output = build(tmp_path, sources, "quickdraw,imagenet_c")
    assert result.returncode == 0, result.stderr[-3000:]
    return sources, output


def _damage_fifo(path: str) -> None:
    os.remove(path)
    os.mkfifo(path)


def _damage_lines(path: str) -> None:
    with open(path, "ab") as handle:
        handle.write(b"not json\n" + b"[" * 100000 + b"\n\xff\xfe\n")


def _damage_filter_report(path: str) -> None:
    with open(os.path.join(os.path.dirname(path), "filter.json"), "wb") as handle:
        handle.write(b"[1]")


@pytest.mark.parametrize("damage", [
    _damage_fifo,
    _damage_filter_report,
    _damage_lines,
], ids=["fifo", "filter-json", "lines"])
def test_an_update_over_damaged_previous_reports_is_one_line_or_rebuilt(
        two_scenario_build, tmp_path, damage):
    """An update (rebuilding QuickDraw only) reads the folder's previous filter.json and merges
    its dead_letters.jsonl, which build.json's digests do not cover: a FIFO, a report of another
    shape or lines that are not JSON end the update in one line (or are left out), never a hang
    or a traceback."""
    sources, full = two_scenario_build
    output = str(tmp_path / "out")
    shutil.copytree(full, output)
    damage(os.path.join(output, "reports", "dead_letters.jsonl"))
    try:
        result = subprocess.run(
            [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", IN_PROCESS, "--no_progress",
             "--no_train", "--max_bad_fraction=0.9", "--scenarios=quickdraw",
             f"--sources_root={sources}", f"--output={output}", "--set",
             "quickdraw.samples_per_class=5"],
            capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    except subprocess.TimeoutExpired:
        pytest.fail("the update blocked")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if "FAILED" in line or "error" in line]
        named = "filter.json" if damage is _damage_filter_report else "dead_letters.jsonl"
        assert lines and named in lines[-1], result.stderr[-3000:]


# ---- publish --to FOLDER: the record of what an earlier publish wrote -----------------------------

def publish_to(folder: str, target: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, RUN_PIPELINE, "publish", folder, "--to", target],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
@builds
def published(two_scenario_build, tmp_path_factory):
    _, folder = two_scenario_build
    target = str(tmp_path_factory.mktemp("published") / "target")
    result = publish_to(folder, target)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder, target


def _record_fifo(path: str) -> None:
    os.remove(path)
    os.mkfifo(path)


def _record_bytes(data: bytes):
    def write(path: str) -> None:
        with open(path, "wb") as handle:
            handle.write(data)
    return write


@pytest.mark.parametrize("damage", [
    _record_fifo, _record_bytes(b"[1]"), _record_bytes(b"[" * 100000),
    _record_bytes(b'{"files": ["../outside.txt", "/etc/hostname", 5]}'),
    _record_bytes(b'{"files": ["../outside.txt", "/tmp/x"]}'),
], ids=["fifo", "a-list", "nested", "not-paths", "paths-leading-out"])
def test_a_damaged_publish_record_in_the_target_deletes_nothing_of_the_users(
        published, tmp_path, damage):
    """`.proactivebench-publish.json` in a folder target is read as untrusted: a FIFO, another
    shape or paths leading out are a note (only files the card's globs match are then stale);
    nothing outside the target and none of the user's own files is deleted."""
    from proactivebench_builder.pipeline.publish import MANIFEST

    folder, first = published
    target = tmp_path / "target"
    shutil.copytree(first, target)
    (target / "mydata").mkdir()
    (target / "mydata" / "precious.txt").write_text("mine")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the target's")
    damage(str(target / MANIFEST))
    result = publish_to(folder, str(target))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert outside.read_text() == "not the target's"
    assert (target / "mydata" / "precious.txt").read_text() == "mine"
    assert json.loads((target / MANIFEST).read_text())["files"]


# ---- --dask_client_address ----------------------------------------------------------------------

def test_an_unreachable_dask_scheduler_is_one_line(tmp_path, miniature_root):
    pytest.importorskip("distributed")
    sources = copy_sources(miniature_root, tmp_path, "quickdraw")
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:9",
         "--no_progress", "--scenarios=quickdraw", f"--sources_root={sources}",
         f"--output={tmp_path / 'out'}"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "127.0.0.1:9" in result.stderr.strip().splitlines()[-1]


# ---- fetch --mirror URL ---------------------------------------------------------------------------

def run_fetch(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, RUN_PIPELINE, "fetch", "--sources_root", str(tmp_path / "sources"),
         "--scenarios", "rod", "--retries", "0", "--no_progress", *flags],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))


@pytest.mark.build
@pytest.mark.parametrize("mirror", ["nosuch://x", "file:///etc"])
def test_a_mirror_that_is_not_http_is_one_line_before_any_request(tmp_path, mirror):
    result = run_fetch(tmp_path, "--mirror", mirror)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "expected an http(s) URL" in lines[0], \
        result.stderr


@pytest.mark.build
def test_a_mirror_url_that_cannot_be_split_is_one_line(tmp_path):
    result = run_fetch(tmp_path, "--mirror", "http://[::1")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]


# ---- --model / --judge openai:MODEL@BASE_URL ----------------------------------------------------

@pytest.mark.parametrize("spec", [
    "openai:m@http://[::1",
    "openai:m@file:///tmp/replies",
    "openai:",
], ids=["ipv6-unclosed", "file-url", "no-model"])
def test_an_endpoint_that_is_not_an_http_url_is_refused_before_any_work(spec):
    from proactivebench_builder.runtime.model_specs import ModelSpecError, check_model_spec

    with pytest.raises(ModelSpecError):
        check_model_spec(spec)


# ---- --output that the workers reach but the launcher does not see --------------------------------

def test_an_output_the_launcher_cannot_read_back_is_one_line(tmp_path, miniature_root):
    sources = copy_sources(miniature_root, tmp_path, "quickdraw")
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", "--no_progress", "--no_train",
         "--direct_num_workers=2", "--scenarios=quickdraw", f"--sources_root={sources}",
         "--output=memory://inputs-gaps/out"],
        capture_output=True, text=True, timeout=DEADLINE_S, cwd=str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]


# ---- publish --repo_id ----------------------------------------------------------------------------

def test_a_repo_id_the_hub_cannot_name_is_one_line(two_scenario_build, tmp_path):
    _, folder = two_scenario_build
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "publish", folder, "--repo_id", "a/b/c", "--dry-run",
         "--allow_stand_ins"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]


# ---- the card and build.json of a build folder, linked from outside --------------------------------

@pytest.mark.parametrize("command, name", [
    (c, n) for n in ("README.md", "reports/build.json")
    for c in ("validate", "evaluate", "inspect", "publish")])
def test_a_card_or_report_linked_from_outside_the_folder_is_refused(
        two_scenario_build, tmp_path, command, name):
    """A build writes regular files only: a card or a build.json that is a link leading out of
    the folder is read by no reader (confinement), as publish already refuses it."""
    _, built = two_scenario_build
    folder = tmp_path / "built"
    shutil.copytree(built, folder)
    outside = tmp_path / "elsewhere"
    shutil.move(str(folder / name), outside)
    os.symlink(outside, folder / name)
    argv = {
        "validate": [sys.executable, RUN_PIPELINE, "validate", str(folder)],
        "evaluate": [sys.executable, "-m", "proactivebench_builder.runtime", "evaluate",
                     "--data", str(folder), "--model", "oracle", "--scenarios", "quickdraw",
                     "--results", str(tmp_path / "r.jsonl")],
        "inspect": [sys.executable, RUN_PIPELINE, "inspect", str(folder), "--out",
                    str(tmp_path / "sheets"), "--per_scenario", "1"],
        "publish": [sys.executable, RUN_PIPELINE, "publish", str(folder), "--to",
                    str(tmp_path / "target")],
    }[command]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    said = result.stdout + result.stderr  # validate lists its problems on stdout
    assert result.returncode in (1, 2) and f"{name}: unreadable: a symbolic link" in said \
        or command in ("evaluate", "publish") and result.returncode == 2 and name in said, said
    assert "Traceback" not in said
