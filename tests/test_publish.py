"""Publishing (`run_pipeline.py publish`): to a folder, loaded back with `datasets.load_dataset`;
to the Hub, with only the `HfApi` calls replaced by an in-memory fake repository, and with
Hugging Face offline mode on, so any call that escapes the fake fails loudly. A damaged record of
an earlier publish deletes nothing of the user's; a repo id the Hub cannot name is one line; a
shard that differs from build.json is refused."""
from __future__ import annotations

import errno
import glob
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import types
import zipfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub is imported, if it is not yet

import datasets  # noqa: E402
import huggingface_hub  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, constants  # noqa: E402
from huggingface_hub.errors import RepositoryNotFoundError  # noqa: E402
from huggingface_hub.hf_api import RepoFile, RepoFolder  # noqa: E402

from proactivebench_builder.pipeline import publish  # noqa: E402
from proactivebench_builder.pipeline.commands import publish as publish_command  # noqa: E402
from proactivebench_builder.pipeline.commands.publish import main  # noqa: E402

from conftest import RUN_PIPELINE, builds, file_bytes, file_text, read_json, s3_environment, s3_objects
from test_buildfolder import assert_one_clear_line, run_publish
from test_partial_rebuild import two_scenario_build  # noqa: F401 - a fixture
from test_validate import built_copy, swap_for_a_valid_other_shard  # noqa: F401 - a fixture

