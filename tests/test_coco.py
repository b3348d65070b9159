"""COCO 2014 end to end on its miniature source, its record semantics checked against a
simulation of the upstream environment's crop mechanics, determinism, and bad raw items."""
from __future__ import annotations

import io
import json
import os
import random
import shutil

import datasets
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import file_bytes, read_jsonl, run, shard_files
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.transforms.coco.crops import (
    CARDINAL, DIAGONAL, CropRules, coverage, iou, plan_crop, try_direction)
from proactivebench_builder.transforms.coco.miniature import MINIATURE_IMAGES
from proactivebench_builder.transforms.coco.play import MOVE_OPTIONS, ZOOM_OPTION
from proactivebench_builder.transforms.coco.scenario import QUESTIONS, Coco, hard_negatives
from proactivebench_builder.core.vocabulary import (
    ABSTAIN_OPTIONS, format_category, is_abstain)
from proactivebench_builder.transforms import upstream_action_of

CONFIG = "coco2014"
MANIFEST = manifest_of("coco")
PARAMS = MANIFEST["parameters"]
EXPECTED_ACTION = {"left": "LEFT", "right": "RIGHT", "up": "UP", "down": "DOWN", "zoom": "ZOOM"}


# ---- an independent simulation of upstream COCO2014Environment (docs/sources.md, 'COCO views') -------

def upstream_box(record: dict, h: float, v: float) -> tuple:
    """The PIL box upstream passes to Image.crop for the current steps h, v."""
    c, d = record["crop"], record["direction"]
    left = c["left"] - h if ("left" in d or "zoom" in d) else c["left"]
    top = c["top"] - v if ("up" in d or "zoom" in d) else c["top"]
    right = c["width"] + h if ("right" in d or "zoom" in d) else c["width"]
    bottom = c["height"] + v if ("down" in d or "zoom" in d) else c["height"]
    if d == "zoom":
        right += c["left"]
        bottom += c["top"]
    return (left, top, right, bottom)


def upstream_limits(record: dict):
    d, g = record["direction"], record["granularity"]
    h0, v0 = record["horizontal_step"], record["vertical_step"]
    if "zoom" in d:
        return g + 1, h0 * (g + 1), v0 * (g + 1)
    max_steps = g if "_" not in d else 2 * g
    max_h = h0 * g if ("left" in d or "right" in d) else 0
    max_v = v0 * g if ("up" in d or "down" in d) else 0
    return max_steps, max_h, max_v


def upstream_valid_options(record: dict, h: float, v: float, max_h: float, max_v: float):
    options = list(record["options"])
    if record["direction"] == "zoom":
        if h == max_h:  # upstream compares floats exactly here
            assert v == max_v
            options.remove(ZOOM_OPTION)
        return options
    if h >= max_h:
        options = [o for o in options if o not in (MOVE_OPTIONS["left"], MOVE_OPTIONS["right"])]
    if v >= max_v:
        options = [o for o in options if o not in (MOVE_OPTIONS["up"], MOVE_OPTIONS["down"])]
    return options


def play_oracle(record: dict):
    """Take a valid move while one is left (and the cap allows), then answer. Returns the boxes
    shown at every turn, the moves taken and the number of turns."""
    max_steps, max_h, max_v = upstream_limits(record)
    h, v = float(record["horizontal_step"]), float(record["vertical_step"])
    nh = nv = 0
    boxes, moves, turns = [], [], 0
    while True:
        boxes.append(upstream_box(record, h, v))
        turns += 1
        moves_left = [o for o in upstream_valid_options(record, h, v, max_h, max_v)
                      if not is_abstain(o)]
        if not moves_left or turns == max_steps:
            return boxes, moves, turns, max_steps
        action = upstream_action_of(moves_left[0])
        moves.append(action)
        if action in ("LEFT", "RIGHT", "ZOOM"):
            nh += 1
            h = h / nh * (nh + 1)
        if action in ("UP", "DOWN", "ZOOM"):
            nv += 1
            v = v / nv * (nv + 1)


def object_box(item_or_bbox):
    x, y, w, h = item_or_bbox
    return (x, y, x + w, y + h)


