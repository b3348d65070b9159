"""core/buildfolder.py: the readers of a build folder (validate, evaluate --data, inspect,
publish) read only the regular files a build writes, inside the folder; a failed build is marked
and refused by each of them; a killed build's temporary files are removed by the next build.

- The upstream export (DIR/upstream) is covered by digests in reports/build.json, checked by
  `validate`, `publish --with_upstream` and `evaluate --data DIR/upstream`; a link or a FIFO in
  it is refused.
- reports/build.json, the card and the shards may hold anything: every reader ends in one line
  (never a traceback, never a hang), and no path from build.json leads out of DIR.
- The build's own clean-up never follows a link out of the folder.

Every case that could hang runs under a deadline (SIGALRM), so a regression fails instead of
blocking the suite. The readers as their users run them (run_validate, run_publish, run_inspect,
evaluate_refusal) and the edits of a build folder are here, imported by the readers' own tests."""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # publish never reaches the network here

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

from conftest import RUN_PIPELINE, read_json, run  # noqa: E402
from test_partial_rebuild import two_scenario_build  # noqa: E402,F401 - a fixture
from proactivebench_builder.core import buildfolder  # noqa: E402
from proactivebench_builder.core.errors import BuildFailed  # noqa: E402
from proactivebench_builder.core.layout import BUILD_REPORT, CARD  # noqa: E402
from proactivebench_builder.pipeline.commands import inspect as inspect_command  # noqa: E402
from proactivebench_builder.pipeline.commands import publish as publish_command  # noqa: E402
from proactivebench_builder.pipeline.commands import validate  # noqa: E402
from proactivebench_builder.pipeline.commands.validate import main as validate_main  # noqa: E402
from proactivebench_builder.pipeline.dataset_card import dataset_info  # noqa: E402
from proactivebench_builder.runtime import loading  # noqa: E402

# a hang, not slowness: every check here takes a few seconds on the miniature
DEADLINE_S = int(os.environ.get("PB_TEST_DEADLINE", "60"))


class Hung(Exception):
    """The deadline passed: the code under test blocked or looped."""


@contextlib.contextmanager
def deadline(seconds: int = DEADLINE_S):
    """Raise Hung in the main thread after `seconds` (interrupts a blocking open() too)."""
    def expire(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def built(built_miniature, tmp_path) -> str:
    """A private copy of the shared build, free to damage."""
    copy = str(tmp_path / "built")
    shutil.copytree(built_miniature, copy, symlinks=True)
    return copy


# ---- the four readers, each as its user runs it --------------------------------------------------

def run_validate(folder: str, capsys, *flags: str) -> tuple[int, str]:
    with deadline():
        code = validate.main([folder, "--skip_frames", *flags])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def run_publish(folder: str, target: str, capsys, *flags: str) -> tuple[int, str]:
    with deadline():
        code = publish_command.main([folder, "--to", target, *flags])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def run_inspect(folder: str, out: str, capsys, *flags: str) -> tuple[int, str]:
    with deadline(120):
        code = inspect_command.main([folder, "--out", out, "--per_scenario", "1", *flags])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def evaluate_refusal(data: str) -> str | None:
    """The one line `evaluate --data` stops with before any work (None: accepted)."""
    with deadline():
        try:
            loading.check_data(data)
        except SystemExit as err:
            assert isinstance(err.code, str), err.code
            return err.code
    return None


def assert_one_clear_line(code: int, text: str, *fragments: str) -> None:
    assert code != 0, text
    assert "Traceback" not in text, text
    assert all(f in text for f in fragments), (fragments, text)


# ---- changing a build as a hostile or careless writer can ----------------------------------------

def edit_report(folder: str, change) -> None:
    path = os.path.join(folder, BUILD_REPORT)
    report = read_json(path)
    change(report)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)


