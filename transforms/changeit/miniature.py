"""ChangeIt's miniature source: the repository files in their real format and, per annotated
video, its frames or its video, every second painted with its label's colour."""
from __future__ import annotations

import hashlib
import os
import random
import sys
import tempfile

import numpy as np

from proactivebench_builder.transforms.api import fileio
from proactivebench_builder.transforms.changeit.csvs import ANNOTATION_SUFFIX, LABELS_CSV
from proactivebench_builder.transforms.changeit.video import VideoReader, encode_jpeg


def write_miniature(root: str, manifest: dict, seed: int = 0) -> None:
    """The repository files in their real format (categories.csv and labels.csv byte for byte,
    id lists without a final newline, annotations with one), and per annotated video its frames
    or its video, every second painted with its label's colour (0 grey, 1 blue, 2 yellow,
    3 green) so tests can check frame/annotation alignment. Covers: an id starting with '-',
    an id in two categories, a video without state1, one without the action, one that starts
    informative, pre-extracted frames, an mp4 and a webm."""
    table = manifest["categories_table"]
    lines = ["DIR_NAME,ACTION_NAME,CENTERING_PARAM"] + [f'{d},"{a}",{t}' for d, a, t in table]
    fileio.write_bytes_atomic(fileio.join(root, "categories.csv"),
                              ("\n".join(lines) + "\n").encode("utf-8"))
    fileio.write_bytes_atomic(fileio.join(root, "labels.csv"), LABELS_CSV.encode("utf-8"))
    rng = random.Random(f"{seed}/changeit")
    by_category: dict[str, list] = {}
    for video in MINIATURE_VIDEOS:
        by_category.setdefault(video["category"], []).append(video)
    for category in manifest["parameters"]["miniature_categories"]:
        videos = by_category.get(category, [])
        _write_video_list(root, category, [v["id"] for v in videos], rng)
        for video in videos:
            labels = _expand_runs(video["runs"])
            text = "".join(f"{s},{label}\n" for s, label in enumerate(labels))
            fileio.write_bytes_atomic(
                fileio.join(root, "annotations", category, video["id"] + ANNOTATION_SUFFIX),
                text.encode("ascii"))
            _write_media(root, manifest["parameters"], video, labels)


# The miniature's annotated videos: label runs as (label, seconds) and how their frames are given.
MINIATURE_VIDEOS = (
    {"category": "apple", "id": "-aB3dE5fG7h", "media": "frames",
     "runs": [(0, 10), (1, 7), (2, 15), (3, 10)]},                  # 42 s: step 3
    {"category": "apple", "id": "Qw3_rTy8uIo", "media": "mp4",
     "runs": [(1, 3), (2, 4), (3, 5), (0, 2)]},                     # starts informative (object)
    {"category": "beer", "id": "Qw3_rTy8uIo", "media": "frames",
     "runs": [(0, 5), (2, 4), (3, 9)]},                             # same id as apple's; no state1
    {"category": "beer", "id": "Zx9-cVb7nM1", "media": "webm",
     "runs": [(0, 4), (1, 4), (3, 4)]},                             # no action
    {"category": "tie", "id": "Lm4kJh8gF2d", "media": "mp4",
     "runs": [(0, 6), (1, 2), (2, 8), (3, 6)]},                     # 22 s: step 2
)


LABEL_COLOURS_RGB = {0: (128, 128, 128), 1: (0, 0, 255), 2: (255, 255, 0), 3: (0, 160, 0)}


MINIATURE_SIZE = (64, 48)   # width, height


MINIATURE_FPS = 4


def _expand_runs(runs) -> list[int]:
    return [label for label, length in runs for _ in range(length)]


def _write_video_list(root: str, category: str, annotated: list[str], rng: random.Random) -> None:
    """`<id>,<score>` lines sorted by score, no final newline; a few unannotated ids too (the real
    lists hold hundreds of training videos per category)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    ids = list(annotated) + ["".join(rng.choice(alphabet) for _ in range(11)) for _ in range(3)]
    scored = sorted(((round(rng.uniform(0.053, 0.752), 3), i) for i in ids), reverse=True)
    text = "\n".join(f"{i},{score:.3f}" for score, i in scored)
    fileio.write_bytes_atomic(fileio.join(root, "videos", f"{category}.csv"), text.encode("ascii"))


def _painted_frame(label: int, second: int, sub: int = 0):
    """A frame in its label's colour with a white marker whose position encodes the second."""
    width, height = MINIATURE_SIZE
    r, g, b = LABEL_COLOURS_RGB[label]
    frame = np.empty((height, width, 3), np.uint8)
    frame[:] = (b, g, r)
    x = (second * 5) % (width - 8)
    frame[2:8, x:x + 6] = 255
    frame[height - 4:, : (sub + 1) * 4] = 0  # sub-second ticks, so frames inside a second differ
    return frame


def _write_media(root: str, params: dict, video: dict, labels: list[int]) -> None:
    import cv2

    category, video_id = video["category"], video["id"]
    if video["media"] == "frames":
        for second, label in enumerate(labels):
            data = encode_jpeg(_painted_frame(label, second), 90)
            fileio.write_bytes_atomic(
                fileio.join(root, params["frames_dir"], category, video_id, f"{second}.jpg"), data)
        return
    fourcc = {"mp4": "mp4v", "webm": "VP80"}[video["media"]]
    folder = os.path.join(root, params["video_dir"], category)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{video_id}.{video['media']}")
    writer = _open_video_writer(cv2, path, fourcc)
    if not writer.isOpened():
        raise RuntimeError(f"changeit: OpenCV cannot write {video['media']} video {path}")
    for second, label in enumerate(labels):
        for sub in range(MINIATURE_FPS):
            writer.write(_painted_frame(label, second, sub))
    writer.release()
    if video["media"] == "webm":
        _fix_matroska_track_uid(path, f"{category}/{video_id}")
    check = VideoReader(path)
    try:
        if not check.is_open() or check.frame_at(len(labels) - 1) is None:
            raise RuntimeError(f"changeit: the miniature video {path} does not decode")
    finally:
        check.close()


def _open_video_writer(cv2, path: str, fourcc: str):
    """OpenCV's FFmpeg backend prints (with a bare fprintf to stderr, which no log level
    reaches) that the WebM muxer has no tag for 'VP80', then writes VP8, the codec asked for.
    That line means nothing to a user whose first build writes the miniature, so stderr is
    captured at the descriptor while the writer opens and every other line is passed on."""
    notice = f"OpenCV: FFMPEG: tag 0x{cv2.VideoWriter_fourcc(*fourcc):08x}/'{fourcc}' is not " \
             "supported with codec id"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            return cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), MINIATURE_FPS,
                                   MINIATURE_SIZE)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not line.startswith(notice):
                    sys.stderr.write(line)


def _fix_matroska_track_uid(path: str, name: str) -> None:
    """FFmpeg's Matroska muxer draws a random TrackUID (written in the track entry and its tag);
    replace it with one derived from the video's name, so the miniature is byte-identical on
    every run (OpenCV's writer offers no bitexact flag)."""
    with open(path, "rb") as handle:
        data = handle.read()
    at = data.find(b"\x73\xc5\x88")  # TrackUID element, 8-byte payload
    if at < 0:
        return
    uid = data[at + 3: at + 11]
    fixed = b"\x01" + hashlib.md5(name.encode("utf-8")).digest()[:7]
    with open(path, "wb") as handle:
        handle.write(data.replace(uid, fixed))
