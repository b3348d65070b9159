"""VSOD's miniature source: `OcclusionDataSet-MM20/{Data,Annotations}/{test,train}/<segment>/`
with 64x36 JPEG frames `0000.jpg`.. and one VOC XML each (a passer-by from frame 3 to 7:
strong, weak or none), and the labels CSV the manifest names."""
from __future__ import annotations

import io
import random

from PIL import Image, ImageDraw

from proactivebench_builder.transforms.api import fileio
from proactivebench_builder.transforms.vsod.layout import DATASET_FOLDER


def write_miniature(root: str, params: dict, seed: int = 0) -> None:
    """`OcclusionDataSet-MM20/{Data,Annotations}/{test,train}/<segment>/` with 64x36 JPEG
    frames `0000.jpg`.. and one VOC XML each (a passer-by from frame 3 to 7: strong, weak or
    none), and the labels CSV the manifest names."""
    for spec in params["miniature_segments"]:
        rng = random.Random(f"{seed}/vsod/{spec['segment']}")
        write_segment(root, spec["split"], spec["segment"], int(spec["frames"]),
                      tuple(spec["size"]), passer_by_boxes(spec), rng)
    fileio.write_bytes_atomic(fileio.join(root, params["labels_file"]),
                              params["miniature_labels"].encode("utf-8"))

# ---- helpers (also used by the tests) ----------------------------------------------------------

def passer_by_boxes(spec: dict) -> dict[int, list[tuple[int, int, int, int]]]:
    """Frame -> occluder boxes of someone crossing from the left: frames `enter`..`leave`-1, the
    widest at the middle; `peak` is the fraction of the frame height the person covers."""
    width, height = spec["size"]
    enter, leave = spec.get("enter", 3), spec.get("leave", 8)
    peak = float(spec.get("peak", 0.0))
    boxes = {}
    if peak <= 0:
        return boxes
    box_h = max(2, round(height * peak))
    span = leave - enter
    for k, i in enumerate(range(enter, leave)):
        centre = width * (k + 0.5) / span
        half = width * (0.5 if k == span // 2 else 0.3) if peak >= 0.5 else width * 0.35
        left, right = max(0, round(centre - half)), min(width, round(centre + half))
        top = height - box_h
        boxes[i] = [(left, top, right, height)]
        if k == span // 2:  # a second, overlapping occluder (a raised arm): exercises the union
            boxes[i].append((max(0, left + 4), max(0, top - 2), min(width, left + 12), height))
    return boxes


def annotation_xml(folder: str, filename: str, size, boxes) -> bytes:
    objects = "".join(
        "  <object>\n    <name>occlusion</name>\n    <bndbox>\n"
        f"      <xmin>{b[0]}</xmin>\n      <ymin>{b[1]}</ymin>\n"
        f"      <xmax>{b[2]}</xmax>\n      <ymax>{b[3]}</ymax>\n    </bndbox>\n  </object>\n"
        for b in boxes)
    return (f"<annotation>\n  <folder>{folder}</folder>\n  <filename>{filename}</filename>\n"
            f"  <size>\n    <width>{size[0]}</width>\n    <height>{size[1]}</height>\n"
            f"    <depth>3</depth>\n  </size>\n{objects}</annotation>\n").encode("utf-8")


def scene_frame(size, boxes, rng: random.Random) -> bytes:
    """A static "speaker" scene (wall, skin-toned face) with dark occluders drawn in the boxes."""
    image = Image.new("RGB", size, (90 + rng.randint(0, 10), 110, 140))
    draw = ImageDraw.Draw(image)
    w, h = size
    draw.rectangle((w * 0.4, h * 0.2, w * 0.6, h * 0.8), fill=(225, 180, 150))
    for box in boxes:
        draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=(25, 25, 30))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return out.getvalue()


def write_segment(root: str, split: str, segment: str, n: int, size, boxes: dict,
                  rng: random.Random) -> None:
    base = fileio.join(root, DATASET_FOLDER)
    for i in range(n):
        frame_boxes = boxes.get(i, [])
        name = f"{i:04d}"
        fileio.write_bytes_atomic(fileio.join(base, "Data", split, segment, f"{name}.jpg"),
                                  scene_frame(size, frame_boxes, rng))
        fileio.write_bytes_atomic(
            fileio.join(base, "Annotations", split, segment, f"{name}.xml"),
            annotation_xml(segment, f"{name}.jpg", size, frame_boxes))
