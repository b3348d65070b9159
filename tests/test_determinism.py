"""The same inputs give byte-identical shards: across runs, and between the default local run (a
worker process per core), two worker threads and one in-memory worker (whose bundles and
processing order differ)."""
from __future__ import annotations

import os

import pytest

from conftest import WORKER_PROCESSES, builds, file_bytes, run, shard_files


def _compare(a: str, b: str) -> None:
    first, second = shard_files(a), shard_files(b)
    assert first and sorted(first) == sorted(second)
    for name in first:
        assert first[name] == second[name], f"{name} differs between builds"
    for report in ("dead_letters.jsonl",):
        assert file_bytes(os.path.join(a, "reports", report)) == \
            file_bytes(os.path.join(b, "reports", report))
    for folder in ("upstream",):
        for root, _, names in os.walk(os.path.join(a, folder)):
            for name in names:
                path = os.path.join(root, name)
                twin = os.path.join(b, os.path.relpath(path, a))
                assert file_bytes(path) == file_bytes(twin), path


@pytest.fixture(scope="module")
@builds
def built_in_worker_processes(tmp_path_factory, miniature_root) -> str:
    """Every scenario built, with the upstream export, as a default local run builds: one
    worker process per core."""
    output = str(tmp_path_factory.mktemp("worker_processes") / "proactivebench")
    run(output, miniature_root, "all", "--upstream_export", WORKER_PROCESSES)
    return output


def test_two_worker_threads_match_the_default_worker_processes(tmp_path, miniature_root,
                                                                built_in_worker_processes):
    threaded = str(tmp_path / "threaded")
    run(threaded, miniature_root, "all", "--upstream_export", "--direct_num_workers=2",
        "--direct_running_mode=multi_threading")
    _compare(built_in_worker_processes, threaded)


def test_one_in_memory_worker_matches_the_default_worker_processes(built_in_worker_processes,
                                                                   built_miniature):
    """built_miniature is built in this process, by one in-memory worker (conftest.run)."""
    _compare(built_in_worker_processes, built_miniature)


def test_rebuild_in_place_removes_stale_shards(tmp_path, miniature_root):
    out = tmp_path / "out"
    run(str(out), miniature_root, "quickdraw")
    stale = out / "QuickDraw" / "test-00003-of-00004.parquet"
    stale.write_bytes(b"left over by an older build")
    run(str(out), miniature_root, "quickdraw")
    assert not stale.exists()
    assert not [p for p in out.rglob(".tmp-*")], "no temporary files survive a build"


def test_a_different_seed_changes_choices_not_membership(tmp_path, miniature_root):
    import datasets

    out = str(tmp_path / "seed1")
    run(out, miniature_root, "imagenet_c", "--seed=1")
    a = datasets.load_dataset(out, name="ImageNet-C", split="test")
    assert len(a) == 20
