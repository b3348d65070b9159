"""ROD scenario: the record semantics the upstream ROD environment relies on (field by field),
pass-through JPEG frames read straight from the tar.gz archives, upstream's s6 substitution, the
upstream export, determinism, dead letters for every kind of bad raw item (link members among
them), a huge member that does not raise the peak memory, and the accounting."""
from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tarfile

import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import (IN_PROCESS, REPO, RUNNER, accounted, build_report, builds, dead_letters,
                      private_miniature, read_json, read_jsonl, run, shard_files)
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
