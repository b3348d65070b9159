"""The COCO 2014 scenario: single-object images, each a sample whose views the environment crops
(the folder's docstring says how crops are made and what is left out)."""
from __future__ import annotations

import copy
import io
import logging
import math
import posixpath
from collections import Counter

from PIL import Image

from proactivebench_builder.transforms.api import (BadItem, Candidate, Scenario, SourceError,
                                                   fileio, format_category, hash_rank)
from proactivebench_builder.transforms.coco import miniature
from proactivebench_builder.transforms.coco.annotations import (
    AnnotationIndex, ImageObjects, forget_indexes, is_int, load_index, shard_of)
from proactivebench_builder.transforms.coco.crops import CropPlan, CropRules, plan_crop
from proactivebench_builder.transforms.coco.play import PLAY, crop_box, proactive_options, step_cap

LOG = logging.getLogger(__name__)

QUESTIONS = (
    "Classify the visual content of this image.",
    "Identify the object in this image.",
    "What object is shown in this image?",
    "What is the main object in this picture?",
    "Which category does the object in this image belong to?",
    "What is depicted in this image?",
    "Name the object in this photo.",
    "What kind of object can be seen in this image?",
    "Tell me the category of the object in this picture.",
    "What is the object in this photograph?",
    "Recognize the object shown in this image.",
    "What does this image contain?",
    "Determine the category of the object in the image.",
    "Which object appears in this photo?",
    "What is this an image of?",
)


SPLITS = ("val", "train")


# ---- distractors ---------------------------------------------------------------------------

def trigrams(name: str) -> Counter:
    padded = f"  {name.lower()} "
    return Counter(padded[i:i + 3] for i in range(len(padded) - 2))


def text_similarity(a: str, b: str) -> float:
    """Cosine similarity of character-trigram counts: a fixed stand-in for a text encoder."""
    ta, tb = trigrams(a), trigrams(b)
    dot = sum(ta[t] * tb[t] for t in ta)
    norm = math.sqrt(sum(v * v for v in ta.values())) * math.sqrt(sum(v * v for v in tb.values()))
    return dot / norm if norm else 0.0


def category_similarity(a: dict, b: dict, affinity: dict) -> float:
    same = a["supercategory"] == b["supercategory"]
    related = b["supercategory"] in affinity.get(a["supercategory"], ())
    return 2.0 * same + 1.0 * (related and not same) + text_similarity(a["name"], b["name"])


_NEGATIVES: dict[tuple, list[str]] = {}


def hard_negatives(answer_id: int, table: dict[int, dict], affinity: dict, k: int) -> list[str]:
    """The k category names most similar to the answer's (ties broken by category id).
    Memoised per process on everything the ranking reads: it is the same for every sample of
    a category, and ranking 80 names by trigram similarity took ~3 ms per sample."""
    key = (answer_id, k,
           tuple(sorted((s, tuple(v)) for s, v in affinity.items())),
           tuple(sorted((cid, c["name"], c["supercategory"]) for cid, c in table.items())))
    if key not in _NEGATIVES:
        _NEGATIVES[key] = _rank_negatives(answer_id, table, affinity, k)
    return list(_NEGATIVES[key])


def _rank_negatives(answer_id: int, table: dict[int, dict], affinity: dict, k: int) -> list[str]:
    answer = table[answer_id]
    others = [(-category_similarity(answer, cat, affinity), cid, cat["name"])
              for cid, cat in table.items() if cid != answer_id]
    return [name for _, _, name in sorted(others)[:k]]


