"""MVP-N scenario: the record semantics the upstream MVPNEnvironment relies on, the upstream
export it reads, determinism, safe pickle reading (a pickle claiming a huge object included),
the class-name table read after the overrides, dead letters and the build accounting (a memo
index or a list file over its cap claims no memory; a view token is ASCII digits)."""
from __future__ import annotations

import io
import os
import pickle
import posixpath
import shutil
import struct
import tracemalloc

import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import build_report, builds, private_root, read_jsonl, run, shard_files
from test_rod import balanced
from proactivebench_builder.core import results
from test_configure import refused_build
from proactivebench_builder.core.manifests import load_data_file
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.core import vocabulary
from proactivebench_builder.transforms import upstream_action_of
from proactivebench_builder.core.errors import BadItem
from proactivebench_builder.transforms.mvpn.scenario import (
    MVPN, QUESTIONS, load_sample_list, order_views)
from proactivebench_builder.transforms.mvpn.play import ROTATE_REQUESTS

CONFIG = "MVP-N"
MANIFEST = manifest_of("mvpn")
NAMES = load_data_file(MANIFEST["parameters"]["class_names_file"])
GROUP_OF = {c: set(g) for g in MANIFEST["groups"] for c in g}


def display(cls: str) -> str:
    return vocabulary.format_category(NAMES[cls])


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
    return read_jsonl(os.path.join(output, "upstream", f"{CONFIG}_preprocessed.jsonl"))


def raw_view(source: str, relative: str) -> tuple[bytes, int]:
    """(bytes, mark) of a raw view named in a row's provenance (`data/<split>/...`)."""
    with open(os.path.join(source, relative), "rb") as handle:
        data = handle.read()
    return data, int(posixpath.basename(relative).split(".")[0].rsplit("_", 1)[1])


# ---- pools -------------------------------------------------------------------------------------

def test_pools_hold_eleven_rotate_phrasings_and_fifteen_questions():
    assert len(ROTATE_REQUESTS) == 11 == len(set(ROTATE_REQUESTS))
    assert len(QUESTIONS) == 15 == len(set(QUESTIONS))
    for option in ROTATE_REQUESTS:
        assert upstream_action_of(option) == "ROTATE"
        assert not vocabulary.is_abstain(option)


# ---- the build and its accounting ---------------------------------------------------------------

def test_clean_miniature_builds_every_list_element(built):
    _, report = built
    entry = report["scenarios"]["mvpn"]
    params = MANIFEST["parameters"]
    expected = len(params["miniature_classes"]) * params["miniature_samples_per_list"]
    assert entry["config"] == CONFIG
    assert entry["raw_items"] == entry["samples"] == entry["kept"] == expected
    assert entry["dead_letters"] == 0 and entry["excluded"] == {}
    assert entry["accounted"] is True


# ---- record semantics, field by field ---------------------------------------------------------

