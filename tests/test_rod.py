"""ROD scenario: the record semantics the upstream ROD environment relies on (field by field),
pass-through JPEG frames read straight from the tar.gz archives, upstream's s6 substitution, the
upstream export, determinism, dead letters for every kind of bad raw item (link members among
them), a huge member that does not raise the peak memory, and the accounting; the archive
reader at its edges (extended headers that claim memory or time, a frame number too long for
int, an odd dataset_info.json, a bzip2 bomb, archives of any compression, settings holding
braces), each a counted dead letter or one line, never a traceback, a hang or unbounded memory."""
from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tracemalloc

import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import (IN_PROCESS, REPO, RUNNER, _frame_paths_of, accounted, build_report, builds,
                      dead_letters, private_miniature, read_json, read_jsonl, run, shard_files,
                      values_of)
from proactivebench_builder.core import results
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.core import vocabulary
from proactivebench_builder.transforms import upstream_action_of
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.transforms.rod.play import MOVE_LEFT, MOVE_RIGHT
from proactivebench_builder.transforms.rod.scenario import (
    QUESTIONS, ROD, normalise_class, occluder_of, parse_stem)
from proactivebench_builder.transforms.rod.miniature import sweep_frame, tar_gz

CONFIG = "Realistic-Occlusion-Dataset"
MANIFEST = manifest_of("rod")
PARAMS = MANIFEST["parameters"]
SEQUENCES = {s["sequence"]: s for s in PARAMS["miniature_sequences"]}


@pytest.fixture(scope="module")
def source(miniature_root) -> str:
    return os.path.join(miniature_root, MANIFEST["source_subdir"])


@pytest.fixture(scope="module")
def built(built_miniature) -> tuple[str, dict]:
    """The shared build of every scenario (read only) and its report."""
    return built_miniature, build_report(built_miniature)


@pytest.fixture(scope="module")
def rows(built) -> list[dict]:
    output, _ = built
    table = pq.read_table(os.path.join(output, CONFIG))
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def members(source: str) -> dict[str, bytes]:
    """Base name -> bytes of every photo in the miniature's archives."""
    found = {}
    for name in sorted(os.listdir(source)):
        if name.endswith(".tar.gz"):
            with tarfile.open(os.path.join(source, name)) as tar:
                for m in tar.getmembers():
                    found[os.path.basename(m.name)] = tar.extractfile(m).read()
    return found


# ---- record semantics ------------------------------------------------------------------------

def test_one_sample_per_sequence(rows):
    assert [r["key"] for r in rows] == sorted(f"{CONFIG}/{s}" for s in SEQUENCES)
    assert [r["id"] for r in rows] == list(range(len(rows)))


def test_frames_and_navigation_fields(rows):
    for row in rows:
        assert row["num_images"] == 14
        assert row["frame_ids"] == list(range(14))
        assert row["first_image"] == 7          # the central, most occluded photo
        assert row["reference_image"] == 0      # 7 moves either way, modulo 14
        assert (7 - 7) % 14 == row["reference_image"] == (7 + 7) % 14
        assert len(row["frames"]) == 14
        for field in ("strong_occlusions", "valid_images", "quality_answer", "step_size",
                      "max_steps", "direction", "granularity", "horizontal_step",
                      "vertical_step", "crop", "question_type"):
            assert row[field] is None, field


def test_template_keeps_the_stem_and_an_unpadded_slot(rows):
    for row in rows:
        sequence = row["key"].split("/", 1)[1]
        assert row["image_template"] == f"{CONFIG}/{sequence}-s{{image}}.jpg"
        paths = [f["path"] for f in row["frames"]]
        assert paths == [f"{CONFIG}/{sequence}-s{i}.jpg" for i in range(14)]


def test_options_name_the_occluder_of_the_setting(rows):
    for row in rows:
        sequence = row["key"].split("/", 1)[1]
        occluder = occluder_of(sequence.split("-")[0], PARAMS["occluders"])
        moves = [o for o in row["options"] if not vocabulary.is_abstain(o)]
        assert sorted(moves) == sorted([MOVE_LEFT.format(occluder=occluder),
                                        MOVE_RIGHT.format(occluder=occluder)])
        assert sorted(upstream_action_of(o) for o in moves) == ["LEFT", "RIGHT"]
        abstain = [o for o in row["options"] if vocabulary.is_abstain(o)]
        assert len(abstain) == 1 and abstain[0] in vocabulary.ABSTAIN_OPTIONS
        assert row["prompt"] in {q.format(occluder=occluder) for q in QUESTIONS}
        assert occluder in row["prompt"]


def test_categories_and_answer(rows):
    expected = {"natural_bluebl_greenr-banana": "Banana.",
                "natural_redbl_greenr-orange": "Orange.",
                "natural_bluebl_greenr-cowboy hat": "Cowboy hat.",
                "natural_redcard_whiter-vase": "Vase."}
    formatted = {vocabulary.format_category(c) for c in MANIFEST["classes"]}
    for row in rows:
        assert row["answer"] == expected[row["key"].split("/", 1)[1]]
        assert len(row["categories"]) == 4 and len(set(row["categories"])) == 4
        assert row["answer"] in row["categories"]
        assert set(row["categories"]) <= formatted


