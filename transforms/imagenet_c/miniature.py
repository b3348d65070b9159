"""ImageNet-C's miniature source: `<corruption>/<severity>/<wnid>/ILSVRC2012_val_XXXXXXXX.JPEG`:
procedural clean images (a class-specific shape on a gradient), corrupted by simple
deterministic versions of six ImageNet-C corruptions at five strengths, saved as JPEG q85 like
the release. An "ImageNet-C-like" fixture: the layout and format are real, the pixels are not."""
from __future__ import annotations

import io
import random

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from proactivebench_builder.transforms.api import fileio, hash_rank


def write_miniature(root: str, params: dict, seed: int = 0) -> None:
    size = int(params["miniature_size"])
    per_class = int(params["miniature_images_per_class"])
    for w_index, wnid in enumerate(params["miniature_wnids"]):
        for i in range(per_class):
            number = 1 + w_index * 1000 + i * 37
            name = f"ILSVRC2012_val_{number:08d}.JPEG"
            clean = _clean_image(random.Random(f"{seed}/{wnid}/{i}"), w_index, size)
            for corruption in params["miniature_corruptions"]:
                for severity in range(1, 6):
                    noise_seed = hash_rank(seed, wnid, corruption, f"{i}/{severity}") % 2**32
                    image = _corrupt(clean, corruption, severity,
                                     np.random.default_rng(noise_seed))
                    out = io.BytesIO()
                    image.save(out, format="JPEG", quality=85)
                    fileio.write_bytes_atomic(
                        fileio.join(root, corruption, str(severity), wnid, name), out.getvalue())


def _clean_image(rng: random.Random, class_index: int, size: int) -> Image.Image:
    top = tuple(rng.randint(60, 200) for _ in range(3))
    image = Image.new("RGB", (size, size), top)
    draw = ImageDraw.Draw(image)
    for y in range(size // 2, size):
        shade = tuple(max(0, c - (y - size // 2) * 2) for c in top)
        draw.line([(0, y), (size, y)], fill=shade)
    colour = [(200, 40, 40), (240, 240, 240), (40, 40, 200), (250, 150, 20)][class_index % 4]
    c, r = size // 2 + rng.randint(-6, 6), size // 4 + rng.randint(-3, 3)
    shape = class_index % 3  # a class-specific shape, so classes differ visibly
    if shape == 0:
        draw.ellipse((c - r, c - r, c + r, c + r), fill=colour)
    elif shape == 1:
        draw.rectangle((c - r, c - r, c + r, c + r), fill=colour)
    else:
        draw.polygon([(c, c - r), (c + r, c + r), (c - r, c + r)], fill=colour)
    return image


def _corrupt(image: Image.Image, corruption: str, severity: int, rng) -> Image.Image:
    s = severity
    if corruption == "gaussian_noise":
        pixels = np.asarray(image, dtype=np.float32) / 255.0
        sigma = (0.08, 0.12, 0.18, 0.26, 0.38)[s - 1]
        noisy = np.clip(pixels + rng.normal(0.0, sigma, pixels.shape), 0, 1)
        return Image.fromarray((noisy * 255).astype(np.uint8))
    if corruption == "defocus_blur":
        return image.filter(ImageFilter.GaussianBlur((0.6, 1.0, 1.5, 2.0, 2.6)[s - 1]))
    if corruption == "brightness":
        return ImageEnhance.Brightness(image).enhance((1.2, 1.4, 1.6, 1.8, 2.0)[s - 1])
    if corruption == "contrast":
        return ImageEnhance.Contrast(image).enhance((0.4, 0.3, 0.2, 0.1, 0.05)[s - 1])
    if corruption == "jpeg_compression":
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=(25, 18, 15, 10, 7)[s - 1])
        return Image.open(io.BytesIO(out.getvalue())).convert("RGB")
    if corruption == "pixelate":
        w, h = image.size
        f = (0.6, 0.5, 0.4, 0.3, 0.25)[s - 1]
        small = image.resize((max(1, int(w * f)), max(1, int(h * f))), Image.BOX)
        return small.resize((w, h), Image.BOX)
    raise ValueError(f"no miniature version of corruption {corruption!r}")
