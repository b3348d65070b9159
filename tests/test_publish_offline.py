"""Publishing with no network: `--dry-run` still plans every file (path, size, sha256) and says in
one line what it could not compare with the remote; a real publish is one clear error line. The
Hub is made unreachable two ways: an endpoint nothing listens on (HF_ENDPOINT=http://127.0.0.1:9,
connection refused) and Hugging Face offline mode. Nothing is replaced inside huggingface_hub."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest
from huggingface_hub import constants

from proactivebench_builder.pipeline import publish
from proactivebench_builder.pipeline.commands import publish as publish_command
from proactivebench_builder.pipeline.commands.publish import main

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, connection refused
REPO = "someone/proactivebench-offline"


@pytest.fixture
def built(built_miniature, tmp_path) -> str:
    copy = str(tmp_path / "built")
    shutil.copytree(built_miniature, copy)
    return copy


@pytest.fixture(params=["unreachable endpoint", "offline mode"])
def no_network(request, monkeypatch, tmp_path):
    # the record contract has its own tests (test_validate.py)
    monkeypatch.setattr(publish_command, "record_contract", lambda folder: [])
    monkeypatch.setattr(publish_command, "stand_ins", lambda folder: {})  # test_regenerate.py
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token-file"))
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    if request.param == "offline mode":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE)
        monkeypatch.setattr(constants, "ENDPOINT", UNREACHABLE)
    return request.param


def test_dry_run_plans_every_file_offline(built, no_network, capsys):
    assert main([built, "--repo_id", REPO, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    notes = [line for line in out.splitlines() if line.startswith("remote not contacted")]
    assert len(notes) == 1 and "cannot tell which files are already there" in notes[0]
    for f in publish.built_files(built):
        with open(os.path.join(built, f.path), "rb") as handle:
            data = handle.read()
        line = next(l for l in out.splitlines() if f" {f.path} " in l)
        assert line.strip().startswith("upload")
        assert f"{len(data):,d} B" in line and hashlib.sha256(data).hexdigest() in line
    assert "dry run: nothing was changed" in out


def test_publish_offline_is_one_clear_line(built, no_network, capsys):
    assert main([built, "--repo_id", REPO, "--no_progress"]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("PUBLISH FAILED: cannot read dataset repo")
    assert "Traceback" not in err
    expected = "offline mode" if no_network == "offline mode" else f"{UNREACHABLE} cannot be reached"
    assert expected in lines[0]


def test_a_network_error_is_recognised_whatever_the_http_client():
    class TransportError(Exception):
        pass

    TransportError.__module__ = "httpx2"

    class ConnectError(TransportError):
        pass

    assert publish.is_network_error(ConnectError("refused"))
    assert publish.is_network_error(ConnectionResetError())
    assert not publish.is_network_error(ValueError("a bug"))
