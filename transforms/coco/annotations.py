"""Reading COCO's annotation file into a compact index, streamed once per worker process (see
`index_annotations`): the file (val ~160 MB of JSON, train ~330 MB) is never parsed whole."""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from proactivebench_builder.transforms.api import (READ_CHUNK_BYTES, NotAJsonObject, StreamedArray,
                                                   fileio, iter_top_level)


@dataclass
class ImageObjects:
    """What a sample needs of one image's annotations: their counts, and the lone annotation
    when there is one (an image with several objects is excluded without looking further)."""
    count: int = 0               # every annotation, crowd regions included
    count_non_crowd: int = 0
    single: dict | None = None           # the annotation, when count == 1
    single_non_crowd: dict | None = None  # the non-crowd annotation, when count_non_crowd == 1


@dataclass
class AnnotationIndex:
    """A compact index of an annotation file: the image records, per image its objects (see
    ImageObjects), the annotations that name unknown images, and the records too malformed to
    index. It is all a worker keeps of the file: a dict per annotation (let alone the parsed
    file, segmentations and all) would cost gigabytes for train2014 in every worker process."""
    images: dict                 # image id -> image record
    objects: dict                # image id -> ImageObjects
    orphans: dict                # image id (not in images[]) -> sorted annotation ids
    malformed: list              # [(location, reason)]
    file_categories: dict        # category id -> name, as the file's categories[] has it


_CACHE: dict[str, AnnotationIndex] = {}
_CACHE_LOCK = threading.Lock()


def load_index(url: str) -> AnnotationIndex:
    """The index of the annotation file at any fsspec URL, read once per process (streamed: see
    `index_annotations`). Records that cannot be indexed (no integer id / image_id, a
    duplicate image id) are set aside as malformed items."""
    with _CACHE_LOCK:
        if url not in _CACHE:
            # the test branch reads val2014 while the train branch reads train2014: keep both
            # (compact: no segmentations) rather than re-read them in turn, but no more
            if len(_CACHE) >= 2:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[url] = read_index(url)
        return _CACHE[url]


