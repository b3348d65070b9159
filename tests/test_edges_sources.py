"""Source files that are not what their name says: a named pipe, a
character device, a file far larger than any real one, a legal name near the file system's limit.
Each is a counted dead letter with its path and a reason (or, for a file every item needs, one
line), never a hang, never memory that grows with what the file holds.

The builds run in a child process with a deadline: before the fix a FIFO blocked `open()` forever.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import read_json, read_jsonl, worker_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PIPELINE = os.path.join(REPO, "run_pipeline.py")
DEADLINE_S = 600  # a hang, not slowness: a miniature build takes well under a minute

# where each scenario's miniature source holds a file it reads (relative to the sources root)
READ_FILES = {
    "quickdraw": "quickdraw/simplified/cat.ndjson",
    "coco": "coco/val2014/COCO_val2014_000000000042.jpg",
    "rod": "rod/rod_1.tar.gz",
    "mvpn": "mvpn/data/test_list/test_0000_100.pkl",
    "imagenet_c": "ImageNet-C/gaussian_noise/5/n01440764/ILSVRC2012_val_00000001.JPEG",
}


def sources_copy(miniature_root: str, tmp_path, names) -> str:
    root = str(tmp_path / "sources")
    for name in names:
        top = READ_FILES[name].split("/")[0]
        shutil.copytree(os.path.join(miniature_root, top), os.path.join(root, top))
    return root


def build(tmp_path, sources: str, scenarios: str, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    output = str(tmp_path / "out")
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "--runner=FnApiRunner", "--no_progress", "--no_train",
         "--max_bad_fraction=0.9", f"--scenarios={scenarios}", f"--sources_root={sources}",
         f"--output={output}", *worker_flags(extra), *extra],
        capture_output=True, text=True, timeout=DEADLINE_S, cwd=str(tmp_path))
    return result, output


def dead_letters(output: str) -> list[dict]:
    return read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))


def replace(path: str, make) -> None:
    os.remove(path)
    make(path)


def test_a_fifo_in_place_of_any_source_file_is_a_dead_letter(tmp_path, miniature_root):
    """Point 11: a named pipe where a category file, an image, an archive or a list is expected
    is named a dead letter ("not a regular file: a named pipe") and the build ends."""
    sources = sources_copy(miniature_root, tmp_path, READ_FILES)
    for relative in READ_FILES.values():
        replace(os.path.join(sources, relative), os.mkfifo)
    result, output = build(tmp_path, sources, ",".join(READ_FILES))
    assert result.returncode == 0, result.stderr[-3000:]
    reasons = {d["path"]: d["reason"] for d in dead_letters(output)}
    for name, relative in READ_FILES.items():
        inside = relative.split("/", 1)[1]
        found = [reason for path, reason in reasons.items() if path.startswith(inside)]
        assert found and all("named pipe" in reason for reason in found), (name, reasons)
    assert read_json(os.path.join(output, "reports", "build.json"))["status"] == "ok"


def test_a_fifo_in_place_of_a_file_every_item_needs_is_one_line(tmp_path, miniature_root):
    """VSOD's labels file is read before any item: a FIFO there ends the build in one line."""
    sources = str(tmp_path / "sources")
    shutil.copytree(os.path.join(miniature_root, "vsod"), os.path.join(sources, "vsod"))
    replace(os.path.join(sources, "vsod", "proactivebench_vsod_labels.csv"), os.mkfifo)
    result, _ = build(tmp_path, sources, "vsod")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "FAILED" in line or "error" in line]
    assert lines and "named pipe" in lines[-1] and "proactivebench_vsod_labels.csv" in lines[-1], \
        result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_a_device_or_a_huge_file_is_refused_unread(tmp_path, miniature_root):
    """A character device (endless bytes) and a 2 GiB sparse file in place of images: each a
    dead letter, neither read (memory does not follow what the file holds)."""
    sources = sources_copy(miniature_root, tmp_path, ["imagenet_c", "coco"])
    device = os.path.join(sources, READ_FILES["imagenet_c"])
    try:
        replace(device, lambda path: os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5)))
    except PermissionError:
        pytest.skip("creating a device file needs root")
    huge = os.path.join(sources, READ_FILES["coco"])
    with open(huge, "r+b") as handle:
        handle.truncate(2 << 30)
    result, output = build(tmp_path, sources, "imagenet_c,coco")
    assert result.returncode == 0, result.stderr[-3000:]
    reasons = {d["path"]: d["reason"] for d in dead_letters(output)}
    assert any(p.endswith("ILSVRC2012_val_00000001.JPEG") and "character device" in r
               for p, r in reasons.items()), reasons
    assert any(p.endswith("COCO_val2014_000000000042.jpg") and "bytes a file may hold" in r
               for p, r in reasons.items()), reasons


def test_a_legal_long_file_name_builds(tmp_path, miniature_root):
    """Point 10: a 250-byte file name (legal: NAME_MAX is 255) builds, export included; the
    temporary names written beside it stay within the limit."""
    sources = sources_copy(miniature_root, tmp_path, ["imagenet_c"])
    base = os.path.join(sources, "ImageNet-C")
    renamed = 0
    for folder, _, names in os.walk(base):
        for name in names:
            if name.endswith(".JPEG"):
                stem = name[: -len(".JPEG")]
                longer = stem + "_" + "x" * (250 - len(stem) - 1 - len(".JPEG")) + ".JPEG"
                assert len(longer.encode()) == 250
                os.rename(os.path.join(folder, name), os.path.join(folder, longer))
                renamed += 1
    assert renamed
    result, output = build(tmp_path, sources, "imagenet_c", "--upstream_export")
    assert result.returncode == 0, result.stderr[-3000:]
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "ok" and report["scenarios"]["imagenet_c"]["samples"] > 0
    exported = [name for _, _, names in os.walk(os.path.join(output, "upstream"))
                for name in names if len(name.encode()) >= 250]
    assert exported


def test_temporary_names_stay_within_the_name_limit():
    from proactivebench_builder.core import fileio

    for length in (1, 200, 224, 225, 250, 255):
        name = "a" * length
        temporary = os.path.basename(fileio.temporary_name(f"/x/{name}"))
        assert len(temporary.encode()) <= fileio.NAME_MAX and temporary.startswith(".tmp-")
    # distinct long names keep distinct temporary names
    first = fileio.temporary_name("/x/" + "a" * 250)
    second = fileio.temporary_name("/x/" + "a" * 249 + "b")
    assert first.rsplit("-", 1)[1] != second.rsplit("-", 1)[1]


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "named pipe"), (os.mkdir, "folder")])
def test_open_source_names_what_a_path_is(tmp_path, make, kind):
    from proactivebench_builder.core import fileio

    path = str(tmp_path / "thing")
    make(path)
    with pytest.raises(fileio.NotARegularFile, match=kind):
        fileio.read_bytes(path)


def test_read_bytes_refuses_more_than_its_limit(tmp_path):
    from proactivebench_builder.core import fileio

    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    assert fileio.read_bytes(str(path), limit=101) == b"x" * 101
    with pytest.raises(fileio.FileTooLarge, match="100 bytes"):
        fileio.read_bytes(str(path), limit=100)
