"""A source manifest's `downloads:` section: what `run_pipeline.py fetch` downloads into the
source's folder, what is known of each file, and what a user must do by hand.

Schema (every key but `files` optional; see any `source_manifests/<name>.yaml`, at its end):

    downloads:
      files:                        # fetched over HTTP(S) into <sources_root>/<source_subdir>/
        - url: https://...          # https (or http, for hosts that serve nothing else)
          path: noise.tar           # where it goes, relative to the source folder
          size: 123                 # bytes, when published
          approx_size: 21000000000  # or, when no byte count is published: an approximate
                                    #     size (not a pin), for fetch's dry run and disk check
          unknown_size: "why"       # or: why no size is known before downloading (fetch's
                                    #     dry run says it; fetch records the size it learns)
          md5: <32 hex>             # the publisher's digest(s) ...
          sha256: <64 hex>
          pins_from: https://...    # ... and the page or file that publishes them (required
                                    #     with size/md5/sha256)
          record_only: "why"        # or: why nothing is pinned (required without pins); such
                                    #     files are checked by `--verify_sources --record`'s lock
          extract: {into: ".", strip_components: 0}   # an archive the build reads unpacked
          train_only: true          # only the train split reads it (skipped by fetch --no_train)
          for_each: classes         # one file per item of this manifest list; `url` and `path`
                                    #     are templates of {item} ({item_url}: percent-encoded)
      manual: |                     # the steps a user takes by hand, printed by fetch and quoted
        ...                         #     in docs/sources.md (a test keeps them equal);
                                    #     <sources_root> stands for the sources root
      record_only: "why"            # with manual: why what those steps bring has no pins
      manual_list:                  # a list fetch writes for the manual steps, from the files
        glob: annotations/*/*.fps1.csv      # fetched: one line per match of `regex`
        regex: "^annotations/(?P<category>[^/]+)/(?P<id>[^/]+)\\.fps1\\.csv$"
        line: "{category} {id}"
        write: annotated_videos.txt

`plan(manifest)` checks the section (one line naming the first problem) and returns a
`SourcePlan`; `pins_by_path(manifest)` gives `--verify_sources` the published pins per file.
"""
from __future__ import annotations

import glob
import os
import posixpath
import re
import urllib.parse
from dataclasses import dataclass, field

from proactivebench_builder.fetch import extract as extraction
from proactivebench_builder.fetch.download import (
    MD5_PATTERN, SHA256_PATTERN, ExtractSpec, FileSpec)
from proactivebench_builder.fetch.folder_state import STATE_DIR
from proactivebench_builder.fetch.source_lock import LOCK_NAME

SOURCES_ROOT_PLACEHOLDER = "<sources_root>"
FILE_KEYS = {"url", "path", "size", "approx_size", "unknown_size", "md5", "sha256", "pins_from",
             "record_only", "extract", "train_only", "for_each"}
# names at the top of a source folder that belong to fetch and the lock: no download, no
# archive member may take them
RESERVED_NAMES = (STATE_DIR, LOCK_NAME)


class PlanError(ValueError):
    """A manifest's `downloads:` section is malformed; the message is one line."""


@dataclass(frozen=True)
class PlannedFile:
    spec: FileSpec
    train_only: bool = False
    pins_from: str | None = None
    record_only: str | None = None
    approx_size: int | None = None  # bytes, approximate (never checked): sizes fetch foresees
    unknown_size: str | None = None  # why no size is known before downloading, when none is


@dataclass
class SourcePlan:
    name: str
    subdir: str
    files: list[PlannedFile] = field(default_factory=list)
    manual: str | None = None
    manual_list: dict | None = None
    record_only: str | None = None   # why the manual part has no pins

    def manual_steps(self, sources_root: str | None = None) -> str | None:
        """The manual steps, with the sources root filled in when given."""
        if not self.manual:
            return None
        text = self.manual.rstrip("\n")
        return text.replace(SOURCES_ROOT_PLACEHOLDER, sources_root) if sources_root else text


