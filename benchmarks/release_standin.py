"""A stand-in for the upstream release's `test/` folder, written from the authors' package alone.

The release (`tdemin16/ProactiveBench`, ~150 GB) cannot be downloaded here, so this writes a folder
of its shape at its real record counts: one `<config>_preprocessed.jsonl` per config holding the
whole pool (ROD 88, VSOD 200, MVP-N 4,199, ImageNet-C 5,000, QuickDraw 3,439, ChangeIt 1,117,
COCO 4,857: ~18.9k records, the ids `FILTER` keeps among them), with the fields and types each of
upstream's environments reads, and one small image file for every path upstream's environments
can ask for. Which paths those are is not decided here: every record is played through upstream's
own `environment.py` (every answer at every state, then the reference mode), and the paths its
`get_state` returns are the files written. So ROD's `natural_bluebl_greenr-banana-s6`, which
upstream's `_fix_corruptions` swaps for s5/s7, is not written unless asked for, as in the real
release (the raw ROD dataset holds 1,231 of its 1,232 images).

Run it with a Python >= 3.12 that can import upstream's package (only `environment.py`, which
needs nothing outside the standard library, and `data_utils.py`'s `FILTER`, read without importing
torch) and Pillow:

    python3.12 benchmarks/release_standin.py --upstream /path/to/unpacked/proactivebench-0.1.1 \
        --out /tmp/release/test [--rod_s6 missing|corrupt|present] [--scale 1.0]

`--scale` shrinks every config's pool (ids still cover every id `FILTER` keeps, so the released
counts hold at any scale). What the record values mean follows the reference
(`benchmark_construction.md` §2) and upstream's environment code; their texts are plain stand-ins.
Images are 8x8 files (PNG or JPEG, as their names say) whose colour is derived from their path, so a frame read from the wrong file
is visible.
"""
from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import io
import json
import os
import random
import sys

CONFIGS = ("Realistic-Occlusion-Dataset", "OcclusionDataSet-MM20", "MVP-N", "ImageNet-C",
           "QuickDraw", "ChangeIt", "coco2014")
POOL = {"Realistic-Occlusion-Dataset": 88, "OcclusionDataSet-MM20": 200, "MVP-N": 4199,
        "ImageNet-C": 5000, "QuickDraw": 3439, "ChangeIt": 1117, "coco2014": 4857}
ABSTAIN = ("I cannot tell.", "I cannot answer this question.", "I do not know what is this object.")
PATCHED = "natural_bluebl_greenr-banana"  # the sequence upstream's ROD environment patches


def read_filter(upstream: str) -> dict[str, list[int]]:
    """`FILTER` of upstream's data_utils.py, read as a literal (importing it needs torch)."""
    path = os.path.join(upstream, "proactivebench", "data_utils.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FILTER":
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path}: no FILTER")


def pool_ids(config: str, kept: list[int], scale: float) -> list[int]:
    """The pool's ids: 0 .. POOL-1 at scale 1, else every kept id plus a share of the rest."""
    everything = range(max(POOL[config], max(kept) + 1))
    if scale >= 1:
        return list(everything)
    rng = random.Random(f"pool/{config}")
    rest = [i for i in everything if i not in set(kept)]
    return sorted(set(kept) | set(rng.sample(rest, int(len(rest) * scale))))


def categories(rng: random.Random, vocabulary: list[str], answer: str) -> list[str]:
    others = rng.sample([v for v in vocabulary if v != answer], 3)
    chosen = others + [answer]
    rng.shuffle(chosen)
    return chosen


def shuffled(rng: random.Random, options: list[str]) -> list[str]:
    options = list(options)
    rng.shuffle(options)
    return options


ROD_CLASSES = ["banana", "baseball", "cowboy hat", "cup", "dumbbell", "hammer", "laptop",
               "microwave", "mouse", "orange", "pillow", "plate", "screwdriver", "skillet",
               "spatula", "vase"]
ROD_SETTINGS = {"natural_bluebl_greenr": "blue blocks", "natural_redbl_greenr": "red blocks",
                "natural_redcard_whiter": "red cardboard", "natural_bluecard_whiter": "blue cardboard"}


def rod(i: int, rng: random.Random) -> dict:
    settings = sorted(ROD_SETTINGS)
    if i == 0:
        setting, cls = PATCHED.rsplit("-", 1)
    else:
        setting, cls = settings[i % 4], ROD_CLASSES[(i * 7) % 16]
    stem = f"{setting}-{cls}{'' if i < 16 else i // 16}"
    occluder = ROD_SETTINGS[setting]
    answer = cls.capitalize() + "."
    return {"image_template": f"Realistic-Occlusion-Dataset/{stem}-s{{image}}.jpg",
            "first_image": 7, "num_images": 14, "reference_image": 0,
            "prompt": f"What is behind the {occluder}?",
            "options": shuffled(rng, [f"Move the {occluder} to the left.", ABSTAIN[0],
                                      f"Move the {occluder} to the right."]),
            "categories": categories(rng, [c.capitalize() + "." for c in ROD_CLASSES], answer),
            "answer": answer}


