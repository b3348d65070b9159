"""The runtime around the environments: the OpenAI-compatible adapter against a loopback
chat-completions server (timeout and 5xx retries included), OEG judge messages and parsing,
metrics, loading (Parquet, the upstream JSONL layout, a Hub dataset of other rows refused row by
row), model specs, a model endpoint reached through the environment's proxy, and the evaluate
command (resume, first-round predictions schema, a --data folder that is not an intact build
refused in one line)."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import REPO, file_text, read_jsonl, run
from test_validate import built_copy, swap_for_a_valid_other_shard  # noqa: F401 - a fixture
from proactivebench_builder.core import buildfolder
from proactivebench_builder.runtime import cli, loading, metrics, open_ended
from proactivebench_builder.runtime.model_specs import load_model
from proactivebench_builder.runtime.models import ModelError, OpenAIChatModel
from proactivebench_builder.runtime.predictions_schema import FIELDS, SCHEMA_VERSION

# ---- loopback chat-completions server --------------------------------------------------------


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.script: list = []      # per request: "ok" | "slow" | an HTTP status to fail with
        self.requests: list = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class ChatHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "body": body,
                                     "auth": self.headers.get("Authorization")})
        step = self.server.script.pop(0) if self.server.script else "ok"
        if step == "slow":
            time.sleep(1.0)
        if isinstance(step, int):
            self.send_response(step)
            self.end_headers()
            return
        reply = {"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "finish_reason": "stop",
             "message": {"role": "assistant", "content": f"reply {len(self.server.requests)}"}}]}
        data = json.dumps(reply).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass                         # the client gave up (timeout test)


@pytest.fixture
def server():
    srv = ChatServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _messages():
    return [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (4, 3))},
                                         {"type": "text", "text": "What is it?"}]}]


def test_openai_adapter_sends_data_url_images(server):
    model = OpenAIChatModel("m", base_url=server.base_url, api_key="k", backoff=0.0)
    assert model.generate(_messages()) == "reply 1"
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer k"
    parts = request["body"]["messages"][0]["content"]
    assert parts[0]["type"] == "image_url"
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert parts[1] == {"type": "text", "text": "What is it?"}
    assert request["body"]["model"] == "m" and request["body"]["temperature"] == 0.0


def test_openai_adapter_retries_5xx(server):
    server.script = [500, 503, "ok"]
    model = OpenAIChatModel("m", base_url=server.base_url, backoff=0.0, max_retries=3)
    assert model.generate(_messages()) == "reply 3"
    assert len(server.requests) == 3


def test_openai_adapter_retries_a_timeout(server):
    server.script = ["slow", "ok"]
    model = OpenAIChatModel("m", base_url=server.base_url, timeout=0.3, backoff=0.0)
    assert model.generate(_messages()) == "reply 2"


def test_openai_adapter_gives_up_and_does_not_retry_4xx(server):
    server.script = [500, 500]
    with pytest.raises(ModelError):
        OpenAIChatModel("m", base_url=server.base_url, backoff=0.0,
                        max_retries=1).generate(_messages())
    server.script = [400]
    before = len(server.requests)
    with pytest.raises(ModelError):
        OpenAIChatModel("m", base_url=server.base_url, backoff=0.0).generate(_messages())
    assert len(server.requests) == before + 1


def test_openai_adapter_bounds_concurrency(server):
    server.script = ["slow"] * 4
    model = OpenAIChatModel("m", base_url=server.base_url, timeout=5, max_concurrency=1)
    active, peak = [0], [0]
    original = model._post

    def counting(payload):
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        try:
            return original(payload)
        finally:
            active[0] -= 1
    model._post = counting
    threads = [threading.Thread(target=model.generate, args=(_messages(),)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1


def test_model_specs():
    assert load_model("oracle").name == "oracle"
    assert load_model("random:5").seed == 5
    assert load_model("openai:q@http://h:1/v1").url == "http://h:1/v1/chat/completions"
    with pytest.raises(ValueError):
        load_model("nonsense")


# ---- open-ended judge ---------------------------------------------------------------------------


def test_judge_messages_and_parsing():
    valid = "Wait for the occlusion to disappear, Rewind the video, Move the camera, Dog."
    messages = open_ended.judge_messages("Q?", valid, "Let's wait.")
    assert messages[0]["role"] == "system" and "0s and 1s" in messages[0]["content"]
    assert ("### Correct Answers (List):\n['Wait for the occlusion to disappear', "
            "'Rewind the video', 'Move the camera', 'Dog']") in messages[1]["content"]
    parse = open_ended.parse_judge_prediction
    vsod = "OcclusionDataSet-MM20"
    assert parse(valid, "thinking 1, 0\n1, 0, 0, 0", vsod) == {
        "proactive_suggestion": 1, "category_prediction": 0, "aggregate": 1}
    assert parse(valid, "0,0,0,1", vsod)["category_prediction"] == 1
    assert parse(valid, "1, 0", vsod)["aggregate"] == 0            # wrong length
    assert parse(valid, "no verdict", vsod)["aggregate"] == 0
    assert open_ended.strip_thinking("<think>1,1</think>\n0,1") == "0,1"
    assert open_ended.threshold("coco2014") == 2 and open_ended.threshold("QD") == 1


def test_metrics_table():
    results = [{"config": "QuickDraw", "correct_prediction": True, "num_turns": 3},
               {"config": "QuickDraw", "correct_prediction": False, "num_turns": 1},
               {"config": "coco2014", "correct_prediction": True, "num_turns": 1}]
    table = metrics.by_scenario(results)
    assert table["QuickDraw"] == {"n": 2, "acc": 50.0, "psr": 1.0}
    assert table["avg"]["acc"] == 75.0 and table["avg"]["psr"] == 0.5
    assert "QD" in metrics.format_table(table)


# ---- loading and the evaluate command -----------------------------------------------------------


def test_upstream_layout_rows_match_parquet_rows(built_miniature):
    upstream = f"{built_miniature}/upstream"
    for config in loading.available_configs(upstream):
        parquet = {r["key"]: r for r in loading.iter_rows(built_miniature, config)}
        for row in loading.iter_rows(upstream, config):
            twin = parquet[row["key"]]
            assert row["frame_ids"] == twin["frame_ids"]
            assert [f["bytes"] for f in row["frames"]] == [f["bytes"] for f in twin["frames"]]


def _evaluate(tmp_path, data, *extra):
    results = str(tmp_path / "results.jsonl")
    table = cli.evaluate(cli.parse_args(["evaluate", "--data", data, "--results", results,
                                         *extra]))
    return table, results


def test_evaluate_oracle_resumes(built_miniature, tmp_path):
    table, results = _evaluate(tmp_path, built_miniature, "--model", "oracle")
    assert table["avg"]["acc"] == 100.0
    lines = file_text(results).splitlines()
    table_again, _ = _evaluate(tmp_path, built_miniature, "--model", "oracle")
    assert file_text(results).splitlines() == lines          # nothing replayed
    assert table_again == table
    abstain, _ = _evaluate(tmp_path, built_miniature, "--model", "always-abstain")
    assert abstain["avg"]["acc"] == 0.0 and abstain["avg"]["psr"] == 0.0


def test_first_round_predictions_schema(built_miniature, tmp_path):
    _, results = _evaluate(tmp_path, built_miniature, "--model", "first-option",
                           "--first-round-only", "--scenarios", "quickdraw")
    rows = [json.loads(line) for line in open(results)]
    assert rows and all(tuple(sorted(r)) == tuple(sorted(FIELDS)) for r in rows)
    assert all(r["schema_version"] == SCHEMA_VERSION and r["config"] == "QuickDraw"
               and r["answer_text"] == "A" for r in rows)


def test_oeg_with_policy_judge(built_miniature, tmp_path):
    class Judge:
        name = "judge"

        def generate(self, messages):
            return "<think>x</think>\n1, 0"
    args = cli.parse_args(["evaluate", "--data", built_miniature, "--model", "oracle",
                           "--mode", "oeg", "--scenarios", "quickdraw", "--judge", "openai:j",
                           "--results", str(tmp_path / "oeg.jsonl")])
    rows = list(loading.iter_rows(built_miniature, "QuickDraw"))
    result = cli.play_sample(rows[0], "QuickDraw", args, load_model("oracle"), Judge())
    assert result["valid_answers"].startswith("Add more details to the drawing, ")
    assert result["proactive_suggestion"] == 1 and result["aggregate"] == 1


# What evaluate holds while it reads its data: a QuickDraw record whose every frame is large.
SKETCH = {"image_template": "QuickDraw/sketch/{image}.png", "first_image": 0, "num_images": 4,
          "reference_image": 3, "frame_ids": [0, 1, 2, 3],
          "prompt": "What object is being drawn here?",
          "options": ["I cannot tell.", "Extend the sketch with more strokes."],
          "categories": ["Pig.", "The eiffel tower.", "Whale.", "Sailboat."],
          "answer": "The eiffel tower."}
FRAME_SIDE = 384  # noise: a PNG of ~150 KB that does not compress


def _large_frame() -> bytes:
    import io
    import random
    noise = random.Random(0).randbytes(FRAME_SIDE * FRAME_SIDE)
    out = io.BytesIO()
    Image.frombytes("L", (FRAME_SIDE, FRAME_SIDE), noise).save(out, format="PNG")
    return out.getvalue()


def _sketches(count: int) -> list[dict]:
    return [{**SKETCH, "id": n, "key": f"QuickDraw/sketch/{n}",
             "image_template": f"QuickDraw/sketch{n}/{{image}}.png"} for n in range(count)]


def _upstream_folder(root, count: int, frame: bytes) -> str:
    lines = []
    for record in _sketches(count):
        for image_id in record["frame_ids"]:
            path = root / loading.fill_template(record, "QuickDraw", image_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(frame)
        lines.append(json.dumps(record) + "\n")
    (root / "QuickDraw_preprocessed.jsonl").write_text("".join(lines))
    return str(root)


def _build_folder(root, count: int, frame: bytes) -> str:
    """A build folder's test shard of `count` rows (row groups of 4), listed in build.json
    (what loading reads; check_data's digests are not what this is about)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from proactivebench_builder.core import records
    rows = [{**records.empty_row(), **record, "question_type": "mcqa",
             "frames": [{"bytes": frame, "path": loading.fill_template(record, "QuickDraw", i)}
                        for i in record["frame_ids"]]} for record in _sketches(count)]
    shard = "QuickDraw/test-00000-of-00001.parquet"
    (root / "QuickDraw").mkdir(parents=True)
    schema = records.arrow_schema()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / shard, row_group_size=4)
    (root / "reports").mkdir()
    (root / "reports" / "build.json").write_text(json.dumps(
        {"status": "ok", "files": [{"path": shard, "config": "QuickDraw", "split": "test"}]}))
    return str(root)


