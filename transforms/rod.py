"""ROD (`Realistic-Occlusion-Dataset`): an object behind an occluder; the model should ask for
the occluder to be moved.

Raw source: the Hugging Face repo `arielnlee/Realistic-Occlusion-Dataset` as downloaded
(`rod_0.tar.gz`, `rod_1.tar.gz`, `classes_rod.py`, `dataset_info.json`). Each photo is a tar
member whose file stem is `<setting>-<class>-s<frame>` (e.g. `natural_bluebl_greenr-banana-s6`).
One *sequence* (setting + class token) is one raw item and one sample: 14 photos of an occluder
swept from the left to the right of the object.

Record semantics (as upstream's environment reads them; docs/records.md):
- frames are the 14 photos `s0`..`s13`, `frame_ids` 0..13; `first_image` = 7 (the central, most
  occluded photo), `reference_image` = 0, reached by 7 moves either way because upstream wraps
  LEFT/RIGHT modulo `num_images` (= 14); both are manifest parameters.
- options: "Move the <occluder> to the left." / "... to the right." plus one abstain option; the
  occluder description comes from the setting token through the manifest's `occluders` map
  (e.g. `bluebl` -> "blue blocks"); a setting with no known occluder token is a dead letter.
- `image_template` is `Realistic-Occlusion-Dataset/<setting>-<class token>-s{image}.<ext>`, with
  `{image}` the plain (unpadded) integer: the original stem is kept, so upstream's own path patch
  (`natural_bluebl_greenr-banana-s6` -> s5/s7) still finds its files in our upstream export.
- JPEG bytes pass through unchanged.

Choices for the reference's [I]/[?] points:
- Member paths [?]: only the base name is parsed, so flat, `<class>/` or `<sequence>/` nesting all
  work; `member_prefix` restricts reading to one folder inside the archives. The class token is
  matched leniently (case, `_`/`-`/space and a trailing instance number are ignored, so
  `cowboy hat`, `cowboy_hat`, `cowboyhat` and `banana2` all resolve); the token as spelled in the
  file name is kept in the key and the template.
- Frames per sequence (14), first (7) and reference (0) [I]: manifest parameters.
- A missing, undecodable or duplicated frame inside a sequence makes the WHOLE sequence a dead
  letter (a partial sweep would break the 7-moves-either-way geometry) -- unless the manifest's
  `frame_substitutions` lists that frame. The one listed is upstream's own patch: banana /
  `natural_bluebl_greenr` frame 6 is shown as frame 5. Upstream shows s5 when frame 6 is entered
  by LEFT and s7 otherwise; a frame id maps to one image here, and from the start frame 7 the
  only way into 6 within the step cap before passing the reference is LEFT, so s5 reproduces
  upstream on every path that matters. A substitution applies only when the listed frame is
  actually missing or corrupt (a good copy of the real frame is used as is).
- Reading: the raw archives are `.tar.gz`, which cannot seek. `read_unit` streams every archive
  once, decodes each photo cheaply (validation happens there, with the bytes in hand) and records
  each member's offset in the *uncompressed* tar stream; a frame reference names archive, member,
  offset, size and the byte span of its whole sequence. `load_frame` keeps one gzip reader per
  archive per process and reads the whole sequence span at once (the writer asks for a row's 14
  frames in a row), so a shard costs at most one forward decompression pass per sequence, but a
  reader going backwards in an archive restarts it. For repeated full-size builds extract the
  archives once into `<root>/extracted/` (`tar -xzf rod_0.tar.gz -C extracted`, same for rod_1):
  when that folder exists it is used instead (plain file references, no decompression), with the
  same parsing and the same output bytes. All archives are read in ONE unit, so a sequence whose
  photos are split across the two archives is still assembled correctly (the price: the read
  stage of ROD is not parallel; it is 3.3 GB of gzip, well under a minute or two).
- Raw items: one per sequence, plus one per member whose name does not parse (dead letter) and
  one per member that is not a photo (excluded:not_a_frame), plus one per archive that cannot be
  read to its end (dead letter; the sequences it cut short become dead letters too).
- Class vocabulary: the manifest's `classes` (the 16 names of `classes_rod.py`, which is never
  executed); when `dataset_info.json` is present its label names must agree, else SourceError.
"""
from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import posixpath
import random
import re
import tarfile
import threading

