"""Safe extraction of a downloaded archive (tar, tar.gz, zip) into a folder.

Archives come from the network and are treated as hostile. Every member is judged by its
header (name, type, declared size) before a byte of it is read:

- its name, after `strip_components` leading folders, must be a relative path of plain parts
  (no absolute path, no `..`, no empty or `.` part, no backslash or control character), and it
  must land inside the target folder even through folders that already exist there (a folder
  that is a link pointing out is refused, not followed);
- only regular files and folders are extracted: a link (symbolic or hard), a device, a FIFO is
  refused, so nothing an archive holds can point outside the target;
- sizes are bounded: a member declaring more than `max_member_bytes`, or members declaring more
  than `max_total_bytes` together, or more than `max_members` members, stop the extraction (a
  zip's central directory is checked whole before anything is written); the bytes copied never
  exceed what the header declared, so a lying header cannot write more.

Every file is written under a temporary name in its final folder and renamed, so an interrupted
extraction never leaves half a file under a final name; re-running it overwrites what it wrote.
A tar is read as a stream (`r|*`, members forgotten as they pass), so memory does not grow with
the number of members (ImageNet-C's noise.tar holds 750,000). Permissions in the archive are not
applied: files get the process's default mode.

This module imports nothing of the project (it is part of the core)."""
from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from dataclasses import dataclass

CHUNK = 1 << 20


class UnsafeArchive(Exception):
    """An archive that cannot be extracted safely or at all; the message is one line."""


@dataclass(frozen=True)
class Limits:
    max_member_bytes: int = 16 << 30       # COCO's largest member is 330 MB; ImageNet-C's 100 kB
    max_total_bytes: int = 256 << 30       # the largest real archive extracts to ~21 GB
    max_members: int = 10_000_000          # ImageNet-C's noise.tar holds 750,000


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


def archive_kind(name: str) -> str | None:
    """'zip', 'tar' or None, by the file name's suffix."""
    lower = name.lower()
    if lower.endswith(".zip"):
        return "zip"
    if lower.endswith((".tar", ".tar.gz", ".tgz")):
        return "tar"
    return None


def extract(archive: str, target: str, *, strip_components: int = 0,
            limits: Limits = Limits()) -> tuple[int, int]:
    """Extract `archive` into the folder `target` (created if missing); returns (files written,
    bytes written). Raises UnsafeArchive naming the first member refused."""
    kind = archive_kind(archive)
    if kind is None:
        raise UnsafeArchive(f"{os.path.basename(archive)}: not a .tar, .tar.gz, .tgz or .zip")
    os.makedirs(target, exist_ok=True)
    writer = _Writer(target, strip_components, limits)
    try:
        if kind == "zip":
            _extract_zip(archive, writer)
        else:
            _extract_tar(archive, writer)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as err:
        raise UnsafeArchive(f"{os.path.basename(archive)}: corrupt archive: {err}") from None
    return writer.files, writer.bytes


class _Writer:
    """Checks names and sizes, creates folders and writes files inside the target only."""

    def __init__(self, target: str, strip: int, limits: Limits):
        self.target = os.path.realpath(target)
        self.strip = strip
        self.limits = limits
        self.members = 0
        self.declared = 0
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
        return parts or None

    def count(self, name: str, size: int) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise UnsafeArchive(f"more than {self.limits.max_members} members")
        if size < 0 or size > self.limits.max_member_bytes:
            raise UnsafeArchive(f"member {name!r} declares {size} bytes (limit "
                                f"{self.limits.max_member_bytes})")
        self.declared += size
        if self.declared > self.limits.max_total_bytes:
            raise UnsafeArchive(f"members declare more than {self.limits.max_total_bytes} bytes "
                                f"together")

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
        tmp = os.path.join(folder, f".tmp-extract-{os.getpid()}-{parts[-1]}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        if os.path.islink(tmp):
            os.remove(tmp)
        handle = os.fdopen(os.open(tmp, flags, 0o644), "wb")
        written = 0
        try:
            with handle:
                while written < size:
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


def _extract_tar(archive: str, writer: _Writer) -> None:
    # "r|*": a forward-only stream (plain or gzip), so no index of members is built.
    with tarfile.open(archive, mode="r|*") as tar:
        for member in tar:
            tar.members = []  # forget what passed: memory stays flat over 750k members
            writer.count(member.name, member.size if member.isfile() else 0)
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


def _zip_type(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16
    if info.is_dir():
        return "dir"
    if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        return "link" if stat.S_ISLNK(mode) else "special file"
    return "file"


def _extract_zip(archive: str, writer: _Writer) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:  # the whole central directory is judged before anything is written
            kind = _zip_type(info)
            if kind in ("link", "special file"):
                raise UnsafeArchive(f"member {info.filename!r}: a {kind} (only files and "
                                    f"folders are extracted)")
            writer.count(info.filename, info.file_size if kind == "file" else 0)
            writer.parts(info.filename)
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
