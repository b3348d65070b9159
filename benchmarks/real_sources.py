"""Raw source files at their real per-file sizes, for the raw-read benchmark (benchmarks/raw_read.py).

The scale corpus (corpus.py) sizes the frames the build writes; these are the raw files a real
rebuild must read, at real size, on a fraction of the units where a unit's size is what matters:

| source     | what is written                                                                    |
|------------|------------------------------------------------------------------------------------|
| quickdraw  | `qd_files` category files of ~145k drawings each in the real simplified format      |
|            | (fields word, countrycode, timestamp, recognized, key_id, drawing; 2-9 strokes of   |
|            | 4-20 points; ~90% recognised): ~92 MB a file, as the real 50 M drawings / 345 files  |
| coco       | instances_val2014.json (40,504 images, 291,875 annotations) and                     |
|            | instances_train2014.json (82,783 images, 604,907 annotations) with polygon           |
|            | segmentations of real length (~160 MB and ~330 MB) and ~1% crowd RLE regions        |
| imagenet_c | the real folder fan-out: 19 corruptions x 5 severities x 1,000 class folders; the 50 |
|            | file names per class only in the first corruption's severity-5 folders (the reader   |
|            | lists no other), as empty files                                                     |
| changeit   | `videos` H.264 videos of `video_seconds` at 25 fps, 640x360, a keyframe every 4 s     |
|            | (as on YouTube), with their 1 fps annotations; and the same videos' frames          |
|            | pre-extracted at 1 fps (JPEG) in a second root                                      |
| rod        | the scale corpus' ROD archives at the real 3024 px (`rod_sequences` sweeps)          |

Everything is deterministic and cached under the work folder (a marker per source).
"""
from __future__ import annotations

import hashlib
import json
import os
import random

import numpy as np

from benchmarks import corpus

QD_DRAWINGS = 145_000          # 50 M drawings over 345 category files
COCO_SIZES = {"val": (40_504, 291_875), "train": (82_783, 604_907)}
EXTRA_CORRUPTIONS = ("snow", "frost", "fog")  # in the release, not used by the benchmark
IMAGES_PER_CLASS = 50
VIDEO_FPS, VIDEO_SIZE, KEYFRAME_S = 25, (640, 360), 4


def done(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, corpus.MARKER))


def mark(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, corpus.MARKER), "w") as handle:
        handle.write("ok\n")


# ---- QuickDraw --------------------------------------------------------------------------------