def test_record_fields(rows, source):
    assert [r["id"] for r in rows] == list(range(len(rows)))
    assert [r["key"] for r in rows] == sorted(r["key"] for r in rows)  # id = rank of key
    for row in rows:
        ids = row["valid_images"]
        # key names the list file and the element's index in it
        split, stem, index = row["key"].split("/")[1:]
        assert split == "test" and stem.startswith("test_") and index.isdigit()
        list_ref = f"data/test_list/{stem}.pkl[{int(index)}]"
        assert row["source"]["files"][0] == list_ref
        assert row["source"]["dataset"] == "MVP-N" and "non-commercial" in row["source"]["license"]
        views = row["source"]["files"][1:]
        # the chain: uninformative views, then the one informative view
        marks = [raw_view(source, v)[1] for v in views]
        assert marks == [0] * (len(views) - 1) + [1]
        # view mode: {image} is the view token of the raw name; one set folder per sample
        assert ids == [int(posixpath.basename(v).split("_")[0]) for v in views]
        cls, set_folder = views[0].split("/")[2:4]
        assert row["image_template"] == f"MVP-N/{cls}/{set_folder}/{{image}}_{{informative}}.png"
        assert row["frame_ids"] == ids and len(set(ids)) == len(ids)
        assert row["num_images"] == len(ids) >= 2
        assert row["first_image"] == ids[0]
        assert row["reference_image"] == ids[-1]
        assert row["prompt"] in QUESTIONS
        # one rotate request plus one abstain option
        assert len(row["options"]) == 2
        proactive = [o for o in row["options"] if not vocabulary.is_abstain(o)]
        assert len(proactive) == 1 and proactive[0] in ROTATE_REQUESTS
        assert [o for o in row["options"] if vocabulary.is_abstain(o)][0] in \
            vocabulary.ABSTAIN_OPTIONS
        # the answer is the class's display name; the 3 wrong ones come from its group first
        assert row["answer"] == display(cls)
        assert len(set(row["categories"])) == 4 and row["answer"] in row["categories"]
        by_display = {display(c): c for c in MANIFEST["classes"]}
        wrong = {by_display[c] for c in row["categories"]} - {cls}
        mates = GROUP_OF[cls] - {cls}
        assert wrong >= mates if len(mates) <= 3 else wrong <= mates
        # other scenarios' extras stay out of the record
        for extra in ("strong_occlusions", "quality_answer", "step_size", "max_steps",
                      "direction", "granularity", "horizontal_step", "vertical_step", "crop"):
            assert extra not in row


def test_small_groups_are_topped_up_from_other_classes(rows):
    for row in (r for r in rows if r["answer"] == display("0000")):
        assert display("0001") in row["categories"]  # its only group mate
        others = set(row["categories"]) - {display("0000"), display("0001")}
        assert len(others) == 2 and not others & {display(c) for c in GROUP_OF["0000"]}
    group19 = {display(c) for c in ("0041", "0042", "0043")}
    for row in (r for r in rows if r["answer"] in group19):
        assert group19 <= set(row["categories"])


def test_parquet_frames_are_the_raw_pngs_in_chain_order(built, source):
    output, _ = built
    table = pq.read_table(os.path.join(output, CONFIG)).to_pylist()
    assert table
    for row in table:
        views = row["source"]["files"][1:]
        assert len(row["frames"]) == len(views) == row["num_images"]
        for k, (frame, view) in enumerate(zip(row["frames"], views)):
            assert frame["bytes"] == raw_view(source, view)[0]  # PNG passes through
            flag = int(k == row["num_images"] - 1)
            assert frame["path"] == row["image_template"].format(
                image=f"{row['frame_ids'][k]:04d}", informative=flag)


def test_load_dataset_decodes_every_frame(built, tmp_path):
    import datasets

    output, _ = built
    dataset = datasets.load_dataset(output, name=CONFIG, split="test",
                                    cache_dir=str(tmp_path / "cache"))
    assert len(dataset) == 12
    for row in dataset:
        assert len(row["frames"]) == row["num_images"] == len(row["frame_ids"])
        for image in row["frames"]:
            image.load()
            assert image.size == (32, 32)


# ---- the upstream environment's reads ---------------------------------------------------------

def upstream_reads(row: dict) -> list[tuple[int, int]]:
    """(image id, informative flag) of every image the upstream MVP-N environment opens for a
    record (docs/records.md): turn 0 shows first_image, turn t>=1 shows valid_images[t]; the flag
    is 1 only when t + 1 == num_images; reference mode opens reference_image with flag 1."""
    reads = []
    for turn in range(row["num_images"]):
        image_id = row["first_image"] if turn == 0 else row["valid_images"][turn]
        reads.append((image_id, int(turn + 1 == row["num_images"])))
    reads.append((row["reference_image"], 1))
    return reads


def test_upstream_export_has_every_file_the_environment_opens(built, rows, source):
    output, _ = built
    upstream = os.path.join(output, "upstream")
    for row in rows:
        raw = {fid: raw_view(source, v)
               for fid, v in zip(row["frame_ids"], row["source"]["files"][1:])}
        for image_id, flag in upstream_reads(row):
            assert image_id in row["frame_ids"]
            path = os.path.join(upstream, row["image_template"].format(
                informative=flag, image=str(image_id).zfill(4)))
            with open(path, "rb") as handle:
                assert handle.read() == raw[image_id][0]
            assert raw[image_id][1] == flag  # the flag read upstream is the raw mark


