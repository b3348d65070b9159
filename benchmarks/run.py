"""The scale benchmark of the build, in one command:

    python benchmarks/run.py --fractions 0.01,0.1 --workdir /tmp/pb_bench --json benchmarks/results.json

For each fraction of the full benchmark (1.0 = ~18.9k samples, ~100k test frames) it generates
(once, cached under --workdir) a scale corpus in the real raw layouts (benchmarks/corpus.py),
then measures
- the build: the real pipeline (`run_pipeline.py`, FnApiRunner, 2 workers, the default build:
  train split and upstream export included) as a subprocess, in each of --modes (default
  multi_processing, then multi_threading for comparison), --repeat times (the fastest run
  counts): wall time, frames per second, CPU time, and the peak memory of the whole process
  tree;
- the floor: a tight single-process loop over the same frames doing the essential per-frame work
  (read, validate, render where a scenario renders, encode), divided by the number of cores
  (benchmarks/floor.py), also the fastest of --repeat;
and prints a table with the ratio build/floor, how time and memory grow between the smallest and
the largest fraction (the exponent of time ~ fraction^k), the build time split into a fixed
cost and a marginal ratio, and the extrapolated full-scale build time. The figures go to
--json. Not part of the test suite: it takes minutes, and a timing is never asserted in a test.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import corpus, floor, measure, stage_profile  # noqa: E402

TARGETS = {"ratio": 1.5, "time_exponent": 1.1, "memory_growth": 0.20}


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fractions", default="0.01,0.1",
                        help="Comma-separated fractions of the full benchmark (default: %(default)s).")
    parser.add_argument("--workdir", default="/tmp/pb_bench",
                        help="Where corpora (cached), build outputs and logs go (default: %(default)s).")
    parser.add_argument("--json", default=None, help="Write the figures to this JSON file.")
    parser.add_argument("--modes", default="multi_processing,multi_threading",
                        help="--direct_running_mode of the build, comma-separated; the first is "
                             "the one the targets are checked on, the others are measured in the "
                             "same run for comparison (default: %(default)s).")
    parser.add_argument("--repeat", type=int, default=3,
                        help="Builds (and floor loops) per fraction and mode; the fastest counts, "
                             "since this machine is shared and noise only ever adds time "
                             "(default: %(default)s).")
    parser.add_argument("--workers", type=int, default=2,
                        help="--direct_num_workers of the build (default: %(default)s).")
    parser.add_argument("--replan", action="store_true",
                        help="Make the frame plan of each corpus again (it is cached in the "
                             "workdir, keyed by the corpus; a plan whose sample counts differ "
                             "from a build's is reported as a mismatch).")
    parser.add_argument("--no_profile", action="store_true",
                        help="Run the build as run_pipeline.py alone, without the per-stage "
                             "profile's recorders (benchmarks/stage_profile.py).")
    parser.add_argument("--build_args", default="",
                        help="Extra flags for the build, space-separated (e.g. '--no_train').")
    parser.add_argument("--rod_side", type=int, default=corpus.DEFAULTS["rod_side"],
                        help="Side of the ROD photos in pixels (default: %(default)s; real: 3024).")
    parser.add_argument("--vsod_frames", type=int, default=corpus.DEFAULTS["vsod_frames"],
                        help="Frames per VSOD segment (default: %(default)s).")
    parser.add_argument("--qd_lines", type=int, default=corpus.DEFAULTS["qd_lines"],
                        help="Drawings per QuickDraw category file (default: %(default)s).")
    parser.add_argument("--changeit_seconds", type=int,
                        default=corpus.DEFAULTS["changeit_seconds"],
                        help="Annotated seconds per ChangeIt video (default: %(default)s).")
    return parser.parse_args(argv)


def sources_of(root: str) -> dict[str, str]:
    from proactivebench_builder.transforms import manifest_of
    from proactivebench_builder.transforms import load_scenarios

    return {n: os.path.join(root, manifest_of(n)["source_subdir"]) for n in load_scenarios()}


def measure_fraction(fraction: float, args, settings: dict) -> dict:
    log = lambda text: print(f"[{fraction:g}] {text}", flush=True)  # noqa: E731
    log("corpus ...")
    root = corpus.ensure_corpus(args.workdir, fraction, settings)
    log(f"corpus at {root}; planning frames ...")
    floor.REPLAN = args.replan
    plan = floor.cached_plan(args.workdir, root, sources_of(root))
    counts = floor.frame_counts(plan)
    frames = sum(c["frames"] + c["train_frames"] for c in counts.values())
    log(f"{frames} frames; floor loop x{args.repeat} ...")
    timings = fastest_floor([floor.run_floor(plan) for _ in range(args.repeat)])
    cores = floor.cores()
    floor_s = sum(t["seconds"] for t in timings.values()) / cores
    floor_cpu_s = sum(t.get("cpu_s", t["seconds"]) for t in timings.values())
    builds = {}
    for mode in args.modes:
        runs, failures = [], []
        for attempt in range(args.repeat):
            log(f"build ({mode}, run {attempt + 1} of {args.repeat}) ...")
            out = os.path.join(args.workdir, f"out-{fraction:g}")
            log_path = os.path.join(args.workdir, f"build-{fraction:g}-{mode}-{attempt + 1}.log")
            try:
                runs.append(measure.run_build(root, out, log_path, mode, args.workers,
                                              args.build_args.split(),
                                              profile=not args.no_profile))
                if runs[-1].get("profile"):
                    print(stage_profile.format_profile(runs[-1]["profile"]), flush=True)
            except RuntimeError as err:  # a failed build is a finding, not a crash of the bench
                failures.append({"log": log_path, "error": failure_line(log_path)})
                log(f"build FAILED: {err}: {failures[-1]['error']}")
        if not runs:
            raise RuntimeError(f"every {mode} build failed at {fraction:g}: {failures}")
        builds[mode] = dict(summarize_runs(runs), failed_runs=failures)
        log(f"{mode}: build {builds[mode]['wall_s']:.1f} s (runs: "
            f"{', '.join(f'{r:.1f}' for r in builds[mode]['wall_s_runs'])}), floor "
            f"{floor_s:.1f} s, ratio {builds[mode]['wall_s'] / floor_s:.2f}, peak "
            f"{builds[mode]['peak_rss_bytes'] / 2**20:.0f} MiB")
    build = builds[args.modes[0]]
    # the second floor: the build's output bytes written once, sequentially, synced, on the
    # disk the build writes to (the fastest of --repeat)
    output_bytes = build["output_bytes"]
    log(f"disk floor: writing {output_bytes / 1e9:.2f} GB once x{args.repeat} ...")
    disk_s = min(floor.disk_floor(args.workdir, output_bytes) for _ in range(args.repeat))
    frame_bytes = sum(t.get("frame_bytes", 0) for t in timings.values())
    result = {
        "fraction": fraction, "corpus": root, "corpus_files": corpus.corpus_stats(root),
        "counts": counts, "frames": frames,
        "samples": sum(c["samples"] for c in counts.values()),
        "floor": {"single_process_s": floor_s * cores, "cores": cores, "floor_s": floor_s,
                  "cpu_s": floor_cpu_s,
                  "per_scenario": timings, "kinds": floor.kinds(plan)},
        "build": build, "builds": builds,
        "frames_per_s": frames / build["wall_s"],
        "ratio": build["wall_s"] / floor_s,
        # what the output holds against one encoded copy of every frame (test pool and train
        # split: the floor's bytes); the rest is metadata (other columns, reports, card)
        "output": {"bytes": output_bytes, "frame_bytes": frame_bytes,
                   "bytes_per_frame": output_bytes / frames,
                   "over_one_copy": output_bytes / frame_bytes if frame_bytes else None},
        "disk_floor": {"bytes": output_bytes, "seconds": disk_s,
                       "ratio": build["wall_s"] / disk_s},
        # the build's CPU time over the floor's: the overhead of the work itself, apart from
        # waiting (idle cores, the disk) and from other work on a shared machine
        "cpu_ratio": build["cpu_s"] / floor_cpu_s,
    }
    mismatch = {n: (c["samples"], build["samples"].get(n)) for n, c in counts.items()
                if build["samples"].get(n) != c["samples"]}
    if mismatch:
        result["sample_count_mismatch"] = mismatch
    return result


def failure_line(log_path: str) -> str:
    """The build's own last word on why it failed (its BUILD FAILED line, or the last line)."""
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    failed = [line for line in lines if "BUILD FAILED" in line]
    return (failed or lines or [""])[-1][:300]


