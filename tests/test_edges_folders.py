"""Build folders as input: what
`validate`, `publish`, `inspect` and `evaluate --data` do with a build folder, its upstream export
and a publish target that are not what they should be.

- The upstream export (DIR/upstream) is covered by digests in reports/build.json, checked by
  `validate`, `publish --with_upstream` and `evaluate --data DIR/upstream`; a link or a FIFO in
  it is refused.
- reports/build.json, the card and the shards may hold anything: every reader ends in one line
  (never a traceback, never a hang), and no path from build.json leads out of DIR.
- A publish target holds the user's files too: only what a previous publish wrote is deleted;
  nothing is written outside the target; a full disk or an interruption leaves no partial file.

Every case that could hang before its fix runs under a deadline (SIGALRM), so a regression fails
instead of blocking the suite.
"""
from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # publish never reaches the network here

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

from conftest import read_json, run  # noqa: E402
from proactivebench_builder.core import buildfolder  # noqa: E402
from proactivebench_builder.core.layout import BUILD_REPORT, CARD  # noqa: E402
from proactivebench_builder.pipeline import publish  # noqa: E402
from proactivebench_builder.pipeline.commands import inspect as inspect_command  # noqa: E402
from proactivebench_builder.pipeline.commands import publish as publish_command  # noqa: E402
from proactivebench_builder.pipeline.commands import validate  # noqa: E402
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


# ---- publish targets -----------------------------------------------------

@pytest.fixture
def small_filesystem(tmp_path):
    """A 256 kB tmpfs when this machine lets us mount one, else None (as the build's own
    full-disk test, tests/test_writers.py)."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield str(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def temporaries(folder: str) -> list[str]:
    return [p for p in glob.glob(os.path.join(folder, "**", "*"), recursive=True)
            if os.path.basename(p).startswith(".tmp-")]


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def publishable(built, monkeypatch) -> str:
    """`built`, published with publish's own checks (the record contract has its own tests)."""
    monkeypatch.setattr(publish_command, "record_contract", lambda folder: [])
    return built


@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_publishing_into_a_full_folder_is_one_line_and_leaves_no_partial_file(
        publishable, small_filesystem, tmp_path, capsys, monkeypatch, disk):
    if disk == "tmpfs":
        if small_filesystem is None:
            pytest.skip("mounting a tmpfs is not allowed here (the injected case runs)")
        target = os.path.join(small_filesystem, "published")
    else:
        target = str(tmp_path / "published")
        monkeypatch.setattr(publish.FsspecTarget, "copy_bytes", no_space)
    code, text = run_publish(publishable, target, capsys)
    assert code == 1, text
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1].startswith(
        "PUBLISH FAILED: No space left on device (errno 28)"), text
    assert temporaries(os.path.dirname(target)) == []


@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_a_full_staging_folder_is_one_line_and_leaves_nothing_in_it(
        publishable, small_filesystem, tmp_path, capsys, monkeypatch, disk):
    if disk == "tmpfs":
        if small_filesystem is None:
            pytest.skip("mounting a tmpfs is not allowed here (the injected case runs)")
        staging = os.path.join(small_filesystem, "staging")
    else:
        staging = str(tmp_path / "staging")
        monkeypatch.setattr(publish.shutil, "copyfileobj", no_space)
    os.makedirs(staging)
    code, text = run_publish(publishable, str(tmp_path / "published"), capsys,
                             "--with_upstream", "--staging_dir", staging)
    assert code == 1, text
    assert "Traceback" not in text and "No space left on device (errno 28)" in text, text
    assert os.listdir(staging) == []
    assert not os.path.exists(tmp_path / "published") or temporaries(
        str(tmp_path / "published")) == []


def test_publish_leaves_the_users_own_files_in_the_target(publishable, tmp_path, capsys):
    target = tmp_path / "published"
    (target / "mydata").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), str(target / "mydata" / "precious.parquet"))
    (target / "reports").mkdir()
    (target / "reports" / "notes.txt").write_text("my notes")
    (target / ".tmp-mine.txt").write_text("not a temporary file of a publish")
    for _ in range(2):
        code, text = run_publish(publishable, str(target), capsys)
        assert code == 0, text
        assert "delete" not in text.replace("delete 0 stale", ""), text
    assert (target / "mydata" / "precious.parquet").exists()
    assert (target / "reports" / "notes.txt").read_text() == "my notes"
    assert (target / ".tmp-mine.txt").exists()