def check_trajectory(record: dict, width: int, height: int, obj: tuple):
    boxes, moves, turns, max_steps = play_oracle(record)
    g, d = record["granularity"], record["direction"]
    # the oracle runs out of moves before the cap, and took every move the direction offers
    assert turns <= max_steps
    expected_moves = g if d == "zoom" else (g - 1) * len(d.split("_"))
    assert len(moves) == expected_moves
    assert turns == expected_moves + 1
    assert record["num_images"] == max_steps
    min_w = round(PARAMS["min_view_fraction"] * width)
    min_h = round(PARAMS["min_view_fraction"] * height)
    for left, top, right, bottom in boxes:
        assert right - left >= min_w and bottom - top >= min_h, "degenerate view"
        assert left >= 0 and top >= 0 and right <= width and bottom <= height, "view pads"
    assert iou(boxes[0], obj) < PARAMS["max_start_iou"]
    assert coverage(boxes[0], obj) <= PARAMS["max_start_visible_fraction"]
    assert coverage(boxes[-1], obj) >= PARAMS["min_final_coverage"]
    # the stored crop is itself a proper box in its own convention
    c = record["crop"]
    if d == "zoom":
        assert c["width"] >= 1 and c["height"] >= 1
    else:
        assert c["width"] > c["left"] and c["height"] > c["top"]
    return boxes


# ---- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def source_root(miniature_root) -> str:
    """The sources root of the shared build (read only: a test that changes COCO's source
    copies its folder)."""
    return miniature_root


@pytest.fixture(scope="module")
def built(shared_build, source_root) -> tuple[str, dict]:
    """A shared build of COCO alone (read only), whose train split holds COCO's examples only."""
    return shared_build(source_root, "coco", "--upstream_export")


@pytest.fixture(scope="module")
def rows(built, tmp_path_factory):
    # a cache of its own: `datasets` names a local folder's cache by a name that outlives builds
    cache = str(tmp_path_factory.mktemp("coco_hf_cache"))
    return datasets.load_dataset(built[0], name=CONFIG, split="test", cache_dir=cache)


def single_object_images(split="val"):
    return {i: spec for i, spec in MINIATURE_IMAGES[split].items()
            if len(spec[3]) == 1 and not spec[3][0][2]}


# ---- manifest and vocabulary -----------------------------------------------------------------

def test_manifest_holds_the_real_80_categories():
    table = MANIFEST["category_table"]
    ids = [c["id"] for c in table]
    assert len(table) == 80 and ids == sorted(ids)
    assert set(range(1, 91)) - set(ids) == {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}
    assert len({c["supercategory"] for c in table}) == 12
    assert MANIFEST["classes"] == [c["name"] for c in table]
    assert {c["id"]: c["name"] for c in table}[18] == "dog"


def test_every_option_is_one_upstream_action():
    for move, option in MOVE_OPTIONS.items():
        assert upstream_action_of(option) == EXPECTED_ACTION[move]
    assert upstream_action_of(ZOOM_OPTION) == "ZOOM"
    assert len(QUESTIONS) == len(set(QUESTIONS)) == 15


def test_hard_negatives_are_deterministic_and_close():
    coco = Coco(0, "/nonexistent")
    table, affinity = coco.category_table, PARAMS["supercategory_affinity"]
    dog = hard_negatives(18, table, affinity, 3)
    assert dog == hard_negatives(18, table, affinity, 3)
    assert all(next(c for c in table.values() if c["name"] == n)["supercategory"] == "animal"
               for n in dog)
    # a name-trigram tie-break inside the supercategory: baseball glove is closest to the bat
    assert hard_negatives(39, table, affinity, 1) == ["baseball glove"]
    # person has no peer in its supercategory: the related ones come first
    person = hard_negatives(1, table, affinity, 3)
    assert all(next(c for c in table.values() if c["name"] == n)["supercategory"]
               in affinity["person"] for n in person)


# ---- crop planning against the upstream mechanics --------------------------------------------

