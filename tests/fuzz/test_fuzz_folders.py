"""Fuzzing what a build folder holds: reports/build.json as the checker of build
folders reads it, the dataset card's front matter, and `validate`'s per-row checks.

Invariants: the checker returns problem lines (str), never raises, for any build.json (structured
mutations of a real one, and raw bytes); every reader of the card gets a mapping or a problem
line; `validate`'s row checks return problem lines for any values the record schema's column
types hold, in bounded time (no loop or list sized by a value in the row).

The budget is PB_FUZZ_EXAMPLES examples per target (60 in the suite; e.g. PB_FUZZ_EXAMPLES=20000
for a longer run). Failures found while fuzzing are kept as explicit @example cases.
"""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_budget import FUZZ  # tests/fuzz/ (no __init__.py) is on sys.path

from proactivebench_builder.core import buildfolder
from proactivebench_builder.core.layout import BUILD_REPORT, CARD
from proactivebench_builder.core.records import arrow_schema
from proactivebench_builder.pipeline import publish
from proactivebench_builder.pipeline.commands import validate


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=16)


# ---- a small build folder whose build.json and card the fuzzer rewrites --------------------------

SHARD = "QuickDraw/test-00000-of-00001.parquet"
PATHS = [SHARD, "../outside.bin", "/dev/zero", "reports", "reports/pipe", "README.md", "a//b",
         "", "./x", "upstream/QuickDraw_preprocessed.jsonl", "upstream/link", "\x00", "x" * 300,
         "QuickDraw", "QuickDraw/test-00000-of-00001.parquet/x"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """DIR with one shard, a card naming it, an export of one file, a link and a FIFO."""
    root = str(tmp_path_factory.mktemp("fuzz_folder") / "built")
    os.makedirs(os.path.join(root, "QuickDraw"))
    os.makedirs(os.path.join(root, "reports"))
    os.makedirs(os.path.join(root, "upstream"))
    pq.write_table(pa.table({"key": ["a"]}), os.path.join(root, SHARD))
    with open(os.path.join(root, "upstream", "QuickDraw_preprocessed.jsonl"), "w") as handle:
        handle.write("{}\n")
    os.symlink("/etc/hostname", os.path.join(root, "upstream", "link"))
    os.mkfifo(os.path.join(root, "reports", "pipe"))
    with open(os.path.join(os.path.dirname(root), "outside.bin"), "wb") as handle:
        handle.write(b"outside")
    entry = base_file_entry(root)
    with open(os.path.join(root, CARD), "w", encoding="utf-8") as handle:
        handle.write(card_text(buildfolder.dataset_info([entry])))
    return root


def base_file_entry(root: str) -> dict:
    size, sha256 = buildfolder.size_and_sha256(root, SHARD)
    return {"path": SHARD, "bytes": size, "sha256": sha256, "config": "QuickDraw",
            "split": "test", "rows": 1}


def card_text(infos: list[dict]) -> str:
    meta = {"configs": [{"config_name": "QuickDraw", "data_files": [
        {"split": "test", "path": "QuickDraw/test-*.parquet"}]}], "dataset_info": infos}
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n# card\n"


def base_report(root: str) -> dict:
    return {"status": "ok", "files": [base_file_entry(root)],
            "scenarios": {"quickdraw": {"config": "QuickDraw", "raw_items": 1, "samples": 1,
                                        "kept": 1, "dead_letters": 0, "excluded": {},
                                        "accounted": True, "rows": {"test": 1},
                                        "shards": {"test": 1}}},
            "upstream_files": [], "upstream_export": True, "stamp": {"seed": 0},
            "sources": {}}


def mutated(base, draw, depth: int = 0):
    """`base` with some values replaced by any JSON value, recursively."""
    if draw(st.integers(0, 9)) == 0 or depth > 3:
        return draw(JSON)
    if isinstance(base, dict):
        out = {k: mutated(v, draw, depth + 1) for k, v in base.items()
               if draw(st.integers(0, 12))}  # sometimes a field is missing
        if draw(st.booleans()):
            out[draw(st.sampled_from(["path", "bytes", "files", "scenarios", "train", "extra"]))] \
                = draw(JSON)
        return out
    if isinstance(base, list):
        return [mutated(v, draw, depth + 1) for v in base] + draw(st.lists(JSON, max_size=2))
    return base


def draw_report(draw, root: str):
    """A mutation of a sound build.json, often with one more listed path from PATHS."""
    report = mutated(base_report(root), draw)
    if isinstance(report, dict) and draw(st.booleans()):
        key = draw(st.sampled_from(["files", "upstream_files"]))
        entry = {"path": draw(st.sampled_from(PATHS) | st.text(max_size=20)), "bytes": 1,
                 "sha256": "0" * 64, "config": "QuickDraw", "split": "test", "rows": 1}
        if isinstance(report.get(key), list):
            report[key].append(entry)
        else:
            report[key] = [entry]
    return report


def assert_problem_lines(problems) -> None:
    assert isinstance(problems, list)
    assert all(isinstance(p, str) and p for p in problems), problems


def write_report(root: str, data: bytes) -> None:
    with open(os.path.join(root, BUILD_REPORT), "wb") as handle:
        handle.write(data)


def check_every_reader(root: str) -> None:
    assert_problem_lines(buildfolder.folder_problems(root, upstream=True))
    assert_problem_lines(buildfolder.check_build_report(root)[1])
    assert_problem_lines(validate.validate_folder(root, decode_frames=False))
    try:
        publish.validate_for_publishing(root, upstream=True)
    except publish.PublishError:
        pass


@FUZZ
@given(data=st.data())
def test_build_json_of_any_shape_is_problem_lines(folder, data):
    report = draw_report(data.draw, folder)
    write_report(folder, json.dumps(report).encode("utf-8"))
    check_every_reader(folder)


@FUZZ
@given(raw=st.binary(max_size=200) | st.sampled_from([b"[" * 100000, b'{"a":' * 50000,
                                                      b"\xff\xfe", b"", b"null", b"1e400"]))
@example(raw=b'{"status": "ok", "files": [{"bytes": 1}]}')
@example(raw=b'{"status": "ok", "scenarios": []}')
@example(raw=b'{"status": "ok", "files": [{"path": "/dev/zero", "bytes": 1, "sha256": "x", '
             b'"config": "c", "split": "test", "rows": 1}]}')
def test_build_json_of_any_bytes_is_problem_lines(folder, raw):
    write_report(folder, raw)
    check_every_reader(folder)


# ---- the card's front matter ---------------------------------------------------------------------

YAML_BITS = st.sampled_from([
    "configs:", "- config_name: QuickDraw", "  data_files:", "  - split: test",
    "    path: QuickDraw/test-*.parquet", "dataset_info:", "- description: x", "&a [1, 2]",
    "*a", "!!python/object:os.system", "[[[[", "{a: ", "'", '"', "- - - -", ": :", "  ",
    "data_files: 3", "configs: *a", "a: &a [x, x]", "path: [1, 2]", "---", "...", "\t",
    "config_name: [x]", "? [a]\n: b"])


@st.composite
def front_matters(draw):
    if draw(st.booleans()):
        meta = mutated({"configs": [{"config_name": "QuickDraw", "data_files": [
            {"split": "test", "path": "QuickDraw/test-*.parquet"}]}],
            "dataset_info": [{"config_name": "QuickDraw", "description": "x"}]}, draw)
        body = yaml.safe_dump(meta, allow_unicode=True)
    else:
        body = "\n".join(draw(st.lists(YAML_BITS | st.text(max_size=10), max_size=12)))
    return "---\n" + body + "\n---\n" + draw(st.text(max_size=20))


@FUZZ
@given(text=front_matters())
@example(text="---\na0: &a0 [x,x]\na1: &a1 [*a0,*a0]\nconfigs: *a1\n---\n")
@example(text="---\ndataset_info:\n- config_name: [x]\n  description: [y]\n---\n")
@example(text="---\n- a\n---\n")
@example(text="---\n" + "[" * 5000 + "\n---\n")
def test_a_card_of_any_front_matter_is_a_mapping_or_a_problem_line(folder, text):
    meta, problem = buildfolder.front_matter(text)
    assert (isinstance(meta, dict) and problem is None) or (meta is None and problem)
    with open(os.path.join(folder, CARD), "w", encoding="utf-8") as handle:
        handle.write(text)
    report = base_report(folder)
    assert_problem_lines(buildfolder.card_problems(folder, report))
    configs, problems = buildfolder.card_configs(folder)
    assert_problem_lines(problems)
    assert_problem_lines(buildfolder.check_card(folder, buildfolder.shard_folders(folder)))
    assert isinstance(publish.read_card_configs(folder), list)
    assert all(isinstance(g, str) for g in publish.card_globs(configs or []))


# ---- validate's per-row checks -----------------------------------------------------------------

def value_for(kind: pa.DataType):
    """Any value a column of `kind` holds (None included)."""
    if pa.types.is_int64(kind):
        plain = st.integers(-2 ** 63, 2 ** 63 - 1) | st.integers(-20, 50)
    elif pa.types.is_floating(kind):
        plain = st.floats() | st.floats(-100, 100)
    elif pa.types.is_boolean(kind):
        plain = st.booleans()
    elif pa.types.is_string(kind):
        plain = st.text(max_size=30) | st.sampled_from(
            ["I cannot answer this question.", "Rewind the video.", "left", "zoom out", "up"])
    elif pa.types.is_binary(kind):
        plain = st.binary(max_size=30)
    elif pa.types.is_list(kind):
        plain = st.lists(value_for(kind.value_type), max_size=6)
    elif pa.types.is_struct(kind):
        plain = st.fixed_dictionaries({kind.field(i).name: value_for(kind.field(i).type)
                                       for i in range(kind.num_fields)})
    else:
        raise AssertionError(f"no strategy for {kind}")
    return st.none() | plain


@pytest.fixture(scope="module")
def first_rows(built_miniature) -> dict[str, dict]:
    """The first row of the pool of every config of the miniature build (frames included)."""
    from proactivebench_builder.core.buildfolder import shard_folders

    rows = {}
    for (_, config), names in sorted(shard_folders(built_miniature).items()):
        rows.setdefault(config, pq.read_table(os.path.join(built_miniature, config, names[0]))
                        .slice(0, 1).to_pylist()[0])
    return rows


COLUMNS = [f for f in arrow_schema() if f.name != "frames"]


@FUZZ
@given(data=st.data())
def test_validate_row_checks_are_problem_lines_in_bounded_time(first_rows, data):
    config = data.draw(st.sampled_from(sorted(first_rows)))
    row = dict(first_rows[config])
    for field in data.draw(st.lists(st.sampled_from(COLUMNS), max_size=5, unique_by=lambda f:
                                    f.name)):
        row[field.name] = data.draw(value_for(field.type))
    assert_problem_lines(validate.row_problems(row, config))


@pytest.mark.parametrize("config, change", [
    ("ChangeIt", {"max_steps": 10 ** 9}),
    ("ChangeIt", {"max_steps": 10 ** 18, "step_size": 1}),
    ("Realistic-Occlusion-Dataset", {"num_images": 2 ** 62}),
    ("QuickDraw", {"first_image": -(2 ** 62), "reference_image": 2 ** 62}),
])
def test_huge_step_values_are_one_problem_not_a_loop(first_rows, config, change):
    row = dict(first_rows[config], **change)
    problems = validate.row_problems(row, config)
    assert any("beyond" in p for p in problems), problems


@pytest.mark.parametrize("config, change", [  # found by the fuzzer (a TypeError before)
    ("ChangeIt", {"frame_ids": [None]}),
    ("ChangeIt", {"step_size": None, "max_steps": None}),
    ("coco2014", {"horizontal_step": float("inf")}),
    ("coco2014", {"crop": None, "direction": None}),
])
def test_values_the_step_checks_cannot_take_are_problem_lines(first_rows, config, change):
    problems = validate.row_problems(dict(first_rows[config], **change), config)
    assert_problem_lines(problems)
    assert problems


# ---- the previous build's reports an update reads, and a release's JSONL ids ---------------------

JSON_LINES = st.lists(st.one_of(JSON.map(lambda v: json.dumps(v).encode()),
                                st.binary(max_size=40)), max_size=6).map(b"\n".join)


@FUZZ
@given(dead=JSON_LINES, filters=st.one_of(JSON.map(lambda v: json.dumps(v).encode()),
                                          st.binary(max_size=60)))
@example(dead=b"[" * 50000, filters=b"[1]")
@example(dead=b'{"scenario": "a", "path": "p", "reason": "r", "key": null}', filters=b"{}")
def test_the_previous_reports_of_an_update_are_read_or_refused_in_one_line(tmp_path_factory,
                                                                           dead, filters):
    """partial_rebuild's readers of reports/dead_letters.jsonl and reports/filter.json (which
    no digest covers): dead letters of the builder's shape or a dict, else UpdateRefused in one
    line."""
    from proactivebench_builder.core.layout import DEAD_LETTERS, FILTER_REPORT
    from proactivebench_builder.pipeline import partial_rebuild

    output = str(tmp_path_factory.mktemp("update"))
    os.makedirs(os.path.join(output, "reports"))
    for name, data in ((DEAD_LETTERS, dead), (FILTER_REPORT, filters)):
        with open(os.path.join(output, name), "wb") as handle:
            handle.write(data)
    for read in (partial_rebuild.previous_dead_letters,
                 lambda o: partial_rebuild.read_json(o, FILTER_REPORT)):
        try:
            value = read(output)
        except partial_rebuild.UpdateRefused as err:
            assert "\n" not in str(err)
            continue
        assert isinstance(value, (list, dict))


@FUZZ
@given(lines=JSON_LINES)
@example(lines=b"[" * 100000)
@example(lines=b'{"id": 1e400}\n{"id": "x"}\n[1]\n{"id": 3}')
def test_the_ids_of_a_release_jsonl_are_counted_or_skipped(tmp_path_factory, lines):
    """import_check.scan_config (what --import_upstream reads of every record before any work,
    and the ids --keep_list released counts): any line is a record judged good, or a bad one
    with its line number and a one-line reason, never an exception."""
    from proactivebench_builder.pipeline import import_check

    folder = str(tmp_path_factory.mktemp("release"))
    with open(os.path.join(folder, "QuickDraw_preprocessed.jsonl"), "wb") as handle:
        handle.write(lines)
    scan = import_check.scan_config(folder, "QuickDraw", "quickdraw")
    assert all(isinstance(i, int) for i, _ in scan.ids)
    assert scan.records == len(scan.rows) + len(scan.bad)
    assert all(isinstance(n, int) and "\n" not in reason for n, _, reason in scan.bad)
