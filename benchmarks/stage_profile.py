"""The per-stage profile of one build: where its wall time, CPU time, bytes and memory go.

The benchmark (`benchmarks/run.py`) runs the build through this module:

    python benchmarks/stage_profile.py --profile_out FILE -- <run_pipeline.py flags>

which is `run_pipeline.py` itself with three recorders added in the build process (the driver):

- the FnApiRunner's stages: each fused stage's start and end (`FnApiRunner._execute_bundle`),
  and each worker's part of it (`BundleManager.process_bundle`: which worker, its start and
  end, the bytes sent to it and received from it over the data plane). A stage's wall time
  minus its slowest part is the driver's own work on it (grouping, partitioning);
- the build command's phases around the pipeline (start-up, the summary, plots, the integrity
  checks, the final validation);
- per scenario, the time and bytes of each step, which the DoFns report into a progress folder
  (`pipeline/progress.py`, `timed`): listing, reading, building, id assignment and filtering
  (pool), shard writing (and inside it: reading the frames, the upstream export), reports.

The benchmark's process sampler (`measure.TreeSampler`) meanwhile records each process's
resident memory, CPU time and bytes read and written, over time, and `analyse` puts the two
together: per stage, the wall time, each process's CPU and peak memory, the worker parts, the
data-plane bytes and the disk bytes.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- in the build process ----------------------------------------------------------------------

PROFILE = "profile:"  # pipeline.progress.PROFILE (kept here: older builds have no such records)
_EVENTS: list[dict] = []
_LOCK = threading.Lock()
_LOCAL = threading.local()


def _event(**fields) -> None:
    with _LOCK:
        _EVENTS.append(fields)


def _input_bytes(inputs) -> int:
    total = 0
    for part in inputs.values():
        if isinstance(part, list):  # a worker's part (never a runner buffer: reading one moves it)
            total += sum(len(chunk) for chunk in part)
    return total


def install_runner_hooks() -> None:
    """Record stages and worker parts of the FnApiRunner (Beam 2.77) in this process."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.worker import data_plane

    execute = fn_runner.FnApiRunner._execute_bundle

    def _execute_bundle(self, context, manager, bundle_input):
        start, cpu = time.time(), time.process_time()
        try:
            return execute(self, context, manager, bundle_input)
        finally:
            _event(kind="stage", stage=manager.stage.name, start=start, end=time.time(),
                   driver_cpu=time.process_time() - cpu)

    fn_runner.FnApiRunner._execute_bundle = _execute_bundle

    process_bundle = fn_runner.BundleManager.process_bundle

    def _process_bundle(self, inputs, expected_outputs, *args, **kwargs):
        _LOCAL.out_bytes = 0
        start, sent = time.time(), _input_bytes(inputs)
        try:
            return process_bundle(self, inputs, expected_outputs, *args, **kwargs)
        finally:
            handler = getattr(self, "_worker_handler", None)
            _event(kind="part", stage=self.bundle_context_manager.stage.name, start=start,
                   end=time.time(), worker=str(getattr(handler, "worker_id", "?")),
                   in_bytes=sent, out_bytes=getattr(_LOCAL, "out_bytes", 0))

    fn_runner.BundleManager.process_bundle = _process_bundle

    input_elements = data_plane._GrpcDataChannel.input_elements

    def _input_elements(self, *args, **kwargs):
        for element in input_elements(self, *args, **kwargs):
            data = getattr(element, "data", None)
            if data:
                _LOCAL.out_bytes = getattr(_LOCAL, "out_bytes", 0) + len(data)
            yield element

    data_plane._GrpcDataChannel.input_elements = _input_elements


def _phase(module, name: str, label: str) -> None:
    """Record each call of `module.name` as a driver phase."""
    original = getattr(module, name)

    def timed(*args, **kwargs):
        start, cpu = time.time(), time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            _event(kind="phase", phase=label, start=start, end=time.time(),
                   driver_cpu=time.process_time() - cpu)

    setattr(module, name, timed)