# ---- determinism ------------------------------------------------------------------------------

def test_rebuild_is_byte_identical(built, miniature_root, tmp_path):
    output, _ = built
    again = str(tmp_path / "again")
    run(again, miniature_root, "mvpn", "--upstream_export")
    assert shard_files(again) == shard_files(output, CONFIG)
    name = os.path.join("upstream", f"{CONFIG}_preprocessed.jsonl")
    with open(os.path.join(output, name), "rb") as a, open(os.path.join(again, name), "rb") as b:
        assert a.read() == b.read()


def candidates(scenario: MVPN) -> list[dict]:
    found = []
    for unit in scenario.list_units():
        found += [v for v in scenario.read_unit(unit) if v.kind == "candidate"]
    return found


def choices(row: dict) -> tuple:
    return row["prompt"], tuple(row["options"]), tuple(row["categories"])


def test_choices_depend_only_on_seed_and_key(source):
    first, second = MVPN(0, source), MVPN(0, source)
    items = candidates(first)
    forward = {v.key: choices(first.build_sample(v.key, v.item)) for v in items}
    backward = {v.key: choices(second.build_sample(v.key, v.item))
                for v in reversed(items)}
    assert forward == backward
    other = MVPN(1, source)
    reseeded = {v.key: choices(other.build_sample(v.key, v.item)) for v in items}
    assert reseeded != forward


def test_position_mode_numbers_the_chain_and_keeps_the_flag_last(source):
    scenario = MVPN(0, source)
    scenario.params["frame_ids"] = "position"
    value = candidates(scenario)[0]
    row = scenario.build_sample(value.key, value.item)
    n = row["num_images"]
    assert row["valid_images"] == row["frame_ids"] == list(range(n))
    assert (row["first_image"], row["reference_image"]) == (0, n - 1)
    assert row["image_template"] == "MVP-N/0000/test_0000_100_0000/{image}_{informative}.png"
    assert [scenario.frame_path(row, i) for i in range(n)] == \
        [f"MVP-N/0000/test_0000_100_0000/{i:04d}_{int(i == n - 1)}.png" for i in range(n)]


# ---- safe pickles -----------------------------------------------------------------------------

class _Exploit:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_reader_refuses_globals_without_running_them(tmp_path):
    marker = str(tmp_path / "executed")
    with pytest.raises(BadItem) as err:
        load_sample_list(pickle.dumps([_Exploit(marker)]))
    assert err.value.reason.startswith("bad pickle: UnpicklingError: refused global")
    assert not os.path.exists(marker)
    assert load_sample_list(pickle.dumps([["0041/0000/0000_0.png", "0041/0000/0001_1.png"]]))
    with pytest.raises(BadItem, match="bad pickle: top level is dict"):
        load_sample_list(pickle.dumps({"a": 1}))


def test_informative_view_goes_last_in_list_order():
    assert order_views(["c/s/0002_0.png", "c/s/0001_1.png", "c/s/0000_0.png"]) == \
        ["c/s/0002_0.png", "c/s/0000_0.png", "c/s/0001_1.png"]


# ---- corrupt and inconsistent raw items -------------------------------------------------------

def png_bytes(colour=(10, 20, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), colour).save(out, format="PNG")
    return out.getvalue()


def write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def informative_view(data: str, set_folder: str) -> str:
    names = [n for n in os.listdir(os.path.join(data, "test", set_folder)) if n.endswith("_1.png")]
    assert len(names) == 1
    return f"{set_folder}/{names[0]}"


