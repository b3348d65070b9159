"""ImageNet-C (`ImageNet-C`): a heavily corrupted image; the model should ask for the right
quality enhancement.

Raw source: the extracted Zenodo release, `<corruption>/<severity>/<wnid>/<file>.JPEG`. A sample
is one validation image under one corruption: frames are its five severities, shown from 5 (the
first frame) down to 1 (the reference), the `{level}` template slot. `samples_per_class` images
per class are drawn by hash rank; each sample's corruption is drawn from the corruptions present
under the root, seeded by its key. The options are the enhancement that undoes that corruption
(`quality_answer`, the only valid move upstream), three enhancements for other corruptions, and
an abstain option, shuffled together. JPEG bytes pass through unchanged.
"""
from __future__ import annotations

import io
import random

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from proactivebench_builder.core import fileio
from proactivebench_builder.core.seeding import hash_rank
from proactivebench_builder.transforms.base import Scenario, SourceError
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.vocabulary import format_category

SEVERITIES = (5, 4, 3, 2, 1)  # play order: most severe first, mildest is the reference

QUESTIONS = (
    "What type of object do you see here?",
    "Provide the classification of the object in the image.",
    "What is the main object in this image?",
    "Which object is shown in the picture?",
    "Identify the object in this image.",
    "What category does the object in the image belong to?",
    "Can you tell me what this image shows?",
    "What is depicted in this photo?",
    "Name the object visible in the image.",
    "What kind of object is this?",
    "Classify the object in this picture.",
    "What is the subject of this image?",
    "Which class best describes the object in the image?",
    "What object can be seen in this image?",
    "Tell me the category of the object in this photo.",
)


def is_image_name(name: str) -> bool:
    return name.lower().endswith((".jpeg", ".jpg"))


class ImageNetC(Scenario):
    name = "imagenet_c"
    config_name = "ImageNet-C"
    # How upstream's environment plays ImageNet-C (runtime.behaviours; texts from upstream).
    environment = Play(
        actions={"BRIGHTNESS": ("brightness",), "CONTRAST": ("contrast",),
                 "SATURATE": ("saturation",), "BLUR": ("deblur",), "NOISE": ("denoise",),
                 "JPEG_COMPRESSION": ("compression",), "PIXELATE": ("resolution",),
                 "ARTIFACTS": ("artifacts",)},
        behaviour="quality_ladder", moves=dict.fromkeys(
            ("BRIGHTNESS", "CONTRAST", "SATURATE", "BLUR", "NOISE", "JPEG_COMPRESSION",
             "PIXELATE", "ARTIFACTS"), -1),   # each accepted request: one severity milder
        last_turn="category",
        hint="Hint: enhancing the image quality could help with classification.",
        short_name="IN-C", prediction_threshold=1, keyword_matching="substring",
        suggestions=("Increase the brightness.", "Increase the contrast.",
                     "Increase the saturation.", "Deblur the image.", "Denoise the image.",
                     "Remove the JPEG compression.", "Increase image resolution.",
                     "Remove the artifacts."))

    def __init__(self, seed: int, source_root: str):
        super().__init__(seed, source_root)
        self.corruption_actions = dict(self.manifest["corruption_actions"])
        self.enhancements = dict(self.manifest["enhancements"])
        self.class_names = self.data_file(self.manifest["class_names_file"])
        self._present: list[str] | None = None

    def present_corruptions(self) -> list[str]:
        """The manifest's corruptions that exist under the root, in manifest order. Listed once
        per instance: every one of the 1,000 units asks, and the root does not change."""
        if self._present is None:
            present = set(fileio.list_names(self.root))
            self._present = [c for c in self.corruption_actions if c in present]
        return list(self._present)

    def list_units(self) -> list[str]:
        corruptions = self.present_corruptions()
        if not corruptions:
            raise SourceError(f"imagenet_c: no corruption folders ({', '.join(self.corruption_actions)})"
                              f" under {self.root}")
        wnids = set()
        for corruption in corruptions:
            wnids.update(fileio.list_names(self.path(corruption, "5")))
        return sorted(wnids)

    def read_unit(self, wnid: str):
        """Raw items are the class's validation images, as listed under the first present
        corruption that has the class (all corruptions share file names)."""
        corruptions = self.present_corruptions()
        names = []
        for corruption in corruptions:
            names = self.list_source(self.path(corruption, "5", wnid))
            if names:
                break
        if wnid not in self.class_names:
            for name in names or [""]:
                yield self.count("raw_items")
                yield self.dead_letter(self.path(corruptions[0], "5", wnid, name),
                                       f"unknown class: wnid {wnid!r} is not an ImageNet-1k class")
            return
        eligible = []
        for name in names:
            yield self.count("raw_items")
            if not is_image_name(name):
                yield self.dead_letter(self.path(corruptions[0], "5", wnid, name),
                                       "not an image file name (expected .JPEG)")
                continue
            eligible.append(name)
        k = int(self.params["samples_per_class"])
        ranked = sorted(eligible, key=lambda n: hash_rank(self.seed, self.name, "test",
                                                           f"{wnid}/{n}"))
        if len(ranked) > k:
            yield self.count("excluded:not_sampled", len(ranked) - k)
        for name in sorted(ranked[:k]):
            yield self.candidate(f"ImageNet-C/{wnid}/{name}",
                                 {"wnid": wnid, "file": name, "corruptions": corruptions})

    def build_sample(self, key: str, item: dict) -> dict:
        wnid, name = item["wnid"], item["file"]
        corruption = self.rng(key, "corruption").choice(item["corruptions"])
        urls = [self.path(corruption, str(level), wnid, name) for level in SEVERITIES]
        for url in urls:
            self.validate_file_frame(url)
        action = self.corruption_actions[corruption]
        quality_answer = self.enhancements[action]
        wrong = sorted(set(self.enhancements.values()) - {quality_answer})
        rng = self.rng(key, "wrong_enhancements")
        wrong = rng.sample(wrong, int(self.params["wrong_enhancements"]))
        row = self.new_row(key)
        answer = self.class_names[wnid]
        row.update(
            image_template=f"ImageNet-C/{corruption}/{{level}}/{wnid}/{name}",
            first_image=SEVERITIES[0], num_images=len(SEVERITIES),
            reference_image=SEVERITIES[-1],
            prompt=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, [quality_answer] + wrong),
            categories=self.pick_categories(key, answer, self.class_names.values()),
            answer=format_category(answer),
            quality_answer=quality_answer,
            frame_ids=list(SEVERITIES),
        )
        row["source"]["files"] = [self.relative(u) for u in urls]
        row["frame_refs"] = [{"kind": "file", "url": u} for u in urls]
        return row

    def frame_path(self, row: dict, frame_id: int) -> str:
        return row["image_template"].format(level=frame_id)

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        """`<corruption>/<severity>/<wnid>/ILSVRC2012_val_XXXXXXXX.JPEG`: procedural clean images
        (a class-specific shape on a gradient), corrupted by simple deterministic versions of
        six ImageNet-C corruptions at five strengths, saved as JPEG q85 like the release.
        An "ImageNet-C-like" fixture: the layout and format are real, the pixels are not."""
        params = cls.read_manifest()["parameters"]
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