def plan(manifest: dict) -> SourcePlan:
    """The checked `downloads:` section of a manifest (an empty plan when it has none)."""
    name = manifest.get("name", "?")
    section = manifest.get("downloads")
    result = SourcePlan(name, str(manifest.get("source_subdir", name)))
    if section is None:
        return result
    where = f"manifest {name}.yaml: downloads"
    # fetch writes into <sources_root>/<source_subdir>: it must stay inside the root
    _check_relative(result.subdir, f"manifest {name}.yaml: source_subdir")
    if not isinstance(section, dict):
        raise PlanError(f"{where} is not a mapping")
    unknown = sorted(set(section) - {"files", "manual", "manual_list", "record_only"})
    if unknown:
        raise PlanError(f"{where}: unknown key {unknown[0]!r}")
    files = section.get("files") or []
    if not isinstance(files, list):
        raise PlanError(f"{where}.files is not a list")
    seen = set()
    for index, entry in enumerate(files):
        for planned in _expand(manifest, entry, f"{where}.files[{index}]"):
            if planned.spec.path in seen:
                raise PlanError(f"{where}: two files go to {planned.spec.path!r}")
            seen.add(planned.spec.path)
            result.files.append(planned)
    folders = {"/".join(p.split("/")[:k]) for p in seen for k in range(1, p.count("/") + 1)}
    both = sorted(seen & folders)
    if both:
        raise PlanError(f"{where}: {both[0]!r} is both a file and a folder of other files")
    manual = section.get("manual")
    if manual is not None and not (isinstance(manual, str) and manual.strip()):
        raise PlanError(f"{where}.manual is not a text")
    result.manual = manual
    record_only = section.get("record_only")
    if manual is not None and not (isinstance(record_only, str) and record_only.strip()):
        raise PlanError(f"{where}: manual steps bring files nobody pins: record_only must say "
                        f"why")
    result.record_only = record_only
    if section.get("manual_list") is not None:
        result.manual_list = _check_manual_list(section["manual_list"], f"{where}.manual_list")
    if not result.files and not result.manual:
        raise PlanError(f"{where}: neither files to fetch nor manual steps")
    return result


def pins_by_path(manifest: dict) -> dict[str, dict]:
    """Relative path -> the published pins of that file ({'size', 'md5', 'sha256'}, those
    known), for every fetched file that has any."""
    pins = {}
    for planned in plan(manifest).files:
        spec = planned.spec
        known = {k: getattr(spec, k) for k in ("size", "md5", "sha256")
                 if getattr(spec, k) is not None}
        if known:
            pins[spec.path] = known
    return pins


def write_manual_list(source_plan: SourcePlan, folder: str) -> tuple[str, int] | None:
    """Write the plan's `manual_list` file from what is in `folder` (None when the plan has
    none or nothing matches yet); returns (path written, lines)."""
    spec = source_plan.manual_list
    if not spec:
        return None
    pattern = re.compile(spec["regex"])
    lines = []
    for path in glob.glob(os.path.join(glob.escape(folder), spec["glob"])):
        relative = os.path.relpath(path, folder).replace(os.sep, "/")
        match = pattern.match(relative)
        if match:
            lines.append(spec["line"].format(**match.groupdict()))
    if not lines:
        return None
    target = os.path.join(folder, spec["write"])
    tmp = f"{target}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("".join(f"{line}\n" for line in sorted(lines)))
    os.replace(tmp, target)
    return target, len(lines)


# ---- checks --------------------------------------------------------------------------------