class Coco(Scenario):
    name = "coco"
    config_name = "coco2014"
    has_train_split = True
    environment = PLAY  # how it plays (play.py)

    def __init__(self, seed: int, source_root: str):
        super().__init__(seed, source_root)
        self.category_table = {int(c["id"]): dict(c) for c in self.manifest["category_table"]}

    @property
    def split(self) -> str:
        split = str(self.params.get("split", "val"))
        if split not in SPLITS:
            raise SourceError(f"coco: parameters.split must be one of {SPLITS}, got {split!r}")
        return split

    @property
    def image_folder(self) -> str:
        return f"{self.split}2014"

    @property
    def annotation_url(self) -> str:
        return self.path("annotations", f"instances_{self.split}2014.json")

    def list_units(self) -> list[str]:
        if not fileio.exists(self.annotation_url):
            raise SourceError(f"coco: no annotation file {self.annotation_url} (expected "
                              f"annotations/instances_{self.split}2014.json from "
                              f"annotations_trainval2014.zip)")
        self.require_inside_root(self.annotation_url, "the annotation file of every sample")
        self.require_inside_root(self.path(self.image_folder), "the folder of every image")
        if not fileio.is_dir(self.path(self.image_folder)):
            raise SourceError(f"coco: no image folder {self.path(self.image_folder)} (expected "
                              f"{self.image_folder}/ from {self.image_folder}.zip)")
        n = int(self.params["read_shards"])
        return [f"{self.annotation_url}#shard={i}/{n}" for i in range(n)]

    # -- raw reading --------------------------------------------------------------------------

    def read_unit(self, unit: str):
        url, _, spec = unit.partition("#shard=")
        shard, shards = (int(v) for v in spec.split("/"))
        index = load_index(self.inside_root(url))  # checked again: the unit's dead letter
        where = self.relative(url)
        for position, (location, reason) in enumerate(index.malformed):
            if shard_of(position, shards) == shard:
                yield self.count("raw_items")
                yield self.dead_letter(f"{url}#{location}", reason)
        for image_id in sorted(index.images):
            if shard_of(image_id, shards) == shard:
                yield from self._read_image(index, image_id, url, where)
        for image_id, ann_ids in sorted(index.orphans.items()):
            if shard_of(image_id, shards) == shard:
                yield self.count("raw_items")
                yield self.dead_letter(f"{url}#image_id={image_id}",
                                       f"annotation(s) {ann_ids} name image id {image_id}, "
                                       f"which images[] does not list")

    def _read_image(self, index: AnnotationIndex, image_id: int, url: str, where: str):
        yield self.count("raw_items")
        location = f"{url}#image_id={image_id}"
        try:
            image = self._image_record(index.images[image_id])
            count, annotation = self._objects(index, image_id)
            if count == 0:
                yield self.count("excluded:no_annotation")
                return
            if count > 1:
                yield self.count("excluded:multiple_objects")
                return
            if annotation.get("iscrowd", 0):
                yield self.count("excluded:crowd_annotation")
                return
            item = self._candidate_item(index, image, annotation, where)
        except BadItem as err:
            yield self.dead_letter(location, err.reason)
            return
        except (TypeError, ValueError, KeyError, ArithmeticError) as err:  # one odd record
            yield self.dead_letter(location, f"malformed record: {type(err).__name__}: {err}")
            return
        yield self.candidate(f"coco2014/{self.image_folder}/{image_id:012d}", item)

    def _objects(self, index: AnnotationIndex, image_id: int) -> tuple[int, dict | None]:
        """(how many annotations count as objects, the lone one when there is one): crowd
        regions count too, unless configured not to."""
        found = index.objects.get(image_id, ImageObjects())
        if self.params.get("count_crowd_annotations", True):
            return found.count, found.single
        return found.count_non_crowd, found.single_non_crowd

    def _image_record(self, image: dict) -> dict:
        width, height, name = image.get("width"), image.get("height"), image.get("file_name")
        if not is_int(width) or not is_int(height) or width < 1 or height < 1:
            raise BadItem(f"malformed image record: width/height {width!r}x{height!r}")
        if not isinstance(name, str) or not name or posixpath.basename(name) != name \
                or name in (".", ".."):
            raise BadItem(f"malformed image record: file_name {name!r}")
        expected = f"COCO_{self.image_folder}_{image['id']:012d}.jpg"
        if self.params.get("check_file_names", True) and name != expected:
            raise BadItem(f"inconsistent image record: file_name {name!r} for image id "
                          f"{image['id']} (expected {expected!r})")
        return {"id": image["id"], "width": width, "height": height, "file_name": name}

    def _candidate_item(self, index: AnnotationIndex, image: dict, ann: dict, where: str) -> dict:
        category_id = ann.get("category_id")
        if not is_int(category_id) or category_id not in self.category_table \
                or category_id not in index.file_categories:
            raise BadItem(f"unknown category id {category_id!r} (annotation {ann['id']})")
        named = index.file_categories[category_id]
        if named != self.category_table[category_id]["name"]:
            # a different category table (another dataset's file?): names would be wrong
            raise BadItem(f"inconsistent category: id {category_id} is {named!r} in the file, "
                          f"{self.category_table[category_id]['name']!r} in the manifest")
        box = self._object_box(ann, image["width"], image["height"])
        side = int(self.params["min_image_side"])
        if min(image["width"], image["height"]) < side:
            raise BadItem(f"image too small for a crop: {image['width']}x{image['height']} "
                          f"(min side {side})")
        return {"image_id": image["id"], "file_name": image["file_name"],
                "width": image["width"], "height": image["height"], "box": box,
                "category_id": category_id, "annotation_id": ann["id"], "annotations": where}

    def _object_box(self, ann: dict, width: int, height: int) -> list[float]:
        """The object box as (left, top, right, bottom) floats, checked against the image."""
        bbox = ann.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in bbox):
            raise BadItem(f"malformed bbox {bbox!r} (annotation {ann['id']})")
        x, y, w, h = (float(v) for v in bbox)
        smallest = float(self.params["min_box_side_px"])
        if w < smallest or h < smallest:
            raise BadItem(f"degenerate box {bbox} (a side below {smallest} px; annotation "
                          f"{ann['id']})")
        tol = float(self.params["bbox_tolerance_px"])
        if x < -tol or y < -tol or x + w > width + tol or y + h > height + tol:
            raise BadItem(f"box outside the image: {bbox} in {width}x{height} "
                          f"(annotation {ann['id']})")
        # within tolerance: clip, so every later check sees a box inside the image
        return [max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h)]

    # -- building a sample --------------------------------------------------------------------

    def build_sample(self, key: str, item: dict) -> dict:
        relative_image = f"{self.image_folder}/{item['file_name']}"
        url = self.path(self.image_folder, item["file_name"])
        _, width, height = self.validate_file_frame(url)
        if (width, height) != (item["width"], item["height"]):
            raise BadItem(f"inconsistent image size: {width}x{height} on disk, "
                          f"{item['width']}x{item['height']} in the annotations", relative_image)
        plan = self.crop_plan(key, item)
        category = self.category_table[item["category_id"]]["name"]
        row = self.new_row(key)
        row.update(
            image_template=f"coco2014/{relative_image}",
            first_image=0, reference_image=0, frame_ids=[0],
            num_images=step_cap(plan.direction, plan.granularity),
            prompt=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, proactive_options(plan.direction)),
            categories=self.pick_categories(key, category, self.distractor_pool(item)),
            answer=format_category(category),
            direction=plan.direction, granularity=plan.granularity,
            horizontal_step=int(plan.horizontal_step), vertical_step=int(plan.vertical_step),
            crop={k: int(v) for k, v in plan.crop.items()},
        )
        row["source"]["files"] = [f"{item['annotations']}#annotation_id={item['annotation_id']}",
                                  relative_image]
        row["frame_refs"] = [{"kind": "file", "url": url}]
        return row

    def crop_plan(self, key: str, item: dict) -> CropPlan:
        """The seeded crop of one sample; BadItem when no direction can be realised."""
        g = self.rng(key, "granularity").randint(int(self.params["granularity_min"]),
                                                 int(self.params["granularity_max"]))
        plan = plan_crop(self.rng(key, "direction"), self.rng(key, "crop"), g, item["width"],
                         item["height"], tuple(item["box"]), self.params["direction_weights"],
                         CropRules.from_params(self.params))
        if plan is None:
            raise BadItem(f"image too small for a crop: no low-IoU start view fits around the "
                          f"object {item['box']} in {item['width']}x{item['height']}",
                          f"{self.image_folder}/{item['file_name']}")
        return plan

    def distractor_pool(self, item: dict) -> list[str]:
        """The answer plus its hard negatives (pick_categories shuffles them by the seed)."""
        answer_id = item["category_id"]
        negatives = hard_negatives(answer_id, self.category_table,
                                   self.params.get("supercategory_affinity", {}),
                                   int(self.params["hard_negatives"]))
        return [self.category_table[answer_id]["name"]] + negatives

    # -- the train split (GRPO) ---------------------------------------------------------------

    def for_split(self, split: str) -> "Coco":
        """The same scenario reading another COCO split (train2014 for the train split)."""
        other = copy.copy(self)
        other.params = dict(self.params, split=split)
        return other

    def list_train_units(self) -> list[str]:
        train = self.for_split("train")
        if not fileio.exists(train.annotation_url):
            LOG.warning("coco: no %s, so the train split has no COCO examples",
                        train.annotation_url)
            return []
        return train.list_units()

    def read_train_unit(self, unit: str):
        """Single-object train2014 images, at most `train_examples / read_shards` per unit,
        picked by hash rank (the train split's size is set in the manifest)."""
        train = self.for_split("train")
        quota = math.ceil(int(self.params["train_examples"]) / int(self.params["read_shards"]))
        candidates = []
        for value in train.read_unit(unit):
            if isinstance(value, Candidate):
                candidates.append(value)
            else:
                yield value
        candidates.sort(key=lambda v: hash_rank(self.seed, self.name, "train", v.key))
        if len(candidates) > quota:
            yield self.count("excluded:not_sampled", len(candidates) - quota)
        yield from sorted(candidates[:quota], key=lambda v: v.key)

    @classmethod
    def reading_done(cls) -> None:
        """The annotation indexes serve reading only: building and writing samples use the
        candidates' own fields."""
        forget_indexes()

    def build_train_example(self, key: str, item: dict) -> dict:
        """The first (tight, low-IoU) view of a crop plan, where the valid replies are the camera
        moves, or the whole image, where the valid reply is the class; mixed by
        `train_ambiguous_fraction`."""
        train = self.for_split("train")
        url = train.path(train.image_folder, item["file_name"])
        train.validate_file_frame(url)
        plan = train.crop_plan(key, item)
        ambiguous = self.rng(key, "train_mix").random() < float(
            self.params["train_ambiguous_fraction"])
        moves = proactive_options(plan.direction)
        if ambiguous:
            view = {"crop": plan.crop, "direction": plan.direction}
            # turn 0 of the environment: the crop extended by one step
            box = [float(v) for v in crop_box(view, plan.horizontal_step,
                                                   plan.vertical_step)]
            image_ref = {"kind": "view", "url": url, "box": box}
        else:
            image_ref = {"kind": "file", "url": url}
        category = self.category_table[item["category_id"]]["name"]
        return self.train_example(
            key, question=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, moves),
            categories=self.pick_categories(key, category, self.distractor_pool(item)),
            answer=format_category(category), proactive_actions=moves if ambiguous else [],
            ambiguous=ambiguous, frame_id=0, image_ref=image_ref,
            files=[f"{train.image_folder}/{item['file_name']}"])

    def load_frame(self, ref: dict) -> bytes:
        """Source files pass through; a train view is the crop the environment would show,
        re-encoded as JPEG (the only COCO frames whose pixels change)."""
        if ref["kind"] != "view":
            return super().load_frame(ref)
        with Image.open(io.BytesIO(self.read_validated_source(ref))) as image:
            # crop, then convert: the same pixels (conversion is per pixel), on the view only
            view = image.crop(tuple(round(v) for v in ref["box"])).convert("RGB")
            out = io.BytesIO()
            view.save(out, format="JPEG", quality=int(self.params.get("train_jpeg_quality", 90)))
        return out.getvalue()

    # -- miniature ----------------------------------------------------------------------------

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        miniature.write_miniature(root, cls.read_manifest()["category_table"], seed)