def forget_indexes() -> None:
    """Drop the indexes kept by `load_index` (~90 MB per process for val2014 + train2014)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def read_index(url: str, chunk_bytes: int = READ_CHUNK_BYTES) -> AnnotationIndex:
    with fileio.open_source(url) as stream:
        return index_annotations(stream, chunk_bytes)


ANNOTATION_FIELDS = ("id", "image_id", "category_id", "bbox", "iscrowd", "area")
NOT_COCO = "not a COCO instances file (no images/annotations lists)"


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def index_annotations(stream, chunk_bytes: int = READ_CHUNK_BYTES) -> AnnotationIndex:
    """The AnnotationIndex of a COCO instances file read from a binary stream, in one pass that
    never holds the parsed file: every images[] / annotations[] element is reduced to what the
    index keeps as soon as it is decoded, so memory is the index plus about one chunk.

    It is the index the former reader built from pycocotools' COCO index of the whole parsed
    file (tests/test_coco_stream.py checks them against each other): the first record of each
    integer image id; per image its annotations in file order; the malformed records, those of
    images[] first, each in file order. Unlike pycocotools it takes annotations without a
    category_id and categories without an id (they name no category, so a sample of them is a
    dead letter) instead of failing the whole file on them; and it refuses a file whose top
    level repeats the images or annotations key (json.loads kept the last one)."""
    builder = _IndexBuilder()
    try:
        for key, value in iter_top_level(stream, ("images", "annotations"), chunk_bytes):
            builder.add_member(key, value)
    except NotAJsonObject:
        raise ValueError(NOT_COCO) from None
    return builder.index()


class _IndexBuilder:
    """Reduces the top-level members of an annotation file, in the order `iter_top_level`
    yields them, to an AnnotationIndex. Annotations may come before images in a file, so which
    image ids are orphans is only decided once the whole file has been read."""

    def __init__(self):
        self.images: dict | None = None       # image id -> record; None: no images list (yet)
        self.image_problems: list = []
        self.objects: dict | None = None      # image id -> ImageObjects, by first annotation
        # image id -> its annotation ids, for the ids that could be orphans' (see below)
        self.annotation_ids: dict = {}
        self.annotation_problems: list = []
        self.categories = None
        self.seen: set = set()

    def add_member(self, key: str, value) -> None:
        if key in ("images", "annotations"):
            # json.loads would keep the last value, but by then the first has been reduced
            # (and which annotation ids to keep decided on it): refuse such a file instead
            if key in self.seen:
                raise ValueError(f"the top-level key {key!r} appears twice")
            self.seen.add(key)
        if key == "images":
            self._read_images(value)
        elif key == "annotations":
            self._read_annotations(value)
        elif key == "categories":
            self.categories = value   # the last one wins, as with json.loads
        # anything else (info, licenses, ...) is not needed

    def _read_images(self, value) -> None:
        if not isinstance(value, StreamedArray):
            return  # not a list: not an instances file
        images = {}
        for position, image in enumerate(value):
            if not isinstance(image, dict) or not is_int(image.get("id")):
                self.image_problems.append((f"images[{position}]",
                                            "malformed image record: no integer id"))
            elif image["id"] in images:
                self.image_problems.append((f"images[{position}]",
                                            f"duplicate image id {image['id']}"))
            else:
                images[image["id"]] = _with_shared_keys(image)
        self.images = images

    def _read_annotations(self, value) -> None:
        if not isinstance(value, StreamedArray):
            return
        objects = {}
        for position, ann in enumerate(value):
            if not isinstance(ann, dict) or not is_int(ann.get("id")) \
                    or not is_int(ann.get("image_id")):
                self.annotation_problems.append(
                    (f"annotations[{position}]",
                     "malformed annotation record: no integer id / image_id"))
                continue
            # only what a sample needs: segmentations are most of the file
            compact = {k: ann[k] for k in ANNOTATION_FIELDS if k in ann}
            image_id = compact["image_id"]
            if image_id not in objects:
                objects[image_id] = ImageObjects()
            _count_annotation(objects[image_id], compact)
            # Only an orphan's annotation ids are kept in the index. In a file that lists its
            # images first (as COCO's do) an image is known by now, and the id is not needed:
            # keeping all ~600k of train2014's would cost ~30 MB while reading.
            if self.images is None or image_id not in self.images:
                self.annotation_ids.setdefault(image_id, []).append(compact["id"])
        self.objects = objects

    def index(self) -> AnnotationIndex:
        if self.images is None or self.objects is None:
            raise ValueError(NOT_COCO)
        objects, orphans = {}, {}
        for image_id, found in self.objects.items():
            if image_id in self.images:
                objects[image_id] = found
            else:
                orphans[image_id] = sorted(self.annotation_ids[image_id])
        return AnnotationIndex(self.images, objects, orphans,
                               self.image_problems + self.annotation_problems,
                               _file_categories(self.categories))


def _with_shared_keys(record: dict) -> dict:
    """The record with its keys interned. json.loads shares one string per distinct key among
    all the records of a file; records decoded one at a time each get their own copies, which
    for train2014's 82k image records would be ~40 MB of "file_name", "coco_url", ..."""
    return {sys.intern(key): value for key, value in record.items()}


def _count_annotation(found: ImageObjects, ann: dict) -> None:
    """Count one more annotation of an image; `single` holds it only while it is the only one
    (and so, at the end, only when the image has exactly one)."""
    found.count += 1
    found.single = ann if found.count == 1 else None
    if not ann.get("iscrowd", 0):
        found.count_non_crowd += 1
        found.single_non_crowd = ann if found.count_non_crowd == 1 else None


def _file_categories(categories) -> dict:
    """category id -> name of the categories[] records that have an integer id (anything
    else, like a categories value that is not a list, names no category)."""
    if not isinstance(categories, list):
        return {}
    return {c["id"]: c.get("name") for c in categories
            if isinstance(c, dict) and is_int(c.get("id"))}


def shard_of(number: int, shards: int) -> int:
    return number % shards