def quickdraw_categories(n: int) -> list[str]:
    classes = corpus.manifest("quickdraw")["classes"]
    return [classes[i * len(classes) // n] for i in range(n)]


def real_drawing(rng: random.Random) -> list:
    """A drawing as the simplified files hold them: 2-9 strokes of 4-20 points in 0-255."""
    strokes = []
    for _ in range(rng.randint(2, 9)):
        x, y = rng.randint(0, 255), rng.randint(0, 255)
        xs, ys = [], []
        for _ in range(rng.randint(4, 20)):
            x = min(255, max(0, x + rng.randint(-40, 40)))
            y = min(255, max(0, y + rng.randint(-40, 40)))
            xs.append(x)
            ys.append(y)
        strokes.append([xs, ys])
    return strokes


def real_record(rng: random.Random, category: str, key_id: str, d: int) -> str:
    """One ndjson line in the real field order, compact as the real files are."""
    record = {"word": category, "countrycode": rng.choice(COUNTRIES),
              "timestamp": f"2017-03-{1 + d % 28:02d} {d % 24:02d}:{d % 60:02d}:"
                           f"{rng.randint(0, 59):02d}.{rng.randint(10000, 99999)} UTC",
              "recognized": rng.random() < 0.9, "key_id": key_id, "drawing": real_drawing(rng)}
    return json.dumps(record, separators=(",", ":"))


COUNTRIES = ["US", "GB", "DE", "BR", "RU", "JP", "IT", "FR", "CA", "KR"]


def write_quickdraw_file(path: str, category: str, drawings: int = QD_DRAWINGS) -> None:
    rng = random.Random(f"real/quickdraw/{category}")
    base = 4_500_000_000_000_000 + int(hashlib.md5(category.encode()).hexdigest()[:8], 16) * 10**6
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        for d in range(drawings):
            out.write(real_record(rng, category, str(base + d * 7919), d))
            out.write("\n")
    os.replace(tmp, path)


def ensure_quickdraw(workdir: str, files: int) -> dict[int, str]:
    """Source roots holding 1 and `files` real-size category files (the first file is shared by
    a hard link): {1: root, files: root}."""
    roots = {n: os.path.join(workdir, f"quickdraw-{n}") for n in sorted({1, files})}
    if all(done(r) for r in roots.values()):
        return roots
    categories = quickdraw_categories(files)
    folder = os.path.join(roots[files], "quickdraw", "simplified")
    os.makedirs(folder, exist_ok=True)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        list(pool.map(write_quickdraw_file,
                      [os.path.join(folder, f"{c}.ndjson") for c in categories], categories))
    one = os.path.join(roots[1], "quickdraw", "simplified")
    os.makedirs(one, exist_ok=True)
    target = os.path.join(one, f"{categories[0]}.ndjson")
    if not os.path.exists(target):
        os.link(os.path.join(folder, f"{categories[0]}.ndjson"), target)
    for root in roots.values():
        mark(root)
    return roots


# ---- COCO ---------------------------------------------------------------------------------------

def annotation_counts(rng: np.random.Generator, images: int, annotations: int) -> list[int]:
    """Objects per image with the real mix: ~12% single-object, ~1% none, the rest 2-14,
    adjusted to the real total."""
    kind = rng.random(images)
    counts = np.where(kind < 0.12, 1, np.where(kind < 0.13, 0, rng.integers(2, 15, images)))
    multi = np.flatnonzero(counts >= 2)
    diff = annotations - int(counts.sum())
    step = 1 if diff > 0 else -1
    i = 0
    while diff:
        j = multi[i % len(multi)]
        if step > 0 or counts[j] > 2:
            counts[j] += step
            diff -= step
        i += 1
    return counts.tolist()


def _polygon_text(rng: np.random.Generator, x: float, y: float, w: float, h: float) -> str:
    n = int(rng.integers(12, 44))  # points: COCO polygons average ~25 points
    angles = np.sort(rng.random(n)) * 2 * np.pi
    radius = 0.5 + 0.5 * rng.random(n)
    xs = x + w / 2 + np.cos(angles) * radius * w / 2
    ys = y + h / 2 + np.sin(angles) * radius * h / 2
    points = np.empty(2 * n)
    points[0::2], points[1::2] = np.round(xs, 2), np.round(ys, 2)
    return "[[" + ",".join(map(repr, points.tolist())) + "]]"


def write_coco_annotations(path: str, split: str) -> None:
    """An instances file of the real counts and size, streamed to disk record by record."""
    images, annotations = COCO_SIZES[split]
    rng = corpus.seeded("real/coco", split)
    table = corpus.manifest("coco")["category_table"]
    category_ids = [c["id"] for c in table]
    counts = annotation_counts(rng, images, annotations)
    folder = f"{split}2014"
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as out:
        out.write('{"info":{"description":"COCO 2014 Dataset (real-size benchmark)","version":'
                  '"1.0","year":2014},"images":[')
        image_ids = []
        for index in range(images):
            image_id = 9 + index * 7
            image_ids.append(image_id)
            width, height = (640, 480) if index % 4 else (480, 640)
            name = f"COCO_{folder}_{image_id:012d}.jpg"
            record = {"license": 1 + index % 8, "file_name": name,
                      "coco_url": f"http://images.cocodataset.org/{folder}/{name}",
                      "height": height, "width": width,
                      "date_captured": f"2013-11-{1 + index % 28:02d} 16:28:13",
                      "flickr_url": f"http://farm{1 + index % 9}.staticflickr.com/"
                                    f"{1000 + index % 8000}/{image_id}_4e622c8349_z.jpg",
                      "id": image_id}
            out.write(("," if index else "") + json.dumps(record, separators=(",", ":")))
        out.write('],"licenses":[{"url":"http://creativecommons.org/licenses/by/2.0/","id":1,'
                  '"name":"Attribution License"}],"annotations":[')
        ann_id = 0
        for index, (image_id, n) in enumerate(zip(image_ids, counts)):
            width, height = (640, 480) if index % 4 else (480, 640)
            for _ in range(n):
                w = float(rng.integers(8, width // 2))
                h = float(rng.integers(8, height // 2))
                x = float(rng.integers(0, width - int(w)))
                y = float(rng.integers(0, height - int(h)))
                crowd = rng.random() < 0.01
                if crowd:  # an uncompressed RLE, as COCO's crowd regions are
                    runs = rng.integers(1, 400, int(rng.integers(40, 200))).tolist()
                    segmentation = json.dumps({"counts": runs, "size": [height, width]},
                                              separators=(",", ":"))
                else:
                    segmentation = _polygon_text(rng, x, y, w, h)
                ann_id += 1
                out.write(("," if ann_id > 1 else "") +
                          f'{{"segmentation":{segmentation},"area":{round(w * h * 0.6, 4)!r},'
                          f'"iscrowd":{int(crowd)},"image_id":{image_id},'
                          f'"bbox":[{x!r},{y!r},{w!r},{h!r}],'
                          f'"category_id":{category_ids[ann_id % len(category_ids)]},'
                          f'"id":{100000 + ann_id}}}')
        out.write('],"categories":' + json.dumps(
            [{"supercategory": c["supercategory"], "id": c["id"], "name": c["name"]}
             for c in table], separators=(",", ":")) + "}")
    os.replace(tmp, path)


def ensure_coco(workdir: str) -> str:
    root = os.path.join(workdir, "coco")
    if not done(root):
        from concurrent.futures import ProcessPoolExecutor

        paths = [os.path.join(root, "coco", "annotations", f"instances_{s}2014.json")
                 for s in COCO_SIZES]
        with ProcessPoolExecutor(2) as pool:
            list(pool.map(write_coco_annotations, paths, list(COCO_SIZES)))
        mark(root)
    return root


# ---- ImageNet-C ---------------------------------------------------------------------------------

def ensure_imagenet_c(workdir: str) -> str:
    from proactivebench_builder.core.manifests import load_data_file

    root = os.path.join(workdir, "imagenet_c")
    if done(root):
        return root
    info = corpus.manifest("imagenet_c")
    corruptions = list(info["corruption_actions"]) + list(EXTRA_CORRUPTIONS)
    wnids = sorted(load_data_file(info["class_names_file"]))
    base = os.path.join(root, info["source_subdir"])
    for c_index, corruption in enumerate(corruptions):
        for severity in range(1, 6):
            for wnid in wnids:
                folder = os.path.join(base, corruption, str(severity), wnid)
                os.makedirs(folder, exist_ok=True)
                if c_index == 0 and severity == 5:
                    for i in range(IMAGES_PER_CLASS):
                        number = 1 + (int(hashlib.md5(wnid.encode()).hexdigest()[:6], 16)
                                      + i * 997) % 50000
                        open(os.path.join(folder, f"ILSVRC2012_val_{number:08d}.JPEG"),
                             "wb").close()
    mark(root)
    return root


# ---- ChangeIt -----------------------------------------------------------------------------------

def video_labels(seconds: int) -> list[int]:
    """Background, state 1, action, state 2, as the real annotations run."""
    cuts = [0, round(seconds * 0.15), round(seconds * 0.35), round(seconds * 0.7), seconds]
    return [label for label in range(4) for _ in range(cuts[label], cuts[label + 1])]


def encode_video(path: str, seconds: int, seed: str) -> None:
    """H.264 (libx264, the binary imageio-ffmpeg ships), 25 fps, a keyframe every 4 s: a
    smooth scene panning slowly with a moving object, so motion compensation has real work."""
    import imageio_ffmpeg

    width, height = VIDEO_SIZE
    rng = corpus.seeded("real/changeit", seed)
    scene = corpus.photo_pixels(rng, width + 400, height, 10)
    writer = imageio_ffmpeg.write_frames(
        path + ".tmp.mp4", (width, height), fps=VIDEO_FPS, codec="libx264", quality=None,
        bitrate=None, pix_fmt_out="yuv420p", macro_block_size=8,
        output_params=["-g", str(VIDEO_FPS * KEYFRAME_S), "-crf", "26", "-preset", "veryfast"],
        ffmpeg_log_level="error")
    writer.send(None)
    frames = seconds * VIDEO_FPS
    for f in range(frames):
        shift = int(400 * f / frames)
        frame = scene[:, shift:shift + width].copy()
        x = 20 + int((width - 160) * f / frames)
        frame[120:260, x:x + 120] = (40, 90, 220)
        writer.send(np.ascontiguousarray(frame))
    writer.close()
    os.replace(path + ".tmp.mp4", path)


def ensure_changeit(workdir: str, videos: int, seconds: int) -> dict[str, str]:
    """Two roots with the same repository CSVs and annotations: "videos" holds the encoded
    videos (downloads/), "frames" their 1 fps frames pre-extracted as JPEG (frames/)."""
    from proactivebench_builder.transforms.changeit.csvs import ANNOTATION_SUFFIX, LABELS_CSV

    roots = {kind: os.path.join(workdir, f"changeit-{kind}-{videos}x{seconds}s")
             for kind in ("videos", "frames")}
    if all(done(r) for r in roots.values()):
        return roots
    info = corpus.manifest("changeit")
    table = info["categories_table"]
    categories = [d for d, _, _ in table if d in info["objects"]]
    labels = video_labels(seconds)
    annotation = "".join(f"{s},{label}\n" for s, label in enumerate(labels)).encode()
    ids = {}
    for v in range(videos):
        ids.setdefault(categories[v % len(categories)], []).append(
            hashlib.md5(f"real/{v}".encode()).hexdigest()[:11])
    for kind, root in roots.items():
        base = os.path.join(root, info["source_subdir"])
        lines = ["DIR_NAME,ACTION_NAME,CENTERING_PARAM"] + [f'{d},"{a}",{t}' for d, a, t in table]
        corpus.write_file(os.path.join(base, "categories.csv"), ("\n".join(lines) + "\n").encode())
        corpus.write_file(os.path.join(base, "labels.csv"), LABELS_CSV.encode())
        for category, video_ids in ids.items():
            corpus.write_file(os.path.join(base, "videos", f"{category}.csv"),
                              "\n".join(f"{i},0.500" for i in video_ids).encode())
            for video_id in video_ids:
                corpus.write_file(os.path.join(base, "annotations", category,
                                               video_id + ANNOTATION_SUFFIX), annotation)
    video_base = os.path.join(roots["videos"], info["source_subdir"],
                              info["parameters"]["video_dir"])
    frame_base = os.path.join(roots["frames"], info["source_subdir"],
                              info["parameters"]["frames_dir"])
    for category, video_ids in ids.items():
        for video_id in video_ids:
            path = os.path.join(video_base, category, f"{video_id}.mp4")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.exists(path):
                encode_video(path, seconds, video_id)
            extract_frames(path, os.path.join(frame_base, category, video_id), seconds)
    for root in roots.values():
        mark(root)
    return roots


def extract_frames(video: str, folder: str, seconds: int) -> None:
    """The 1 fps frames (the first frame at or after each second), decoded sequentially."""
    import cv2

    os.makedirs(folder, exist_ok=True)
    capture = cv2.VideoCapture(video)
    second, index = 0, 0
    while second < seconds:
        ok, frame = capture.read()
        if not ok:
            break
        if index >= second * VIDEO_FPS:
            cv2.imwrite(os.path.join(folder, f"{second}.jpg"), frame,
                        [cv2.IMWRITE_JPEG_QUALITY, 90])
            second += 1
        index += 1
    capture.release()


# ---- ROD ----------------------------------------------------------------------------------------

def ensure_rod(workdir: str, sequences: int, side: int = 3024) -> str:
    root = os.path.join(workdir, f"rod-{sequences}x{side}")
    if not done(root):
        corpus.write_rod(root, sequences / corpus.FULL_SCALE["rod"], {"rod_side": side})
        mark(root)
    return root