def record_of(plan, options):
    return {"direction": plan.direction, "granularity": plan.granularity,
            "horizontal_step": float(plan.horizontal_step),
            "vertical_step": float(plan.vertical_step),
            "crop": {k: float(v) for k, v in plan.crop.items()},
            "options": options,
            "num_images": {"zoom": plan.granularity + 1}.get(
                plan.direction, plan.granularity * len(plan.direction.split("_")))}


def test_every_direction_plays_out_in_the_upstream_environment():
    """Seeded random images and boxes: each direction that can be realised yields a record
    whose oracle trajectory starts with low IoU, never shows a degenerate or padded view, and
    ends on a view holding the whole object."""
    rules = CropRules.from_params(PARAMS)
    rng = random.Random(7)
    seen = set()
    for case in range(400):
        width, height = rng.choice([(640, 480), (480, 640), (500, 375), (160, 120)])
        bw, bh = rng.uniform(4, width), rng.uniform(4, height)
        x, y = rng.uniform(0, width - bw), rng.uniform(0, height - bh)
        obj = (x, y, x + bw, y + bh)
        for direction in CARDINAL + DIAGONAL + ("zoom",):
            g = rng.randint(3, 5)
            plan = None
            for _ in range(rules.attempts):
                plan = try_direction(rng, direction, g, width, height, obj, rules)
                if plan:
                    break
            if plan is None:
                continue
            seen.add(direction)
            options = [ZOOM_OPTION] if direction == "zoom" else \
                [MOVE_OPTIONS[m] for m in direction.split("_")]
            record = record_of(plan, options + [ABSTAIN_OPTIONS[0]])
            boxes = check_trajectory(record, width, height, obj)
            assert boxes[0] == plan.first_view and boxes[-1] == plan.last_view
    assert seen == set(CARDINAL + DIAGONAL + ("zoom",))


def test_pil_crops_of_every_view_are_real_image_regions(rows):
    for row in rows:
        image = row["frames"][0]
        boxes, *_ = play_oracle(row)
        for box in boxes:
            view = image.crop(box)
            assert view.size == (box[2] - box[0], box[3] - box[1]) and min(view.size) > 0


def test_no_crop_when_the_rules_cannot_be_met(source_root):
    coco = Coco(0, os.path.join(source_root, "coco"))
    coco.params["max_start_iou"] = 0.0  # no view has a negative IoU
    item = next(v for u in coco.list_units() for v in coco.read_unit(u)
                if v.kind == "candidate")
    with pytest.raises(BadItem, match="image too small for a crop") as err:
        coco.build_sample(item.key, item.item)
    assert err.value.path.startswith("val2014/COCO_val2014_")


def test_the_miniature_exercises_every_direction_family(rows):
    directions = set(rows["direction"])
    assert directions & set(CARDINAL) and directions & set(DIAGONAL) and "zoom" in directions


# ---- end to end: record semantics field by field ---------------------------------------------

def test_build_accounts_for_every_raw_item(built):
    report = built[1]["scenarios"]["coco"]
    assert report["accounted"]
    assert report["raw_items"] == len(MINIATURE_IMAGES["val"]) == 13
    assert report["samples"] == len(single_object_images()) == 9
    assert report["excluded"] == {"no_annotation": 1, "multiple_objects": 2,
                                  "crowd_annotation": 1}
    assert report["dead_letters"] == 0
    assert report["raw_items"] == report["samples"] + report["dead_letters"] + sum(
        report["excluded"].values())