REPO = "someone/proactivebench-test"


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path):
    """Offline mode and a token for every test (the mode is read once at import, so it is set
    on the constants too); the token file points nowhere."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token-file"))
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")


@pytest.fixture(autouse=True)
def own_checks_only(monkeypatch):
    """Publishing is tested with the one check of build folders (core.buildfolder); the record
    contract of every row is the `validate` command's, with its own tests, and
    `test_the_validate_command_is_consulted` checks that the publish command calls it."""
    monkeypatch.setattr(publish_command, "record_contract", lambda folder: [])
    # the miniature build is marked as such; refusing it has its own test (test_regenerate.py)
    monkeypatch.setattr(publish_command, "stand_ins", lambda folder: {})


@pytest.fixture
def built(built_miniature, tmp_path) -> str:
    """A private copy of the shared build, free to modify."""
    copy = str(tmp_path / "built")
    shutil.copytree(built_miniature, copy)
    return copy


def card_configs(folder: str) -> list[dict]:
    return publish.read_card_configs(folder)


def shard_paths(folder: str) -> list[str]:
    return sorted(p for p in publish.list_files(folder) if p.endswith(".parquet"))


# ----------------------------------------------------------------------------- a fake Hub


class FakeHub:
    """An in-memory dataset repo behind the five HfApi methods publishing calls. Parquet and
    zip files are reported as LFS (with sha256), others by git blob id, as the Hub does."""

    def __init__(self, exists: bool = True):
        self.exists = exists
        self.files: dict[str, bytes] = {".gitattributes": b"*.parquet filter=lfs\n"}
        self.head = 0
        self.commits: list[dict] = []
        self.fail_upload_after: int | None = None  # files committed before upload_folder dies
        self.fail_commit = False

    def install(self, monkeypatch):
        """Replaces the five HfApi methods; each call is first bound to the real method's
        signature, so a call the real API would reject fails here too."""
        hub = self
        handlers = {
            "repo_info": lambda a: hub.repo_info(a["repo_id"], repo_type=a.get("repo_type")),
            "list_repo_tree": lambda a: hub.list_repo_tree(a),
            "create_commit": lambda a: hub.create_commit(
                a["operations"], commit_message=a["commit_message"],
                repo_type=a.get("repo_type"), parent_commit=a.get("parent_commit")),
            "upload_folder": lambda a: hub.upload_folder(
                repo_id=a["repo_id"], folder_path=a["folder_path"],
                commit_message=a.get("commit_message"), repo_type=a.get("repo_type")),
            "create_repo": lambda a: hub.create_repo(repo_type=a.get("repo_type"),
                                                     private=a.get("private")),
        }
        for name, handler in handlers.items():
            monkeypatch.setattr(huggingface_hub.HfApi, name, bound_to(name, handler))
        return self

    @property
    def sha(self) -> str:
        return f"{self.head:040x}"

    def repo_info(self, repo_id, repo_type=None, revision=None, **kw):
        assert repo_type == "dataset"
        if not self.exists:
            raise RepositoryNotFoundError("404 Repository Not Found", response=not_found(repo_id))
        return types.SimpleNamespace(sha=self.sha)

    def create_repo(self, repo_type=None, private=None, exist_ok=False, **kw):
        assert repo_type == "dataset"
        self.exists = True
        self.commits.append({"kind": "create_repo", "private": private})

    def list_repo_tree(self, args):
        assert args.get("recursive") is True and args.get("repo_type") == "dataset"
        entries = [RepoFolder(path="reports", oid="f" * 40)]
        for path, data in sorted(self.files.items()):
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            lfs = None
            if path.endswith((".parquet", ".zip")):
                lfs = {"size": len(data), "oid": hashlib.sha256(data).hexdigest(),
                       "pointerSize": 134}
            entries.append(RepoFile(path=path, size=len(data), oid=blob, lfs=lfs))
        return entries

    def create_commit(self, operations, commit_message=None, repo_type=None, parent_commit=None,
                      **kw):
        assert repo_type == "dataset"
        operations = list(operations)
        if parent_commit is not None and parent_commit != self.sha:
            raise RuntimeError("parent commit is not the head: concurrent push")
        if self.fail_commit == "500":  # the Hub's server error, its text spread over lines
            import requests

            response = requests.Response()
            response.status_code = 500
            raise huggingface_hub.errors.HfHubHTTPError(
                "500 Server Error: Internal Server Error for url: https://hub/api/commit\n"
                "Request ID: abc\n\nInternal Error - We're working hard to fix this",
                response=response)
        if self.fail_commit:
            raise ConnectionError("connection reset while committing")
        for op in operations:
            if isinstance(op, CommitOperationAdd):
                with open(op.path_or_fileobj, "rb") as handle:
                    self.files[op.path_in_repo] = handle.read()
            else:
                assert isinstance(op, CommitOperationDelete)
                del self.files[op.path_in_repo]
        self.head += 1
        self.commits.append({"kind": "create_commit", "message": commit_message,
                             "parent": parent_commit, "operations": operations})

    def upload_folder(self, repo_id=None, folder_path=None, commit_message=None, repo_type=None,
                      **kw):
        assert repo_type == "dataset" and repo_id == REPO
        names = sorted(os.path.relpath(os.path.join(d, n), folder_path).replace(os.sep, "/")
                       for d, _, ns in os.walk(folder_path) for n in ns)
        self.commits.append({"kind": "upload_folder", "message": commit_message, "files": names})
        for i, name in enumerate(names):
            if self.fail_upload_after is not None and i >= self.fail_upload_after:
                raise ConnectionError("connection reset during upload_folder")
            with open(os.path.join(folder_path, name), "rb") as handle:
                self.files[name] = handle.read()
            self.head += 1  # upload_folder commits in several parts


def bound_to(name: str, handler):
    """A stand-in for `HfApi.<name>` that checks the arguments against the real signature."""
    signature = inspect.signature(inspect.unwrap(getattr(huggingface_hub.HfApi, name)))

    def fake(api, *args, **kwargs):
        arguments = signature.bind(api, *args, **kwargs).arguments
        return handler(arguments)

    return fake


def not_found(repo_id: str):
    """The response a 404 error carries (huggingface_hub's HTTP client is httpx2)."""
    import httpx2

    url = f"https://huggingface.co/api/datasets/{repo_id}"
    return httpx2.Response(404, request=httpx2.Request("GET", url))


def local_bytes(folder: str) -> dict[str, bytes]:
    found = {}
    for path in publish.list_files(folder):
        with open(os.path.join(folder, path), "rb") as handle:
            found[path] = handle.read()
    return found


def expected_repo(built: str) -> dict[str, bytes]:
    """What a publish without the upstream export puts in the repo."""
    return {p: b for p, b in local_bytes(built).items()
            if p == "README.md" or p.endswith(".parquet") or p.startswith("reports/")}


# ----------------------------------------------------------------------------- folder target


def test_publish_to_a_folder_loads_back_the_same_rows(built, tmp_path):
    target = str(tmp_path / "published")
    assert main([built, "--to", target, "--with_upstream"]) == 0
    for config in card_configs(built):
        for entry in config["data_files"]:
            kwargs = dict(name=config["config_name"], split=entry["split"])
            ours = datasets.load_dataset(built, cache_dir=str(tmp_path / "c1"), **kwargs)
            theirs = datasets.load_dataset(target, cache_dir=str(tmp_path / "c2"), **kwargs)
            assert len(theirs) > 0
            assert theirs.data.table.equals(ours.data.table)
    assert not [p for p in os.listdir(target) if p.startswith(".tmp-")]


def test_a_second_publish_into_the_same_folder_is_refused_in_one_line(built, tmp_path, capsys):
    """Two publishes into one folder at once would each take the other's temporary files for
    leftovers: the second is refused before it reads the folder (exit 3, naming the first);
    once the first ends, its lock is gone and the folder holds only what a publish writes."""
    import subprocess
    import sys

    target = tmp_path / "published"
    target.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from proactivebench_builder.core.locks import "
         "ExclusiveLock; lock = ExclusiveLock(sys.argv[1], 'x').__enter__(); print('held', "
         "flush=True); time.sleep(60)", str(target / publish.TARGET_LOCK)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main([built, "--to", str(target)]) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("PUBLISH FAILED: ") and "another publish: pid" in err[-1]
        assert os.listdir(target) == [publish.TARGET_LOCK]  # nothing written by the second
        assert main([built, "--to", str(target), "--dry_run"]) == 0  # a dry run takes no lock
    finally:
        holder.kill()
        holder.wait()
    assert main([built, "--to", str(target)]) == 0
    assert publish.TARGET_LOCK not in os.listdir(target)


def test_upstream_archives_unzip_to_the_export(built, tmp_path):
    target = str(tmp_path / "published")
    assert main([built, "--to", target, "--with_upstream"]) == 0
    unpacked = tmp_path / "unpacked"
    for name in sorted(os.listdir(os.path.join(target, "test"))):
        path = os.path.join(target, "test", name)
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                assert names == sorted(names)
                assert {i.date_time for i in archive.infolist()} == {publish.ZIP_EPOCH}
                archive.extractall(unpacked)
        else:
            shutil.copy(path, unpacked / name)
    assert local_bytes(str(unpacked)) == local_bytes(os.path.join(built, "upstream"))


def test_with_upstream_on_a_build_without_the_export_says_how_to_make_it(built, tmp_path,
                                                                        capsys):
    """A build writes the export only when asked: publishing it is refused in one line naming
    the flag that makes it, before anything is written."""
    import json

    shutil.rmtree(os.path.join(built, "upstream"))
    path = os.path.join(built, "reports", "build.json")
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    report.update(upstream_export=False, upstream_files=[])
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    assert main([built, "--to", str(tmp_path / "published"), "--with_upstream"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--upstream_export" in err[0], err
    assert not os.path.exists(tmp_path / "published")


def test_archives_are_byte_identical_across_runs(built, tmp_path):
    first = publish.upstream_files(built, str(tmp_path / "s1"), "test", 10 ** 9)
    second = publish.upstream_files(built, str(tmp_path / "s2"), "test", 10 ** 9)
    assert [(f.path, f.sha256) for f in first] == [(f.path, f.sha256) for f in second]


def test_large_image_folders_are_split_into_parts(built, tmp_path):
    files = publish.upstream_files(built, str(tmp_path / "s"), "test", 50_000)
    archives = [f.path for f in files if f.kind == "upstream-archive"]
    assert any("-00001-of-" in p for p in archives)
    members = []
    for f in files:
        if f.kind == "upstream-archive":
            with zipfile.ZipFile(f.source) as archive:
                members += archive.namelist()
    images = [p for p in publish.list_files(os.path.join(built, "upstream")) if "/" in p]
    assert sorted(members) == images


def test_rerun_writes_nothing_and_stale_files_are_removed(built, tmp_path, capsys):
    target = str(tmp_path / "published")
    assert main([built, "--to", target]) == 0
    stale = os.path.join(target, "QuickDraw", "test-00001-of-00002.parquet")
    shutil.copy(os.path.join(target, shard_paths(target)[0]), stale)
    # a temporary file of an interrupted publish, named as fileio.temporary_name names them
    leftover = os.path.join(target, "QuickDraw",
                            ".tmp-0123456789ab-1-0-test-00000-of-00001.parquet")
    open(leftover, "wb").write(b"half a file")
    os.remove(os.path.join(target, shard_paths(built)[0]))  # as if interrupted before it
    capsys.readouterr()
    assert main([built, "--to", target]) == 0
    out = capsys.readouterr().out
    assert "upload 1 files" in out and "delete 2 stale" in out
    assert not os.path.exists(stale) and not os.path.exists(leftover)
    published = local_bytes(target)
    assert read_json(os.path.join(target, publish.MANIFEST))["files"] == sorted(
        expected_repo(built))  # what the publish wrote, for the next one to know
    published.pop(publish.MANIFEST)
    assert published == expected_repo(built)
    assert main([built, "--to", target]) == 0
    assert "nothing to do" in capsys.readouterr().out


def add_train_split(built: str) -> None:
    """A `default` config with a train split under data/, as the train builder writes it (its
    schema is its own: only the test and unfiltered splits follow the record contract)."""
    os.makedirs(os.path.join(built, "data"))
    pq.write_table(pa.table({"key": ["a", "b"], "prompt": [["x"], ["y"]]}),
                   os.path.join(built, "data", "train-00000-of-00001.parquet"))
    text = file_text(os.path.join(built, "README.md"))
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    meta["configs"].insert(0, {"config_name": "default", "data_files": [
        {"split": "train", "path": "data/train-*.parquet"}]})
    open(os.path.join(built, "README.md"), "w", encoding="utf-8").write(
        "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n" + body)


def test_a_train_split_is_published_when_present(built, tmp_path):
    if not any(c["config_name"] == "default" for c in card_configs(built)):
        add_train_split(built)
    target = str(tmp_path / "published")
    assert main([built, "--to", target]) == 0
    assert [p for p in publish.list_files(target) if p.startswith("data/train-")]
    kwargs = dict(name="default", split="train")
    ours = datasets.load_dataset(built, cache_dir=str(tmp_path / "c1"), **kwargs)
    theirs = datasets.load_dataset(target, cache_dir=str(tmp_path / "c2"), **kwargs)
    assert len(theirs) > 0 and theirs.data.table.equals(ours.data.table)


def test_the_validate_command_is_consulted(built, tmp_path, monkeypatch, capsys):
    validate_command = pytest.importorskip("proactivebench_builder.pipeline.commands.validate")
    monkeypatch.undo()  # the real record_contract, which calls validate_command
    seen = []
    monkeypatch.setattr(validate_command, "validate_folder",
                        lambda path, **_: seen.append(path) or ["row 3: answer not in categories"])
    assert main([built, "--to", str(tmp_path / "published")]) == 2
    assert seen == [built] and "answer not in categories" in capsys.readouterr().err


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("damage, expected", [
    (lambda d: os.remove(os.path.join(d, "reports", "build.json")), "reports/build.json"),
    (lambda d: os.remove(os.path.join(d, "README.md")), "README.md"),
    (lambda d: open(os.path.join(d, "README.md"), "w").write("# no front matter\n"),
     "front matter"),
    (lambda d: open(os.path.join(d, shard_paths(d)[0]), "wb").write(b"PAR1 truncated"),
     "changed or mixed output"),
    (lambda d: [os.remove(os.path.join(d, p)) for p in shard_paths(d) if p.startswith("Quick")],
     "missing (listed in reports/build.json)"),
    (lambda d: pq.write_table(pa.table({"id": [1]}), os.path.join(d, "QuickDraw", "x.parquet")),
     "QuickDraw/x.parquet: a Parquet file reports/build.json does not list"),
])
def test_an_incomplete_folder_is_refused(built, tmp_path, capsys, damage, expected):
    damage(built)
    assert main([built, "--to", str(tmp_path / "published")]) == 2
    err = capsys.readouterr().err
    assert "PUBLISH FAILED" in err and "not ready to publish" in err and expected in err
    assert not os.path.exists(tmp_path / "published")


def test_missing_columns_and_row_counts_are_caught(built, tmp_path, monkeypatch, capsys):
    monkeypatch.undo()  # the record contract too: the publish command runs `validate`'s check
    path = os.path.join(built, shard_paths(built)[0])
    pq.write_table(pq.read_table(path).drop_columns(["prompt"]).slice(0, 1), path)
    assert main([built, "--to", str(tmp_path / "published")]) == 2
    err = capsys.readouterr().err
    assert "reports/build.json says" in err and "changed or mixed output" in err


# ----------------------------------------------------------------------------- Hub target


def test_dry_run_prints_the_plan_and_changes_nothing(built, monkeypatch, capsys):
    hub = FakeHub().install(monkeypatch)
    repo = expected_repo(built)
    hub.files["README.md"] = repo["README.md"]  # small file: compared by git blob id
    some_shard = shard_paths(built)[0]
    hub.files[some_shard] = repo[some_shard]  # LFS file: compared by sha256
    hub.files["MVP-N/test-00003-of-00004.parquet"] = b"old shard"
    assert main([built, "--repo_id", REPO, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert hub.commits == []
    assert f"Hugging Face dataset repo {REPO}" in out and "one atomic commit" in out
    assert "commit message: Publish ProactiveBench build" in out
    for path, data in repo.items():
        line = next(l for l in out.splitlines() if f" {path} " in l)
        assert f"{len(data):,d} B" in line and hashlib.sha256(data).hexdigest() in line
        assert line.strip().startswith("skip" if path in ("README.md", some_shard) else "upload")
    assert "delete MVP-N/test-00003-of-00004.parquet" in " ".join(out.split())
    assert ".gitattributes" not in out


def test_dry_run_needs_no_token(built, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN")
    FakeHub().install(monkeypatch)
    assert main([built, "--repo_id", REPO, "--dry-run"]) == 0


def test_one_atomic_commit_with_every_file_and_the_stale_deletions(built, monkeypatch):
    hub = FakeHub().install(monkeypatch)
    hub.files["QuickDraw/test-00001-of-00002.parquet"] = b"stale"
    hub.files["reports/old.json"] = b"{}"
    hub.files["notes.md"] = b"a file the user added"
    parent = hub.sha
    assert main([built, "--repo_id", REPO, "--commit_message", "v1"]) == 0
    [commit] = hub.commits
    assert commit["kind"] == "create_commit" and commit["message"] == "v1"
    assert commit["parent"] == parent
    adds = {op.path_in_repo for op in commit["operations"] if isinstance(op, CommitOperationAdd)}
    deletes = {op.path_in_repo for op in commit["operations"]
               if isinstance(op, CommitOperationDelete)}
    assert adds == set(expected_repo(built))
    assert deletes == {"QuickDraw/test-00001-of-00002.parquet", "reports/old.json"}
    assert {p: b for p, b in hub.files.items() if p not in (".gitattributes", "notes.md")} == \
        expected_repo(built)


def test_upstream_archives_go_under_test(built, monkeypatch):
    hub = FakeHub().install(monkeypatch)
    assert main([built, "--repo_id", REPO, "--with_upstream"]) == 0
    upstream = sorted(p for p in hub.files if p.startswith("test/"))
    report = read_json(os.path.join(built, "reports", "build.json"))
    configs = sorted(e["config"] for e in report["scenarios"].values() if e["config"])
    assert [p for p in upstream if p.endswith(".jsonl")] == \
        [f"test/{c}_preprocessed.jsonl" for c in configs]
    assert [p for p in upstream if p.endswith(".zip")]
    assert len(hub.commits) == 1


def test_resume_after_a_failed_multi_commit_upload(built, monkeypatch, capsys):
    hub = FakeHub().install(monkeypatch)
    hub.fail_upload_after = 3
    args = [built, "--repo_id", REPO, "--max_commit_files", "2"]
    assert main(args) == 2
    assert "Re-run the same command to resume" in capsys.readouterr().err
    [first] = hub.commits
    assert first["kind"] == "upload_folder" and "README.md" not in first["files"]
    assert "README.md" not in hub.files  # the card is committed last, after every shard

    hub.fail_upload_after = None
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    second, card = hub.commits[1:]
    assert set(second["files"]).isdisjoint(first["files"][:3])  # only what was missing
    assert sorted(first["files"][:3] + second["files"]) == first["files"]
    assert card["kind"] == "create_commit"
    assert [op.path_in_repo for op in card["operations"]] == ["README.md"]
    assert "skip 3 already on the target" in out
    assert {p: b for p, b in hub.files.items() if p != ".gitattributes"} == expected_repo(built)

    assert main(args) == 0
    assert len(hub.commits) == 3 and "nothing to do" in capsys.readouterr().out


def test_resume_after_a_failed_atomic_commit(built, monkeypatch, capsys):
    hub = FakeHub().install(monkeypatch)
    hub.fail_commit = True
    assert main([built, "--repo_id", REPO]) == 2
    assert "Re-run the same command to resume" in capsys.readouterr().err
    assert set(hub.files) == {".gitattributes"}  # atomic: nothing landed
    hub.fail_commit = False
    assert main([built, "--repo_id", REPO]) == 0
    assert {p: b for p, b in hub.files.items() if p != ".gitattributes"} == expected_repo(built)


def test_a_hub_error_spread_over_lines_is_one_failed_line_last(built, monkeypatch, capsys):
    """The client's text of a server error holds newlines: the last line a log keeps is the
    whole message, opened by PUBLISH FAILED, naming the repo and how to resume."""
    hub = FakeHub().install(monkeypatch)
    hub.fail_commit = "500"
    assert main([built, "--repo_id", REPO]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1].startswith("PUBLISH FAILED: ") and REPO in lines[-1], lines
    assert "Internal Error - We're working hard" in lines[-1]
    assert "Re-run the same command to resume" in lines[-1]
    assert not any("Request ID" in line for line in lines[:-1]), lines


def test_a_hub_warning_is_shown_once(capsys):
    """huggingface_hub prints its warnings (a 429 and its retry) through a handler of its
    own; Beam's root handler would print each a second time."""
    import logging

    import apache_beam  # noqa: F401 - installs the root handler a build process has
    from proactivebench_builder.core.cli import quiet_store_clients

    quiet_store_clients()
    huggingface_hub.utils.logging.get_logger("huggingface_hub.utils._http").warning(
        "HTTP Error 429 thrown while requesting PUT https://hub/api/x")
    err = capsys.readouterr().err
    assert err.count("HTTP Error 429") <= 1, err
    assert logging.getLogger("huggingface_hub").propagate is False


def test_missing_repo_needs_create(built, monkeypatch, capsys):
    hub = FakeHub(exists=False).install(monkeypatch)
    assert main([built, "--repo_id", REPO]) == 2
    err = capsys.readouterr().err
    assert f"dataset repo {REPO} does not exist" in err and "--create" in err
    assert hub.commits == []
    assert main([built, "--repo_id", REPO, "--create", "--private", "--dry-run"]) == 0
    assert "would be created" in capsys.readouterr().out and hub.commits == []
    assert main([built, "--repo_id", REPO, "--create", "--private"]) == 0
    assert [c["kind"] for c in hub.commits] == ["create_repo", "create_commit"]
    assert hub.commits[0]["private"] is True


def test_no_token_is_a_clear_error(built, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN")
    hub = FakeHub().install(monkeypatch)
    assert main([built, "--repo_id", REPO]) == 2
    err = capsys.readouterr().err
    assert "no Hugging Face token" in err and "hf auth login" in err
    assert hub.commits == []


def test_offline_mode_is_a_clear_error(built, capsys):
    # Nothing is replaced here: the real HfApi refuses to go online.
    assert main([built, "--repo_id", REPO]) == 2
    err = capsys.readouterr().err
    assert "offline mode" in err and "HF_HUB_OFFLINE" in err


def test_planned_files_carry_their_size_and_digests(built, tmp_path):
    files = publish.collect_files(built, str(tmp_path / "s"))
    assert {f.path for f in files} == set(expected_repo(built))
    for f in files:
        data = file_bytes(os.path.join(built, f.path))
        assert f.size == len(data) and f.sha256 == hashlib.sha256(data).hexdigest()
        assert f.git_sha1 == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_publish_to_any_fsspec_url(built, capsys):
    import fsspec

    url = f"memory://publish-test-{os.getpid()}/proactivebench"
    assert main([built, "--to", url]) == 0
    fs, root = fsspec.core.url_to_fs(url)
    published = {os.path.relpath(p, root): fs.cat_file(p) for p in fs.find(root)}
    assert published.pop(publish.MANIFEST)  # what the publish wrote (a folder target's record)
    assert published == expected_repo(built)
    capsys.readouterr()
    assert main([built, "--to", url, "--dry-run"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    fs.rm(root, recursive=True)


# ----------------------------------------------------------------------------- progress


def said_by_publish(stderr_at_calls) -> list[str]:
    """The phase lines publish wrote on stderr, without their sizes."""
    return [line.removeprefix("run_pipeline.py publish: ").split(" (")[0]
            for line in stderr_at_calls.lines() if line.startswith("run_pipeline.py publish: ")]


def last_said_before(stderr_at_calls, name: str) -> str:
    return stderr_at_calls.at_first_call[name].splitlines()[-1].removeprefix(
        "run_pipeline.py publish: ").split(" (")[0]


def test_a_folder_publish_says_each_phase_before_its_work(built, tmp_path, stderr_at_calls):
    for name in ("built_file", "write_deterministic_zip"):
        stderr_at_calls.watch(publish, name)
    stderr_at_calls.watch(publish.FsspecTarget, "write_temporary")
    target = str(tmp_path / "published")
    assert main([built, "--to", target, "--with_upstream"]) == 0
    files = len(publish.built_files(built))
    images = sum("/" in name for name in publish.exported_files(built))
    said = said_by_publish(stderr_at_calls)
    assert re.fullmatch(r"checking the sha256 of \d+ shards and reports", said[0])
    assert said[1:] == [
        f"checking the sha256 of {len(publish.exported_files(built))} exported files",
        "hashing the files to publish",
        f"packing the upstream export's {images:,} images into zips",
        f"writing {len(publish.list_files(target))} files into the target"]
    assert last_said_before(stderr_at_calls, "built_file") == said[2]
    assert last_said_before(stderr_at_calls, "write_deterministic_zip") == said[3]
    assert last_said_before(stderr_at_calls, "write_temporary") == said[4]

    assert main([built, "--to", target, "--dry_run"]) == 0
    assert re.fullmatch(r"comparing the \d+ files already in the target",
                        said_by_publish(stderr_at_calls)[-1])
    plan, stderr_at_calls.out = stderr_at_calls.out, ""
    assert main([built, "--to", target, "--dry_run", "--no_progress"]) == 0
    stderr_at_calls.read()
    assert plan.endswith(stderr_at_calls.out)  # stdout, what scripts read: the same


def test_a_hub_publish_says_each_phase_before_its_call(built, monkeypatch, stderr_at_calls):
    FakeHub().install(monkeypatch)
    for name in ("head_commit", "remote_files", "commit"):
        stderr_at_calls.watch(publish.HubClient, name)
    assert main([built, "--repo_id", REPO]) == 0
    files = len(publish.built_files(built))
    assert said_by_publish(stderr_at_calls)[1:] == [
        f"asking the Hub for {REPO}", "hashing the files to publish",
        f"listing the files of {REPO} on the Hub", f"uploading {files} files"]
    assert last_said_before(stderr_at_calls, "head_commit") == f"asking the Hub for {REPO}"
    assert last_said_before(stderr_at_calls, "remote_files") == \
        f"listing the files of {REPO} on the Hub"
    assert last_said_before(stderr_at_calls, "commit") == f"uploading {files} files"


# ---- a remote store (S3, served by moto) that fails mid-publish ------------------------------

def publish_to_s3(folder: str, url: str, port: int) -> tuple[int, list[str]]:
    """`publish FOLDER --to URL` in a process of its own, through the endpoint at `port`, with
    the S3 client's retries at one attempt (a dead endpoint then fails at once)."""
    import subprocess
    import sys

    env = dict(os.environ, **s3_environment(port))
    run_pipeline = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "run_pipeline.py")
    done = subprocess.run([sys.executable, run_pipeline, "publish", folder, "--to", url,
                           "--no_progress"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


@pytest.mark.build
def test_a_store_that_dies_mid_publish_is_one_line_and_a_rerun_converges(built, s3_port):
    """The store's connections are cut after half the bytes: one PUBLISH FAILED line, last,
    naming the store and the cause and how to resume; no file under its final name that is not
    whole, no card; once the store is back, the same command converges to an uninterrupted
    publish's objects, byte for byte, leaving no temporary object."""
    from relay import Relay

    assert publish_to_s3(built, "s3://bucket/whole", s3_port)[0] == 0
    whole = s3_objects(s3_port, "whole/")
    relay = Relay(s3_port, budget=sum(len(b) for b in whole.values()) // 2)
    try:
        status, lines = publish_to_s3(built, "s3://bucket/cut", relay.port)
        assert status == 1 and lines[-1].startswith("PUBLISH FAILED: folder s3://bucket/cut: "
                                                    "the store failed: "), lines
        assert "Re-run the same command to resume" in lines[-1]
        assert not [line for line in lines[:-1] if not line.startswith("note: ")], lines
        cut = s3_objects(s3_port, "cut/")
        final = {k: v for k, v in cut.items() if not os.path.basename(k).startswith(".tmp-")}
        assert "README.md" not in final  # the card goes last: nothing reads as complete
        assert all(whole[k] == v for k, v in final.items())
        relay.revive()
        status, lines = publish_to_s3(built, "s3://bucket/cut", relay.port)
        assert status == 0, lines
    finally:
        relay.close()
    assert s3_objects(s3_port, "cut/") == whole


def publish_to(folder: str, target: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, RUN_PIPELINE, "publish", folder, "--to", target],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
@builds
def published(two_scenario_build, tmp_path_factory):
    _, folder = two_scenario_build
    target = str(tmp_path_factory.mktemp("published") / "target")
    result = publish_to(folder, target)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder, target


def _record_fifo(path: str) -> None:
    os.remove(path)
    os.mkfifo(path)


def _record_bytes(data: bytes):
    def write(path: str) -> None:
        with open(path, "wb") as handle:
            handle.write(data)
    return write


@pytest.mark.parametrize("damage", [
    _record_fifo, _record_bytes(b"[1]"), _record_bytes(b"[" * 100000),
    _record_bytes(b'{"files": ["../outside.txt", "/etc/hostname", 5]}'),
    _record_bytes(b'{"files": ["../outside.txt", "/tmp/x"]}'),
], ids=["fifo", "a-list", "nested", "not-paths", "paths-leading-out"])
def test_a_damaged_publish_record_in_the_target_deletes_nothing_of_the_users(
        published, tmp_path, damage):
    """`.proactivebench-publish.json` in a folder target is read as untrusted: a FIFO, another
    shape or paths leading out are a note (only files the card's globs match are then stale);
    nothing outside the target and none of the user's own files is deleted."""
    from proactivebench_builder.pipeline.publish import MANIFEST

    folder, first = published
    target = tmp_path / "target"
    shutil.copytree(first, target)
    (target / "mydata").mkdir()
    (target / "mydata" / "precious.txt").write_text("mine")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the target's")
    damage(str(target / MANIFEST))
    result = publish_to(folder, str(target))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert outside.read_text() == "not the target's"
    assert (target / "mydata" / "precious.txt").read_text() == "mine"
    assert json.loads((target / MANIFEST).read_text())["files"]


def test_a_repo_id_the_hub_cannot_name_is_one_line(two_scenario_build, tmp_path):
    _, folder = two_scenario_build
    result = subprocess.run(
        [sys.executable, RUN_PIPELINE, "publish", folder, "--repo_id", "a/b/c", "--dry-run",
         "--allow_stand_ins"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_publish_refuses_a_shard_that_differs_from_build_json(built_copy, tmp_path):
    from proactivebench_builder.pipeline import publish

    changed = swap_for_a_valid_other_shard(built_copy)
    with pytest.raises(publish.PublishError, match="sha256"):
        publish.publish(built_copy, publish.FsspecTarget(str(tmp_path / "target")),
                        dry_run=True)
    assert changed


# ---- publish targets hold the user's files too -------------------------------------------------

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