def install_command_hooks(progress_dir: str) -> None:
    """Time the build command's phases and give the DoFns a folder to report into."""
    from proactivebench_builder.core import buildfolder
    from proactivebench_builder.pipeline.commands import build

    original = build.BuildBenchmark

    class ProfiledBuild(original):
        def __init__(self, config, selection_inputs=None):
            super().__init__(config if config.progress_dir
                             else config.replace(progress_dir=progress_dir), selection_inputs)

    build.BuildBenchmark = ProfiledBuild
    _phase(build, "run_pipeline", "pipeline")
    _phase(build, "write_build_plots", "plots")
    _phase(buildfolder, "shard_problems", "integrity checks")
    _phase(buildfolder, "card_problems", "integrity checks")
    _phase(build, "validate_folder", "final validation")
    _phase(build, "build_config", "parameters")


def profiled_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/stage_profile.py")
    parser.add_argument("--profile_out", required=True)
    args, build_argv = parser.parse_known_args(argv)
    if build_argv[:1] == ["--"]:
        build_argv = build_argv[1:]
    started = time.time()
    progress_dir = tempfile.mkdtemp(prefix="pb-profile-")

    def write():
        scenarios = read_scenario_profile(progress_dir)
        with _LOCK:
            events = list(_EVENTS)
        with open(args.profile_out, "w") as handle:
            json.dump({"started": started, "ended": time.time(), "events": events,
                       "scenarios": scenarios}, handle)

    atexit.register(write)
    install_runner_hooks()
    install_command_hooks(progress_dir)
    sys.argv = [os.path.join(REPO, "run_pipeline.py")] + build_argv
    from proactivebench_builder.core.cli import launch

    return launch("run_pipeline.py", "proactivebench_builder.pipeline.commands.main")


def read_scenario_profile(folder: str) -> dict:
    """{step: {label: {wall_s, cpu_s, calls, bytes}}} summed over every process's records."""
    out: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        with open(os.path.join(folder, name), "rb") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                for key, n in record.items():
                    if not key.startswith(PROFILE):
                        continue
                    what, label = key[len(PROFILE):].split("\t", 1)
                    step, measure = what.rsplit(":", 1)
                    out[step][label][measure] += n
    return {s: {label: dict(m) for label, m in labels.items()} for s, labels in out.items()}


# ---- analysis (in the benchmark) -----------------------------------------------------------

# our step labels, in the graph's order; a fused stage is named after the first of them it holds
STEP_LABELS = ("ListUnits", "SpreadUnits", "ReadUnits", "SpreadCandidates", "BuildSamples",
               "GroupByPool", "AssignIdsAndShards", "GroupByShard", "WriteShards", "Gather",
               "WriteReports")


def short_stage(name: str) -> str:
    """A readable name for a fused stage: the steps of ours it runs (Beam's names are long)."""
    labels = re.findall(r"BuildBenchmark-([A-Za-z]+)(?:-([A-Za-z]+))?", name)
    parts = []
    for outer, inner in labels:
        label = outer if outer not in ("SpreadUnits", "SpreadCandidates") else f"{outer}/{inner}"
        if label not in parts:
            parts.append(label)
    main = [p for p in parts if p.split("/")[0] in STEP_LABELS and "/" not in p]
    if not parts:
        return name[:60]
    heavy = [p for p in parts if p in ("ReadUnits", "BuildSamples", "AssignIdsAndShards",
                                       "WriteShards", "WriteReports", "ListUnits")]
    if heavy:
        return "+".join(heavy)
    return "+".join(main or parts)[:60]


def _at(series: list, t: float, index: int):
    """The last sample at or before `t` (or the first one)."""
    best = series[0]
    for sample in series:
        if sample[0] > t:
            break
        best = sample
    return best[index]


def _delta(series: list, start: float, end: float, index: int) -> float:
    if not series:
        return 0.0
    return max(0.0, _at(series, end, index) - _at(series, start, index))


def _peak(series: list, start: float, end: float) -> int:
    inside = [s[1] for s in series if start <= s[0] <= end]
    if not inside:  # a stage shorter than the sampling interval
        return _at(series, end, 1) if series else 0
    return max(inside)