def test_records_field_by_field(rows, source_root):
    table = {c["id"]: c for c in MANIFEST["category_table"]}
    ann = json.loads(file_bytes(os.path.join(source_root, "coco", "annotations",
                                             "instances_val2014.json")))
    ann_by_image = {a["image_id"]: a for a in ann["annotations"]}
    singles = single_object_images()
    keys = sorted(f"coco2014/val2014/{i:012d}" for i in singles)
    assert sorted(rows["key"]) == keys
    for row in rows:
        image_id = int(row["key"].rsplit("/", 1)[1])
        width, height, _, objects = singles[image_id]
        name = f"COCO_val2014_{image_id:012d}.jpg"
        assert row["id"] == keys.index(row["key"])
        assert row["image_template"] == f"coco2014/val2014/{name}"
        assert "{" not in row["image_template"]
        assert row["frame_ids"] == [0] and row["first_image"] == row["reference_image"] == 0
        assert len(row["frames"]) == 1
        with open(os.path.join(source_root, "coco", "val2014", name), "rb") as handle:
            raw = handle.read()
        assert row["frames"][0].size == (width, height)
        assert row["prompt"] in QUESTIONS
        # options: one move per moving axis (zoom: one), plus exactly one abstain option
        d = row["direction"]
        assert d in CARDINAL + DIAGONAL + ("zoom",)
        proactive = [o for o in row["options"] if not is_abstain(o)]
        abstain = [o for o in row["options"] if is_abstain(o)]
        assert len(abstain) == 1 and abstain[0] in ABSTAIN_OPTIONS
        expected = [ZOOM_OPTION] if d == "zoom" else [MOVE_OPTIONS[m] for m in d.split("_")]
        assert sorted(proactive) == sorted(expected)
        assert {upstream_action_of(o) for o in proactive} == {EXPECTED_ACTION[m] for m in
                                                    (d.split("_") if d != "zoom" else ["zoom"])}
        # categories: the answer plus its three hard negatives, formatted as upstream shows them
        category = table[objects[0][0]]["name"]
        assert row["answer"] == format_category(category)
        negatives = hard_negatives(objects[0][0], Coco(0, "/x").category_table,
                                   PARAMS["supercategory_affinity"], 3)
        assert sorted(row["categories"]) == sorted(format_category(n)
                                                   for n in [category] + negatives)
        # crop fields: integers stored as floats, granularity 3-5, the upstream step cap
        g = row["granularity"]
        assert PARAMS["granularity_min"] <= g <= PARAMS["granularity_max"]
        assert row["num_images"] == {"zoom": g + 1}.get(d, 2 * g if "_" in d else g)
        for value in list(row["crop"].values()) + [row["horizontal_step"], row["vertical_step"]]:
            assert float(value).is_integer()
        moving_x = d == "zoom" or "left" in d or "right" in d
        moving_y = d == "zoom" or "up" in d or "down" in d
        assert (row["horizontal_step"] > 0) == moving_x
        assert (row["vertical_step"] > 0) == moving_y
        check_trajectory(row, width, height, object_box(objects[0][1]))
        # extras other scenarios use stay null; provenance names the annotation and the file
        for unused in ("strong_occlusions", "valid_images", "quality_answer", "step_size",
                       "max_steps"):
            assert row[unused] is None
        ann_id = ann_by_image[image_id]["id"]
        assert row["source"]["files"] == [
            f"annotations/instances_val2014.json#annotation_id={ann_id}", f"val2014/{name}"]
        assert row["source"]["license"] == MANIFEST["license"]
        assert raw  # the file the frame came from


def test_frame_bytes_pass_through_unchanged(built, source_root):
    output = built[0]
    for path in shard_files(output):
        if path.startswith(CONFIG):
            table = pq.read_table(os.path.join(output, path))
            for key, frames in zip(table["key"].to_pylist(), table["frames"].to_pylist()):
                name = f"COCO_val2014_{key.rsplit('/', 1)[1]}.jpg"
                with open(os.path.join(source_root, "coco", "val2014", name), "rb") as f:
                    assert frames[0]["bytes"] == f.read()
                assert frames[0]["path"] == f"coco2014/val2014/{name}"


def test_upstream_export_has_every_image_its_templates_name(built):
    output = built[0]
    lines = read_jsonl(os.path.join(output, "upstream", f"{CONFIG}_preprocessed.jsonl"))
    assert len(lines) == 9
    for line in lines:
        path = os.path.join(output, "upstream", line["image_template"])
        assert os.path.isfile(path)
        Image.open(path).load()
        for field in ("direction", "granularity", "horizontal_step", "vertical_step", "crop"):
            assert field in line
        assert set(line["crop"]) == {"top", "left", "height", "width"}
        assert line["answer"] in line["categories"]


# ---- determinism -----------------------------------------------------------------------------