from PIL import Image, ImageDraw

from proactivebench_builder.core import fileio
from proactivebench_builder.core.images import BadImage, check_image
from proactivebench_builder.transforms.base import BadItem, Scenario, SourceError
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.vocabulary import format_category

DATASET_FOLDER = "Realistic-Occlusion-Dataset"

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

MOVE_LEFT = "Move the {occluder} to the left."
MOVE_RIGHT = "Move the {occluder} to the right."

# bytes a sequence's span may hold per frame beyond the frame itself (tar headers, PAX
# records, padding) before the writer reads its frames one by one instead of the span at once
SPAN_SLACK_PER_FRAME = 8 << 10

STEM_PATTERN = re.compile(r"^(?P<setting>[^-]+)-(?P<token>.+)-s(?P<frame>\d+)$")


# ---- names ------------------------------------------------------------------------------------

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


# ---- reading archive members and extracted files ---------------------------------------------

_READERS: dict[tuple[str, str], object] = {}
_SPANS: dict[tuple[str, str], tuple[int, bytes]] = {}
_LOCK = threading.Lock()


def archive_version(fs, path: str) -> str:
    """What identifies one version of an archive (size plus mtime / generation / etag), so the
    per-process caches below never serve bytes of an archive replaced under the same name."""
    info = fs.info(path)
    stamp = next((info[k] for k in ("mtime", "generation", "etag", "ETag", "LastModified")
                  if info.get(k) is not None), "")
    return f"{info.get('size')}:{stamp}"


def read_tar_span(url: str, start: int, length: int, version: str = "") -> bytes:
    """`length` bytes at `start` in the uncompressed stream of a (gzipped) tar. One reader per
    archive is kept per process, so consecutive reads move forward without re-decompressing."""
    # one reader per archive and thread: two shard writers never drag each other backwards
    slot = (url, version, threading.get_ident())
    with _LOCK:
        reader = _READERS.get(slot)
        if reader is None:
            fs, path = fileio.filesystem(url)
            compression = "gzip" if url.endswith((".gz", ".tgz")) else None
            reader = fs.open(path, "rb", compression=compression)
            _READERS[slot] = reader
    reader.seek(start)
    data = reader.read(length)
    if len(data) != length:
        raise OSError(f"{url}: archive ended at {start + len(data)}, expected {start + length}")
    return data


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
    return cached[1][offset - start: offset - start + size]


