"""The ROD scenario: per sequence (setting + class), one sample of 14 photos of an occluder swept
across the object, read from the archives in one pass (the folder's docstring)."""
from __future__ import annotations

import fnmatch
import hashlib
import json
import posixpath
import re
import tarfile
import zlib

from proactivebench_builder.transforms.api import (BadImage, BadItem, DeadLetter, Scenario,
                                                   SourceError, check_image, fileio,
                                                   format_category, stable_hash,
                                                   template_literal)
from proactivebench_builder.transforms.rod import miniature
from proactivebench_builder.transforms.rod.archives import (
    ArchiveRefused, archive_version, members_of, read_member, walked)
from proactivebench_builder.transforms.rod.play import MOVE_LEFT, MOVE_RIGHT, PLAY

DATASET_FOLDER = "Realistic-Occlusion-Dataset"

ROD_VALIDATION_THREADS = 2  # decoding releases the interpreter lock: photos checked in parallel
# Units of raw reading: one per archive, or one per lane of the extracted folder's sequences
ARCHIVE_UNIT, FOLDER_UNIT = "archive:", "folder:"
FOLDER_LANES = 8
ROD_IN_FLIGHT = 6           # members read ahead of the one yielded next (~3 MB each at 3024 px)


class _InOrder:
    """Entries yielded in the order they were added, the photos among them validated on a
    thread pool meanwhile (at most ROD_IN_FLIGHT waiting, so memory stays bounded). An entry
    is added alone, or as (member entry, the future of its check: error, sha256)."""

    def __init__(self, scenario, threads: int):
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self._scenario = scenario
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rod-check")
        self._queue = deque()

    def check(self, data: bytes, name: str):
        return self._pool.submit(self._scenario._checked, data, name)

    def add(self, entry):
        self._queue.append(entry if isinstance(entry, tuple) else (entry, None))
        while self._queue and (len(self._queue) > ROD_IN_FLIGHT or self._queue[0][1] is None
                               or self._queue[0][1].done()):
            yield self._finish(*self._queue.popleft())

    def drain(self):
        while self._queue:
            yield self._finish(*self._queue.popleft())

    @staticmethod
    def _finish(entry, checking):
        if checking is not None:
            entry["error"], entry["ref"]["sha256"] = checking.result()
        return entry

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._queue.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)


QUESTIONS = (
    "Could you tell me what is behind the {occluder}?",
    "What missing details are obscured by the {occluder}?",
    "What object is hidden behind the {occluder}?",
    "Can you identify the object concealed by the {occluder}?",
    "What is the item partially covered by the {occluder}?",
    "Which object do the {occluder} hide from view?",
    "What lies behind the {occluder} in this picture?",
    "Can you tell what the {occluder} are blocking?",
    "What kind of object is obstructed by the {occluder}?",
    "Identify the object that the {occluder} are covering.",
    "What is the category of the object behind the {occluder}?",
    "What can be found behind the {occluder}?",
    "Which item is occluded by the {occluder}?",
    "What is the object that the {occluder} conceal?",
    "Tell me what object sits behind the {occluder}.",
)


# bytes a sequence's span may hold per frame beyond the frame itself (tar headers, PAX
# records, padding) before the writer reads its frames one by one instead of the span at once
SPAN_SLACK_PER_FRAME = 8 << 10


# a frame number is ASCII digits, short enough for int() (which takes any Unicode digit and
# refuses more than 4,300 of them)
STEM_PATTERN = re.compile(r"^(?P<setting>[^-]+)-(?P<token>.+)-s(?P<frame>[0-9]{1,9})$")


def normalise_class(token: str) -> str:
    """Lenient class matching: case, separators and a trailing instance number do not count."""
    text = re.sub(r"[\s_\-]+", "", token.lower())
    return re.sub(r"\d+$", "", text)


def parse_stem(stem: str) -> tuple[str, str, int]:
    """(setting, class token, frame index) of `<setting>-<class>-s<frame>`; raise BadItem."""
    match = STEM_PATTERN.match(stem)
    if not match:
        raise BadItem(f"unparseable frame name: {stem!r} (expected <setting>-<class>-s<frame>)")
    return match["setting"], match["token"], int(match["frame"])