def fastest_floor(attempts: list[dict]) -> dict:
    """Per scenario, the fastest of the repeated floor loops."""
    return {name: min((a[name] for a in attempts), key=lambda t: t["seconds"])
            for name in attempts[0]}


def summarize_runs(runs: list[dict]) -> dict:
    """The fastest of repeated builds (noise on a shared machine only adds time), with every
    run's wall time, and the highest peak memory seen in any of them (memory is not noise)."""
    best = dict(min(runs, key=lambda r: r["wall_s"]))
    best["wall_s_runs"] = [r["wall_s"] for r in runs]
    best["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in runs)
    best["peak_rss_by_role_runs"] = [
        {role: peak for role, peak in (r.get("profile") or {}).get("peak_rss", {}).items()}
        for r in runs]
    return best


def growth(results: list[dict]) -> dict:
    """Time exponent k (time ~ fraction^k) and memory growth between the smallest and the
    largest fraction, the full-scale extrapolation (linear fit through both points, which
    keeps the fixed start-up cost fixed; and the power law, which does not), and the build
    time split into a fixed cost and a marginal ratio: the line through (floor, build) of both
    fractions, build = fixed + marginal x floor, so the marginal ratio is what each second of
    essential per-frame work costs the build once start-up is paid."""
    if len(results) < 2:
        return {}
    lo, hi = results[0], results[-1]
    scale = hi["fraction"] / lo["fraction"]
    t_lo, t_hi = lo["build"]["wall_s"], hi["build"]["wall_s"]
    m_lo, m_hi = lo["build"]["peak_rss_bytes"], hi["build"]["peak_rss_bytes"]
    f_lo, f_hi = lo["floor"]["floor_s"], hi["floor"]["floor_s"]
    slope = (t_hi - t_lo) / (hi["fraction"] - lo["fraction"])
    exponent = math.log(t_hi / t_lo) / math.log(scale)
    frames_exponent = math.log(t_hi / t_lo) / math.log(hi["frames"] / lo["frames"])
    marginal = (t_hi - t_lo) / (f_hi - f_lo)
    return {
        "from": lo["fraction"], "to": hi["fraction"],
        "time_exponent": exponent, "time_exponent_per_frame": frames_exponent,
        "memory_growth": m_hi / m_lo - 1.0,
        "full_scale_s_linear": t_hi + slope * (1.0 - hi["fraction"]),
        "full_scale_s_power": t_hi * (1.0 / hi["fraction"]) ** exponent,
        "full_scale_frames_est": hi["frames"] / hi["fraction"],
        "fixed_s": t_lo - marginal * f_lo, "marginal_ratio": marginal,
    }


def verdict(results: list[dict], trend: dict) -> dict:
    ratio = results[-1]["ratio"]
    checks = {"ratio": ratio <= TARGETS["ratio"]}
    if trend:
        checks["time_exponent"] = trend["time_exponent"] <= TARGETS["time_exponent"]
        checks["memory_flat"] = abs(trend["memory_growth"]) <= TARGETS["memory_growth"]
    return checks


def role_peaks(build: dict) -> str:
    """The driver's and each worker's own peak (each at its own moment), in MiB."""
    peaks = (build.get("profile") or {}).get("peak_rss") or {}
    roles = ["driver"] + sorted(r for r in peaks if r.startswith("worker"))
    return "/".join(f"{peaks[r] / 2**20:.0f}" for r in roles if r in peaks) or "-"


def table(results: list[dict], trend: dict) -> str:
    header = ("fraction", "samples", "frames", "build s", "frames/s", "floor s", "floor CPU s",
              "build/floor", "disk floor s", "build/disk", "output GB", "bytes/frame",
              "output/frames",
              "peak MiB", "driver/workers MiB", "CPU s", "cores busy", "CPU/floor CPU")
    rows = [header]
    for r in results:
        floor_s = r["floor"]["floor_s"]
        for mode, b in r["builds"].items():  # the checked mode first
            rows.append((f"{r['fraction']:g} ({mode})", r["samples"], r["frames"],
                         f"{b['wall_s']:.1f}", f"{r['frames'] / b['wall_s']:.0f}",
                         f"{floor_s:.1f}", f"{r['floor'].get('cpu_s', 0):.1f}",
                         f"{b['wall_s'] / floor_s:.2f}",
                         f"{r['disk_floor']['seconds']:.1f}",
                         f"{b['wall_s'] / r['disk_floor']['seconds']:.2f}",
                         f"{b['output_bytes'] / 1e9:.2f}", f"{b['output_bytes'] / r['frames']:.0f}",
                         f"{b['output_bytes'] / r['output']['frame_bytes']:.3f}"
                         if r["output"]["frame_bytes"] else "-",
                         f"{b['peak_rss_bytes'] / 2**20:.0f}", role_peaks(b),
                         f"{b['cpu_s']:.1f}", f"{b['cpu_s'] / b['wall_s']:.2f}",
                         f"{b['cpu_s'] / r['floor'].get('cpu_s', floor_s * 2):.2f}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(v).rjust(w) for v, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if trend:
        lines += ["", f"time exponent {trend['from']:g} -> {trend['to']:g}: "
                      f"{trend['time_exponent']:.2f} (per frame: "
                      f"{trend['time_exponent_per_frame']:.2f}); peak memory growth "
                      f"{trend['memory_growth']:+.0%}",
                  f"build = {trend['fixed_s']:.1f} s fixed + {trend['marginal_ratio']:.2f} x floor "
                  f"(marginal ratio)",
                  f"extrapolated full-scale build (~{trend['full_scale_frames_est']:.0f} frames): "
                  f"{trend['full_scale_s_linear'] / 60:.1f} min (linear), "
                  f"{trend['full_scale_s_power'] / 60:.1f} min (power law)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    fractions = sorted(float(f) for f in args.fractions.split(",") if f.strip())
    os.makedirs(args.workdir, exist_ok=True)
    settings = {k: getattr(args, k) for k in corpus.DEFAULTS}
    load_before = os.getloadavg()  # the machine may be shared: say how busy it was
    results = [measure_fraction(f, args, settings) for f in fractions]
    load_after = os.getloadavg()
    trend = growth(results)
    checks = verdict(results, trend)
    for r in results:
        profile = r["build"].get("profile")
        if profile:
            print(f"\nper-stage profile at {r['fraction']:g} (the fastest "
                  f"{args.modes[0]} run, {r['build']['wall_s']:.1f} s):")
            print(stage_profile.format_profile(profile))
    print()
    print(table(results, trend))
    for r in results:
        for mode, build in r["builds"].items():
            for failure in build["failed_runs"]:
                print(f"FAILED build at {r['fraction']:g} ({mode}): {failure['error']}")
    print("targets:", ", ".join(f"{k} {'met' if ok else 'MISSED'}" for k, ok in checks.items()))
    if args.json:
        figures = {"date": datetime.date.today().isoformat(),
                   "machine": {"cores": floor.cores(), "python": platform.python_version(),
                               "load_average_before": load_before,
                               "load_average_after": load_after,
                               "processor": platform.processor() or platform.machine()},
                   "settings": dict(settings, modes=args.modes, workers=args.workers,
                                    repeat=args.repeat, build_args=args.build_args),
                   "targets": TARGETS, "checks": checks, "growth": trend,
                   "results": results}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        try:  # figures of other tools in the same file (raw_read.py's real_sizes) are kept
            with open(args.json) as handle:
                previous = json.load(handle)
        except (OSError, ValueError):
            previous = {}
        if isinstance(previous, dict):
            figures = dict({k: v for k, v in previous.items() if k not in figures}, **figures)
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=1, sort_keys=True, default=str)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
