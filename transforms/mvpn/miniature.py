"""MVP-N's miniature source: `data/{train,valid,test}/<class>/<set>/<view:04d>_<mark>.png`
(32x32 RGB PNG, one informative view per set, not always the last) and `data/{valid,test}_list/`
pickles of 2-4 paths per sample, the informative view listed at varying positions."""
from __future__ import annotations

import io
import pickle
import random

from PIL import Image, ImageDraw

from proactivebench_builder.transforms.api import fileio


def write_miniature(root: str, params: dict, seed: int = 0) -> None:
    for split in ("train", "valid", "test"):
        for c_index, class_folder in enumerate(params["miniature_classes"]):
            rng = random.Random(f"{seed}/mvpn/{split}/{class_folder}")
            sets = _write_miniature_sets(root, split, class_folder, c_index, rng, params)
            if split != "train":
                count = int(params["miniature_samples_per_list"])
                samples = _miniature_samples(sets, rng, count)
                fileio.write_bytes_atomic(
                    fileio.join(root, "data", f"{split}_list", f"{split}_{class_folder}_100.pkl"),
                    pickle.dumps(samples, protocol=3))


def _write_miniature_sets(root, split, class_folder, c_index, rng, params) -> list[list[str]]:
    """Writes the set folders of one class; returns each set's relative paths."""
    size = int(params["miniature_image_size"])
    n_views = int(params["miniature_views_per_set"])
    sets = []
    for s in range(int(params["miniature_sets_per_class"])):
        informative_at = rng.randrange(n_views)
        paths = []
        for v in range(n_views):
            mark = int(v == informative_at)
            rel = f"{class_folder}/{s:04d}/{v:04d}_{mark}.png"
            data = _miniature_view(c_index, v, mark, size)
            fileio.write_bytes_atomic(fileio.join(root, "data", split, rel), data)
            paths.append(rel)
        sets.append(paths)
    return sets


def _miniature_samples(sets, rng, count) -> list[list[str]]:
    """Samples of 2-4 views of one set, each holding its set's single informative view."""
    samples = []
    for k in range(count):
        views = sets[k % len(sets)]
        informative = [p for p in views if p.endswith("_1.png")][0]
        others = [p for p in views if p != informative]
        chosen = rng.sample(others, 1 + k % len(others)) + [informative]
        rng.shuffle(chosen)
        samples.append(chosen)
    return samples


def _miniature_view(c_index: int, view: int, mark: int, size: int) -> bytes:
    """A box silhouette in the class colour, seen from a slightly different side per view; the
    informative view adds a label pattern unique to the class (so only it tells classes apart)."""
    colour = (60 + 40 * (c_index % 4), 90, 200 - 30 * (c_index % 5))
    image = Image.new("RGB", (size, size), (235, 235, 235))
    draw = ImageDraw.Draw(image)
    inset = 4 + view % 3
    draw.rectangle((inset, 6, size - 1 - inset, size - 6), fill=(110, 110, 110))
    if mark:
        draw.rectangle((8, 10, size - 9, size - 10), fill=colour)
        for stripe in range(c_index % 5 + 1):
            y = 12 + 3 * stripe
            draw.line((10, y, size - 11, y), fill=(255, 255, 255), width=1)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
