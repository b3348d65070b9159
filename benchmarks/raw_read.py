"""Raw reading at real source sizes, in one command:

    python benchmarks/raw_read.py --workdir /tmp/pb_real --json benchmarks/results.json

It generates (once, cached) raw files at their real per-file sizes (benchmarks/real_sources.py)
and measures, per source, the scenario's own reading code in one process against a floor
measured in the same run: a tight single-process pass over the same bytes.

| source     | reader (the scenario's code)                         | floor                            |
|------------|------------------------------------------------------|----------------------------------|
| quickdraw  | `read_unit_with_train` of each file (both splits)     | read + `re` scan of every key_id  |
| coco       | `read_index` of val2014 and train2014 (streamed)      | `json.loads` of the whole file    |
|            | beside it: the same index built with ijson (yajl2_c)  |                                  |
| imagenet_c | `list_units` + `read_unit` of all 1,000 classes       | `os.listdir` of the same folders  |
| changeit   | per video: read, build both samples, load every frame | decoding the whole video once,    |
|            | (videos: seek + decode + JPEG; frames: pre-extracted) | in order (frames: reading them)   |
| rod        | `read_unit` of each 3024 px archive                    | gunzip + untar every member       |

Then the QuickDraw-only default build (test + train, `--direct_num_workers` workers,
multi_processing) on 1 and on 3 real-size category files: the marginal throughput is the
extra ndjson bytes over the extra wall time. And the full-scale extrapolation of the whole
default build (test + train, ChangeIt from pre-extracted frames): the scale benchmark's
full-scale build time (run.py, read from --build_results) plus the raw reading its corpus
leaves out, at real size: QuickDraw's 345 files, COCO's two annotation files (each worker
process indexes both), ImageNet-C's listing. ChangeIt from videos is printed beside it.
Not part of the test suite; a timing is never asserted in a test.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import floor as floor_mod, measure, real_sources  # noqa: E402

FULL_UNITS = {"quickdraw_files": 345, "changeit_videos": 559, "rod_sequences": 88}
TARGETS = {"quickdraw_marginal_mb_s": 150.0, "full_build_minutes": 15.0}
MB = 1e6


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="benchmarks/raw_read.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="/tmp/pb_real",
                        help="Where the real-size files (cached) and build outputs go "
                             "(default: %(default)s).")
    parser.add_argument("--json", default=None,
                        help="Merge the figures into this JSON file under 'real_sizes'.")
    parser.add_argument("--build_results", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results.json"),
        help="run.py's figures, for the full-scale build time (default: %(default)s).")
    parser.add_argument("--repeat", type=int, default=3,
                        help="Repetitions; the fastest counts (default: %(default)s).")
    parser.add_argument("--build_repeat", type=int, default=4,
                        help="QuickDraw builds per size; the fastest counts "
                             "(default: %(default)s).")
    parser.add_argument("--workers", type=int, default=2,
                        help="--direct_num_workers of the QuickDraw builds (default: %(default)s).")
    parser.add_argument("--qd_files", type=int, default=3,
                        help="Real-size QuickDraw files (default: %(default)s).")
    parser.add_argument("--videos", type=int, default=3,
                        help="ChangeIt videos (default: %(default)s).")
    parser.add_argument("--video_seconds", type=int, default=240,
                        help="Length of each ChangeIt video (default: %(default)s).")
    parser.add_argument("--rod_sequences", type=int, default=4,
                        help="ROD sweeps of 14 photos at 3024 px (default: %(default)s).")
    parser.add_argument("--only", default="",
                        help="Comma-separated subset of quickdraw,quickdraw_build,coco,"
                             "imagenet_c,changeit,rod (default: all).")
    return parser.parse_args(argv)


def fastest(fn, repeat: int):
    """The fastest of `repeat` calls of fn() -> (seconds, extra)."""
    return min((fn() for _ in range(repeat)), key=lambda r: r[0])


def timed(fn):
    start = time.perf_counter()
    extra = fn()
    return time.perf_counter() - start, extra


def rate(nbytes: int, seconds: float) -> float:
    return nbytes / MB / seconds if seconds > 0 else float("inf")


# ---- QuickDraw ----------------------------------------------------------------------------------

KEY_ID = re.compile(rb'"key_id":"(\d+)"')


def quickdraw_reader(path: str) -> int:
    from proactivebench_builder.transforms.quickdraw.scenario import QuickDraw

    scenario = QuickDraw(0, os.path.dirname(os.path.dirname(path)))
    return sum(1 for v in scenario.read_unit_with_train(path) if v["kind"] == "candidate")


def quickdraw_floor(path: str) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in KEY_ID.finditer(handle.read()))


def measure_quickdraw(roots: dict, args) -> dict:
    folder = os.path.join(roots[max(roots)], "quickdraw", "simplified")
    paths = sorted(os.path.join(folder, n) for n in os.listdir(folder))
    nbytes = sum(os.path.getsize(p) for p in paths)
    reader = sum(fastest(lambda p=p: timed(lambda: quickdraw_reader(p)), args.repeat)[0]
                 for p in paths)
    floor = sum(fastest(lambda p=p: timed(lambda: quickdraw_floor(p)), args.repeat)[0]
                for p in paths)
    per_file = reader / len(paths)
    return {"files": len(paths), "bytes": nbytes, "reader_s": reader, "floor_s": floor,
            "reader_mb_s": rate(nbytes, reader), "floor_mb_s": rate(nbytes, floor),
            "ratio": reader / floor,
            "full_scale_s": per_file * FULL_UNITS["quickdraw_files"] / floor_mod.cores(),
            "full_scale_note": "345 files x the per-file read (both splits), over the cores"}


def extra_files(roots: dict) -> list[str]:
    """The files of the larger QuickDraw root that the 1-file root does not have."""
    lo, hi = (os.path.join(roots[n], "quickdraw", "simplified") for n in (min(roots), max(roots)))
    return [os.path.join(hi, n) for n in sorted(set(os.listdir(hi)) - set(os.listdir(lo)))]


def measure_quickdraw_builds(roots: dict, args) -> dict:
    runs = {}
    for n, root in sorted(roots.items()):
        folder = os.path.join(root, "quickdraw", "simplified")
        nbytes = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        walls = []
        for attempt in range(args.build_repeat):
            out = os.path.join(args.workdir, f"out-quickdraw-{n}")
            log = os.path.join(args.workdir, f"build-quickdraw-{n}-{attempt + 1}.log")
            result = measure.run_build(root, out, log, "multi_processing", args.workers,
                                       ["--scenarios", "quickdraw"])
            walls.append(result["wall_s"])
            print(f"  quickdraw build on {n} file(s), run {attempt + 1}: "
                  f"{result['wall_s']:.1f} s", flush=True)
        runs[n] = {"files": n, "bytes": nbytes, "wall_s": min(walls), "wall_s_runs": walls,
                   "samples": result["samples"]}
    lo, hi = runs[min(runs)], runs[max(runs)]
    extra_s = hi["wall_s"] - lo["wall_s"]
    # the floor of the same extra bytes: the tight key scan, one process per core
    floor_s, _ = fastest(lambda: timed(lambda: [quickdraw_floor(p) for p in extra_files(roots)]),
                         args.repeat)
    floor_s /= min(args.workers, floor_mod.cores())
    return {"runs": {str(k): v for k, v in runs.items()}, "workers": args.workers,
            "extra_s": extra_s, "extra_floor_s": floor_s,
            "marginal_mb_s": rate(hi["bytes"] - lo["bytes"], extra_s),
            "marginal_floor_mb_s": rate(hi["bytes"] - lo["bytes"], floor_s),
            "marginal_ratio": extra_s / floor_s,
            "command": "run_pipeline.py --scenarios quickdraw --runner FnApiRunner "
                       f"--direct_num_workers={args.workers} "
                       "--direct_running_mode=multi_processing"}


# ---- COCO ---------------------------------------------------------------------------------------

def _in_fresh_process(name: str, path: str) -> dict:
    """Run one COCO reading in a fresh process: its time and how much its peak memory grew
    over the process's resident memory after imports."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_coco_job, (name, path))


