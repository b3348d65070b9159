"""The streaming reader of COCO annotation files: the index it builds is the one the former
reader built (json.loads of the whole file, then pycocotools' COCO index) for every file, at any
chunk size; broken files fail with a ValueError that says where; and memory stays far below the
file's size."""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import tracemalloc

import fsspec
import pytest

from proactivebench_builder.pipeline.reading import unit_values
from proactivebench_builder.core import jsonstream
from proactivebench_builder.transforms.coco import annotations
from proactivebench_builder.transforms.coco.annotations import (
    ANNOTATION_FIELDS, NOT_COCO, AnnotationIndex, ImageObjects, index_annotations, read_index)
from proactivebench_builder.transforms.coco.scenario import Coco
from proactivebench_builder.core.jsonstream import StreamedArray, iter_top_level

# small enough that keys, strings, escapes, numbers and multi-byte characters all fall across
# chunk edges, plus the default
CHUNK_SIZES = (1, 2, 3, 7, 64, jsonstream.READ_CHUNK_BYTES)


# ---- the former reader, as the reference -----------------------------------------------------

def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def reference_index(data: bytes) -> AnnotationIndex:
    """The index as transforms/coco.py built it before streaming: json.loads of the whole file,
    then pycocotools' COCO index of its well-formed records (copied from that code)."""
    pycocotools_coco = pytest.importorskip("pycocotools.coco")
    dataset = json.loads(data)
    if not isinstance(dataset, dict) or not isinstance(dataset.get("images"), list) \
            or not isinstance(dataset.get("annotations"), list):
        raise ValueError("not a COCO instances file (no images/annotations lists)")
    malformed, images, seen = [], [], set()
    for position, image in enumerate(dataset["images"]):
        if not isinstance(image, dict) or not _is_int(image.get("id")):
            malformed.append((f"images[{position}]", "malformed image record: no integer id"))
        elif image["id"] in seen:
            malformed.append((f"images[{position}]", f"duplicate image id {image['id']}"))
        else:
            seen.add(image["id"])
            images.append(image)
    annotations = []
    for position, ann in enumerate(dataset["annotations"]):
        if not isinstance(ann, dict) or not _is_int(ann.get("id")) \
                or not _is_int(ann.get("image_id")):
            malformed.append((f"annotations[{position}]",
                              "malformed annotation record: no integer id / image_id"))
        else:
            annotations.append({k: ann[k] for k in ANNOTATION_FIELDS if k in ann})
    categories = [c for c in dataset.get("categories") or [] if isinstance(c, dict)]
    index = pycocotools_coco.COCO()
    index.dataset = {"images": images, "annotations": annotations, "categories": categories}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        index.createIndex()
    file_categories = {c["id"]: c.get("name") for c in categories if _is_int(c.get("id"))}
    objects, orphans = {}, {}
    for image_id, anns in index.imgToAnns.items():
        if not anns:
            continue
        if image_id not in index.imgs:
            orphans[image_id] = sorted(a["id"] for a in anns)
            continue
        non_crowd = [a for a in anns if not a.get("iscrowd", 0)]
        objects[image_id] = ImageObjects(len(anns), len(non_crowd),
                                         anns[0] if len(anns) == 1 else None,
                                         non_crowd[0] if len(non_crowd) == 1 else None)
    return AnnotationIndex(dict(index.imgs), objects, orphans, malformed, file_categories)


def assert_same_index(data: bytes, chunk_sizes=CHUNK_SIZES):
    expected = reference_index(data)
    for chunk_bytes in chunk_sizes:
        found = index_annotations(io.BytesIO(data), chunk_bytes)
        assert found == expected, chunk_bytes
        # dicts compare without order: the order (file order) is part of the result too
        for field in ("images", "objects", "orphans", "file_categories"):
            assert list(getattr(found, field)) == list(getattr(expected, field)), field


# ---- annotation files to compare on ------------------------------------------------------------

def image(image_id, **extra) -> dict:
    return {"license": 1, "file_name": f"COCO_val2014_{image_id:012d}.jpg", "height": 120,
            "width": 160, "id": image_id, **extra}


def annotation(ann_id, image_id, category_id=18, crowd=0, **extra) -> dict:
    segmentation = ({"counts": [5, 10, 200], "size": [120, 160]} if crowd
                    else [[10.5, 20.25, 30.0, 20.0, 30.0, 40.125, 1e-5, -0.0]])
    return {"segmentation": segmentation, "area": 123.5, "iscrowd": crowd, "image_id": image_id,
            "bbox": [10.5, 20.25, 19.5, 20.0], "category_id": category_id, "id": ann_id,
            **extra}


