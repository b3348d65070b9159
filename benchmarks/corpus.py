"""A scale corpus: every source in its real raw layout, at realistic image sizes, at a chosen
fraction of the full benchmark.

Counts per scenario are the paper's pool sizes (docs/sources.md) times the
fraction (at least one sample each), so at 1.0 the corpus yields about 18.9k samples and ~100k
test frames (plus the train split's images):

| scenario  | full-scale samples | frames per sample | frame files                                  |
|-----------|--------------------|-------------------|----------------------------------------------|
| rod       | 88 sequences       | 14                | 3024x3024 JPEG q90 in rod_0/rod_1.tar.gz      |
| vsod      | 200 segments       | 72                | 640x360 JPEG q90 + one VOC XML per frame      |
| mvpn      | 4,199 list entries | 2-6 (mean 4)      | 224x224 PNG                                  |
| imagenet_c| 5,000 (5 x 1,000)  | 5                 | 224x224 JPEG q85, 2 corruptions present      |
| quickdraw | 3,450 (10 x 345)   | 2-9 strokes       | ndjson (rendered to PNG by the build)        |
| changeit  | 1,118 (559 videos) | 20 of 60 seconds  | 640x360 JPEG q90, 1 fps pre-extracted frames |
| coco      | 4,857 val images   | 1                 | 640x480 / 480x640 JPEG q90                   |
| train     | 17,250 QD + 10,000 COCO train2014 single-object images (the default build's train split) |

Choices (all command-line options of `run.py`):
- ROD photos are 3024x3024, the real side (`--rod_side`):
  ROD's 1.2k frames then weigh about as much as the rest of the benchmark together. They are
  read from the `.tar.gz` archives (the layout as downloaded).
- VSOD: the paper's 14.4k VSOD images over 200 pooled rows give 72 frames per segment (the
  project figure shows segments of 38-75 frames); one label row per segment.
- QuickDraw category files hold `qd_lines` drawings (default 120) in the real format, not the
  ~145k of a real file: reading 50 M lines is raw reading, measured at real size by
  raw_read.py (real_sources.py) and added to the full-scale figure there; 10 test + 50 train
  drawings per class are all the build keeps.
- ImageNet-C has 5 images per class (all sampled) under 2 corruption folders; the build reads
  only the 5 severities of the corruption it draws.
- COCO: the annotation files hold the real mix (~12% single-object images, ~7 annotations per
  image) as records, but only single-object images have files: the build opens no other.
- Pixels: a smooth random field plus fine noise, tuned so file sizes are those of real photos
  (COCO ~130 KB, VSOD/ChangeIt frames ~60 KB, ROD ~0.8 MB, ImageNet-C ~15 KB); a JPEG's decode
  cost depends on its size and entropy, so flat synthetic images would flatter the build.

Generation is deterministic and cached: `ensure_corpus(workdir, fraction)` writes
`<workdir>/corpus-<fraction>-<version>/` once (the version changes with this file), in two
processes, one scenario at a time each.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import pickle
import random
import shutil
import tarfile
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image

FULL_SCALE = {"rod": 88, "vsod": 200, "mvpn": 4199, "imagenet_c": 1000, "quickdraw": 345,
              "changeit": 559, "coco": 4857, "coco_train": 10000}
MARKER = ".corpus-complete"
DEFAULTS = {"rod_side": 3024, "vsod_frames": 72, "qd_lines": 120, "changeit_seconds": 60}


# ---- sizes and names ----------------------------------------------------------------------

def scaled(name: str, fraction: float) -> int:
    return max(1, round(FULL_SCALE[name] * fraction))


def generator_version() -> str:
    with open(__file__, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:12]


def corpus_dir(workdir: str, fraction: float, settings: dict) -> str:
    tag = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:6]
    return os.path.join(workdir, f"corpus-{fraction:g}-{generator_version()}-{tag}")


def ensure_corpus(workdir: str, fraction: float, settings: dict | None = None,
                  workers: int = 2) -> str:
    """The corpus folder for `fraction`, generated unless a complete copy is cached."""
    settings = dict(DEFAULTS, **(settings or {}))
    root = corpus_dir(workdir, fraction, settings)
    if os.path.exists(os.path.join(root, MARKER)):
        return root
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    writers = [write_rod, write_vsod, write_mvpn, write_imagenet_c, write_quickdraw,
               write_changeit, write_coco]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        jobs = [pool.submit(w, root, fraction, settings) for w in writers]
        for job in jobs:
            job.result()
    with open(os.path.join(root, MARKER), "w") as handle:
        handle.write(json.dumps({"fraction": fraction, "settings": settings}))
    return root


def write_file(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def manifest(name: str) -> dict:
    from proactivebench_builder.transforms import manifest_of

    return manifest_of(name)


# ---- pixels -------------------------------------------------------------------------------

def photo_pixels(rng: np.random.Generator, width: int, height: int, noise: float) -> np.ndarray:
    """A photo-like RGB field: large smooth blobs (a bicubic-upscaled coarse random grid) plus
    per-pixel noise of amplitude `noise`, which sets the JPEG's size and decode cost."""
    coarse = rng.integers(30, 225, size=(max(2, height // 48), max(2, width // 48), 3),
                          dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC),
                        dtype=np.int16)
    fine = rng.integers(-noise, noise + 1, size=(height, width, 1), dtype=np.int16)
    return np.clip(smooth + fine, 0, 255).astype(np.uint8)


def jpeg(pixels, quality: int = 90) -> bytes:
    image = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def with_box(pixels: np.ndarray, box, colour) -> np.ndarray:
    """A copy of `pixels` with a solid rectangle (an occluder, an object) in it."""
    out = pixels.copy()
    x0, y0, x1, y1 = (int(v) for v in box)
    out[max(0, y0):max(0, y1), max(0, x0):max(0, x1)] = colour
    return out


def seeded(*parts) -> np.random.Generator:
    digest = hashlib.md5("/".join(str(p) for p in parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


# ---- ROD: tar.gz archives of 14-photo sweeps -----------------------------------------------

def write_rod(root: str, fraction: float, settings: dict) -> None:
    from proactivebench_builder.transforms.rod.miniature import classes_file, dataset_info

    info = manifest("rod")
    base = os.path.join(root, info["source_subdir"])
    side = int(settings["rod_side"])
    n = int(info["parameters"]["frames_per_sequence"])
    occluders = sorted(info["parameters"]["occluders"])
    backgrounds = ["greenr", "whiter", "woodt", "greyw", "bluer", "blackc"]
    classes = info["classes"]
    sequences = []
    for i in range(scaled("rod", fraction)):
        cls = classes[i % len(classes)].replace(" ", "_")
        setting = (f"natural_{occluders[i % len(occluders)]}_"
                   f"{backgrounds[(i // len(classes)) % len(backgrounds)]}{i // 96 or ''}")
        sequences.append(f"{setting}-{cls}")
    total = 0
    for archive, names in (("rod_0.tar.gz", sequences[0::2]), ("rod_1.tar.gz", sequences[1::2])):
        path = os.path.join(base, archive)
        os.makedirs(base, exist_ok=True)
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                    compresslevel=1) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for sequence in names:
                rng = seeded("rod", sequence)
                scene = photo_pixels(rng, side, side, 14)
                for k in range(n):
                    x = side * (k + 0.5) / n
                    frame = with_box(scene, (x - side // 7, side * 0.15, x + side // 7,
                                             side * 0.85), (30, 60, 200))
                    data = jpeg(frame, 90)
                    member = tarfile.TarInfo(f"{sequence}-s{k}.jpg")
                    member.size, member.mtime, member.mode = len(data), 1_690_000_000, 0o644
                    tar.addfile(member, io.BytesIO(data))
                    total += 1
    write_file(os.path.join(base, "classes_rod.py"), classes_file(classes).encode())
    write_file(os.path.join(base, "dataset_info.json"), dataset_info(classes, total).encode())


# ---- VSOD: frame folders, one VOC XML per frame, a labels CSV ------------------------------

def write_vsod(root: str, fraction: float, settings: dict) -> None:
    from proactivebench_builder.transforms.vsod.layout import DATASET_FOLDER
    from proactivebench_builder.transforms.vsod.miniature import annotation_xml

    info = manifest("vsod")
    base = os.path.join(root, info["source_subdir"])
    frames = int(settings["vsod_frames"])
    width, height = 640, 360
    types = sorted(info["categories"])
    lines = ["segment,question_type,answer,first_image,reference_image"]
    for s in range(scaled("vsod", fraction)):
        segment = f"seg_{s + 1:04d}"
        rng = seeded("vsod", segment)
        scene = photo_pixels(rng, width, height, 10)
        enter, leave = frames // 4, frames // 4 + frames // 5
        for i in range(frames):
            boxes = []
            if enter <= i < leave:
                x = width * (i - enter + 0.5) / (leave - enter)
                boxes = [(max(0, int(x - 200)), 20, min(width, int(x + 200)), height)]
            image = scene
            for box in boxes:
                image = with_box(image, box, (25, 25, 30))
            name = f"{i:04d}"
            write_file(os.path.join(base, DATASET_FOLDER, "Data", "test", segment, f"{name}.jpg"),
                       jpeg(image, 90))
            write_file(os.path.join(base, DATASET_FOLDER, "Annotations", "test", segment,
                                    f"{name}.xml"),
                       annotation_xml(segment, f"{name}.jpg", (width, height), boxes))
        qtype = types[s % len(types)]
        answers = info["categories"][qtype]
        lines.append(f"{segment},{qtype},{answers[s % len(answers)]},,")
    write_file(os.path.join(base, info["parameters"]["labels_file"]),
               ("\n".join(lines) + "\n").encode("utf-8"))


# ---- MVP-N: PNG views in set folders, pickled sample lists ----------------------------------

def write_mvpn(root: str, fraction: float, settings: dict) -> None:
    info = manifest("mvpn")
    base = os.path.join(root, info["source_subdir"], "data")
    classes = info["classes"]
    total = scaled("mvpn", fraction)
    per_class = [total // len(classes) + (1 if c < total % len(classes) else 0)
                 for c in range(len(classes))]
    for c, (cls, count) in enumerate(zip(classes, per_class)):
        if not count:
            continue
        samples = []
        for s in range(count):
            rng = seeded("mvpn", cls, s)
            views = 2 + (s * 7 + c) % 5          # 2..6, mean 4
            informative = int(rng.integers(views))
            scene = photo_pixels(rng, 224, 224, 12)
            paths = []
            for v in range(views):
                mark = int(v == informative)
                rel = f"{cls}/{s:04d}/{v:04d}_{mark}.png"
                image = with_box(scene, (40 + 6 * v, 50, 184 - 6 * v, 190),
                                 (200, 60 + 20 * mark, 40))
                out = io.BytesIO()
                Image.fromarray(image).save(out, format="PNG", compress_level=1)
                write_file(os.path.join(base, "test", rel), out.getvalue())
                paths.append(rel)
            samples.append(paths)
        write_file(os.path.join(base, "test_list", f"test_{cls}_100.pkl"),
                   pickle.dumps(samples, protocol=3))


# ---- ImageNet-C: <corruption>/<severity>/<wnid>/*.JPEG ---------------------------------------

IMAGENET_C_CORRUPTIONS = ("contrast", "gaussian_noise")


def write_imagenet_c(root: str, fraction: float, settings: dict) -> None:
    from proactivebench_builder.core.manifests import load_data_file

    info = manifest("imagenet_c")
    base = os.path.join(root, info["source_subdir"])
    wnids = sorted(load_data_file(info["class_names_file"]))
    count = scaled("imagenet_c", fraction)
    chosen = [wnids[i * len(wnids) // count] for i in range(count)]
    for w_index, wnid in enumerate(chosen):
        for i in range(int(info["parameters"]["samples_per_class"])):
            name = f"ILSVRC2012_val_{1 + w_index * 50 + i:08d}.JPEG"
            rng = seeded("imagenet_c", wnid, i)
            clean = photo_pixels(rng, 224, 224, 6).astype(np.int16)
            for corruption in IMAGENET_C_CORRUPTIONS:
                for severity in range(1, 6):
                    if corruption == "contrast":
                        mean = clean.mean()
                        image = (clean - mean) * (1.0 - 0.15 * severity) + mean
                    else:
                        image = clean + rng.normal(0, 6 * severity, clean.shape)
                    pixels = np.clip(image, 0, 255).astype(np.uint8)
                    write_file(os.path.join(base, corruption, str(severity), wnid, name),
                               jpeg(pixels, 85))


# ---- QuickDraw: simplified/<category>.ndjson ------------------------------------------------

def write_quickdraw(root: str, fraction: float, settings: dict) -> None:
    """`qd_lines` drawings per file in the real format (real_sources.real_record: 2-9 strokes
    of 4-20 points, ~90% recognised), so the build renders strokes of real length."""
    from benchmarks.real_sources import real_record

    info = manifest("quickdraw")
    base = os.path.join(root, info["source_subdir"], "simplified")
    classes = info["classes"]
    count = scaled("quickdraw", fraction)
    for c in range(count):
        category = classes[c * len(classes) // count]
        rng = random.Random(f"bench/quickdraw/{category}")
        lines = [real_record(rng, category, str(4500000000000000 + c * 100000 + d), d)
                 for d in range(int(settings["qd_lines"]))]
        write_file(os.path.join(base, f"{category}.ndjson"), ("\n".join(lines) + "\n").encode())


# ---- ChangeIt: repository CSVs, 1 fps annotations, pre-extracted frames ----------------------

def write_changeit(root: str, fraction: float, settings: dict) -> None:
    from proactivebench_builder.transforms.changeit.csvs import ANNOTATION_SUFFIX, LABELS_CSV

    info = manifest("changeit")
    base = os.path.join(root, info["source_subdir"])
    table = info["categories_table"]
    lines = ["DIR_NAME,ACTION_NAME,CENTERING_PARAM"] + [f'{d},"{a}",{t}' for d, a, t in table]
    write_file(os.path.join(base, "categories.csv"), ("\n".join(lines) + "\n").encode())
    write_file(os.path.join(base, "labels.csv"), LABELS_CSV.encode())
    seconds = int(settings["changeit_seconds"])
    # background, state 1, action, state 2: the object shows from 15% in, the action from 35%
    cuts = [0, round(seconds * 0.15), round(seconds * 0.35), round(seconds * 0.7), seconds]
    labels = [label for label in range(4) for _ in range(cuts[label], cuts[label + 1])]
    annotation = "".join(f"{s},{label}\n" for s, label in enumerate(labels)).encode()
    categories = [d for d, _, _ in table if d in info["objects"]]
    by_category: dict[str, list[str]] = {}
    for v in range(scaled("changeit", fraction)):
        category = categories[v % len(categories)]
        video_id = hashlib.md5(f"bench/{v}".encode()).hexdigest()[:11]
        by_category.setdefault(category, []).append(video_id)
        write_file(os.path.join(base, "annotations", category, video_id + ANNOTATION_SUFFIX),
                   annotation)
        rng = seeded("changeit", video_id)
        scene = photo_pixels(rng, 640, 360, 10)
        for second, label in enumerate(labels):
            frame = with_box(scene, (20 + 8 * second, 100, 140 + 8 * second, 260),
                             [(128, 128, 128), (0, 0, 255), (255, 255, 0), (0, 160, 0)][label])
            write_file(os.path.join(base, info["parameters"]["frames_dir"], category, video_id,
                                    f"{second}.jpg"), jpeg(frame, 90))
    for category, ids in sorted(by_category.items()):
        text = "\n".join(f"{i},{0.5:.3f}" for i in ids)
        write_file(os.path.join(base, "videos", f"{category}.csv"), text.encode())


# ---- COCO 2014: instances_<split>2014.json + <split>2014/ ---------------------------------

def write_coco(root: str, fraction: float, settings: dict) -> None:
    info = manifest("coco")
    base = os.path.join(root, info["source_subdir"])
    table = info["category_table"]
    write_coco_split(base, "val", scaled("coco", fraction), table)
    write_coco_split(base, "train", scaled("coco_train", fraction), table)


def write_coco_split(base: str, split: str, singles: int, table: list) -> None:
    """`singles` single-object images with files, plus ~7 records with several objects (no file)
    per single-object one, as in the real val2014 (4,857 of 40,504 images)."""
    from proactivebench_builder.transforms.coco.miniature import octagon, polygon_area

    folder = f"{split}2014"
    category_ids = [c["id"] for c in table]
    images, annotations = [], []
    total = singles * 40504 // 4857
    for index in range(total):
        image_id = 1 + index * 3
        width, height = (640, 480) if index % 5 else (480, 640)
        name = f"COCO_{folder}_{image_id:012d}.jpg"
        images.append({"license": 1, "file_name": name, "coco_url": "", "height": height,
                       "width": width, "date_captured": "2013-11-14 16:28:13",
                       "flickr_url": "", "id": image_id})
        single = index * singles // total != (index + 1) * singles // total
        rng = seeded("coco", split, image_id)
        objects = 1 if single else 2 + int(rng.integers(11))
        boxes = []
        for _ in range(objects):
            w = float(rng.integers(width // 8, width // 3))
            h = float(rng.integers(height // 8, height // 3))
            x = float(rng.integers(0, width - int(w)))
            y = float(rng.integers(0, height - int(h)))
            segmentation = octagon(x, y, w, h)
            annotations.append({"segmentation": [segmentation],
                                "area": polygon_area(segmentation), "iscrowd": 0,
                                "image_id": image_id, "bbox": [x, y, w, h],
                                "category_id": category_ids[int(rng.integers(len(category_ids)))],
                                "id": len(annotations) + 1})
            boxes.append((x, y, x + w, y + h))
        if single:
            pixels = with_box(photo_pixels(rng, width, height, 12), boxes[0], (200, 90, 40))
            write_file(os.path.join(base, folder, name), jpeg(pixels, 90))
    dataset = {"info": {"description": "COCO 2014 Dataset (benchmark corpus)"},
               "licenses": [{"url": "", "id": 1, "name": "Attribution License"}],
               "images": images, "annotations": annotations,
               "categories": [{"supercategory": c["supercategory"], "id": c["id"],
                               "name": c["name"]} for c in table]}
    write_file(os.path.join(base, "annotations", f"instances_{folder}.json"),
               json.dumps(dataset, separators=(",", ":")).encode())


def corpus_stats(root: str) -> dict:
    """Files and bytes per source folder, for the report."""
    stats = {}
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(folder):
            continue
        files = size = 0
        for dirpath, _, filenames in os.walk(folder):
            for f in filenames:
                files += 1
                size += os.path.getsize(os.path.join(dirpath, f))
        stats[name] = {"files": files, "bytes": size}
    return stats


def _mean(values) -> float:
    return sum(values) / len(values) if values else math.nan