def sha256_of(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def resign(folder: str) -> None:
    """Recompute build.json's sizes and sha256 and the card's fingerprints after an edit, as
    anyone can: the checksums detect damage, not forgery."""
    path = os.path.join(folder, BUILD_REPORT)
    report = read_json(path)
    old = {i["config_name"]: i["description"] for i in dataset_info(report["files"])}
    for entry in report["files"] + report.get("upstream_files", []):
        full = os.path.join(folder, entry["path"])
        entry["bytes"], entry["sha256"] = os.path.getsize(full), sha256_of(full)
    new = {i["config_name"]: i["description"] for i in dataset_info(report["files"])}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    card_path = os.path.join(folder, CARD)
    with open(card_path, encoding="utf-8") as handle:
        card = handle.read()
    for config, description in old.items():
        card = card.replace(description, new[config])
    with open(card_path, "w", encoding="utf-8") as handle:
        handle.write(card)


def rewrite_shards(folder: str, config: str, change) -> None:
    """Apply `change(rows)` to the first shard of `config` (schema kept)."""
    for path in sorted(glob.glob(os.path.join(folder, config, "*.parquet")))[:1]:
        table = pq.read_table(path)
        rows = table.to_pylist()
        change(rows)
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def upstream_records(folder: str, config: str) -> list[dict]:
    with open(os.path.join(folder, "upstream", f"{config}_preprocessed.jsonl"),
              encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def write_records(folder: str, config: str, records: list[dict]) -> None:
    with open(os.path.join(folder, "upstream", f"{config}_preprocessed.jsonl"), "w",
              encoding="utf-8") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))


def exported_image(folder: str, config: str) -> str:
    """An image file of `config`'s export, named by its first record."""
    ids = upstream_records(folder, config)[0]["frame_ids"]
    record = upstream_records(folder, config)[0]
    from proactivebench_builder.transforms import behaviour_for_config
    relative = behaviour_for_config(config).play.frame_path(record, ids[0])
    return os.path.join(folder, "upstream", relative)


def edit_an_answer(folder: str) -> None:
    records = upstream_records(folder, "QuickDraw")
    records[0]["answer"] = next(c for c in records[0]["categories"] if c != records[0]["answer"])
    write_records(folder, "QuickDraw", records)


@pytest.mark.parametrize("command, name", [
    (c, n) for n in ("README.md", "reports/build.json")
    for c in ("validate", "evaluate", "inspect", "publish")])
def test_a_card_or_report_linked_from_outside_the_folder_is_refused(
        two_scenario_build, tmp_path, command, name):
    """A build writes regular files only: a card or a build.json that is a link leading out of
    the folder is read by no reader (confinement), as publish already refuses it."""
    _, built = two_scenario_build
    folder = tmp_path / "built"
    shutil.copytree(built, folder)
    outside = tmp_path / "elsewhere"
    shutil.move(str(folder / name), outside)
    os.symlink(outside, folder / name)
    argv = {
        "validate": [sys.executable, RUN_PIPELINE, "validate", str(folder)],
        "evaluate": [sys.executable, "-m", "proactivebench_builder.runtime", "evaluate",
                     "--data", str(folder), "--model", "oracle", "--scenarios", "quickdraw",
                     "--results", str(tmp_path / "r.jsonl")],
        "inspect": [sys.executable, RUN_PIPELINE, "inspect", str(folder), "--out",
                    str(tmp_path / "sheets"), "--per_scenario", "1"],
        "publish": [sys.executable, RUN_PIPELINE, "publish", str(folder), "--to",
                    str(tmp_path / "target")],
    }[command]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    said = result.stdout + result.stderr  # validate lists its problems on stdout
    assert result.returncode in (1, 2) and f"{name}: unreadable: a symbolic link" in said \
        or command in ("evaluate", "publish") and result.returncode == 2 and name in said, said
    assert "Traceback" not in said


