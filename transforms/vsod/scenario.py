"""The VSOD scenario: per labelled segment, one clip whose frames run from its most occluded frame
toward a clear one (the folder's docstring)."""
from __future__ import annotations

import csv
import functools
import io
import math
import re
import xml.etree.ElementTree as ET

from proactivebench_builder.transforms.api import (BadItem, ReleaseLabels, Scenario, SourceError,
                                                   fileio, format_category, template_literal)
from proactivebench_builder.transforms.vsod import miniature, release
from proactivebench_builder.transforms.vsod.layout import DATASET_FOLDER
from proactivebench_builder.transforms.vsod.play import PLAY, REWIND, WAIT

LABELS_UNIT = "labels"


SEGMENT_UNIT = "segment:"


QUESTIONS = {
    "speaker": (
        "Could you tell me who is talking?",
        "Can you say who is speaking?",
        "Who is the person speaking in this video?",
        "Who is giving the speech here?",
        "Can you identify the speaker?",
        "Who is addressing the audience?",
        "Do you know who is talking in this clip?",
        "Who is the speaker in this scene?",
        "Tell me the name of the person who is speaking.",
        "Which person is delivering this talk?",
        "Who is the one talking right now?",
        "Can you recognise who is speaking?",
        "Whose voice is this, who is the speaker?",
        "Name the person who is speaking in the video.",
        "Who is presenting in this video?",
    ),
    "number_of_people": (
        "How many people are in the scene?",
        "Can you count the people in this video?",
        "How many persons can be seen here?",
        "What is the number of people in this scene?",
        "How many people appear in the clip?",
        "Could you tell me how many people there are?",
        "How many individuals are present?",
        "Count the people shown in this scene.",
        "How many people are visible in this video?",
        "What is the total number of persons in the scene?",
        "How many people are on screen?",
        "Can you say how many people are present here?",
        "How many human figures are in this clip?",
        "Tell me how many people this scene shows.",
        "How many participants can you see?",
    ),
    "event": (
        "What kind of event is this?",
        "Can you tell me what event is taking place?",
        "What type of event is shown in this video?",
        "What is happening in this scene?",
        "Which kind of occasion is this?",
        "What event is being recorded here?",
        "Could you identify the type of event?",
        "What sort of gathering is this?",
        "Describe the event in terms of its type.",
        "What is the occasion in this video?",
        "What kind of meeting is taking place?",
        "Tell me which type of event this clip shows.",
        "What is this event?",
        "Which event category does this scene belong to?",
        "What kind of situation is captured in this clip?",
    ),
}


QUESTION_TYPES = tuple(QUESTIONS)


LABEL_COLUMNS = ("segment", "question_type", "answer")


PIN_COLUMNS = ("first_image", "reference_image")


# A labels file lists three answers per segment: a few hundred lines, some kB. Memory must not
# depend on what a file holds, so one over this is refused unread.
MAX_LABELS_BYTES = 16 << 20

# a frame index: ASCII digits (str.isdigit() is true of '²', which int() refuses, and int()
# takes any Unicode digit), short enough for int()
FRAME_INDEX = re.compile(r"[0-9]{1,9}")


def parse_labels(text: str, vocabulary: dict) -> tuple[list[dict], list[tuple[int, str]]]:
    """(good rows, [(line, reason)] of bad rows) of a labels CSV. Raise SourceError when the
    header lacks the required columns (the file as a whole is unusable). Lines end as CSV says
    (CR, LF or CRLF); a line the csv module refuses (e.g. a cell over its field limit) is a
    bad row."""
    # newline="": the csv module sees line endings as they are (else a lone CR is an error)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        fieldnames = reader.fieldnames
    except csv.Error as err:
        raise SourceError(f"vsod: the labels file's header is not CSV: {err}") from None
    missing = [c for c in LABEL_COLUMNS if c not in (fieldnames or [])]
    if missing:
        raise SourceError(f"vsod: the labels file lacks columns {missing} "
                          f"(header: {fieldnames})")
    good, bad, seen = [], [], set()
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as err:  # the reader goes on at the next line
            bad.append((reader.reader.line_num, f"malformed labels line: {err}"))
            continue
        line = reader.line_num
        try:
            label = _parse_label_row(row, vocabulary)
        except BadItem as err:
            bad.append((line, err.reason))
            continue
        pair = (label["segment"], label["question_type"])
        if pair in seen:
            bad.append((line, f"duplicate label: {pair[1]} of {pair[0]} given twice"))
            continue
        seen.add(pair)
        good.append(dict(label, line=line))
    return good, bad


