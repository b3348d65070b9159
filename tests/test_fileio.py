"""core/fileio.py: unique temporary names, frames read ahead of their rows, a source path that is
not a regular file (a socket, a link loop, a folder, a FIFO, a character device) never opened for
reading (a dead letter or a failure naming it), a file far larger than any real one refused
unread, a legal name near the file system's limit built with temporary names within it, a line
over the cap skipped unread, a remote store's file read a bounded line at a time. The builds run
in a child process with a deadline: a hang fails, never blocks the suite."""
import json
import os
import shutil
import socket
import stat
import tracemalloc

import pytest

from conftest import (balanced, build, copy_sources, dead_letter_reasons, dead_letters,
                      read_json)
from proactivebench_builder.core import fileio


def test_temporary_names_are_unique_hidden_and_keep_the_name():
    names = {fileio.temporary_name("/out/QuickDraw/test-00000-of-00001.parquet")
             for _ in range(1000)}
    assert len(names) == 1000
    for name in names:
        folder, base = os.path.split(name)
        assert folder == "/out/QuickDraw"
        assert base.startswith(".tmp-") and base.endswith("-test-00000-of-00001.parquet")


def test_read_ahead_frames_come_back_in_any_order_and_spill_to_disk(monkeypatch):
    from proactivebench_builder.pipeline import shards

    monkeypatch.setattr(shards, "SPILL_AFTER_BYTES", 1000)
    ahead = shards.ReadAhead()
    frames = {(r, f): bytes([r * 7 + f]) * (300 + r * 10 + f) for r in range(3) for f in range(4)}
    for key in sorted(frames, reverse=True):  # read order differs from write order
        ahead.put(key, frames[key])
    assert ahead._file._rolled  # past the threshold the frames live in a temporary file
    assert [ahead.pop(key) for key in sorted(frames)] == [frames[k] for k in sorted(frames)]
    ahead.close()


def test_frames_in_read_order_wait_only_when_read_before_their_turn(monkeypatch):
    """The shard writer reads frames in the scenario's read order and asks for them in row
    order: only frames read before their turn wait in the spooled file."""
    from proactivebench_builder.pipeline import shards

    class Reader:
        read = []

        def load_frame(self, ref):
            Reader.read.append(ref["n"])
            return bytes([ref["n"]]) * 10

        def relative(self, url):
            return url

    rows = [{"frame_refs": [{"kind": "member", "n": 2 * r + f} for f in range(2)]}
            for r in range(3)]
    in_order = shards.InReadOrder(Reader(), rows, [(r, f) for r in range(3) for f in range(2)])
    assert [in_order.pop((r, f)) for r in range(3) for f in range(2)] == \
        [bytes([n]) * 10 for n in range(6)]
    assert not in_order._ahead._where  # nothing waited
    reverse = shards.InReadOrder(Reader(), rows, [(r, f) for r in (2, 1, 0) for f in range(2)])
    assert reverse.pop((0, 0)) == bytes([0]) * 10
    assert len(reverse._ahead._where) == 4  # rows 2 and 1 were read before their turn
    assert reverse.pop((2, 1)) == bytes([5]) * 10


def test_rows_produced_ahead_on_a_thread_keep_order_errors_and_stop_early():
    """The shard writer's rows made on a thread ahead of the Parquet writer: in order, the
    producer's error raised in the writer, and a writer that stops early stops the producer."""
    from concurrent.futures import ThreadPoolExecutor

    from proactivebench_builder.pipeline import shards

    made, closed = [], []

    def produce(n, fail_at=None):
        def generator():
            try:
                for i in range(n):
                    if i == fail_at:
                        raise ValueError(f"bad row {i}")
                    made.append(i)
                    yield i
            finally:
                closed.append(n)
        return generator

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert list(shards.produced_ahead(pool, produce(50))) == list(range(50))
        with pytest.raises(ValueError, match="bad row 7"):
            list(shards.produced_ahead(pool, produce(20, fail_at=7)))
        made.clear()
        ahead = shards.produced_ahead(pool, produce(1000))
        assert [next(ahead) for _ in range(3)] == [0, 1, 2]
        ahead.close()  # the writer's own error: the producer is stopped and waited for
        assert len(made) <= 3 + shards.ROWS_AHEAD + 1  # the queue, and one in hand
        assert closed == [50, 20, 1000]


def test_the_sha256_of_a_fifo_is_refused_without_opening_it_for_reading(tmp_path):
    """A FIFO where a file to hash is (was: open() waited for a writer for ever)."""
    fifo = tmp_path / "pinned.tar"
    os.mkfifo(fifo)
    with pytest.raises(fileio.NotARegularFile, match="FIFO"):
        fileio.sha256(str(fifo))
    (tmp_path / "file").write_bytes(b"abc")
    assert fileio.sha256(str(tmp_path / "file")) == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")


