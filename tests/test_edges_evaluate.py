"""The edges of `evaluate`: what it
does with a damaged or odd --results file, which result lines it reuses, what it reads of an
upstream-layout folder or a build folder, Hub ids that cannot be reached, hostile model and judge
endpoints, and signals while a request is in flight. Each test names what happened before."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import file_text, read_jsonl
from proactivebench_builder.runtime import cli

PROG = cli.PROG


@pytest.fixture(scope="module")
def qd_build(shared_build, miniature_root) -> str:
    """A shared QuickDraw-only build (its shards, its upstream export); tests copy what they
    damage."""
    return shared_build(miniature_root, "quickdraw", "--upstream_export")[0]


def evaluate(capsys, *argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `evaluate` run in this process (without its phase
    lines: what is tested here is what it says of its inputs)."""
    quiet = [] if "--no_progress" in argv else ["--no_progress"]
    try:
        status = cli.main(["evaluate", *quiet, *argv])
    except SystemExit as exit_:  # argparse's own one-line error
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def run_cli(*argv, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    """`evaluate` in a process of its own (for what could block or grow without bound)."""
    return subprocess.run([sys.executable, "-m", "proactivebench_builder.runtime", "evaluate",
                           *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_line(err: str) -> str:
    """The single line a refusal prints (no traceback; the progress bar's lines left out)."""
    lines = [line for line in err.splitlines() if line.strip() and "sample/s]" not in line]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


QD = ["--model", "oracle", "--scenarios", "quickdraw"]


# ---- the --results file ------------------------------------------------

def test_a_torn_last_line_is_dropped_with_a_warning_and_recomputed(qd_build, tmp_path, capsys):
    """The half line is dropped (one warning line), its sample played again, and the
    file holds whole lines only."""
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
    whole = results.read_bytes()
    lines = whole.splitlines(keepends=True)
    results.write_bytes(b"".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    status, out, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    assert status == 0, err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and f"--results {results}: line {len(lines)}" in warning[0]
    assert "cut short" in warning[0] and "Traceback" not in err
    again = read_jsonl(results)
    assert len(again) == len(lines) and {r["key"] for r in again} == {
        json.loads(line)["key"] for line in lines}
    assert results.read_bytes().endswith(b"\n") and " 100.0" in out


def test_a_whole_last_line_without_its_newline_is_kept(qd_build, tmp_path, capsys):
    """A file whose last line lacks only its newline (an editor's save) loses nothing, and the
    next line written starts on a line of its own."""
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
    lines = results.read_bytes().splitlines(keepends=True)
    results.write_bytes(b"".join(lines[:-2]) + lines[-2].rstrip(b"\n"))  # one sample less
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    assert status == 0 and "warning" not in err, err
    assert len(read_jsonl(results)) == len(lines) - 1 + 1


def _signature_line(**fields) -> str:
    line = {"model": "oracle", "model_spec": "oracle", "mode": "mcqa", "hint": False,
            "random_suggestions": False, "history": False, "first_round_only": False, "seed": 0,
            "judge": None, "config": "QuickDraw"}
    line.update(fields)
    return json.dumps(line)


@pytest.mark.parametrize("bad, what", [
    (b"[1, 2]\n", "not a JSON object"),
    (b'{"model": "caf\xe9"}\n', "not UTF-8"),
    (b"[" * 100000 + b"]" * 100000 + b"\n", "nested too deeply"),
    (b'{"model": "oracle", "x": \n', "not valid JSON"),
    (_signature_line(key=["a"]).encode() + b"\n", "'key'"),
    (_signature_line(key="QuickDraw/x", sample_fingerprint=5).encode() + b"\n",
     "'sample_fingerprint'"),
])
def test_a_damaged_line_is_named_by_its_number(qd_build, tmp_path, capsys, bad, what):
    """One line naming the file and the line, exit 2; the
    file is left as it was."""
    results = tmp_path / "r.jsonl"
    good = b'{"model": "someone else"}\n'
    results.write_bytes(good + bad + good)
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    line = one_line(err)
    assert status == 2 and f"--results {results}: line 2: " in line and what in line, line
    assert results.read_bytes() == good + bad + good


def test_a_reused_line_lacking_what_the_table_reads_is_named(qd_build, tmp_path, capsys):
    """One line naming it."""
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
    lines = read_jsonl(results)
    lines[3].pop("correct_prediction")
    lines[5]["num_turns"] = "two"
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    line = one_line(err)
    assert status == 2 and f"--results {results}: line 4: " in line
    assert "'correct_prediction'" in line, line


def test_first_round_lines_are_checked_too(qd_build, tmp_path, capsys):
    results = tmp_path / "p.jsonl"
    argv = ["--data", qd_build, "--model", "first-option", "--scenarios", "quickdraw",
            "--first_round_only", "--results", str(results)]
    assert evaluate(capsys, *argv)[0] == 0
    lines = read_jsonl(results)
    lines[0]["correct"] = "yes"
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    status, _, err = evaluate(capsys, *argv)
    assert status == 2 and "line 1: " in one_line(err) and "'correct'" in err


@pytest.mark.parametrize("kind", ["fifo", "dev-null", "dev-zero", "in-a-file", "link-loop",
                                  "folder"])
def test_a_results_path_that_is_not_a_regular_file_is_one_line(qd_build, tmp_path, kind):
    """Each is one line and exit 2, before any work."""
    path = tmp_path / "r.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-null":
        path = "/dev/null"
    elif kind == "dev-zero":
        path = "/dev/zero"
    elif kind == "in-a-file":
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "r.jsonl"
    elif kind == "link-loop":
        os.symlink(path, path)
    else:
        path.mkdir()
    done = run_cli("--data", qd_build, *QD, "--results", str(path), timeout=60)
    line = one_line(done.stderr)
    assert done.returncode == 2 and f"--results {path}" in line, line


def test_a_results_file_that_cannot_be_written_is_one_line(qd_build, tmp_path, capsys,
                                                           monkeypatch):
    """A full disk while a line is written: one line (exit 1), no half line left behind, and a
    rerun resumes."""
    from proactivebench_builder.runtime import results_file

    results = tmp_path / "r.jsonl"
    writes = [0]
    real_write = os.write

    def failing_write(fd, data):
        writes[0] += 1
        if writes[0] == 3:
            real_write(fd, data[:len(data) // 2])
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(results_file.os, "write", failing_write)
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    line = one_line(err)
    assert status == 1 and "No space left on device" in line and str(results) in line
    assert len(read_jsonl(results)) == 2 and results.read_bytes().endswith(b"\n")
    monkeypatch.setattr(results_file.os, "write", real_write)
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0


# ---- a loopback OpenAI-compatible endpoint with hostile modes -----------------------------------

class Endpoint(ThreadingHTTPServer):
    """Answers POST /v1/chat/completions as `mode` says (per request, from `script` first):
    "text:T" (the content T), "list", "nullchoices", "intcontent", "dictcontent", "nested",
    "huge" (a reply larger than the cap), "trickle" (one byte a second), "redirect:URL",
    "hang" (never answers), or an HTTP status. Logs every request (path, model, Authorization)."""
    daemon_threads = True

    def __init__(self, mode: str = "text:A"):
        super().__init__(("127.0.0.1", 0), EndpointHandler)
        self.mode, self.script, self.requests = mode, [], []
        self.stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class EndpointHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, data: bytes, status: int = 200, headers=()):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.server.requests.append({"method": "GET", "path": self.path, "model": None,
                                     "auth": self.headers.get("Authorization")})
        self._reply(json.dumps({"choices": [{"message": {"content": "stolen"}}]}).encode())

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.requests.append({"method": "POST", "path": self.path,
                                     "model": body.get("model"),
                                     "auth": self.headers.get("Authorization")})
        mode = self.server.script.pop(0) if self.server.script else self.server.mode
        try:
            self._answer(mode)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _answer(self, mode):
        content = lambda value: json.dumps(  # noqa: E731
            {"choices": [{"message": {"content": value}}]}).encode()
        if isinstance(mode, int):
            return self._reply(b"{}", status=mode)
        if mode.startswith("text:"):
            return self._reply(content(mode[5:]))
        if mode.startswith("redirect:"):
            return self._reply(b"", status=302, headers=[("Location", mode[9:])])
        fixed = {"list": b"[1, 2]", "nullchoices": b'{"choices": null}',
                 "intcontent": content(42), "dictcontent": content({"a": 1}),
                 "nested": b"[" * 100000 + b"]" * 100000}
        if mode in fixed:
            return self._reply(fixed[mode])
        if mode == "huge":
            from proactivebench_builder.runtime.models import MAX_REPLY_BYTES
            size = MAX_REPLY_BYTES * 4
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = b" " * (1 << 20)
            for _ in range(size >> 20):
                self.wfile.write(block)
            return None
        if mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Length", str(10 ** 9))
            self.end_headers()
            while not self.server.stop.is_set():
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.5)
            return None
        if mode == "hang":
            self.server.stop.wait(600)
            return None
        raise AssertionError(f"unknown mode {mode!r}")


@pytest.fixture
def endpoints():
    """endpoints(mode) -> a started Endpoint; all are stopped at the end of the test."""
    started = []

    def start(mode: str = "text:A") -> Endpoint:
        server = Endpoint(mode)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server
    yield start
    for server in started:
        server.stop.set()
        server.shutdown()
        server.server_close()


# ---- what a result line is reused for -------------------------------------

def test_the_builtin_oracle_is_not_an_endpoint_model_named_oracle(qd_build, tmp_path, capsys,
                                                                  endpoints):
    """`--model openai:oracle@URL` after `--model oracle` into the same results file asks the
    endpoint: the built-in policy's lines are not the endpoint model's."""
    results = str(tmp_path / "r.jsonl")
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", results)[0] == 0
    api = endpoints("text:Z")  # never a right answer
    status, out, err = evaluate(capsys, "--data", qd_build, "--scenarios", "quickdraw",
                                "--model", f"openai:oracle@{api.url}", "--results", results)
    assert status == 0, err
    assert len(api.requests) == 60 and " 0.0" in out and " 100.0" not in out
    specs = {line["model_spec"] for line in read_jsonl(results)}
    assert specs == {"oracle", f"openai:oracle@{api.url}"}


def test_one_model_name_at_two_endpoints_is_two_models(qd_build, tmp_path, capsys, endpoints):
    results = str(tmp_path / "r.jsonl")
    first, second = endpoints("text:Z"), endpoints("text:Z")
    for api in (first, second):
        argv = ["--data", qd_build, "--scenarios", "quickdraw", "--model",
                f"openai:m@{api.url}", "--results", results]
        assert evaluate(capsys, *argv)[0] == 0
        assert len(api.requests) == 60
    assert evaluate(capsys, "--data", qd_build, "--scenarios", "quickdraw", "--model",
                    f"openai:m@{first.url}/", "--results", results)[0] == 0
    assert len(first.requests) == 60  # the same endpoint, spelt with a slash: reused


def test_another_judge_judges_again(qd_build, tmp_path, capsys, endpoints):
    """An OEG run with judge B after judge A into the same file asks judge B: judge A's
    verdicts are not B's."""
    results = str(tmp_path / "r.jsonl")
    judge = endpoints("text:1, 1")
    oeg = ["--data", qd_build, "--scenarios", "quickdraw", "--model", "oracle", "--mode", "oeg",
           "--oeg_samples", "5", "--results", results]
    assert evaluate(capsys, *oeg, "--judge", f"openai:judge-A@{judge.url}")[0] == 0
    assert [r["model"] for r in judge.requests] == ["judge-A"] * 5
    judge.mode = "text:0, 0"
    status, out, err = evaluate(capsys, *oeg, "--judge", f"openai:judge-B@{judge.url}")
    assert status == 0, err
    assert [r["model"] for r in judge.requests][5:] == ["judge-B"] * 5
    assert " 0.0" in out and " 100.0" not in out
    assert {line["judge"] for line in read_jsonl(results)} == {
        f"openai:judge-A@{judge.url}", f"openai:judge-B@{judge.url}"}
    # the same judge again: nothing asked
    assert evaluate(capsys, *oeg, "--judge", f"openai:judge-B@{judge.url}")[0] == 0
    assert len(judge.requests) == 10


def test_a_judge_named_on_a_multiple_choice_run_changes_nothing(qd_build, tmp_path, capsys):
    results = str(tmp_path / "r.jsonl")
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", results)[0] == 0
    before = file_text(results)
    assert evaluate(capsys, "--data", qd_build, *QD, "--judge", "openai:j@http://127.0.0.1:9",
                    "--results", results)[0] == 0
    assert file_text(results) == before


def test_lines_written_before_the_model_was_identified_are_refused(qd_build, tmp_path,
                                                                   capsys):
    """Lines of an older version name the model by its bare name: they may be another model's,
    so they are neither reused nor silently replaced."""
    results = tmp_path / "r.jsonl"
    assert evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))[0] == 0
    lines = read_jsonl(results)
    results.write_text("".join(json.dumps({k: v for k, v in line.items()
                                           if k not in ("model_spec", "judge")}) + "\n"
                               for line in lines))
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--results", str(results))
    line = one_line(err)
    assert status == 2 and "written before result lines recorded the model's adapter" in line
    assert "use a new --results file or delete it" in line


def test_prediction_lines_name_the_model_by_its_identity(qd_build, tmp_path, capsys,
                                                         endpoints):
    """The leakage filter counts models by this name: an endpoint model named like a built-in
    policy (or served at two URLs) stays a model of its own there too."""
    results = str(tmp_path / "p.jsonl")
    api = endpoints("text:A")
    for model in ("first-option", f"openai:first-option@{api.url}"):
        assert evaluate(capsys, "--data", qd_build, "--scenarios", "quickdraw", "--model", model,
                        "--first_round_only", "--results", results)[0] == 0
    assert len(api.requests) == 60
    models = [line["model"] for line in read_jsonl(results)]
    assert sorted(set(models)) == ["first-option", f"openai:first-option@{api.url}"]


def test_model_identity():
    from proactivebench_builder.runtime.model_specs import model_identity

    assert model_identity("oracle") == "oracle"
    assert model_identity("random") == model_identity("random:0") == "random:0"
    assert model_identity("openai:m") == "openai:m@http://localhost:8000/v1"
    assert model_identity("openai:m@HTTP://User:secret@Host:81/v1/") == "openai:m@http://host:81/v1"
    assert model_identity("hf:org/m") == "hf:org/m"


# ---- an upstream-layout folder --------------------------------------------

_OPENED: list | None = None


def _audit(event, args):
    if _OPENED is not None and event == "open" and isinstance(args[0], str):
        _OPENED.append(args[0])


sys.addaudithook(_audit)


class opened_files:
    """The paths opened inside the block (an audit hook: whatever opens them)."""

    def __enter__(self) -> list:
        global _OPENED
        _OPENED = []
        return _OPENED

    def __exit__(self, *exc):
        global _OPENED
        _OPENED = None


JSONL = "QuickDraw_preprocessed.jsonl"


def upstream_copy(qd_build, tmp_path) -> str:
    """A private upstream-layout folder holding QuickDraw's export (no enclosing build)."""
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copytree(os.path.join(qd_build, "upstream", "QuickDraw"), folder / "QuickDraw")
    shutil.copy(os.path.join(qd_build, "upstream", JSONL), folder / JSONL)
    return str(folder)


def edit_first(folder: str, change) -> dict:
    """Apply `change(record)` to the first record of the folder's JSONL; returns the record."""
    path = os.path.join(folder, JSONL)
    records = [json.loads(line) for line in open(path)]
    change(records[0])
    with open(path, "w") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))
    return records[0]


