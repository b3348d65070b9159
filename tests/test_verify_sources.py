"""Source verification (`fetch/verify.py`): manifests pin file counts and sha256 of
archives and annotation files; every mismatch is reported, none stops the check early."""
from __future__ import annotations

import hashlib
import os
import socket

import pytest

from test_download import open_fifo_once, run_with_deadline
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.fetch.verify import count_files, verify_sources
from proactivebench_builder.transforms import load_scenarios


def write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


@pytest.fixture()
def source(tmp_path) -> str:
    """A tiny source: two archives, an annotation file and three images (one in a subfolder)."""
    root = str(tmp_path / "src")
    write(f"{root}/rod_0.tar.gz", b"archive zero")
    write(f"{root}/rod_1.tar.gz", b"archive one")
    write(f"{root}/annotations/instances.json", b'{"images": []}')
    for name in ("a.jpg", "b.jpg", "sub/c.jpg"):
        write(f"{root}/images/{name}", b"jpeg")
    os.makedirs(f"{root}/images/folder.jpg")  # a folder matching the glob is not a file
    return root


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest(expected_files=None, checksums=None) -> dict:
    return {"expected_files": expected_files or {}, "checksums": checksums or {}}


def test_matching_pins_report_nothing(source):
    pins = manifest({"rod_*.tar.gz": 2, "images/*.jpg": 2, "images/**/*.jpg": 3},
                    {"rod_0.tar.gz": sha(b"archive zero"),
                     "annotations/instances.json": sha(b'{"images": []}').upper()})
    assert verify_sources({"demo": source}, {"demo": pins}) == []


def test_each_source_folder_is_said_before_it_is_verified_or_recorded(source, tmp_path,
                                                                       monkeypatch):
    from proactivebench_builder.core import phases
    from proactivebench_builder.fetch import source_lock
    from proactivebench_builder.fetch import verify as verifying

    said, at_call = [], []  # the lines said, and the last one at each call of the work

    def watched(original):
        def call(*args, **kwargs):
            at_call.append(said[-1])
            return original(*args, **kwargs)
        return call

    for owner, name in ((verifying, "verify_source"), (source_lock, "record")):
        monkeypatch.setattr(owner, name, watched(getattr(owner, name)))
    other = str(tmp_path / "other")
    os.makedirs(other)
    pins = {"demo": manifest({"rod_*.tar.gz": 2}), "zeta": manifest()}
    with phases.showing(phases.LINES, write=said.append):
        assert verify_sources({"demo": source, "zeta": other}, pins) == []
        assert verifying.record_sources({"demo": source}, pins)[0] == []
        assert verify_sources({"demo": source}, pins) == []
    assert said == ["verifying demo's source folder against its pins",
                    "verifying zeta's source folder against its pins",
                    "verifying demo's source folder against its pins",
                    "recording the sha256 of every file of demo in its lock file",
                    "verifying demo's source folder against its pins and its lock file"]
    assert at_call == said  # each line said before the work it names


def test_every_mismatch_is_reported(source):
    pins = manifest({"rod_*.tar.gz": 3, "images/*.jpg": 2, "missing/*.png": 1},
                    {"rod_0.tar.gz": sha(b"something else"), "rod_1.tar.gz": sha(b"archive one"),
                     "annotations/instances_val2014.json": sha(b"x")})
    problems = verify_sources({"demo": source}, {"demo": pins})
    assert len(problems) == 4, problems
    text = "\n".join(problems)
    assert "demo: expected 3 files matching 'rod_*.tar.gz', found 2" in text
    assert "demo: expected 1 files matching 'missing/*.png', found 0" in text
    assert f"sha256 mismatch for 'rod_0.tar.gz': expected {sha(b'something else')}, " \
           f"got {sha(b'archive zero')}" in text
    assert "missing file 'annotations/instances_val2014.json'" in text


def test_malformed_pins_are_manifest_problems(source):
    pins = manifest({"rod_*.tar.gz": "two", "images/*.jpg": -1, "a": True},
                    {"rod_0.tar.gz": "d41d8cd98f00b204e9800998ecf8427e"})  # an md5, not a sha256
    problems = verify_sources({"demo": source}, {"demo": pins})
    assert len(problems) == 4 and all("manifest problem" in p for p in problems), problems


def test_missing_source_folder(tmp_path):
    problems = verify_sources({"demo": str(tmp_path / "nowhere")}, {"demo": manifest({"*": 1})})
    assert problems == [f"demo: source folder not found: {tmp_path / 'nowhere'}"]


def test_several_scenarios_in_name_order(source, tmp_path):
    pins = {"b": manifest({"*.tar.gz": 9}), "a": manifest({"*.tar.gz": 8})}
    problems = verify_sources({"b": source, "a": source}, pins)
    assert [p.split(":")[0] for p in problems] == ["a", "b"]


def test_count_files_ignores_folders(source):
    assert count_files(source, "images/*.jpg") == 2
    assert count_files(source, "images/**/*.jpg") == 3


def test_fsspec_urls(source):
    """A source root may be any fsspec URL (here memory://)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/verify/src/annotations/x.json", b"{}")
    fs.pipe("/verify/src/val/1.jpg", b"j")
    pins = manifest({"val/*.jpg": 1}, {"annotations/x.json": sha(b"{}")})
    assert verify_sources({"demo": "memory://verify/src"}, {"demo": pins}) == []
    pins = manifest({"val/*.jpg": 2}, {"annotations/x.json": sha(b"[]")})
    assert len(verify_sources({"demo": "memory://verify/src"}, {"demo": pins})) == 2


def test_packaged_manifests_pin_well_formed_values():
    """Every packaged manifest's pins are well formed (counts are ints, checksums sha256)."""
    for name in load_scenarios():
        m = manifest_of(name)
        for pattern, count in (m.get("expected_files") or {}).items():
            assert isinstance(pattern, str) and isinstance(count, int) and count >= 0, (name, pattern)
        for path, digest in (m.get("checksums") or {}).items():
            assert isinstance(path, str) and len(str(digest)) == 64, (name, path)


def test_packaged_manifests_against_miniatures(miniature_root):
    """The miniatures are small copies, so the packaged pins of the real downloads report them
    (ROD's file count holds, but not the archive sizes its dataset_info.json publishes)."""
    sources = {n: os.path.join(miniature_root, manifest_of(n)["source_subdir"])
               for n in load_scenarios()}
    problems = verify_sources(sources)
    rod = [p for p in problems if p.startswith("rod:")]
    assert rod and all("its publisher says" in p for p in rod), problems
    assert "coco: expected 40504 files matching 'val2014/COCO_val2014_*.jpg', found 13" \
           in "\n".join(problems)
    assert not [p for p in problems if "manifest problem" in p], problems


def test_verify_sources_flag_stops_a_build_before_any_work(tmp_path, miniature_root):
    """The bundled miniatures do not match the real downloads' pins: every mismatch is listed
    and nothing is written."""
    from conftest import run

    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"(?s)source verification failed.*quickdraw.*345"):
        run(str(out), miniature_root, "quickdraw", "--verify_sources")
    assert not out.exists()


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_pinned_checksum_on_a_special_file_names_what_it_is(tmp_path, kind):
    folder = tmp_path / "src"
    folder.mkdir()
    path = folder / "annotations.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    manifest = {"expected_files": {}, "checksums": {"annotations.json": "0" * 64}}
    problems = run_with_deadline(lambda: verify_sources({"demo": str(folder)},
                                                        {"demo": manifest}), 20,
                                 open_fifo_once(path) if kind == "fifo" else lambda: None)
    assert len(problems) == 1 and "not a regular file" in problems[0], problems