@pytest.mark.parametrize("make_folder", [_upstream_folder, _build_folder])
def test_the_samples_read_hold_no_frames_of_the_split(make_folder, tmp_path):
    """evaluate reads its data before playing anything, and held every frame of the split (the
    release's would need tens of GB). Now what the samples read hold stays flat as the split
    grows: each frame is read to be checked and let go, and read again when played. (Held, not
    peak, memory is measured: reading a file under a size limit allocates the limit for a
    moment, untouched, which would hide what is held.)"""
    import tracemalloc
    frame = _large_frame()

    def held_after_reading(count: int) -> int:
        data = make_folder(tmp_path / f"data{count}", count, frame)
        args = cli.parse_args(["evaluate", "--data", data, "--model", "oracle", "--no_progress",
                               "--results", str(tmp_path / f"r{count}.jsonl")])
        tracemalloc.start()
        try:
            samples = cli.current_samples(args)
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(samples) == count
        return held

    held_after_reading(2)  # imports and caches filled before anything is measured
    small, large = held_after_reading(4), held_after_reading(24)
    assert large - small < 4 * len(frame), (small, large)  # 80 frames more, not one row's worth
    row = next(loading.iter_rows(make_folder(tmp_path / "again", 1, frame), "QuickDraw"))
    assert [f["bytes"] for f in row["frames"]] == [frame] * 4  # played with its frames


