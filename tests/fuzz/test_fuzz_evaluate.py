"""Property-based fuzzing of what `evaluate` reads from outside: the --results file, an
upstream-layout folder's JSONL (and the rows it yields, played), an endpoint's reply body, and
whatever text a model answers to the environments.

Invariants: no exception escapes but the documented one (a UsageError line for a damaged results
file or JSONL, a BadRecord per bad record, a MalformedRecord for a sample that cannot be shown,
a ModelError for a reply), no file outside the folder is opened, the table counts exactly the
lines reused. The suite runs a short budget (PB_FUZZ_EXAMPLES, 60 by default); a longer run is
one variable away: `PB_FUZZ_EXAMPLES=5000 python -m pytest tests/fuzz/test_fuzz_evaluate.py`.
Crashes found are kept as `@example`s."""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_budget import FUZZ  # tests/fuzz/ (no __init__.py) is on sys.path
from PIL import Image

from proactivebench_builder.core.conformance import CATEGORIES
from proactivebench_builder.core.errors import UsageError
from proactivebench_builder.core.play import MalformedRecord
from proactivebench_builder.runtime import cli, conformance, loading, open_ended, results_file
from proactivebench_builder.runtime import environments as envs
from proactivebench_builder.runtime.episodes import run_episode
from proactivebench_builder.runtime.models import Model, ModelError, reply_text
from proactivebench_builder.runtime.policies import POLICIES


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["", "0", "1", "true", "NaN", "²", "-1", "cat", "..", "/", "../x",
                     "{image}", "{level}", "{0}", "{image.__class__}", "{image:>99999999}",
                     "/dev/zero", "/etc/hostname", "a\x00b", "Dog.", "zoom", "up_left"]))
json_values = st.recursive(json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=8), kids, max_size=5)),
    max_leaves=20)


