"""File helpers the writers rely on: unique temporary names, and linking a finished output file
under a second name (the test split of an unfiltered build) with a copy where links are
impossible."""
import errno
import os

import fsspec
import pytest

from proactivebench_builder.core import fileio


def test_temporary_names_are_unique_hidden_and_keep_the_name():
    names = {fileio.temporary_name("/out/QuickDraw/test-00000-of-00001.parquet")
             for _ in range(1000)}
    assert len(names) == 1000
    for name in names:
        folder, base = os.path.split(name)
        assert folder == "/out/QuickDraw"
        assert base.startswith(".tmp-") and base.endswith("-test-00000-of-00001.parquet")


def test_a_local_file_is_linked_not_copied(tmp_path):
    source = tmp_path / "unfiltered" / "a.parquet"
    source.parent.mkdir()
    source.write_bytes(b"shard bytes")
    target = tmp_path / "config" / "a.parquet"
    assert fileio.link_or_copy_atomic(str(source), str(target)) == "link"
    assert target.read_bytes() == b"shard bytes"
    assert os.stat(source).st_ino == os.stat(target).st_ino
    assert sorted(os.listdir(target.parent)) == ["a.parquet"]  # no temporary name left
    # a rebuild replaces a name by rename, so the other name keeps the old content
    fileio.write_bytes_atomic(str(source), b"new bytes")
    assert target.read_bytes() == b"shard bytes"


def test_an_existing_target_is_replaced(tmp_path):
    source, target = tmp_path / "a", tmp_path / "b"
    source.write_bytes(b"new")
    target.write_bytes(b"old")
    fileio.link_or_copy_atomic(str(source), str(target))
    assert target.read_bytes() == b"new"


def test_falls_back_to_a_copy_when_the_filesystem_cannot_link(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    source, target = tmp_path / "a", tmp_path / "sub" / "b"
    source.write_bytes(b"bytes")
    assert fileio.link_or_copy_atomic(str(source), str(target)) == "copy"
    assert target.read_bytes() == b"bytes"
    assert os.stat(source).st_ino != os.stat(target).st_ino


def test_other_link_errors_are_raised(tmp_path, monkeypatch):
    def broken(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "link", broken)
    source = tmp_path / "a"
    source.write_bytes(b"bytes")
    with pytest.raises(OSError, match="I/O error"):
        fileio.link_or_copy_atomic(str(source), str(tmp_path / "b"))


def test_urls_are_copied():
    fs = fsspec.filesystem("memory")
    fs.pipe("/link-test/a", b"bytes")
    assert fileio.link_or_copy_atomic("memory:///link-test/a", "memory:///link-test/b") == "copy"
    assert fs.cat("/link-test/b") == b"bytes"


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


def test_the_sha256_of_a_fifo_is_refused_without_opening_it_for_reading(tmp_path):
    """A FIFO where a file to hash is (was: open() waited for a writer for ever)."""
    fifo = tmp_path / "pinned.tar"
    os.mkfifo(fifo)
    with pytest.raises(fileio.NotARegularFile, match="FIFO"):
        fileio.sha256(str(fifo))
    (tmp_path / "file").write_bytes(b"abc")
    assert fileio.sha256(str(tmp_path / "file")) == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