SPEAKERS = [f"Speaker {n:02d}." for n in range(94)]


def vsod(i: int, rng: random.Random, strong: bool) -> dict:
    n = rng.randint(20, 40)
    answer = rng.choice(SPEAKERS)
    return {"image_template": f"OcclusionDataSet-MM20/segment_{i:04d}/{{image}}.jpg",
            "first_image": rng.randint(1, n - 2), "num_images": n,
            "reference_image": rng.randrange(n), "prompt": "Could you tell me who is talking?",
            "options": shuffled(rng, ["Rewind the video.", "Wait for the occlusion to disappear.",
                                      ABSTAIN[1]]),
            "categories": categories(rng, SPEAKERS, answer), "answer": answer,
            "strong_occlusions": strong}


PRODUCTS = [f"Product {n:02d}." for n in range(42)]


def mvpn(i: int, rng: random.Random) -> dict:
    n = rng.randint(2, 6)
    views = sorted(rng.sample(range(60), n))
    answer = rng.choice(PRODUCTS)
    return {"image_template": f"MVP-N/{i // 100:02d}/{i:04d}/{{informative}}/{{image}}.png",
            "first_image": views[0], "num_images": n, "reference_image": views[-1],
            "valid_images": views, "prompt": "Identify the object in this image.",
            "options": shuffled(rng, ["Rotate the object.", ABSTAIN[2]]),
            "categories": categories(rng, PRODUCTS, answer), "answer": answer}


ENHANCEMENTS = ["Denoise the image.", "Deblur the image.", "Increase the brightness.",
                "Increase the contrast.", "Increase the saturation.", "Reduce the compression.",
                "Increase image resolution.", "Remove the artifacts."]
IMAGENET = [f"Class_{n:03d}." for n in range(1000)]