def test_a_refused_build_is_marked_and_refused_everywhere(tmp_path, miniature_root, capsys):
    from proactivebench_builder.pipeline import publish
    from proactivebench_builder.runtime import loading

    root = str(tmp_path / "sources")
    shutil.copytree(os.path.join(miniature_root, "ImageNet-C"), os.path.join(root, "ImageNet-C"))
    for folder in glob.glob(os.path.join(root, "ImageNet-C", "*", "*", "n*")):
        with open(os.path.join(folder, "notes.txt"), "w") as handle:  # dead letters
            handle.write("not an image")
    output = str(tmp_path / "out")
    with pytest.raises(BuildFailed):
        run(output, root, "imagenet_c", "--max_bad_fraction=0")
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "failed" and "too many bad inputs" in report["failure"]
    assert validate_main([output]) == 1
    assert "its build failed: too many bad inputs" in capsys.readouterr().out
    with pytest.raises(publish.PublishError, match="its build failed"):
        publish.publish(output, publish.FsspecTarget(str(tmp_path / "target")), dry_run=True)
    with pytest.raises(SystemExit, match="its build failed"):
        loading.check_data(output)


def test_leftovers_of_a_killed_build_are_removed_by_the_next_build(tmp_path, miniature_root):
    output = str(tmp_path / "out")
    planted = [os.path.join(output, "upstream", "QuickDraw", ".tmp-0123456789ab-1-0-0000.png"),
               os.path.join(output, "QuickDraw", ".tmp-0123456789ab-1-1-test-00000.parquet"),
               os.path.join(output, ".tmp-0123456789ab-1-2-README.md")]
    buildfolder.mark_building(output)  # what a build killed part way leaves
    for path in planted:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(b"half a file")
    run(output, miniature_root, "quickdraw", "--no_train")
    assert not any(os.path.exists(p) for p in planted)


# ---- the upstream export is covered by digests ------------------------------------------

def test_build_json_records_every_exported_file_with_its_digest(built_miniature):
    report = read_json(os.path.join(built_miniature, BUILD_REPORT))
    listed = {f["path"]: f for f in report["upstream_files"]}
    on_disk = sorted(os.path.relpath(os.path.join(d, n), built_miniature)
                     for d, _, names in os.walk(os.path.join(built_miniature, "upstream"))
                     for n in names)
    assert sorted(listed) == on_disk
    for path, entry in listed.items():
        full = os.path.join(built_miniature, path)
        assert entry["bytes"] == os.path.getsize(full) and entry["sha256"] == sha256_of(full)
    # every config's files, and the export's marker (config "": it is the whole export's)
    assert {f["config"] for f in listed.values()} == {"", *(
        f["config"] for f in report["files"] if f["split"] in ("test", "filtered_out"))}
    assert listed["upstream/proactivebench_builder_export.json"]["config"] == ""


def test_an_edited_answer_in_the_export_is_refused(built, tmp_path, capsys, monkeypatch):
    edit_an_answer(built)
    code, text = run_validate(built, capsys)
    assert_one_clear_line(code, text, "upstream/QuickDraw_preprocessed.jsonl")
    refusal = evaluate_refusal(os.path.join(built, "upstream"))
    assert refusal and "upstream/QuickDraw_preprocessed.jsonl" in refusal
    monkeypatch.setattr(publish_command, "record_contract", lambda folder: [])  # publish's own
    code, text = run_publish(built, str(tmp_path / "out"), capsys, "--with_upstream")
    assert_one_clear_line(code, text, "PUBLISH FAILED", "upstream/QuickDraw_preprocessed.jsonl")
    assert not os.path.exists(tmp_path / "out")
    # evaluate on the build's own shards does not read the export, so it is not checked there
    assert evaluate_refusal(built) is None


