"""The floor: what a tight single-process loop needs for the essential per-frame work of a build
(read the source bytes, validate them, render and encode where a scenario renders), divided by
the number of cores.

The frames are exactly the build's: a planning pass (untimed) runs each scenario's own
`list_units` / `read_unit` / `build_sample` (and the train split's counterparts) to collect every
row's frame references. The timed loop then does, per frame reference:
- a source file (`file`): read its bytes and validate them with the same cheap check the build
  uses (`pipeline.images.check_image`);
- a ROD tar member: one sequential pass over each `.tar.gz`, reading and validating every
  referenced member;
- a rendered frame (QuickDraw strokes, a COCO train view, a video frame): the scenario's own
  `load_frame`, i.e. render (or decode and crop) and encode;
plus, for QuickDraw, parsing the ndjson lines the drawings come from (reading its source).
Writing the output is not in this compute floor, nor is per-sample logic (prompts, options,
crop plans), nor loading COCO's annotation JSON. The loop also sums the bytes of one encoded
copy of every frame (what the output must hold once), and `disk_floor` is the second floor:
writing the build's output bytes once, sequentially, synced.
"""
from __future__ import annotations

import json
import os
import posixpath
import tarfile
import time
from collections import Counter, defaultdict

from proactivebench_builder.core import fileio, results
from proactivebench_builder.core.images import check_image


def plan_frames(sources: dict[str, str], seed: int = 0, train: bool = True) -> dict:
    """Per scenario: the frame references of its rows (and of its train examples), and counts."""
    from proactivebench_builder.transforms import load_scenarios

    from proactivebench_builder.pipeline.reading import merged_fragments

    scenarios = load_scenarios()
    plan = {}
    for name, root in sorted(sources.items()):
        scenario = scenarios[name](seed, root)
        refs, rows = [], 0
        values = [v for unit in scenario.list_units() for v in scenario.read_unit(unit)]
        # the parts of a raw item read in several units (ROD's archives), merged as the build does
        values += merged_fragments([v for v in values if isinstance(v, results.Fragment)])
        for value in values:
            if not isinstance(value, results.Candidate):
                continue
            try:
                row = scenario.build_sample(value.key, value.item)
            except Exception:  # noqa: BLE001 - a dead letter in the build too
                continue
            rows += 1
            refs.extend(row["frame_refs"])
        train_refs = []
        if train and scenario.has_train_split:
            for unit in scenario.list_train_units():
                for value in scenario.read_train_unit(unit):
                    if isinstance(value, results.Candidate):
                        try:
                            example = scenario.build_train_example(value.key, value.item)
                        except Exception:  # noqa: BLE001
                            continue
                        train_refs.append(example["image_ref"])
        plan[name] = {"root": root, "rows": rows, "refs": refs, "train_refs": train_refs}
    return plan


def cached_plan(workdir: str, corpus_root: str, sources: dict[str, str]) -> dict:
    """`plan_frames` of a corpus, kept in `workdir` (it runs every scenario's reading and
    building once, about as long as the floor itself: minutes at full scale), keyed by the
    corpus (its real path) and this file. Not by the scenarios' code, which changes far more
    often than which frames a corpus gives: `run.py` compares the plan's sample counts with
    every build's and reports a mismatch, and `--replan` makes the plan again."""
    import hashlib
    import pickle

    digest = hashlib.sha256(os.path.realpath(corpus_root).encode())
    with open(__file__, "rb") as handle:
        digest.update(handle.read())
    cache = os.path.join(workdir, f"plan-{digest.hexdigest()[:16]}.pickle")
    if os.path.exists(cache) and not REPLAN:
        with open(cache, "rb") as handle:
            return pickle.load(handle)
    plan = plan_frames(sources)
    with open(cache + ".tmp", "wb") as handle:
        pickle.dump(plan, handle, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(cache + ".tmp", cache)
    return plan


REPLAN = False  # set by run.py --replan


def frame_counts(plan: dict) -> dict:
    return {name: {"samples": p["rows"], "frames": len(p["refs"]),
                   "train_frames": len(p["train_refs"])} for name, p in plan.items()}


def run_floor(plan: dict, seed: int = 0) -> dict:
    """Time the tight loop, per scenario; returns seconds and frames per scenario."""
    from proactivebench_builder.transforms import load_scenarios

    scenarios = load_scenarios()
    timings = {}
    for name, p in sorted(plan.items()):
        scenario = scenarios[name](seed, p["root"])
        start, cpu = time.perf_counter(), time.process_time()
        if name == "quickdraw":
            parse_ndjson(scenario)
        frames, encoded = process_refs(scenario, p["refs"] + p["train_refs"])
        # CPU time too: on a shared machine it moves far less than wall time
        timings[name] = {"seconds": time.perf_counter() - start,
                         "cpu_s": time.process_time() - cpu, "frames": frames,
                         "frame_bytes": encoded}
    return timings


def process_refs(scenario, refs: list[dict]) -> tuple[int, int]:
    """The essential work for each reference; tar members are grouped per archive and read in
    one sequential pass (the way any reader of a .tar.gz must). Returns the frames and the
    bytes of one encoded copy of them (what the output must hold once)."""
    by_archive = defaultdict(list)
    done = encoded = 0
    for ref in refs:
        kind = ref["kind"]
        if kind == "file":
            with open(ref["url"], "rb") as handle:
                data = handle.read()
            check_image(data, posixpath.basename(ref["url"]))
            encoded += len(data)
        elif kind == "tar_member":
            by_archive[ref["url"]].append(ref["member"])
        else:  # rendered: strokes, a crop view, a video frame
            encoded += len(scenario.load_frame(ref))
        done += 1
    for url, members in sorted(by_archive.items()):
        encoded += read_tar_members(url, members)
    return done, encoded


def read_tar_members(url: str, members: list) -> int:
    """Read and check the listed members in one pass; returns the bytes of the references (a
    member listed twice, ROD's substituted photo, is a frame twice in the output)."""
    wanted = {name: members.count(name) for name in set(members)}
    encoded = 0
    with open(url, "rb") as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
        for member in tar:
            if member.isfile() and member.name in wanted:
                check_image(tar.extractfile(member).read(), member.name)
                encoded += member.size * wanted[member.name]
    return encoded


def disk_floor(folder: str, nbytes: int, block: int = 8 << 20) -> float:
    """Seconds to write `nbytes` once, sequentially, into a new file in `folder` (the build's
    output disk) and sync it: the least any build writing that many bytes there waits for."""
    import tempfile

    chunk = os.urandom(block)
    handle, path = tempfile.mkstemp(prefix=".disk-floor-", dir=folder)
    try:
        start = time.perf_counter()
        left = nbytes
        while left > 0:
            left -= os.write(handle, chunk if left >= block else chunk[:left])
        os.fsync(handle)
        return time.perf_counter() - start
    finally:
        os.close(handle)
        os.remove(path)


def parse_ndjson(scenario) -> None:
    """QuickDraw's source reading: every line of every category file parsed as JSON."""
    for unit in scenario.list_units():
        fs, path = fileio.filesystem(unit)
        with open(path, "rb") as handle:
            for line in handle:
                json.loads(line)


def kinds(plan: dict) -> dict:
    """How many references of each kind (for the report)."""
    return {name: dict(Counter(r["kind"] for r in p["refs"] + p["train_refs"]))
            for name, p in plan.items()}


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