def imagenet_c(i: int, rng: random.Random) -> dict:
    quality = rng.choice(ENHANCEMENTS)
    distractors = rng.sample([e for e in ENHANCEMENTS if e != quality], 3)
    answer = IMAGENET[i // 5]
    return {"image_template": f"ImageNet-C/corruption_{i % 16}/{{level}}/n{i // 5:08d}_{i}.JPEG",
            "first_image": 5, "num_images": 5, "reference_image": 1,
            "prompt": "What type of object do you see here?",
            "options": shuffled(rng, [quality, ABSTAIN[2], *distractors]),
            "categories": categories(rng, IMAGENET, answer), "answer": answer,
            "quality_answer": quality}


DRAWINGS = [f"Category {n:03d}." for n in range(345)]


def quickdraw(i: int, rng: random.Random) -> dict:
    n = rng.randint(2, 9)
    answer = DRAWINGS[i // 10 % 345]
    return {"image_template": f"QuickDraw/{i // 10:03d}/{i:05d}/{{image}}.png",
            "first_image": 0, "num_images": n, "reference_image": n - 1,
            "prompt": "What is the category of the depicted object?",
            "options": shuffled(rng, ["Make this drawing more complete.", ABSTAIN[1]]),
            "categories": categories(rng, DRAWINGS, answer), "answer": answer}


CHANGES = [f"Thing {n:02d}." for n in range(69)]


def changeit(i: int, rng: random.Random) -> dict:
    step = rng.randint(1, 4)
    n = rng.randint(8, 24) * step
    steps_to_reference = rng.randint(1, n // step - 1)
    answer = rng.choice(CHANGES)
    return {"image_template": f"ChangeIt/video_{i // 2:04d}/{{image}}.jpg",
            "first_image": 0, "num_images": n, "reference_image": steps_to_reference * step,
            "step_size": step, "max_steps": steps_to_reference + 2,
            "prompt": "Describe the object in the video in terms of its category.",
            "options": shuffled(rng, ["Rewind the video.", "Wait for the object to appear.",
                                      ABSTAIN[1]]),
            "categories": categories(rng, CHANGES, answer), "answer": answer}


COCO = [f"Object {n:02d}." for n in range(78)]
DIRECTIONS = ("left", "right", "up", "down", "up_left", "up_right", "down_left", "down_right",
              "zoom")
COCO_OPTIONS = {"left": "Move the camera to the left.", "right": "Move the camera to the right.",
                "up": "Move the camera up.", "down": "Move the camera down.",
                "zoom": "Move farther from the object."}


def coco(i: int, rng: random.Random) -> dict:
    direction = rng.choice(DIRECTIONS)
    granularity = rng.randint(3, 5)
    top, left = rng.randint(40, 200), rng.randint(40, 260)
    crop = {"top": top, "left": left, "height": top + rng.randint(40, 120),
            "width": left + rng.randint(40, 160)}
    if direction == "zoom":
        crop["height"] -= top
        crop["width"] -= left
    moves = [COCO_OPTIONS[d] for d in direction.split("_")]
    answer = rng.choice(COCO)
    return {"image_template": f"coco2014/val2014/COCO_val2014_{100000 + i:012d}.jpg",
            "first_image": 0, "num_images": 1, "reference_image": 0,
            "prompt": "Recognize the object shown in this image.",
            "options": shuffled(rng, [ABSTAIN[2], *moves]),
            "categories": categories(rng, COCO, answer), "answer": answer,
            "direction": direction, "granularity": granularity,
            "horizontal_step": rng.randint(5, 30), "vertical_step": rng.randint(5, 30),
            "crop": crop}


def records(config: str, kept: list[int], scale: float) -> list[dict]:
    out = []
    strong_extra = set(random.Random("vsod-strong").sample(
        [i for i in range(POOL[config]) if i not in set(kept)], 21)) \
        if config == "OcclusionDataSet-MM20" else set()
    for i in pool_ids(config, kept, scale):
        rng = random.Random(f"{config}/{i}")
        record = {"Realistic-Occlusion-Dataset": lambda: rod(i, rng),
                  "OcclusionDataSet-MM20": lambda: vsod(i, rng, i in set(kept) or i in strong_extra),
                  "MVP-N": lambda: mvpn(i, rng), "ImageNet-C": lambda: imagenet_c(i, rng),
                  "QuickDraw": lambda: quickdraw(i, rng), "ChangeIt": lambda: changeit(i, rng),
                  "coco2014": lambda: coco(i, rng)}[config]()
        out.append({"id": i, **record})
    return out


# ---- which files upstream's environments read --------------------------------------------------

def shown_paths(environment, config: str, record: dict, max_states: int = 5000) -> set[str]:
    """Every image path upstream's environment for `config` can return from `get_state` for
    `record`: every answer (each option shown, each category, and one it cannot parse) at every
    state it reaches, then the reference mode."""
    cls = environment.get_environment(config)
    paths = set()
    start = cls(entry=copy.deepcopy(record), data_dir="")
    frontier, seen = [start], set()
    while frontier:
        env = frontier.pop()
        state = json.dumps({k: v for k, v in vars(env).items()
                            if isinstance(v, (int, float, str, type(None), bool))},
                           sort_keys=True)
        if state in seen or env.stop:
            continue
        seen.add(state)
        if len(seen) > max_states:
            raise SystemExit(f"{config} {record['id']}: more than {max_states} states")
        shown = env.get_state()
        paths.add(shown["image_path"])
        for answer in [*shown["options"], "no answer at all"]:
            branch = copy.deepcopy(env)
            branch.evaluate_generated_answer(answer)
            frontier.append(branch)
    reference = cls(entry=copy.deepcopy(record), data_dir="", reference=True)
    paths.add(reference.get_state()["image_path"])
    return paths


def tiny_image(path: str) -> bytes:
    """An 8x8 image of the format its name says (PNG for .png, else JPEG)."""
    from PIL import Image

    digest = hashlib.sha256(path.encode()).digest()
    out = io.BytesIO()
    image = Image.new("RGB", (8, 8), tuple(digest[:3]))
    if path.lower().endswith(".png"):
        image.save(out, "PNG")
    else:
        image.save(out, "JPEG", quality=90)
    return out.getvalue()


def write(out: str, upstream: str, rod_s6: str, scale: float, paths_file: str | None = None
          ) -> dict:
    sys.path.insert(0, upstream)
    from proactivebench import environment  # noqa: E402 (upstream's own code)

    kept = read_filter(upstream)
    summary, per_record = {}, {}
    os.makedirs(out, exist_ok=True)
    for config in CONFIGS:
        rows = records(config, kept[config], scale)
        paths = set()
        for record in rows:
            shown = shown_paths(environment, config, record)
            per_record.setdefault(config, {})[record["id"]] = sorted(shown)
            paths |= shown
        with open(os.path.join(out, f"{config}_preprocessed.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        for path in sorted(paths):
            target = os.path.join(out, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(tiny_image(path))
        summary[config] = {"records": len(rows), "images": len(paths)}
    s6 = os.path.join(out, "Realistic-Occlusion-Dataset", f"{PATCHED}-s6.jpg")
    if rod_s6 == "present":
        with open(s6, "wb") as f:
            f.write(tiny_image(s6))
    elif rod_s6 == "corrupt":
        with open(s6, "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 not a whole JPEG")
    summary["rod_s6"] = rod_s6
    if paths_file:
        with open(paths_file, "w", encoding="utf-8") as f:
            json.dump(per_record, f)
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True,
                        help="folder holding upstream's unpacked `proactivebench` package")
    parser.add_argument("--out", required=True, help="the test/ folder to write")
    parser.add_argument("--rod_s6", choices=("missing", "corrupt", "present"), default="missing")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--paths", metavar="JSON",
                        help="also write {config: {id: [every path upstream shows]}} there")
    args = parser.parse_args(argv)
    print(json.dumps(write(args.out, args.upstream, args.rod_s6, args.scale, args.paths),
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