def test_a_truncated_exported_image_is_refused(built, capsys):
    image = exported_image(built, "coco2014")
    os.truncate(image, os.path.getsize(image) // 2)
    relative = os.path.relpath(image, built)
    code, text = run_validate(built, capsys)
    assert_one_clear_line(code, text, relative)
    assert relative in evaluate_refusal(os.path.join(built, "upstream"))


@pytest.mark.parametrize("kind", ["symlink", "fifo", "unlisted symlink"])
def test_a_link_or_a_fifo_in_the_export_is_refused(built, tmp_path, capsys, monkeypatch, kind):
    image = exported_image(built, "QuickDraw")
    if kind == "unlisted symlink":
        image = os.path.join(os.path.dirname(image), "extra.png")
    else:
        os.remove(image)
    if kind == "fifo":
        os.mkfifo(image)
    else:
        os.symlink("/etc/hostname", image)
    relative = os.path.relpath(image, built)
    code, text = run_validate(built, capsys)
    assert_one_clear_line(code, text, relative)
    monkeypatch.setattr(publish_command, "record_contract", lambda folder: [])
    code, text = run_publish(built, str(tmp_path / "out"), capsys, "--with_upstream")
    assert_one_clear_line(code, text, "PUBLISH FAILED", relative)
    assert relative in evaluate_refusal(os.path.join(built, "upstream"))


def test_a_copy_of_the_export_outside_its_build_has_nothing_to_check(built, tmp_path):
    """Documented: a bare copy of DIR/upstream has no build.json beside it, so its files are
    played as they are (the released test/ folder is such a folder)."""
    copy = str(tmp_path / "elsewhere" / "data")
    shutil.copytree(os.path.join(built, "upstream"), copy)
    jsonl = os.path.join(copy, "QuickDraw_preprocessed.jsonl")
    with open(jsonl, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    records[0]["answer"] = "edited"
    with open(jsonl, "w", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))
    assert evaluate_refusal(copy) is None


def test_stray_export_files_of_an_earlier_build_are_neither_blessed_nor_published(
        built, tmp_path, capsys, monkeypatch):
    """A file in DIR/upstream that build.json does not list (an earlier build's) is not
    published; the JSONL files and images the build wrote are."""
    stray = os.path.join(built, "upstream", "QuickDraw", "stray", "0000.png")
    os.makedirs(os.path.dirname(stray))
    shutil.copy(exported_image(built, "QuickDraw"), stray)
    code, text = run_validate(built, capsys)
    assert code == 0, text
    monkeypatch.setattr(publish_command, "record_contract", lambda folder: [])
    target = str(tmp_path / "out")
    code, text = run_publish(built, target, capsys, "--with_upstream")
    assert code == 0, text
    import zipfile
    with zipfile.ZipFile(os.path.join(target, "test", "QuickDraw.zip")) as archive:
        assert "QuickDraw/stray/0000.png" not in archive.namelist()


def test_an_update_keeps_the_digests_of_the_export_it_keeps(tmp_path, miniature_root):
    output = str(tmp_path / "out")
    run(output, miniature_root, "quickdraw,rod", "--no_train", "--upstream_export")
    before = {f["path"]: f for f in read_json(os.path.join(output, BUILD_REPORT))["upstream_files"]}
    run(output, miniature_root, "quickdraw", "--no_train",
        "--upstream_export")  # keeps ROD, its export included
    after = {f["path"]: f for f in read_json(os.path.join(output, BUILD_REPORT))["upstream_files"]}
    assert after == before
    assert any(f["config"] == "Realistic-Occlusion-Dataset" for f in after.values())
    assert validate.validate_folder(output, decode_frames=False) == []

# ---- build.json, the card and the shards may hold anything ----------------------------

def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def add_file(entry: dict):
    return lambda report: report["files"].append(
        {"bytes": 0, "sha256": "0" * 64, "config": "QuickDraw", "split": "test", "rows": 0,
         **entry})


REPORT_DAMAGE = {
    "a JSON list": lambda folder: write_text(folder, BUILD_REPORT, "[]"),
    "deeply nested JSON": lambda folder: write_text(folder, BUILD_REPORT, nested(100000)),
    "not UTF-8": lambda folder: write_bytes(folder, BUILD_REPORT, b'{"status": "ok\xff"}'),
    "a FIFO": lambda folder: make_fifo(folder, BUILD_REPORT),
    "a folder": lambda folder: make_folder(folder, BUILD_REPORT),
    "a files entry without path": lambda folder: edit_report(
        folder, lambda r: r["files"][0].pop("path")),
    "a files entry that is a string": lambda folder: edit_report(
        folder, lambda r: r["files"].append("QuickDraw/test-00000-of-00001.parquet")),
    "files an object": lambda folder: edit_report(folder, lambda r: r.update(files={"a": 1})),
    "scenarios a list": lambda folder: edit_report(folder, lambda r: r.update(scenarios=[])),
    "a scenario entry a number": lambda folder: edit_report(
        folder, lambda r: r["scenarios"].update(quickdraw=1)),
    "train a list": lambda folder: edit_report(folder, lambda r: r.update(train=[1])),
    "status a list": lambda folder: edit_report(folder, lambda r: r.update(status=["ok"])),
    "a files entry naming ../../etc/hostname": lambda folder: edit_report(
        folder, add_file({"path": "../../../../../../etc/hostname"})),
    "a files entry naming /dev/zero": lambda folder: edit_report(
        folder, add_file({"path": "/dev/zero"})),
    "a files entry naming a FIFO": lambda folder: (
        make_fifo(folder, "reports/pipe"), edit_report(folder, add_file({"path": "reports/pipe"}))),
    "a files entry naming a folder": lambda folder: edit_report(
        folder, add_file({"path": "reports"})),
    "a files entry naming a link out": lambda folder: (
        os.symlink("/etc/hostname", os.path.join(folder, "reports", "link")),
        edit_report(folder, add_file({"path": "reports/link"}))),
    "an export entry naming /dev/zero": lambda folder: edit_report(
        folder, lambda r: r["upstream_files"].append(
            {"path": "/dev/zero", "bytes": 1, "sha256": "0" * 64, "config": "QuickDraw"})),
    "a shard replaced by a link to the same bytes outside": lambda folder: link_out(
        folder, "QuickDraw/test-00000-of-00001.parquet"),
    "a shard that is a FIFO": lambda folder: (
        os.remove(os.path.join(folder, "QuickDraw", "test-00000-of-00001.parquet")),
        make_fifo(folder, "QuickDraw/test-00000-of-00001.parquet")),
    "a stray shard that is a FIFO": lambda folder: make_fifo(folder, "QuickDraw/zz.parquet"),
    "a config folder that is a file": lambda folder: (
        shutil.rmtree(os.path.join(folder, "MVP-N")), write_text(folder, "MVP-N", "x")),
    "a card that is not UTF-8": lambda folder: append_bytes(folder, CARD, b"\xff"),
    "a card that is a FIFO": lambda folder: (os.remove(os.path.join(folder, CARD)),
                                              make_fifo(folder, CARD)),
    "a card with a YAML alias bomb": lambda folder: alias_bomb(folder),
    "a card whose configs are not objects": lambda folder: replace_in_card(
        folder, "configs:\n", "configs:\n- 1\n- [a]\n- data_files: 3\n"),
    "a card whose dataset_info holds a list": lambda folder: replace_in_card(
        folder, "dataset_info:\n",
        "dataset_info:\n- config_name: [x]\n  description: [y]\nold_info:\n"),
    "a card whose front matter is a list": lambda folder: replace_in_card(
        folder, "---\n", "---\n- a\n---\n", count=1),
}


def write_text(folder: str, relative: str, text: str) -> None:
    write_bytes(folder, relative, text.encode("utf-8"))


def write_bytes(folder: str, relative: str, data: bytes) -> None:
    with open(os.path.join(folder, relative), "wb") as handle:
        handle.write(data)


def append_bytes(folder: str, relative: str, data: bytes) -> None:
    with open(os.path.join(folder, relative), "ab") as handle:
        handle.write(data)


def make_fifo(folder: str, relative: str) -> None:
    path = os.path.join(folder, relative)
    if os.path.lexists(path):
        os.remove(path)
    os.mkfifo(path)


def make_folder(folder: str, relative: str) -> None:
    path = os.path.join(folder, relative)
    os.remove(path)
    os.mkdir(path)


def link_out(folder: str, relative: str) -> None:
    path = os.path.join(folder, relative)
    outside = os.path.join(os.path.dirname(folder), "outside.parquet")
    shutil.copy(path, outside)
    os.remove(path)
    os.symlink(outside, path)


def replace_in_card(folder: str, old: str, new: str, count: int = 1) -> None:
    path = os.path.join(folder, CARD)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert old in text
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace(old, new, count))


