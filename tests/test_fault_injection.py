"""Fault injection: every scenario's miniature source, copied and damaged the way real
downloads are damaged, still builds; each fault is a dead letter with its source-root-relative
path and a reason; per scenario, raw items = samples + dead letters + rule exclusions.

Faults, and which scenarios carry them (each kind is covered at least once; the image faults by
every scenario that reads images: ImageNet-C, ROD, VSOD, MVP-N, ChangeIt, COCO):

    truncated image       half of a JPEG (a PNG for MVP-N, whose frames are PNG)
    zero-byte file        an image of 0 bytes
    wrong format          PNG bytes in a file named .JPEG/.jpg (JPEG bytes named .png for MVP-N)
    unreadable file       a *directory* where an image (or an archive) is expected: the tests run
                          as root, where chmod 000 blocks nothing, but open()/read() of a folder
                          fails for every user (IsADirectoryError)
    missing frame         a frame deleted inside a sequence (or a listed view / image file)
    ndjson line cut       QuickDraw: a line cut mid-way
    no strokes            QuickDraw: "drawing": []
    box outside image     VSOD (VOC XML), COCO (instances JSON)
    missing image         an annotation naming an image / segment / video that does not exist
    unknown class         a class folder, file, token, label or category id the manifest lacks
    duplicate key         QuickDraw key_id twice, ROD frame twice, VSOD label twice, COCO image id
    cut archive / list    ROD: a .tar.gz cut short; MVP-N: a pickle cut short; ChangeIt: an
                          annotation cut mid-line
    non-UTF-8 file name   a name with a byte that is not UTF-8 (test_non_utf8_file_name below)

The scenarios come from the registry (`load_scenarios()`), so a new scenario gets these tests
without an edit here: one without a plan of its own below gets the generic one
(`inject_generic`: the source files its samples read as frames, truncated, emptied and deleted;
a non-UTF-8 copy of the folder holding one), which assumes frames are source files it lists.
"""
from __future__ import annotations

import fnmatch
import io
import json
import os
import pickle
import re
import shutil
from dataclasses import dataclass

import pytest
from PIL import Image

from conftest import IN_PROCESS, read_jsonl, run
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.transforms import get_scenario, load_scenarios

SCENARIOS = tuple(load_scenarios())
ARGS = ("--max_bad_fraction=0.9", "--no_train")

@dataclass
class Fault:
    kind: str
    path: str      # fnmatch pattern of the dead letter's path (relative to the source root)
    reason: str    # a regular expression searched (case-insensitively) in the dead letter's reason
    count: int = 1  # how many dead letters it causes (ChangeIt: one per question type)


# ---- generic helpers -----------------------------------------------------------------------

def copy_source(miniature_root: str, tmp_path, name: str) -> tuple[str, str]:
    """(sources root, scenario root) of a private copy of one scenario's miniature source."""
    subdir = manifest_of(name)["source_subdir"]
    sources_root = str(tmp_path / "sources")
    shutil.copytree(os.path.join(miniature_root, subdir), os.path.join(sources_root, subdir))
    return sources_root, os.path.join(sources_root, subdir)