class ROD(Scenario):
    name = "rod"
    config_name = "Realistic-Occlusion-Dataset"
    # How upstream's environment plays ROD (runtime.behaviours; texts verbatim from upstream).
    environment = Play(
        actions={"LEFT": ("to the left",), "RIGHT": ("to the right",)},
        behaviour="steps", moves={"LEFT": -1, "RIGHT": 1}, wrap=True,
        first_turn="requests", last_turn="any",   # a category on the first frame is wrong
        hint="Hint: moving the occluding object might reveal what is behind it.",
        reference_prompt="What type of object is in the image?",
        short_name="ROD", open_ended_suggestions=("Move the blocks", "Move the camera"),
        open_ended_category=False, prediction_threshold=2, keyword_matching="substring",
        suggestions=("Move the occluding object to the left.",
                     "Move the occluding object to the right."))

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
        self.check_class_names()
        if self.extracted_folder():
            return ["folder"]
        if not self.archives():
            raise SourceError(f"rod: no {self.params.get('archive_pattern')} archives and no "
                              f"extracted folder under {self.root}")
        return ["archives"]

    def check_class_names(self) -> None:
        """`dataset_info.json` (when present) must name the manifest's 16 classes in order."""
        url = self.path("dataset_info.json")
        if not fileio.exists(url):
            return
        self.require_inside_root(url, "the class table the whole scenario is checked against")
        try:
            info = json.loads(fileio.read_bytes(url))
            names = info["features"]["label"]["names"]
        except (ValueError, KeyError, TypeError) as err:
            raise SourceError(f"rod: unreadable dataset_info.json: {err}") from None
        if list(names) != list(self.manifest["classes"]):
            raise SourceError(f"rod: dataset_info.json names classes {names}, the manifest "
                              f"{self.manifest['classes']}")

    # ---- reading ----------------------------------------------------------------------------

    def read_unit(self, unit: str):
        sequences: dict[str, dict] = {}
        if unit == "folder":
            entries = self._folder_entries(self.extracted_folder())
        else:
            entries = self._archive_entries()
        for entry in entries:
            if entry["kind"] == "dead_letter":  # an archive cut short
                yield self.count("raw_items")
                yield entry
                continue
            yield from self._admit(entry, sequences)
        for key in sorted(sequences):
            yield self.count("raw_items")
            yield self.candidate(key, sequences[key])

    def _admit(self, entry: dict, sequences: dict):
        """File one member under its sequence; non-frames and unparseable names are raw items
        of their own."""
        name = entry["name"]
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
            "sequence": sequence, "setting": setting, "token": token, "frames": {}})
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

    def _archive_entries(self):
        """Stream each archive once, in name order; yield one entry per member. A member is
        judged by its header (type, name, declared size) before any of its bytes are read, so
        memory is bounded by `max_member_bytes` whatever an archive holds: a link or special
        member is a counted dead letter, a member outside the layout is excluded unread, and an
        oversized frame is recorded as a bad frame without being read."""
        for url in self.archives():
            archive = posixpath.basename(url)
            fs, path = fileio.filesystem(url)
            outside = self.outside_root(url)
            if outside is not None:
                yield self.dead_letter(url, f"link outside the sources root: {archive} -> "
                                            f"{outside}")
                continue
            try:
                version = archive_version(fs, path)
                with fs.open(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
                    for member in tar:
                        yield from self._member_entry(tar, member, url, version)
            except (tarfile.TarError, EOFError, OSError, ValueError) as err:
                yield self.dead_letter(url, f"unreadable archive: {archive} cut short "
                                            f"({type(err).__name__}: {err})")

    def _member_entry(self, tar, member, url: str, version: str):
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
        error = None
        if self._is_frame_name(name):
            error = self._too_large(member.size)
            if error is None:  # at most max_member_bytes, as declared (tarfile stops there)
                data = tar.extractfile(member).read()
                error = self._validate(data, name)
                ref["sha256"] = hashlib.sha256(data).hexdigest()  # what the writer must get
        yield {"kind": "member", "name": name, "path": where, "error": error, "ref": ref}

    def _folder_entries(self, folder: str):
        """The extracted archives' files, judged as members are: a link that resolves outside
        the source root is a dead letter naming it, a file outside the layout is excluded
        unread, an oversized frame is a bad frame not read."""
        fs, base = fileio.filesystem(folder)
        for path in sorted(fs.find(base)):
            name = posixpath.relpath(path, base)
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
                    if error is None:
                        data = fileio.read_bytes(url)
                        error = self._validate(data, name)
                        ref["sha256"] = hashlib.sha256(data).hexdigest()
                except OSError as err:
                    error = f"unreadable file: {err}"
            yield {"kind": "member", "name": name, "path": url, "error": error, "ref": ref}

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
            image_template=f"{DATASET_FOLDER}/{item['sequence']}-s{{image}}{extensions[0]}",
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

    def frame_path(self, row: dict, frame_id: int) -> str:
        """ROD fills `{image}` with the plain integer (no zero padding)."""
        return row["image_template"].format(image=str(frame_id))

    # ---- miniature ----------------------------------------------------------------------------

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        """The HF repo layout: two tar.gz archives of JPEG sweeps (mixed sizes, flat and nested
        member paths, a class with a space), `classes_rod.py`, `dataset_info.json`, README.md.
        As in the real download, frame s6 of banana / natural_bluebl_greenr is absent."""
        manifest = cls.read_manifest()
        params = manifest["parameters"]
        n = int(params["frames_per_sequence"])
        archives: dict[str, list[tuple[str, bytes]]] = {}
        total = 0
        for spec in params["miniature_sequences"]:
            rng = random.Random(f"{seed}/rod/{spec['sequence']}")
            members = archives.setdefault(spec["archive"], [])
            for i in range(n):
                if i in spec.get("drop", []):
                    continue
                data = sweep_frame(i, n, spec["size"], spec["occluder_rgb"], rng)
                members.append((f"{spec.get('folder', '')}{spec['sequence']}-s{i}.jpg", data))
                total += 1
        for archive, members in sorted(archives.items()):
            fileio.write_bytes_atomic(fileio.join(root, archive), tar_gz(members))
        fileio.write_bytes_atomic(fileio.join(root, "classes_rod.py"),
                                  classes_file(manifest["classes"]).encode("utf-8"))
        fileio.write_bytes_atomic(fileio.join(root, "dataset_info.json"),
                                  dataset_info(manifest["classes"], total).encode("utf-8"))
        fileio.write_bytes_atomic(fileio.join(root, "README.md"), (
            "# Realistic Occlusion Dataset (miniature)\n\nA synthetic miniature in the layout "
            "of arielnlee/Realistic-Occlusion-Dataset, written by proactivebench_builder.\n"
        ).encode("utf-8"))


# ---- miniature helpers (also used by the tests) ---------------------------------------------

def sweep_frame(index: int, n: int, size, occluder_rgb, rng: random.Random) -> bytes:
    """A JPEG of an object on a table before a wall, with an occluder whose x position moves
    left to right over the sweep; it covers the object most at frame n // 2."""
    width, height = int(size[0]), int(size[1])
    image = Image.new("RGB", (width, height), (200 + rng.randint(0, 20), 200, 190))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, int(height * 0.7), width, height), fill=(120, 80, 40))
    cx = width * (n // 2 + 0.5) / n
    r = max(3, min(width, height) // 6)
    draw.ellipse((cx - r, height * 0.5 - r, cx + r, height * 0.5 + r), fill=(230, 200, 30))
    ox = width * (index + 0.5) / n
    half = max(3, width // 7)
    draw.rectangle((ox - half, height * 0.15, ox + half, height * 0.85), fill=tuple(occluder_rgb))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return out.getvalue()


def tar_gz(members: list[tuple[str, bytes]]) -> bytes:
    """A deterministic .tar.gz (fixed mtimes and owners) of (member name, bytes) pairs."""
    import gzip

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_690_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def classes_file(classes: list[str]) -> str:
    """`classes_rod.py` as the HF repo ships it: an OrderedDict with 1-based keys (text only;
    the pipeline never executes repository code)."""
    body = "".join(f"    {i}: {name!r},\n" for i, name in enumerate(classes, start=1))
    return f"from collections import OrderedDict\n\nROD_CLASSES = OrderedDict({{\n{body}}})\n"


def dataset_info(classes: list[str], examples: int) -> str:
    """`dataset_info.json` with the real key structure, its numbers describing the miniature."""
    info = {
        "description": "ROD miniature", "citation": "", "homepage": "", "license": "",
        "features": {"image": {"_type": "Image"},
                     "label": {"names": list(classes), "_type": "ClassLabel"}},
        "task_templates": [{"task": "image-classification", "image_column": "image",
                            "label_column": "label"}],
        "builder_name": "realistic-occlusion-dataset", "config_name": "default",
        "version": {"version_str": "1.0.0", "major": 1, "minor": 0, "patch": 0},
        "splits": {"ROD": {"name": "ROD", "num_bytes": 0, "num_examples": examples,
                           "shard_lengths": [examples],
                           "dataset_name": "realistic-occlusion-dataset"}},
        "download_checksums": {}, "download_size": 0, "dataset_size": 0,
    }
    return json.dumps(info, separators=(", ", ": "))