def alias_bomb(folder: str) -> None:
    """A billion-laughs front matter whose `configs:` names the bomb (walked by every reader)."""
    bomb = "a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9))
    replace_in_card(folder, "configs:\n", bomb + "configs: *a8\nold_configs:\n")


@pytest.mark.parametrize("damage", sorted(REPORT_DAMAGE))
def test_a_damaged_build_folder_is_one_line_in_every_reader(built, tmp_path, capsys,
                                                            monkeypatch, damage):
    REPORT_DAMAGE[damage](built)
    code, text = run_validate(built, capsys)
    assert_one_clear_line(code, text)
    refusal = evaluate_refusal(built)
    assert refusal, damage
    assert "\n" not in refusal.strip()
    monkeypatch.setattr(publish_command, "record_contract", lambda folder: [])
    code, text = run_publish(built, str(tmp_path / "published"), capsys)
    assert_one_clear_line(code, text, "PUBLISH FAILED")
    code, text = run_inspect(built, str(tmp_path / "inspected"), capsys)
    assert_one_clear_line(code, text)
    assert not os.path.exists(tmp_path / "inspected" / "index.html")


def test_a_path_from_build_json_never_leads_out_of_the_folder(built, tmp_path):
    """The outside file exists and is readable: the check names the path, never hashes it."""
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"secret")
    relative = os.path.relpath(outside, built)
    edit_report(built, add_file({"path": relative}))
    opened = []
    real_open = os.open

    def spy(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", spy)
        problems = buildfolder.folder_problems(built)
    assert any(relative in p and "outside" in p for p in problems), problems
    assert not any(os.path.abspath(p) == str(outside) for p in opened)

# ---- the same pattern in the build's own clean-up: never through a link --------------------------
def test_leftovers_are_removed_without_following_a_link_out(tmp_path):
    output, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / ".tmp-0123456789ab-1-0-keep.png").write_bytes(b"not the build's")
    buildfolder.mark_building(str(output))
    (output / "upstream").mkdir()
    os.symlink(outside, output / "upstream" / "link")
    (output / "upstream" / ".tmp-0123456789ab-1-1-x.png").write_bytes(b"half a file")
    assert buildfolder.remove_leftovers(str(output)) == 1
    assert (outside / ".tmp-0123456789ab-1-0-keep.png").exists()