def refused(err: str) -> list[str]:
    """The lines of a refusal: one per bad record, then the closing line (no traceback)."""
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.strip() and "sample/s]" not in line]


def first_frame(folder: str) -> str:
    record = json.loads(open(os.path.join(folder, JSONL)).readline())
    return os.path.join(folder, record["image_template"].format(image="0000"))


def _template(value):
    def change(record):
        record["image_template"] = value
        record.pop("frame_ids", None)
    return change


@pytest.mark.parametrize("case", ["relative", "absolute", "dev-zero", "link-folder"])
def test_templates_leading_outside_the_folder_are_refused_unread(qd_build, tmp_path, capsys,
                                                                 case):
    """The record is named in one line and nothing outside the folder is opened."""
    folder = upstream_copy(qd_build, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for i in range(10):
        shutil.copy(first_frame(folder), outside / f"{i:04d}.png")
    template = {"relative": "../elsewhere/{image}.png", "absolute": f"{outside}/{{image}}.png",
                "dev-zero": "/dev/zero", "link-folder": "out/{image}.png"}[case]
    if case == "link-folder":
        os.symlink(outside, os.path.join(folder, "out"))
    edit_first(folder, _template(template))
    results = tmp_path / "r.jsonl"
    with opened_files() as opened:
        status, _, err = evaluate(capsys, "--data", folder, "--model", "oracle", "--results",
                                  str(results))
    lines = refused(err)
    assert status == 2 and len(lines) == 2, err
    assert f"{JSONL} line 1: frame " in lines[0] and "outside the folder" in lines[0]
    assert "1 records cannot be played" in lines[1] and not results.exists()
    assert not [p for p in opened if str(outside) in os.path.realpath(p) or p == "/dev/zero"]


@pytest.mark.parametrize("change, what", [
    (_template("QuickDraw/{level}.png"), "slot {level} that QuickDraw does not fill"),
    (_template("QuickDraw/{image:>999999999}.png"), "is not a plain {name} slot"),
    (_template("QuickDraw/{image.__class__}.png"), "is not a plain {name} slot"),
    (_template("QuickDraw/{0}.png"), "is not a plain {name} slot"),
    (_template("QuickDraw/{image"), "is not a template"),
    (lambda r: r.pop("image_template"), "lacks image_template"),
    (lambda r: r.update(num_images="6"), "num_images: '6' is not an integer"),
    (lambda r: r.update(num_images=10 ** 20), "does not fit in 64 bits"),
    (lambda r: r.update(num_images=10 ** 12, frame_ids=None), "num_images=1000000000000 is "),
    (lambda r: r.update(first_image=True), "first_image: True is not an integer"),
    (lambda r: r.update(options="A"), "options: 'A' is not a list"),
    (lambda r: r.update(categories=[1, 2, 3, 4]), "categories: item 0: 1 is not text"),
    (lambda r: r.update(answer="Dog."), "answer 'Dog.' not in categories"),
    (lambda r: r.update(crop={"top": "x"}), "crop: top: 'x' is not a number"),
    (lambda r: r.update(crop={"top": 1, "bottom": 2}), "crop: unknown fields ['bottom']"),
    (lambda r: r.update(horizontal_step=float("nan")), "horizontal_step: nan is not a finite"),
    (lambda r: r.update(frame_ids=list(range(5000))), "frame_ids names 5,000 frames"),
    (lambda r: r.update(reference_image=99), "reference_image"),
])
def test_records_breaking_the_contract_are_named_one_line_each(qd_build, tmp_path, capsys,
                                                               change, what):
    """One line per bad record
    (file and line, and what is wrong), then one closing line; nothing is played."""
    folder = upstream_copy(qd_build, tmp_path)
    edit_first(folder, change)
    results = tmp_path / "r.jsonl"
    status, _, err = evaluate(capsys, "--data", folder, "--model", "oracle", "--results",
                              str(results))
    lines = refused(err)
    assert status == 2 and len(lines) == 2, err
    assert f"{JSONL} line 1: " in lines[0] and what in lines[0], lines[0]
    assert not results.exists()


@pytest.mark.parametrize("line, what", [
    (b'{"id": 1,\n', "not valid JSON"),
    (b"[1, 2]\n", "not a JSON object"),
    (b"\xff\n", "not UTF-8"),
    (b"[" * 100000 + b"]" * 100000 + b"\n", "nested too deeply"),
])
def test_lines_that_are_not_records_are_named(qd_build, tmp_path, capsys, line, what):
    folder = upstream_copy(qd_build, tmp_path)
    with open(os.path.join(folder, JSONL), "ab") as handle:
        handle.write(line)
    count = len(open(os.path.join(folder, JSONL), "rb").read().splitlines())
    status, _, err = evaluate(capsys, "--data", folder, "--model", "oracle", "--results",
                              str(tmp_path / "r.jsonl"))
    lines = refused(err)
    assert status == 2 and len(lines) == 2 and f"{JSONL} line {count}: {what}" in lines[0], err


def test_every_bad_record_is_named_up_to_a_limit(qd_build, tmp_path, capsys):
    folder = upstream_copy(qd_build, tmp_path)
    with open(os.path.join(folder, JSONL), "ab") as handle:
        handle.write(b"[]\n" * 30)
    status, _, err = evaluate(capsys, "--data", folder, "--model", "oracle", "--results",
                              str(tmp_path / "r.jsonl"))
    lines = refused(err)
    assert status == 2 and len(lines) == cli.MAX_NAMED + 1
    assert "30 records cannot be played (named above, 10 more not shown)" in lines[-1]


@pytest.mark.parametrize("kind, what", [
    ("missing", "No such file or directory"),
    ("folder", "not a regular file: a folder"),
    ("fifo", "not a regular file: a named pipe (FIFO)"),
    ("link-out", "leads outside the folder (a link to /etc/hostname)"),
    ("not-an-image", "not an image"),
    ("bomb", "more pixels than PIL's decompression-bomb limit"),
    ("jpeg-named-png", "JPEG data in a file named '0000.png'"),
])
def test_frame_files_that_cannot_be_read_are_named(qd_build, tmp_path, kind, what):
    """One line naming the record and the file (in a process of its own: a FIFO)."""
    from PIL import Image

    folder = upstream_copy(qd_build, tmp_path)
    frame = first_frame(folder)
    os.remove(frame)
    if kind == "folder":
        os.mkdir(frame)
    elif kind == "fifo":
        os.mkfifo(frame)
    elif kind == "link-out":
        os.symlink("/etc/hostname", frame)
    elif kind == "not-an-image":
        open(frame, "w").write("hello")
    elif kind == "bomb":
        Image.new("1", (20000, 20000)).save(frame)  # 400 Mpx in a few kB
    elif kind == "jpeg-named-png":
        Image.new("RGB", (8, 8)).save(frame, format="JPEG")
    done = run_cli("--data", folder, "--model", "oracle", "--scenarios", "quickdraw",
                   "--no_progress", "--results", str(tmp_path / "r.jsonl"), timeout=120)
    lines = refused(done.stderr)
    assert done.returncode == 2 and len(lines) == 2, done.stderr
    assert f"{JSONL} line 1: frame QuickDraw/" in lines[0] and what in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["fifo", "folder", "link-out"])