def test_publish_deletes_what_an_earlier_publish_wrote_and_the_card_would_read(
        publishable, tmp_path, capsys):
    target = str(tmp_path / "published")
    assert run_publish(publishable, target, capsys)[0] == 0
    # a file an earlier publish wrote that this one does not (e.g. an older report)
    manifest = os.path.join(target, publish.MANIFEST)
    published = read_json(manifest)
    published["files"].append("reports/old_report.json")
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump(published, handle)
    with open(os.path.join(target, "reports", "old_report.json"), "w") as handle:
        handle.write("{}")
    # a shard the card's glob would read as the build's, whoever wrote it
    stray = os.path.join(target, "QuickDraw", "test-00001-of-00002.parquet")
    shutil.copy(os.path.join(publishable, "QuickDraw", "test-00000-of-00001.parquet"), stray)
    # a temporary file an interrupted publish left
    leftover = os.path.join(target, "QuickDraw", ".tmp-0123456789ab-1-0-test.parquet")
    with open(leftover, "wb") as handle:
        handle.write(b"half a file")
    code, text = run_publish(publishable, target, capsys)
    assert code == 0, text
    assert "delete 3 stale" in text, text
    assert not any(os.path.exists(p) for p in (
        stray, leftover, os.path.join(target, "reports", "old_report.json")))


def test_a_target_that_is_a_link_to_a_folder_is_published_into_that_folder(
        publishable, tmp_path, capsys):
    """Documented: the target is the user's; a link given as the target is followed (links
    inside it are not), and a rerun finds what the first publish wrote."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    os.symlink(real, link)
    assert run_publish(publishable, str(link), capsys)[0] == 0
    assert (real / "README.md").exists() and (real / publish.MANIFEST).exists()
    code, text = run_publish(publishable, str(link), capsys)
    assert code == 0 and "nothing to do" in text, text


@pytest.mark.parametrize("prefix", ["../../escape", "/tmp/escape", "test/../../escape", "..",
                                    "a//b", "./test"])
def test_an_upstream_prefix_leading_out_of_the_target_is_refused(publishable, tmp_path, capsys,
                                                                 prefix):
    target = str(tmp_path / "a" / "published")
    code, text = run_publish(publishable, target, capsys, "--with_upstream",
                             "--upstream_prefix", prefix)
    assert code == 2, text
    assert_one_clear_line(code, text, "--upstream_prefix")
    assert not os.path.exists(tmp_path / "escape") and not os.path.exists(target)


@pytest.mark.parametrize("where", ["staging is the build", "staging inside the build",
                                   "target is the build", "target inside the build"])
def test_staging_or_target_inside_the_build_folder_is_refused(publishable, tmp_path, capsys,
                                                              where):
    before = sorted(os.listdir(publishable))
    inside = os.path.join(publishable, "sub") if "inside" in where else publishable
    if where.startswith("staging"):
        flags = ("--with_upstream", "--staging_dir", inside)
        target = str(tmp_path / "published")
    else:
        flags, target = (), inside
    code, text = run_publish(publishable, target, capsys, *flags)
    assert code == 2, text
    assert_one_clear_line(code, text, "inside the build folder")
    assert sorted(os.listdir(publishable)) == before


@pytest.mark.parametrize("when", ["writing", "renaming", "archiving"])
def test_an_interrupted_publish_leaves_no_temporary_file_and_no_staging_folder(
        publishable, tmp_path, monkeypatch, when):
    """Ctrl-C (and SIGTERM/SIGHUP, which core.cli turns into the same exception) mid-publish:
    every temporary file is removed, and so is the staging folder, the user's own kept."""
    calls = []
    target = publish.FsspecTarget(str(tmp_path / "published"))

    def interrupt_after_two(original):
        def wrapper(*args, **kwargs):
            calls.append(1)
            if len(calls) > 2:
                raise KeyboardInterrupt
            return original(*args, **kwargs)
        return wrapper

    if when == "writing":
        monkeypatch.setattr(publish.FsspecTarget, "copy_bytes",
                            interrupt_after_two(publish.FsspecTarget.copy_bytes))
    elif when == "renaming":
        monkeypatch.setattr(target.fs, "mv", interrupt_after_two(target.fs.mv))
    else:
        monkeypatch.setattr(publish, "write_deterministic_zip",
                            interrupt_after_two(publish.write_deterministic_zip))
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "mine.txt").write_text("the user's")
    with pytest.raises(KeyboardInterrupt):
        publish.publish(publishable, target, with_upstream=True, staging_dir=str(staging))
    assert temporaries(str(tmp_path / "published")) == []
    assert sorted(os.listdir(staging)) == ["mine.txt"]


