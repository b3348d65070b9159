"""Fuzzing what the user hands a build: `--set` values for every declared parameter,
scenario manifests (a plug-in's manifest is its author's text), predictions files (JSONL, CSV,
Parquet) and keep lists.

Invariants: `--set` is refused with a one-line SystemExit(str) or accepted as a value that keeps
its parameter's rule (finite numbers, elements checked) and the manifest's rules across
parameters; a manifest loads or raises ManifestError, and a manifest that loads can judge any
value without raising; a predictions file reads as rows of the documented types or raises
PredictionsError; a keep list reads as {config: set of ids >= 0} or raises KeepListError. Memory
is bounded by the readers' caps (MAX_BYTES, MAX_ROWS), not by what a file claims.

The budget is PB_FUZZ_EXAMPLES examples per target (60 in the suite; e.g. PB_FUZZ_EXAMPLES=20000
for a longer run). Failures found while fuzzing are kept as explicit @example cases.
"""
from __future__ import annotations

import atexit
import io
import json
import math
import os
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_budget import FUZZ  # tests/fuzz/ (no __init__.py) is on sys.path

from conftest import EXTRA_SCENARIO_DIR
from proactivebench_builder.core import manifests
from proactivebench_builder.core.manifests import ManifestError
from proactivebench_builder.filters.leakage import KeepListError, keep_list_problem, load_keep_list
from proactivebench_builder.filters.predictions import (
    PredictionsError, read_predictions, unknown_configs_problem)
from proactivebench_builder.pipeline.commands.configure import parameter_overrides
from proactivebench_builder.transforms import config_aliases, load_scenarios, manifest_of

SCRATCH = tempfile.mkdtemp(prefix="pb-fuzz-parameters-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)

SCENARIOS = load_scenarios()
PARAMETERS = [(name, parameter) for name in sorted(SCENARIOS)
              for parameter in sorted(manifest_of(name)["parameters"])]

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-2 ** 70, 2 ** 70)
           | st.floats() | st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
# text close to what a user types, and YAML's own syntax
YAML_TEXT = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(["[", "]", "{", "}", ":", ",", " ", "-", "*a", "&a", "!!", "!!str",
                              "!!python/object:os.system", "!!binary", "!!float", "!!int",
                              "!!set", "!!omap", "?", "|", ">", "'", '"', "#", ".nan", ".inf",
                              "-.inf", "1e3", "0x1F", "0o7", "1_000", "yes", "no", "~", "null",
                              "2020-01-01", "\t", "\n", "%YAML 1.1\n---", "...", "\x00",
                              "\ufeff", "cardinal", "zoom", "1", "-1", "0.5"]),
             max_size=12).map("".join))


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _check_set(name: str, parameter: str, text: str) -> None:
    try:
        overrides = parameter_overrides([f"{name}.{parameter}={text}"], SCENARIOS)
    except SystemExit as stopped:
        assert isinstance(stopped.code, str) and "\n" not in stopped.code, stopped.code
        return
    value = overrides[name][parameter]
    manifest = manifest_of(name)
    assert _finite(value), (name, parameter, text, value)
    assert manifests.parameter_problem(manifest, parameter, value) is None
    assert manifests.constraint_problems(manifest, {**manifest["parameters"],
                                                    **overrides[name]}) == []


# ---- --set -----------------------------------------------------------------------------------

@FUZZ
@given(target=st.sampled_from(PARAMETERS), text=YAML_TEXT)
@example(target=("quickdraw", "samples_per_class"), text="[" * 5000)
@example(target=("quickdraw", "samples_per_class"), text="!!binary xyz")
@example(target=("quickdraw", "samples_per_class"), text="!!timestamp 2020-13-45")
@example(target=("quickdraw", "samples_per_class"), text="{[1]: 2}")
@example(target=("quickdraw", "samples_per_class"), text="!!float")
@example(target=("coco", "direction_weights"), text="{cardinal: &a 1, zoom: *a}")
@example(target=("coco", "context_margin"), text="1" + "0" * 400)
def test_set_text_is_refused_in_one_line_or_kept_to_its_rules(target, text):
    _check_set(*target, text)


@FUZZ
@given(target=st.sampled_from(PARAMETERS), value=VALUES)
def test_set_values_of_any_shape_are_refused_in_one_line_or_kept_to_their_rules(target, value):
    try:
        text = yaml.safe_dump(value, default_flow_style=True, width=10 ** 6).strip()
    except yaml.YAMLError:
        return
    if text.endswith("\n..."):
        text = text[:-4].strip()
    _check_set(*target, text)


