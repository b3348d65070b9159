"""`run_pipeline.py fetch` (pipeline/commands/fetch.py, fetch/download.py, fetch/extract.py)
against a local HTTP server: the bundled miniature sources, written by the scenarios, packed
and laid out as the real download URLs are (https://HOST/PATH served at
http://127.0.0.1:PORT/HOST/PATH, fetched with --mirror), with the manifests' pins replaced by
those of the miniature files. The server speaks HTTP Range, can drop a connection half-way
through a file, and logs every request, so each test says what went over the wire. The
command's edges (what is in the way of a source folder, fetch's lock, signals, a plugin's bad
downloads section) run a one-file plan against test_download's loopback server. No timing
is asserted beyond deadlines that only a hang would miss."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_download import BODY, fake, pins, raw, serve  # noqa: F401 (fake: a fixture)
from test_runtime_cli import _Proxy, _only_this_proxy
from proactivebench_builder.fetch import extract as extraction
from proactivebench_builder.fetch.download import STATE_DIR, Downloader, FileSpec
from proactivebench_builder.pipeline.commands import fetch
from proactivebench_builder.fetch.plan import (
    SOURCES_ROOT_PLACEHOLDER, PlanError, plan)
from proactivebench_builder.core.phases import human_size
from proactivebench_builder.transforms import manifest_of

FETCHED = ("quickdraw", "imagenet_c", "coco", "rod", "changeit")
MANUAL = ("vsod", "mvpn", "changeit")
ALL = FETCHED + ("vsod", "mvpn")
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "sources.md")
IMAGENET_C_ARCHIVES = {  # the real tars' corruptions (docs/sources.md; the Zenodo record)
    "noise.tar": ["gaussian_noise", "shot_noise", "impulse_noise"],
    "blur.tar": ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur"],
    "weather.tar": ["snow", "frost", "fog", "brightness"],
    "digital.tar": ["contrast", "elastic_transform", "pixelate", "jpeg_compression"],
    "extra.tar": ["speckle_noise", "gaussian_blur", "spatter", "saturate"],
}
CHANGEIT_REPO = ("categories.csv", "labels.csv", "videos", "annotations")


# ---- the mirror: miniature sources laid out as the real URLs ---------------------------------


def served_path(mirror: str, url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return os.path.join(mirror, parts.netloc, *urllib.parse.unquote(parts.path).split("/"))


def files_under(folder: str) -> list[str]:
    out = []
    for base, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            out.append(os.path.relpath(os.path.join(base, name), folder).replace(os.sep, "/"))
    return out


def write_tar(path: str, folder: str, members: list[str], gz: bool = False) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tarfile.open(path, "w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tar:
        for relative in members:
            info = tar.gettarinfo(os.path.join(folder, relative), arcname=relative)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(os.path.join(folder, relative), "rb") as handle:
                tar.addfile(info, handle)


def write_zip(path: str, entries: dict[str, bytes]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in sorted(entries.items()):
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)


def folder_entries(folder: str, prefix: str = "", only=None) -> dict[str, bytes]:
    entries = {}
    for relative in files_under(folder):
        if only and relative.split("/")[0] not in only:
            continue
        with open(os.path.join(folder, relative), "rb") as handle:
            entries[prefix + relative] = handle.read()
    return entries


def build_mirror(miniature_root: str, mirror: str) -> None:
    plans = {name: plan(manifest_of(name)) for name in FETCHED}
    qd = os.path.join(miniature_root, "quickdraw")
    for relative in files_under(qd):
        if relative.startswith("simplified/"):
            url = plans["quickdraw"].files[0].spec.url  # any: only the host and folder matter
            target = os.path.join(os.path.dirname(served_path(mirror, url)),
                                  relative.split("/", 1)[1])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(qd, relative), target)
    inc = os.path.join(miniature_root, "ImageNet-C")
    for planned in plans["imagenet_c"].files:
        corruptions = IMAGENET_C_ARCHIVES[planned.spec.path]
        members = [r for r in files_under(inc) if r.split("/")[0] in corruptions]
        write_tar(served_path(mirror, planned.spec.url), inc, members)
    coco = os.path.join(miniature_root, "coco")
    for planned in plans["coco"].files:
        top = {"annotations_trainval2014.zip": "annotations", "val2014.zip": "val2014",
               "train2014.zip": "train2014"}[planned.spec.path]
        write_zip(served_path(mirror, planned.spec.url), folder_entries(coco, only={top}))
    rod = os.path.join(miniature_root, "rod")
    for planned in plans["rod"].files:
        target = served_path(mirror, planned.spec.url)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(rod, planned.spec.path), target)
    changeit = os.path.join(miniature_root, "changeit")
    spec = plans["changeit"].files[0].spec
    top = spec.path[:-len(".zip")] + "/"  # GitHub's archives hold one folder, <repo>-<commit>/
    write_zip(served_path(mirror, spec.url), folder_entries(changeit, top, set(CHANGEIT_REPO)))


@pytest.fixture(scope="module")
def mirror(miniature_root, tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("mirror"))
    build_mirror(miniature_root, folder)
    return folder


def pins_of(path: str) -> dict:
    with open(path, "rb") as handle:
        data = handle.read()
    return {"size": len(data), "md5": hashlib.md5(data).hexdigest(),
            "sha256": hashlib.sha256(data).hexdigest()}


def mirror_plans(mirror: str, miniature_root: str, extra_classes=()) -> dict:
    """The packaged plans, with every pin the real manifest has replaced by the served file's
    own (so a pinned size stays pinned, an md5 stays an md5; no approximate size is kept),
    QuickDraw restricted to the miniature's classes (plus `extra_classes`, which the mirror
    lacks)."""
    plans = {name: plan(manifest_of(name)) for name in ALL}
    qd_classes = sorted(p[len("simplified/"):-len(".ndjson")]
                        for p in files_under(os.path.join(miniature_root, "quickdraw"))
                        if p.startswith("simplified/")) + list(extra_classes)
    manifest = dict(manifest_of("quickdraw"), classes=qd_classes)
    plans["quickdraw"] = plan(manifest)
    for source_plan in plans.values():
        for index, planned in enumerate(source_plan.files):
            spec = planned.spec
            served = served_path(mirror, spec.url)
            if not os.path.exists(served):
                continue
            pins = pins_of(served)
            spec = dataclasses.replace(spec, **{k: pins[k] for k in ("size", "md5", "sha256")
                                                if getattr(spec, k) is not None})
            # the real file's approximate size (ImageNet-C's) is not the served file's either
            source_plan.files[index] = dataclasses.replace(planned, spec=spec, approx_size=None)
    return plans


# ---- the local server ------------------------------------------------------------------------


class Server:
    """A loopback HTTP server over a folder: GET and HEAD, single byte ranges, 404s; `drop`
    names URL paths whose next GET is cut half-way through; `headers` adds response headers
    per URL path; `log` holds (method, path, Range header) per request."""

    def __init__(self, root: str):
        self.root = root
        self.log: list[tuple[str, str, str | None]] = []
        self.drop: set[str] = set()
        self.headers: dict[str, dict[str, str]] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self.respond(body=False)

            def do_GET(self):
                self.respond(body=True)

            def respond(self, body: bool):
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                with server.lock:
                    server.log.append((self.command, path, self.headers.get("Range")))
                    drop = body and path in server.drop
                    server.drop.discard(path)
                parts = [p for p in path.split("/") if p]
                local = os.path.join(server.root, *parts)
                if ".." in parts or not os.path.isfile(local):
                    self.send_error(404, "Not Found")
                    return
                with open(local, "rb") as handle:
                    data = handle.read()
                start, status = 0, 200
                match = re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range") or "")
                if match:
                    start = int(match[1])
                    end = int(match[2]) if match[2] else len(data) - 1
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status, data_range = 206, (start, min(end, len(data) - 1))
                chunk = data[start:data_range[1] + 1] if status == 206 else data
                self.send_response(status)
                self.send_header("Content-Length", str(len(chunk)))
                if status == 206:
                    self.send_header("Content-Range",
                                     f"bytes {data_range[0]}-{data_range[1]}/{len(data)}")
                self.send_header("Accept-Ranges", "bytes")
                for key, value in server.headers.get(path, {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if not body:
                    return
                if drop:  # half the body, then the connection is gone
                    self.wfile.write(chunk[:max(1, len(chunk) // 2)])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(chunk)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def requests(self, method: str = "GET", path_end: str = "") -> list[tuple]:
        with self.lock:
            return [entry for entry in self.log if entry[0] == method
                    and entry[1].endswith(path_end)]

    def clear(self) -> None:
        with self.lock:
            self.log.clear()


@pytest.fixture()
def server(mirror):
    srv = Server(mirror)
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


@pytest.fixture()
def plans(mirror, miniature_root, monkeypatch):
    built = mirror_plans(mirror, miniature_root)
    monkeypatch.setattr(fetch, "load_plans", lambda names=None: built)
    return built


def run_fetch(capsys, root: str, server: Server, *extra: str) -> tuple[int, str, str]:
    code = fetch.main([f"--sources_root={root}", f"--mirror={server.url}", "--no_progress",
                       "--retry_wait=0", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fetched_tree(folder: str, plan_) -> dict[str, bytes]:
    """What the build reads in a fetched folder: fetch's bookkeeping, the kept archives and
    the manual list left out."""
    archives = {p.spec.path for p in plan_.files if p.spec.extract}
    listed = {plan_.manual_list["write"]} if plan_.manual_list else set()
    return {path: data for path, data in folder_entries(folder).items()
            if path.split("/")[0] != STATE_DIR and path not in archives and path not in listed}


def miniature_tree(miniature_root: str, name: str) -> dict[str, bytes]:
    folder = os.path.join(miniature_root, manifest_of(name)["source_subdir"])
    only = set(CHANGEIT_REPO) if name == "changeit" else None  # the videos are manual
    skipped = {".miniature-complete"}
    if name == "rod":
        skipped.add("README.md")  # the Hub card: not read by the build, so not fetched
    return {path: data for path, data in folder_entries(folder, only=only).items()
            if path not in skipped}


# ---- a first fetch, then a second --------------------------------------------------------


def test_first_fetch_lays_out_every_source_as_the_build_reads_it(
        tmp_path, server, plans, miniature_root, capsys):
    root = str(tmp_path / "sources")
    code, out, err = run_fetch(capsys, root, server)
    assert code == 0, err
    assert err == ""
    for name in FETCHED:
        folder = os.path.join(root, plans[name].subdir)
        assert fetched_tree(folder, plans[name]) == miniature_tree(miniature_root, name), name
    requested = {path for _, path, _ in server.requests()}
    assert len(requested) == sum(len(plans[n].files) for n in FETCHED)
    assert all(rng is None for _, _, rng in server.requests())  # nothing to resume
    # the manual steps, with the real folders, for every source that needs them
    for name in MANUAL:
        steps = fetch.manual_text(plans[name], os.path.join(root, plans[name].subdir), root)
        assert steps in out, name
    assert SOURCES_ROOT_PLACEHOLDER not in out
    # a manual-only source gets no empty folder: the build still names it as missing
    assert not os.path.exists(os.path.join(root, "vsod"))
    assert not os.path.exists(os.path.join(root, "mvpn"))
    # ChangeIt's list of annotated videos, from the fetched repository
    listed = os.path.join(root, "changeit", "annotated_videos.txt")
    expected = sorted(f"{p.split('/')[1]} {p.split('/')[2][:-len('.fps1.csv')]}"
                      for p in files_under(os.path.join(miniature_root, "changeit"))
                      if p.startswith("annotations/"))
    with open(listed, encoding="utf-8") as handle:
        assert handle.read().splitlines() == expected
    assert f"{listed}: {len(expected)} lines" in out
    assert re.search(rf"fetch: {len(requested)} fetched, 0 already in place and verified, "
                     r"0 failed", out)


def test_a_second_fetch_skips_every_verified_file(tmp_path, server, plans, capsys):
    root = str(tmp_path / "sources")
    assert run_fetch(capsys, root, server)[0] == 0
    server.clear()
    code, out, err = run_fetch(capsys, root, server)
    assert code == 0, err
    assert server.log == []  # trusted from fetch's record: nothing asked, nothing read again
    total = sum(len(plans[n].files) for n in FETCHED)
    assert f"fetch: 0 fetched, {total} already in place and verified, 0 failed" in out
    # --rehash reads every file again; still nothing is downloaded
    code, out, _ = run_fetch(capsys, root, server, "--rehash", "--scenarios=coco,imagenet_c")
    assert code == 0 and server.requests("GET") == []


def test_remove_archives_keeps_a_rerun_from_downloading_them(tmp_path, server, plans, capsys):
    root = str(tmp_path / "sources")
    code, _, err = run_fetch(capsys, root, server, "--scenarios=coco,changeit",
                             "--remove_archives")
    assert code == 0, err
    for name in ("coco", "changeit"):
        for planned in plans[name].files:
            assert not os.path.exists(os.path.join(root, plans[name].subdir, planned.spec.path))
    assert os.path.isfile(os.path.join(root, "coco", "val2014",
                                       "COCO_val2014_000000000042.jpg"))
    server.clear()
    code, out, _ = run_fetch(capsys, root, server, "--scenarios=coco,changeit")
    assert code == 0 and server.log == []


def test_extracting_and_verifying_a_copy_in_place_are_said_before_they_start(
        tmp_path, server, plans, stderr_at_calls):
    """The long steps that receive nothing, one line each on stderr (unless --no_progress)."""
    from proactivebench_builder.fetch import download

    root = str(tmp_path / "sources")
    args = [f"--sources_root={root}", f"--mirror={server.url}", "--retry_wait=0",
            "--scenarios=coco"]
    stderr_at_calls.watch(extraction, "extract")
    assert fetch.main(args) == 0
    archives = [p.spec.path for p in plans["coco"].files]
    said = [line for line in stderr_at_calls.lines() if line.startswith("fetch: coco/")]
    assert sorted(line.split(": ")[1] for line in said) == sorted(f"coco/{a}" for a in archives)
    assert all(re.fullmatch(r"fetch: coco/\S+: extracting it \([\d.]+ [kM]?B\)", line)
               for line in said), said
    assert ": extracting it (" in stderr_at_calls.at_first_call["extract"].splitlines()[-1]

    stderr_at_calls.watch(download, "_hash_file")
    before = len(stderr_at_calls.lines())
    assert fetch.main(args + ["--rehash"]) == 0  # every copy in place is read again
    said = stderr_at_calls.lines()[before:]
    assert sorted(line.split(": ")[1] for line in said) == sorted(f"coco/{a}" for a in archives)
    assert all(": verifying the copy in place (" in line for line in said), said
    assert ": verifying the copy in place (" in \
        stderr_at_calls.at_first_call["_hash_file"].splitlines()[-1]

    before = len(stderr_at_calls.lines())
    assert fetch.main(args + ["--rehash", "--no_progress"]) == 0
    assert stderr_at_calls.lines()[before:] == []


# ---- interrupted, corrupted, missing ---------------------------------------------------------


def rod_archive(plans) -> tuple[str, str]:
    spec = next(p.spec for p in plans["rod"].files if p.spec.path == "rod_0.tar.gz")
    return spec.path, urllib.parse.unquote(urllib.parse.urlsplit(spec.url).path)


def test_an_interrupted_download_resumes_with_a_range_request_on_the_next_run(
        tmp_path, server, plans, mirror, capsys):
    root = str(tmp_path / "sources")
    relative, url_path = rod_archive(plans)
    served = os.path.join(mirror, "huggingface.co", *url_path.split("/"))
    size = os.path.getsize(served)
    server.drop.add("/huggingface.co" + url_path)
    code, out, err = run_fetch(capsys, root, server, "--scenarios=rod", "--retries=0")
    assert code == 1
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and f"rod/{relative}" in failed[0], err
    assert "connection" in failed[0] and f"of {size} bytes" in failed[0]
    partial = os.path.join(root, "rod", STATE_DIR, "partial", relative + ".part")
    kept = os.path.getsize(partial)
    assert 0 < kept < size
    assert not os.path.exists(os.path.join(root, "rod", relative))
    assert "fetch: 3 fetched, 0 already in place and verified, 1 failed" in out

    server.clear()
    code, out, err = run_fetch(capsys, root, server, "--scenarios=rod", "--retries=0")
    assert code == 0, err
    assert server.requests("GET") == [("GET", "/huggingface.co" + url_path, f"bytes={kept}-")]
    assert f"resumed at byte {kept}" in out
    with open(os.path.join(root, "rod", relative), "rb") as a, open(served, "rb") as b:
        assert a.read() == b.read()
    assert not os.path.exists(partial)


def test_a_dropped_connection_is_resumed_within_the_run_by_a_retry(
        tmp_path, server, plans, capsys):
    root = str(tmp_path / "sources")
    relative, url_path = rod_archive(plans)
    server.drop.add("/huggingface.co" + url_path)
    code, out, err = run_fetch(capsys, root, server, "--scenarios=rod", "--retries=1")
    assert code == 0, err
    gets = server.requests("GET", url_path)
    assert len(gets) == 2 and gets[0][2] is None and re.match(r"^bytes=[1-9]\d*-$", gets[1][2])


def test_a_corrupted_file_is_fetched_again(tmp_path, server, plans, capsys, mirror):
    root = str(tmp_path / "sources")
    assert run_fetch(capsys, root, server, "--scenarios=imagenet_c,coco,quickdraw")[0] == 0
    targets = {"imagenet_c": "noise.tar",                              # md5 pinned
               "coco": "annotations_trainval2014.zip",                 # sha256 pinned
               "quickdraw": "simplified/cat.ndjson"}                   # the server's md5
    cat_url = next(p.spec.url for p in plans["quickdraw"].files if p.spec.path == targets[
        "quickdraw"])
    served_cat = served_path(mirror, cat_url)
    import base64
    parts = urllib.parse.urlsplit(cat_url)  # GCS's header: the object's md5, base64
    server.headers["/" + parts.netloc + urllib.parse.unquote(parts.path)] = {
        "x-goog-hash": "crc32c=AAAAAA==,md5=" + base64.b64encode(
            bytes.fromhex(pins_of(served_cat)["md5"])).decode()}
    originals = {}
    for name, relative in targets.items():
        path = os.path.join(root, plans[name].subdir, relative)
        with open(path, "rb") as handle:
            originals[name] = handle.read()
        with open(path, "r+b") as handle:  # same size, other bytes
            handle.seek(len(originals[name]) // 2)
            handle.write(b"\xff\x00corrupt\x00\xff")
    server.clear()
    code, out, err = run_fetch(capsys, root, server, "--scenarios=imagenet_c,coco,quickdraw")
    assert code == 0, err
    for name, relative in targets.items():
        with open(os.path.join(root, plans[name].subdir, relative), "rb") as handle:
            assert handle.read() == originals[name], name
        assert len(server.requests("GET", urllib.parse.quote(relative.split("/")[-1]))) == 1 \
            or len(server.requests("GET", relative.split("/")[-1])) == 1, name
    assert "fetch: 3 fetched" in out
    assert re.search(r"fetched imagenet_c/noise.tar .*md5 \w+, the manifest pins", out)
    assert re.search(r"fetched coco/annotations_trainval2014.zip .*sha256 \w+, the manifest "
                     r"pins", out)
    assert re.search(r"fetched quickdraw/simplified/cat.ndjson .*md5 \w+, the server "
                     r"declares", out)


def test_a_404_is_one_line_and_the_rest_is_fetched(tmp_path, server, mirror, miniature_root,
                                                    monkeypatch, capsys):
    built = mirror_plans(mirror, miniature_root, extra_classes=["unicorn"])
    monkeypatch.setattr(fetch, "load_plans", lambda names=None: built)
    root = str(tmp_path / "sources")
    code, out, err = run_fetch(capsys, root, server, "--scenarios=quickdraw")
    assert code == 1
    lines = err.strip().splitlines()
    failed = [line for line in lines if "FAILED" in line]
    assert len(failed) == 1 and "quickdraw/simplified/unicorn.ndjson" in failed[0], err
    assert "HTTP 404" in failed[0] and "unicorn.ndjson" in failed[0]
    assert "run the same command again" in lines[-1] and len(lines) == 2
    assert len(os.listdir(os.path.join(root, "quickdraw", "simplified"))) == \
        len(built["quickdraw"].files) - 1


def test_bytes_that_fail_their_pin_never_reach_the_final_name(tmp_path, server, mirror,
                                                               miniature_root, monkeypatch,
                                                               capsys):
    built = mirror_plans(mirror, miniature_root)
    wrong = built["coco"].files[1]
    built["coco"].files[1] = dataclasses.replace(
        wrong, spec=dataclasses.replace(wrong.spec, sha256="0" * 64))
    monkeypatch.setattr(fetch, "load_plans", lambda names=None: built)
    root = str(tmp_path / "sources")
    code, out, err = run_fetch(capsys, root, server, "--scenarios=coco")
    assert code == 1
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "coco/val2014.zip" in failed[0]
    assert "the manifest pins " + "0" * 64 in failed[0]
    assert not os.path.exists(os.path.join(root, "coco", "val2014.zip"))
    assert not os.path.exists(os.path.join(root, "coco", "val2014"))  # never extracted


def test_a_hostile_archive_is_refused_in_one_line(tmp_path, server, mirror, miniature_root,
                                                  monkeypatch, capsys):
    """A served tar whose member climbs out of the folder: nothing is written outside."""
    evil = str(tmp_path / "evil-mirror")
    shutil.copytree(mirror, evil)
    built = mirror_plans(mirror, miniature_root)
    spec = built["imagenet_c"].files[0].spec
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"owned"))
    with open(served_path(evil, spec.url), "wb") as handle:
        handle.write(data.getvalue())
    built = mirror_plans(evil, miniature_root)
    monkeypatch.setattr(fetch, "load_plans", lambda names=None: built)
    server.root = evil
    root = str(tmp_path / "deep" / "sources")
    code, out, err = run_fetch(capsys, root, server, "--scenarios=imagenet_c")
    assert code == 1
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "imagenet_c/noise.tar: not extracted" in failed[0]
    assert "'..'" in failed[0]
    assert not os.path.exists(str(tmp_path / "deep" / "escaped.txt"))
    assert not os.path.exists(str(tmp_path / "escaped.txt"))


# ---- mistakes are refused before any work ----------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--sources_root={root}", "--scenario=rod"], "unknown flag --scenario; did you mean "
                                                   "--scenarios?"),
    (["--sources_root={root}", "--scenarios=rodd"], "unknown scenario 'rodd'; did you mean "
                                                    "'rod'?"),
    (["--sources_root={file}"], "is a file, not a folder"),
    (["--sources_root=gs://bucket/sources"], "fetch writes to a local folder"),
    (["--sources_root={root}", "--mirror=ftp://mirror"], "expected an http(s) URL"),
    (["--sources_root={root}", "--jobs=0"], "must be at least 1"),
    (["--sources_root={root}", "--source=rod"], "--source expects SCENARIO=DIR"),
])
def test_mistakes_are_one_line_and_exit_2_before_any_request(tmp_path, server, plans, capsys,
                                                             argv, message):
    file = tmp_path / "a-file"
    file.write_text("x")
    argv = [a.format(root=tmp_path / "sources", file=file) for a in argv]
    if not any(a.startswith("--mirror") for a in argv):
        argv.append(f"--mirror={server.url}")
    try:
        code = fetch.main(argv)
    except SystemExit as exit_:  # argparse's own one-line refusal
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err, err
    assert server.log == []
    assert not os.path.exists(tmp_path / "sources")


def test_a_disk_too_small_for_the_published_sizes_is_refused(tmp_path, server, plans, capsys,
                                                            monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1, 1, 1))
    code, out, err = run_fetch(capsys, str(tmp_path / "sources"), server, "--scenarios=coco")
    assert code == 2 and "need at least" in err and "1 B is free" in err
    assert server.log == []


def test_dry_run_lists_and_asks_nothing(tmp_path, server, plans, capsys):
    code, out, err = run_fetch(capsys, str(tmp_path / "sources"), server, "--dry_run")
    assert code == 0 and server.log == []
    assert "nothing was downloaded" in out and "== vsod: manual steps" in out
    assert not os.path.exists(tmp_path / "sources")


def test_a_dry_run_before_any_fetch_shows_the_pinned_sizes_and_says_why_the_others_are_unknown(
        tmp_path, capsys):
    code = fetch.main([f"--sources_root={tmp_path}", "--scenarios=quickdraw,rod", "--dry_run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "rod/rod_0.tar.gz: to fetch, 1.4 GB <- https://huggingface.co/" in out
    assert "rod/classes_rod.py: to fetch, 432 B <- " in out
    assert "quickdraw/simplified/cat.ndjson: to fetch, size unknown <- " in out
    rod = sum(p.spec.size for p in plan(manifest_of("rod")).files if p.spec.size)
    assert (f"fetch --dry_run: 349 files; the 3 of known size come to {human_size(rod)} "
            f"({human_size(rod)} published); 346 of unknown size; nothing was "
            "downloaded") in out
    assert ("  size unknown for 345 quickdraw files: QuickDraw's bucket publishes no sizes; "
            "fetch learns each when it downloads it") in out
    assert "  size unknown for rod/dataset_info.json: the repo's listing gives no " in out


def test_a_dry_run_after_a_fetch_shows_the_sizes_fetch_recorded(tmp_path, server, plans,
                                                                 mirror, capsys):
    """Files nothing pins: the verified ones with their recorded sizes, a partial download with
    the size its server announced; nothing is asked of the server."""
    root = str(tmp_path / "sources")
    info = next(p.spec for p in plans["rod"].files if p.spec.path == "dataset_info.json")
    info_url = "/" + served_path("", info.url).lstrip("/")
    server.drop.add(info_url)
    code, _, _ = run_fetch(capsys, root, server, "--scenarios=quickdraw,rod", "--retries=0")
    assert code == 1  # the dropped file: kept as a partial download
    server.clear()
    code, out, _ = run_fetch(capsys, root, server, "--scenarios=quickdraw,rod", "--dry_run")
    assert code == 0 and server.log == []
    for planned in plans["quickdraw"].files:
        size = os.path.getsize(served_path(mirror, planned.spec.url))
        assert (f"quickdraw/{planned.spec.path}: present, verified by an earlier fetch, "
                f"{human_size(size)} (recorded by fetch) <- ") in out
    info_size = os.path.getsize(served_path(mirror, info.url))
    assert re.search(r"rod/dataset_info\.json: partly fetched \(\d+ B received, resumed when "
                     rf"run\), {info_size} B \(recorded by fetch\) <- ", out), out
    assert "of unknown size" not in out and "size unknown" not in out
    total = len(plans["quickdraw"].files) + len(plans["rod"].files)
    assert f"fetch --dry_run: {total} files; the {total} of known size come to " in out


# ---- the manual steps agree with docs/sources.md ---------------------------------------------


def docs_blocks() -> dict[str, str]:
    """Each `<!-- manual steps: NAME -->` block of docs/sources.md (its fenced text)."""
    with open(DOCS, encoding="utf-8") as handle:
        text = handle.read()
    found = {}
    for match in re.finditer(r"<!-- manual steps: (\w+) [^>]*-->\n```text\n(.*?)\n```", text,
                             re.S):
        found[match[1]] = match[2]
    return found


def test_the_manual_steps_printed_are_the_ones_in_docs_sources_md():
    blocks = docs_blocks()
    for name in ALL:
        steps = plan(manifest_of(name)).manual_steps()
        if steps is None:
            assert name not in blocks
            continue
        assert blocks.get(name) == steps, f"docs/sources.md and {name}.yaml disagree"
    assert set(blocks) == set(MANUAL)


# ---- the packaged manifests ------------------------------------------------------------------


def test_every_packaged_download_is_pinned_or_says_why_not():
    """A file with a published digest names where it is published; one without says why it is
    record-only. Every source says how to get it: files to fetch, manual steps, or both."""
    for name in ALL:
        source_plan = plan(manifest_of(name))
        assert source_plan.files or source_plan.manual, name
        if source_plan.manual:
            assert len(source_plan.record_only) > 20, name
        for planned in source_plan.files:
            spec = planned.spec
            if spec.md5 or spec.sha256:
                assert planned.pins_from.startswith("https://"), (name, spec.path)
            else:
                assert planned.record_only and len(planned.record_only) > 20, (name, spec.path)
            if spec.size is None and planned.approx_size is None:  # fetch's dry run says why
                assert planned.unknown_size and len(planned.unknown_size) > 20, (name, spec.path)
            assert spec.url.startswith(("https://", "http://images.cocodataset.org/"))
    qd = plan(manifest_of("quickdraw"))
    assert len(qd.files) == 345
    assert any(p.spec.url.endswith("/The%20Eiffel%20Tower.ndjson")
               and p.spec.path == "simplified/The Eiffel Tower.ndjson" for p in qd.files)
    inc = {p.spec.path: p.spec.md5 for p in plan(manifest_of("imagenet_c")).files}
    assert inc == manifest_of("imagenet_c")["archive_md5"]  # one set of published md5s


@pytest.mark.parametrize("entry, message", [
    ({"url": "ftp://x/y", "path": "y", "record_only": "because it is so"}, "not an http(s) URL"),
    ({"url": "https://x/y", "path": "../y", "record_only": "because it is so"},
     "not a plain relative path"),
    ({"url": "https://x/y", "path": ".proactivebench-fetch/y", "record_only": "because"},
     "reserved"),
    ({"url": "https://x/y", "path": "y"}, "record_only must say why"),
    ({"url": "https://x/y", "path": "y", "md5": "abc"}, "not md5 hex digits"),
    ({"url": "https://x/y", "path": "y", "md5": "0" * 32}, "pins_from"),
    ({"url": "https://x/y", "path": "y.txt", "record_only": "why not",
      "extract": {"into": "."}}, "not a .tar"),
    ({"url": "https://x/y", "path": "y", "record_only": "why not", "colour": 1}, "unknown key"),
    ({"url": "https://x/y", "path": "y", "record_only": "why not", "unknown_size": ""},
     "unknown_size must say why"),
    ({"url": "https://x/y", "path": "y", "record_only": "why not", "unknown_size": "because",
      "size": 3, "pins_from": "https://x/"}, "unknown_size with a size"),
])
def test_malformed_downloads_sections_are_named(entry, message):
    manifest = {"name": "demo", "source_subdir": "demo", "downloads": {"files": [entry]}}
    with pytest.raises(PlanError, match=re.escape(message)):
        plan(manifest)


# ---- the extraction guards, one by one -------------------------------------------------------


def tar_with(tmp_path, *members) -> str:
    path = str(tmp_path / "a.tar")
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def member(name, data=b"", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize("members, message", [
    ([member("/etc/x", b"1")], "an absolute path"),
    ([member("a/../../x", b"1")], "a '..' in its path"),
    ([member("link", kind=tarfile.SYMTYPE, link="/etc/passwd")], "a link"),
    ([member("hard", kind=tarfile.LNKTYPE, link="/etc/passwd")], "a link"),
    ([member("dev", kind=tarfile.CHRTYPE)], "a special file"),
    ([member("big", b"x" * 2000)], "declares 2000 bytes"),
])
def test_tar_members_that_could_escape_or_explode_are_refused(tmp_path, members, message):
    archive = tar_with(tmp_path, *members)
    target = tmp_path / "out"
    with pytest.raises(extraction.UnsafeArchive, match=re.escape(message)):
        extraction.extract(archive, str(target),
                           limits=extraction.Limits(max_member_bytes=1000))
    assert not os.path.exists("/etc/x-never") and list(target.rglob("*")) == []


def test_zip_links_and_bombs_are_refused_before_a_byte_is_written(tmp_path):
    link = zipfile.ZipInfo("link")
    link.external_attr = (0o120777 << 16)
    path = str(tmp_path / "links.zip")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fine.txt", b"fine")
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(extraction.UnsafeArchive, match="a link"):
        extraction.extract(path, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out" / "fine.txt")  # judged whole, first
    bomb = str(tmp_path / "bomb.zip")
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        for k in range(3):
            zf.writestr(f"zeros{k}", b"\0" * 100_000)
    with pytest.raises(extraction.UnsafeArchive, match="more than 150000 bytes together"):
        extraction.extract(bomb, str(tmp_path / "out2"),
                           limits=extraction.Limits(max_total_bytes=150_000))
    assert not os.path.exists(tmp_path / "out2" / "zeros0")


def test_extraction_never_writes_through_a_link_in_the_target(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(outside, target / "val2014")
    archive = tar_with(tmp_path, member("val2014/x.jpg", b"jpeg"))
    with pytest.raises(extraction.UnsafeArchive, match="a link in the target folder"):
        extraction.extract(archive, str(target))
    assert list(outside.iterdir()) == []


def test_strip_components_drops_the_top_folder(tmp_path):
    archive = tar_with(tmp_path, member("Repo-abc/", kind=tarfile.DIRTYPE),
                       member("Repo-abc/a/b.txt", b"b"), member("Repo-abc/c.txt", b"c"))
    files, size = extraction.extract(archive, str(tmp_path / "out"), strip_components=1)
    assert (files, size) == (2, 2)
    assert (tmp_path / "out" / "a" / "b.txt").read_bytes() == b"b"


# ---- the engine on its own -------------------------------------------------------------------


def test_a_destination_that_is_a_link_is_never_replaced(tmp_path, server, mirror):
    spec_url = "https://huggingface.co/" + os.path.relpath(
        next(p for p in (os.path.join(b, n) for b, _, ns in os.walk(
            os.path.join(mirror, "huggingface.co")) for n in ns) if p.endswith("classes_rod.py")),
        os.path.join(mirror, "huggingface.co"))
    folder = tmp_path / "rod"
    folder.mkdir()
    outside = tmp_path / "outside.py"
    outside.write_text("mine")
    os.symlink(outside, folder / "classes_rod.py")
    outcome = Downloader(mirror=server.url, retries=0).fetch(
        str(folder), FileSpec(url=spec_url, path="classes_rod.py"))
    assert outcome.status == "failed" and "is a symbolic link; not replaced" in outcome.message
    assert outside.read_text() == "mine"
    assert server.log == []


def test_a_size_that_disagrees_with_the_pin_keeps_nothing(tmp_path, server, mirror):
    url = "https://huggingface.co/" + "/".join(
        urllib.parse.unquote(p) for p in next(
            os.path.relpath(os.path.join(b, n), os.path.join(mirror, "huggingface.co"))
            for b, _, ns in os.walk(os.path.join(mirror, "huggingface.co")) for n in ns
            if n == "rod_0.tar.gz").split(os.sep))
    outcome = Downloader(mirror=server.url, retries=0).fetch(
        str(tmp_path), FileSpec(url=url, path="rod_0.tar.gz", size=10))
    assert outcome.status == "failed" and "the manifest pins 10" in outcome.message
    assert not os.path.exists(tmp_path / "rod_0.tar.gz")


def test_a_folder_linked_out_of_the_source_folder_is_never_written_through(tmp_path, server):
    folder = tmp_path / "quickdraw"
    folder.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, folder / "simplified")
    spec = FileSpec(url="https://storage.googleapis.com/quickdraw_dataset/full/simplified/"
                        "cat.ndjson", path="simplified/deeper/cat.ndjson")
    outcome = Downloader(mirror=server.url, retries=0).fetch(str(folder), spec)
    assert outcome.status == "failed" and "resolves outside" in outcome.message
    assert list(outside.iterdir()) == [] and server.log == []


# ---- no network, a mirror, a listing ------------------------------------------------------

def test_no_network_is_one_summary_line_not_one_per_file(tmp_path, capsys):
    """Every file failing to connect (here a closed local port) is said once for all, naming
    the host and the count; the retry hint follows."""
    code = fetch.main([f"--sources_root={tmp_path / 'sources'}", "--scenarios=quickdraw",
                       "--mirror=http://127.0.0.1:1", "--retries=0", "--no_progress"])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert len(err) == 2, err
    assert re.match(r"run_pipeline\.py fetch: FAILED 345 files: cannot connect to 127\.0\.0\.1 "
                    r"\(345\) \(no network, or the host is down\? e\.g\. ", err[0])
    assert err[1].startswith("fetch: run the same command again")


def test_the_next_step_names_release_labels_every_source_and_an_output():
    plans = fetch.chosen(fetch.load_plans(), "quickdraw,mvpn,vsod")
    line = fetch.next_steps(plans, "/data/src")
    assert "release_labels --release RELEASE/test --sources_root /data/src" in line
    assert "the labels of mvpn, vsod exist only in the release's records" in line
    assert "--scenarios quickdraw,mvpn,vsod --verify_sources --record --output OUTPUT" in line
    assert "release_labels" not in fetch.next_steps(fetch.chosen(fetch.load_plans(),
                                                                 "quickdraw"), "/data/src")


def test_imagenet_c_has_approximate_sizes_in_the_dry_run_and_the_disk_check(tmp_path, capsys):
    assert fetch.main([f"--sources_root={tmp_path}", "--scenarios=imagenet_c",
                       "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "imagenet_c/noise.tar: to fetch, ~21.0 GB (approximate)" in out
    assert ("the 5 of known size come to ~62.0 GB (~62.0 GB approximate); nothing was "
            "downloaded") in out
    plans = fetch.chosen(fetch.load_plans(), "imagenet_c")
    jobs = [(str(tmp_path), p.spec) for p in plans["imagenet_c"].files]
    approx = {str(tmp_path): {p.spec.path: p.approx_size for p in plans["imagenet_c"].files}}
    with pytest.raises(fetch.UsageError, match=r"need at least 124\.0 GB \(published or "
                                               r"approximate sizes"):
        fetch.check_space(jobs, str(tmp_path), approx)


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


# ---- the command's edges: a one-file plan against a loopback server ----------------------------


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


DEMO_URL = "https://example.org/data/f.bin"


DEMO_PATH = "/example.org/data/f.bin"


def demo_plan(data: bytes = BODY, files=None, subdir="demo"):
    """A one-source plan fetching `data` as f.bin (served by `fake` through --mirror)."""
    entries = files or [{"url": DEMO_URL, "path": "f.bin", **pins(data),
                         "pins_from": "https://example.org/sums"}]
    return plan({"name": "demo", "source_subdir": subdir, "downloads": {"files": entries}})


def run_demo_fetch(capsys, monkeypatch, fake, root, source_plan, *extra):
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
    code, out, err = run_demo_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "demo" in err and "not a folder" in err and "Traceback" not in err
    assert fake.gets() == []


def test_a_dangling_link_where_a_source_folder_goes_is_one_line(fake, tmp_path, capsys,
                                                               monkeypatch):
    root = tmp_path / "sources"
    root.mkdir()
    os.symlink(tmp_path / "nowhere", root / "demo")
    code, out, err = run_demo_fetch(capsys, monkeypatch, fake, root, demo_plan())
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
    code, out, err = run_demo_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 0, err
    assert (elsewhere / "f.bin").read_bytes() == BODY


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
        code, out, err = run_demo_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 3 and len(error_lines(err)) == 1, err
    assert "another fetch" in err and "pid 12345" in err
    assert fake.gets() == [] and not (root / "demo" / "f.bin").exists()
    # released: the next fetch runs
    code, out, err = run_demo_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 0, err


def test_a_link_in_place_of_the_fetch_lock_is_one_line_before_any_request(
        fake, tmp_path, capsys, monkeypatch):
    fake.routes[DEMO_PATH] = serve(BODY)
    root = tmp_path / "sources"
    lock = root / "demo" / STATE_DIR / "fetch.lock"
    lock.parent.mkdir(parents=True)
    (tmp_path / "elsewhere").write_text("mine")
    os.symlink(tmp_path / "elsewhere", lock)
    code, out, err = run_demo_fetch(capsys, monkeypatch, fake, root, demo_plan())
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "symbolic link" in err and "fetch's lock file" in err
    assert fake.gets() == [] and (tmp_path / "elsewhere").read_text() == "mine"


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