def test_frames_changed_after_their_check_are_named_when_played(tmp_path, monkeypatch, capsys):
    """Frames are read again when a sample is played: a frame file gone since the check, or a
    shard whose rows moved, is one line naming the sample; the samples before it are written."""
    frame = _large_frame()
    build = _build_folder(tmp_path / "build", 8, frame)
    samples = list(loading.iter_samples(build, "QuickDraw"))
    shard = f"{build}/QuickDraw/test-00000-of-00001.parquet"
    pq.write_table(pq.read_table(shard).take(list(range(7, -1, -1))), shard, row_group_size=4)
    with pytest.raises(loading.BadRecord, match="changed since it was checked"):
        samples[0].read_frames()

    data = _upstream_folder(tmp_path / "upstream", 4, frame)
    reading = cli.current_samples

    def then_a_frame_goes(args):
        found = reading(args)
        os.remove(os.path.join(data, "QuickDraw/sketch2", "0000.png"))
        return found
    monkeypatch.setattr(cli, "current_samples", then_a_frame_goes)
    results = tmp_path / "r.jsonl"
    status = cli.main(["evaluate", "--data", data, "--model", "oracle", "--no_progress",
                       "--results", str(results)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and "sample 'QuickDraw/sketch/2' (QuickDraw) cannot be played" in err
    assert "frame QuickDraw/sketch2/0000.png: No such file" in err, err
    assert [r["key"] for r in read_jsonl(results)] == ["QuickDraw/sketch/0", "QuickDraw/sketch/1"]


# ---- what the tester found (one test each) ----------------------------------------------------


def _refused(capsys, argv) -> str:
    """`evaluate` refusing before any work: exit 2 and its last stderr line (above it only the
    lines naming skipped configs)."""
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse's one-line error
        status = exit_.code
    assert status == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_resume_only_reuses_results_of_the_current_build(built_miniature, miniature_root,
                                                         tmp_path, capsys):
    """Results of samples no longer in the data are not scored,
    and results of samples whose content changed (another seed) are refused in one line."""
    results = str(tmp_path / "oracle.jsonl")
    common = ["evaluate", "--model", "oracle", "--scenarios", "quickdraw", "--results", results]
    assert cli.main([*common, "--data", built_miniature]) == 0
    pool = {r["key"] for r in loading.iter_rows(built_miniature, "QuickDraw")}
    first = read_jsonl(results)
    assert {r["key"] for r in first} == pool and all(r["sample_fingerprint"] for r in first)
    capsys.readouterr()
    # A rebuild filtered by predictions: fewer test rows, same content for those kept.
    leaked = sorted(pool)[:2]
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({
        "schema_version": SCHEMA_VERSION, "model": "m", "config": "QuickDraw", "key": r["key"],
        "id": r["id"], "answer_text": "A", "chosen_option": "A", "correct": r["key"] in leaked})
        + "\n" for r in loading.iter_rows(built_miniature, "QuickDraw", "unfiltered")))
    filtered = str(tmp_path / "filtered")
    run(filtered, miniature_root, "quickdraw", f"--predictions={predictions}")
    assert cli.main([*common, "--data", filtered]) == 0
    assert read_jsonl(results) == first                     # nothing replayed
    out = capsys.readouterr().out
    table = cli.evaluate(cli.parse_args([*common, "--data", filtered]))
    assert table["QuickDraw"]["n"] == len(pool) - 2 and f" {len(pool) - 2} " in out
    # A rebuild with another seed: same keys, other content: refused before any work.
    reseeded = str(tmp_path / "reseeded")
    run(reseeded, miniature_root, "quickdraw", "--seed=7")
    line = _refused(capsys, [*common, "--data", reseeded])
    assert f"--results {results} holds " in line and "results of oracle from other data" in line
    assert "use a new --results file or delete it" in line
    assert read_jsonl(results) == first
    # A results file written before lines recorded their sample: refused, the way out named.
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "sample_fingerprint"})
                           + "\n" for r in first))
    line = _refused(capsys, [*common[:-1], str(old), "--data", built_miniature])
    assert "written before result lines recorded their sample" in line
    assert "use a new --results file or delete it" in line