def test_a_socket_is_named_as_a_socket(tmp_path):
    """A socket cannot be opened (ENXIO): the refusal says what the path is."""
    import socket

    path = os.path.join(tmp_path, "s")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    try:
        with pytest.raises(fileio.NotARegularFile, match="a socket"):
            fileio.open_local_regular(path)
    finally:
        listener.close()


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


def test_numbered_lines_reads_a_remote_stores_file_a_bounded_line_at_a_time():
    """A remote store's file (fsspec's AbstractBufferedFile: s3fs, gcsfs, http) has a readline
    that takes no size; lines are still numbered, and one over the limit is skipped unread."""
    import fsspec.spec

    from proactivebench_builder.core.fileio import numbered_lines

    data = b'{"a": 1}\n' + b"x" * 5000 + b"\n" + b'{"b": 2}'

    class RemoteFile(fsspec.spec.AbstractBufferedFile):
        def _fetch_range(self, start, end):
            return data[start:end]

    class Store(fsspec.spec.AbstractFileSystem):
        def info(self, path, **kwargs):
            return {"name": path, "size": len(data), "type": "file"}

        def _open(self, path, mode="rb", **kwargs):
            return RemoteFile(self, path, mode, block_size=64, size=len(data))

    with Store().open("remote.jsonl", "rb") as handle:
        assert list(numbered_lines(handle, 1000)) == [
            (1, b'{"a": 1}\n'), (2, None), (3, b'{"b": 2}')]


def test_a_store_clients_failure_is_told_from_an_answer_about_one_file():
    """Where a source is read, a store client's own failure (a connection cut, a server error
    s3fs translated into an OSError) is the store's; a missing key or a denied one, even
    translated from the client's error, and an OSError of this machine are the input's."""
    botocore = pytest.importorskip("botocore.exceptions")
    aiohttp = pytest.importorskip("aiohttp")

    def translated(cls, code):
        err = cls(code)
        err.__cause__ = botocore.ClientError({"Error": {"Code": code}}, "GetObject")
        return err

    assert fileio.is_store_client_error(botocore.EndpointConnectionError(endpoint_url="x"))
    assert fileio.is_store_client_error(aiohttp.ClientOSError())  # (an OSError too)
    assert fileio.is_store_client_error(translated(OSError, "InternalError"))
    assert not fileio.is_store_client_error(translated(FileNotFoundError, "NoSuchKey"))
    assert not fileio.is_store_client_error(translated(PermissionError, "AccessDenied"))
    assert not fileio.is_store_client_error(OSError(5, "Input/output error"))
    assert not fileio.is_store_client_error(ValueError("not an image"))


READ_FILES = {
    "quickdraw": "quickdraw/simplified/cat.ndjson",
    "coco": "coco/val2014/COCO_val2014_000000000042.jpg",
    "rod": "rod/rod_1.tar.gz",
    "mvpn": "mvpn/data/test_list/test_0000_100.pkl",
    "imagenet_c": "ImageNet-C/gaussian_noise/5/n01440764/ILSVRC2012_val_00000001.JPEG",
}


def sources_copy(miniature_root: str, tmp_path, names) -> str:
    root = str(tmp_path / "sources")
    for name in names:
        top = READ_FILES[name].split("/")[0]
        shutil.copytree(os.path.join(miniature_root, top), os.path.join(root, top))
    return root


def test_a_fifo_in_place_of_any_source_file_is_a_dead_letter(tmp_path, miniature_root):
    """A named pipe where a category file, an image, an archive or a list is expected
    is named a dead letter ("not a regular file: a named pipe") and the build ends."""
    sources = sources_copy(miniature_root, tmp_path, READ_FILES)
    for relative in READ_FILES.values():
        replace(os.path.join(sources, relative), os.mkfifo)
    result, output = build(tmp_path, sources, ",".join(READ_FILES))
    assert result.returncode == 0, result.stderr[-3000:]
    reasons = {d["path"]: d["reason"] for d in dead_letters(output)}
    for name, relative in READ_FILES.items():
        inside = relative.split("/", 1)[1]
        found = [reason for path, reason in reasons.items() if path.startswith(inside)]
        assert found and all("named pipe" in reason for reason in found), (name, reasons)
    assert read_json(os.path.join(output, "reports", "build.json"))["status"] == "ok"