def dumps(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """`data` with a few byte edits: flips, cuts, insertions, a cut end."""
    data = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        if kind == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[i:i + draw(st.integers(1, 8))]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[i:]
    return bytes(data)


# ---- the --results file --------------------------------------------------------------------------

KEYS = [f"QuickDraw/k{i}" for i in range(4)]
SAMPLES = {("QuickDraw", key): (f"fp{i}", {"key": key, "id": i}) for i, key in enumerate(KEYS)}
RUNS = [argparse.Namespace(model=model, mode=mode, hint=False, random_suggestions=False,
                           history=False, first_round_only=first, seed=0, judge=judge)
        for model, mode, first, judge in (
            ("oracle", "mcqa", False, None), ("openai:m@http://h/v1", "mcqa", False, None),
            ("oracle", "oeg", False, "openai:j@http://h/v1"), ("first-option", "mcqa", True,
                                                                None))]


@st.composite
def results_lines(draw) -> bytes:
    """Lines of the runs above (valid, then with fields dropped or replaced) and junk."""
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        args = draw(st.sampled_from(RUNS))
        index = draw(st.integers(0, len(KEYS) - 1))
        if args.first_round_only:
            line = {"schema_version": 1, "model": args.model, "config": "QuickDraw",
                    "key": KEYS[index], "id": index, "correct": draw(st.booleans())}
        else:
            line = dict(cli.run_signature(args), config="QuickDraw", key=KEYS[index],
                        sample_fingerprint=draw(st.sampled_from([f"fp{index}", "other"])),
                        correct_prediction=draw(st.booleans()), num_turns=2,
                        category_prediction=1, proactive_suggestion=0, aggregate=1)
        for field in draw(st.lists(st.sampled_from(sorted(line) + ["x"]), max_size=3)):
            if draw(st.booleans()):
                line.pop(field, None)
            else:
                line[field] = draw(json_values)
        lines.append(dumps(line))
    if draw(st.integers(0, 3)) == 0:
        lines.append(dumps(draw(json_values)))
    data = b"\n".join(lines) + draw(st.sampled_from([b"\n", b""]))
    return draw(damaged(data)) if draw(st.integers(0, 3)) == 0 else data


@FUZZ
@given(data=st.one_of(results_lines(), st.binary(max_size=2000)))
@example(data=b"[" * 100000 + b"]" * 100000 + b"\n")
@example(data=b'{"model": "oracle", "mode": "mcqa", "key": ["a"]}\n')
@example(data=b'{"a": 1}\n{"b": ')
def test_results_file_reading_reuse_and_table(tmp_path_factory, data):
    """Reading, reuse and the table raise nothing but a UsageError line; a cut last line is
    the only thing dropped, and the file mended from it reads back whole."""
    check_results(str(tmp_path_factory.mktemp("results") / "r.jsonl"), data)


def check_results(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
    try:
        found = results_file.read(path)
    except UsageError as err:
        assert isinstance(err.code, str) and "\n" not in err.code
        return
    for args in RUNS:
        try:
            done = cli.reusable_results(found, cli.run_signature(args), SAMPLES,
                                        args.first_round_only)
        except SystemExit as err:
            assert isinstance(err.code, str) and "\n" not in err.code
            continue
        table = cli.summarise(list(done.values()), args)
        assert sum(m["n"] for c, m in table.items() if c != "avg") == len(done)
    with results_file.Writer(found):
        pass
    again = results_file.read(path)
    assert again.torn_at is None and len(again.lines) == len(found.lines)


# ---- an upstream-layout folder -------------------------------------------------------------------

def _base_records() -> dict:
    """One hand-made record per upstream config (the conformance cases'), by config."""
    found = {}
    for case in conformance.declared_cases():
        if case["random"]:
            continue
        record = dict(case["record"])  # each config's files in a folder of its own
        config = envs.config_of(record)
        record["image_template"] = f"{config}/{record['image_template']}"
        found.setdefault(config, record)
    return found


BASES = _base_records()
FOLDER = tempfile.mkdtemp(prefix="fuzz-upstream-")


def _frame_bytes(name: str) -> bytes:
    buffer = io.BytesIO()
    jpeg = name.lower().endswith((".jpg", ".jpeg"))
    Image.new("RGB", (32, 24), (10, 200, 30)).save(buffer, format="JPEG" if jpeg else "PNG")
    return buffer.getvalue()


for _config, _record in BASES.items():  # the frame files the base records name
    for _id in envs.reachable_frame_ids(_record, _config):
        _path = os.path.join(FOLDER, loading.fill_template(_record, _config, _id))
        os.makedirs(os.path.dirname(_path), exist_ok=True)
        with open(_path, "wb") as _handle:
            _handle.write(_frame_bytes(_path))

FIELDS = sorted({"id", "key", "image_template", "first_image", "num_images", "reference_image",
                 "prompt", "options", "categories", "answer", "strong_occlusions",
                 "valid_images", "quality_answer", "step_size", "max_steps", "direction",
                 "granularity", "horizontal_step", "vertical_step", "crop", "frame_ids",
                 "frames", "source", "junk"})
SPECIAL = st.sampled_from([
    "../x/{image}", "/etc/hostname", "x/{image}", "x/{level}/a.JPEG", "{level}", 10 ** 20, 10 ** 6,
    -1, 0, 1, 5, [], [0, 0], [0, 1, 2], [4, 9, 2], ["a"], list(CATEGORIES), {"top": "x"},
    {"top": 1e300, "left": 0, "height": 1e300, "width": 1e300}, 1.5, float("nan"), True])


@st.composite
def upstream_lines(draw) -> tuple[str, bytes]:
    config = draw(st.sampled_from(sorted(BASES)))
    record = dict(BASES[config])
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=4)):
        choice = draw(st.integers(0, 2))
        if choice == 0:
            record.pop(field, None)
        else:
            record[field] = draw(json_values if choice == 1 else SPECIAL)
    line = dumps(record)
    if draw(st.integers(0, 5)) == 0:
        line = draw(damaged(line))
    return config, line + b"\n"


class _Scripted(Model):
    name = "scripted"

    def __init__(self, answers):
        self.answers, self.turn = answers, 0

    def generate(self, messages):
        self.turn += 1
        return self.answers[(self.turn - 1) % len(self.answers)]


_OPENED: list | None = None


def _audit(event, args):
    if _OPENED is not None and event == "open" and isinstance(args[0], str):
        _OPENED.append(args[0])


sys.addaudithook(_audit)


@FUZZ
@given(line=upstream_lines(), answers=st.lists(st.text(max_size=20), min_size=1, max_size=4))
def test_upstream_records_are_rows_or_named_and_never_read_outside(line, answers):
    """Each JSONL line is a checked row or one BadRecord line; no file outside the folder is
    opened; a row that passed is played by any model in every mode, raising at most a
    MalformedRecord (a frame that does not decode: one line naming the sample)."""
    check_upstream(*line, answers)