def test_a_rebuild_removes_an_earlier_exports_files_and_nothing_outside(tmp_path,
                                                                       miniature_root, capsys):
    output, outside = str(tmp_path / "out"), tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.png").write_bytes(b"not the build's")
    run(output, miniature_root, "quickdraw", "--no_train", "--upstream_export")
    stale = os.path.join(output, "upstream", "QuickDraw", "stale", "0000.png")
    os.makedirs(os.path.dirname(stale))
    shutil.copy(exported_image(output, "QuickDraw"), stale)
    os.symlink(outside, os.path.join(output, "upstream", "QuickDraw", "link"))
    run(output, miniature_root, "quickdraw", "--no_train")
    assert not os.path.exists(stale)
    assert not os.path.lexists(os.path.join(output, "upstream", "QuickDraw", "link"))
    assert (outside / "precious.png").read_bytes() == b"not the build's"
    capsys.readouterr()
    code, text = run_validate(output, capsys)
    assert code == 0, text


def test_the_digest_check_refuses_a_link_to_a_listed_file(tmp_path):
    """The digest check reads each listed file (a hard link is a regular file of its own),
    refuses a symbolic link to a listed file and names a missing one."""
    import hashlib

    from proactivebench_builder.core import buildfolder

    data = b"shard bytes" * 1000
    (tmp_path / "a.parquet").write_bytes(data)
    os.link(tmp_path / "a.parquet", tmp_path / "b.parquet")
    os.symlink(tmp_path / "a.parquet", tmp_path / "c.parquet")
    entry = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    problems = buildfolder.digest_problems(
        str(tmp_path), [dict(entry, path=name) for name in ("a.parquet", "b.parquet",
                                                            "c.parquet", "d.parquet")])
    assert [p.split(":")[0] for p in problems] == ["c.parquet", "d.parquet"]
    assert "symbolic link" in problems[0] and "missing" in problems[1]
