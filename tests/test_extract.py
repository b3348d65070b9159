"""Tar and zip extraction (fetch/extract.py) at its edges: archives that lie about their
headers, sizes, names and compression (bombs, links, sparse and special members, corrupt or
cut data), refused in one line before they cost memory or write outside the target, or
extracted correctly. No timing is asserted beyond deadlines that only a hang would miss."""
from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import tracemalloc
import zipfile

import pytest

from test_download import fake, one_line, pins, serve  # noqa: F401 (fake: a fixture)
from proactivebench_builder.fetch import download, extract as extraction
from proactivebench_builder.fetch import plan as fetch_plan
from proactivebench_builder.fetch.download import Downloader, FileSpec


def test_a_zip_of_an_unknown_version_is_one_line(tmp_path):
    data = bytearray(zip_bytes([("x", b"1")]))
    at = data.index(b"PK\x01\x02") + 6
    data[at] = 64  # "needs version 6.4 to extract": zipfile raises NotImplementedError
    refused(tmp_path, "a.zip", bytes(data), "corrupt archive")


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