@pytest.fixture(scope="module")
@builds
def damaged(tmp_path_factory, source) -> tuple[str, dict, str]:
    """A copy of the miniature with every kind of bad raw item, built with no bad-ratio limit."""
    root = tmp_path_factory.mktemp("mvpn_damaged")
    src = os.path.join(str(root), "sources", "mvpn")
    shutil.copytree(source, src)
    data = os.path.join(src, "data")
    lists = os.path.join(data, "test_list")
    marker = os.path.join(str(root), "executed")
    # a list file that is not a pickle, and one whose pickle would run code
    write(os.path.join(lists, "test_0042_100.pkl"), b"\x80\x04not a pickle")
    write(os.path.join(lists, "test_0040_100.pkl"), pickle.dumps([_Exploit(marker)]))
    # a list of an unknown class folder (its files exist)
    write(os.path.join(data, "test", "0099", "0000", "0000_0.png"), png_bytes())
    write(os.path.join(data, "test", "0099", "0000", "0001_1.png"), png_bytes())
    write(os.path.join(lists, "test_0099_100.pkl"),
          pickle.dumps([["0099/0000/0000_0.png", "0099/0000/0001_1.png"]]))
    # bad elements appended to a good list
    set0_info = informative_view(data, "0041/0000")
    set1_info = informative_view(data, "0041/0001")
    write(os.path.join(data, "test", "0041", "0000", "0005_1.png"), png_bytes())
    good = os.path.join(data, "test", "0041", "0001", "0002_0.png")
    with open(good, "rb") as handle:
        write(os.path.join(data, "test", "0041", "0001", "0007_0.png"), handle.read()[:40])
    with open(os.path.join(lists, "test_0041_100.pkl"), "rb") as handle:
        elements = pickle.load(handle)  # our own miniature file, trusted
    bad = [
        ["0041/0000/0009_0.png", set0_info],                         # 3: path does not exist
        ["0041/0000/0002_0.png", "0041/0000/0003_0.png"],            # 4: no informative view
        ["0041/0000/0002_0.png", set0_info, "0041/0000/0005_1.png"],  # 5: two informative views
        ["0041/0001/0007_0.png", set1_info],                         # 6: truncated PNG
        "0041/0000/0002_0.png",                                      # 7: not a list of paths
        ["../../etc/passwd_0.png", set0_info],                       # 8: path escapes the root
        ["0042/0000/0001_0.png", "0042/0000/0003_1.png"],            # 9: class of another list
    ]
    write(os.path.join(lists, "test_0041_100.pkl"), pickle.dumps(elements + bad))
    output = os.path.join(str(root), "out")
    report = run(output, os.path.dirname(src), "mvpn", "--max_bad_fraction=1",
                 "--upstream_export")
    return output, report, marker


def test_bad_items_become_dead_letters_with_path_and_reason(damaged):
    output, _, marker = damaged
    dead = {d["path"]: d["reason"] for d in
            read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))}
    lst = "data/test_list/test_0041_100.pkl"
    expected = {
        "data/test_list/test_0042_100.pkl": "bad pickle",
        "data/test_list/test_0040_100.pkl": "bad pickle: UnpicklingError: refused global",
        "data/test_list/test_0099_100.pkl[0]": "unknown class: '0099'",
        "data/test/0041/0000/0009_0.png": "missing frame file",
        f"{lst}[4]": "no informative view",
        f"{lst}[5]": "several informative views: 2",
        "data/test/0041/0001/0007_0.png": "undecodable image",
        f"{lst}[7]": "malformed sample",
        f"{lst}[8]": "malformed sample: path '../../etc/passwd_0.png'",
        f"{lst}[9]": "inconsistent sample: class '0042' in the list of '0041'",
    }
    assert set(dead) == set(expected)
    for path, reason in expected.items():
        assert dead[path].startswith(reason), (path, dead[path])
    assert not os.path.exists(marker)


def test_damaged_build_goes_on_and_accounts_for_every_item(damaged):
    output, report, _ = damaged
    entry = report["scenarios"]["mvpn"]
    # good: 0000 (3) + 0041 (3) + 0043 (3); 0042's list is lost as one unreadable item
    assert entry["samples"] == 9
    assert entry["dead_letters"] == 10
    assert entry["raw_items"] == 19 == entry["samples"] + entry["dead_letters"]
    assert entry["accounted"] is True
    assert entry["dead_letters_by_reason"]["bad pickle"] == 2
    keys = {r["key"] for r in read_jsonl(os.path.join(output, "upstream",
                                                      f"{CONFIG}_preprocessed.jsonl"))}
    assert len(keys) == 9 and not any("test_0042" in k for k in keys)