def handmade_dataset() -> dict:
    """Every case the index distinguishes, and JSON that is awkward to stream."""
    images = [
        image(1, coco_url='http://host/a "quoted" \\ path/', flickr_url="é ü 漢字 😀 \u2028"),
        image(2),
        image(1, file_name="a duplicate of image 1"),      # duplicate id: the first one wins
        {"file_name": "no id"},                             # malformed: no id
        {"id": "3"}, {"id": True}, {"id": 4.0}, {"id": None},  # malformed: not an integer
        ["not", "a", "record"], None, 7, "image",           # malformed: not an object
        image(5, nested={"a": [1, {"b": [2, {"c": "}]\\\"["}]}], "d": {}}),
        image(6),                                           # no annotation
        image(7), image(8), image(9), image(10),
        image(12345678901234567890),                        # an id beyond 64 bits
    ]
    annotations = [
        annotation(101, 1),
        annotation(102, 2), annotation(103, 2, category_id=1),   # two objects
        annotation(999, 404), annotation(104, 404), annotation(105, 405),  # orphans
        {"image_id": 1, "category_id": 1},                       # malformed: no id
        annotation(106, "1"), annotation(107, False), annotation(108.0, 1),
        annotation(109, None), "annotation", 42, [1, 2], None,  # malformed
        annotation(110, 7, crowd=1),                            # a lone crowd region
        annotation(111, 8, crowd=1), annotation(112, 8),        # a crowd and an object
        annotation(113, 9, crowd=1), annotation(114, 9, crowd=1),
        annotation(115, 9, category_id=3),                      # two crowds and an object
        annotation(116, 10), annotation(117, 10), annotation(118, 10),  # three objects
        annotation(101, 5),                                     # a repeated annotation id
        annotation(119, 12345678901234567890, bbox=[1, 2, 3e2, 4E-1], area=12345678901234567),
        {"id": 120, "image_id": 6, "category_id": 1, "note": "extra fields are dropped",
         "segmentation": {"counts": "RLE\\\"string\"\\", "size": [1, 2]}},  # image 6 after all
        annotation(121, 404, crowd=1),
    ]
    categories = [{"supercategory": "animal", "id": 18, "name": "dog"},
                  {"supercategory": "person", "id": 1, "name": "person"},
                  {"supercategory": "vehicle", "id": 3, "name": "car"},
                  "not a category", {"id": "4", "name": "string id"}]
    return {"info": {"description": "hand-made", "year": 2014, "nested": {"deep": [[[{}]]]},
                     "infinite": float("inf"), "escapes": "\\\"\n\t\u0000\u00e9"},
            "licenses": [{"id": 1, "name": "Attribution"}],
            "images": images, "annotations": annotations, "categories": categories,
            "ключ 😀": [[], {}, "", 0]}