def test_the_owned_staging_folder_is_removed_after_an_interruption(publishable, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(publish.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(publish, "write_deterministic_zip", no_keyboard)
    with pytest.raises(KeyboardInterrupt):
        publish.publish(publishable, publish.FsspecTarget(str(tmp_path / "published")),
                        with_upstream=True)
    assert glob.glob(str(tmp_path / "proactivebench-publish-*")) == []


def no_keyboard(*args, **kwargs):
    raise KeyboardInterrupt


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


def test_inspect_refuses_a_build_that_failed_or_did_not_finish(built, tmp_path, capsys):
    buildfolder.mark_finished(built, "too many bad inputs (test)")
    code, text = run_inspect(built, str(tmp_path / "a"), capsys)
    assert_one_clear_line(code, text, "too many bad inputs (test)")
    code, text = run_inspect(built, str(tmp_path / "b"), capsys, "--force")
    assert code == 0, text
    assert "too many bad inputs (test)" in text  # said, and drawn anyway
    with open(tmp_path / "b" / "index.html", encoding="utf-8") as handle:
        assert "too many bad inputs (test)" in handle.read()
    buildfolder.mark_building(built)
    code, text = run_inspect(built, str(tmp_path / "c"), capsys)
    assert_one_clear_line(code, text, "did not finish")


def test_inspect_refuses_a_damaged_shard(built, tmp_path, capsys):
    path = os.path.join(built, "QuickDraw", "test-00000-of-00001.parquet")
    os.remove(path)
    shutil.copy(os.path.join(built, "ImageNet-C", "test-00000-of-00001.parquet"), path)
    code, text = run_inspect(built, str(tmp_path / "a"), capsys)
    assert_one_clear_line(code, text, "QuickDraw/test-00000-of-00001.parquet")


def test_inspect_names_a_row_it_cannot_draw(built, tmp_path, capsys):
    """A re-signed shard whose rows have id null: one line per row, the others drawn."""
    def null_ids(rows):
        for row in rows:
            row["id"] = None
    rewrite_shards(built, "QuickDraw", null_ids)
    resign(built)
    code, text = run_inspect(built, str(tmp_path / "a"), capsys)
    assert "Traceback" not in text
    assert code == 0, text
    assert "QuickDraw" in text and "id None" in text, text
    assert os.path.exists(tmp_path / "a" / "index.html")


def test_validate_stays_bounded_on_a_forged_step_cap(built, capsys):
    """A re-signed ChangeIt shard with max_steps = 10^9 passes the checksums (integrity is not
    authenticity); validate's row checks stay bounded and name the value."""
    def huge_cap(rows):
        rows[0]["max_steps"] = 10 ** 9
    rewrite_shards(built, "ChangeIt", huge_cap)
    resign(built)
    assert buildfolder.folder_problems(built) == []  # the forgery passes the integrity check
    code, text = run_validate(built, capsys)
    assert_one_clear_line(code, text, "max_steps=1000000000")


# ---- the same pattern in the build's own clean-up: never through a link --------------------------

def test_temporary_names_are_what_publish_takes_for_a_leftover():
    """publish deletes a `.tmp-*` file of the target only when its name is one
    `fileio.temporary_name` makes (a user's `.tmp-notes.txt` stays): the two agree."""
    from proactivebench_builder.core import fileio
    from proactivebench_builder.core.layout import TEMPORARY_NAME

    for final in ("/x/QuickDraw/test-00000-of-00001.parquet", "/x/" + "a" * 250 + ".png"):
        assert TEMPORARY_NAME.match(os.path.basename(fileio.temporary_name(final)))
    assert not TEMPORARY_NAME.match(".tmp-notes.txt")


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
