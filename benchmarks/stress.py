"""The stress harness: repeat one build many times and check that every run agrees.

    python benchmarks/stress.py --runs 30 --fraction 0.1 --mode default
    python benchmarks/stress.py --runs 20 --fraction 0.05 --mode multi_threading --workers 2

Each run is a fresh build of the same benchmark corpus (benchmarks/corpus.py, generated once and
cached under --workdir) into the same output folder, as a subprocess (`run_pipeline.py`), in the
given running mode (`default`: no worker flags at all, so the build's own default is what is
tested). After each run it records the exit code, the accounting check of every scenario (raw
items = samples + dead letters + exclusions, test and train branch) and the sha256 of every file
the build wrote, and compares them with the first successful run. It prints one line per run and
a summary, writes the figures to --json, and exits non-zero when any run failed, any accounting
check failed, or any file differs from the first run (docs/stress.md).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import corpus  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("default", "in_memory", "multi_threading", "multi_processing")
# Files that legitimately differ between identical builds: none today. The build log is kept
# beside the output, not in it.
IGNORED: tuple[str, ...] = ()


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="benchmarks/stress.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30,
                        help="Builds to run (default: %(default)s).")
    parser.add_argument("--fraction", type=float, default=0.1,
                        help="Scale of the benchmark corpus (default: %(default)s, ~20 s a build "
                             "on 2 quiet cores).")
    parser.add_argument("--mode", choices=MODES, default="default",
                        help="`default` passes no worker flags (the build's own default); the "
                             "others pass --direct_running_mode=MODE and --direct_num_workers "
                             "(default: %(default)s).")
    parser.add_argument("--workers", type=int, default=2,
                        help="--direct_num_workers for an explicit mode (default: %(default)s).")
    parser.add_argument("--workdir", default="/tmp/pb_stress",
                        help="Corpus cache, output folder and logs (default: %(default)s).")
    parser.add_argument("--build_args", default="",
                        help="Extra build flags, space-separated (e.g. '--scenarios quickdraw').")
    parser.add_argument("--json", default=None, help="Write every run's figures to this file.")
    parser.add_argument("--beam_flush_ms", type=int, default=None,
                        help="Hunting aid: run the build with Beam's timed data-plane flush every "
                             "MS milliseconds (Beam's own default is 1000; the build turns it off) "
                             "to make the race it has more frequent (docs/stress.md).")
    parser.add_argument("--switch_interval", type=float, default=None,
                        help="Hunting aid: the build's sys.setswitchinterval (Python's default is "
                             "0.005 s); a tiny one makes threads preempt each other far more "
                             "often, so races show sooner (docs/stress.md).")
    parser.add_argument("--stop_on_failure", action="store_true",
                        help="Stop at the first failed or differing run (its output is kept).")
    return parser.parse_args(argv)


# The build under the hunting aids: Beam's timed flush put back every MS milliseconds (MS < 0:
# left as the build sets it) and the thread switch interval S (S <= 0: Python's default).
HUNTING = """import sys
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from proactivebench_builder.pipeline import beam_compat
from proactivebench_builder.pipeline.commands import main as build
flush_ms, switch = int(sys.argv[1]), float(sys.argv[2])
if flush_ms >= 0:
    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = flush_ms
    beam_compat.no_timed_flushes = lambda: None
if switch > 0:
    sys.setswitchinterval(switch)
sys.exit(build.main(sys.argv[3:]))
"""


def build_command(sources_root: str, output: str, mode: str, workers: int,
                  extra: list[str], beam_flush_ms: int | None = None,
                  switch_interval: float | None = None) -> list[str]:
    hunting = beam_flush_ms is not None or switch_interval is not None
    program = [os.path.join(REPO, "run_pipeline.py")] if not hunting else [
        "-c", HUNTING, str(-1 if beam_flush_ms is None else beam_flush_ms),
        str(switch_interval or 0)]
    command = [sys.executable, *program, "--sources_root", sources_root, "--output", output]
    if mode != "default":
        command += [f"--direct_num_workers={workers}", f"--direct_running_mode={mode}"]
    return command + extra


def file_hashes(folder: str) -> dict[str, str]:
    """sha256 of every file under `folder`, by relative path."""
    hashes = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder)
            if rel in IGNORED:
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            hashes[rel] = digest.hexdigest()
    return hashes


def accounting(report: dict) -> dict[str, bool]:
    """The build's own accounting check per scenario and per train branch."""
    checks = {name: r["accounted"] for name, r in report["scenarios"].items()}
    for name, r in (report.get("train") or {}).get("scenarios", {}).items():
        checks[f"{name}/train"] = r["accounted"]
    return checks