def test_a_fifo_in_place_of_a_file_every_item_needs_is_one_line(tmp_path, miniature_root):
    """VSOD's labels file is read before any item: a FIFO there ends the build in one line."""
    sources = str(tmp_path / "sources")
    shutil.copytree(os.path.join(miniature_root, "vsod"), os.path.join(sources, "vsod"))
    replace(os.path.join(sources, "vsod", "proactivebench_vsod_labels.csv"), os.mkfifo)
    result, _ = build(tmp_path, sources, "vsod")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "FAILED" in line or "error" in line]
    assert lines and "named pipe" in lines[-1] and "proactivebench_vsod_labels.csv" in lines[-1], \
        result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_a_device_or_a_huge_file_is_refused_unread(tmp_path, miniature_root):
    """A character device (endless bytes) and a 2 GiB sparse file in place of images: each a
    dead letter, neither read (memory does not follow what the file holds)."""
    sources = sources_copy(miniature_root, tmp_path, ["imagenet_c", "coco"])
    device = os.path.join(sources, READ_FILES["imagenet_c"])
    try:
        replace(device, lambda path: os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5)))
    except PermissionError:
        pytest.skip("creating a device file needs root")
    huge = os.path.join(sources, READ_FILES["coco"])
    with open(huge, "r+b") as handle:
        handle.truncate(2 << 30)
    result, output = build(tmp_path, sources, "imagenet_c,coco")
    assert result.returncode == 0, result.stderr[-3000:]
    reasons = {d["path"]: d["reason"] for d in dead_letters(output)}
    assert any(p.endswith("ILSVRC2012_val_00000001.JPEG") and "character device" in r
               for p, r in reasons.items()), reasons
    assert any(p.endswith("COCO_val2014_000000000042.jpg") and "bytes a file may hold" in r
               for p, r in reasons.items()), reasons


def test_a_legal_long_file_name_builds(tmp_path, miniature_root):
    """A 250-byte file name (legal: NAME_MAX is 255) builds, export included; the
    temporary names written beside it stay within the limit."""
    sources = sources_copy(miniature_root, tmp_path, ["imagenet_c"])
    base = os.path.join(sources, "ImageNet-C")
    renamed = 0
    for folder, _, names in os.walk(base):
        for name in names:
            if name.endswith(".JPEG"):
                stem = name[: -len(".JPEG")]
                longer = stem + "_" + "x" * (250 - len(stem) - 1 - len(".JPEG")) + ".JPEG"
                assert len(longer.encode()) == 250
                os.rename(os.path.join(folder, name), os.path.join(folder, longer))
                renamed += 1
    assert renamed
    result, output = build(tmp_path, sources, "imagenet_c", "--upstream_export")
    assert result.returncode == 0, result.stderr[-3000:]
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "ok" and report["scenarios"]["imagenet_c"]["samples"] > 0
    exported = [name for _, _, names in os.walk(os.path.join(output, "upstream"))
                for name in names if len(name.encode()) >= 250]
    assert exported


def test_temporary_names_stay_within_the_name_limit():
    from proactivebench_builder.core import fileio

    for length in (1, 200, 224, 225, 250, 255):
        name = "a" * length
        temporary = os.path.basename(fileio.temporary_name(f"/x/{name}"))
        assert len(temporary.encode()) <= fileio.NAME_MAX and temporary.startswith(".tmp-")
    # distinct long names keep distinct temporary names
    first = fileio.temporary_name("/x/" + "a" * 250)
    second = fileio.temporary_name("/x/" + "a" * 249 + "b")
    assert first.rsplit("-", 1)[1] != second.rsplit("-", 1)[1]


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "named pipe"), (os.mkdir, "folder")])
def test_open_source_names_what_a_path_is(tmp_path, make, kind):
    from proactivebench_builder.core import fileio

    path = str(tmp_path / "thing")
    make(path)
    with pytest.raises(fileio.NotARegularFile, match=kind):
        fileio.read_bytes(path)


def test_read_bytes_refuses_more_than_its_limit(tmp_path):
    from proactivebench_builder.core import fileio

    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    assert fileio.read_bytes(str(path), limit=101) == b"x" * 101
    with pytest.raises(fileio.FileTooLarge, match="100 bytes"):
        fileio.read_bytes(str(path), limit=100)


def test_temporary_names_are_what_publish_takes_for_a_leftover():
    """publish deletes a `.tmp-*` file of the target only when its name is one
    `fileio.temporary_name` makes (a user's `.tmp-notes.txt` stays): the two agree."""
    from proactivebench_builder.core import fileio
    from proactivebench_builder.core.layout import TEMPORARY_NAME

    for final in ("/x/QuickDraw/test-00000-of-00001.parquet", "/x/" + "a" * 250 + ".png"):
        assert TEMPORARY_NAME.match(os.path.basename(fileio.temporary_name(final)))
    assert not TEMPORARY_NAME.match(".tmp-notes.txt")