def candidates(name: str, root: str) -> dict[str, dict]:
    """key -> item of every candidate the scenario reads from `root` (so faults are injected
    into items that really reach build_sample, whatever the sampling picks)."""
    scenario = get_scenario(name)(0, root)
    found = {}
    for unit in scenario.list_units():
        for value in scenario.read_unit(unit):
            if value.kind == "candidate":
                found[value.key] = value.item
    return found


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def truncate(path: str) -> None:
    write(path, read(path)[: len(read(path)) // 2])


def empty(path: str) -> None:
    write(path, b"")


def reencode(path: str, fmt: str) -> None:
    """The same picture in another format, under the same (now lying) name."""
    with Image.open(io.BytesIO(read(path))) as image:
        out = io.BytesIO()
        image.convert("RGB").save(out, format=fmt)
    write(path, out.getvalue())


def make_unreadable(path: str) -> None:
    """A folder where a file is expected: open() fails even for root (chmod 000 would not)."""
    if os.path.isdir(path):
        return
    if os.path.exists(path):
        os.remove(path)
    os.makedirs(path)


def append_text(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


# ---- per-scenario injections ---------------------------------------------------------------

def inject_quickdraw(root: str) -> list[Fault]:
    folder = os.path.join(root, "simplified")
    cat = os.path.join(folder, "cat.ndjson")
    lines = read(cat).decode("utf-8").splitlines()
    n = len(lines)
    record = json.loads(lines[0])
    no_strokes = dict(record, key_id="5999999999999991", drawing=[])
    append_text(cat, lines[1] + "\n"                          # the same key_id again
                + json.dumps(no_strokes, separators=(",", ":")) + "\n"
                + lines[2][: len(lines[2]) // 2] + "\n")      # a line cut mid-way
    unknown = dict(record, word="unicorn", key_id="5999999999999992")
    write(os.path.join(folder, "unicorn.ndjson"),
          (json.dumps(unknown, separators=(",", ":")) + "\n").encode("utf-8"))
    make_unreadable(os.path.join(folder, "zebra.ndjson"))     # a known class, unreadable
    return [
        Fault("duplicate key", f"simplified/cat.ndjson:{n + 1}", "duplicate key"),
        Fault("no strokes", f"simplified/cat.ndjson:{n + 2}", "drawing with no strokes"),
        Fault("ndjson line cut", f"simplified/cat.ndjson:{n + 3}", "malformed ndjson line"),
        Fault("unknown class", "simplified/unicorn.ndjson:1", "unknown class"),
        Fault("unreadable file", "simplified/zebra.ndjson", "unreadable"),
    ]


def inject_imagenet_c(root: str) -> list[Fault]:
    picked = sorted(candidates("imagenet_c", root).values(), key=lambda i: (i["wnid"], i["file"]))
    corruptions = picked[0]["corruptions"]
    faults = []
    plan = [("truncated image", truncate, "3", "truncated"),
            ("zero-byte file", empty, "3", "empty file"),
            ("wrong format", lambda p: reencode(p, "PNG"), "3", "PNG data in a file named"),
            ("unreadable file", make_unreadable, "3", "unreadable file"),
            ("missing frame", os.remove, "2", "missing frame file")]
    # One fault per class among the sampled images (every corruption, so whichever the seed
    # draws for the sample, the fault is on its path).
    for (kind, damage, severity, reason), item in zip(plan, picked[::4]):
        for corruption in corruptions:
            damage(os.path.join(root, corruption, severity, item["wnid"], item["file"]))
        faults.append(Fault(kind, f"*/{severity}/{item['wnid']}/{item['file']}", reason))
    wnid = picked[0]["wnid"]
    for corruption in corruptions:
        shutil.copytree(os.path.join(root, corruption), os.path.join(root, "tmp_copy"))
        for severity in os.listdir(os.path.join(root, "tmp_copy")):
            shutil.move(os.path.join(root, "tmp_copy", severity, wnid),
                        os.path.join(root, corruption, severity, "n99999999"))
        shutil.rmtree(os.path.join(root, "tmp_copy"))
    write(os.path.join(root, corruptions[0], "5", wnid, "Thumbs.db"), b"\x00" * 16)
    unknown = sorted(os.listdir(os.path.join(root, corruptions[0], "5", "n99999999")))
    faults += [Fault("unknown class", f"{corruptions[0]}/5/n99999999/{name}", "unknown class")
               for name in unknown]
    faults.append(Fault("odd name", f"{corruptions[0]}/5/{wnid}/Thumbs.db",
                        "not an image file name"))
    return faults


def rod_members(root: str) -> dict[str, list[tuple[str, bytes]]]:
    import tarfile

    archives = {}
    for name in sorted(os.listdir(root)):
        if name.endswith(".tar.gz"):
            with tarfile.open(os.path.join(root, name), "r:gz") as tar:
                archives[name] = [(m.name, tar.extractfile(m).read())
                                  for m in tar.getmembers() if m.isfile()]
    return archives


def inject_rod(root: str) -> list[Fault]:
    from proactivebench_builder.transforms.rod.miniature import tar_gz

    archives = rod_members(root)
    base = {int(re.search(r"-s(\d+)\.jpg$", n).group(1)): d for n, d in archives["rod_1.tar.gz"]
            if "cowboy hat" in n}

    def sequence(stem: str, change=None, drop=(), twice=()):
        members = []
        for i in range(14):
            if i in drop:
                continue
            data = change(i, base[i]) if change else base[i]
            members.append((f"{stem}-s{i}.jpg", data))
            if i in twice:
                members.append((f"{stem}-s{i}.jpg", data))
        return members

    def png(data: bytes) -> bytes:
        out = io.BytesIO()
        Image.open(io.BytesIO(data)).save(out, format="PNG")
        return out.getvalue()

    extra = (sequence("natural_bluebl_trunc-cowboy hat",
                      lambda i, d: d[: len(d) // 2] if i == 3 else d)
             + sequence("natural_bluebl_empty-cowboy hat", lambda i, d: b"" if i == 4 else d)
             + sequence("natural_bluebl_png-cowboy hat", lambda i, d: png(d) if i == 5 else d)
             + sequence("natural_bluebl_missing-cowboy hat", drop=(9,))
             + sequence("natural_bluebl_twice-cowboy hat", twice=(2,))
             + sequence("natural_bluebl_greenr-unicorn")
             + [("IMG_0001.jpg", base[0])])
    write(os.path.join(root, "rod_1.tar.gz"), tar_gz(archives["rod_1.tar.gz"] + extra))
    cut = tar_gz(sequence("natural_redbl_cut-cowboy hat"))
    write(os.path.join(root, "rod_2.tar.gz"), cut[: len(cut) * 2 // 3])   # a download cut short
    make_unreadable(os.path.join(root, "rod_3.tar.gz"))
    t = "rod_1.tar.gz:natural_bluebl_"
    return [
        Fault("truncated image", f"{t}trunc-cowboy hat-s3.jpg", "corrupt frame: s3 .*truncated"),
        Fault("zero-byte file", f"{t}empty-cowboy hat-s4.jpg", "corrupt frame: s4 empty file"),
        Fault("wrong format", f"{t}png-cowboy hat-s5.jpg", "PNG data in a file named"),
        Fault("missing frame", f"{t}missing-cowboy hat-s9.jpg", "missing frame: s9 absent"),
        Fault("duplicate key", f"{t}twice-cowboy hat-s2.jpg", "duplicate frame: s2"),
        Fault("unknown class", "rod_1.tar.gz:natural_bluebl_greenr-unicorn-s*.jpg",
              "unknown class"),
        Fault("odd name", "rod_1.tar.gz:IMG_0001.jpg", "unparseable frame name"),
        Fault("cut archive", "rod_2.tar.gz", "unreadable archive"),
        Fault("unreadable file", "rod_3.tar.gz", "unreadable archive"),
    ]


def inject_vsod(root: str) -> list[Fault]:
    params = manifest_of("vsod")["parameters"]
    data = os.path.join(root, "OcclusionDataSet-MM20", "Data", "test")
    notes = os.path.join(root, "OcclusionDataSet-MM20", "Annotations", "test")
    labels = os.path.join(root, params["labels_file"])
    first_new_line = len(read(labels).decode("utf-8").splitlines()) + 1

    def segment(name: str) -> str:
        shutil.copytree(os.path.join(data, "seg_0001"), os.path.join(data, name))
        shutil.copytree(os.path.join(notes, "seg_0001"), os.path.join(notes, name))
        return name

    segments = {
        "truncated image": (segment("seg_trunc"), truncate, "0002.jpg", "truncated"),
        "zero-byte file": (segment("seg_empty"), empty, "0003.jpg", "empty file"),
        "wrong format": (segment("seg_png"), lambda p: reencode(p, "PNG"), "0004.jpg",
                         "PNG data in a file named"),
        "unreadable file": (segment("seg_unread"), make_unreadable, "0005.jpg",
                            "unreadable file"),
    }
    faults, rows = [], []
    for kind, (name, damage, frame, reason) in segments.items():
        damage(os.path.join(data, name, frame))
        faults.append(Fault(kind, f"OcclusionDataSet-MM20/Data/test/{name}/{frame}", reason))
        rows.append(f"{name},speaker,Angela Merkel,,")
    os.remove(os.path.join(data, segment("seg_missing"), "0006.jpg"))
    faults.append(Fault("missing frame", "OcclusionDataSet-MM20/Data/test/seg_missing",
                        "frame/annotation count mismatch"))
    rows.append("seg_missing,speaker,Angela Merkel,,")
    xml = os.path.join(notes, segment("seg_box"), "0005.xml")
    write(xml, re.sub(rb"<xmax>\d+</xmax>", b"<xmax>999</xmax>", read(xml), count=1))
    faults.append(Fault("box outside image", "OcclusionDataSet-MM20/Annotations/test/seg_box/0005.xml",
                        "box outside the image"))
    rows.append("seg_box,speaker,Angela Merkel,,")
    label_faults = [
        ("missing image", "seg_ghost,speaker,Angela Merkel,,", "unknown segment"),
        ("unknown class", "seg_0002,event,Rodeo,,", "unknown label"),
        ("duplicate key", "seg_0001,speaker,Angela Merkel,,", "duplicate label"),
        ("line cut", "seg_0002,numb", "malformed labels line"),
    ]
    line = first_new_line + len(rows)
    for kind, text, reason in label_faults:
        faults.append(Fault(kind, f"{params['labels_file']}:{line}", reason))
        rows.append(text)
        line += 1
    append_text(labels, "\n".join(rows) + "\n")
    return faults


def inject_mvpn(root: str) -> list[Fault]:
    data = os.path.join(root, "data", "test")
    list_file = os.path.join(root, "data", "test_list", "test_0000_100.pkl")
    elements = pickle.loads(read(list_file))
    views = sorted(os.listdir(os.path.join(data, "0000", "0000")))
    plan = [("truncated image", truncate, "undecodable image"),
            ("zero-byte file", empty, "empty file"),
            ("wrong format", lambda p: reencode(p, "JPEG"), "JPEG data in a file named"),
            ("unreadable file", make_unreadable, "unreadable file"),
            ("missing frame", os.remove, "missing frame file")]
    faults = []
    for number, (kind, damage, reason) in enumerate(plan, start=101):
        folder = f"0000/{number:04d}"
        shutil.copytree(os.path.join(data, "0000", "0000"), os.path.join(data, folder))
        damage(os.path.join(data, folder, views[0]))
        elements.append([f"{folder}/{v}" for v in views])
        faults.append(Fault(kind, f"data/test/{folder}/{views[0]}", reason))
    start = len(elements)
    elements.append(["0099/0000/0000_0.png", "0099/0000/0001_1.png"])
    elements.append(["0000/0000/0000_0.png", "0000/0000/0000_0.png", "0000/0000/0001_1.png"])
    write(list_file, pickle.dumps(elements, protocol=3))
    faults.append(Fault("unknown class", f"data/test_list/test_0000_100.pkl[{start}]",
                        "unknown class"))
    faults.append(Fault("duplicate key", f"data/test_list/test_0000_100.pkl[{start + 1}]",
                        "a view is listed twice"))
    cut = os.path.join(root, "data", "test_list", "test_0041_100.pkl")
    write(cut, read(cut)[: len(read(cut)) // 2])
    faults.append(Fault("cut list", "data/test_list/test_0041_100.pkl", "bad pickle"))
    return faults


def inject_changeit(root: str) -> list[Fault]:
    source_id, category = "-aB3dE5fG7h", "apple"
    found = candidates("changeit", root)
    reachable = [set(found[f"ChangeIt/{category}/{source_id}/{qt}"]["frame_ids"])
                 for qt in ("object", "action")]
    inside = sorted(reachable[0] & reachable[1] - {0})[1]   # a frame both questions show
    frames = os.path.join(root, "frames", category)
    annotation = read(os.path.join(root, "annotations", category, f"{source_id}.fps1.csv"))
    listed = []

    def video(video_id: str, with_frames: bool = True, text: bytes = annotation) -> str:
        if with_frames:
            shutil.copytree(os.path.join(frames, source_id), os.path.join(frames, video_id))
        write(os.path.join(root, "annotations", category, f"{video_id}.fps1.csv"), text)
        listed.append(video_id)
        return video_id

    faults = []
    for kind, damage, second, reason in [
            ("truncated image", truncate, 0, "truncated"),
            ("zero-byte file", empty, 0, "empty file"),
            ("wrong format", lambda p: reencode(p, "PNG"), 0, "PNG data in a file named"),
            ("unreadable file", make_unreadable, 0, "unreadable file"),
            ("missing frame", os.remove, inside, "missing frame file")]:
        vid = video("fault" + kind.split()[0].replace("-", "")[:6].ljust(6, "x"))
        damage(os.path.join(frames, vid, f"{second}.jpg"))
        faults.append(Fault(kind, f"frames/{category}/{vid}/{second}.jpg", reason, count=2))
    ghost = video("ghostVideo1", with_frames=False)
    faults.append(Fault("missing image", f"downloads/{category}/{ghost}", "missing video", 2))
    lines = annotation.decode("ascii").splitlines()
    bad_label = video("badLabel001", text=("\n".join(lines[:5] + ["5,7"] + lines[6:]) + "\n")
                      .encode("ascii"))
    faults.append(Fault("unknown class", f"annotations/{category}/{bad_label}.fps1.csv",
                        "unknown label 7", 2))
    cut = video("cutLine0001", text=("\n".join(lines[:-1]) + "\n" + lines[-1].split(",")[0]
                                     + ",").encode("ascii"))
    faults.append(Fault("line cut", f"annotations/{category}/{cut}.fps1.csv",
                        "malformed annotation", 2))
    repeat = video("repeated001", text=("\n".join(lines[:4] + lines[3:]) + "\n").encode("ascii"))
    faults.append(Fault("duplicate key", f"annotations/{category}/{repeat}.fps1.csv",
                        "not consecutive", 2))
    write(os.path.join(root, "annotations", "unicorn", "x1.fps1.csv"), annotation)
    faults.append(Fault("unknown class", "annotations/unicorn/x1.fps1.csv", "unknown category", 2))
    append_text(os.path.join(root, "videos", f"{category}.csv"),
                "".join(f"\n{v},0.100" for v in listed))
    return faults


def inject_coco(root: str) -> list[Fault]:
    url = os.path.join(root, "annotations", "instances_val2014.json")
    dataset = json.loads(read(url))
    template = next(i for i in dataset["images"] if i["id"] == 42)
    box = next(a for a in dataset["annotations"] if a["image_id"] == 42)
    source = read(os.path.join(root, "val2014", template["file_name"]))
    next_ann = max(a["id"] for a in dataset["annotations"]) + 1

    def image(image_id: int, **ann_changes) -> str:
        nonlocal next_ann
        name = f"COCO_val2014_{image_id:012d}.jpg"
        dataset["images"].append(dict(template, id=image_id, file_name=name))
        dataset["annotations"].append(dict(box, id=next_ann, image_id=image_id, **ann_changes))
        next_ann += 1
        write(os.path.join(root, "val2014", name), source)
        return os.path.join(root, "val2014", name)

    faults = []
    for image_id, (kind, damage, reason) in enumerate([
            ("truncated image", truncate, "truncated"),
            ("zero-byte file", empty, "empty file"),
            ("wrong format", lambda p: reencode(p, "PNG"), "PNG data in a file named"),
            ("unreadable file", make_unreadable, "unreadable file"),
            ("missing frame", os.remove, "missing frame file")], start=1001):
        damage(image(image_id))
        faults.append(Fault(kind, f"val2014/COCO_val2014_{image_id:012d}.jpg", reason))
    image(1006, bbox=[150.0, 30.0, 40.0, 35.0])
    image(1007, category_id=999)
    dataset["annotations"].append(dict(box, id=next_ann, image_id=5555))
    dataset["images"].append(dict(template))          # image id 42 a second time
    write(url, json.dumps(dataset).encode("utf-8"))
    where = "annotations/instances_val2014.json"
    return faults + [
        Fault("box outside image", f"{where}#image_id=1006", "box outside the image"),
        Fault("unknown class", f"{where}#image_id=1007", "unknown category id 999"),
        Fault("missing image", f"{where}#image_id=5555", r"which images\[\] does not list"),
        Fault("duplicate key", f"{where}#images[{len(dataset['images']) - 1}]",
              "duplicate image id 42"),
    ]


def frame_files(name: str, root: str) -> list[str]:
    """One source file per sample that the sample shows as a frame (its middle frame)."""
    scenario = get_scenario(name)(0, root)
    files = []
    for key, item in sorted(candidates(name, root).items()):
        urls = [r["url"] for r in scenario.build_sample(key, item)["frame_refs"]
                if r.get("kind") == "file"]
        if urls:
            files.append(urls[len(urls) // 2])
    return files


def inject_generic(name: str, root: str) -> list[Fault]:
    """A scenario without its own plan: three samples lose a frame file, each a dead letter."""
    files = frame_files(name, root)
    if len(files) < 3:
        pytest.skip(f"{name}: fewer than 3 samples with file frames for the generic faults")
    plan = [("truncated image", truncate, "truncated|undecodable|corrupt"),
            ("zero-byte file", empty, "empty file"),
            ("missing frame", os.remove, "missing frame")]
    faults = []
    for (kind, damage, reason), url in zip(plan, files):
        damage(url)
        faults.append(Fault(kind, os.path.relpath(url, root), reason))
    return faults


INJECT = {"quickdraw": inject_quickdraw, "imagenet_c": inject_imagenet_c, "rod": inject_rod,
          "vsod": inject_vsod, "mvpn": inject_mvpn, "changeit": inject_changeit,
          "coco": inject_coco}


def injector(name: str):
    return INJECT.get(name, lambda root: inject_generic(name, root))
IMAGE_FAULTS = {"truncated image", "zero-byte file", "wrong format", "unreadable file",
                "missing frame"}
READS_IMAGES = {"imagenet_c", "rod", "vsod", "mvpn", "changeit", "coco"}


# ---- the checks ----------------------------------------------------------------------------

def matching(dead: list[dict], fault: Fault) -> list[dict]:
    pattern = fault.path.replace("[", "[[]")  # list indices such as pkl[3] are literal
    return [d for d in dead if fnmatch.fnmatchcase(d["path"], pattern)
            and re.search(fault.reason, d["reason"], re.IGNORECASE)]


def check_accounting(report: dict, dead: list[dict]) -> None:
    assert report["accounted"], report
    excluded = sum(report["excluded"].values())
    assert report["raw_items"] == report["samples"] + report["dead_letters"] + excluded, report
    assert report["dead_letters"] == len(dead)
    assert report["samples"] > 0, "the good items still become samples"


def check_dead_letter_paths(dead: list[dict]) -> None:
    """Every dead letter names a source-root-relative path and a reason."""
    for d in dead:
        assert d["path"] and d["reason"], d
        assert not d["path"].startswith("/") and "://" not in d["path"], d


def test_every_fault_kind_is_injected_somewhere(tmp_path_factory, miniature_root):
    """The suite as a whole covers each fault kind of the issue, and the image faults in every
    scenario that reads images (checked on the injection plans, without building)."""
    kinds = {}
    for name in SCENARIOS:
        _, root = copy_source(miniature_root, tmp_path_factory.mktemp(name), name)
        kinds[name] = {f.kind for f in injector(name)(root)}
    everywhere = set().union(*kinds.values())
    assert {"ndjson line cut", "no strokes", "box outside image", "missing image",
            "unknown class", "duplicate key"} | IMAGE_FAULTS <= everywhere
    for name in READS_IMAGES:
        assert IMAGE_FAULTS <= kinds[name], (name, IMAGE_FAULTS - kinds[name])


@pytest.mark.parametrize("name", SCENARIOS)
def test_faults_become_dead_letters(tmp_path, miniature_root, name):
    sources_root, root = copy_source(miniature_root, tmp_path, name)
    faults = injector(name)(root)
    output = str(tmp_path / "out")
    build = run(output, sources_root, name, *ARGS)
    report = build["scenarios"][name]
    dead = [d for d in read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
            if d["scenario"] == name]
    check_accounting(report, dead)
    check_dead_letter_paths(dead)
    missing = []
    for fault in faults:
        found = matching(dead, fault)
        if len(found) < fault.count:
            missing.append(f"{fault.kind} ({fault.path!r}, {fault.reason!r}, x{fault.count}): "
                           f"found {found}")
    assert not missing, "faults not reported as expected:\n" + "\n".join(missing) + \
        "\nall dead letters:\n" + "\n".join(json.dumps(d) for d in dead)


# ---- non-UTF-8 file names ------------------------------------------------------------------

def inject_non_utf8(name: str, root: str) -> None:
    """A name holding byte 0xE9 (Latin-1 'é', invalid alone in UTF-8) where the scenario lists
    names from disk."""
    r = os.fsencode(root)
    if name == "quickdraw":
        write(r + b"/simplified/caf\xe9.ndjson", read(os.path.join(root, "simplified",
                                                                   "cat.ndjson")))
    elif name == "imagenet_c":
        corruption = "gaussian_noise"
        shutil.copytree(os.path.join(root, corruption, "5", "n01440764"),
                        os.fsdecode(r + f"/{corruption}/5/".encode() + b"n0144076\xe9"))
    elif name == "rod":
        from proactivebench_builder.transforms.rod.miniature import tar_gz

        members = rod_members(root)["rod_1.tar.gz"]
        stem = os.fsdecode(b"natural_bluebl_greenr-caf\xe9")
        extra = [(f"{stem}-s{i}.jpg", members[0][1]) for i in range(14)]
        write(os.path.join(root, "rod_1.tar.gz"), tar_gz(members + extra))
    elif name == "vsod":
        folder = os.path.join(root, "OcclusionDataSet-MM20", "Data", "test", "seg_0002")
        os.rename(os.path.join(folder, "0003.jpg"), os.fsencode(folder) + b"/0003\xe9.jpg")
    elif name == "mvpn":
        lists = os.path.join(root, "data", "test_list")
        shutil.copy(os.path.join(lists, "test_0000_100.pkl"),
                    os.fsencode(lists) + b"/test_caf\xe9_100.pkl")
    elif name == "changeit":
        notes = os.path.join(root, "annotations", "apple")
        shutil.copy(os.path.join(notes, "-aB3dE5fG7h.fps1.csv"),
                    os.fsencode(notes) + b"/caf\xe9.fps1.csv")
    elif name not in INJECT:   # generic: the folder of a frame, copied under a non-UTF-8 name
        folder = os.path.dirname(frame_files(name, root)[0])
        shutil.copytree(folder, os.fsdecode(os.fsencode(folder) + b"\xe9"))


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n != "coco"])
def test_non_utf8_file_name(tmp_path, miniature_root, name):
    """COCO is left out: it opens the names its JSON gives, never a listing."""
    sources_root, root = copy_source(miniature_root, tmp_path, name)
    inject_non_utf8(name, root)
    output = str(tmp_path / "out")
    build = run(output, sources_root, name, *ARGS)
    dead = [d for d in read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
            if d["scenario"] == name]
    check_accounting(build["scenarios"][name], dead)
    # The name is shown with the byte escaped; the reason is the scenario's own when it finds a
    # more specific problem first (ChangeIt: the id is not in its list), else "non-UTF-8".
    flagged = [d for d in dead if "\\xe9" in d["path"] + d["reason"]]
    assert flagged, dead


# ---- --max_bad_fraction --------------------------------------------------------------------

def test_max_bad_fraction_fails_the_build_with_a_clear_message(tmp_path, miniature_root,
                                                                capsys):
    from proactivebench_builder.core.errors import BuildFailed
    from proactivebench_builder.pipeline.commands.build import run_build
    from proactivebench_builder.pipeline.commands.main import main

    sources_root, root = copy_source(miniature_root, tmp_path, "quickdraw")
    inject_quickdraw(root)
    common = [f"--sources_root={sources_root}", "--scenarios=quickdraw",
              "--runner=FnApiRunner", IN_PROCESS, "--no_train"]
    with pytest.raises(BuildFailed, match=r"too many bad inputs \(--max_bad_fraction=0\.01\): "
                                          r"quickdraw: 5 of \d+ raw items"):
        run_build([f"--output={tmp_path / 'a'}", "--max_bad_fraction=0.01", *common])
    assert main([f"--output={tmp_path / 'b'}", "--max_bad_fraction=0.01", *common]) == 2
    err = capsys.readouterr().err
    assert "BUILD FAILED: too many bad inputs" in err and "dead_letters.jsonl" in err
    # The report is written before the check, so the user can see every path and reason.
    assert os.path.exists(tmp_path / "b" / "reports" / "dead_letters.jsonl")
    assert main([f"--output={tmp_path / 'c'}", "--max_bad_fraction=0.9", *common]) == 0


def test_non_utf8_file_name_in_the_train_branch(tmp_path, miniature_root):
    """The train split reads QuickDraw's files too: the bad name is a dead letter there as well."""
    sources_root, root = copy_source(miniature_root, tmp_path, "quickdraw")
    inject_non_utf8("quickdraw", root)
    output = str(tmp_path / "out")
    run(output, sources_root, "quickdraw", "--max_bad_fraction=0.9")
    dead = read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
    by_branch = {d["scenario"] for d in dead if "non-UTF-8 file name" in d["reason"]}
    assert by_branch == {"quickdraw", "quickdraw/train"}
    assert all("caf\\xe9" in d["path"] for d in dead if "non-UTF-8" in d["reason"])
