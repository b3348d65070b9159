"""The ImageNet-C scenario: per class, the validation images drawn by hash rank; a sample's
frames are one image under one corruption at its five severities (the folder's docstring)."""
from __future__ import annotations

from proactivebench_builder.transforms.api import (Scenario, SourceError, fileio, format_category,
                                                   hash_rank, template_literal)
from proactivebench_builder.transforms.imagenet_c import miniature
from proactivebench_builder.transforms.imagenet_c.play import PLAY, SEVERITIES

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
    environment = PLAY  # how it plays (play.py)

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
            image_template=(template_literal(f"ImageNet-C/{corruption}/") + "{level}"
                            + template_literal(f"/{wnid}/{name}")),
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

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        miniature.write_miniature(root, cls.read_manifest()["parameters"], seed)