def test_frames_pass_through_and_s6_is_substituted(rows, source):
    raw = members(source)
    for row in rows:
        sequence = row["key"].split("/", 1)[1]
        for i, frame in enumerate(row["frames"]):
            wanted = 5 if (sequence == "natural_bluebl_greenr-banana" and i == 6) else i
            assert frame["bytes"] == raw[f"{sequence}-s{wanted}.jpg"]
        size = tuple(SEQUENCES[sequence]["size"])
        assert Image.open(io.BytesIO(row["frames"][0]["bytes"])).size == size
    banana = next(r for r in rows if r["key"].endswith("-banana"))
    assert banana["source"]["files"][6] == "rod_0.tar.gz:natural_bluebl_greenr-banana-s5.jpg"
    assert banana["source"]["dataset"] == MANIFEST["dataset"]


def test_first_frame_is_the_most_occluded(rows):
    """The occluder covers the object's centre in frame 7 and not in the reference frame."""
    for row in rows:
        def centre(i):
            image = Image.open(io.BytesIO(row["frames"][i]["bytes"])).convert("RGB")
            return image.getpixel((image.width * 7.5 / 14, image.height // 2))
        assert centre(7)[1] < 100         # occluder colour (low green)
        assert centre(0)[1] > 150         # the yellow object


def test_mixed_image_sizes(rows):
    sizes = {Image.open(io.BytesIO(r["frames"][0]["bytes"])).size for r in rows}
    assert len(sizes) == len(rows)


def test_load_dataset_decodes_every_frame(built):
    datasets = pytest.importorskip("datasets")
    output, _ = built
    ds = datasets.load_dataset(output, name=CONFIG, split="test")
    assert len(ds) == len(SEQUENCES)
    for row in ds:
        assert len(row["frames"]) == 14
        for image in row["frames"]:
            image.load()


def test_upstream_export_has_every_frame(built, rows):
    output, _ = built
    lines = read_jsonl(os.path.join(output, "upstream", f"{CONFIG}_preprocessed.jsonl"))
    assert [line["id"] for line in lines] == [r["id"] for r in rows]
    for line, row in zip(lines, rows):
        assert line["image_template"] == row["image_template"]
        for k, fid in enumerate(line["frame_ids"]):
            path = os.path.join(output, "upstream", line["image_template"].format(image=fid))
            with open(path, "rb") as handle:
                assert handle.read() == row["frames"][k]["bytes"]
        assert "strong_occlusions" not in line


def test_runtime_environment_reaches_the_reference_by_moving(rows):
    from proactivebench_builder.runtime.environments import Environment

    row = rows[0]
    moves = [o for o in row["options"] if not vocabulary.is_abstain(o)]
    left = next(o for o in moves if upstream_action_of(o) == "LEFT")
    env = Environment(row, CONFIG)
    for _ in range(7):
        obs = env.step(left)
        assert not obs.done
    assert env.image_id == row["reference_image"]
    assert env.step(row["answer"]).correct is True


# ---- accounting and determinism ------------------------------------------------------------

def test_build_report_accounts_for_every_sequence(built):
    output, report = built
    r = report["scenarios"]["rod"]
    assert r["config"] == CONFIG
    assert r["raw_items"] == 4 and r["samples"] == 4 and r["dead_letters"] == 0
    assert r["accounted"] is True


def test_same_inputs_same_bytes(tmp_path, built, miniature_root):
    output, _ = built
    again = str(tmp_path / "again")
    run(again, miniature_root, "rod", "--upstream_export")
    assert shard_files(again) == shard_files(output, CONFIG)


def test_choices_come_from_the_seed():
    a, b = ROD(0, "/nowhere"), ROD(1, "/nowhere")
    key = f"{CONFIG}/natural_bluebl_greenr-banana"
    picks = lambda s: (s.pick_prompt(key, QUESTIONS),  # noqa: E731
                       s.build_options(key, ["Move the blue blocks to the left.",
                                             "Move the blue blocks to the right."]),
                       s.pick_categories(key, "banana", MANIFEST["classes"]))
    assert picks(a) == picks(ROD(0, "/elsewhere"))
    assert picks(a) != picks(b)          # another seed, other choices


def extracted_copy(tmp_path, source):
    """(sources root, ROD folder) of a copy of `source` whose archives are extracted into its
    `extracted` folder and removed."""
    root = tmp_path / "src"
    copy = root / MANIFEST["source_subdir"]
    shutil.copytree(source, copy)
    for name in sorted(os.listdir(copy)):
        if name.endswith(".tar.gz"):
            with tarfile.open(copy / name) as tar:
                tar.extractall(copy / "extracted", filter="data")
            os.remove(copy / name)
    return root, copy


def test_extracted_folder_gives_the_same_samples(tmp_path, rows, source):
    root, copy = extracted_copy(tmp_path, source)
    output = str(tmp_path / "out")
    report = run(output, str(root), "rod")
    assert report["scenarios"]["rod"]["samples"] == 4
    folder_rows = sorted(pq.read_table(os.path.join(output, CONFIG)).to_pylist(),
                         key=lambda r: r["id"])
    for mine, theirs in zip(folder_rows, rows):
        assert mine["source"]["files"][0].startswith("extracted/")
        mine.pop("source")
        assert mine == {k: v for k, v in theirs.items() if k != "source"}


# ---- bad raw items -----------------------------------------------------------------------------

def _jpeg(size=(40, 30), index=0) -> bytes:
    import random

    return sweep_frame(index, 14, size, (30, 60, 200), random.Random(index))


@pytest.fixture(scope="module")
@builds
def broken(tmp_path_factory, source) -> tuple[str, dict, list[dict]]:
    """A copy of the miniature with one of each kind of bad raw item added."""
    root = tmp_path_factory.mktemp("rod_broken")
    copy = root / MANIFEST["source_subdir"]
    shutil.copytree(source, copy)
    bad = []
    for i in range(14):
        data = _jpeg(index=i)
        if i == 3:
            data = data[: len(data) // 2]                         # truncated photo
        bad.append((f"natural_redbl_greenr-cup-s{i}.jpg", data))
        if i != 9:
            bad.append((f"natural_redbl_greenr-mouse-s{i}.jpg", _jpeg(index=i)))  # s9 missing
        bad.append((f"natural_bluebl_greenr-giraffe-s{i}.jpg", _jpeg(index=i)))  # unknown class
        bad.append((f"natural_yellowbl_greenr-plate-s{i}.jpg", _jpeg(index=i)))  # no occluder
        bad.append((f"natural_redbl_greenr-hammer-s{i}.jpg", _jpeg(index=i)))
    bad.append(("natural_redbl_greenr-hammer-s14.jpg", _jpeg(index=1)))  # 15th frame
    bad.append(("dup/natural_bluebl_greenr-skillet-s0.jpg", _jpeg(index=0)))
    bad += [(f"natural_bluebl_greenr-skillet-s{i}.jpg", _jpeg(index=i)) for i in range(14)]
    bad.append(("IMG_0001.jpg", _jpeg()))                               # unparseable name
    bad.append(("notes.txt", b"not a photo"))                           # not a frame
    (copy / "rod_2.tar.gz").write_bytes(tar_gz(bad))
    cut = tar_gz([(f"natural_bluebl_greenr-pillow-s{i}.jpg", _jpeg(index=i)) for i in range(14)])
    (copy / "rod_3.tar.gz").write_bytes(cut[: len(cut) * 2 // 3])       # archive cut short
    output = str(tmp_path_factory.mktemp("built") / "out")  # apart from the sources
    report = run(output, str(root), "rod", "--max_bad_fraction=1")
    dead = read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
    return output, report, dead


def test_bad_items_become_dead_letters_with_path_and_reason(broken):
    _, _, dead = broken
    by_reason = {}
    for d in dead:
        if "pillow" not in d["path"]:     # the cut archive's sequence is checked below
            by_reason[d["reason"].split(":", 1)[0]] = d
    assert by_reason["corrupt frame"]["path"] == "rod_2.tar.gz:natural_redbl_greenr-cup-s3.jpg"
    assert "whole sequence" in by_reason["corrupt frame"]["reason"]
    assert by_reason["missing frame"]["path"] == "rod_2.tar.gz:natural_redbl_greenr-mouse-s9.jpg"
    assert by_reason["unknown class"]["reason"] == "unknown class: 'giraffe'"
    assert "yellowbl" in by_reason["unknown occluder"]["reason"]
    assert by_reason["unexpected frame"]["path"].endswith("hammer-s14.jpg")
    assert by_reason["duplicate frame"]["path"].endswith("skillet-s0.jpg")
    assert by_reason["unparseable frame name"]["path"] == "rod_2.tar.gz:IMG_0001.jpg"
    assert by_reason["unreadable archive"]["path"] == "rod_3.tar.gz"
    assert all(d["scenario"] == "rod" for d in dead)
    pillow = [d for d in dead if "pillow" in d["path"]]
    assert len(pillow) == 1 and pillow[0]["reason"].startswith("missing frame: ")


def test_the_build_goes_on_and_accounts(broken):
    output, report, dead = broken
    r = report["scenarios"]["rod"]
    assert r["samples"] == 4                       # the good sequences still build
    assert r["excluded"] == {"not_a_frame": 1}
    assert r["dead_letters"] == len(dead)
    assert r["raw_items"] == r["samples"] + r["dead_letters"] + 1
    assert r["accounted"] is True
    keys = {row["key"] for row in pq.read_table(os.path.join(output, CONFIG)).to_pylist()}
    assert keys == {f"{CONFIG}/{s}" for s in SEQUENCES}


def test_substitution_applies_only_to_a_bad_listed_frame(tmp_path):
    scenario = ROD(0, str(tmp_path))
    ref = {"kind": "file", "url": "x"}
    frames = {str(i): [{"path": f"p-s{i}.jpg", "ext": ".jpg", "ref": dict(ref, url=str(i)),
                        "error": None}] for i in range(14)}
    item = {"sequence": "natural_bluebl_greenr-banana", "frames": frames}
    assert scenario.resolve_frames(item)[6]["ref"]["url"] == "6"       # good copy: kept
    frames["6"][0]["error"] = "undecodable image"
    assert scenario.resolve_frames(item)[6]["ref"]["url"] == "5"       # bad copy: s5
    other = {"sequence": "natural_bluebl_greenr-cup", "frames": frames}
    with pytest.raises(BadItem, match="corrupt frame: s6"):
        scenario.resolve_frames(other)


# ---- parsing ---------------------------------------------------------------------------------

def test_stem_parsing_is_lenient_about_the_class():
    assert parse_stem("natural_bluebl_greenr-banana-s6") == ("natural_bluebl_greenr", "banana", 6)
    assert parse_stem("natural_bluebl_greenr-cowboy hat-s13")[1] == "cowboy hat"
    scenario = ROD(0, "/nowhere")
    for token in ("cowboy hat", "cowboy_hat", "cowboyhat", "Cowboy-Hat", "cowboyhat2"):
        assert scenario.canonical_class(token) == "cowboy hat"
    assert normalise_class("banana2") == "banana"
    with pytest.raises(BadItem, match="unparseable"):
        parse_stem("banana-6")


def test_every_occluder_makes_valid_options():
    for occluder in PARAMS["occluders"].values():
        assert upstream_action_of(MOVE_LEFT.format(occluder=occluder)) == "LEFT"
        assert upstream_action_of(MOVE_RIGHT.format(occluder=occluder)) == "RIGHT"
    assert len(QUESTIONS) == 15 and len(set(QUESTIONS)) == 15
    assert all("{occluder}" in q for q in QUESTIONS)
    with pytest.raises(BadItem, match="unknown occluder"):
        occluder_of("natural_bluebl_redbl", PARAMS["occluders"])


# ---- reading members from the archives ---------------------------------------------------------

def candidates_of(scenario) -> list:
    """The candidates of reading every unit, the fragments of a sequence merged as the build
    merges them (pipeline.reading.merged_fragments), and the raw-item count."""
    from proactivebench_builder.pipeline.reading import merged_fragments

    values = [v for unit in scenario.list_units() for v in scenario.read_unit(unit)]
    values += merged_fragments([v for v in values if v.kind == "fragment"])
    raw_items = sum(v.n for v in values if v.kind == "count" and v.what == "raw_items")
    return [v for v in values if v.kind == "candidate"], raw_items


def test_each_archive_is_a_unit_of_its_own(source):
    """Both workers read ROD: one unit per archive, whose sequences are fragments (an archive
    may not hold all the photos of one), merged into one candidate per sequence."""
    scenario = ROD(0, source)
    assert scenario.list_units() == ["archive:rod_0.tar.gz", "archive:rod_1.tar.gz"]
    first = list(scenario.read_unit("archive:rod_0.tar.gz"))
    assert {v.kind for v in first} == {"fragment"}
    candidates, raw_items = candidates_of(scenario)
    assert sorted(c.key for c in candidates) == sorted(f"{CONFIG}/{s}" for s in SEQUENCES)
    assert raw_items == len(SEQUENCES)


def test_a_sequence_split_across_archives_is_one_sample(tmp_path, source):
    """The photos of a sequence stored in two archives make one sample, as one pass through
    both finds them; a photo stored in both is a duplicate frame, as within one archive."""
    root = tmp_path / "src"
    copy = root / MANIFEST["source_subdir"]
    shutil.copytree(source, copy)
    photos = {i: _jpeg(index=i) for i in range(14)}
    laptop = [(f"natural_redbl_greenr-laptop-s{i}.jpg", photos[i]) for i in range(14)]
    spatula = [(f"natural_redbl_greenr-spatula-s{i}.jpg", photos[i]) for i in range(14)]
    (copy / "rod_2.tar.gz").write_bytes(tar_gz(laptop[:6] + spatula[:8]))
    (copy / "rod_3.tar.gz").write_bytes(tar_gz(laptop[6:] + spatula[7:]))
    scenario = ROD(0, str(copy))
    candidates, raw_items = candidates_of(scenario)
    by_key = {c.key: c for c in candidates}
    assert raw_items == len(SEQUENCES) + 2
    laptop_row = scenario.build_sample(f"{CONFIG}/natural_redbl_greenr-laptop",
                                       by_key[f"{CONFIG}/natural_redbl_greenr-laptop"].item)
    assert [scenario.load_frame(ref) for ref in laptop_row["frame_refs"]] == list(photos.values())
    with pytest.raises(BadItem, match="duplicate frame: s7 stored 2 times") as raised:
        scenario.build_sample(f"{CONFIG}/natural_redbl_greenr-spatula",
                              by_key[f"{CONFIG}/natural_redbl_greenr-spatula"].item)
    assert raised.value.path == "rod_3.tar.gz:natural_redbl_greenr-spatula-s7.jpg"


def test_the_extracted_folder_is_read_in_lanes_of_whole_sequences(tmp_path, source):
    _, copy = extracted_copy(tmp_path, source)
    (copy / "extracted" / "notes.txt").write_bytes(b"not a photo")
    scenario = ROD(0, str(copy))
    units = scenario.list_units()
    assert len(units) > 1 and all(u.startswith("folder:") for u in units)
    values = [v for unit in units for v in scenario.read_unit(unit)]
    assert {v.kind for v in values} == {"candidate", "count"}  # lanes hold whole sequences
    assert sorted(v.key for v in values if v.kind == "candidate") == sorted(
        f"{CONFIG}/{s}" for s in SEQUENCES)
    assert sum(v.n for v in values if v.kind == "count" and v.what == "raw_items") == \
        len(SEQUENCES) + 1


def test_members_read_in_any_order(source):
    scenario = ROD(0, source)
    raw = members(source)
    candidates, _ = candidates_of(scenario)
    rows = [scenario.build_sample(c.key, c.item) for c in candidates]
    refs = [(ref, path) for row in rows
            for ref, path in zip(row["frame_refs"], row["source"]["files"])]
    for ref, path in reversed(refs):              # backwards: readers restart, spans reload
        assert ref["kind"] == "tar_member"
        assert scenario.load_frame(ref) == raw[path.rsplit("/", 1)[-1].split(":")[-1]]


def test_an_archive_replaced_in_place_is_read_afresh(tmp_path, source):
    root = tmp_path / "src"
    copy = root / MANIFEST["source_subdir"]
    shutil.copytree(source, copy)
    first = str(tmp_path / "first")
    run(first, str(root), "rod")
    import random

    vase = [(f"natural_redcard_whiter-vase-s{i}.jpg",
             sweep_frame(i, 14, (40, 40), (10, 200, 10), random.Random(i))) for i in range(14)]
    (copy / "rod_1.tar.gz").write_bytes(tar_gz(vase))
    second = str(tmp_path / "second")
    run(second, str(root), "rod")
    rows = {r["key"]: r for r in pq.read_table(os.path.join(second, CONFIG)).to_pylist()}
    got = rows[f"{CONFIG}/natural_redcard_whiter-vase"]["frames"]
    assert [f["bytes"] for f in got] == [data for _, data in vase]


def test_gzip_access_reads_any_offset_of_concatenated_members(monkeypatch):
    """The shard writer's gzip reader (access points instead of a restart from the start on a
    backward seek) returns the bytes `gzip` does at every offset, across members and padding,
    and a truncated stream is an error, not short data taken for the end."""
    import gzip
    import random

    from proactivebench_builder.transforms.rod import archives

    monkeypatch.setattr(archives, "ACCESS_POINT_EVERY", 1 << 16)
    rng = random.Random(3)
    data = rng.randbytes(300_000) + bytes(200_000) + rng.randbytes(250_000)
    blob = gzip.compress(data[:400_000]) + gzip.compress(data[400_000:]) + b"\0" * 64
    reader = archives.GzipAccess(io.BytesIO(blob))
    for _ in range(200):
        start, size = rng.randrange(len(data) + 10), rng.randrange(40_000)
        reader.seek(start)
        assert reader.read(size) == data[start:start + size]
    assert len(reader._points) > 3  # backward seeks restart from these, not from offset 0
    truncated = archives.GzipAccess(io.BytesIO(blob[: len(blob) // 3]))
    with pytest.raises(EOFError):
        truncated.read(len(data))


def test_gzip_access_bounds_what_one_read_decompresses():
    """A gzip bomb (a few KB that inflate to 200 MB) read through GzipAccess holds at most
    what was asked plus one feed's output, never the whole inflated stream."""
    import gzip

    from proactivebench_builder.transforms.rod import archives

    blob = gzip.compress(bytes(200 << 20), 9)
    reader = archives.GzipAccess(io.BytesIO(blob))
    assert reader.read(10) == bytes(10)
    assert len(reader._buf) < 20 << 20


class Zeros(io.RawIOBase):
    """`size` zero bytes, produced as read (the member is never held in memory)."""

    def __init__(self, size: int):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def add_bomb(archive: str, member: str, size: int) -> None:
    """Rewrite a .tar.gz with one more member of `size` zero bytes (compresses to ~1/1000)."""
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    with gzip.open(archive + ".new", "wb", compresslevel=1) as out, \
            tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members[:3]:
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(member)
        info.size = size
        tar.addfile(info, io.BufferedReader(Zeros(size), 1 << 20))
        for info, data in members[3:]:
            tar.addfile(info, io.BytesIO(data))
    os.replace(archive + ".new", archive)


PEAK_SCRIPT = """
import resource, sys
from proactivebench_builder.pipeline.commands.main import main
code = main(sys.argv[1:])
self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print("PEAK_KB", self_kb + child_kb, file=sys.stderr)
sys.exit(code)
"""


def build_peak_mb(output: str, sources_root: str, *extra: str) -> tuple[int, float]:
    """(exit code, peak RSS in MB) of a ROD build in a fresh process (the FnApiRunner runs the
    whole build in it: its peak is the build's)."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, f"--output={output}",
         f"--sources_root={sources_root}", "--scenarios=rod", RUNNER, IN_PROCESS, "--no_train",
         "--no_upstream_export", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    peak = [line for line in done.stderr.splitlines() if line.startswith("PEAK_KB")]
    assert peak, done.stderr[-3000:]
    return done.returncode, int(peak[-1].split()[1]) / 1024


BOMB_BYTES = int(os.environ.get("PB_BOMB_BYTES", 1 << 29))


@pytest.mark.build
def test_a_huge_member_does_not_raise_peak_memory(tmp_path_factory):
    """A member is judged by its header and an oversized frame is not read."""
    clean_root = private_miniature(tmp_path_factory, "rod")
    bomb_root = str(tmp_path_factory.mktemp("rod_bomb"))
    shutil.copytree(clean_root, bomb_root, dirs_exist_ok=True)
    add_bomb(os.path.join(bomb_root, "rod", "rod_1.tar.gz"), "natural_bluebl_greenr-cup-s0.jpg",
             BOMB_BYTES)
    assert os.path.getsize(os.path.join(bomb_root, "rod", "rod_1.tar.gz")) < 16 << 20

    clean_out = str(tmp_path_factory.mktemp("rod_clean") / "out")
    code, clean_mb = build_peak_mb(clean_out, clean_root)
    assert code == 0
    bomb_out = str(tmp_path_factory.mktemp("rod_bombed") / "out")
    code, bomb_mb = build_peak_mb(bomb_out, bomb_root, "--max_bad_fraction=0.5")
    assert code == 0
    print(f"peak RSS: clean build {clean_mb:.0f} MB, with a {BOMB_BYTES / 2**30:g} GiB member "
          f"{bomb_mb:.0f} MB")
    assert bomb_mb <= clean_mb * 1.10, (clean_mb, bomb_mb)
    report = read_json(os.path.join(bomb_out, "reports", "build.json"))
    accounted(report)
    letters = dead_letters(bomb_out)
    assert any("oversized member" in d["reason"] and "cup-s0" in d["path"] for d in letters)
    assert shard_files(bomb_out) == shard_files(clean_out)  # the good sequences are untouched


@pytest.mark.build
def test_link_members_of_an_archive_are_counted_dead_letters(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("rod_links"))
    shutil.copytree(private_miniature(tmp_path_factory, "rod"), root, dirs_exist_ok=True)
    archive = os.path.join(root, "rod", "rod_0.tar.gz")
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    with tarfile.open(archive, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
        for name, kind in (("natural_redbl_greenr-cup-s0.jpg", tarfile.SYMTYPE),
                           ("natural_redbl_greenr-cup-s1.jpg", tarfile.LNKTYPE)):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "/etc/hostname"
            tar.addfile(info)
    output = str(tmp_path_factory.mktemp("rod_links_out") / "out")
    report = run(output, root, "rod", "--max_bad_fraction=1", "--no_train")
    accounted(report)
    links = [d for d in dead_letters(output) if d["reason"].startswith("link member")]
    assert len(links) == 2 and all("/etc/hostname" in d["reason"] for d in links)


def counted(values) -> dict:
    """what -> the sum of its counts."""
    total = {}
    for v in values:
        if isinstance(v, results.Count):
            total[v.what] = total.get(v.what, 0) + v.n
    return total


def balanced(values, label: str) -> bool:
    raw = sum(v.n for v in values if isinstance(v, results.Count) and v.scenario == label
              and v.what == "raw_items")
    excluded = sum(v.n for v in values if isinstance(v, results.Count) and v.scenario == label
                   and v.what.startswith("excluded:"))
    resolved = sum(1 for v in values if isinstance(v, (results.Candidate, results.DeadLetter))
                   and v.scenario == label)
    return raw == resolved + excluded


# ---- ROD: tar headers -------------------------------------------------------------

def _header(name: str, size: int, kind: bytes, fmt=tarfile.USTAR_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info._create_header(info.get_info(), fmt, "utf-8", "strict")


def _frame_member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512)


def hostile_archive(path: str, kind: str, declared: int) -> None:
    """A .tar.gz whose first header is a GNU long-name ('L') or PAX ('x') extended header
    declaring `declared` bytes (all present, so tarfile would read them whole), then a frame."""
    frame = sweep_frame(0, 14, (40, 30), (30, 60, 200), __import__("random").Random(0))
    with gzip.open(path, "wb", compresslevel=1) as out:
        if kind == "gnu":
            out.write(_header("././@LongLink", declared, tarfile.GNUTYPE_LONGNAME,
                              tarfile.GNU_FORMAT))
            block = b"a" * (1 << 20)
        else:
            out.write(_header("PaxHeaders/x", declared, tarfile.XHDTYPE))
            head = f"{declared} comment=".encode()
            out.write(head)
            block = b"a" * (1 << 20)
            declared -= len(head)
        left = declared
        while left > 0:
            out.write(block[:min(left, len(block))])
            left -= len(block)
        out.write(b"\0" * (-declared % 512))
        out.write(_frame_member("natural_bluebl_greenr-banana-s0.jpg", frame))
        out.write(b"\0" * 1024)


def rod_source(tmp_path, archives: dict[str, bytes] | None = None) -> str:
    """A ROD source root holding only the given archives (name -> bytes)."""
    root = tmp_path / "rod_src"
    root.mkdir()
    for name, data in (archives or {}).items():
        (root / name).write_bytes(data)
    return str(root)


@pytest.mark.parametrize("kind", ["gnu", "pax"])
def test_an_extended_header_over_the_cap_is_refused_unread(kind, tmp_path):
    """The archive is one dead letter naming it, read no further, and the other
    archives are read as before."""
    import random

    root = rod_source(tmp_path, {"rod_0.tar.gz": tar_gz([
        (f"natural_bluebl_greenr-banana-s{i}.jpg",
         sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)])})
    hostile_archive(os.path.join(root, "rod_1.tar.gz"), kind, 64 << 20)
    rod = ROD(0, root)
    rod.params["read_from"] = "archives"
    tracemalloc.start()
    try:
        values = values_of(rod, "archives")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    letters = [v for v in values if isinstance(v, results.DeadLetter)]
    assert [v.path for v in letters] == ["rod_1.tar.gz"], letters
    assert "extended header" in letters[0].reason and "67,108,864" in letters[0].reason
    assert [v.key for v in values if isinstance(v, results.Candidate)] == [
        "Realistic-Occlusion-Dataset/natural_bluebl_greenr-banana"]
    assert balanced(values, "rod")


PEAK_HEADER_BYTES = 256 << 20


@pytest.mark.build
def test_extended_headers_do_not_raise_peak_memory(tmp_path_factory):
    """The issue's measurement: three ROD archives whose GNU long-name or PAX headers declare
    256 MiB drove a build's peak memory from ~200 MB to ~960 MB. Now they are dead letters
    naming each archive, and the peak stays that of the clean build."""
    from conftest import accounted, dead_letters
    from test_rod import build_peak_mb

    clean_root = private_miniature(tmp_path_factory, "rod")
    hostile_root = str(tmp_path_factory.mktemp("rod_headers"))
    shutil.copytree(clean_root, hostile_root, dirs_exist_ok=True)
    for name, kind in (("rod_2.tar.gz", "gnu"), ("rod_3.tar.gz", "pax"), ("rod_4.tar.gz", "pax")):
        hostile_archive(os.path.join(hostile_root, "rod", name), kind, PEAK_HEADER_BYTES)
    clean_out = str(tmp_path_factory.mktemp("rod_headers_clean") / "out")
    code, clean_mb = build_peak_mb(clean_out, clean_root)
    assert code == 0
    out = str(tmp_path_factory.mktemp("rod_headers_out") / "out")
    code, hostile_mb = build_peak_mb(out, hostile_root, "--max_bad_fraction=0.5")
    assert code == 0
    print(f"peak RSS: clean {clean_mb:.0f} MB, with 3 x 256 MiB extended headers "
          f"{hostile_mb:.0f} MB")
    assert hostile_mb <= clean_mb * 1.10, (clean_mb, hostile_mb)
    accounted(read_json(os.path.join(out, "reports", "build.json")))
    refused = sorted(d["path"] for d in dead_letters(out) if "extended header" in d["reason"])
    assert refused == ["rod_2.tar.gz", "rod_3.tar.gz", "rod_4.tar.gz"]
    assert shard_files(out) == shard_files(clean_out)


DECLARED_ONLY = r"""
import gzip, io, sys, tarfile
from proactivebench_builder.transforms.rod.scenario import ROD
root, bits = sys.argv[1], int(sys.argv[2])
buf = io.BytesIO()
info = tarfile.TarInfo("natural_bluebl_greenr-banana-s13.jpg")
info.size = 1 << bits                      # declared only (base-256 size field): no data
buf.write(info.tobuf(format=tarfile.GNU_FORMAT))
open(root + "/rod_0.tar.gz", "wb").write(gzip.compress(buf.getvalue()))
rod = ROD(0, root)
rod.params["read_from"] = "archives"
for value in rod.read_unit("archive:rod_0.tar.gz"):
    if value.kind == "dead_letter":
        print(value.path, "|", value.reason)
"""


@pytest.mark.build
@pytest.mark.parametrize("bits", [44, 86])
def test_a_member_declaring_data_that_is_not_there_ends_with_the_stream(bits, tmp_path):
    """The skip stops at the end of the stream: the archive is cut short,
    a dead letter naming it, at once."""
    done = subprocess.run([sys.executable, "-c", DECLARED_ONLY, rod_source(tmp_path), str(bits)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("rod_0.tar.gz | unreadable archive") for line in lines), lines


def test_a_frame_number_too_long_for_int_is_an_unparseable_name(tmp_path):
    """That member alone is a dead letter; a non-ASCII digit is not a
    frame number either."""
    import random

    frames = [(f"natural_bluebl_greenr-banana-s{i}.jpg",
               sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)]
    odd = [("natural_bluebl_greenr-cup-s" + "9" * 5000 + ".jpg", frames[0][1]),
           ("natural_bluebl_greenr-cup-s\u0663.jpg", frames[0][1])]
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": tar_gz(frames + odd)}))
    rod.params["read_from"] = "archives"
    values = values_of(rod, "archives")
    letters = [v for v in values if isinstance(v, results.DeadLetter)]
    assert len(letters) == 2 and all("unparseable frame name" in v.reason for v in letters)
    assert [v.key for v in values if isinstance(v, results.Candidate)] == [
        "Realistic-Occlusion-Dataset/natural_bluebl_greenr-banana"]
    assert balanced(values, "rod")


@pytest.mark.parametrize("text", ['{"features": {"label": {"names": 5}}}', "[" * 100000,
                                  '{"features": [1]}'])
def test_an_odd_dataset_info_is_one_line(text, tmp_path):
    """dataset_info.json (the class table every ROD sample is checked against): a value of
    another type or a deeply nested one is a SourceError naming the file, not a TypeError or
    RecursionError traceback."""
    from proactivebench_builder.core.errors import SourceError

    root = rod_source(tmp_path, {"rod_0.tar.gz": tar_gz([]), "dataset_info.json":
                                 text.encode()})
    with pytest.raises(SourceError, match="dataset_info.json"):
        ROD(0, root).list_units()


def _pax_member(name: str, data: bytes, pax: dict[str, str]) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.pax_headers = len(data), pax
    return info.tobuf(format=tarfile.PAX_FORMAT) + data + b"\0" * (-len(data) % 512)


def test_pax_headers_are_read_in_linear_time(tmp_path):
    """tarfile (CPython before 3.11.10 / 3.12.6) looks for `hdrcharset` with a regular
    expression that backtracks quadratically over a run of digits: 60 members whose PAX
    header holds a 15,000-digit comment (well-formed, under the size cap) took ~30 s. Now PAX
    records are parsed in one pass, and the members are read as usual."""
    import random
    import time

    frame = sweep_frame(0, 14, (40, 30), (30, 60, 200), random.Random(0))
    body = b"".join(_pax_member(f"other/{i}.txt", b"x", {"comment": "7" * 15000})
                    for i in range(60))
    body += _pax_member("natural_bluebl_greenr-banana-s0.jpg", frame, {"comment": "1" * 100})
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": gzip.compress(body + b"\0" * 1024)}))
    rod.params["read_from"] = "archives"
    started = time.monotonic()
    values = values_of(rod, "archives")
    assert time.monotonic() - started < 10
    counts = counted(values)
    assert counts.get("excluded:not_a_frame") == 60
    assert balanced(values, "rod")


@pytest.mark.parametrize("case", ["chain", "sparse", "malformed"])
def test_odd_extended_headers_refuse_their_archive(case, tmp_path):
    """A chain of 2,000 GNU long-name headers (tarfile recurses once per header: a
    RecursionError took the whole ROD unit), a GNU sparse member (its 1.0 map is read with a
    quadratic search) and a PAX header that is not made of records are each one dead letter
    naming the archive."""
    import random

    if case == "chain":
        link = _header("././@LongLink", 10, tarfile.GNUTYPE_LONGNAME, tarfile.GNU_FORMAT)
        body = (link + b"x" * 10 + b"\0" * 502) * 2000
    elif case == "sparse":
        body = _pax_member("natural_bluebl_greenr-banana-s1.jpg", b"1\n0\n5\n" + b"a" * 100,
                           {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                            "GNU.sparse.name": "a.jpg", "GNU.sparse.realsize": "5"})
    else:
        head = b"3 " + b"a" * 500 + b"="
        body = _header("PaxHeaders/x", len(head), tarfile.XHDTYPE) + head + b"\0" * (
            -len(head) % 512) + _frame_member("natural_bluebl_greenr-banana-s1.jpg", b"abc")
    frame = sweep_frame(0, 14, (40, 30), (30, 60, 200), random.Random(0))
    body = _frame_member("natural_bluebl_greenr-banana-s0.jpg", frame) + body + b"\0" * 1024
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": gzip.compress(body)}))
    rod.params["read_from"] = "archives"
    values = values_of(rod, "archives")
    refused = [v for v in values if isinstance(v, results.DeadLetter) and v.path == "rod_0.tar.gz"]
    assert len(refused) == 1 and refused[0].reason.startswith("refused archive: rod_0.tar.gz"), \
        [v for v in values if isinstance(v, results.DeadLetter)]
    assert balanced(values, "rod")


def test_the_reader_keeps_no_list_of_members(tmp_path):
    """tarfile keeps every member it has read, also when streaming: memory grew with the number
    of members of an archive (30,000 tiny members: ~20 MB). Now only the current one is kept."""
    body = b"".join(_frame_member(f"n/{i}.txt", b"") for i in range(30000)) + b"\0" * 1024
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": gzip.compress(body)}))
    rod.params["read_from"] = "archives"
    excluded = 0
    tracemalloc.start()
    try:
        for value in rod.read_unit("archive:rod_0.tar.gz"):  # values not kept: the reader's memory
            if isinstance(value, results.Count) and value.what == "excluded:not_a_frame":
                excluded += value.n
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert excluded == 30000
    assert peak < 4 << 20, peak


# ---- ROD: archives of any compression --------------------------------------------------

def test_a_bzip2_archive_decompresses_a_block_at_a_time(tmp_path):
    """tarfile's "r|*" streams hand each 10 KiB of compressed input to the decompressor whole:
    bzip2 turns ~100 bytes into 64 MiB of zeros, so one read held 64 MiB (a 10 KiB archive:
    gigabytes). Now the archive is read through a decompressing file that returns what is
    asked, whatever the compression."""
    import bz2

    zeros = tarfile.TarInfo("notes/zeros.bin")
    zeros.size = 64 << 20
    body = zeros.tobuf(format=tarfile.GNU_FORMAT)
    compressor = bz2.BZ2Compressor(9)
    data = compressor.compress(body)
    for _ in range(64):
        data += compressor.compress(b"\0" * (1 << 20))
    data += compressor.compress(b"\0" * 1024) + compressor.flush()
    assert len(data) < 16 << 10
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": data}))
    rod.params["read_from"] = "archives"
    tracemalloc.start()
    try:
        values = values_of(rod, "archives")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counted(values).get("excluded:not_a_frame") == 1
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("compress", ["bz2", "lzma", "none"])
def test_archives_of_any_compression_give_their_frames_to_the_writer(compress, tmp_path):
    """The member index and the writer's reads go through the same decompression."""
    import bz2
    import lzma
    import random

    frames = [(f"natural_bluebl_greenr-banana-s{i}.jpg",
               sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)]
    plain = gzip.decompress(tar_gz(frames))
    data = {"bz2": bz2.compress, "lzma": lzma.compress, "none": bytes}[compress](plain)
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": data}))
    rod.params["read_from"] = "archives"
    rows = [rod.build_sample(v.key, v.item) for v in values_of(rod, "archives")
            if isinstance(v, results.Candidate)]
    assert len(rows) == 1
    for ref, (_, expected) in zip(reversed(rows[0]["frame_refs"]), reversed(frames)):
        assert rod.load_frame(ref) == expected


# ---- ROD: a setting holding braces ------------------------------------------------------------

def test_a_rod_setting_with_braces_keeps_its_name(tmp_path):
    import random

    frames = [(f"natural_{{x}}_bluebl_greenr-banana-s{i}.jpg",
               sweep_frame(i, 14, (40, 30), (30, 60, 200), random.Random(i))) for i in range(14)]
    rod = ROD(0, rod_source(tmp_path, {"rod_0.tar.gz": tar_gz(frames)}))
    rod.params["read_from"] = "archives"
    paths = _frame_paths_of(rod, values_of(rod, "archives"))
    assert list(paths.values()) == [[f"Realistic-Occlusion-Dataset/natural_{{x}}_bluebl_greenr-"
                                     f"banana-s{i}.jpg" for i in range(14)]]