def test_same_inputs_give_identical_shards(tmp_path, built, source_root):
    output = str(tmp_path / "again")
    run(output, source_root, "coco", "--upstream_export")
    assert shard_files(output) == shard_files(built[0])
    upstream = os.path.join("upstream", f"{CONFIG}_preprocessed.jsonl")
    assert file_bytes(os.path.join(output, upstream)) == \
        file_bytes(os.path.join(built[0], upstream))


def test_choices_depend_only_on_seed_and_key(source_root):
    root = os.path.join(source_root, "coco")
    a, b, c = Coco(0, root), Coco(0, root), Coco(1, root)
    units = a.list_units()
    items = [v for u in reversed(units) for v in a.read_unit(u) if v.kind == "candidate"]
    built_a = {v.key: a.build_sample(v.key, v.item) for v in items}
    built_b = {v.key: b.build_sample(v.key, v.item) for v in reversed(items)}
    built_c = {v.key: c.build_sample(v.key, v.item) for v in items}
    fields = ("prompt", "options", "categories", "direction", "granularity", "crop",
              "horizontal_step", "vertical_step")
    assert all(built_a[k][f] == built_b[k][f] for k in built_a for f in fields)
    assert any(built_a[k][f] != built_c[k][f] for k in built_a for f in fields)
    # same answer and distractor set under any seed: only order and crops change
    assert all(sorted(built_a[k]["categories"]) == sorted(built_c[k]["categories"])
               for k in built_a)


def test_plan_crop_is_a_pure_function_of_its_streams():
    rules = CropRules.from_params(PARAMS)
    obj = (200.0, 100.0, 330.5, 260.25)
    plans = [plan_crop(random.Random("d"), random.Random("c"), 4, 640, 480, obj,
                       PARAMS["direction_weights"], rules) for _ in range(3)]
    assert plans[0] == plans[1] == plans[2] and plans[0] is not None


# ---- the train split -------------------------------------------------------------------------

def test_train_split_reads_train2014(source_root):
    coco = Coco(0, os.path.join(source_root, "coco"))
    coco.params["split"] = "train"
    units = coco.list_units()
    assert all("instances_train2014.json" in u for u in units)
    values = [v for u in units for v in coco.read_unit(u)]
    candidates = [v for v in values if v.kind == "candidate"]
    assert sorted(v.key for v in candidates) == ["coco2014/train2014/000000000009",
                                                     "coco2014/train2014/000000000025"]
    assert sum(v.n for v in values if v.kind == "count" and v.what == "raw_items") == 3
    row = coco.build_sample(candidates[0].key, candidates[0].item)
    assert row["image_template"] == "coco2014/train2014/COCO_train2014_000000000009.jpg"
    assert coco.frame_path(row, 0) == row["image_template"]
    assert Image.open(io.BytesIO(coco.load_frame(row["frame_refs"][0]))).size == (160, 120)


# ---- bad raw items ---------------------------------------------------------------------------

def _jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 150)).save(out, format="JPEG")
    return out.getvalue()