def _expand(manifest: dict, entry, where: str) -> list[PlannedFile]:
    if not isinstance(entry, dict):
        raise PlanError(f"{where} is not a mapping")
    unknown = sorted(set(entry) - FILE_KEYS)
    if unknown:
        raise PlanError(f"{where}: unknown key {unknown[0]!r}")
    for key in ("url", "path"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise PlanError(f"{where}: {key} is missing")
    items = [None]
    if "for_each" in entry:
        key = entry["for_each"]
        values = manifest.get(key) if isinstance(key, str) else None
        if not isinstance(values, list) or not values or \
                not all(isinstance(v, str) and v for v in values):
            raise PlanError(f"{where}: for_each names {key!r}, not a list of names in the "
                            f"manifest")
        if "{item}" not in entry["path"]:
            raise PlanError(f"{where}: with for_each, path must hold {{item}}")
        items = values
    out = []
    for item in items:
        url, path = entry["url"], entry["path"]
        if item is not None:
            if "/" in item or item in (".", ".."):
                raise PlanError(f"{where}: for_each item {item!r} cannot be a file name")
            quoted = urllib.parse.quote(item, safe="")
            url = url.replace("{item_url}", quoted).replace("{item}", quoted)
            path = path.replace("{item}", item)
        out.append(_planned(entry, url, path, where))
    return out


def _planned(entry: dict, url: str, path: str, where: str) -> PlannedFile:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. 'https://[::1/x': an IPv6 host without its ']'
        parts = None
    if parts is None or parts.scheme not in ("https", "http") or not parts.netloc:
        raise PlanError(f"{where}: url {url!r} is not an http(s) URL")
    _check_relative(path, f"{where}.path")
    size = entry.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
        raise PlanError(f"{where}: size {size!r} is not a positive byte count")
    approx = entry.get("approx_size")
    if approx is not None and (isinstance(approx, bool) or not isinstance(approx, int)
                               or approx <= 0):
        raise PlanError(f"{where}: approx_size {approx!r} is not a positive byte count")
    unknown_size = entry.get("unknown_size")
    if unknown_size is not None and not (isinstance(unknown_size, str) and unknown_size.strip()):
        raise PlanError(f"{where}: unknown_size must say why no size is known")
    if unknown_size is not None and (size is not None or approx is not None):
        raise PlanError(f"{where}: unknown_size with a size: the size is known")
    md5 = _digest(entry.get("md5"), MD5_PATTERN, "md5", where)
    sha256 = _digest(entry.get("sha256"), SHA256_PATTERN, "sha256", where)
    pins_from, record_only = entry.get("pins_from"), entry.get("record_only")
    pinned = md5 or sha256 or size is not None
    if pinned and not (isinstance(pins_from, str) and pins_from.startswith(("https://",
                                                                             "http://"))):
        raise PlanError(f"{where}: pins need pins_from, the URL that publishes them")
    if not (md5 or sha256) and not (isinstance(record_only, str) and record_only.strip()):
        raise PlanError(f"{where}: no published digest, so record_only must say why")
    extract = None
    if entry.get("extract") is not None:
        extract = _extract_spec(entry["extract"], path, f"{where}.extract")
    train_only = entry.get("train_only", False)
    if not isinstance(train_only, bool):
        raise PlanError(f"{where}: train_only must be true or false")
    spec = FileSpec(url=url, path=path, size=size, md5=md5, sha256=sha256, extract=extract)
    return PlannedFile(spec, train_only, pins_from if pinned else None,
                       record_only if isinstance(record_only, str) else None, approx,
                       unknown_size)


def _digest(value, pattern, kind: str, where: str) -> str | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if not pattern.match(text):
        raise PlanError(f"{where}: {kind} {value!r} is not {kind} hex digits")
    return text


def _check_relative(path: str, where: str) -> None:
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts) \
            or posixpath.normpath(path) != path or any(ord(c) < 32 or c == "\x7f" for c in path):
        raise PlanError(f"{where}: {path!r} is not a plain relative path")
    if parts[0] in RESERVED_NAMES:
        raise PlanError(f"{where}: {path!r} is reserved for fetch's own files")


def _extract_spec(value, path: str, where: str) -> ExtractSpec:
    if not isinstance(value, dict) or set(value) - {"into", "strip_components"}:
        raise PlanError(f"{where}: expected {{into, strip_components}}")
    if extraction.archive_kind(path) is None:
        raise PlanError(f"{where}: {path!r} is not a .tar, .tar.gz, .tgz or .zip")
    into = value.get("into", ".")
    if not isinstance(into, str):
        raise PlanError(f"{where}.into is not a path")
    if into != ".":
        _check_relative(into, f"{where}.into")
    strip = value.get("strip_components", 0)
    if isinstance(strip, bool) or not isinstance(strip, int) or strip < 0:
        raise PlanError(f"{where}.strip_components is not a count")
    return ExtractSpec(into=into, strip_components=strip)


def _check_manual_list(value, where: str) -> dict:
    keys = {"glob", "regex", "line", "write"}
    if not isinstance(value, dict) or set(value) != keys or \
            not all(isinstance(value[k], str) and value[k] for k in keys):
        raise PlanError(f"{where}: expected the texts {sorted(keys)}")
    try:
        groups = set(re.compile(value["regex"]).groupindex)
    except re.error as err:
        raise PlanError(f"{where}.regex: {err}") from None
    try:
        value["line"].format(**{g: "" for g in groups})
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):
        raise PlanError(f"{where}.line {value['line']!r} cannot be filled from the regex's "
                        f"named groups") from None
    _check_relative(value["write"], f"{where}.write")
    return dict(value)