def test_a_jsonl_that_is_not_a_regular_file_is_one_line(qd_build, tmp_path, kind):
    folder = upstream_copy(qd_build, tmp_path)
    path = os.path.join(folder, JSONL)
    os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        os.mkdir(path)
    else:
        shutil.copy(os.path.join(qd_build, "upstream", JSONL), tmp_path / "elsewhere.jsonl")
        os.symlink(tmp_path / "elsewhere.jsonl", path)
    done = run_cli("--data", folder, "--model", "oracle", "--results",
                   str(tmp_path / "r.jsonl"), timeout=120)
    line = one_line(done.stderr)
    assert done.returncode == 2 and f"{folder}: {JSONL}" in line, line
    assert {"fifo": "named pipe", "folder": "a folder", "link-out": "leads outside"}[kind] in line


def test_an_intact_upstream_folder_still_plays(qd_build, tmp_path, capsys):
    folder = upstream_copy(qd_build, tmp_path)
    os.symlink("QuickDraw", os.path.join(folder, "QD-link"))  # a link inside: fine
    status, out, err = evaluate(capsys, "--data", folder, "--model", "oracle", "--results",
                                str(tmp_path / "r.jsonl"))
    assert status == 0 and " 100.0" in out and "QD " in out, err


# ---- a build folder: exactly what build.json lists ------------------------

