"""ROD's miniature source: the Hugging Face repo layout, two tar.gz archives of JPEG sweeps
(mixed sizes, flat and nested member paths, a class with a space), `classes_rod.py`,
`dataset_info.json`, README.md."""
from __future__ import annotations

import gzip
import io
import json
import random
import tarfile

from PIL import Image, ImageDraw

from proactivebench_builder.transforms.api import fileio


def write_miniature(root: str, manifest: dict, seed: int = 0) -> None:
    """The HF repo layout: two tar.gz archives of JPEG sweeps (mixed sizes, flat and nested
    member paths, a class with a space), `classes_rod.py`, `dataset_info.json`, README.md.
    As in the real download, frame s6 of banana / natural_bluebl_greenr is absent."""
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

# ---- helpers (also used by the tests) ----------------------------------------------------------

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
