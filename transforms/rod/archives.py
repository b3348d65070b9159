"""Reading ROD's archive members: a `.tar.gz` reads forward only, so one reader per archive and
thread is kept per process, and a row's frames are read as one span of its sequence.

Archives are untrusted: `members` walks one with `tarfile`, but bounds what tarfile would
otherwise let a header decide (see `BoundedTarInfo` and `members`)."""
from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import tarfile
import threading
import zlib

from proactivebench_builder.transforms.api import fileio

# A GNU long name or a PAX extended header longer than this refuses its archive unread: tarfile
# reads such a header whole before any member is looked at (a header declaring 256 MiB held
# 256 MiB), and its PAX parsing is quadratic in the header's length on some contents (CPython
# before 3.11.10 / 3.12.6: 64 KiB of digits cost 26 s). Real headers are a path (at most
# 4 KiB) plus a few times and ids.
MAX_EXTENDED_HEADER_BYTES = 16 << 10
# Extended headers in a row before a member (tarfile recurses once per header), and distinct
# keywords the archive's global PAX headers may set (tarfile keeps them for the whole read).
MAX_EXTENDED_HEADERS_IN_A_ROW = 8
MAX_GLOBAL_PAX_KEYWORDS = 256
# What skipping a member's data reads at a time (tarfile's own skip reads 10 KiB at a time,
# for as long as the header said, even long past the end of the stream)
SKIP_READ_BYTES = 1 << 20


class ArchiveRefused(tarfile.TarError):
    """An archive whose headers ask more than a reader gives: refused as a whole, unread past
    the header (its members' names could no longer be trusted)."""


class BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo (passed to `tarfile.open(tarinfo=...)`) that refuses an extended header over
    MAX_EXTENDED_HEADER_BYTES before tarfile reads it, more than MAX_EXTENDED_HEADERS_IN_A_ROW
    of them in a row, and GNU sparse members (never photos). A PAX header is parsed here in one
    linear pass (tarfile's own regular expressions backtrack quadratically on some contents)."""

    def _proc_gnulong(self, tar):
        with _extended_header(self, tar, "GNU long-name"):
            return super()._proc_gnulong(tar)

    def _proc_sparse(self, tar):
        raise ArchiveRefused(f"a GNU sparse member at byte {self.offset:,} (not a photo; "
                             "sparse members are not read)")

    def _proc_pax(self, tar):
        with _extended_header(self, tar, "PAX"):
            buf = tar.fileobj.read(self._block(self.size))
            if len(buf) < self.size:
                raise tarfile.ReadError("unexpected end of data inside a PAX header")
            records = _pax_records(buf[:self.size], self.offset)
            if any(keyword.startswith(b"GNU.sparse.") for keyword, _ in records):
                raise ArchiveRefused(f"a GNU sparse member at byte {self.offset:,} (not a "
                                     "photo; sparse members are not read)")
            glob = self.type == tarfile.XGLTYPE
            pax_headers = tar.pax_headers if glob else tar.pax_headers.copy()
            binary = (b"hdrcharset", b"BINARY") in records or \
                tar.pax_headers.get("hdrcharset") == "BINARY"
            for keyword, value in records:
                key = self._decode_pax_field(keyword, "utf-8", "utf-8", tar.errors)
                encoding = tar.encoding if binary and key in tarfile.PAX_NAME_FIELDS else "utf-8"
                pax_headers[key] = self._decode_pax_field(value, encoding, tar.encoding,
                                                          tar.errors)
            if len(pax_headers) > MAX_GLOBAL_PAX_KEYWORDS:
                raise ArchiveRefused(f"PAX headers setting more than {MAX_GLOBAL_PAX_KEYWORDS} "
                                     f"keywords (at byte {self.offset:,})")
            try:
                following = self.fromtarfile(tar)
            except tarfile.HeaderError as err:
                raise tarfile.ReadError(f"bad header after a PAX header: {err}") from None
            if glob:
                return following
            # as tarfile does: the extended header's fields replace the member's own, and a
            # size it gives moves where the next header starts
            following._apply_pax_info(pax_headers, tar.encoding, tar.errors)
            following.offset = self.offset
            if "size" in pax_headers:
                offset = following.offset_data
                if following.isreg() or following.type not in tarfile.SUPPORTED_TYPES:
                    offset += following._block(following.size)
                tar.offset = offset
            return following


@contextlib.contextmanager
def _extended_header(info: tarfile.TarInfo, tar, what: str):
    """Around reading an extended header: refuse it over MAX_EXTENDED_HEADER_BYTES (before a
    byte of it is read) or past MAX_EXTENDED_HEADERS_IN_A_ROW."""
    if info.size > MAX_EXTENDED_HEADER_BYTES:
        raise ArchiveRefused(f"a {what} extended header declaring {info.size:,} bytes (at byte "
                             f"{info.offset:,}), over the {MAX_EXTENDED_HEADER_BYTES:,} a header "
                             "may hold here; not read")
    depth = getattr(tar, "_extended_in_a_row", 0)
    if depth >= MAX_EXTENDED_HEADERS_IN_A_ROW:
        raise ArchiveRefused(f"more than {MAX_EXTENDED_HEADERS_IN_A_ROW} extended headers in a "
                             f"row (at byte {info.offset:,})")
    tar._extended_in_a_row = depth + 1
    try:
        yield
    finally:
        tar._extended_in_a_row = depth


def _pax_records(buf: bytes, where: int) -> list[tuple[bytes, bytes]]:
    """The (keyword, value) records of a PAX header, `<length> <keyword>=<value>\\n` each, in
    one pass; ArchiveRefused when the header is not made of such records (NUL padding ends it)."""
    records, pos = [], 0
    while pos < len(buf) and buf[pos] != 0:
        space = buf.find(b" ", pos, pos + 21)
        end = pos + int(buf[pos:space]) if space > pos and buf[pos:space].isdigit() else pos
        keyword, equals, value = buf[space + 1:end - 1].partition(b"=")
        if not space + 1 < end <= len(buf) or buf[end - 1] != 0x0A or not equals or not keyword:
            raise ArchiveRefused(f"a malformed PAX header at byte {where:,} (its record at "
                                 f"{pos:,})")
        records.append((keyword, value))
        pos = end
    return records


def members(raw):
    """(tar, member) for each member of the archive read from the binary stream `raw`
    (compressed or not: `decompressed`; forward only): `members_of` its uncompressed stream."""
    yield from members_of(decompressed(raw))


def members_of(stream):
    """(tar, member) for each member of the uncompressed tar `stream` (forward only), with
    bounds tarfile lacks: a read decompresses only what it returns (tarfile's own streams
    decompress 10 KiB of input whole: bzip2 makes 100 bytes 64 MiB), extended headers as
    `BoundedTarInfo` says; a member's data skipped a block at a time and only as far as the
    stream goes (an archive that ends inside a member is cut short: tarfile.ReadError); and
    no list of every member kept (tarfile keeps one, which grows with the archive).
    The caller may read the current member's data (`tar.extractfile`) before the next."""
    with tarfile.open(fileobj=stream, mode="r|", tarinfo=BoundedTarInfo) as tar:
        member = tar.next()
        while member is not None:
            tar.members.clear()
            yield tar, member
            _skip_to_next_header(tar)
            member = tar.next()


def _skip_to_next_header(tar) -> None:
    stream = tar.fileobj
    while stream.tell() < tar.offset:
        if not stream.read(min(tar.offset - stream.tell(), SKIP_READ_BYTES)):
            raise tarfile.ReadError(f"the archive ends at byte {stream.tell():,}, inside a member "
                                    f"whose header declared data up to byte {tar.offset:,}")

_READERS: dict[tuple[str, str, int], object] = {}

_SPANS: dict[tuple[str, str, int], tuple[int, bytes]] = {}

# (url, version) -> the access points of a gzip archive found by any reader of this process:
# the reading stage's pass through an archive leaves them for the shard writer's seeks
_POINTS: dict[tuple[str, str], list] = {}

_LOCK = threading.RLock()  # (a reader is made under it, and asks for its shared points)


def shared_points(url: str, version: str) -> list:
    with _LOCK:
        return _POINTS.setdefault((url, version), [])


@contextlib.contextmanager
def walked(url: str, version: str):
    """The uncompressed stream of the archive at `url`, from its start, for one pass through
    it: a gzip archive through a `GzipAccess` adding its access points to those of this
    process (`shared_points`), others as `decompressed` reads them."""
    raw = fileio.open_source(url)
    try:
        magic = raw.read(6)
        raw.seek(0)
        yield (GzipAccess(raw, shared_points(url, version)) if magic.startswith(b"\x1f\x8b")
               else decompressed(raw))
    finally:
        raw.close()

def archive_version(fs, path: str) -> str:
    """What identifies one version of an archive (size plus mtime / generation / etag), so the
    per-process caches below never serve bytes of an archive replaced under the same name."""
    info = fs.info(path)
    stamp = next((info[k] for k in ("mtime", "generation", "etag", "ETag", "LastModified")
                  if info.get(k) is not None), "")
    return f"{info.get('size')}:{stamp}"


# Decompressing readers by the magic bytes a file starts with: each read returns at most what
# it is asked (the decompressor's output is bounded, whatever the input's ratio)
_DECOMPRESSED = ((b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
                 (b"BZh", lambda raw: bz2.BZ2File(raw, mode="rb")),
                 (b"\xfd7zXZ\x00", lambda raw: lzma.LZMAFile(raw, mode="rb")))


def decompressed(raw):
    """The uncompressed stream of the archive file `raw` (seekable, at its start): gzip, bzip2
    or xz by its first bytes (as tarfile's "r|*" tells them), else `raw` itself."""
    magic = raw.read(6)
    raw.seek(0)
    return next((opener(raw) for prefix, opener in _DECOMPRESSED if magic.startswith(prefix)),
                raw)


def open_archive(url: str):
    """A forward reader of the uncompressed stream of the archive at `url` (a regular file only,
    see fileio.open_source), decompressed as the member index was read (`decompressed`)."""
    return decompressed(fileio.open_source(url))


def open_archive_at_any_offset(url: str, version: str = ""):
    """Like `open_archive`, for reads at any offset: a gzip archive gets a `GzipAccess` sharing
    the access points this process knows of it (`shared_points`), whose seeks restart from the
    nearest one; bzip2 and xz get `decompressed`'s readers (a backward seek restarts from the
    start of the archive)."""
    raw = fileio.open_source(url)
    magic = raw.read(6)
    raw.seek(0)
    return (GzipAccess(raw, shared_points(url, version)) if magic.startswith(b"\x1f\x8b")
            else decompressed(raw))


def read_tar_span(url: str, start: int, length: int, version: str = "") -> bytes:
    """`length` bytes at `start` in the uncompressed stream of a (gzipped) tar. One reader per
    archive is kept per process; a gzip reader keeps access points (`GzipAccess`), so a read
    anywhere costs at most ACCESS_POINT_EVERY bytes of decompression beyond its own span once
    the archive has been passed through, whatever order shards are written in."""
    # one reader per archive and thread: two shard writers never drag each other backwards
    slot = (url, version, threading.get_ident())
    with _LOCK:
        reader = _READERS.get(slot)
        if reader is None:
            reader = open_archive_at_any_offset(url, version)
            _READERS[slot] = reader
    reader.seek(start)
    data = reader.read(length)
    if len(data) != length:
        raise OSError(f"{url}: archive ended at {start + len(data)}, expected {start + length}")
    return data


ACCESS_POINT_EVERY = 16 << 20  # uncompressed bytes between two access points of a gzip reader
_GZIP_CHUNK = 1 << 14  # compressed bytes read at a time
# uncompressed bytes one feed adds to the buffer at most, whatever the archive holds (deflate
# expands ~1032x: a bomb is bounded as in `decompressed`'s readers)
_GZIP_OUT = 1 << 20


class GzipAccess:
    """A gzip stream readable at any uncompressed offset (zlib's zran idea, with Python's own
    `Decompress.copy()`): while decompressing forward it keeps, every ACCESS_POINT_EVERY bytes
    of output, a copy of the decompressor (its state and 32 KB window, ~40 KB) with the
    compressed offset it had reached. A backward seek restarts from the nearest access point at
    or before the target instead of from the start of the archive, as `gzip.GzipFile` does: a
    shard of ROD sequences scattered over a 1.7 GB archive then costs its own spans, not a pass
    from the start per shard. Concatenated gzip members and zero padding after the last one are
    read as `gzip` reads them; a truncated stream raises EOFError, a corrupt one zlib.error."""

    def __init__(self, raw, points: list | None = None):
        self._raw = raw
        # (uncompressed offset, compressed offset, decompressor copy, member started); a list
        # shared by every reader of the same archive in this process (`shared_points`): each
        # reader has its own position, and any of them extends the points as it goes further
        self._points = [] if points is None else points
        if not self._points:
            self._points.append((0, 0, None, False))
        self._restart(self._points[0])

    def _restart(self, point) -> None:
        out, comp, decompressor, started = point
        self._raw.seek(comp)
        self._d = decompressor.copy() if decompressor is not None else _new_gzip_member()
        self._started = started
        self._comp = comp            # compressed bytes read from the archive
        self._input = b""            # of which the decompressor has not consumed these
        self._pos = out              # uncompressed offset of self._buf[0]
        self._buf = bytearray()
        self._eof = False

    def _feed(self) -> bool:
        """Decompress up to _GZIP_OUT more bytes into the buffer; False at the end of the
        stream."""
        while not self._eof:
            if self._d.eof:  # the previous member is complete: padding, or another member
                self._input = self._input.lstrip(b"\x00")
                if self._input:
                    self._d, self._started = _new_gzip_member(), False
            if not self._input:
                self._input = self._raw.read(_GZIP_CHUNK)
                self._comp += len(self._input)
                if not self._input:
                    self._end_of_input()
                    continue
                if self._d.eof:
                    continue  # padding, or the next member's header
            data = self._d.decompress(self._input, _GZIP_OUT)
            self._started = True
            self._input = self._d.unused_data if self._d.eof else self._d.unconsumed_tail
            if data:
                self._buf += data
                self._mark()
                return True
        return False

    def _end_of_input(self) -> None:
        """The archive has no more bytes: what the decompressor still holds, then the end."""
        if not self._d.eof:
            self._buf += self._d.flush()
            if self._started and not self._d.eof:
                raise EOFError("compressed file ended before the end-of-stream marker was "
                               "reached")
        self._eof = True

    def _mark(self) -> None:
        end = self._pos + len(self._buf)
        if end - self._points[-1][0] >= ACCESS_POINT_EVERY:
            # the decompressor's state once it has consumed all but self._input of what was
            # read and returned everything up to `end`
            self._points.append((end, self._comp - len(self._input), self._d.copy(),
                                 self._started))

    def seek(self, offset: int) -> int:
        best = max((p for p in self._points if p[0] <= offset), key=lambda p: p[0])
        # restart when going backwards, or when an access point lies beyond what is buffered
        if offset < self._pos or best[0] > self._pos + len(self._buf):
            self._restart(best)
        while self._pos + len(self._buf) < offset:
            self._pos += len(self._buf)
            self._buf.clear()
            if not self._feed():
                break
        cut = max(0, min(len(self._buf), offset - self._pos))
        del self._buf[:cut]
        self._pos += cut
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise ValueError("GzipAccess reads a bounded size at a time")
        while len(self._buf) < size and self._feed():
            pass
        data = bytes(self._buf[:size])
        del self._buf[:size]
        self._pos += len(data)
        return data

    def close(self) -> None:
        self._raw.close()


def _new_gzip_member():
    return zlib.decompressobj(16 + zlib.MAX_WBITS)  # a gzip header, then raw deflate


def read_member(ref: dict) -> bytes:
    """A member's bytes, through a one-span-per-archive cache of its whole sequence."""
    url, offset, size = ref["url"], ref["offset"], ref["size"]
    start, end = ref.get("span") or (offset, offset + size)
    archive = (url, ref.get("version", ""), threading.get_ident())  # per thread, as the readers
    with _LOCK:
        cached = _SPANS.get(archive)
    if cached is None or cached[0] != start or len(cached[1]) != end - start:
        cached = (start, read_tar_span(url, start, end - start, archive[1]))
        with _LOCK:
            _SPANS[archive] = cached
    if offset + size >= end:  # the span's last member (the writer reads a span in order):
        with _LOCK:           # its ~38 MB need not wait for the next span to replace them
            if _SPANS.get(archive) is cached:
                del _SPANS[archive]
    return cached[1][offset - start: offset - start + size]