@pytest.mark.parametrize("judge", ["oracle", "random:3", "always-abstain"])
def test_a_policy_cannot_judge(capsys, tmp_path, judge):
    """Refused in one line before playing (not a NotImplementedError after it)."""
    results = tmp_path / "r.jsonl"
    line = _refused(capsys, ["evaluate", "--data", str(tmp_path), "--model", "oracle", "--mode",
                             "oeg", "--judge", judge, "--results", str(results)])
    assert f"--judge: {judge!r} cannot judge" in line and "openai:MODEL" in line
    assert "hf:MODEL_ID" in line and not results.exists()


def test_oeg_without_a_judge_is_refused(capsys, built_miniature, tmp_path):
    """Refused in one line before any sample is played."""
    results = tmp_path / "r.jsonl"
    line = _refused(capsys, ["evaluate", "--data", built_miniature, "--model", "oracle",
                             "--mode", "oeg", "--results", str(results)])
    assert "--mode oeg needs --judge SPEC" in line and not results.exists()


@pytest.mark.parametrize("argv, shown", [
    (["--model", "oracle", "--data", "X", "--results", "Y"], "evaluate --model oracle ...?"),
    (["--data", "X"], "evaluate --data X?"),
    (["--debug", "evaluate", "--data", "X"], "evaluate --debug --data ...?"),
])
def test_a_missing_command_is_named(capsys, argv, shown):
    """Named with the command missing, not argparse's "invalid choice"."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"{cli.PROG}: error: the command is missing; did you mean: {cli.PROG} "
                   f"{shown}")


def test_evaluate_into_a_log_says_each_phase_before_its_work(built_miniature, tmp_path, capsys):
    """Into a log (stderr not a terminal), evaluate says what it reads and what it plays
    before it does it, one line each; --no_progress says neither."""
    results = str(tmp_path / "r.jsonl")
    args = ["evaluate", "--data", built_miniature, "--model", "oracle", "--scenarios",
            "QuickDraw", "--results", results]
    assert cli.main(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{cli.PROG} evaluate: reading the test split of QuickDraw")
    assert err[1].startswith(f"{cli.PROG} evaluate: playing ") and "with oracle" in err[1]
    os.remove(results)
    assert cli.main(["evaluate", "--no_progress", *args[1:]]) == 0
    assert "reading the" not in capsys.readouterr().err


def test_a_hub_dataset_that_is_not_proactivebench_is_refused_row_by_row(
        tmp_path, capsys, monkeypatch):
    """A dataset id that loads but holds other rows (another dataset, another schema): each row
    is checked against the record contract before it is played; nothing is scored."""
    import datasets

    from proactivebench_builder.runtime import cli, loading

    monkeypatch.setattr(loading, "check_hub", lambda dataset_id: None)
    monkeypatch.setattr(datasets, "get_dataset_config_names", lambda *a, **k: ["QuickDraw"])
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *a, **k: [{"text": "a review", "label": 1},
                                         {"id": 0, "prompt": 5, "answer": None}])
    results = tmp_path / "r.jsonl"
    try:
        status = cli.main(["evaluate", "--data", "someone/OtherDataset", "--model", "oracle",
                           "--scenarios", "quickdraw", "--results", str(results)])
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    assert status == 2 and "Traceback" not in err, err
    assert "--data someone/OtherDataset: QuickDraw row 0" in err, err
    assert not results.exists() or results.read_text() == ""


class _Proxy:
    """A loopback HTTP proxy that answers every request itself (a chat completion for a POST,
    `body` for a GET) and records the request line and headers."""

    def __init__(self, body: bytes = b""):
        self.requests: list[tuple[str, str, dict]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, data: bytes):
                proxy.requests.append((self.command, self.path, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer(json.dumps({"choices": [{"message": {"content": "via proxy"}}]})
                             .encode())

            def do_GET(self):
                self._answer(body)

            def do_HEAD(self):
                self._answer(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _only_this_proxy(monkeypatch, url: str) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                 "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", url)


def test_a_model_endpoint_is_reached_through_the_proxy_the_environment_names(monkeypatch):
    """http_proxy is honoured (urllib's rules, no_proxy included): the request, and the API key
    with it, go to the proxy, which is the user's to choose; redirects stay refused."""
    from proactivebench_builder.runtime.models import OpenAIChatModel

    proxy = _Proxy()
    try:
        _only_this_proxy(monkeypatch, proxy.url)
        model = OpenAIChatModel("m", base_url="http://model.invalid/v1", api_key="k",
                                timeout=10, max_retries=0)
        assert model.generate([{"role": "user", "content": "hi"}]) == "via proxy"
        method, path, headers = proxy.requests[0]
        assert method == "POST" and path == "http://model.invalid/v1/chat/completions"
        assert headers.get("Authorization") == "Bearer k"
    finally:
        proxy.close()


@pytest.mark.parametrize("spec", [
    "openai:m@http://[::1",
    "openai:m@file:///tmp/replies",
    "openai:",
], ids=["ipv6-unclosed", "file-url", "no-model"])
def test_an_endpoint_that_is_not_an_http_url_is_refused_before_any_work(spec):
    from proactivebench_builder.runtime.model_specs import ModelSpecError, check_model_spec

    with pytest.raises(ModelSpecError):
        check_model_spec(spec)


@pytest.mark.parametrize("kind", ["empty", "docs", "half-written", "failed", "changed",
                                  "missing", "upstream-of-failed"])
def test_evaluate_refuses_a_folder_that_is_not_an_intact_build(kind, built_copy, tmp_path,
                                                              capsys):
    from proactivebench_builder.runtime.cli import main as runtime_main

    data = {"empty": str(tmp_path / "empty"), "docs": os.path.join(REPO, "docs"),
            "missing": str(tmp_path / "nowhere" / "build")}.get(kind, built_copy)
    os.makedirs(str(tmp_path / "empty"), exist_ok=True)
    if kind == "half-written":
        buildfolder.mark_building(built_copy)
    elif kind == "failed":
        buildfolder.mark_finished(built_copy, "too many bad inputs (test)")
    elif kind == "changed":
        swap_for_a_valid_other_shard(built_copy)
    elif kind == "upstream-of-failed":
        os.makedirs(os.path.join(built_copy, "upstream"))
        with open(os.path.join(built_copy, "upstream", "QuickDraw_preprocessed.jsonl"), "w"):
            pass
        buildfolder.mark_finished(built_copy, "too many bad inputs (test)")
        data = os.path.join(built_copy, "upstream")
    results = str(tmp_path / "results.jsonl")
    status = runtime_main(["evaluate", "--data", data, "--model", "oracle", "--results", results])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "--data" in err and len(err.strip().splitlines()) == 1, err
    assert not os.path.exists(results)


def test_evaluate_accepts_an_intact_build(built_miniature):
    from proactivebench_builder.runtime import loading

    loading.check_data(built_miniature)  # no exception