def analyse(profile: dict, timeline: dict) -> dict:
    """Put the build's stage log and the sampler's per-process timeline together.

    `timeline`: {role: [(t, rss, cpu_s, read_chars, write_chars), ...]} with roles `driver`,
    `worker_<n>` (Beam's WORKER_ID) and `other`."""
    events = profile["events"]
    t0, t_end = profile["started"], profile["ended"]
    machine = timeline.get("machine", [])
    timeline = {r: s for r, s in timeline.items() if r != "machine"}
    roles = sorted(timeline)
    intervals = []
    stages = [e for e in events if e["kind"] == "stage"]
    parts = defaultdict(list)
    for e in events:
        if e["kind"] == "part":
            parts[e["stage"]].append(e)
    for stage in stages:
        intervals.append({"name": short_stage(stage["stage"]), "stage": stage["stage"],
                          "start": stage["start"], "end": stage["end"],
                          "driver_cpu_s": stage["driver_cpu"],
                          "parts": sorted(parts.get(stage["stage"], []),
                                          key=lambda p: p["worker"])})
    phases = [e for e in events if e["kind"] == "phase"]
    pipeline = next((p for p in phases if p["phase"] == "pipeline"), None)
    rows = []
    first = min((i["start"] for i in intervals), default=t0)
    last = max((i["end"] for i in intervals), default=t0)
    if pipeline:
        rows.append({"name": "start-up (imports, options, listing sources)",
                     "start": t0, "end": pipeline["start"]})
        rows.append({"name": "pipeline start (graph, workers)", "start": pipeline["start"],
                     "end": first})
    else:
        rows.append({"name": "start-up", "start": t0, "end": first})
    previous_end = first
    for interval in sorted(intervals, key=lambda i: i["start"]):
        if interval["start"] - previous_end > 0.5:
            rows.append({"name": "(between stages)", "start": previous_end,
                         "end": interval["start"]})
        rows.append(interval)
        previous_end = max(previous_end, interval["end"])
    if pipeline:
        rows.append({"name": "pipeline end (teardown)", "start": last, "end": pipeline["end"]})
        after = sorted((p for p in phases if p["start"] >= pipeline["end"] - 1e-6),
                       key=lambda p: p["start"])
        cursor = pipeline["end"]
        for p in after:
            if p["start"] - cursor > 0.2:
                rows.append({"name": "driver: summary, other checks", "start": cursor,
                             "end": p["start"]})
            rows.append({"name": f"driver: {p['phase']}", "start": p["start"], "end": p["end"]})
            cursor = max(cursor, p["end"])
        rows.append({"name": "exit", "start": cursor, "end": t_end})
    for row in rows:
        start, end = row["start"], row["end"]
        row["wall_s"] = max(0.0, end - start)
        row["at_s"] = start - t0
        row["cpu_s"] = {r: _delta(timeline[r], start, end, 2) for r in roles}
        # CPU the rest of the machine used meanwhile (other work on a shared VM)
        row["others_cpu_s"] = max(0.0, _delta(machine, start, end, 2) - sum(row["cpu_s"].values()))
        # storage I/O of the whole machine (page-cache misses and write-back; others' too)
        row["disk_read_bytes"] = _delta(machine, start, end, 3)
        row["disk_write_bytes"] = _delta(machine, start, end, 4)
        row["peak_rss"] = {r: _peak(timeline[r], start, end) for r in roles}
        row["read_bytes_by_role"] = {r: _delta(timeline[r], start, end, 3) for r in roles}
        row["write_bytes_by_role"] = {r: _delta(timeline[r], start, end, 4) for r in roles}
        row["read_bytes"] = sum(row["read_bytes_by_role"].values())
        row["write_bytes"] = sum(row["write_bytes_by_role"].values())
        if row.get("parts"):
            slowest = max(p["end"] - p["start"] for p in row["parts"])
            row["parts_s"] = {p["worker"]: round(p["end"] - p["start"], 2) for p in row["parts"]}
            row["driver_only_s"] = max(0.0, row["wall_s"] - slowest)
            row["plane_in_bytes"] = sum(p["in_bytes"] for p in row["parts"])
            row["plane_out_bytes"] = sum(p["out_bytes"] for p in row["parts"])
        row.pop("parts", None)
    peaks = {r: max((s[1] for s in timeline[r]), default=0) for r in roles}
    peak_when = {r: (max(timeline[r], key=lambda s: s[1])[0] - t0) if timeline[r] else None
                 for r in roles}
    total_cpu = {r: _delta(timeline[r], t0, t_end, 2) for r in roles}
    others = max(0.0, _delta(machine, t0, t_end, 2) - sum(total_cpu.values()))
    return {"rows": rows, "roles": roles, "peak_rss": peaks, "peak_at_s": peak_when,
            "cpu_s": total_cpu, "others_cpu_s": others,
            "scenarios": profile.get("scenarios", {}), "wall_s": t_end - t0,
            "memory_timeline": memory_timeline(timeline, t0)}