def test_mvpn_class_names_file_is_read_after_the_overrides(tmp_path, capsys):
    """MVP-N read its class-name table in __init__, before `--set` applied: the override was
    ignored but stamped in the card as used."""
    from proactivebench_builder.transforms.mvpn.scenario import MVPN

    scenario = MVPN(0, str(tmp_path))
    scenario.params["class_names_file"] = "imagenet_classes.json"
    assert scenario.class_names == {str(k): str(v) for k, v in
                                    scenario.data_file("imagenet_classes.json").items()}
    line = refused_build(capsys, tmp_path, "--set=mvpn.class_names_file=no_such_file.yaml",
                         scenarios="mvpn")
    assert "mvpn.class_names_file" in line and "no_such_file.yaml" in line


def test_a_list_pickle_claiming_a_huge_bytes_object_is_a_bad_pickle():
    """BINBYTES8 declaring 2^40 bytes in a 12-byte pickle: refused, nothing allocated."""
    from proactivebench_builder.transforms.base import BadItem
    from proactivebench_builder.transforms.mvpn.scenario import load_sample_list

    data = b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"."
    tracemalloc.start()
    try:
        with pytest.raises(BadItem, match="bad pickle"):
            load_sample_list(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


# ---- MVP-N list pickles ------------------------------------------------------------------------

def test_a_pickle_memo_index_claims_no_memory():
    """A memo
    index beyond the entries the pickle has made is a bad pickle, refused before unpickling."""
    import struct

    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.mvpn.scenario import load_sample_list

    tracemalloc.start()
    try:
        with pytest.raises(BadItem, match="bad pickle: memo"):
            load_sample_list(b"\x80\x02]r" + struct.pack("<I", 1 << 27) + b".")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak
    import pickle

    value = [["a/b/1_0.png", "a/b/2_1.png"]] * 3 + [["x"] * 300]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):  # what picklers write still loads
        assert load_sample_list(pickle.dumps(value, protocol=protocol)) == value


@pytest.mark.build
def test_a_list_file_over_its_cap_is_a_dead_letter(tmp_path):
    """A list pickle builds ~30 bytes of objects per byte of pickle (EMPTY_LIST, APPEND...): a
    256 MiB one could hold gigabytes. A list file over MAX_LIST_BYTES (the real ones hold about
    twenty kB) is a dead letter, unread."""
    from proactivebench_builder.transforms.mvpn.scenario import MAX_LIST_BYTES, MVPN

    root = private_root(tmp_path, "mvpn")
    unit = os.path.join(root, "mvpn", "data", "test_list", "test_0000_100.pkl")
    with open(unit, "r+b") as handle:
        handle.truncate(MAX_LIST_BYTES + 1)
    scenario = MVPN(0, os.path.join(root, "mvpn"))
    values = list(scenario.read_unit(unit))
    letters = [v for v in values if isinstance(v, results.DeadLetter)]
    assert len(letters) == 1 and "larger than" in letters[0].reason
    assert balanced(values, "mvpn")


@pytest.mark.parametrize("token", ["\u0663", "\u00b2", "9" * 12])
def test_a_view_token_that_is_not_ascii_digits_is_a_dead_letter(token):
    """'²'.isdigit() is true but int('²') fails (the element was a dead letter saying
    "ValueError"), and int('٣') is 3: a view file ٣_0.png was exported as 3_0.png. A view token
    must be ASCII digits to be a frame id."""
    from proactivebench_builder.core.errors import BadItem
    from proactivebench_builder.transforms.mvpn.scenario import MVPN

    scenario = MVPN(0, "/nowhere")
    with pytest.raises(BadItem, match="non-integer view token"):
        scenario._frame_ids([f"0041/1/{token}_0.png", "0041/1/2_1.png"])