def _faulty_source(tmp_path, source_root) -> str:
    root = tmp_path / "src"
    shutil.copytree(os.path.join(source_root, "coco"), root / "coco")
    ann_path = root / "coco" / "annotations" / "instances_val2014.json"
    data = json.loads(ann_path.read_text())
    images = root / "coco" / "val2014"

    def add(image_id, width, height, bbox, category=18, file_bytes=None, file_name=None):
        name = file_name or f"COCO_val2014_{image_id:012d}.jpg"
        data["images"].append({"license": 1, "file_name": name, "coco_url": "", "height": height,
                               "width": width, "date_captured": "", "flickr_url": "",
                               "id": image_id})
        data["annotations"].append({"segmentation": [[]], "area": 1.0, "iscrowd": 0,
                                    "image_id": image_id, "bbox": bbox,
                                    "category_id": category, "id": 900000 + image_id})
        if file_bytes is not None:
            (images / f"COCO_val2014_{image_id:012d}.jpg").write_bytes(file_bytes)

    add(500, 160, 120, [150.0, 10.0, 30.0, 20.0], file_bytes=_jpeg(160, 120))   # outside
    add(501, 160, 120, [10.0, 10.0, 30.0, 20.0])                                 # no file
    add(502, 160, 120, [10.0, 10.0, 30.0, 20.0], category=12,                    # unused id
        file_bytes=_jpeg(160, 120))
    add(503, 160, 120, [10.0, 10.0, 0.0, 20.0], file_bytes=_jpeg(160, 120))     # degenerate
    add(504, 40, 30, [5.0, 5.0, 10.0, 10.0], file_bytes=_jpeg(40, 30))          # too small
    add(505, 160, 120, [10.0, 10.0, 30.0, 20.0], file_bytes=_jpeg(160, 120)[:300])  # cut
    add(506, 160, 120, [10.0, 10.0, 30.0, 20.0], file_bytes=_jpeg(100, 80))     # wrong size
    add(507, 160, 120, "oops", file_bytes=_jpeg(160, 120))                       # bad bbox
    add(508, 160, 120, [10.0, 10.0, 30.0, 20.0], file_bytes=_jpeg(160, 120),    # bad name
        file_name="COCO_val2014_000000000999.jpg")
    add(509, 160, 120, [10.0, 10.0, 30.0, 20.0], category=90,                   # renamed
        file_bytes=_jpeg(160, 120))
    next(c for c in data["categories"] if c["id"] == 90)["name"] = "tooth brush"

    data["annotations"].append({"segmentation": [[]], "area": 1.0, "iscrowd": 0,  # orphan
                                "image_id": 999999, "bbox": [1.0, 1.0, 5.0, 5.0],
                                "category_id": 18, "id": 777})
    data["annotations"].append({"segmentation": [[]], "area": 1.0, "iscrowd": 0,  # no image_id
                                "bbox": [1.0, 1.0, 5.0, 5.0], "category_id": 18, "id": 778})
    ann_path.write_text(json.dumps(data))
    return str(root)


def test_bad_raw_items_become_dead_letters_and_the_build_goes_on(tmp_path, source_root):
    output = str(tmp_path / "out")
    faulty = _faulty_source(tmp_path, source_root)
    with open(os.path.join(faulty, "coco", "annotations", "instances_val2014.json")) as handle:
        n_annotations = len(json.load(handle)["annotations"])  # the last one has no image_id
    report = run(output, faulty, "coco", "--max_bad_fraction=1.0")["scenarios"]["coco"]
    letters = {d["path"]: d["reason"] for d in read_jsonl(
        os.path.join(output, "reports", "dead_letters.jsonl")) if d["scenario"] == "coco"}
    ann = "annotations/instances_val2014.json"
    expected = {
        f"{ann}#image_id=500": "box outside the image",
        "val2014/COCO_val2014_000000000501.jpg": "missing frame file",
        f"{ann}#image_id=502": "unknown category id 12",
        f"{ann}#image_id=503": "degenerate box",
        f"{ann}#image_id=504": "image too small for a crop",
        "val2014/COCO_val2014_000000000505.jpg": "runcated",  # PIL or our end-marker check
        "val2014/COCO_val2014_000000000506.jpg": "inconsistent image size",
        f"{ann}#image_id=507": "malformed bbox",
        f"{ann}#image_id=508": "inconsistent image record",
        f"{ann}#image_id=509": "inconsistent category: id 90 is 'tooth brush'",
        f"{ann}#image_id=999999": "which images[] does not list",
        f"{ann}#annotations[{n_annotations - 1}]": "malformed annotation record",
    }
    assert set(letters) == set(expected)
    for path, fragment in expected.items():
        assert fragment in letters[path], (path, letters[path])
    assert report["dead_letters"] == len(expected)
    assert report["samples"] == 9  # the good items still became samples
    assert report["raw_items"] == 13 + len(expected)
    assert report["accounted"]
    assert report["raw_items"] == report["samples"] + report["dead_letters"] + sum(
        report["excluded"].values())
    assert len(datasets.load_dataset(output, name=CONFIG, split="test",
                                     cache_dir=str(tmp_path / "hf"))) == 9


def test_too_many_bad_items_fail_the_build(tmp_path, source_root):
    with pytest.raises(Exception, match="too many bad inputs"):
        run(str(tmp_path / "out"), _faulty_source(tmp_path, source_root), "coco")
