"""What the user hands a build (issue 22, points 5 and 6, and the inventory's sections B, C, D):
`--set` values, the scenarios' cross-parameter rules, Beam's worker count, the output folder's
lock file, PROACTIVEBENCH_SCENARIO_PATH, predictions files and keep lists. Each bad one stops the
command before any work in one line (exit 2; the lock file: exit 1) naming what is wrong, never a
traceback, never a silently different build. Each test reproduced its fault before the fix."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import EXTRA_SCENARIO_DIR, RUNNER, builds, run
from proactivebench_builder.core.errors import OutputError
from proactivebench_builder.core.layout import LOCK
from proactivebench_builder.pipeline.commands import main as main_command
from proactivebench_builder.pipeline.folder_lock import BuildLock

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PIPELINE = os.path.join(REPO, "run_pipeline.py")


def refused_build(capsys, tmp_path, *args: str, scenarios: str = "quickdraw") -> str:
    """Run a build expected to stop before any work; returns its one stderr line. The sources
    root does not exist: a build that got past the check would stop there, naming it instead."""
    output = str(tmp_path / "out")
    try:
        given = {arg.partition("=")[0] for arg in args}  # a flag may be given once
        defaults = [f for f in (f"--output={output}", f"--sources_root={tmp_path}/nosources",
                                f"--scenarios={scenarios}", RUNNER)
                    if f.partition("=")[0] not in given]
        code = main_command.main([*defaults, *args])
    except SystemExit as stopped:  # argparse's own one-line error for a flag's value
        code = stopped.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, lines)
    assert "source folders not found" not in lines[0], lines[0]
    assert not os.path.exists(output)
    return lines[0]


# ---- B. --set values -------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    "[1", "{a: 1", "a: b: c", "*", "*anchor", "&a [*a, *a]", "!!python/object/apply:os.system [id]",
    "!!binary xyz", "'unclosed", "[" * 5000 + "]" * 5000, "\x00", "\ufeff[1"])
def test_a_set_value_that_is_not_plain_yaml_is_one_line(capsys, tmp_path, value):
    line = refused_build(capsys, tmp_path, f"--set=quickdraw.samples_per_class={value}")
    assert "quickdraw.samples_per_class" in line


@pytest.mark.parametrize("scenario, item", [
    ("quickdraw", "quickdraw.train_ambiguous_fraction=.nan"),
    ("coco", "coco.context_margin=.inf"),
    ("coco", "coco.min_box_side_px=.NaN"),
    ("changeit", "changeit.seek_offset_s=.inf"),
    ("changeit", "changeit.duration_tolerance_s=-.inf"),
    ("coco", "coco.direction_weights={cardinal: .nan, diagonal: 1, zoom: 1}"),
    ("vsod", "vsod.strong_occlusion={min_union_fraction: .nan, min_frames: 1}"),
])
def test_a_number_that_is_not_finite_is_refused(capsys, tmp_path, scenario, item):
    line = refused_build(capsys, tmp_path, f"--set={item}", scenarios=scenario)
    assert item.split("=")[0] in line and "finite" in line, line


@pytest.mark.parametrize("scenario, items, named", [
    ("coco", ["coco.granularity_min=5", "coco.granularity_max=3"], "granularity_min"),
    ("coco", ["coco.granularity_min=6"], "granularity_max"),       # one side, against the other's default
    ("mvpn", ["mvpn.min_views=6", "mvpn.max_views=2"], "min_views"),
    ("quickdraw", ["quickdraw.render_padding=200"], "render_padding"),
    ("quickdraw", ["quickdraw.render_size=16", "quickdraw.render_padding=8"], "render_size"),
    ("changeit", ["changeit.target_frames=61"], "max_frames"),
    ("rod", ["rod.first_image=14"], "frames_per_sequence"),
    ("rod", ["rod.reference_image=20"], "frames_per_sequence"),
    ("imagenet_c", ["imagenet_c.wrong_enhancements=8"], "wrong_enhancements"),
    ("coco", ["coco.direction_weights={cardinal: 0, diagonal: 0, zoom: 0}"], "direction_weights"),
])
def test_parameters_that_contradict_each_other_stop_before_any_work(capsys, tmp_path, scenario,
                                                                    items, named):
    """Today each made every raw item a dead letter (or flipped QuickDraw's drawings): the build
    failed with 'too many bad inputs', or passed with a wrong benchmark."""
    line = refused_build(capsys, tmp_path, *(f"--set={i}" for i in items), scenarios=scenario)
    assert f"{scenario}:" in line or f"{scenario}." in line, line
    assert named in line, line


@pytest.mark.parametrize("scenario, item, named", [
    ("coco", "coco.direction_weights={cardinal: -1, diagonal: 0, zoom: 0}", "cardinal"),
    ("coco", "coco.direction_weights={Cardinal: 1}", "Cardinal"),
    ("coco", "coco.direction_weights={cardinal: yes}", "cardinal"),
    ("coco", "coco.supercategory_affinity={person: [1]}", "person"),
    ("coco", "coco.supercategory_affinity={person: animal}", "person"),
    ("coco", "coco.granularity_min=1", "granularity_min"),
    ("quickdraw", "quickdraw.miniature_categories=[1, 2]", "miniature_categories"),
    ("vsod", "vsod.strong_occlusion={min_union_fraction: 2}", "min_union_fraction"),
    ("vsod", "vsod.strong_occlusion={min_frame: 1}", "min_frame"),
    ("vsod", "vsod.image_extensions=[.jpg, 3]", "image_extensions"),
    ("changeit", "changeit.object_labels=[a]", "object_labels"),
    ("rod", "rod.occluders={bluebl: [1]}", "bluebl"),
    ("quickdraw", "quickdraw.rows_per_shard=100000000000000000000000", "rows_per_shard"),
    # written from the manifest alone (pipeline/miniature.py): a --set was stamped, not used
    ("quickdraw", "quickdraw.miniature_drawings_per_category=3", "miniature source"),
])
def test_the_items_of_a_list_or_mapping_parameter_are_checked(capsys, tmp_path, scenario, item,
                                                              named):
    line = refused_build(capsys, tmp_path, f"--set={item}", scenarios=scenario)
    assert item.split("=")[0] in line and named in line, line


def test_consistent_overrides_of_related_parameters_pass(tmp_path):
    """Both sides moved together: no rule is broken (the checks judge the values in force)."""
    from proactivebench_builder.pipeline.commands.configure import parameter_overrides
    from proactivebench_builder.transforms import load_scenarios

    scenarios = load_scenarios()
    got = parameter_overrides(["coco.granularity_min=6", "coco.granularity_max=7",
                               "coco.direction_weights={zoom: 2}", "mvpn.min_views=3",
                               "quickdraw.render_size=64", "quickdraw.render_padding=8"],
                              scenarios)
    assert got["coco"] == {"granularity_min": 6, "granularity_max": 7,
                           "direction_weights": {"zoom": 2}}
    assert got["quickdraw"] == {"render_size": 64, "render_padding": 8}


def test_every_manifest_keeps_its_own_cross_parameter_rules():
    from proactivebench_builder.core.manifests import constraint_problems
    from proactivebench_builder.transforms import load_scenarios, manifest_of

    for name in load_scenarios():
        manifest = manifest_of(name)
        assert constraint_problems(manifest, manifest["parameters"]) == [], name


def test_a_manifest_rule_naming_an_unknown_parameter_or_operation_is_refused():
    from proactivebench_builder.core.manifests import ManifestError, check_constraints_declared

    base = {"name": "x", "parameters": {"a": 1, "b": 2}}
    check_constraints_declared(dict(base, parameter_constraints=[{"check": "a <= b"}]))
    for bad in ("a <= c", "__import__('os')", "a.__class__", "(lambda: 1)()", "a if b else 1",
                "[x for x in b]", "a <="):
        with pytest.raises(ManifestError):
            check_constraints_declared(dict(base, parameter_constraints=[{"check": bad}]))


def test_mvpn_class_names_file_is_read_after_the_overrides(tmp_path, capsys):
    """MVP-N read its class-name table in __init__, before `--set` applied: the override was
    ignored but stamped in the card as used."""
    from proactivebench_builder.transforms.mvpn.scenario import MVPN

    scenario = MVPN(0, str(tmp_path))
    scenario.params["class_names_file"] = "imagenet_classes.json"
    assert scenario.class_names == {str(k): str(v) for k, v in
                                    scenario.data_file("imagenet_classes.json").items()}
    line = refused_build(capsys, tmp_path, "--set=mvpn.class_names_file=no_such_file.yaml",
                         scenarios="mvpn")
    assert "mvpn.class_names_file" in line and "no_such_file.yaml" in line


@pytest.mark.parametrize("name", ["../../../../../../etc/hostname", "/etc/hostname",
                                  "sub/names.yaml", ".."])
def test_a_data_file_name_cannot_leave_its_folder(capsys, tmp_path, name):
    line = refused_build(capsys, tmp_path, f"--set=mvpn.class_names_file={name}",
                         scenarios="mvpn")
    assert "mvpn.class_names_file" in line


# ---- C. flags, the output folder's lock, the scenario path -----------------------------------

@pytest.mark.parametrize("value, says", [("-1", "at least 1"), ("0", "at least 1"),
                                         ("1000", "core")])
def test_an_unusable_worker_count_is_one_line(capsys, tmp_path, value, says):
    line = refused_build(capsys, tmp_path, f"--direct_num_workers={value}")
    assert "--direct_num_workers" in line and says in line, line


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    output, victim = tmp_path / "out", tmp_path / "victim.txt"
    output.mkdir()
    victim.write_text("precious content")
    os.symlink(victim, output / LOCK)
    with pytest.raises(OutputError, match=LOCK) as refused:
        with BuildLock(str(output)):
            pass
    assert "link" in str(refused.value)
    assert victim.read_text() == "precious content"


@pytest.mark.build
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_lock_file_that_is_not_a_regular_file_is_one_line_naming_it(tmp_path, kind):
    output = tmp_path / "out"
    output.mkdir()
    if kind == "fifo":
        os.mkfifo(output / LOCK)
    else:
        (output / LOCK).mkdir()
    done = subprocess.run([sys.executable, RUN_PIPELINE, f"--output={output}", "--scenarios=quickdraw",
                           "--no_train", RUNNER], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    lines = [line for line in done.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(output / LOCK) in lines[0], lines


@pytest.fixture(scope="module")
@builds
def quickdraw_build(tmp_path_factory, miniature_root) -> str:
    output = str(tmp_path_factory.mktemp("edges") / "build")
    run(output, miniature_root, "quickdraw", "--no_train", "--no_upstream_export")
    return output


@pytest.mark.parametrize("flag, says", [
    ("--source=quickdraw=http://127.0.0.1:9/qd", "not the network"),
    ("--sources_root=https://127.0.0.1:9/sources", "not the network"),
    ("--sources_root=nosuch://x", "Protocol not known"),
    ("--import_upstream=http://127.0.0.1:9/release", "not the network"),
    ("--import_upstream=nosuch://x/release", "Protocol not known"),
])
def test_a_source_url_the_build_may_not_read_is_one_line(capsys, tmp_path, flag, says):
    """Today: an ImportError (HTTPFileSystem needs aiohttp) or ValueError traceback."""
    line = refused_build(capsys, tmp_path, flag)
    assert flag.split("=")[-1] in line and says in line, line


def test_an_upstream_release_whose_jsonl_is_a_fifo_is_one_line(capsys, tmp_path):
    folder = tmp_path / "release"
    folder.mkdir()
    os.mkfifo(folder / "QuickDraw_preprocessed.jsonl")
    line = refused_build(capsys, tmp_path, f"--import_upstream={folder}")
    assert "QuickDraw_preprocessed.jsonl" in line and "FIFO" in line, line


@pytest.mark.parametrize("content", [b"[1]", b"7", b"[" * 4096, b"\xff"])
def test_a_held_lock_whose_file_names_no_holder_is_refused_as_held(tmp_path, content):
    """The refusal read the holder's JSON and called .get on whatever it was (a traceback)."""
    import fcntl

    from proactivebench_builder.core.errors import FolderLocked

    output = tmp_path / "out"
    output.mkdir()
    (output / LOCK).write_bytes(content)
    with open(output / LOCK, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another build holds it
        with pytest.raises(FolderLocked, match="another build"):
            with BuildLock(str(output)):
                pass
    marker = f"memory://lock-test-{os.getpid()}-{len(content)}/out"
    from proactivebench_builder.core import fileio

    fileio.write_bytes_atomic(fileio.join(marker, LOCK), content)
    with pytest.raises(FolderLocked, match="another build"):
        with BuildLock(marker):
            pass


def _shadowing_plugins(tmp_path) -> str:
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml"), folder)
    # a plug-in named like a standard module: imported by name, the standard one came instead
    shutil.copy(os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py"), folder / "calendar.py")
    return str(folder)


@pytest.mark.build
def test_a_plugin_named_like_a_standard_module_registers_and_shadows_nothing(tmp_path):
    folder = _shadowing_plugins(tmp_path)
    code = textwrap.dedent("""
        import calendar
        from proactivebench_builder.transforms import load_scenarios
        scenarios = load_scenarios()
        import calendar as again
        print(sorted(scenarios), hasattr(again, "monthrange"), again is calendar)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=folder))
    assert done.returncode == 0, done.stderr
    assert "'focus'" in done.stdout and "True True" in done.stdout, done.stdout


@pytest.mark.build
def test_two_plugin_folders_with_modules_of_one_name_both_load(tmp_path):
    """Each module is its own, by path: a `scenario.py` in two folders is two modules."""
    first, second = tmp_path / "one", tmp_path / "two"
    for folder, name in ((first, "focus"), (second, "blur")):
        folder.mkdir()
        source = open(os.path.join(EXTRA_SCENARIO_DIR, "focus_scenario.py")).read()
        manifest = open(os.path.join(EXTRA_SCENARIO_DIR, "focus.yaml")).read()
        if name == "blur":
            source = source.replace('name = "focus"', 'name = "blur"').replace(
                'config_name = "Focus"', 'config_name = "Blur"')
            manifest = manifest.replace("name: focus", "name: blur").replace(
                "config_name: Focus", "config_name: Blur")
        (folder / "scenario.py").write_text(source)
        (folder / f"{name}.yaml").write_text(manifest)
    code = ("from proactivebench_builder.transforms import load_scenarios; "
            "s = load_scenarios(); print(sorted(s), s['blur'].read_manifest()['config_name'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=os.pathsep.join(
                              [str(first), str(second)])))
    assert done.returncode == 0, done.stderr
    assert "'blur'" in done.stdout and "'focus'" in done.stdout and "Blur" in done.stdout


@pytest.mark.parametrize("command", [
    [RUN_PIPELINE, "validate", "{data}"],
    [RUN_PIPELINE, "inspect", "{data}"],
    [RUN_PIPELINE, "publish", "{data}", "--to", "{data}-published", "--dry_run"],
    ["-m", "proactivebench_builder.runtime", "evaluate", "--data", "{data}", "--model", "oracle",
     "--results", "{data}/r.jsonl"],
])
@pytest.mark.parametrize("module, says", [
    (None, "is not a folder"),
    ("def oops(:\n", "SyntaxError"),
    ("import no_such_package_here\n", "ModuleNotFoundError"),
])
def test_an_unusable_scenario_path_is_one_line_in_every_command(tmp_path, quickdraw_build, command,
                                                                module, says):
    folder = tmp_path / "plugins"
    if module is not None:
        folder.mkdir()
        (folder / "broken_scenario.py").write_text(module)
    data = tmp_path / "data"
    shutil.copytree(quickdraw_build, data)
    args = [a.replace("{data}", str(data)) for a in command]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path),
                          env=dict(os.environ, PROACTIVEBENCH_SCENARIO_PATH=str(folder)))
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, \
        done.stderr[-2000:]
    assert says in lines[0] and str(folder) in lines[0], lines


# ---- D. predictions and keep lists -----------------------------------------------------------

GOOD = {"model": "m", "config": "QuickDraw", "key": "QuickDraw/cat/1", "correct": True}


def _jsonl(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


@pytest.mark.parametrize("name, content, says", [
    ("p.jsonl", _jsonl(GOOD, "[1]"), "line 2"),
    ("p.jsonl", _jsonl(GOOD, "7"), "line 2"),
    ("p.jsonl", "[" * 100000 + "]" * 100000 + "\n", "line 1"),
    ("p.jsonl", _jsonl(dict(GOOD, id=1.9, key=None)), "1.9"),
    ("p.jsonl", _jsonl(dict(GOOD, id=True, key=None)), "True"),
    ("p.jsonl", _jsonl(dict(GOOD, id="1.5", key=None)), "1.5"),
    ("p.jsonl", _jsonl(dict(GOOD, id=1e400, key=None)), "id"),
    ("p.jsonl", _jsonl(dict(GOOD, model=["a"])), "model"),
    ("p.jsonl", _jsonl(dict(GOOD, key={"a": 1})), "key"),
    ("p.jsonl", b"\xff\xfe{}\n", "UTF-8"),
    ("p.csv", "model,config,key,correct\nm,QuickDraw,\"" + "k" * 140000 + "\",true\n", "after line 1"),
    ("p.csv", "model,config,key,correct\nm,QuickDraw,k,true,extra\n", "line 2"),
    ("p.csv", "model,config,key,correct\nm,Quick\x00Draw,k,true\n", "p.csv"),
    ("p.parquet", "not parquet", "p.parquet"),
])
def test_a_malformed_predictions_file_is_one_line_naming_it(capsys, tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    line = refused_build(capsys, tmp_path, f"--predictions={path}")
    assert "cannot filter" in line and says in line and name in line, line


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_predictions_that_are_not_a_regular_file_are_refused(capsys, tmp_path, kind):
    path = tmp_path / "p.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()
    line = refused_build(capsys, tmp_path, f"--predictions={path}")
    assert str(path) in line, line


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/p.jsonl", "https://example.org/p.jsonl",
                                 "nosuch://x/p.jsonl"])
def test_predictions_at_a_url_the_build_may_not_reach_are_one_line(capsys, tmp_path, url):
    line = refused_build(capsys, tmp_path, f"--predictions={url}")
    assert url in line, line


@pytest.mark.parametrize("config, guess", [("Quickdraw", "QuickDraw"), ("quickdraw", "QuickDraw"),
                                           ("coco", "coco2014"), ("Nonsense", None)])
def test_predictions_naming_an_unknown_config_are_refused_naming_the_closest(capsys, tmp_path,
                                                                             config, guess):
    """Today such rows were ignored: with other rows covering the config, every sample was
    judged by fewer models and kept, and filter.json said nothing of them."""
    path = tmp_path / "p.jsonl"
    path.write_text(_jsonl(GOOD, dict(GOOD, model="n"), dict(GOOD, model="o", config=config)))
    line = refused_build(capsys, tmp_path, f"--predictions={path}")
    assert repr(config) in line and "1 row" in line, line
    if guess:
        assert f"did you mean {guess!r}" in line, line


def _upstream(tmp_path) -> str:
    folder = tmp_path / "upstream"
    folder.mkdir()
    (folder / "QuickDraw_preprocessed.jsonl").write_text("{}\n")
    return str(folder)


@pytest.mark.parametrize("content, says", [
    ("[1, 2]", "mapping"),
    ('{"QuickDraw": [null]}', "None"),
    ('{"QuickDraw": [1e400]}', "inf"),
    ('{"QuickDraw": [0.9, 1]}', "0.9"),
    ('{"QuickDraw": [true]}', "True"),
    ('{"QuickDraw": ["3"]}', "'3'"),
    ('{"QuickDraw": [-1]}', "-1"),
    ('{"QuickDraw": 3}', "QuickDraw"),
    ('{"kept_ids": [1]}', "mapping"),
    ("[" * 100000 + "]" * 100000, "JSON"),
    ("not json", "JSON"),
    ('{"Quickdraw": [0, 1], "QuickDraw": [1]}', "did you mean 'QuickDraw'"),
    ('{"ImageNet-C": [0, 1]}', "QuickDraw"),   # the imported config is absent: all dropped
])
def test_a_malformed_keep_list_is_one_line_naming_it(capsys, tmp_path, content, says):
    path = tmp_path / "keep.json"
    path.write_text(content)
    line = refused_build(capsys, tmp_path, f"--import_upstream={_upstream(tmp_path)}",
                         f"--keep_list={path}")
    assert "keep.json" in line and says in line, line


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_keep_list_that_is_not_a_regular_file_is_refused(capsys, tmp_path, kind):
    path = tmp_path / "keep.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    line = refused_build(capsys, tmp_path, f"--import_upstream={_upstream(tmp_path)}",
                         f"--keep_list={path}")
    assert str(path) in line, line


def test_a_csv_with_cr_line_endings_reads_like_crlf(tmp_path):
    from proactivebench_builder.filters.predictions import read_predictions

    path = tmp_path / "p.csv"
    path.write_text("model,config,key,correct\rm,QuickDraw,k,true\r", newline="")
    assert read_predictions(str(path)) == [
        {"model": "m", "config": "QuickDraw", "key": "k", "id": None, "correct": True,
         "split": "test", "confidence": None, "delta": None}]


def test_a_keep_list_may_leave_a_config_empty_on_purpose(tmp_path):
    from proactivebench_builder.filters.leakage import load_keep_list

    path = tmp_path / "keep.json"
    path.write_text('{"QuickDraw": [], "MVP-N": [3, 1]}')
    assert load_keep_list(str(path)) == {"QuickDraw": set(), "MVP-N": {1, 3}}


@pytest.mark.parametrize("report", ['[1]', "[" * 50000 + "]" * 50000, '{"stamp": [1]}',
                                    '{"stamp": {"code_version": "x"}, "files": [1, {"path": 2}]}',
                                    '{"stamp": {"code_version": "x"}, "sources": [], '
                                    '"scenarios": {"quickdraw": 3}}'])
def test_an_odd_previous_report_is_no_pool_for_the_predictions_check(tmp_path, report):
    """The driver's coverage check reads the output folder's previous build.json as a shortcut;
    a list there or deep nesting was an AttributeError or RecursionError traceback."""
    from proactivebench_builder.core.config import BuildConfig
    from proactivebench_builder.filters.coverage import previous_pools

    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "build.json").write_text(report)
    config = BuildConfig(seed=0, output=str(tmp_path), scenarios=("quickdraw",), sources={},
                         config_to_scenario={}, stamp={"code_version": "x", "seed": None,
                                                       "origin": None, "manifests": {},
                                                       "parameter_overrides": {}})
    assert previous_pools(config) == {}
