"""COCO's miniature source: `annotations/instances_{val,train}2014.json` in the full schema (the
real 80 categories from the manifest) and small synthetic JPEGs under `val2014/` and
`train2014/`, named as COCO names them."""
from __future__ import annotations

import io
import json
import random

from PIL import Image, ImageDraw

from proactivebench_builder.transforms.api import fileio


def write_miniature(root: str, category_table: list, seed: int = 0) -> None:
    """Single-object images of several sizes and object positions (left, right, corner, centre,
    full height, nearly the whole image, a grayscale one), plus images a rule excludes (no
    annotation, several objects, a lone crowd region, an object with a crowd region beside it)."""
    for split, images in MINIATURE_IMAGES.items():
        write_miniature_split(root, split, images, category_table, seed)


# image id -> (width, height, mode, [(category id, [x, y, w, h], iscrowd), ...])
MINIATURE_IMAGES = {
    "val": {
        42: (160, 120, "RGB", [(18, [20.5, 30.25, 40.0, 35.5], 0)]),         # dog, left
        73: (120, 160, "L", [(1, [10.0, 20.0, 50.0, 90.0], 1),               # crowd + dog:
                             (18, [70.0, 60.0, 30.0, 40.0], 0)]),            #   two objects
        74: (160, 120, "RGB", [(47, [10.0, 10.0, 20.0, 20.0], 0),            # three objects
                               (48, [60.0, 50.0, 10.0, 30.0], 0),
                               (49, [100.0, 70.0, 12.0, 30.0], 0)]),
        133: (160, 120, "RGB", []),                                          # no annotation
        139: (160, 120, "RGB", [(17, [30.0, 20.0, 100.0, 85.0], 0)]),        # cat, large
        164: (160, 120, "RGB", [(3, [110.0, 80.0, 30.0, 25.0], 0)]),         # car, lower right
        192: (160, 120, "RGB", [(51, [60.0, 40.0, 45.0, 40.0], 0)]),         # bowl, centre
        196: (128, 128, "RGB", [(81, [5.0, 4.0, 30.0, 28.0], 0)]),           # sink, top left
        208: (160, 120, "RGB", [(1, [70.0, 0.0, 25.0, 120.0], 0)]),          # person, full height
        241: (160, 120, "RGB", [(1, [20.0, 20.0, 60.0, 60.0], 1)]),          # a lone crowd
        257: (200, 150, "RGB", [(6, [10.0, 8.0, 180.0, 134.0], 0)]),         # bus, almost all
        283: (160, 120, "RGB", [(70, [120.0, 30.0, 40.0, 50.0], 0)]),        # toilet, right edge
        294: (96, 96, "L", [(47, [40.0, 40.0, 20.0, 20.0], 0)]),             # cup, grayscale
    },
    "train": {
        9: (160, 120, "RGB", [(59, [40.0, 30.0, 70.0, 50.0], 0)]),           # pizza
        25: (120, 160, "RGB", [(25, [30.0, 10.0, 40.0, 110.0], 0)]),         # giraffe
        30: (160, 120, "RGB", [(64, [10.0, 10.0, 30.0, 30.0], 0),            # two objects
                               (86, [90.0, 50.0, 20.0, 40.0], 0)]),
    },
}


def octagon(x: float, y: float, w: float, h: float) -> list[float]:
    """A polygon touching all four sides of the box (so its bounding box is the bbox)."""
    cx, cy = w / 4, h / 4
    points = [(x + cx, y), (x + w - cx, y), (x + w, y + cy), (x + w, y + h - cy),
              (x + w - cx, y + h), (x + cx, y + h), (x, y + h - cy), (x, y + cy)]
    return [round(v, 2) for p in points for v in p]


def polygon_area(flat: list[float]) -> float:
    xs, ys = flat[0::2], flat[1::2]
    n = len(xs)
    return abs(sum(xs[i] * ys[(i + 1) % n] - xs[(i + 1) % n] * ys[i] for i in range(n))) / 2


def rectangle_rle(x: int, y: int, w: int, h: int, width: int, height: int) -> dict:
    """Uncompressed RLE (column-major runs starting with zeros, as COCO crowd regions store)."""
    counts, run, value = [], 0, 0
    for col in range(width):
        for row in range(height):
            bit = 1 if x <= col < x + w and y <= row < y + h else 0
            if bit == value:
                run += 1
            else:
                counts.append(run)
                run, value = 1, bit
    counts.append(run)
    return {"counts": counts, "size": [height, width]}


def miniature_image(width: int, height: int, mode: str, objects, rng: random.Random) -> bytes:
    """A smooth background with each object drawn as its annotated polygon, JPEG."""
    base = tuple(rng.randint(60, 200) for _ in range(3))
    image = Image.new("RGB", (width, height), base)
    draw = ImageDraw.Draw(image)
    for band in range(0, height, 8):
        shade = tuple(max(0, min(255, c + (band * 40) // height - 20)) for c in base)
        draw.rectangle((0, band, width, band + 8), fill=shade)
    for _, (x, y, w, h), _crowd in objects:
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        flat = octagon(x, y, w, h)
        draw.polygon(list(zip(flat[0::2], flat[1::2])), fill=colour)
    if mode == "L":
        image = image.convert("L")
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=70)
    return out.getvalue()


def write_miniature_split(root: str, split: str, images: dict, table: list, seed: int) -> None:
    folder = f"{split}2014"
    records, annotations, next_ann = [], [], 1 if split == "val" else 100001
    for image_id in sorted(images):
        width, height, mode, objects = images[image_id]
        name = f"COCO_{folder}_{image_id:012d}.jpg"
        records.append({
            "license": 1 + image_id % 2, "file_name": name,
            "coco_url": f"http://images.cocodataset.org/{folder}/{name}",
            "height": height, "width": width,
            "date_captured": f"2013-11-{1 + image_id % 28:02d} 16:28:13",
            "flickr_url": f"http://farm{1 + image_id % 9}.staticflickr.com/{image_id}.jpg",
            "id": image_id})
        for category_id, bbox, crowd in objects:
            x, y, w, h = bbox
            if crowd:
                segmentation = rectangle_rle(int(x), int(y), int(w), int(h), width, height)
                area = float(int(w) * int(h))
            else:
                segmentation = [octagon(x, y, w, h)]
                area = polygon_area(segmentation[0])
            annotations.append({"segmentation": segmentation, "area": area, "iscrowd": crowd,
                                "image_id": image_id, "bbox": list(bbox),
                                "category_id": category_id, "id": next_ann})
            next_ann += 1
        rng = random.Random(f"{seed}/coco/{split}/{image_id}")
        fileio.write_bytes_atomic(fileio.join(root, folder, name),
                                  miniature_image(width, height, mode, objects, rng))
    dataset = {
        "info": {"description": "COCO 2014 Dataset (miniature synthetic copy)",
                 "url": "http://cocodataset.org", "version": "1.0", "year": 2014,
                 "contributor": "COCO Consortium", "date_created": "2017/09/01"},
        "licenses": [{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/", "id": 1,
                      "name": "Attribution-NonCommercial-ShareAlike License"},
                     {"url": "http://creativecommons.org/licenses/by/2.0/", "id": 2,
                      "name": "Attribution License"}],
        "images": records, "annotations": annotations,
        "categories": [{"supercategory": c["supercategory"], "id": c["id"], "name": c["name"]}
                       for c in table],
    }
    fileio.write_bytes_atomic(fileio.join(root, "annotations", f"instances_{folder}.json"),
                              json.dumps(dataset, separators=(",", ":")).encode("utf-8"))