def memory_status(field: str) -> int:
    """VmRSS (resident now) or VmHWM (its peak) of this process, in bytes. Unlike ru_maxrss,
    which a spawned process inherits from its parent's size at fork, VmHWM starts afresh at
    exec."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _coco_job(name: str, path: str) -> dict:
    import ijson  # noqa: F401 - imported before the baseline, like the others

    from proactivebench_builder.transforms.coco import annotations as coco

    base = memory_status("VmRSS")  # resident now, after the imports
    start = time.perf_counter()
    if name == "reader":
        index = coco.read_index(path)
        found = (len(index.images), len(index.objects))
    elif name == "ijson":
        index = ijson_index(path)
        found = (len(index.images), len(index.objects))
    else:  # the floor: the C parser over the whole file at once (memory is not flat)
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
        found = (len(data["images"]), len(data["annotations"]))
    seconds = time.perf_counter() - start
    peak = memory_status("VmHWM")
    return {"seconds": seconds, "memory_growth_bytes": peak - base, "found": found}


def ijson_index(path: str):
    """The same AnnotationIndex built with ijson's C backend: one pass per array (ijson
    follows one prefix at a time), each element reduced at once as the reader does."""
    import ijson

    from proactivebench_builder.transforms.coco import annotations as coco

    builder = coco._IndexBuilder()
    for key in ("images", "annotations"):
        with open(path, "rb") as handle:
            elements = ijson.items(handle, f"{key}.item", use_float=True)
            builder.add_member(key, coco.StreamedArray(iter(elements)))
    with open(path, "rb") as handle:
        builder.add_member("categories", next(ijson.items(handle, "categories",
                                                          use_float=True)))
    return builder.index()


def measure_coco(root: str, args) -> dict:
    files = {}
    for split in real_sources.COCO_SIZES:
        path = os.path.join(root, "coco", "annotations", f"instances_{split}2014.json")
        size = os.path.getsize(path)
        entry = {"bytes": size}
        for name in ("reader", "ijson", "floor_json_loads"):
            best = min((_in_fresh_process(name, path) for _ in range(max(1, args.repeat - 1))),
                       key=lambda r: r["seconds"])
            entry[name] = dict(best, mb_s=rate(size, best["seconds"]))
            print(f"  coco {split} {name}: {best['seconds']:.1f} s, "
                  f"+{best['memory_growth_bytes'] / 2**20:.0f} MiB", flush=True)
        entry["ratio"] = entry["reader"]["seconds"] / entry["floor_json_loads"]["seconds"]
        files[split] = entry
    reader = sum(f["reader"]["seconds"] for f in files.values())
    floor = sum(f["floor_json_loads"]["seconds"] for f in files.values())
    nbytes = sum(f["bytes"] for f in files.values())
    return {"files": files, "bytes": nbytes, "reader_s": reader, "floor_s": floor,
            "reader_mb_s": rate(nbytes, reader), "floor_mb_s": rate(nbytes, floor),
            "ratio": reader / floor, "full_scale_s": reader,
            "full_scale_note": "every worker process indexes both files once, in parallel"}


# ---- ImageNet-C ---------------------------------------------------------------------------------

def measure_imagenet_c(root: str, args) -> dict:
    from proactivebench_builder.core import fileio
    from proactivebench_builder.transforms.imagenet_c.scenario import ImageNetC

    base = os.path.join(root, "ImageNet-C")
    listed = {"calls": 0, "names": 0}
    real_list = fileio.list_names

    def counting(url):
        names = real_list(url)
        listed["calls"] += 1
        listed["names"] += len(names)
        return names

    def reader():
        fileio.list_names = counting
        try:
            scenario = ImageNetC(0, base)
            return sum(1 for unit in scenario.list_units() for v in scenario.read_unit(unit)
                       if v["kind"] == "candidate")
        finally:
            fileio.list_names = real_list

    def floor():
        corruptions = [c for c in os.listdir(base)]
        wnids = set()
        for c in corruptions:
            if os.path.isdir(os.path.join(base, c, "5")):
                wnids.update(os.listdir(os.path.join(base, c, "5")))
        first = sorted(corruptions)[0]
        return sum(len(os.listdir(os.path.join(base, first, "5", w))) for w in wnids)

    reader_s, candidates = fastest(lambda: timed(reader), args.repeat)
    floor_s, _ = fastest(lambda: timed(floor), args.repeat)
    calls = listed["calls"] // args.repeat
    names = listed["names"] // args.repeat
    return {"folders": sum(1 for _ in os.scandir(base)) * 5 * 1000, "candidates": candidates,
            "listings": calls, "names_listed": names, "files_in_release": 19 * 5 * 1000 * 50,
            "reader_s": reader_s, "floor_s": floor_s, "ratio": reader_s / floor_s,
            "full_scale_s": reader_s / floor_mod.cores(),
            "full_scale_note": "the real fan-out is listed in full: its time over the cores"}


# ---- ChangeIt -----------------------------------------------------------------------------------

def changeit_pass(root: str) -> dict:
    """What the build does per video: read its annotations, build both samples and load
    every frame they reference."""
    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.changeit.scenario import ChangeIt

    scenario = ChangeIt(0, os.path.join(root, "changeit"))
    frames = samples = 0
    for unit in scenario.list_units():
        for value in scenario.read_unit(unit):
            if value["kind"] != "candidate":
                continue
            try:
                row = scenario.build_sample(value["key"], value["item"])
            except BadItem as err:
                raise RuntimeError(f"changeit benchmark sample failed: {err.reason}") from None
            samples += 1
            for ref in row["frame_refs"]:
                scenario.load_frame(ref)
                frames += 1
    return {"samples": samples, "frames": frames}


def decode_all(video: str) -> int:
    import cv2

    capture = cv2.VideoCapture(video)
    n = 0
    while capture.grab() and capture.retrieve()[0]:
        n += 1
    capture.release()
    return n


def read_all(folder: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as handle:
                total += len(handle.read())
    return total


def measure_changeit(roots: dict, args) -> dict:
    result = {"videos": args.videos, "video_seconds": args.video_seconds,
              "fps": real_sources.VIDEO_FPS, "keyframe_every_s": real_sources.KEYFRAME_S}
    for kind, root in roots.items():
        seconds, work = fastest(lambda r=root: timed(lambda: changeit_pass(r)), args.repeat)
        media = os.path.join(root, "changeit", "downloads" if kind == "videos" else "frames")
        if kind == "videos":
            videos = [os.path.join(d, n) for d, _, ns in os.walk(media) for n in ns]
            floor_s, decoded = fastest(lambda: timed(lambda: sum(decode_all(v) for v in videos)),
                                       args.repeat)
            floor_what = f"{decoded} frames decoded in order"
        else:
            floor_s, nbytes = fastest(lambda: timed(lambda: read_all(media)), args.repeat)
            floor_what = f"{nbytes} bytes of frames read"
        result[kind] = dict(work, seconds=seconds, per_video_s=seconds / args.videos,
                            floor_s=floor_s, floor_per_video_s=floor_s / args.videos,
                            floor=floor_what, ratio=seconds / floor_s,
                            full_scale_s=seconds / args.videos * FULL_UNITS["changeit_videos"]
                            / floor_mod.cores())
        print(f"  changeit from {kind}: {seconds / args.videos:.2f} s per video "
              f"(floor {floor_s / args.videos:.2f} s)", flush=True)
    return result


# ---- ROD ----------------------------------------------------------------------------------------

def measure_rod(root: str, args) -> dict:
    import tarfile

    from proactivebench_builder.transforms.rod.scenario import ROD

    base = os.path.join(root, "rod")
    archives = [os.path.join(base, n) for n in sorted(os.listdir(base)) if n.endswith(".tar.gz")]
    nbytes = sum(os.path.getsize(a) for a in archives)

    def reader():
        scenario = ROD(0, base)
        return len({v.key for unit in scenario.list_units() for v in scenario.read_unit(unit)
                    if v.kind in ("candidate", "fragment")})  # a fragment per archive holding it

    def floor():
        total = 0
        for archive in archives:
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar:
                    if member.isfile():
                        total += len(tar.extractfile(member).read())
        return total

    reader_s, candidates = fastest(lambda: timed(reader), args.repeat)
    floor_s, _ = fastest(lambda: timed(floor), args.repeat)
    return {"sequences": args.rod_sequences, "side_px": 3024, "bytes": nbytes,
            "candidates": candidates, "reader_s": reader_s, "floor_s": floor_s,
            "reader_mb_s": rate(nbytes, reader_s), "floor_mb_s": rate(nbytes, floor_s),
            "ratio": reader_s / floor_s,
            "full_scale_s": reader_s / args.rod_sequences * FULL_UNITS["rod_sequences"],
            "full_scale_note": "one unit per archive (each read forward): the archives over cores"}


# ---- the whole build ----------------------------------------------------------------------------

def extrapolate(figures: dict, build_results: str) -> dict:
    """The whole default build at full scale: the scale benchmark's extrapolated build plus
    the raw reading its corpus leaves out at real size (conservative: the corpus' own small
    raw files are counted in both)."""
    try:
        with open(build_results) as handle:
            growth = json.load(handle).get("growth", {})
    except (OSError, ValueError):
        growth = {}
    base = growth.get("full_scale_s_linear")
    if base is None:
        return {"note": f"no full-scale build time in {build_results}: run benchmarks/run.py"}
    added = {name: figures[name]["full_scale_s"] for name in ("quickdraw", "coco", "imagenet_c")
             if name in figures}
    total = base + sum(added.values())
    result = {"scale_benchmark_full_scale_s": base, "raw_read_added_s": added,
              "total_s": total, "total_min": total / 60}
    changeit = figures.get("changeit", {})
    if "videos" in changeit and "frames" in changeit:
        extra = changeit["videos"]["full_scale_s"] - changeit["frames"]["full_scale_s"]
        result["changeit_from_videos_extra_s"] = extra
        result["total_with_changeit_videos_min"] = (total + extra) / 60
    return result


def report(figures: dict) -> str:
    lines = [f"{'source':<12}{'bytes':>12}{'reader s':>10}{'MB/s':>9}{'floor s':>10}"
             f"{'MB/s':>9}{'ratio':>8}{'full scale s':>14}"]
    for name in ("quickdraw", "coco", "imagenet_c", "rod"):
        f = figures.get(name)
        if not f:
            continue
        lines.append(f"{name:<12}{f.get('bytes', 0):>12}{f['reader_s']:>10.2f}"
                     f"{f.get('reader_mb_s', float('nan')):>9.0f}{f['floor_s']:>10.2f}"
                     f"{f.get('floor_mb_s', float('nan')):>9.0f}{f['ratio']:>8.2f}"
                     f"{f['full_scale_s']:>14.0f}")
    for kind in ("frames", "videos"):
        c = figures.get("changeit", {}).get(kind)
        if c:
            lines.append(f"{'changeit/' + kind:<12}{'':>12}{c['seconds']:>10.2f}{'':>9}"
                         f"{c['floor_s']:>10.2f}{'':>9}{c['ratio']:>8.2f}"
                         f"{c['full_scale_s']:>14.0f}   ({c['per_video_s']:.2f} s per video, "
                         f"floor {c['floor_per_video_s']:.2f} s: {c['floor']})")
    coco = figures.get("coco")
    if coco:
        for split, f in coco["files"].items():
            lines.append(f"  coco {split}: reader {f['reader']['mb_s']:.0f} MB/s "
                         f"(+{f['reader']['memory_growth_bytes'] / 2**20:.0f} MiB), ijson "
                         f"{f['ijson']['mb_s']:.0f} MB/s "
                         f"(+{f['ijson']['memory_growth_bytes'] / 2**20:.0f} MiB), json.loads "
                         f"{f['floor_json_loads']['mb_s']:.0f} MB/s "
                         f"(+{f['floor_json_loads']['memory_growth_bytes'] / 2**20:.0f} MiB)")
    inc = figures.get("imagenet_c")
    if inc:
        lines.append(f"  imagenet_c: {inc['listings']} listings, {inc['names_listed']} names "
                     f"listed (the release holds {inc['files_in_release']} files)")
    qb = figures.get("quickdraw_build")
    if qb:
        runs = qb["runs"]
        lo, hi = runs[min(runs, key=int)], runs[max(runs, key=int)]
        lines.append(f"QuickDraw-only default build ({qb['workers']} workers): "
                     f"{lo['files']} file {lo['wall_s']:.1f} s, {hi['files']} files "
                     f"{hi['wall_s']:.1f} s: marginal {qb['marginal_mb_s']:.0f} MB/s of ndjson "
                     f"(target >= {TARGETS['quickdraw_marginal_mb_s']:.0f}); the floor reads "
                     f"the same extra bytes at {qb['marginal_floor_mb_s']:.0f} MB/s on "
                     f"{qb['workers']} cores: ratio {qb['marginal_ratio']:.1f}")
    whole = figures.get("full_build")
    if whole and "total_min" in whole:
        lines.append(f"whole default build at full scale (test + train, ChangeIt from frames): "
                     f"{whole['total_min']:.1f} min = scale benchmark "
                     f"{whole['scale_benchmark_full_scale_s'] / 60:.1f} min + raw reading "
                     + ", ".join(f"{k} {v / 60:.1f}" for k, v in
                                 whole["raw_read_added_s"].items())
                     + f" min (target <= {TARGETS['full_build_minutes']:.0f})")
        if "total_with_changeit_videos_min" in whole:
            lines.append(f"  with ChangeIt decoded from videos instead: "
                         f"{whole['total_with_changeit_videos_min']:.1f} min")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    wanted = lambda name: not only or name in only  # noqa: E731
    os.makedirs(args.workdir, exist_ok=True)
    load_before = os.getloadavg()
    figures = {}
    if only and args.json:  # a partial run updates the figures of a previous full one
        try:
            with open(args.json) as handle:
                figures = json.load(handle).get("real_sizes", {})
        except (OSError, ValueError):
            figures = {}
    if wanted("quickdraw") or wanted("quickdraw_build"):
        print("quickdraw: real-size files ...", flush=True)
        roots = real_sources.ensure_quickdraw(args.workdir, args.qd_files)
        if wanted("quickdraw"):
            figures["quickdraw"] = measure_quickdraw(roots, args)
        if wanted("quickdraw_build"):
            figures["quickdraw_build"] = measure_quickdraw_builds(roots, args)
    if wanted("coco"):
        print("coco: real-size annotation files ...", flush=True)
        figures["coco"] = measure_coco(real_sources.ensure_coco(args.workdir), args)
    if wanted("imagenet_c"):
        print("imagenet_c: the real folder fan-out ...", flush=True)
        figures["imagenet_c"] = measure_imagenet_c(real_sources.ensure_imagenet_c(args.workdir),
                                                   args)
    if wanted("changeit"):
        print("changeit: videos and pre-extracted frames ...", flush=True)
        figures["changeit"] = measure_changeit(
            real_sources.ensure_changeit(args.workdir, args.videos, args.video_seconds), args)
    if wanted("rod"):
        print("rod: 3024 px archives ...", flush=True)
        figures["rod"] = measure_rod(real_sources.ensure_rod(args.workdir, args.rod_sequences),
                                     args)
    figures["full_build"] = extrapolate(figures, args.build_results)
    figures["machine"] = {"cores": floor_mod.cores(), "python": platform.python_version(),
                          "load_average_before": load_before,
                          "load_average_after": os.getloadavg()}
    figures["date"] = datetime.date.today().isoformat()
    figures["targets"] = TARGETS
    print()
    print(report(figures))
    if args.json:
        try:
            with open(args.json) as handle:
                merged = json.load(handle)
        except (OSError, ValueError):
            merged = {}
        merged["real_sizes"] = figures
        with open(args.json, "w") as handle:
            json.dump(merged, handle, indent=1, sort_keys=True, default=str)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