def occluder_of(setting: str, occluders: dict) -> str:
    """The occluder description of a setting such as `natural_bluebl_greenr`: exactly one of its
    `_`-separated tokens must be a key of the manifest's `occluders` map."""
    found = sorted({occluders[t] for t in setting.split("_") if t in occluders})
    if len(found) != 1:
        raise BadItem(f"unknown occluder: setting {setting!r} names "
                      f"{found or 'no'} occluder of the manifest's map")
    return found[0]


def frame_extension(name: str) -> str:
    ext = posixpath.splitext(name)[1].lower()
    return ".jpg" if ext == ".jpeg" else ext


def expected_path(frames: dict, index: int) -> str:
    """Where a missing frame would have been: a sibling's path with its frame number replaced."""
    sibling = frames[min(frames, key=int)][0]["path"]
    return re.sub(r"-s\d+(\.[^./]+)$", f"-s{index}\\1", sibling)


class ROD(Scenario):
    name = "rod"
    config_name = "Realistic-Occlusion-Dataset"
    environment = PLAY  # how it plays (play.py)

    # ---- listing --------------------------------------------------------------------------

    def archives(self) -> list[str]:
        pattern = self.params.get("archive_pattern", "rod_*.tar.gz")
        return [self.path(n) for n in fileio.list_names(self.root) if fnmatch.fnmatch(n, pattern)]

    def extracted_folder(self) -> str | None:
        folder = self.path(self.params.get("extracted_dir", "extracted"))
        mode = self.params.get("read_from", "auto")
        if mode == "archives":
            return None
        if fileio.is_dir(folder):
            return folder
        if mode == "folder":
            raise SourceError(f"rod: read_from is 'folder' but {folder} does not exist")
        return None

    def list_units(self) -> list[str]:
        """One unit per archive (`archive:<name>`: one pass through it, a sequence's photos
        found there make a fragment of it), or, from the extracted folder, one per lane of
        sequences (`folder:<lane>`: a sequence's files all lie in one lane), so both workers
        read ROD."""
        self.check_class_names()
        if self.extracted_folder():
            return [f"{FOLDER_UNIT}{lane}" for lane in range(FOLDER_LANES)]
        archives = self.archives()
        if not archives:
            raise SourceError(f"rod: no {self.params.get('archive_pattern')} archives and no "
                              f"extracted folder under {self.root}")
        return [ARCHIVE_UNIT + posixpath.basename(url) for url in archives]

    def check_class_names(self) -> None:
        """`dataset_info.json` (when present) must name the manifest's 16 classes in order."""
        url = self.path("dataset_info.json")
        if not fileio.exists(url):
            return
        self.require_inside_root(url, "the class table the whole scenario is checked against")
        try:
            info = json.loads(fileio.read_bytes(url, limit=self.max_source_file_bytes))
            names = info["features"]["label"]["names"]
            if not isinstance(names, list):
                raise TypeError(f"label names are a {type(names).__name__}, not a list")
        except (ValueError, KeyError, TypeError, RecursionError, OSError) as err:
            raise SourceError(f"rod: unreadable dataset_info.json: "
                              f"{type(err).__name__}: {str(err)[:200]}") from None
        if names != list(self.manifest["classes"]):
            raise SourceError(f"rod: dataset_info.json names classes {names}, the manifest "
                              f"{self.manifest['classes']}")

    # ---- reading ----------------------------------------------------------------------------

    def read_unit(self, unit: str):
        """The unit's members as raw items: a sequence as a fragment (from an archive, which
        may not hold all of its photos) or a candidate (a lane of the extracted folder, which
        holds all of them); a member that is no photo or whose name does not parse as a raw
        item of its own; a link or an archive cut short as a dead letter."""
        sequences: dict[str, dict] = {}
        if unit.startswith(FOLDER_UNIT):
            entries = self._folder_entries(self.extracted_folder(),
                                           int(unit[len(FOLDER_UNIT):]))
        else:
            name = unit[len(ARCHIVE_UNIT):]
            order = [posixpath.basename(url) for url in self.archives()]
            entries = self._archive_entries(self.path(name), order.index(name))
        for entry in entries:
            if isinstance(entry, DeadLetter):  # an archive cut short
                yield self.count("raw_items")
                yield entry
                continue
            yield from self._admit(entry, sequences)
        for key in sorted(sequences):
            if unit.startswith(FOLDER_UNIT):
                yield self.count("raw_items")
                yield self.candidate(key, sequences[key])
            else:
                yield self.fragment(key, sequences[key])

    @classmethod
    def merge_fragments(cls, items: list[dict]) -> dict:
        """A sequence from the parts its archives hold, in the archives' name order (the order
        one pass through all of them meets its photos): a photo stored in two archives is then
        a duplicate frame, as in one archive."""
        items = sorted(items, key=lambda item: item["archive_order"])
        merged = {k: v for k, v in items[0].items() if k not in ("frames", "archive_order")}
        merged["frames"] = {}
        for item in items:
            for index, copies in item["frames"].items():
                merged["frames"].setdefault(index, []).extend(copies)
        return merged

    def _admit(self, entry: dict, sequences: dict):
        """File one member under its sequence; non-frames and unparseable names are raw items
        of their own."""
        name = entry["name"]
        extra = {"archive_order": entry["archive_order"]} if "archive_order" in entry else {}
        if not self._is_frame_name(name):
            yield self.count("raw_items")
            yield self.count("excluded:not_a_frame")
            return
        stem = posixpath.splitext(posixpath.basename(name))[0]
        try:
            setting, token, index = parse_stem(stem)
        except BadItem as err:
            yield self.count("raw_items")
            yield self.dead_letter(entry["path"], err.reason)
            return
        sequence = f"{setting}-{token}"
        seq = sequences.setdefault(f"{DATASET_FOLDER}/{sequence}", {
            "sequence": sequence, "setting": setting, "token": token, "frames": {}, **extra})
        frame = {"path": self.relative(entry["path"]), "ext": frame_extension(name),
                 "ref": entry["ref"], "error": entry["error"]}
        seq["frames"].setdefault(str(index), []).append(frame)

    def _validate(self, data: bytes, name: str) -> str | None:
        try:
            check_image(data, posixpath.basename(name))
        except BadImage as err:
            return str(err)
        return None

    def _is_frame_name(self, name: str) -> bool:
        prefix = self.params.get("member_prefix", "")
        extensions = tuple(self.params.get("image_extensions", (".jpg", ".jpeg", ".png")))
        return name.startswith(prefix) and name.lower().endswith(extensions)

    def _too_large(self, size: int) -> str | None:
        limit = int(self.params.get("max_member_bytes", 1 << 26))
        if size > limit:
            return (f"oversized member: {size:,} bytes, over the manifest's max_member_bytes "
                    f"({limit:,}); not read")
        return None

    def _archive_entries(self, url: str, order: int):
        """Stream one archive once; yield one entry per member (each with the archive's place
        `order` among the archives, the order a sequence's fragments are merged in). A member
        is judged by its header (type, name, declared size) before any of its bytes are read,
        so memory is bounded by `max_member_bytes` whatever an archive holds: a link or special
        member is a counted dead letter, a member outside the layout is excluded unread, and an
        oversized frame is recorded as a bad frame without being read.

        A gzip archive is read through this process's access points of it
        (`archives.walked`), which the shard writer then seeks by. The photos are validated on
        a small thread pool while the archive is decompressed (`_InOrder`: entries still come
        out in member order), so a worker reading an archive uses more than one core."""
        archive = posixpath.basename(url)
        outside = self.outside_root(url)
        if outside is not None:
            yield self.dead_letter(url, f"link outside the sources root: {archive} -> "
                                        f"{outside}")
            return
        with _InOrder(self, ROD_VALIDATION_THREADS) as pending:
            try:
                fs, path = fileio.filesystem(url)
                version = archive_version(fs, path)
                with walked(url, version) as stream:
                    for tar, member in members_of(stream):
                        for entry in self._member_entry(tar, member, url, version, pending):
                            found = entry[0] if isinstance(entry, tuple) else entry
                            if isinstance(found, dict):  # (not a dead letter)
                                found["archive_order"] = order
                            yield from pending.add(entry)
            except ArchiveRefused as err:
                yield from pending.drain()
                yield self.dead_letter(url, f"refused archive: {archive}: {err}")
            except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as err:
                yield from pending.drain()
                yield self.dead_letter(url, f"unreadable archive: {archive} cut short "
                                            f"({type(err).__name__}: {err})")
            yield from pending.drain()

    def _member_entry(self, tar, member, url: str, version: str, pending: "_InOrder"):
        name, where = member.name, f"{url}:{member.name}"
        if member.isdir():
            return
        if member.issym() or member.islnk():
            yield self.dead_letter(where, f"link member: {name} -> {member.linkname} (links in "
                                          "an archive are not followed)")
            return
        if not member.isfile():
            yield self.dead_letter(where, f"not a regular file: {name} (tar type "
                                          f"{member.type!r})")
            return
        ref = {"kind": "tar_member", "url": url, "member": name, "version": version,
               "offset": member.offset_data, "size": member.size}
        entry = {"kind": "member", "name": name, "path": where, "error": None, "ref": ref}
        if self._is_frame_name(name):
            entry["error"] = self._too_large(member.size)
            if entry["error"] is None:  # at most max_member_bytes, as declared (tarfile stops)
                data = tar.extractfile(member).read()
                # validated, and its sha256 (what the writer must get) taken, on the pool
                yield entry, pending.check(data, name)
                return
        yield entry

    def _checked(self, data: bytes, name: str) -> tuple[str | None, str]:
        return self._validate(data, name), hashlib.sha256(data).hexdigest()

    def _folder_entries(self, folder: str, lane: int):
        """The extracted archives' files of one lane (`folder_lane`), judged as members are: a
        link that resolves outside the source root is a dead letter naming it, a file outside
        the layout is excluded unread, an oversized frame is a bad frame not read."""
        fs, base = fileio.filesystem(folder)
        for path in sorted(fs.find(base)):
            name = posixpath.relpath(path, base)
            if self.folder_lane(name) != lane:
                continue
            url = fileio.join(folder, name)
            outside = self.outside_root(url)
            if outside is not None:
                yield self.dead_letter(url, f"link outside the sources root: "
                                            f"{self.relative(url)} -> {outside}")
                continue
            error, ref = None, {"kind": "file", "url": url}
            if self._is_frame_name(name):
                try:
                    error = self._too_large(fs.size(path))
                    if error is None:  # and not more than that if it grew since
                        data = fileio.read_bytes(url, limit=int(self.params.get(
                            "max_member_bytes", 1 << 26)))
                        error = self._validate(data, name)
                        ref["sha256"] = hashlib.sha256(data).hexdigest()
                except OSError as err:
                    if fileio.is_store_client_error(err):  # the store failed, not this input
                        raise
                    error = f"unreadable file: {err}"
            yield {"kind": "member", "name": name, "path": url, "error": error, "ref": ref}

    def folder_lane(self, name: str) -> int:
        """The lane of the extracted folder a file is read in: its sequence's (all the photos of
        a sequence in one lane, so a lane's candidates are whole), lane 0 for a file that is no
        photo or whose name does not parse."""
        if not self._is_frame_name(name):
            return 0
        try:
            setting, token, _ = parse_stem(posixpath.splitext(posixpath.basename(name))[0])
        except BadItem:
            return 0
        return stable_hash(setting, token) % FOLDER_LANES

    # ---- building ---------------------------------------------------------------------------

    def canonical_class(self, token: str) -> str:
        by_normal = {normalise_class(c): c for c in self.manifest["classes"]}
        cls = by_normal.get(normalise_class(token))
        if cls is None:
            raise BadItem(f"unknown class: {token!r}")
        return cls

    def substitutions(self, sequence: str) -> dict[int, int]:
        return {int(s["frame"]): int(s["use"])
                for s in self.params.get("frame_substitutions") or []
                if s["sequence"] == sequence}

    def resolve_frames(self, item: dict) -> list[dict]:
        """The 14 frames in order, after the manifest's substitutions; raise BadItem (the whole
        sequence) on a missing, duplicated or corrupt frame that has no substitution."""
        n = int(self.params["frames_per_sequence"])
        frames, sequence = item["frames"], item["sequence"]
        extra = sorted(int(i) for i in frames if int(i) >= n)
        if extra:
            raise BadItem(f"unexpected frame: s{extra[0]} in a {n}-frame sequence",
                          frames[str(extra[0])][0]["path"])
        subs = self.substitutions(sequence)
        problems, chosen = {}, {}
        for i in range(n):
            copies = frames.get(str(i), [])
            if len(copies) > 1:
                raise BadItem(f"duplicate frame: s{i} stored {len(copies)} times",
                              copies[1]["path"])
            if not copies:
                problems[i] = (f"missing frame: s{i} absent", expected_path(frames, i))
            elif copies[0]["error"]:
                problems[i] = (f"corrupt frame: s{i} {copies[0]['error']}", copies[0]["path"])
            else:
                chosen[i] = copies[0]
        for i, (reason, path) in sorted(problems.items()):
            use = subs.get(i)
            if use is None or use not in chosen:
                raise BadItem(f"{reason} (the whole sequence is dropped)", path)
            chosen[i] = dict(chosen[use], substitutes=i)
        return [chosen[i] for i in range(n)]

    def build_sample(self, key: str, item: dict) -> dict:
        try:
            cls = self.canonical_class(item["token"])
            occluder = occluder_of(item["setting"], self.params["occluders"])
        except BadItem as err:  # a name problem: point at a member of the sequence
            first = item["frames"][min(item["frames"], key=int)][0]["path"]
            raise BadItem(err.reason, err.path or first) from None
        frames = self.resolve_frames(item)
        extensions = sorted({f["ext"] for f in frames})
        if len(extensions) != 1:
            raise BadItem(f"mixed frame formats: {extensions}", frames[0]["path"])
        n = len(frames)
        row = self.new_row(key)
        row.update(
            image_template=(template_literal(f"{DATASET_FOLDER}/{item['sequence']}-s")
                            + "{image}" + template_literal(extensions[0])),
            first_image=int(self.params["first_image"]), num_images=n,
            reference_image=int(self.params["reference_image"]),
            prompt=self.pick_prompt(key, QUESTIONS).format(occluder=occluder),
            options=self.build_options(key, [MOVE_LEFT.format(occluder=occluder),
                                             MOVE_RIGHT.format(occluder=occluder)]),
            categories=self.pick_categories(key, cls, self.manifest["classes"]),
            answer=format_category(cls),
            frame_ids=list(range(n)),
        )
        row["source"]["files"] = [f["path"] for f in frames]
        row["frame_refs"] = self._frame_refs(frames)
        return row

    @staticmethod
    def _frame_refs(frames: list[dict]) -> list[dict]:
        """Tar references carry the span of their whole sequence inside their archive, so the
        writer decompresses a sequence once."""
        spans: dict[str, list[int]] = {}
        held: dict[str, int] = {}
        for f in frames:
            ref = f["ref"]
            if ref["kind"] == "tar_member":
                lo, hi = spans.get(ref["url"], [ref["offset"], ref["offset"] + ref["size"]])
                spans[ref["url"]] = [min(lo, ref["offset"]), max(hi, ref["offset"] + ref["size"])]
                held[ref["url"]] = held.get(ref["url"], 0) + ref["size"] + SPAN_SLACK_PER_FRAME
        refs = []
        for f in frames:
            ref = dict(f["ref"])
            lo_hi = spans.get(ref["url"])
            # a span holding much more than its frames (other members between them, e.g. a
            # huge one) is not read at once: memory stays bounded by the frames themselves
            if ref["kind"] == "tar_member" and lo_hi[1] - lo_hi[0] <= held[ref["url"]]:
                ref["span"] = lo_hi
            if "substitutes" in f:  # said in the build report (frames_not_shown)
                ref["substitutes"] = f["substitutes"]
            refs.append(ref)
        return refs

    def load_frame(self, ref: dict) -> bytes:
        if ref["kind"] != "tar_member":
            return super().load_frame(ref)
        span = ref.get("span")
        if span and span[1] - span[0] > int(self.params.get("max_span_bytes", 1 << 28)):
            ref = dict(ref, span=None)
        return read_member(ref)

    def read_order(self, ref: dict) -> tuple:
        """Archive members are read in archive order (a .tar.gz only reads forward cheaply)."""
        if ref["kind"] != "tar_member":
            return ()
        return (ref["url"], (ref.get("span") or [ref["offset"]])[0], ref["offset"])

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        miniature.write_miniature(root, cls.read_manifest(), seed)
