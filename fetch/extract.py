"""Safe extraction of a downloaded archive (tar, tar.gz, zip) into a folder.

Archives come from the network and are treated as hostile. Every member is judged by its
header (name, type, declared size) before a byte of it is read:

- its name, after `strip_components` leading folders, must be a relative path of plain parts
  (no absolute path, no `..`, no empty or `.` part, no backslash or control character, no part
  longer than a file name may be), and it must land inside the target folder even through
  folders that already exist there (a folder that is a link pointing out is refused, not
  followed); a name the caller protects (fetch's own files, the archive itself, the other
  downloads of the folder) is refused;
- only regular files and folders are extracted: a link (symbolic or hard), a device, a FIFO, a
  sparse file is refused, so nothing an archive holds can point outside the target;
- sizes are bounded: a member declaring more than `max_member_bytes`, or members declaring more
  than `max_total_bytes` together, or more than `max_members` members, or more than
  `max_ratio` times the archive's own size (a zip bomb: at least `ratio_floor` is always
  allowed), stop the extraction; the bytes copied never exceed what the header declared, so a
  lying header cannot write more;
- tar headers are bounded before `tarfile` reads them: a GNU long name or a PAX header larger
  than `max_header_bytes` is refused (tarfile would read the whole of it into memory first),
  and the compression is the one the name says (a `.tar` is never decompressed as bzip2 or xz,
  whose bombs expand without bound in one read); a header that cannot be read is an error,
  not the silent end of the archive;
- a zip is judged whole before anything is written: its central directory's size (before
  `zipfile` reads it), each member's compression (stored or deflate only), encryption, name
  (UTF-8 when flagged so) and duplicates.

Every file is written under a temporary name in its final folder and renamed, so an interrupted
extraction never leaves half a file under a final name; re-running it overwrites what it wrote.
A tar is read as a stream (`r|`, members forgotten as they pass), so memory does not grow with
the number of members (ImageNet-C's noise.tar holds 750,000); in a tar, a later member of the
same name replaces an earlier one (tar's own rule), in a zip two members of one name are
refused. Permissions in the archive are not applied: files get the process's default mode.
`should_stop` is asked between blocks: when it says yes, the extraction stops (`Interrupted`)
and removes its temporary file.

This module imports nothing of the project (it is part of the core)."""
from __future__ import annotations

import hashlib
import os
import stat
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass

CHUNK = 1 << 20
NAME_MAX = 255     # bytes in one file name
PATH_MAX = 4096    # bytes in a path the kernel takes
TRAILER_MAX = 1 << 20  # zero bytes allowed after a tar's end (its records are padded)


class UnsafeArchive(Exception):
    """An archive that cannot be extracted safely or at all; the message is one line."""


class Interrupted(Exception):
    """`should_stop` said stop; nothing partial is left under a final name."""


@dataclass(frozen=True)
class Limits:
    max_member_bytes: int = 16 << 30       # COCO's largest member is 330 MB; ImageNet-C's 100 kB
    max_total_bytes: int = 256 << 30       # the largest real archive extracts to ~21 GB
    max_members: int = 10_000_000          # ImageNet-C's noise.tar holds 750,000
    max_ratio: int = 100                   # declared bytes per archive byte (text zips: ~10)
    ratio_floor: int = 64 << 20            # what any archive may declare, whatever its size
    max_header_bytes: int = 1 << 20        # a GNU long name or a PAX header (real ones: < 1 kB)
    max_directory_bytes: int = 64 << 20    # a zip's central directory (COCO train2014: ~7 MB)


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


def archive_kind(name: str) -> str | None:
    """'zip', 'tar', 'tar.gz' or None, by the file name's suffix."""
    lower = name.lower()
    if lower.endswith(".zip"):
        return "zip"
    if lower.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    if lower.endswith(".tar"):
        return "tar"
    return None


def extract(archive: str, target: str, *, strip_components: int = 0,
            limits: Limits = Limits(), protected=(), should_stop=None) -> tuple[int, int]:
    """Extract `archive` into the folder `target` (created if missing); returns (files written,
    bytes written). Raises UnsafeArchive naming the first member refused (or what is corrupt),
    Interrupted when `should_stop()` turned true. `protected`: paths (tuples of parts,
    relative to `target`) no member may write, nor anything under them."""
    kind = archive_kind(archive)
    if kind is None:
        raise UnsafeArchive(f"{os.path.basename(archive)}: not a .tar, .tar.gz, .tgz or .zip")
    os.makedirs(target, exist_ok=True)
    writer = _Writer(target, strip_components, limits, os.path.getsize(archive),
                     frozenset(tuple(p) for p in protected), should_stop or (lambda: False))
    try:
        if kind == "zip":
            _extract_zip(archive, writer)
        else:
            _extract_tar(archive, writer, "r|gz" if kind == "tar.gz" else "r|")
    except _CORRUPT as err:
        raise UnsafeArchive(f"{os.path.basename(archive)}: corrupt archive: "
                            f"{_reason(err)}") from None
    return writer.files, writer.bytes


