"""Conformance cases: hand-made records of every config played with scripted answers, and the
means to compare our environments with upstream's.

How the expected trajectories were obtained (recorded, not hand-derived):
`pip download proactivebench==0.1.1 --no-deps --python-version 3.12 --only-binary=:all:` fetched
the upstream wheel from PyPI; its `environment.py` needs only the standard library, so it runs
unmodified on CPython 3.12 (the package requires >= 3.12; our runtime is 3.11). `record_upstream`
plays every case below through upstream's `get_environment(config)(entry, data_dir="")`,
`get_state(hint)` and `evaluate_generated_answer(answer)` in a subprocess, and stores per turn the
question, the displayed options, the shown image id and (COCO) the crop box the upstream
transform passes to `Image.crop`, plus `get_statistics()` and `get_open_ended_gen_answers()`.
The output is frozen in `tests/data/upstream_recorded.json` (data beside the tests that read
it, not code); regenerate it with

    python -m proactivebench_builder.runtime.conformance --upstream-python python3.12 \
        --package-dir DIR_WITH_proactivebench --write tests/data/upstream_recorded.json

Random-suggestion cases are limited to scenarios whose random action is determined (MVP-N,
ImageNet-C, QuickDraw): upstream draws the action from the unseeded global `random`.
Their records already carry the replaced options (upstream expects that), so ours are played
with `random_suggestions` on the preset record (`preset_options=True`); the action names drawn
in those cases are not compared (`comparable`).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess

from PIL import Image

from proactivebench_builder.runtime import environments as envs
from proactivebench_builder.core.prompts import CIT, COCO, INC, MVPN, QD, ROD, VSOD

CATEGORIES = ["Cat.", "Dog.", "Cow.", "Pig."]     # answer "Dog."


def _record(config: str, name: str, **fields) -> dict:
    record = {"id": 0, "key": f"{config}/{name}", "image_template": "x/{image}",
              "prompt": "What is shown?", "categories": list(CATEGORIES), "answer": "Dog."}
    record.update(fields)
    return record


ROD_RECORD = _record(ROD, "r", first_image=7, num_images=14, reference_image=0, options=[
    "Move the red blocks to the left.", "I cannot tell.", "Move the red blocks to the right."])
VSOD_RECORD = _record(VSOD, "v", first_image=2, num_images=6, reference_image=0,
                      strong_occlusions=True, options=[
                          "I cannot answer this question.", "Rewind the video.",
                          "Wait for the occlusion to disappear."])
MVPN_RECORD = _record(MVPN, "m", first_image=4, num_images=3, reference_image=2,
                      valid_images=[4, 9, 2], image_template="x/{informative}/{image}",
                      options=["Rotate the object.", "I cannot tell."])
INC_RECORD = _record(INC, "i", first_image=5, num_images=5, reference_image=1,
                     image_template="x/{level}/a.JPEG", quality_answer="Denoise the image.",
                     options=["Denoise the image.", "I do not know what is this object.",
                              "Increase image resolution.", "Reduce brightness.",
                              "Deblur the image."])
INC_RANDOM_RECORD = dict(INC_RECORD, options=[
    "Rewind the video.", "I do not know what is this object.", "Rotate the object.",
    "Move the camera up.", "Make this drawing more complete."])
QD_RECORD = _record(QD, "q", first_image=0, num_images=4, reference_image=3, options=[
    "I cannot answer this question.", "Make this drawing more complete."])
QD_RANDOM_RECORD = dict(QD_RECORD, options=["I cannot answer this question.",
                                            "Rewind the video."])
MVPN_RANDOM_RECORD = dict(MVPN_RECORD, options=["Move the camera down.", "I cannot tell."])
CIT_RECORD = _record(CIT, "c", first_image=0, num_images=10, reference_image=9, step_size=3,
                     max_steps=5, options=["I cannot answer this question.",
                                           "Wait for the object to appear.", "Rewind the video."])


def _coco(name, direction, crop, h=10.0, v=8.0, g=3, options=None):
    moves = {"left": ["Move the camera to the left."], "right": ["Move the camera to the right."],
             "up": ["Move the camera up."], "down": ["Move the camera down."],
             "zoom": ["Move farther from the object."]}
    proactive = [o for part in direction.split("_") for o in moves[part]]
    return _record(COCO, name, image_template="coco/a.jpg", first_image=0, num_images=1,
                   reference_image=0, direction=direction, granularity=g, horizontal_step=h,
                   vertical_step=v, crop=crop,
                   options=options or proactive[:1] + ["I cannot tell."] + proactive[1:])


MOVE_CROP = {"top": 100.0, "left": 200.0, "height": 150.0, "width": 260.0}
ZOOM_CROP = {"top": 100.0, "left": 200.0, "height": 50.0, "width": 60.0}
COCO_LEFT = _coco("left", "left", MOVE_CROP)
COCO_UP_LEFT = _coco("upleft", "up_left", MOVE_CROP)
COCO_DOWN_RIGHT = _coco("downright", "down_right", MOVE_CROP, h=7.5, v=5.0, g=2)
COCO_ZOOM = _coco("zoom", "zoom", ZOOM_CROP)


def _case(name, record, answers, mode="mcqa", hint=False, random_suggestions=False):
    return {"name": name, "record": record, "answers": answers, "mode": mode, "hint": hint,
            "random": random_suggestions}


CASES = [
    # ROD: category on the first frame is wrong; moves with letters (either case) and texts;
    # letter E is the first... second category (shift 3); abstain; junk; step cap.
    _case("rod-first-category", ROD_RECORD, ["Dog."]),
    _case("rod-first-category-letter", ROD_RECORD, ["E"]),
    _case("rod-moves-then-letter", ROD_RECORD,
          ["A", "a", "C. Move the red blocks to the right.", "E"]),
    _case("rod-move-then-wrong-boundary", ROD_RECORD, ["C", "D"]),
    _case("rod-abstain", ROD_RECORD, ["B"]),
    _case("rod-junk", ROD_RECORD, ["I think it is a banana"]),
    _case("rod-out-of-range-letter", ROD_RECORD, ["H"]),
    _case("rod-cap", ROD_RECORD, ["A"] * 14),
    _case("rod-hint-fulltext", ROD_RECORD,
          ["move the red blocks to the LEFT.", "Dog."], hint=True),
    _case("rod-reference-letter", ROD_RECORD, ["B"], mode="reference"),
    _case("rod-reference-wrong", ROD_RECORD, ["A. Cat."], mode="reference"),
    # VSOD: circular, both moves always valid, pre-prompt.
    _case("vsod-rewind-wrap", VSOD_RECORD, ["B", "B", "B", "C", "E"]),
    _case("vsod-first-category-letter", VSOD_RECORD, ["D"]),
    _case("vsod-fulltext", VSOD_RECORD,
          ["Wait for the occlusion to disappear.", "rewind the video.", "Dog."], hint=True),
    _case("vsod-cap", VSOD_RECORD, ["C"] * 6),
    _case("vsod-reference", VSOD_RECORD, ["B"], mode="reference", hint=True),
    # MVP-N: rotate valid before the last turn only.
    _case("mvpn-rotate-to-last", MVPN_RECORD, ["A", "A", "A"]),
    _case("mvpn-rotate-then-letter", MVPN_RECORD, ["A", "A", "D"]),
    _case("mvpn-first-category", MVPN_RECORD, ["Dog."]),
    _case("mvpn-boundary-letter", MVPN_RECORD, ["C"]),
    _case("mvpn-abstain", MVPN_RECORD, ["B. I cannot tell."]),
    _case("mvpn-random", MVPN_RANDOM_RECORD, ["A", "A", "D"], random_suggestions=True),
    # ImageNet-C: only quality_answer moves; last turn category only.
    _case("inc-quality-to-cap", INC_RECORD, ["A"] * 5),
    _case("inc-invalid-distractor", INC_RECORD, ["C"]),
    _case("inc-quality-then-letter", INC_RECORD, ["A", "A", "G"]),
    _case("inc-no-period-fulltext", INC_RECORD, ["denoise the image"]),
    _case("inc-fulltext", INC_RECORD, ["Denoise the image.", "Dog."], hint=True),
    _case("inc-boundary-letter", INC_RECORD, ["E", "F"]),
    _case("inc-reference", INC_RECORD, ["Dog."], mode="reference"),
    _case("inc-random", INC_RANDOM_RECORD, ["C", "D", "A", "G"], random_suggestions=True),
    # QuickDraw: details until the last turn.
    _case("qd-details-to-last", QD_RECORD, ["B", "B", "B", "B"]),
    _case("qd-details-then-text", QD_RECORD, ["B", "Make this drawing more complete.", "Dog."]),
    _case("qd-abstain-text", QD_RECORD, ["I cannot answer this question."]),
    _case("qd-boundary-letter", QD_RECORD, ["C", "D"]),
    _case("qd-random", QD_RANDOM_RECORD, ["B", "B", "d"], random_suggestions=True),
    # ChangeIt: rewind hidden at the start, wait hidden at the end, cap max_steps.
    _case("cit-hidden-rewind-letter", CIT_RECORD, ["C"]),
    _case("cit-hidden-rewind-text", CIT_RECORD, ["Rewind the video."]),
    _case("cit-wait-to-end-and-back", CIT_RECORD, ["B", "B", "B", "B", "B"]),
    _case("cit-wait-rewind-letter", CIT_RECORD, ["B", "C", "B", "E"], hint=True),
    _case("cit-end-category-boundary", CIT_RECORD, ["B", "B", "B", "C"]),
    _case("cit-reference", CIT_RECORD, ["Dog."], mode="reference"),
    # COCO: crops per turn, exhausted directions removed, caps.
    _case("coco-left-exhaust", COCO_LEFT, ["A", "A", "A"]),
    _case("coco-left-then-category", COCO_LEFT, ["A", "A", "D"]),
    _case("coco-upleft", COCO_UP_LEFT, ["C", "C", "A", "A", "A", "A"]),
    _case("coco-upleft-text", COCO_UP_LEFT,
          ["Move the camera up.", "Move the camera up.", "Move the camera up.", "Dog."]),
    _case("coco-downright", COCO_DOWN_RIGHT, ["A", "C", "A", "Dog."]),
    _case("coco-zoom", COCO_ZOOM, ["A", "A", "A", "A"], hint=True),
    _case("coco-zoom-then-letter", COCO_ZOOM, ["A", "A", "A", "D"]),
    _case("coco-reference", COCO_ZOOM, ["B"], mode="reference"),
    _case("coco-junk", COCO_LEFT, [""]),
]


# ---- playing ours -----------------------------------------------------------------------------


def _tiny_png(value: int) -> dict:
    buffer = io.BytesIO()
    Image.new("RGB", (600, 400), (value % 256, 40, 90)).save(buffer, "PNG")
    return {"bytes": buffer.getvalue(), "path": f"{value}.png"}


def with_frames(record: dict, config: str) -> dict:
    """A copy of a metadata-only record with one small frame per reachable slot value."""
    ids = envs.reachable_frame_ids(record, config)
    return dict(record, frame_ids=ids, frames=[_tiny_png(i) for i in ids])


def _ours_box(env) -> list | None:
    if env.config != COCO or env.mode == "reference":
        return None
    return list(envs.coco_crop_box(env.record, env.h_step, env.v_step))


def play_ours(case: dict) -> dict:
    config = envs.config_of(case["record"])
    env = envs.Environment(with_frames(case["record"], config), config, mode=case["mode"],
                           hint=case["hint"], random_suggestions=case["random"],
                           preset_options=case["random"])
    turns = []
    observation = env.reset()
    oeg = env.open_ended_answers() if case["mode"] == "mcqa" else None
    for answer in case["answers"]:
        if observation.done:
            break
        turns.append({"prompt": observation.question, "options": observation.options,
                      "image_id": observation.image_id, "box": _ours_box(env)})
        observation = env.step(answer)
    stats = env.statistics()
    return {"name": case["name"], "turns": turns,
            "stats": {k: stats[k] for k in STAT_KEYS},
            "oeg_answers": oeg}


def comparable(trajectory: dict, case: dict) -> dict:
    """A trajectory without what upstream leaves to chance: in the random probe the action is
    drawn from the unseeded global `random` (it does not change these cases' states)."""
    if not case["random"]:
        return trajectory
    stats = dict(trajectory["stats"], action_history=None)
    return dict(trajectory, stats=stats)


STAT_KEYS = ("num_turns", "generated_answers", "action_evaluations", "category_evaluations",
             "correct_prediction", "image_id_history", "action_history", "max_steps")

# ---- recording upstream -----------------------------------------------------------------------

_DRIVER = r'''
import json, sys
from proactivebench.environment import get_environment
import proactivebench.environment as upstream
NAMES = {getattr(upstream, n): n for n in ("STOP", "LEFT", "RIGHT", "REWIND", "FORWARD",
    "ROTATE", "BRIGHTNESS", "CONTRAST", "SATURATE", "BLUR", "NOISE", "JPEG_COMPRESSION",
    "PIXELATE", "ARTIFACTS", "DETAILS", "UP", "DOWN", "ZOOM")}

class BoxProbe:
    box = None
    def crop(self, box):
        BoxProbe.box = list(box)
        return self

out = []
for case in json.load(sys.stdin):
    record = case["record"]
    config = record["key"].split("/", 1)[0]
    cls = get_environment(config)
    env = cls(entry=record, data_dir="", reference=case["mode"] == "reference",
              random=case["random"])
    oeg = None
    if case["mode"] == "mcqa":
        oeg = cls(entry=record, data_dir="", random=case["random"]).get_open_ended_gen_answers()
    turns = []
    for answer in case["answers"]:
        if env.stop:
            break
        state = env.get_state(hint=case["hint"])
        BoxProbe.box = None
        state["transform"](BoxProbe())
        shown = env.reference_image if env.reference else env.image_id
        turns.append({"prompt": state["prompt"], "options": list(state["options"]),
                      "image_id": shown, "box": BoxProbe.box})
        env.evaluate_generated_answer(answer)
    stats = env.get_statistics()
    stats["action_history"] = [NAMES[a] for a in stats["action_history"]]
    stats["generated_answers"] = list(stats["generated_answers"])
    out.append({"name": case["name"], "turns": turns, "stats": stats, "oeg_answers": oeg})
json.dump(out, sys.stdout)
'''


def record_upstream(python: str, package_dir: str, cases: list[dict] = CASES) -> list[dict]:
    """Play the cases through upstream's environments (a Python >= 3.12 with `proactivebench`
    importable from `package_dir`)."""
    env = dict(os.environ, PYTHONPATH=package_dir)
    result = subprocess.run([python, "-c", _DRIVER], input=json.dumps(cases), env=env,
                            capture_output=True, text=True, check=True, timeout=300)
    recorded = json.loads(result.stdout)
    for item in recorded:
        item["stats"] = {k: item["stats"][k] for k in STAT_KEYS}
    return recorded


def write_recorded(recorded: list[dict], path: str) -> None:
    """The recorded trajectories as JSON (a list in `CASES` order; do not edit by hand)."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(recorded, handle, indent=1, sort_keys=True)
        handle.write("\n")


def load_recorded(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream-python", default="python3.12")
    parser.add_argument("--package-dir", required=True,
                        help="folder holding the `proactivebench` package (e.g. an unzipped wheel)")
    parser.add_argument("--write", metavar="JSON",
                        help="write the recording there (tests/data/upstream_recorded.json)")
    args = parser.parse_args(argv)
    recorded = record_upstream(args.upstream_python, args.package_dir)
    ours = [play_ours(case) for case in CASES]
    differing = [u["name"] for u, o, case in zip(recorded, ours, CASES)
                 if comparable(u, case) != comparable(o, case)]
    print(f"{len(CASES)} cases, {len(differing)} differ: {differing}")
    if args.write:
        write_recorded(recorded, args.write)


if __name__ == "__main__":
    main()