def serialisations(dataset: dict):
    """The same dataset as several byte strings: compact, pretty, ASCII-only, odd spacing."""
    yield json.dumps(dataset, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    yield json.dumps(dataset, indent=2, ensure_ascii=True).encode("utf-8")
    yield ("\r\n\t " + json.dumps(dataset, separators=(" ,\r\n", " :\t "), ensure_ascii=False)
           + " \n").encode("utf-8")
    yield b"\xef\xbb\xbf" + json.dumps(dataset).encode("utf-8")  # with a UTF-8 byte-order mark


def reordered(dataset: dict, keys) -> dict:
    return {key: dataset[key] for key in keys}


def random_dataset(seed: int) -> dict:
    """Random records, a tenth of them malformed, with duplicates and orphans."""
    rng = random.Random(seed)
    images = []
    for _ in range(60):
        roll = rng.random()
        if roll < 0.1:
            images.append(rng.choice([{"id": str(rng.randint(1, 40))}, None, {"x": 1}]))
        else:
            images.append(image(rng.randint(1, 40), note=rng.choice(["", "é", "\"", "\\"])))
    annotations = []
    for ann_id in range(1, 150):
        roll = rng.random()
        if roll < 0.1:
            annotations.append(rng.choice([{"id": ann_id}, {"image_id": 3}, [], "x"]))
        else:
            annotations.append(annotation(rng.choice([ann_id, rng.randint(1, 9)]),
                                          rng.randint(1, 50), rng.choice([1, 3, 18]),
                                          crowd=int(rng.random() < 0.2)))
    order = ["info", "images", "annotations", "categories"]
    rng.shuffle(order)
    dataset = {"info": {"seed": seed}, "images": images, "annotations": annotations,
               "categories": [{"id": 18, "name": "dog"}]}
    return reordered(dataset, order)


# ---- equivalence -------------------------------------------------------------------------------

def test_the_miniature_files_give_the_former_index(tmp_path):
    Coco.write_miniature(str(tmp_path))
    for split in ("val", "train"):
        with open(tmp_path / "annotations" / f"instances_{split}2014.json", "rb") as handle:
            assert_same_index(handle.read())


@pytest.mark.parametrize("keys", [
    ("info", "licenses", "images", "annotations", "categories", "ключ 😀"),
    ("annotations", "categories", "ключ 😀", "info", "images", "licenses"),  # images last
    ("categories", "annotations", "images", "info", "licenses", "ключ 😀"),
])
def test_handmade_files_give_the_former_index(keys):
    dataset = reordered(handmade_dataset(), keys)
    for data in serialisations(dataset):
        assert_same_index(data)


def test_the_handmade_index_holds_every_case():
    """A check of the reference itself: the hand-made file exercises what it is meant to."""
    data = json.dumps(handmade_dataset()).encode("utf-8")
    index = index_annotations(io.BytesIO(data))
    assert index.images[1]["file_name"] == "COCO_val2014_000000000001.jpg"
    assert index.images[1]["flickr_url"] == "é ü 漢字 😀 \u2028"
    assert index.orphans == {404: [104, 121, 999], 405: [105]}
    assert index.objects[2].count == 2 and index.objects[2].single is None
    assert index.objects[7].count == 1 and index.objects[7].single_non_crowd is None
    assert index.objects[8].count == 2 and index.objects[8].single_non_crowd["id"] == 112
    assert index.objects[9].count_non_crowd == 1 and index.objects[9].single is None
    assert index.objects[6].single == {"id": 120, "image_id": 6, "category_id": 1}
    assert "segmentation" not in index.objects[1].single
    assert [where for where, _ in index.malformed] == [
        "images[2]", "images[3]", "images[4]", "images[5]", "images[6]", "images[7]",
        "images[8]", "images[9]", "images[10]", "images[11]",
        "annotations[6]", "annotations[7]", "annotations[8]", "annotations[9]",
        "annotations[10]", "annotations[11]", "annotations[12]", "annotations[13]",
        "annotations[14]"]
    assert index.malformed[0] == ("images[2]", "duplicate image id 1")
    assert index.file_categories == {18: "dog", 1: "person", 3: "car"}


@pytest.mark.parametrize("seed", range(6))
def test_random_files_give_the_former_index(seed):
    for data in serialisations(random_dataset(seed)):
        assert_same_index(data, (1, 5, 13, 4096))


def test_empty_lists_and_no_categories_give_the_former_index():
    for text in ('{"images": [], "annotations": []}', '{"annotations":[ ],"images":[\n]}',
                 '{"images": [{"id": 1}], "annotations": [], "categories": null}',
                 '{"images": [{"id": 1}], "annotations": [], "categories": {"id": 1}}',
                 '{"images": [], "annotations": [], "categories": "dog"}'):
        assert_same_index(text.encode("utf-8"))


def test_categories_without_an_id_or_annotations_without_a_category_are_read():
    """pycocotools failed the whole file on these (KeyError); they now just name no category,
    so a sample of them becomes a dead letter ("unknown category id")."""
    data = json.dumps({"images": [image(1)],
                       "annotations": [{"id": 7, "image_id": 1, "bbox": [1, 2, 3, 4]}],
                       "categories": [{"name": "no id"}]}).encode("utf-8")
    index = index_annotations(io.BytesIO(data))
    assert index.objects[1].single == {"id": 7, "image_id": 1, "bbox": [1, 2, 3, 4]}
    assert index.file_categories == {}


def test_read_index_reads_any_fsspec_url():
    data = json.dumps(handmade_dataset()).encode("utf-8")
    url = "memory://coco_stream_test/annotations/instances_val2014.json"
    with fsspec.open(url, "wb") as handle:
        handle.write(data)
    try:
        assert read_index(url, chunk_bytes=100) == index_annotations(io.BytesIO(data))
    finally:
        fsspec.filesystem("memory").rm("/coco_stream_test", recursive=True)


# ---- the streaming reader on annotation files (core.jsonstream has tests of its own) -------------

class CountingStream(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.reads = 0

    def read(self, size=-1):
        self.reads += 1
        return super().read(size)


def test_a_long_element_is_not_reparsed_chunk_by_chunk():
    """Each retry of an element that does not end in the window reads as much again as it
    holds, so a 4 MB element read 1 KiB at a time costs ~12 reads, not ~4000 (quadratic)."""
    polygon = [round(i * 0.37, 2) for i in range(600_000)]
    data = json.dumps({"images": [], "annotations": [{"id": 1, "image_id": 2,
                                                      "segmentation": [polygon]}]}).encode()
    stream = CountingStream(data)
    index = index_annotations(stream, chunk_bytes=1024)
    assert index.orphans == {2: [1]}
    assert len(data) > 4_000_000 and stream.reads < 30


def test_an_element_that_never_ends_stops_at_the_cap(monkeypatch):
    monkeypatch.setattr(jsonstream, "MAX_VALUE_CHARS", 10_000)
    data = b'{"images": [], "annotations": [{"id": 1, "segmentation": "' + b"x" * 1_000_000
    stream = CountingStream(data)
    with pytest.raises(ValueError, match=r"annotations\[0\] at character 31 is longer than"):
        index_annotations(stream, chunk_bytes=1000)
    assert stream.tell() < 50_000  # it stopped reading soon after the cap


# ---- errors --------------------------------------------------------------------------------------

SMALL = json.dumps({"info": {"a": "é"}, "images": [image(1), image(2)],
                    "annotations": [annotation(1, 1), annotation(2, 3)],
                    "categories": [{"id": 18, "name": "dog"}]}).encode("utf-8")


@pytest.mark.parametrize("chunk_bytes", [1, 16, jsonstream.READ_CHUNK_BYTES])
def test_a_truncated_file_is_a_clear_error_wherever_it_is_cut(chunk_bytes):
    for cut in range(len(SMALL)):
        with pytest.raises(ValueError) as raised:
            index_annotations(io.BytesIO(SMALL[:cut]), chunk_bytes)
        message = str(raised.value)
        # cut inside a number or a literal ("tru"), it is invalid rather than cut short; cut
        # inside "é", it is not UTF-8
        assert message.startswith(("truncated JSON: the file ends at character",
                                   "invalid JSON at character", "not UTF-8 text")), message
    cut = SMALL.index(b', {"segmentation"') + 1   # right after an annotation and its comma
    with pytest.raises(ValueError, match=rf"truncated JSON: the file ends at character "
                                         rf"{characters(SMALL[:cut])}, "
                                         r"where annotations\[1\] should begin"):
        index_annotations(io.BytesIO(SMALL[:cut]), chunk_bytes)
    cut = SMALL.index(b'"file_name"', SMALL.index(b'"images"')) + 5   # inside a string
    with pytest.raises(ValueError, match=rf"truncated JSON: the file ends at character "
                                         rf"{characters(SMALL[:cut])}, inside images\[0\]"):
        index_annotations(io.BytesIO(SMALL[:cut]), chunk_bytes)


def characters(data: bytes) -> int:
    """Positions in messages count characters (here "é" is one, of two bytes)."""
    return len(data.decode("utf-8"))


@pytest.mark.parametrize("chunk_bytes", [1, 16, jsonstream.READ_CHUNK_BYTES])
def test_invalid_syntax_is_a_clear_error_naming_its_position(chunk_bytes):
    text = SMALL.decode("utf-8")
    broken = {  # the broken text -> where the error is found
        text.replace(', "annotations"', ' "annotations"'): text.index(', "annotations"') + 1,
        text.replace('"id": 2}', '"id": 2,}', 1): text.index('"id": 2}') + 8,
        text.replace('"height": 120', '"height" 120', 1): text.index('"height": 120') + 9,
        text.replace('"iscrowd": 0', '"iscrowd": nul', 1): text.index('"iscrowd": 0') + 11,
        text + " {}": len(text) + 1,
        text.replace('{"info"', '{info', 1): 1,
    }
    for data, position in broken.items():
        with pytest.raises(ValueError, match=rf"invalid JSON at character {position}: "):
            index_annotations(io.BytesIO(data.encode("utf-8")), chunk_bytes)
        with pytest.raises(ValueError):  # json.loads refuses it too
            json.loads(data)


@pytest.mark.parametrize("text", ['[]', '[{"images": [], "annotations": []}]', '"images"', '3',
                                  'null', '{}', '{"images": []}', '{"annotations": []}',
                                  '{"images": [], "annotations": {}}',
                                  '{"images": null, "annotations": []}'])
def test_a_file_that_is_not_an_instances_file_is_refused(text):
    with pytest.raises(ValueError, match=f"^{re.escape(NOT_COCO)}$"):
        index_annotations(io.BytesIO(text.encode("utf-8")), 2)


def test_an_empty_file_or_a_repeated_list_is_refused():
    with pytest.raises(ValueError, match="truncated JSON: the file ends at character 3, where a "
                                         "JSON object should begin"):
        index_annotations(io.BytesIO(b"  \n"))
    with pytest.raises(ValueError, match="the top-level key 'images' appears twice"):
        index_annotations(io.BytesIO(b'{"images": [], "annotations": [], "images": []}'))
    with pytest.raises(ValueError, match="not UTF-8 text near byte 12"):
        index_annotations(io.BytesIO(b'{"images": [\xff], "annotations": []}'))


def test_a_broken_file_is_a_dead_letter_of_each_unit(tmp_path):
    """As before: load_index raises, and the build turns each unit's failure into one dead
    letter naming the error (pipeline/build.py:unit_values)."""
    root = str(tmp_path / "coco")
    Coco.write_miniature(root)
    path = os.path.join(root, "annotations", "instances_val2014.json")
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data[: len(data) // 2])
    scenario = Coco(0, root)
    units = scenario.list_units()
    for unit in units:
        values = list(unit_values(scenario, unit, scenario.read_unit))
        letters = [v for v in values if v.kind == "dead_letter"]
        assert len(letters) == 1
        assert letters[0].reason.startswith(
            "unreadable source unit: ValueError: truncated JSON: the file ends at character")
    assert path not in annotations._CACHE


# ---- memory --------------------------------------------------------------------------------------

def write_large_file(path: str, n_images: int = 300, per_image: int = 4,
                     polygon_points: int = 1200) -> int:
    """A file of ~25 MB, most of it segmentation polygons (as in COCO's own files)."""
    rng = random.Random(7)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write('{"info": {"description": "large"}, "images": [')
        handle.write(",".join(json.dumps(image(i)) for i in range(1, n_images + 1)))
        handle.write('], "annotations": [')
        ann_id = 0
        for image_id in range(1, n_images + 1):
            for _ in range(per_image if image_id % 3 else 1):
                ann_id += 1
                polygon = [round(rng.uniform(0, 640), 2) for _ in range(2 * polygon_points)]
                ann = annotation(ann_id, image_id)
                ann["segmentation"] = [polygon, polygon[: len(polygon) // 2]]
                handle.write(("," if ann_id > 1 else "") + json.dumps(ann))
        handle.write('], "categories": [{"id": 18, "name": "dog"}]}')
    return os.path.getsize(path)


def test_memory_stays_far_below_the_file_size(tmp_path):
    path = str(tmp_path / "instances_val2014.json")
    size = write_large_file(path)
    assert size > 20_000_000
    tracemalloc.start()
    try:
        index = read_index(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(index.images) == 300 and len(index.objects) == 300
    assert sum(1 for found in index.objects.values() if found.single) == 100
    # json.loads alone would hold several times the file (a float object per coordinate)
    assert peak < size / 3, (peak, size)


# ---- COCO: the streaming JSON reader -------------------------------------------------------------

@pytest.mark.parametrize("doc", [
    b'{"images": ' + b"[" * 30000 + b"]" * 30000 + b', "annotations": []}',
    b'{"images": [], "annotations": [' + b'{"a":' * 30000 + b"1" + b"}" * 30000 + b"]}",
    b'{"info": ' + b"[" * 30000,
])
@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_a_deeply_nested_value_is_a_value_error_naming_its_position(doc, chunk):
    """It is a ValueError naming where the value starts."""
    from proactivebench_builder.transforms.coco.annotations import index_annotations

    with pytest.raises(ValueError, match=r"at character \d+") as err:
        index_annotations(io.BytesIO(doc), chunk)
    assert "nested" in str(err.value) or "truncated" in str(err.value)