# What the standard library's readers raise on bytes they cannot parse (tarfile and zipfile
# let ValueError, struct.error, zlib.error, UnicodeDecodeError (a ValueError), RecursionError
# and NotImplementedError (a zip "version 6.4") through from their headers): the archive is
# corrupt, the message one line.
_CORRUPT = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError,
            OverflowError, struct.error, zlib.error, RecursionError, NotImplementedError)


def _reason(err: BaseException) -> str:
    text = str(err).splitlines()[0][:200] if str(err) else ""
    return f"{type(err).__name__}: {text}" if not isinstance(err, (tarfile.TarError,
                                                                     zipfile.BadZipFile)) \
        else text or type(err).__name__


class _Writer:
    """Checks names and sizes, creates folders and writes files inside the target only."""

    def __init__(self, target: str, strip: int, limits: Limits, archive_bytes: int,
                 protected: frozenset, should_stop):
        self.target = os.path.realpath(target)
        self.strip = strip
        self.limits = limits
        self.allowed = min(limits.max_total_bytes,
                           max(limits.ratio_floor, limits.max_ratio * archive_bytes))
        self.protected = protected
        self.should_stop = should_stop
        self.members = 0
        self.declared = 0
        self.weight = 0  # declared bytes and header blocks, against the ratio
        self.files = 0
        self.bytes = 0
        self.made: set[str] = set()  # folders checked (or made) by this extraction

    def parts(self, name: str) -> list[str] | None:
        """The member's path inside the target, as parts; None when stripping leaves nothing
        (e.g. the top folder of a GitHub archive)."""
        if "\\" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise UnsafeArchive(f"member {name!r}: a backslash or control character in its name")
        if name.startswith("/"):
            raise UnsafeArchive(f"member {name!r}: an absolute path")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise UnsafeArchive(f"member {name!r}: a '..' in its path")
        parts = parts[self.strip:]
        if not parts:
            return None
        sizes = [len(p.encode("utf-8", "surrogateescape")) for p in parts]
        if max(sizes) > NAME_MAX:
            raise UnsafeArchive(f"member {_short(name)}: a part of its name is longer than "
                                f"{NAME_MAX} bytes")
        if len(self.target) + sum(sizes) + len(sizes) > PATH_MAX - 64:
            raise UnsafeArchive(f"member {_short(name)}: its path is longer than the "
                                f"{PATH_MAX} bytes a path may be")
        for depth in range(1, len(parts) + 1):
            if tuple(parts[:depth]) in self.protected:
                raise UnsafeArchive(f"member {name!r}: would replace "
                                    f"{'/'.join(parts[:depth])!r}, which is not the archive's "
                                    f"to write")
        return parts

    def count(self, name: str, size: int, overhead: int = 0) -> None:
        """Count a member declaring `size` bytes; `overhead`: what its header costs, counted
        against the ratio only (a million empty members are a bomb too)."""
        self.members += 1
        if self.members > self.limits.max_members:
            raise UnsafeArchive(f"more than {self.limits.max_members} members")
        if size < 0 or size > self.limits.max_member_bytes:
            raise UnsafeArchive(f"member {_short(name)} declares {size} bytes (limit "
                                f"{self.limits.max_member_bytes})")
        self.declared += size
        if self.declared > self.limits.max_total_bytes:
            raise UnsafeArchive(f"members declare more than {self.limits.max_total_bytes} bytes "
                                f"together")
        self.weight += size + overhead
        if self.weight > self.allowed:
            raise UnsafeArchive(f"members declare more than {self.allowed} bytes together, "
                                f"over {self.limits.max_ratio} times the archive's size (a "
                                f"zip bomb?)")

    def stop_if_asked(self) -> None:
        if self.should_stop():
            raise Interrupted("stopped")

    def folder(self, parts: list[str]) -> str:
        """Create the folder `parts` under the target, one level at a time: a level that exists
        as a link (wherever it points) or as a file is refused, so nothing is ever created or
        written through a link."""
        path = self.target
        for depth, part in enumerate(parts):
            path = os.path.join(path, part)
            if path in self.made:
                continue
            if os.path.islink(path):
                raise UnsafeArchive(f"{'/'.join(parts[:depth + 1])}: a link in the target folder "
                                    f"(not followed)")
            if not os.path.exists(path):
                os.mkdir(path)
            elif not os.path.isdir(path):
                raise UnsafeArchive(f"{'/'.join(parts[:depth + 1])}: exists and is not a folder")
            self.made.add(path)
        return path

    def file(self, parts: list[str], source, size: int) -> None:
        """Copy exactly `size` bytes from `source` to the member's path, via a temporary name."""
        folder = self.folder(parts[:-1]) if len(parts) > 1 else self.target
        final = os.path.join(folder, parts[-1])
        if os.path.isdir(final) and not os.path.islink(final):
            raise UnsafeArchive(f"{'/'.join(parts)}: exists and is a folder")
        tmp = os.path.join(folder, _temporary_name(parts[-1]))
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        if os.path.lexists(tmp):
            os.remove(tmp)
        handle = os.fdopen(os.open(tmp, flags, 0o644), "wb")
        written = 0
        try:
            with handle:
                while written < size:
                    self.stop_if_asked()
                    block = source.read(min(CHUNK, size - written))
                    if not block:
                        raise UnsafeArchive(f"member {'/'.join(parts)!r}: truncated "
                                            f"({written} of {size} bytes)")
                    handle.write(block)
                    written += len(block)
            os.replace(tmp, final)
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise
        self.files += 1
        self.bytes += written


