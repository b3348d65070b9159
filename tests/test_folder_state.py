"""Fetch's own records of a source folder (fetch/folder_state.py): a damaged state file is
ignored and everything verified from its bytes; a record of a file or an extraction made from
another URL is not trusted. Served by test_download's loopback server."""
from __future__ import annotations

import json
import os

import pytest

from test_download import (  # noqa: F401 (fake: a fixture)
    BODY, fake, fetch_one, open_fifo_once, pins, run_with_deadline, serve)
from test_extract import info, tar_bytes
from proactivebench_builder.fetch import download, folder_state
from proactivebench_builder.fetch.download import STATE_DIR, Downloader, FileSpec


@pytest.mark.parametrize("make", ["fifo", "nested", "huge", "list"])
def test_a_damaged_state_file_is_ignored_and_everything_verified_from_its_bytes(
        fake, tmp_path, make):
    fake.routes["/f"] = serve(BODY)
    state = tmp_path / STATE_DIR / "state.json"
    state.parent.mkdir()
    if make == "fifo":
        os.mkfifo(state)
    elif make == "nested":
        state.write_text("[" * 100_000 + "]" * 100_000)
    elif make == "huge":
        with open(state, "wb") as handle:
            handle.truncate(folder_state.STATE_LIMIT + 1)  # sparse
    else:
        state.write_text("[1, 2]")
    outcome = run_with_deadline(
        lambda: fetch_one(tmp_path, FileSpec(url=fake.url("/f"), path="f", **pins(BODY))),
        20, open_fifo_once(state) if make == "fifo" else lambda: None)
    assert outcome.status == "fetched", outcome.message
    assert json.loads(state.read_text())["files"]["f"]["size"] == len(BODY)


def test_a_file_in_place_from_another_url_is_not_trusted_by_its_record(fake, tmp_path):
    """An unpinned file (record-only) whose manifest now names another URL (e.g. ChangeIt's
    archive at another commit) is fetched again, not trusted for its size and time."""
    fake.routes["/v1"] = serve(b"version one")  # the same size: the server's size (all that
    fake.routes["/v2"] = serve(b"version two")  # checks an unpinned file) cannot tell them
    assert fetch_one(tmp_path, FileSpec(url=fake.url("/v1"), path="f")).status == "fetched"
    outcome = fetch_one(tmp_path, FileSpec(url=fake.url("/v2"), path="f"))
    assert outcome.status == "fetched", outcome
    assert (tmp_path / "f").read_bytes() == b"version two"


def test_an_extraction_remembered_for_another_url_is_not_trusted(fake, tmp_path):
    def archive(text: bytes) -> bytes:
        return tar_bytes(info("content.txt", text))
    fake.routes["/v1.tar"] = serve(archive(b"one"))
    fake.routes["/v2.tar"] = serve(archive(b"two"))
    for version, text in (("v1", b"one"), ("v2", b"two")):
        spec = FileSpec(url=fake.url(f"/{version}.tar"), path="a.tar",
                        extract=download.ExtractSpec())
        outcome = Downloader(retries=0, remove_archives=True).fetch(str(tmp_path), spec)
        assert outcome.status == "fetched", outcome
        assert (tmp_path / "content.txt").read_bytes() == text
