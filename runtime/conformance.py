"""Conformance with upstream: the cases each upstream scenario declares (`Play.conformance_cases`
in its folder: hand-made records played with scripted answers), and the means to compare our
environments with upstream's.

How the expected trajectories were obtained (recorded, not hand-derived):
`pip download proactivebench==0.1.1 --no-deps --python-version 3.12 --only-binary=:all:` fetched
the upstream wheel from PyPI; its `environment.py` needs only the standard library, so it runs
unmodified on CPython 3.12 (the package requires >= 3.12; our runtime is 3.11). `record_upstream`
plays every declared case through upstream's `get_environment(config)(entry, data_dir="")`,
`get_state(hint)` and `evaluate_generated_answer(answer)` in a subprocess, and stores per turn the
question, the displayed options, the shown image id, the path of the image shown and (COCO) the crop box the upstream
transform passes to `Image.crop`, plus `get_statistics()` and `get_open_ended_gen_answers()`.
The output is frozen in `tests/data/upstream_recorded.json` (data beside the tests that read
it, not code); regenerate it with

    python -m proactivebench_builder.runtime.conformance --upstream-python python3.12 \
        --package-dir DIR_WITH_proactivebench --write tests/data/upstream_recorded.json

Random-suggestion cases are limited to scenarios whose random action is determined: upstream
draws the action from the unseeded global `random`. Their records already carry the replaced
options (upstream expects that; a case names each by its action, `core.conformance.foreign`, and
it is filled in from the probe's fixed pool here), so ours are played
with `random_suggestions` on the preset record (`preset_options=True`); the action names drawn
in those cases are not compared (`comparable`).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess

from PIL import Image

from proactivebench_builder import transforms
from proactivebench_builder.core.conformance import FOREIGN
from proactivebench_builder.runtime import environments as envs

_FOREIGN = re.compile(re.escape(FOREIGN).replace(re.escape("{action}"), "(?P<action>[A-Z_]+)"))


def declared_cases() -> list[dict]:
    """Every case the registered scenarios declare, upstream's in the paper's order, with each
    placeholder of another scenario's suggestion (`core.conformance.foreign`) replaced by the
    first option of the probe's fixed pool that names its action."""
    pool = transforms.probe_pool()

    def resolved(option):
        match = _FOREIGN.fullmatch(option)
        if match is None:
            return option
        return next(o for o in pool if transforms.upstream_action_of(o) == match["action"])

    cases = []
    for case in transforms.conformance_cases():
        record = dict(case["record"], options=[resolved(o) for o in case["record"]["options"]])
        cases.append(dict(case, record=record))
    return cases


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
    box = env.rules.view_box(env)
    return None if box is None else list(box)


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
                      "image_id": observation.image_id, "box": _ours_box(env),
                      "image_path": env.rules.play.frame_path(env.record, env.shown_frame_id())})
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
                      "image_id": shown, "box": BoxProbe.box, "image_path": state["image_path"]})
        env.evaluate_generated_answer(answer)
    stats = env.get_statistics()
    stats["action_history"] = [NAMES[a] for a in stats["action_history"]]
    stats["generated_answers"] = list(stats["generated_answers"])
    out.append({"name": case["name"], "turns": turns, "stats": stats, "oeg_answers": oeg})
json.dump(out, sys.stdout)
'''


def record_upstream(python: str, package_dir: str, cases: list[dict] | None = None) -> list[dict]:
    """Play the cases through upstream's environments (a Python >= 3.12 with `proactivebench`
    importable from `package_dir`)."""
    cases = declared_cases() if cases is None else cases
    env = dict(os.environ, PYTHONPATH=package_dir)
    result = subprocess.run([python, "-c", _DRIVER], input=json.dumps(cases), env=env,
                            capture_output=True, text=True, check=True, timeout=300)
    recorded = json.loads(result.stdout)
    for item in recorded:
        item["stats"] = {k: item["stats"][k] for k in STAT_KEYS}
    return recorded


def write_recorded(recorded: list[dict], path: str) -> None:
    """The recorded trajectories as JSON (a list in `declared_cases()` order; do not edit by
    hand)."""
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
    cases = declared_cases()
    recorded = record_upstream(args.upstream_python, args.package_dir, cases)
    ours = [play_ours(case) for case in cases]
    differing = [u["name"] for u, o, case in zip(recorded, ours, cases)
                 if comparable(u, case) != comparable(o, case)]
    print(f"{len(cases)} cases, {len(differing)} differ: {differing}")
    if args.write:
        write_recorded(recorded, args.write)


if __name__ == "__main__":
    main()