def _temporary_name(name: str) -> str:
    """A hidden name beside `name` for writing it under, never longer than a file name may be
    (a legal 250-byte name stays legal: its temporary name holds a digest of it instead)."""
    prefix = f".tmp-extract-{os.getpid()}-"
    if len((prefix + name).encode("utf-8", "surrogateescape")) > NAME_MAX:
        name = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()
    return prefix + name


def _short(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")


# ---- tar -----------------------------------------------------------------------------------

_EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
             tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


# Extended headers that may stand in a row before a member: a real archive has at most a few
# (a long name, a long link, a PAX header); tarfile reads each next one recursively, so a long
# chain would end in a RecursionError deep in its stack, where anything can fail.
MAX_HEADER_CHAIN = 16


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses, before tarfile reads it, an extended header (GNU long name or
    link, PAX) larger than `max_header` bytes, PAX global headers larger than that together,
    more than MAX_HEADER_CHAIN extended headers in a row, and sparse members (whose maps
    tarfile reads without a bound)."""
    max_header = 1 << 20

    def _proc_member(self, tarfile_):
        if self.type in _EXTENDED:
            if self.size > self.max_header:
                raise UnsafeArchive(f"a tar header ({_header_kind(self.type)}) of {self.size} "
                                    f"bytes (limit {self.max_header}); not read")
            if self.type == tarfile.XGLTYPE:
                seen = getattr(tarfile_, "_global_header_bytes", 0) + self.size
                if seen > self.max_header:
                    raise UnsafeArchive(f"PAX global headers of more than {self.max_header} "
                                        f"bytes together; not read")
                tarfile_._global_header_bytes = seen
            depth = getattr(tarfile_, "_header_chain", 0) + 1
            if depth > MAX_HEADER_CHAIN:
                raise UnsafeArchive(f"more than {MAX_HEADER_CHAIN} extended tar headers in a "
                                    "row; not read")
            tarfile_._header_chain = depth
            try:
                return super()._proc_member(tarfile_)
            finally:
                tarfile_._header_chain = depth - 1
        elif self.type == tarfile.GNUTYPE_SPARSE:
            raise UnsafeArchive(f"member {_short(self.name)}: a sparse file (only files and "
                                f"folders are extracted)")
        return super()._proc_member(tarfile_)

    def _sparse_refused(self, *args):
        raise UnsafeArchive(f"member {_short(self.name)}: a sparse file (only files and "
                            f"folders are extracted)")

    _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _sparse_refused

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        """A header block that is not one (a bad checksum, cut short) is an error: tarfile
        takes it for the end of the archive past the first member, silently."""
        try:
            return super().frombuf(buf, encoding, errors)
        except (tarfile.InvalidHeaderError, tarfile.TruncatedHeaderError) as err:
            raise UnsafeArchive(f"an unreadable tar header ({err}): the archive is corrupt "
                                f"or cut") from None


def _header_kind(kind: bytes) -> str:
    return {tarfile.GNUTYPE_LONGNAME: "GNU long name", tarfile.GNUTYPE_LONGLINK:
            "GNU long link"}.get(kind, "PAX")


def _extract_tar(archive: str, writer: _Writer, mode: str) -> None:
    # "r|" / "r|gz": a forward-only stream of the compression the name says, so no index of
    # members is built and nothing is decompressed as bzip2 or xz.
    info = type("_TarInfo", (_BoundedTarInfo,), {"max_header": writer.limits.max_header_bytes})
    with tarfile.open(archive, mode=mode, tarinfo=info) as tar:
        while True:
            writer.stop_if_asked()
            member = tar.next()
            if member is None:
                break
            tar.members = []  # forget what passed: memory stays flat over 750k members
            writer.count(member.name, member.size if member.isfile() else 0, tarfile.BLOCKSIZE)
            parts = writer.parts(member.name)
            if member.isdir():
                if parts:
                    writer.folder(parts)
            elif member.isfile():
                if parts:
                    source = tar.extractfile(member)
                    writer.file(parts, source, member.size)
            else:
                kind = ("link" if member.issym() or member.islnk() else "special file")
                raise UnsafeArchive(f"member {member.name!r}: a {kind} (only files and folders "
                                    f"are extracted)")
        _check_trailer(tar, writer)


def _check_trailer(tar, writer: _Writer) -> None:
    """tarfile ends an archive silently at the first header it cannot read (past the first):
    anything but zero padding after the end is a corrupt archive, not its end."""
    seen = 0
    while seen <= TRAILER_MAX:
        writer.stop_if_asked()
        block = tar.fileobj.read(64 << 10)
        if not block:
            return
        if block.strip(b"\0"):
            raise UnsafeArchive(f"an unreadable tar header at byte {tar.offset}: the members "
                                f"after it are not extracted")
        seen += len(block)
    raise UnsafeArchive(f"more than {TRAILER_MAX} bytes after the end of the tar")


# ---- zip -----------------------------------------------------------------------------------

_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}


def _zip_type(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16
    if not info.filename:  # (zipfile's is_dir would fail on it with an IndexError)
        raise UnsafeArchive("a member with an empty name")
    if info.is_dir():
        return "dir"
    if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        return "link" if stat.S_ISLNK(mode) else "special file"
    return "file"


def _check_directory(archive: str, limits: Limits) -> None:
    """The central directory's size and count, from the end record, before zipfile reads the
    whole directory into memory."""
    end_record = getattr(zipfile, "_EndRecData", None)
    if end_record is None:  # a Python without it: zipfile's own checks only
        return
    with open(archive, "rb") as handle:
        record = end_record(handle)
    if not record:
        raise zipfile.BadZipFile("no end of central directory record")
    entries, size = record[zipfile._ECD_ENTRIES_TOTAL], record[zipfile._ECD_SIZE]
    if size > limits.max_directory_bytes:
        raise UnsafeArchive(f"a zip directory of {size} bytes (limit "
                            f"{limits.max_directory_bytes}); not read")
    if entries > limits.max_members:
        raise UnsafeArchive(f"more than {limits.max_members} members")


def _extract_zip(archive: str, writer: _Writer) -> None:
    _check_directory(archive, writer.limits)
    size = os.path.getsize(archive)
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        names = set()
        for info in infos:  # the whole central directory is judged before anything is written
            writer.stop_if_asked()
            kind = _zip_type(info)
            if kind in ("link", "special file"):
                raise UnsafeArchive(f"member {info.filename!r}: a {kind} (only files and "
                                    f"folders are extracted)")
            if info.flag_bits & 0x1:
                raise UnsafeArchive(f"member {info.filename!r}: encrypted")
            if not 0 <= info.header_offset < size or info.compress_size > size:
                # zipfile would seek to a negative offset (an OSError, not BadZipFile)
                raise UnsafeArchive(f"member {info.filename!r}: its data lies outside the "
                                    f"archive (corrupt)")
            if kind == "file" and info.compress_type not in _ZIP_METHODS:
                raise UnsafeArchive(f"member {info.filename!r}: compression method "
                                    f"{info.compress_type} (only stored and deflate are read)")
            writer.count(info.filename, info.file_size if kind == "file" else 0)
            parts = writer.parts(info.filename)
            key = tuple(parts or ())
            if key in names and kind == "file":
                raise UnsafeArchive(f"member {info.filename!r} appears twice")
            names.add(key)
        for info in infos:
            parts = writer.parts(info.filename)
            if not parts:
                continue
            if _zip_type(info) == "dir":
                writer.folder(parts)
            else:
                # zipfile stops at the declared size and checks the CRC at the end
                with zf.open(info) as source:
                    writer.file(parts, source, info.file_size)