def check_upstream(config: str, data: bytes, answers: list[str]) -> None:
    global _OPENED
    with open(os.path.join(FOLDER, f"{config}_preprocessed.jsonl"), "wb") as handle:
        handle.write(data)
    bad, rows = [], []
    _OPENED = []
    try:
        rows = list(loading.iter_rows(FOLDER, config, "test", lambda w, r: bad.append(r)))
    except UsageError as err:  # the JSONL itself (not a line of it) cannot be read
        assert "\n" not in str(err.code)
    finally:
        opened, _OPENED = _OPENED, None
    real = os.path.realpath(FOLDER)
    outside = [p for p in opened if p in ("/dev/zero", "/etc/hostname") or (
        p.startswith(FOLDER) and os.path.commonpath([real, os.path.realpath(p)]) != real)]
    assert not outside, outside
    lines = len([part for part in data.split(b"\n") if part.strip()])  # each accounted for
    assert len(rows) + len(bad) == lines or (b"strong_occlusions" in data and
                                             len(rows) + len(bad) < lines)
    assert all("\n" not in reason for reason in bad)
    for row in rows:
        for mode in envs.MODES:
            for model in (POLICIES["oracle"](), POLICIES["first-option"](), _Scripted(answers)):
                try:
                    run_episode(envs.make_environment(row, mode=mode, config=config), model)
                except MalformedRecord:
                    pass


# ---- an endpoint's reply -------------------------------------------------------------------------

replies = st.one_of(
    st.builds(lambda c: dumps({"choices": [{"message": {"content": c}}]}), json_values),
    st.builds(lambda v: dumps({"choices": v}), json_values),
    json_values.map(dumps), st.binary(max_size=500))


@FUZZ
@given(body=replies)
@example(body=b"[" * 100000 + b"]" * 100000)
@example(body=b'{"choices": null}')
@example(body=b'{"choices": [{"message": {"content": 42}}]}')
def test_a_reply_is_text_or_a_model_error(body):
    check_reply(body)


def check_reply(body: bytes) -> None:
    try:
        text = reply_text(body)
    except ModelError as err:
        assert "\n" not in str(err)
        return
    assert isinstance(text, str)


# ---- whatever a model answers --------------------------------------------------------------------

ANSWERS = st.one_of(st.text(max_size=200), st.sampled_from([
    "A", "B", "E", "A.", "(A)", "a", "answer: B", "Z", "1,1", "0,1,0", "</think>1", "", " ",
    "A B C D E F", "Move the camera up.", "Rewind the video.", "Dog.", "G", "H"]))


@FUZZ
@given(config=st.sampled_from(sorted(BASES)), answers=st.lists(ANSWERS, min_size=1, max_size=12),
       hint=st.booleans(), history=st.booleans(), judge=st.text(max_size=80))
def test_any_answer_ends_an_episode_and_any_verdict_is_0_or_1(config, answers, hint, history,
                                                             judge):
    row = conformance.with_frames(BASES[config], config)
    for mode in envs.MODES:
        env = envs.make_environment(row, mode=mode, hint=hint, history=history, config=config)
        stats = run_episode(env, _Scripted(answers))
        assert stats["num_turns"] <= env.max_steps and isinstance(stats["correct_prediction"],
                                                                  bool)
    verdict = open_ended.parse_judge_prediction(env.open_ended_answers(),
                                                open_ended.strip_thinking(judge), config)
    assert set(verdict.values()) <= {0, 1}


# ---- what fuzzing found, kept (tests/data/fuzz/<area>/: reproducers of the issue-22 campaign,
# one per distinct traceback it met; the first byte of an upstream one picks the config) -------

KEPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "fuzz")


def kept(area: str) -> list[str]:
    folder = os.path.join(KEPT, area)
    return sorted(os.path.join(folder, n) for n in os.listdir(folder))


@pytest.mark.parametrize("path", kept("results"), ids=os.path.basename)
def test_kept_results_files(tmp_path, path):
    check_results(str(tmp_path / "r.jsonl"), open(path, "rb").read())


@pytest.mark.parametrize("path", kept("upstream_runtime"), ids=os.path.basename)
def test_kept_upstream_lines(path):
    data = open(path, "rb").read()
    check_upstream(("QuickDraw", "coco2014")[data[0] % 2] if data else "QuickDraw", data[1:],
                   ["A"])


@pytest.mark.parametrize("path", kept("openai_reply"), ids=os.path.basename)
def test_kept_replies(path):
    check_reply(open(path, "rb").read())