# ---- manifests -------------------------------------------------------------------------------

with open(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml"), "rb") as _handle:
    FOCUS_TEXT = _handle.read()
FOCUS = yaml.safe_load(FOCUS_TEXT)
MANIFEST_NAME = "fuzzmanifest"   # not packaged: read from the scratch folder, as a plug-in's
RULE_KEYS = st.sampled_from(manifests.RULE_KEYS + ("typ", "kind"))
RULES = st.recursive(
    st.dictionaries(RULE_KEYS, SCALARS | st.sampled_from(list(manifests.TYPES)) | st.lists(
        SCALARS, max_size=3), max_size=3),
    lambda inner: st.dictionaries(RULE_KEYS, inner | SCALARS, max_size=3) | st.lists(inner,
                                                                                       max_size=2),
    max_leaves=8)
CHECKS = st.one_of(
    st.text(max_size=30),
    st.lists(st.sampled_from(["frames_per_item", "rows_per_shard", "classes", "len(", "sum(",
                              "min(", ")", "<", "<=", "==", "!=", " and ", " or ", "not ", "+",
                              "-", "*", "/", "0", "2", "1e308", "__import__", "lambda x: x",
                              ".", "[", "]", "if", "else", "'a'", "**"]),
             max_size=10).map(" ".join))


def _mutated_manifest(data) -> dict:
    manifest = json.loads(json.dumps(FOCUS))
    manifest["name"] = MANIFEST_NAME
    for _ in range(data.draw(st.integers(0, 4))):
        where = data.draw(st.sampled_from(["top", "parameters", "rules", "constraints"]))
        if where == "top":
            key = data.draw(st.sampled_from(sorted(manifest) + ["parameter_rules",
                                                                "parameter_constraints"]))
            manifest[key] = data.draw(VALUES)
        elif where == "parameters" and isinstance(manifest.get("parameters"), dict):
            key = data.draw(st.sampled_from(sorted(manifest["parameters"]) + ["extra"]))
            manifest["parameters"][key] = data.draw(VALUES)
        elif where == "rules":
            rules = manifest.setdefault("parameter_rules", {})
            if isinstance(rules, dict) and isinstance(manifest.get("parameters"), dict) \
                    and manifest["parameters"]:
                key = data.draw(st.sampled_from(sorted(manifest["parameters"])))
                rules[key] = data.draw(RULES)
        else:
            manifest["parameter_constraints"] = data.draw(st.lists(
                st.fixed_dictionaries({"check": CHECKS}, optional={"why": st.text(max_size=5)}),
                max_size=3))
    return manifest


def _load(text: bytes) -> dict | None:
    with open(os.path.join(SCRATCH, f"{MANIFEST_NAME}.yaml"), "wb") as handle:
        handle.write(text)
    manifests.load_manifest.cache_clear()
    try:
        return manifests.load_manifest(MANIFEST_NAME, SCRATCH)
    except ManifestError as err:
        assert str(err)
        return None


@FUZZ
@given(data=st.data())
def test_a_manifest_loads_or_is_one_manifest_error_and_judges_any_value(data):
    manifest = _load(yaml.safe_dump(_mutated_manifest(data), allow_unicode=True).encode())
    if manifest is None:
        return
    for parameter in manifest["parameters"]:
        problem = manifests.parameter_problem(manifest, parameter, data.draw(VALUES))
        assert problem is None or isinstance(problem, str)
    params = dict(manifest["parameters"])
    params.update(data.draw(st.dictionaries(st.sampled_from(sorted(params) or ["x"]), VALUES,
                                            max_size=2)))
    assert all(isinstance(p, str) for p in manifests.constraint_problems(manifest, params))


@FUZZ
@given(text=st.binary(max_size=300) | YAML_TEXT.map(str.encode))
@example(text=b"[" * 5000)
@example(text=b"\xff\xfe")
@example(text=b"!!float")  # PyYAML: IndexError, not a YAMLError
@example(text=b"name: fuzzmanifest\nparameters: [1]\n")
@example(text=FOCUS_TEXT.replace(b"name: focus", b"name: fuzzmanifest").replace(
    b"frames_per_item: {type: int, min: 2}", b"frames_per_item: {type: {}}"))  # unhashable
def test_manifest_bytes_load_or_are_one_manifest_error(text):
    _load(text)


# ---- predictions -----------------------------------------------------------------------------

ALIASES = config_aliases()
ROW = st.fixed_dictionaries({}, optional={
    "model": st.text(max_size=4) | SCALARS, "config": st.sampled_from(
        ["QuickDraw", "Quickdraw", "MVP-N", "coco"]) | SCALARS,
    "key": st.text(max_size=6) | SCALARS, "id": SCALARS, "correct": SCALARS,
    "schema_version": SCALARS})


def _write(name: str, data: bytes) -> str:
    path = os.path.join(SCRATCH, name)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _check_predictions(path: str) -> None:
    try:
        rows = read_predictions(path)
        problem = unknown_configs_problem(rows, path, ALIASES)
    except PredictionsError as err:
        assert str(err) and "\n" not in str(err)
        return
    assert problem is None or isinstance(problem, str)
    for row in rows:
        assert isinstance(row["model"], str) and isinstance(row["config"], str)
        assert row["key"] is None or isinstance(row["key"], str)
        assert row["id"] is None or type(row["id"]) is int and row["id"] >= 0
        assert type(row["correct"]) is bool


@FUZZ
@given(suffix=st.sampled_from([".jsonl", ".csv", ".parquet"]), data=st.binary(max_size=400))
@example(suffix=".jsonl", data=b"[1]\n")
@example(suffix=".jsonl", data=b"[" * 100000)
@example(suffix=".csv", data=b"model,config,key,correct\n\"" + b"k" * 140000 + b"\"\n")
@example(suffix=".csv", data=b"model,config,key,correct\rm,QuickDraw,k,true\r")
@example(suffix=".parquet", data=b"PAR1\x00\x00\x00\x00PAR1")
def test_predictions_bytes_read_or_are_one_predictions_error(suffix, data):
    _check_predictions(_write("p" + suffix, data))


def _parquet(rows: list[dict]) -> bytes | None:
    try:
        table = pa.Table.from_pylist(rows)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


@FUZZ
@given(rows=st.lists(ROW, max_size=5), form=st.sampled_from(["jsonl", "csv", "parquet"]))
@example(rows=[{"model": "m", "config": "QuickDraw", "id": 1.9, "correct": True}], form="jsonl")
@example(rows=[{"model": "m", "config": "QuickDraw", "id": True, "correct": True}], form="jsonl")
def test_predictions_rows_of_any_types_read_or_are_one_predictions_error(rows, form):
    if form == "jsonl":
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    elif form == "csv":
        columns = sorted({c for r in rows for c in r})
        data = (",".join(columns) + "\n" + "".join(
            ",".join(json.dumps(r.get(c)) if c in r else "" for c in columns) + "\n"
            for r in rows)).encode()
    else:
        data = _parquet(rows)
        if data is None:
            return
    _check_predictions(_write("rows." + form, data))


# ---- keep lists ------------------------------------------------------------------------------

def _check_keep_list(path: str, configs: list[str]) -> None:
    try:
        kept = load_keep_list(path)
        problem = keep_list_problem(path, kept, configs, ALIASES)
    except KeepListError as err:
        assert str(err) and "\n" not in str(err)
        return
    assert problem is None or isinstance(problem, str)
    for config, ids in kept.items():
        assert isinstance(config, str) and isinstance(ids, set)
        assert all(type(i) is int and i >= 0 for i in ids)


@FUZZ
@given(data=st.binary(max_size=300) | VALUES.map(lambda v: json.dumps(v).encode()),
       configs=st.lists(st.sampled_from(["QuickDraw", "MVP-N", "Focus"]), max_size=2))
@example(data=b"[1, 2]", configs=["QuickDraw"])
@example(data=b'{"QuickDraw": [null]}', configs=["QuickDraw"])
@example(data=b'{"QuickDraw": [1e400]}', configs=["QuickDraw"])
@example(data=b'{"kept_ids": 3}', configs=[])
@example(data=b"[" * 100000, configs=[])
@example(data=b'{"\\n": null}', configs=[])  # a config name holding a line break: one line
def test_a_keep_list_reads_or_is_one_keep_list_error(data, configs):
    _check_keep_list(_write("keep.json", data), configs)


@FUZZ
@given(kept=st.dictionaries(st.sampled_from(["QuickDraw", "Quickdraw", "MVP-N", "kept_ids", ""])
                            | st.text(max_size=6), VALUES, max_size=3))
def test_a_keep_list_of_any_shape_reads_or_is_one_keep_list_error(kept):
    _check_keep_list(_write("keep2.json", json.dumps(kept).encode()), ["QuickDraw"])


if __name__ == "__main__":  # a longer run: PB_FUZZ_EXAMPLES=20000 python -m pytest THIS_FILE
    pytest.main([__file__, "-q"])