@pytest.fixture
def build_copy(qd_build, tmp_path) -> str:
    copy = str(tmp_path / "build")
    shutil.copytree(qd_build, copy, symlinks=True)
    return copy


SHARD = "QuickDraw/test-00000-of-00001.parquet"


def _write_rows(path: str, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from proactivebench_builder.core.records import arrow_schema, has_fractional_pixels

    # the contract's variant with fractional pixel counts when a row holds one (an infinity)
    schema = arrow_schema(any(has_fractional_pixels(r) for r in rows))
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _rows(path: str) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _played(table: str) -> int:
    """The number of samples the table's QuickDraw row counts."""
    return int(next(line for line in table.splitlines() if line.startswith("QD ")).split()[1])


def test_a_stray_upstream_jsonl_does_not_turn_a_build_into_an_upstream_folder(build_copy,
                                                                             tmp_path, capsys):
    """Build.json decides."""
    upstream = os.path.join(build_copy, "upstream")
    with open(os.path.join(upstream, JSONL)) as source:
        head = "".join(source.readline() for _ in range(3))
    with open(os.path.join(build_copy, JSONL), "w") as handle:
        handle.write(head)
    shutil.copytree(os.path.join(upstream, "QuickDraw"), os.path.join(build_copy, "QD"))
    status, out, err = evaluate(capsys, "--data", build_copy, *QD, "--results",
                                str(tmp_path / "r.jsonl"))
    assert status == 0 and _played(out) == 60, (out, err)
    with open(os.path.join(build_copy, SHARD), "ab") as handle:
        handle.write(b"damage")
    status, _, err = evaluate(capsys, "--data", build_copy, *QD, "--results",
                              str(tmp_path / "r2.jsonl"))
    line = one_line(err)
    assert status == 2 and SHARD in line and "build.json says" in line, line


def test_only_the_shards_build_json_lists_are_played(build_copy, tmp_path, capsys, monkeypatch):
    """A stray `*.parquet` in a config folder is not played: the folder check refuses it, and
    even past it the reader plays only what build.json lists."""
    from proactivebench_builder.core import buildfolder

    rows = _rows(os.path.join(build_copy, SHARD))[:14]
    for row in rows:
        row["key"] += "-copy"
    _write_rows(os.path.join(build_copy, "QuickDraw", "test-00000-of-00001 (1).parquet"), rows)
    status, _, err = evaluate(capsys, "--data", build_copy, *QD, "--results",
                              str(tmp_path / "r.jsonl"))
    assert status == 2 and "test-00000-of-00001 (1).parquet" in one_line(err)
    monkeypatch.setattr(buildfolder, "folder_problems", lambda *a, **k: [])
    status, out, err = evaluate(capsys, "--data", build_copy, *QD, "--results",
                                str(tmp_path / "r.jsonl"))
    assert status == 0 and _played(out) == 60, (out, err)


def test_a_stray_shard_that_is_a_fifo_is_refused_unopened(build_copy, tmp_path):
    os.mkfifo(os.path.join(build_copy, "QuickDraw", "zz.parquet"))
    done = run_cli("--data", build_copy, *QD, "--results", str(tmp_path / "r.jsonl"),
                   timeout=120)
    assert done.returncode == 2 and "zz.parquet" in one_line(done.stderr)


@pytest.mark.parametrize("change, what", [
    (lambda row: row.update(num_images=10 ** 9), "num_images=1000000000 is outside"),
    (lambda row: row.update(categories=["a", "a", "b", row["answer"]]), "categories repeat"),
    (lambda row: row.update(frame_ids=row["frame_ids"][:-1], frames=row["frames"][:-1]),
     "reference_image=5 is not in frame_ids"),
    (lambda row: row.update(horizontal_step=float("inf")), "not a finite number"),
    (lambda row: row.update(frames=row["frames"][:1]), "6 frame_ids but 1 frames"),
])
def test_rows_of_a_re_signed_shard_are_checked_before_play(build_copy, tmp_path, capsys,
                                                           monkeypatch, change, what):
    """The folder check is integrity, not authenticity: whoever edits a shard can rewrite
    build.json too (simulated here by passing the check). Such rows never reach the
    environments (a 10^9 step cap would hang): each is named in one line, and nothing is
    played."""
    from proactivebench_builder.core import buildfolder

    path = os.path.join(build_copy, SHARD)
    rows = _rows(path)
    change(rows[0])
    _write_rows(path, rows)
    monkeypatch.setattr(buildfolder, "folder_problems", lambda *a, **k: [])
    results = tmp_path / "r.jsonl"
    status, _, err = evaluate(capsys, "--data", build_copy, *QD, "--results", str(results))
    lines = refused(err)
    assert status == 2 and len(lines) == 2, err
    assert f"{SHARD}: row {rows[0]['key']!r}: " in lines[0] and what in lines[0], lines[0]
    assert not results.exists()


def test_a_shard_that_is_not_parquet_is_one_line(build_copy, tmp_path, capsys, monkeypatch):
    from proactivebench_builder.core import buildfolder

    with open(os.path.join(build_copy, SHARD), "wb") as handle:
        handle.write(b"hello")
    monkeypatch.setattr(buildfolder, "folder_problems", lambda *a, **k: [])
    status, _, err = evaluate(capsys, "--data", build_copy, *QD, "--results",
                              str(tmp_path / "r.jsonl"))
    assert status == 2 and SHARD in one_line(err)


def test_a_frame_that_does_not_decode_is_one_line_naming_the_sample(build_copy, tmp_path,
                                                                    capsys, monkeypatch):
    """A row whose frame bytes are not an image (or a bomb) passes every check that reads no
    pixels; it is named when it is shown, and what was played before it is kept."""
    import io as io_

    from PIL import Image

    from proactivebench_builder.core import buildfolder

    path = os.path.join(build_copy, SHARD)
    rows = _rows(path)
    bomb = io_.BytesIO()
    Image.new("1", (20000, 20000)).save(bomb, format="PNG")
    monkeypatch.setattr(buildfolder, "folder_problems", lambda *a, **k: [])
    for data, what in ((b"\x89PNG not really", "undecodable frame (UnidentifiedImageError"),
                       (bomb.getvalue(), "PIL's decompression-bomb limit")):
        changed = [dict(row) for row in rows]
        changed[3]["frames"] = [dict(f) for f in changed[3]["frames"]]
        changed[3]["frames"][0]["bytes"] = data
        _write_rows(path, changed)
        results = tmp_path / f"{len(data)}.jsonl"
        status, _, err = evaluate(capsys, "--data", build_copy, "--model", "oracle",
                                  "--scenarios", "quickdraw", "--results", str(results))
        line = one_line(err)
        assert status == 2 and f"sample {rows[3]['key']!r} (QuickDraw) cannot be played" in line
        assert what in line and " at 0x" not in line, line
        assert len(read_jsonl(results)) == 3


# ---- a Hub dataset id -------------------------------------------------------------

@pytest.mark.build
@pytest.mark.parametrize("scenarios", [[], ["--scenarios", "quickdraw"]])
def test_a_hub_id_offline_is_one_line(tmp_path, scenarios):
    """One line, no ConnectionError (OfflineModeIsEnabled) traceback."""
    done = run_cli("--data", "someone/ProactiveBench", "--model", "oracle", *scenarios,
                   "--no_progress", "--results", str(tmp_path / "r.jsonl"),
                   env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    line = one_line(done.stderr)
    assert done.returncode == 2 and "--data someone/ProactiveBench: " in line
    assert "offline mode is on (HF_HUB_OFFLINE)" in line, line


@pytest.mark.parametrize("error, what", [
    (FileNotFoundError("Couldn't find any data file at /home/me/work/someone/ProactiveBench"),
     "no such dataset at https://huggingface.co, or it could not be reached"),
    (ConnectionError("Couldn't reach 'someone/ProactiveBench' on the Hub (ConnectTimeout)"),
     "the Hub at https://huggingface.co cannot be reached (ConnectionError)"),
    (ValueError(f"BuilderConfig 'QuickDraw' not found in {os.getcwd()}/x\nAvailable: []"),
     "could not be loaded from https://huggingface.co (ValueError: BuilderConfig 'QuickDraw' "
     "not found in ./x)"),
])
def test_a_hub_id_that_cannot_be_loaded_is_one_line_without_local_paths(
        tmp_path, capsys, monkeypatch, error, what):
    """One line without the library's traceback or a local path (`Couldn't find any data file
    at <the current folder>/someone/ProactiveBench`)."""
    import datasets

    def fail(*args, **kwargs):
        raise error
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", fail)
    monkeypatch.setattr(datasets, "get_dataset_config_names", fail)
    # the Hub is reachable: the library's own failures are what this test is about (the probe
    # of an unreachable Hub is tests/test_regenerate.py's)
    from proactivebench_builder.runtime import loading
    monkeypatch.setattr(loading, "check_hub", lambda dataset_id: None)
    for scenarios in ([], ["--scenarios", "quickdraw"]):
        status, _, err = evaluate(capsys, "--data", "someone/ProactiveBench", "--model",
                                  "oracle", *scenarios, "--results", str(tmp_path / "r.jsonl"))
        line = one_line(err)
        assert status == 2 and what in line, line
        assert "/home/me" not in line and os.getcwd() not in line, line


def test_split_unfiltered_on_an_upstream_folder_is_refused(qd_build, tmp_path, capsys):
    """Refused in one line: the export holds one split, not the pool."""
    status, _, err = evaluate(capsys, "--data", os.path.join(qd_build, "upstream"), *QD,
                              "--split", "unfiltered", "--results", str(tmp_path / "r.jsonl"))
    assert status == 2 and "is an upstream-layout folder, which holds one split" in one_line(err)


def test_all_records_on_a_build_folder_is_refused(qd_build, tmp_path, capsys):
    """--all_records selects records of an upstream-layout folder; on a build folder it was
    ignored without a word (the test split played). Refused in one line, naming the flag that
    plays a build's whole pool, with nothing written."""
    results = tmp_path / "r.jsonl"
    status, _, err = evaluate(capsys, "--data", qd_build, *QD, "--all_records",
                              "--results", str(results))
    line = one_line(err)
    assert status == 2 and "--all_records is for one" in line and "--split unfiltered" in line
    assert not results.exists() or not results.read_text()


# ---- model and judge endpoints ----------------------------------------------------

def _ask(url: str, **options) -> str:
    from PIL import Image

    from proactivebench_builder.runtime.models import OpenAIChatModel

    model = OpenAIChatModel("m", base_url=url, backoff=0.0, **options)
    return model.generate([{"role": "user", "content": [
        {"type": "image", "image": Image.new("RGB", (4, 3))}, {"type": "text", "text": "?"}]}])


def ends_within(seconds: float, call):
    """(result or exception, elapsed) of `call()`, failing when it has not ended after `seconds`
    (a hang check, not a timing: the bound is far above what it takes)."""
    outcome = {}

    def run():
        start = time.monotonic()
        try:
            outcome["value"] = call()
        except BaseException as err:  # noqa: BLE001 (handed to the test)
            outcome["value"] = err
        outcome["elapsed"] = time.monotonic() - start
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return outcome["value"], outcome["elapsed"]


@pytest.mark.parametrize("mode, what", [
    ("list", "no choices[0].message.content"),
    ("nullchoices", "no choices[0].message.content"),
    ("nested", "nested too deeply"),
    ("intcontent", "message content is a number, not text"),
    ("dictcontent", "message content is an object, not text"),
    ("huge", "larger than"),
])
def test_a_reply_that_is_not_a_chat_completion_is_a_model_error(endpoints, mode, what):
    """A reply that is not a chat completion (content 42, nested deeply, 1.5 GB) is a
    ModelError, read no further than the cap."""
    from proactivebench_builder.runtime.models import ModelError

    api = endpoints(mode)
    error, _ = ends_within(60, lambda: _ask(api.url, max_retries=2))
    assert isinstance(error, ModelError) and what in str(error), repr(error)
    assert len(api.requests) == 1  # a malformed reply is not retried


def test_text_parts_are_text():
    from proactivebench_builder.runtime.models import reply_text

    body = {"choices": [{"message": {"content": [{"type": "text", "text": "A"},
                                                 {"type": "text", "text": "B"}]}}]}
    assert reply_text(json.dumps(body).encode()) == "AB"
    assert reply_text(b'{"choices": [{"message": {"content": null}}]}') == ""


@pytest.mark.parametrize("role", ["model", "judge"])
def test_a_malformed_reply_ends_evaluate_in_one_line(qd_build, tmp_path, capsys, endpoints,
                                                     role):
    api = endpoints("dictcontent")
    spec = f"openai:m@{api.url}"
    argv = (["--model", spec] if role == "model" else
            ["--model", "oracle", "--mode", "oeg", "--oeg_samples", "2", "--judge", spec])
    status, _, err = evaluate(capsys, "--data", qd_build, "--scenarios", "quickdraw", *argv,
                              "--max_retries", "0", "--results", str(tmp_path / "r.jsonl"))
    line = one_line(err)
    assert status == 1 and "the model failed" in line and "not text" in line, line


def test_a_reply_that_trickles_ends_at_the_timeout(endpoints):
    """A request ends when its time is up, whatever it is doing."""
    from proactivebench_builder.runtime.models import ModelError

    api = endpoints("trickle")
    error, elapsed = ends_within(60, lambda: _ask(api.url, timeout=1.5, max_retries=1))
    assert isinstance(error, ModelError) and "no complete reply within 1.5 s" in str(error)
    assert len(api.requests) == 2


def test_a_redirect_is_not_followed_and_the_key_stays_home(endpoints):
    """A 302 to another host is not followed: the key (`Authorization: Bearer
    $OPENAI_API_KEY`) stays with the named endpoint, and no reply of another host is scored."""
    from proactivebench_builder.runtime.models import ModelError

    other = endpoints("text:A")
    api = endpoints(f"redirect:{other.url}/chat/completions")
    error, _ = ends_within(60, lambda: _ask(api.url, api_key="sk-secret", max_retries=2))
    assert isinstance(error, ModelError) and "redirects are not followed" in str(error)
    assert other.requests == [] and len(api.requests) == 1


def test_cancel_ends_a_request_in_flight_at_once(endpoints):
    from proactivebench_builder.runtime.models import Cancelled, OpenAIChatModel

    api = endpoints("hang")
    model = OpenAIChatModel("m", base_url=api.url, timeout=300, max_retries=3)
    threading.Timer(1.0, model.cancel).start()
    error, _ = ends_within(30, lambda: model.generate([{"role": "user", "content": "?"}]))
    assert isinstance(error, Cancelled) and len(api.requests) == 1


# ---- signals ----------------------------------------------------------------------

def _has_stop_signals() -> bool:
    from proactivebench_builder.core import cli as core_cli
    return hasattr(core_cli, "STOP_SIGNALS")


@pytest.mark.parametrize("sig, status", [
    (signal.SIGINT, 130),
    pytest.param(signal.SIGTERM, 143, marks=pytest.mark.skipif(
        not _has_stop_signals(), reason="core.cli does not turn SIGTERM into an interruption")),
    pytest.param(signal.SIGHUP, 129, marks=pytest.mark.skipif(
        not _has_stop_signals(), reason="core.cli does not turn SIGHUP into an interruption")),
])
def test_a_signal_with_a_request_in_flight_stops_evaluate_at_once(qd_build, tmp_path,
                                                                  endpoints, sig, status):
    """One line, 128 + the signal, the results file whole."""
    api = endpoints("text:Z")
    api.script = ["text:Z"] * 3  # three samples answered, then the fourth hangs
    api.mode = "hang"
    results = tmp_path / "r.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "proactivebench_builder.runtime", "evaluate", "--data", qd_build,
         "--scenarios", "quickdraw", "--model", f"openai:m@{api.url}", "--timeout", "300",
         "--results", str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(api.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(api.requests) == 4
        process.send_signal(sig)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == status, err
    assert "Traceback" not in err and err.rstrip().splitlines()[-1].endswith(
        "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}")
    assert len(read_jsonl(results)) == 3 and results.read_bytes().endswith(b"\n")
    assert len(api.requests) == 4  # no retry after the signal


def test_concurrency_is_capped(tmp_path, capsys):
    """`--concurrency` is bounded (a thread per sample in flight)."""
    status, _, err = evaluate(capsys, "--data", str(tmp_path), "--model", "oracle",
                              "--concurrency", "100000", "--results", str(tmp_path / "r.jsonl"))
    assert status == 2 and "--concurrency: at most 256" in one_line(err)


def test_requests_in_flight_follow_concurrency(qd_build, tmp_path, capsys, endpoints,
                                               monkeypatch):
    """An API model gets as many requests in flight as --concurrency plays samples at once
    (before: at most 8 whatever --concurrency said, the adapter's default)."""
    from proactivebench_builder.runtime import models

    made = []
    real = models.OpenAIChatModel.__init__

    def recording(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self._slots._initial_value)
    monkeypatch.setattr(models.OpenAIChatModel, "__init__", recording)
    api = endpoints("text:A")
    status, _, err = evaluate(capsys, "--data", qd_build, "--scenarios", "quickdraw",
                              "--model", f"openai:m@{api.url}", "--concurrency", "12", "--results", str(tmp_path / "r.jsonl"))
    assert status == 0, err
    assert made == [12]


def test_a_local_model_that_cannot_be_loaded_is_a_model_error(monkeypatch):
    """The same pattern for `hf:MODEL_ID`: before, a model not on the Hub (or no network)
    ended in the library's OSError traceback from a worker thread."""
    import types

    from proactivebench_builder.runtime.models import ModelError, TransformersModel

    def missing(*args, **kwargs):
        raise OSError("someone/nothing is not a local folder and is not a valid model "
                      "identifier listed on 'https://huggingface.co/models'\nmore detail")
    auto = types.SimpleNamespace(from_pretrained=missing)
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(
        AutoModelForImageTextToText=auto, AutoProcessor=auto))
    with pytest.raises(ModelError, match=r"^hf:someone/nothing cannot be loaded \(OSError: "
                                         r"someone/nothing is not a local folder.*models'\)$"):
        TransformersModel("someone/nothing").generate([])


def test_a_decoded_frame_larger_than_the_bomb_limit_is_not_shown():
    """A Hub row's frames arrive decoded lazily by `datasets` (PIL only warns between one and
    two times its limit, and then decodes): the size is checked before any pixel is."""
    from PIL import Image

    from proactivebench_builder.core.play import MalformedRecord
    from proactivebench_builder.runtime.environments import decode_frame

    with pytest.raises(MalformedRecord, match="decompression-bomb limit"):
        decode_frame(Image.new("1", (Image.MAX_IMAGE_PIXELS // 1000 + 1, 1001)))


def test_a_shard_linked_from_outside_the_folder_is_refused(build_copy, tmp_path, capsys):
    """Evaluate reads nothing outside --data: one line."""
    outside = tmp_path / "elsewhere.parquet"
    shutil.move(os.path.join(build_copy, SHARD), outside)
    os.symlink(outside, os.path.join(build_copy, SHARD))
    status, _, err = evaluate(capsys, "--data", build_copy, *QD, "--results",
                              str(tmp_path / "r.jsonl"))
    line = one_line(err)
    # the build-folder checker refuses any link in place of a shard (a build writes regular
    # files only) before the reader would see it lead outside
    assert status == 2 and f"{SHARD}: a symbolic link" in line, line