def differences(first: dict[str, str], other: dict[str, str]) -> list[str]:
    """Paths whose content differs, or that only one of the two builds wrote."""
    return sorted(p for p in set(first) | set(other) if first.get(p) != other.get(p))


def report_differences(first: dict, report: dict) -> dict:
    """Per scenario, the fields of build.json that differ from the first run (what was lost)."""
    changed = {}
    for name, entry in report["scenarios"].items():
        base = first["scenarios"].get(name, {})
        diff = {k: (base.get(k), v) for k, v in entry.items() if base.get(k) != v}
        if diff:
            changed[name] = diff
    if first.get("train") != report.get("train"):
        changed["train"] = {"first": first.get("train"), "this": report.get("train")}
    return changed


def run_once(command: list[str], output: str, log_path: str) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    start = time.perf_counter()
    with open(log_path, "w") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    result = {"exit": code, "wall_s": time.perf_counter() - start, "log": log_path}
    build_json = os.path.join(output, "reports", "build.json")
    if os.path.exists(build_json):
        with open(build_json) as handle:
            result["report"] = json.load(handle)
        result["accounting"] = accounting(result["report"])
        result["hashes"] = file_hashes(output)
    return result


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.workdir, exist_ok=True)
    root = corpus.ensure_corpus(args.workdir, args.fraction)
    output = os.path.join(args.workdir, "out")
    command = build_command(root, output, args.mode, args.workers, args.build_args.split(),
                            args.beam_flush_ms, args.switch_interval)
    shown = command[command.index("--sources_root"):]
    aids = ([f"Beam's timed flush every {args.beam_flush_ms} ms"] if args.beam_flush_ms
            is not None else []) + ([f"switch interval {args.switch_interval} s"]
                                    if args.switch_interval else [])
    print(f"{args.runs} builds, mode {args.mode}" + "".join(", " + a for a in aids)
          + f": {' '.join(shown)}", flush=True)
    first, runs, bad = None, [], 0
    for i in range(1, args.runs + 1):
        log_path = os.path.join(args.workdir, f"build-{args.mode}-{i:03d}.log")
        result = run_once(command, output, log_path)
        problems = []
        if result["exit"] != 0:
            problems.append(f"exit {result['exit']}")
        failed = sorted(n for n, ok in result.get("accounting", {}).items() if not ok)
        if failed:
            problems.append("accounting failed: " + ", ".join(failed))
        if "hashes" not in result:
            problems.append("no build.json")
        elif first is None and not problems:
            first = result
        elif first is not None:
            diff = differences(first["hashes"], result["hashes"])
            if diff:
                result["differing_files"] = diff
                result["report_differences"] = report_differences(first["report"],
                                                                  result["report"])
                problems.append(f"{len(diff)} files differ from run {first['run']}, e.g. "
                                + ", ".join(diff[:3]))
        result.update(run=i, problems=problems)
        bad += bool(problems)
        status = "ok" if not problems else "PROBLEM: " + "; ".join(problems)
        print(f"run {i:3d}/{args.runs}: {result['wall_s']:6.1f} s, load "
              f"{os.getloadavg()[0]:.1f}, {status}", flush=True)
        if problems and result.get("report_differences"):
            print("  build.json differences: " + json.dumps(result["report_differences"])[:2000],
                  flush=True)
        runs.append({k: v for k, v in result.items() if k not in ("hashes", "report")})
        if problems and args.stop_on_failure:
            break
    walls = sorted(r["wall_s"] for r in runs)
    files = len(first["hashes"]) if first else 0
    print(f"\n{len(runs)} builds in mode {args.mode}: {len(runs) - bad} agree byte-for-byte "
          f"({files} files each) and pass the accounting check, {bad} with problems; wall "
          f"time min {walls[0]:.1f} s, median {walls[len(walls) // 2]:.1f} s, max "
          f"{walls[-1]:.1f} s", flush=True)
    if args.json:
        figures = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "command": shown, "mode": args.mode, "hunting_aids": aids,
                   "fraction": args.fraction,
                   "corpus": root, "files_per_build": files, "runs": runs,
                   "builds_with_problems": bad}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=1, sort_keys=True)
            handle.write("\n")
    return 1 if bad or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
