"""Running the real build as a subprocess and measuring it: wall time, CPU time and the peak
memory of the whole process tree (the driver plus its worker subprocesses, sampled together, so
the peak is of their summed resident set sizes at one instant)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_EVERY_S = 0.05


class TreeSampler(threading.Thread):
    """Samples the summed RSS of a process and all its descendants until stopped, and keeps
    each process's timeline by role (`driver`: the build process; `worker_<n>`: a Beam worker
    process, by its WORKER_ID; `other`: the shells that start them): (time, rss, CPU seconds,
    bytes read, bytes written), summed over the processes of a role."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.peak_rss = 0
        self.peak_processes = 0
        self.cpu_seconds: dict[int, float] = {}
        self.peak_by_process: dict[int, int] = {}
        self.timeline: dict[str, list] = {}
        self._roles: dict[int, str] = {}
        # a descendant's I/O counts land in the build process's own counters when it is
        # reaped: what the processes seen gone had counted is taken off the driver's
        self._last_io: dict[int, tuple[int, int]] = {}
        self._reaped_io = [0, 0]
        self._halt = threading.Event()

    def role(self, proc) -> str:
        if proc.pid not in self._roles:
            if proc.pid == self.root.pid:
                self._roles[proc.pid] = "driver"
            else:
                try:
                    worker = proc.environ().get("WORKER_ID")
                    name = proc.name()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    return "other"
                if worker and name.startswith("python"):
                    self._roles[proc.pid] = worker if worker.startswith("worker") \
                        else f"worker_{worker}"
                else:
                    return "other"  # asked again: a shell execs python under the same pid
        return self._roles[proc.pid]

    def run(self):
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(SAMPLE_EVERY_S)

    def sample(self):
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        total = 0
        now = time.time()
        by_role: dict[str, list] = {}
        live = {proc.pid for proc in procs}
        for pid in [p for p in self._last_io if p not in live]:
            read, written = self._last_io.pop(pid)
            self._reaped_io[0] += read
            self._reaped_io[1] += written
        for proc in procs:
            try:
                rss = proc.memory_info().rss
                total += rss
                self.peak_by_process[proc.pid] = max(self.peak_by_process.get(proc.pid, 0), rss)
                times = proc.cpu_times()
                self.cpu_seconds[proc.pid] = times.user + times.system
                try:
                    io = proc.io_counters()
                    chars = (io.read_chars, io.write_chars)
                except (psutil.AccessDenied, AttributeError):
                    chars = (0, 0)
                if proc.pid == self.root.pid:
                    chars = (max(0, chars[0] - self._reaped_io[0]),
                             max(0, chars[1] - self._reaped_io[1]))
                else:
                    self._last_io[proc.pid] = chars
                entry = by_role.setdefault(self.role(proc), [0, 0.0, 0, 0])
                entry[0] += rss
                entry[1] += self.cpu_seconds[proc.pid]
                entry[2] += chars[0]
                entry[3] += chars[1]
            except psutil.NoSuchProcess:
                continue
        for role, (rss, cpu, read, written) in by_role.items():
            self.timeline.setdefault(role, []).append((now, rss, cpu, read, written))
        # the whole machine's busy CPU seconds: what other work took meanwhile (a shared VM)
        machine = psutil.cpu_times()
        busy = machine.user + machine.nice + machine.system + getattr(machine, "irq", 0) + \
            getattr(machine, "softirq", 0) + getattr(machine, "steal", 0)
        try:  # and what the machine's disks read and wrote (storage, not the page cache)
            disks = psutil.disk_io_counters()
            disk = (disks.read_bytes, disks.write_bytes)
        except (AttributeError, RuntimeError):
            disk = (0, 0)
        self.timeline.setdefault("machine", []).append((now, 0, busy, *disk))
        self.peak_rss = max(self.peak_rss, total)
        self.peak_processes = max(self.peak_processes, len(procs))

    def stop(self):
        self._halt.set()
        self.join()


def build_command(sources_root: str, output: str, mode: str, workers: int,
                  extra: list[str], profile_out: str | None = None) -> list[str]:
    entry = [os.path.join(REPO, "run_pipeline.py")]
    if profile_out:  # the same build, with the stage recorders of benchmarks/stage_profile.py
        entry = [os.path.join(REPO, "benchmarks", "stage_profile.py"),
                 "--profile_out", profile_out, "--"]
    return [sys.executable, *entry,
            "--runner", "FnApiRunner", f"--direct_num_workers={workers}",
            f"--direct_running_mode={mode}", "--sources_root", sources_root,
            "--output", output, *extra]


def run_build(sources_root: str, output: str, log_path: str, mode: str = "multi_processing",
              workers: int = 2, extra: list[str] | None = None, profile: bool = True) -> dict:
    """One fresh build (the output folder is removed first); raises when the build fails.
    With `profile`, the build runs through benchmarks/stage_profile.py and the result holds
    its per-stage profile."""
    shutil.rmtree(output, ignore_errors=True)
    profile_out = log_path + ".profile.json" if profile else None
    command = build_command(sources_root, output, mode, workers, extra or [], profile_out)
    with open(log_path, "w") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=REPO)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        for line in proc.stdout:  # each line stamped with the seconds since the start
            log.write(f"{time.perf_counter() - start:8.2f} {line.decode(errors='replace')}")
        code = proc.wait()
        wall = time.perf_counter() - start
        sampler.stop()
    if code != 0:
        raise RuntimeError(f"build failed (exit {code}); see {log_path}")
    with open(os.path.join(output, "reports", "build.json")) as handle:
        report = json.load(handle)
    analysis = None
    if profile_out:
        from benchmarks import stage_profile

        with open(profile_out) as handle:
            analysis = stage_profile.analyse(json.load(handle), sampler.timeline)
    return {"profile": analysis, "command": " ".join(command[1:]), "mode": mode, "wall_s": wall,
            "cpu_s": sum(sampler.cpu_seconds.values()),
            "peak_rss_bytes": sampler.peak_rss, "processes": sampler.peak_processes,
            "peak_rss_by_process": sorted(sampler.peak_by_process.values(), reverse=True),
            "samples": {n: r["samples"] for n, r in report["scenarios"].items()},
            "dead_letters": {n: r["dead_letters"] for n, r in report["scenarios"].items()},
            "output_bytes": folder_bytes(output)}


def folder_bytes(folder: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            total += os.path.getsize(os.path.join(dirpath, name))
    return total