def _parse_label_row(row: dict, vocabulary: dict) -> dict:
    if None in row or any(row.get(c) is None for c in LABEL_COLUMNS):
        raise BadItem("malformed labels line: wrong number of fields")
    segment, qtype, answer = (row[c].strip() for c in LABEL_COLUMNS)
    if not segment or not answer:
        raise BadItem("malformed labels line: empty segment or answer")
    if qtype not in QUESTION_TYPES:
        raise BadItem(f"unknown question type: {qtype!r} (expected one of {QUESTION_TYPES})")
    known = {format_category(a): a for a in vocabulary.get(qtype, [])}
    if format_category(answer) not in known:
        raise BadItem(f"unknown label: {answer!r} is not in the {qtype} vocabulary")
    label = {"segment": segment, "question_type": qtype, "answer": known[format_category(answer)]}
    for column in PIN_COLUMNS:
        value = (row.get(column) or "").strip()
        if value and not FRAME_INDEX.fullmatch(value):
            raise BadItem(f"malformed labels line: {column} {value[:40]!r} is not a frame "
                          "index")
        label[column] = int(value) if value else None
    return label


def parse_annotation(data: bytes) -> tuple[tuple[int, int] | None, list[tuple[float, ...]]]:
    """((width, height) from `<size>` or None, occluder boxes) of one VOC-style XML file."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise BadItem(f"bad XML: {err}") from None
    size = None
    node = root.find("size")
    if node is not None and node.findtext("width") and node.findtext("height"):
        try:
            size = (int(_finite(node.findtext("width"))), int(_finite(node.findtext("height"))))
        except ValueError:
            raise BadItem("bad XML: a <size> that is not finite numbers") from None
    boxes = []
    for obj in root.findall("object"):
        box = obj.find("bndbox")
        if box is None:
            raise BadItem("bad XML: an <object> without a <bndbox>")
        try:
            boxes.append(tuple(_finite(box.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax")))
        except (TypeError, ValueError):
            raise BadItem("bad XML: a <bndbox> without finite numeric xmin/ymin/xmax/ymax") \
                from None
    return size, boxes


def _finite(text) -> float:
    """A finite float: inf would overflow int(), and NaN passes every comparison of
    check_boxes (raise ValueError, or TypeError for a missing element)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def check_boxes(boxes, width: int, height: int) -> None:
    for xmin, ymin, xmax, ymax in boxes:
        if xmin < 0 or ymin < 0 or xmax > width or ymax > height:
            raise BadItem(f"box outside the image: ({xmin:g}, {ymin:g}, {xmax:g}, {ymax:g}) "
                          f"in a {width}x{height} frame")
        if xmax <= xmin or ymax <= ymin:
            raise BadItem(f"empty box: ({xmin:g}, {ymin:g}, {xmax:g}, {ymax:g})")


def union_area(boxes) -> float:
    """Exact area of a union of axis-aligned boxes (x slabs, merged y intervals per slab)."""
    xs = sorted({b[0] for b in boxes} | {b[2] for b in boxes})
    area = 0.0
    for left, right in zip(xs, xs[1:]):
        spans = sorted((b[1], b[3]) for b in boxes if b[0] <= left and b[2] >= right)
        covered, end = 0.0, None
        for low, high in spans:
            if end is None or low > end:
                covered += high - low
                end = high
            elif high > end:
                covered += high - end
                end = high
        area += covered * (right - left)
    return area


def natural_key(name: str):
    """Runs of ASCII digits compared as numbers (the odd items of the split), the text between
    them as text. A run is compared by its length without leading zeros, then its digits: the
    order int() gives, without int()'s limit of 4,300 digits or its taking of any Unicode digit
    (str.isdigit() is true of '²', which int() refuses)."""
    parts = re.split(r"([0-9]+)", name)
    return [(len(p.lstrip("0")), p.lstrip("0")) if i % 2 else p for i, p in enumerate(parts)]


