"""pipeline/writers.py, the shard writer: a frame file changed after its sample was validated
is re-checked as its shard is written (the row dropped, a dead letter saying why, the accounting
kept), and a full disk while writing ends the build in one clear line with no temporary file
left and the folder not taken for a build."""
from __future__ import annotations

import errno
import glob
import os
import shutil
import subprocess

import pytest

from conftest import (IN_PROCESS, RUNNER, WORKER_PROCESSES, accounted, dead_letters,
                      private_miniature, run)
from proactivebench_builder.core import buildfolder
from proactivebench_builder.core.results import unpacked
from proactivebench_builder.pipeline.commands import main as main_command
from proactivebench_builder.pipeline.commands.validate import main as validate_main
from proactivebench_builder.transforms import load_scenarios


FILE_FRAMES = [n for n in sorted(load_scenarios()) if n not in ("quickdraw",)]


@pytest.mark.build
@pytest.mark.parametrize("name", FILE_FRAMES)
def test_a_frame_truncated_after_validation_is_a_dead_letter(name, tmp_path_factory,
                                                             monkeypatch):
    """The first file frame of the pool is truncated after every sample was built (validated)
    and before its shard is written: the row is dropped, a dead letter says why, and the
    accounting reflects it."""
    from proactivebench_builder.pipeline import row_store, shards

    root = str(tmp_path_factory.mktemp(f"{name}_changing"))
    shutil.copytree(private_miniature(tmp_path_factory, name), root, dirs_exist_ok=True)
    if name == "rod":  # file references: the extracted layout
        extracted = os.path.join(root, "rod", "extracted")
        os.makedirs(extracted)
        for archive in glob.glob(os.path.join(root, "rod", "rod_*.tar.gz")):
            subprocess.run(["tar", "-xzf", archive, "-C", extracted], check=True)
    truncated = []
    original = shards.AssignIdsAndShards.process

    def truncate_then_assign(self, element):
        pool, values = element
        values = list(values)
        if not truncated:
            rows = sorted((row_store.fetch(self.config.output, v.row["ref"])  # a reference
                           for v in map(unpacked, values) if v.kind == "sample"),
                          key=lambda r: r["key"])
            for row in rows:
                refs = [r for r in row["frame_refs"] if r.get("kind") == "file"]
                if refs:
                    url = refs[0]["url"]
                    with open(url, "r+b") as handle:
                        handle.truncate(max(1, os.path.getsize(url) // 2))
                    # every sample showing that file (VSOD asks three questions of a clip)
                    truncated.extend(r["key"] for r in rows
                                     if any(f.get("url") == url for f in r["frame_refs"]))
                    break
        yield from original(self, (pool, values))

    monkeypatch.setattr(shards.AssignIdsAndShards, "process", truncate_then_assign)
    output = str(tmp_path_factory.mktemp(f"{name}_changing_out") / "out")
    report = run(output, root, name, IN_PROCESS, "--max_bad_fraction=1", "--no_train")
    if not truncated:
        pytest.skip(f"{name}: no file frame in its pool")
    accounted(report)
    letters = [d for d in dead_letters(output) if "frame changed after validation" in d["reason"]]
    assert sorted(d["key"] for d in letters) == sorted(truncated)
    import pyarrow.parquet as pq

    keys = [k for path in glob.glob(os.path.join(output, "**", "*.parquet"), recursive=True)
            for k in pq.read_table(path, columns=["key"]).column("key").to_pylist()]
    assert not set(truncated) & set(keys)
    entry = report["scenarios"][name]
    assert entry["rows"]["test"] + entry["rows"]["filtered_out"] == entry["samples"]
    assert validate_main([output]) == 0


@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_a_full_disk_is_one_clear_line_and_leaves_no_temporary_file(disk, small_filesystem,
                                                                    tmp_path, miniature_root,
                                                                    capsys, monkeypatch):
    if disk == "tmpfs" and small_filesystem is None:
        pytest.skip("mounting a tmpfs is not allowed here (the injected case runs)")
    if disk == "injected":  # the shard writer's writes fail as on a full disk
        from proactivebench_builder.pipeline import writers

        def no_space(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(writers._Hashing, "write", no_space)
        output = str(tmp_path / "out")
    else:
        output = os.path.join(small_filesystem, "out")
    # the injected fault reaches only DoFns running in this process; a real full disk, the
    # default build's worker processes too
    workers = IN_PROCESS if disk == "injected" else WORKER_PROCESSES
    code = main_command.main([f"--output={output}", f"--sources_root={miniature_root}",
                               "--scenarios=rod,quickdraw", RUNNER, workers])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("BUILD FAILED: No space left on device (errno 28): " + output), err
    assert "Traceback" not in "\n".join(err[-3:])
    leftovers = [p for p in glob.glob(os.path.join(output, "**", "*"), recursive=True)
                 if os.path.basename(p).startswith(".tmp-")]
    assert leftovers == []
    assert buildfolder.status_problems(output)  # the folder is not taken for a build
