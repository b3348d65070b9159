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
    """Samples the summed RSS of a process and all its descendants until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.peak_rss = 0
        self.peak_processes = 0
        self.cpu_seconds: dict[int, float] = {}
        self.peak_by_process: dict[int, int] = {}
        self._halt = threading.Event()

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
        for proc in procs:
            try:
                rss = proc.memory_info().rss
                total += rss
                self.peak_by_process[proc.pid] = max(self.peak_by_process.get(proc.pid, 0), rss)
                times = proc.cpu_times()
                self.cpu_seconds[proc.pid] = times.user + times.system
            except psutil.NoSuchProcess:
                continue
        self.peak_rss = max(self.peak_rss, total)
        self.peak_processes = max(self.peak_processes, len(procs))

    def stop(self):
        self._halt.set()
        self.join()


def build_command(sources_root: str, output: str, mode: str, workers: int,
                  extra: list[str]) -> list[str]:
    return [sys.executable, os.path.join(REPO, "run_pipeline.py"),
            "--runner", "FnApiRunner", f"--direct_num_workers={workers}",
            f"--direct_running_mode={mode}", "--sources_root", sources_root,
            "--output", output, *extra]


def run_build(sources_root: str, output: str, log_path: str, mode: str = "multi_processing",
              workers: int = 2, extra: list[str] | None = None) -> dict:
    """One fresh build (the output folder is removed first); raises when the build fails."""
    shutil.rmtree(output, ignore_errors=True)
    command = build_command(sources_root, output, mode, workers, extra or [])
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
    return {"command": " ".join(command[1:]), "mode": mode, "wall_s": wall,
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
