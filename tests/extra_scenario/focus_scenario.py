"""Focus (`Focus`): a scenario defined only under tests/, made visible to the registry the
documented way (PROACTIVEBENCH_SCENARIO_PATH names this folder; tests/conftest.py sets it), to
prove that one module plus one manifest (`focus.yaml`, beside this file) is a whole scenario:
it builds, validates, filters, exports, and the runtime plays it, with no other file edited. It
imports from the scenario author's API (`transforms.api`) alone.

Raw source: `<root>/images/<class>/<item>/<k>.png`, k = 0 .. frames_per_item - 1, frame 0 the
most out-of-focus and the last one sharp (the reference). The model should ask to sharpen the
picture. Its environment is the generic frame ladder (each accepted request moves one frame
toward the reference; on the last turn only the category counts), declared below with a new
action, SHARPEN, whose keywords are new words. One of its option texts says "Sharpen up": the
"up" there is not COCO's UP, because matching is scoped to the scenario's own actions.
"""
from __future__ import annotations

import io
import os

from PIL import Image, ImageDraw, ImageFilter

from proactivebench_builder.transforms.api import (Play, Scenario, SourceError, fileio,
                                                   format_category)

QUESTIONS = ("What shape is shown?", "Which shape is in the picture?")


def unpadded_path(row: dict, frame_id: int) -> str:
    """Where a frame lives in the upstream export: `{image}` is the plain frame number."""
    return row["image_template"].format(image=frame_id)

SUGGESTIONS = ("Sharpen up the picture.", "Bring the image into focus.")


class Focus(Scenario):
    name = "focus"
    config_name = "Focus"
    environment = Play(
        actions={"SHARPEN": ("sharpen", "focus")},
        hint="Hint: sharpening the picture could help with classification.",
        short_name="FOC", open_ended_suggestions=("Sharpen the picture",),
        suggestions=SUGGESTIONS, frame_path=unpadded_path)

    def list_units(self) -> list[str]:
        names = fileio.list_names(self.path("images"))
        if not names:
            raise SourceError(f"focus: no class folders under {self.path('images')}")
        return sorted(names)

    def read_unit(self, cls: str):
        known = set(self.manifest["classes"])
        for item in sorted(fileio.list_names(self.path("images", cls))):
            yield self.count("raw_items")
            if cls not in known:
                yield self.dead_letter(self.path("images", cls, item), f"unknown class {cls!r}")
                continue
            yield self.candidate(f"{self.config_name}/{cls}/{item}", {"cls": cls, "item": item})

    def build_sample(self, key: str, item: dict) -> dict:
        n = int(self.params["frames_per_item"])
        urls = [self.path("images", item["cls"], item["item"], f"{k}.png") for k in range(n)]
        for url in urls:
            self.validate_file_frame(url)          # raises BadItem: a dead letter, not a crash
        row = self.new_row(key)
        row.update(
            image_template=f"Focus/{item['cls']}/{item['item']}/{{image}}.png",
            first_image=0, num_images=n, reference_image=n - 1,
            prompt=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, [self.pick_prompt(key, SUGGESTIONS, "suggestion")]),
            categories=self.pick_categories(key, item["cls"], self.manifest["classes"]),
            answer=format_category(item["cls"]), frame_ids=list(range(n)))
        row["source"]["files"] = [self.relative(u) for u in urls]
        row["frame_refs"] = [{"kind": "file", "url": u} for u in urls]
        return row

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        params = cls.read_manifest()["parameters"]
        size, n = int(params["miniature_size"]), int(params["frames_per_item"])
        for shape in params["miniature_classes"]:
            for number in range(int(params["miniature_items_per_class"])):
                folder = os.path.join(root, "images", shape, f"item{number}")
                os.makedirs(folder)
                sharp = draw_shape(shape, size, number)
                for k in range(n):
                    radius = 2.0 * (n - 1 - k)
                    frame = sharp.filter(ImageFilter.GaussianBlur(radius)) if radius else sharp
                    out = io.BytesIO()
                    frame.save(out, format="PNG")
                    with open(os.path.join(folder, f"{k}.png"), "wb") as handle:
                        handle.write(out.getvalue())


def draw_shape(shape: str, size: int, number: int) -> Image.Image:
    image = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    m = size // 6 + number
    colour = (40 * number % 256, 90, 160)
    if shape == "circle":
        draw.ellipse((m, m, size - m, size - m), fill=colour)
    elif shape == "triangle":
        draw.polygon([(size // 2, m), (m, size - m), (size - m, size - m)], fill=colour)
    elif shape == "rectangle":
        draw.rectangle((m, size // 3, size - m, size - size // 3), fill=colour)
    elif shape == "star":
        draw.regular_polygon((size // 2, size // 2, size // 2 - m), 5, fill=colour)
        draw.regular_polygon((size // 2, size // 2, size // 2 - m), 5, rotation=36, fill=colour)
    else:
        draw.rectangle((m, m, size - m, size - m), fill=colour)
    return image