def most_occluded(fractions: list[float]) -> int:
    return max(range(len(fractions)), key=lambda i: (fractions[i], -i))


def nearest_clear(fractions: list[float], boxed: list[bool], start: int) -> int:
    """The unoccluded frame nearest to `start` going either way round the circular video (ties:
    forward, i.e. waiting); the least occluded frame when every frame has an occluder."""
    n = len(fractions)
    clear = [i for i in range(n) if not boxed[i]]
    if not clear:
        return min(range(n), key=lambda i: (fractions[i], i))

    def distance(i):
        forward, backward = (i - start) % n, (start - i) % n
        return (min(forward, backward), 0 if forward <= backward else 1)

    return min(clear, key=distance)


def is_strong(fractions: list[float], rule: dict) -> bool:
    threshold = float(rule.get("min_union_fraction", 0.5))
    return sum(f >= threshold for f in fractions) >= int(rule.get("min_frames", 1))


class VSOD(Scenario):
    name = "vsod"
    config_name = "OcclusionDataSet-MM20"
    environment = PLAY  # how it plays (play.py)

    # ---- layout -------------------------------------------------------------------------------

    def tree(self, kind: str, segment: str = "") -> str:
        parts = [self.params.get("dataset_dir", DATASET_FOLDER), kind,
                 self.params.get("split", "test")]
        return self.path(*parts, segment) if segment else self.path(*parts)

    def labels_url(self) -> str:
        name = self.params["labels_file"]
        return self.path(name) if self.labels_in_root() else name

    def labels_in_root(self) -> bool:
        """Whether the labels file is named relative to the source root (a source file, checked
        like the frames) rather than outright (an absolute path or a URL: the user's own)."""
        name = self.params["labels_file"]
        return not ("://" in name or name.startswith("/"))

    def labels(self) -> tuple[list[dict], list[tuple[int, str]]]:
        url = self.labels_url()
        try:
            # under the root it is a source file (untrusted, checked like the frames); a path
            # or URL the manifest names outright is the user's own configuration
            data = (self.read_source(url, limit=MAX_LABELS_BYTES) if self.labels_in_root()
                    else fileio.read_bytes(url, limit=MAX_LABELS_BYTES))
            text = data.decode("utf-8-sig")
        except FileNotFoundError:
            raise SourceError(f"vsod: no labels file at {url} (parameters.labels_file; the "
                              "labels exist only in the ProactiveBench release: derive them with "
                              "run_pipeline.py release_labels)") from None
        except OSError as err:  # a folder, a FIFO, over MAX_LABELS_BYTES, unreadable
            if fileio.is_store_client_error(err):  # the store failed, not this input
                raise
            raise SourceError(f"vsod: unusable labels file {url}: "
                              f"{err.strerror or err}") from None
        except UnicodeDecodeError as err:
            raise SourceError(f"vsod: the labels file {url} is not UTF-8 text ({err})") from None
        return parse_labels(text, self.vocabulary)

    # ---- the answer vocabulary ----------------------------------------------------------------

    def vocabulary_url(self) -> str:
        return self.path(self.params["categories_file"])

    @functools.cached_property
    def vocabulary(self) -> dict[str, list[str]]:
        """question type -> its answers (also the distractor pool): the release's
        (`categories_file` in the source folder, written by `run_pipeline.py release_labels`)
        when present, else the manifest's stand-in `categories`."""
        url = self.vocabulary_url()
        if not fileio.exists(url):
            return self.manifest["categories"]
        table = self.read_source_yaml(url, "the answer vocabulary of every label")
        if not isinstance(table, dict) or not all(
                k in QUESTION_TYPES and isinstance(v, list) and all(isinstance(a, str) for a in v)
                for k, v in table.items()):
            raise SourceError(f"vsod: {self.relative(url)} must map question types {QUESTION_TYPES} to lists "
                              "of answers (derive it with run_pipeline.py release_labels)")
        return table

    def placeholders(self) -> list[str]:
        if fileio.exists(self.vocabulary_url()):
            return []
        return ["the answer vocabulary (the pool of wrong answers) is the manifest's stand-in "
                "list, not the release's 94 categories, and the labels are not known to be the "
                "release's: derive both with run_pipeline.py release_labels (they are only in "
                "the release's OcclusionDataSet-MM20_preprocessed.jsonl)"]

    @classmethod
    def labels_from_release(cls, records, source=""):
        params = cls.read_manifest()["parameters"]
        rows, vocabulary, problems = release.labels_from_records(records)
        files = {params["labels_file"]: release.labels_file(rows),
                 params["categories_file"]: release.vocabulary_file(vocabulary, source)}
        sizes = ", ".join(f"{len(v)} {k}" for k, v in vocabulary.items())
        summary = [f"{len(rows)} labels of {len({r['segment'] for r in rows})} segments from "
                   f"{len(records)} records",
                   f"answer vocabulary: {sizes or 'empty'}"]
        return ReleaseLabels(files, len(rows), summary, problems)

    def segments(self) -> list[str]:
        names = set(self.list_source(self.tree("Data"))) | set(
            self.list_source(self.tree("Annotations")))
        return sorted(names)

    def list_units(self) -> list[str]:
        if not fileio.is_dir(self.tree("Data")):
            raise SourceError(f"vsod: no frames folder {self.tree('Data')}")
        if self.labels_in_root():
            self.require_inside_root(self.labels_url(), "the labels of every segment")
        for kind in ("Data", "Annotations"):
            self.require_inside_root(self.tree(kind), f"the {kind} folder of every segment")
        self.labels()  # a missing or headerless labels file is a configuration error
        return [LABELS_UNIT] + [SEGMENT_UNIT + s for s in self.segments()]

    # ---- reading ------------------------------------------------------------------------------

    def read_unit(self, unit: str):
        if unit == LABELS_UNIT:
            yield from self._read_labels()
        else:
            yield from self._read_segment(unit[len(SEGMENT_UNIT):])

    def _read_labels(self):
        """Label rows that cannot join a segment: malformed, unknown, duplicate or dangling."""
        good, bad = self.labels()
        where = self.labels_url()
        segments = set(self.segments())
        for line, reason in bad:
            yield self.count("raw_items")
            yield self.dead_letter(f"{where}:{line}", reason)
        for label in good:
            if label["segment"] not in segments:
                yield self.count("raw_items")
                yield self.dead_letter(f"{where}:{label['line']}",
                                       f"unknown segment: {label['segment']!r} has no folder "
                                       f"under Data/ or Annotations/")

    def _read_segment(self, segment: str):
        good, _ = self.labels()
        rows = [label for label in good if label["segment"] == segment]
        if not rows:
            yield self.count("raw_items")
            yield self.count("excluded:no_labels")
            return
        try:
            analysis = self.analyse_segment(segment)
        except BadItem as err:
            for _ in rows:
                yield self.count("raw_items")
                yield self.dead_letter(err.path or self.tree("Data", segment), err.reason)
            return
        for label in rows:
            yield self.count("raw_items")
            if not any(analysis["boxed"]):
                yield self.count("excluded:no_occlusion")
                continue
            key = f"{DATASET_FOLDER}/{segment}/{label['question_type']}"
            yield self.candidate(key, dict(analysis, label=label))

    def _files(self, folder: str, extensions: tuple[str, ...]) -> list[str]:
        names = [n for n in self.list_source(folder)
                 if n.lower().endswith(extensions) and not n.startswith(".")]
        if self.params.get("frame_order", "name") == "natural":
            names.sort(key=natural_key)
        return names

    def analyse_segment(self, segment: str) -> dict:
        """Validate a segment's frames and XML files; per frame, the union-box fraction."""
        data_dir, ann_dir = self.tree("Data", segment), self.tree("Annotations", segment)
        for folder, what in ((data_dir, "frames"), (ann_dir, "annotations")):
            if not fileio.is_dir(folder):
                raise BadItem(f"missing {what} folder: {self.relative(folder)}", folder)
        extensions = tuple(self.params.get("image_extensions", (".jpg", ".jpeg", ".png")))
        frames, xmls = self._files(data_dir, extensions), self._files(ann_dir, (".xml",))
        if not frames:
            raise BadItem("empty segment: no frame files", data_dir)
        if len(frames) != len(xmls):
            raise BadItem(f"frame/annotation count mismatch: {len(frames)} frames, "
                          f"{len(xmls)} XML files", data_dir)
        fractions, boxed, formats = [], [], set()
        for frame, xml in zip(frames, xmls):
            fmt, width, height = self.validate_file_frame(fileio.join(data_dir, frame))
            formats.add(fmt)
            xml_url = fileio.join(ann_dir, xml)
            try:
                size, boxes = parse_annotation(self.read_source(xml_url))
                if size is not None and size != (width, height):
                    raise BadItem(f"inconsistent size: XML says {size[0]}x{size[1]}, frame "
                                  f"{frame} is {width}x{height}")
                check_boxes(boxes, width, height)
            except BadItem as err:
                raise BadItem(err.reason, xml_url) from None
            except OSError as err:
                if fileio.is_store_client_error(err):  # the store failed, not this input
                    raise
                raise BadItem(f"unreadable annotation: {err}", xml_url) from None
            fractions.append(round(union_area(boxes) / (width * height), 6) if boxes else 0.0)
            boxed.append(bool(boxes))
        if len(formats) != 1:
            raise BadItem(f"mixed frame formats: {sorted(formats)}", data_dir)
        ext = ".jpg" if formats == {"JPEG"} else "." + formats.pop().lower()
        # the digests of the bytes validated here travel with the item into the frame
        # references, so the shard writer checks the bytes it writes by their sha256 instead of
        # decoding every frame again (a digest recorded here never reached BuildSample's
        # seal_frame_refs, which runs in another process)
        digests = self._validated_digests()
        sha256 = [digests.pop(fileio.join(data_dir, frame), None) for frame in frames]
        return {"segment": segment, "frames": frames, "ext": ext, "fractions": fractions,
                "boxed": boxed, "folder": self.relative(data_dir), "sha256": sha256}

    # ---- building -----------------------------------------------------------------------------

    def build_sample(self, key: str, item: dict) -> dict:
        label, fractions = item["label"], item["fractions"]
        n = len(item["frames"])
        first = label["first_image"]
        first = most_occluded(fractions) if first is None else first
        reference = label["reference_image"]
        if reference is None:
            reference = nearest_clear(fractions, item["boxed"], first)
        for slot, value in (("first_image", first), ("reference_image", reference)):
            if not 0 <= value < n:
                raise BadItem(f"pinned frame out of range: {slot} {value} in a {n}-frame "
                              f"segment", self.relative(f"{self.labels_url()}:{label['line']}"))
        qtype = label["question_type"]
        row = self.new_row(key)
        row.update(
            image_template=(template_literal(f"{DATASET_FOLDER}/{item['segment']}/") + "{image}"
                            + template_literal(item["ext"])),
            first_image=first, num_images=n, reference_image=reference,
            prompt=self.pick_prompt(key, QUESTIONS[qtype]),
            options=self.build_options(key, [REWIND, WAIT]),
            categories=self.pick_categories(key, label["answer"], self.vocabulary[qtype]),
            answer=format_category(label["answer"]),
            question_type=qtype,
            strong_occlusions=is_strong(fractions, self.params.get("strong_occlusion") or {}),
            frame_ids=list(range(n)),
        )
        folder = self.path(*item["folder"].split("/"))
        row["source"]["files"] = [f"{item['folder']}/{name}" for name in item["frames"]]
        digests = item.get("sha256") or [None] * len(item["frames"])
        row["frame_refs"] = [dict({"kind": "file", "url": fileio.join(folder, name)},
                                  **({"sha256": sha} if sha else {}))
                             for name, sha in zip(item["frames"], digests)]
        return row

    # ---- miniature ----------------------------------------------------------------------------

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        miniature.write_miniature(root, cls.read_manifest()["parameters"], seed)
