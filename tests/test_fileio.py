"""core/fileio.py: unique temporary names, frames read ahead of their rows, a source path that is
not a regular file (a socket, a link loop, a folder, a FIFO) never opened for reading (a dead
letter or a failure naming it), a line over the cap skipped unread, a remote store's file read a
bounded line at a time."""
import json
import os
import shutil
import socket
import tracemalloc

import pytest

from conftest import balanced, build, copy_sources, dead_letter_reasons, read_json
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