def memory_timeline(timeline: dict, t0: float, every_s: float = 5.0) -> list:
    """Resident memory per role every `every_s` seconds (MiB), for the JSON figures."""
    end = max((s[-1][0] for s in timeline.values() if s), default=t0)
    out, t = [], t0
    while t <= end + every_s:
        out.append({"t": round(t - t0, 1), **{r: round(_at(s, t, 1) / 2**20) for r, s in
                                              timeline.items() if s}})
        t += every_s
    return out


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f}" if n >= 1e6 else (f"{n / 1e6:.1f}" if n else "-")


def format_profile(analysis: dict) -> str:
    """The per-stage table and the per-scenario table, as text."""
    roles = analysis["roles"]
    workers = [r for r in roles if r.startswith("worker")]
    header = ["stage", "at s", "wall s", "driver cpu"] + [f"{w} cpu" for w in workers] + [
        "others cpu",
        "parts s", "drv only", "plane in MB", "plane out MB", "read MB", "written MB",
        "disk r/w MB", "drv MiB", "wkr MiB"]
    table = [header]
    for row in analysis["rows"]:
        if row["wall_s"] < 0.05 and not row.get("parts_s"):
            continue
        table.append([
            row["name"][:44], f"{row['at_s']:.1f}", f"{row['wall_s']:.2f}",
            f"{row['cpu_s'].get('driver', 0):.1f}",
            *[f"{row['cpu_s'].get(w, 0):.1f}" for w in workers],
            f"{row.get('others_cpu_s', 0):.1f}",
            "/".join(f"{s:.1f}" for s in (row.get("parts_s") or {}).values()) or "",
            f"{row['driver_only_s']:.2f}" if "driver_only_s" in row else "",
            _mb(row.get("plane_in_bytes", 0)) if "plane_in_bytes" in row else "",
            _mb(row.get("plane_out_bytes", 0)) if "plane_out_bytes" in row else "",
            _mb(row["read_bytes"]), _mb(row["write_bytes"]),
            f"{_mb(row.get('disk_read_bytes', 0))}/{_mb(row.get('disk_write_bytes', 0))}",
            f"{row['peak_rss'].get('driver', 0) / 2**20:.0f}",
            "/".join(f"{row['peak_rss'].get(w, 0) / 2**20:.0f}" for w in workers)])
    lines = _columns(table)
    lines.append(f"whole build: {analysis['wall_s']:.1f} s; CPU " + ", ".join(
        f"{r} {s:.1f} s" for r, s in analysis.get("cpu_s", {}).items() if s >= 0.05) +
        f"; other work on the machine meanwhile {analysis.get('others_cpu_s', 0):.1f} CPU-s")
    lines.append("peak memory: " + ", ".join(
        f"{r} {analysis['peak_rss'][r] / 2**20:.0f} MiB at {analysis['peak_at_s'][r]:.0f} s"
        for r in roles if analysis["peak_rss"][r]))
    scenarios = analysis.get("scenarios") or {}
    if scenarios:
        steps = sorted(scenarios, key=_step_order)
        labels = sorted({label for s in steps for label in scenarios[s]})
        table = [["scenario"] + [f"{s} s (cpu)" for s in steps]]
        for label in labels:
            cells = []
            for s in steps:
                m = scenarios[s].get(label)
                if not m:
                    cells.append("")
                    continue
                text = f"{m.get('wall_s', 0):.1f} ({m.get('cpu_s', 0):.1f})"
                if m.get("bytes"):
                    text += f" {_mb(m['bytes'])}MB"
                cells.append(text)
            table.append([label] + cells)
        lines += ["", "per scenario: summed over both workers' threads, wall (cpu) seconds "
                      "and bytes of each step"] + _columns(table)
    return "\n".join(lines)


def _step_order(step: str) -> int:
    order = ["list", "read", "build", "pool", "write", "write.frames", "export.images",
             "export.lines", "reports"]
    return order.index(step) if step in order else len(order)


def _columns(table: list) -> list[str]:
    widths = [max(len(str(row[i])) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(str(v).rjust(w) if i else str(v).ljust(w)
                       for i, (v, w) in enumerate(zip(row, widths))) for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


if __name__ == "__main__":
    sys.exit(profiled_main(sys.argv[1:]))
