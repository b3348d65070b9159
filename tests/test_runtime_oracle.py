"""The runtime's environments: conformance with upstream, and built-in policies on the built
miniature benchmark.

Conformance. Expected trajectories were *recorded from the upstream package*, not derived by
hand: `proactivebench==0.1.1` was fetched from PyPI (`pip download --no-deps --python-version 3.12
--only-binary=:all:`), its `environment.py` (standard library only) was run unmodified on
CPython 3.12, and `runtime/conformance.py` played every scripted case (hand-made records of all
seven configs; answers as letters in both cases, full texts with odd case/spacing, "X. text",
junk, an empty answer, out-of-range letters, and letters at the option/category boundary) through
upstream's `get_state` / `evaluate_generated_answer`. The recording is frozen in
`tests/data/upstream_recorded.json`. When a Python >= 3.12 and the package are available
(PROACTIVEBENCH_UPSTREAM_PYTHON and PROACTIVEBENCH_UPSTREAM_DIR), the live test re-records.
"""
from __future__ import annotations

import io
import os

import pyarrow.parquet as pq
import pytest
from PIL import Image

from proactivebench_builder import transforms
from proactivebench_builder.core.conformance import CATEGORIES
from proactivebench_builder.runtime import conformance
from proactivebench_builder.runtime import environments as envs
from proactivebench_builder.runtime.episodes import run_episode
from proactivebench_builder.runtime.metrics import episode_metrics
from proactivebench_builder.runtime.policies import POLICIES

from proactivebench_builder.transforms.coco.play import LEFT as COCO_LEFT  # noqa: E402
from proactivebench_builder.transforms.quickdraw.play import RECORD as QD_RECORD  # noqa: E402
from proactivebench_builder.transforms.rod.play import RECORD as ROD_RECORD  # noqa: E402
from proactivebench_builder.transforms.vsod.play import RECORD as VSOD_RECORD  # noqa: E402

# upstream's seven configs, in the paper's order
ROD, VSOD, MVPN, INC, QD, CIT, COCO = (
    "Realistic-Occlusion-Dataset", "OcclusionDataSet-MM20", "MVP-N", "ImageNet-C", "QuickDraw",
    "ChangeIt", "coco2014")

RECORDED = conformance.load_recorded(os.path.join(os.path.dirname(__file__), "data",
                                                  "upstream_recorded.json"))

DECLARED = conformance.declared_cases()
CASES = {case["name"]: case for case in DECLARED}


# ---- conformance ------------------------------------------------------------------------------


def test_recording_covers_every_case_and_config():
    assert [r["name"] for r in RECORDED] == [c["name"] for c in DECLARED]
    configs = {envs.config_of(c["record"]) for c in DECLARED}
    assert configs == {ROD, VSOD, MVPN, INC, QD, CIT, COCO}


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda r: r["name"])
def test_trajectory_matches_upstream_recording(recorded):
    case = CASES[recorded["name"]]
    ours = conformance.play_ours(case)
    assert conformance.comparable(ours, case) == conformance.comparable(recorded, case)


@pytest.mark.skipif(not (os.environ.get("PROACTIVEBENCH_UPSTREAM_PYTHON")
                         and os.environ.get("PROACTIVEBENCH_UPSTREAM_DIR")),
                    reason="upstream proactivebench (Python >= 3.12) not available")
def test_trajectories_match_live_upstream():
    live = conformance.record_upstream(os.environ["PROACTIVEBENCH_UPSTREAM_PYTHON"],
                                       os.environ["PROACTIVEBENCH_UPSTREAM_DIR"])
    for recorded in live:
        case = CASES[recorded["name"]]
        assert conformance.comparable(conformance.play_ours(case), case) == \
            conformance.comparable(recorded, case), recorded["name"]


def _shown_by_playing(record: dict) -> set[int]:
    """Every frame our environment shows for `record`, found by playing every answer (each
    displayed option, each category, and one it cannot parse) at every state it reaches, then
    the reference mode: what upstream's environments were recorded to do, played here."""
    config = envs.config_of(record)
    ids = set(range(record["num_images"] + 6)) | set(record.get("valid_images") or [])
    full = dict(record, frame_ids=sorted(ids), frames=[conformance._tiny_png(i) for i in sorted(ids)])
    shown, seen = set(), set()
    frontier = [envs.Environment(full, config)]
    while frontier:
        env = frontier.pop()
        state = (env.image_id, env.num_turns, env.last_action, getattr(env, "h_step", None),
                 getattr(env, "v_step", None))
        if env.done or state in seen:
            continue
        seen.add(state)
        shown.add(env.shown_frame_id())
        for answer in env.displayed_options() + env.categories + ["no answer at all"]:
            twin = env.clone()
            twin.step(answer)
            frontier.append(twin)
    shown.add(envs.Environment(full, config, mode="reference").shown_frame_id())
    return shown


@pytest.mark.parametrize("case", [c for c in DECLARED if not c["random"]],
                         ids=lambda c: c["name"])
def test_the_frames_a_row_needs_are_the_frames_an_episode_shows(case):
    """A row must hold exactly the frames an episode can show (what an import reads of a
    release and validate requires), no more: the scenario's declaration equals what playing
    every answer shows, on every declared conformance record (ROD's patched sequence too)."""
    record = case["record"]
    declared = set(envs.reachable_frame_ids(record, envs.config_of(record)))
    assert declared == _shown_by_playing(record)


def _env(record, **kwargs):
    return envs.make_environment(conformance.with_frames(record, envs.config_of(record)), **kwargs)


def test_observation_prompt_is_the_upstream_template():
    obs = _env(VSOD_RECORD, hint=True).reset()
    assert obs.prompt == (
        "This is a frame extracted from a video. Answer the following question. What is shown? "
        "Hint: If there is an occlusion, waiting for it to disappear or rewinding the video "
        "might reveal what's behind it. Choose from the following options. Options:\n"
        "A. I cannot answer this question.\nB. Rewind the video.\n"
        "C. Wait for the occlusion to disappear.\nD. Cat.\nE. Dog.\nF. Cow.\nG. Pig.\n"
        "Please only return one of the options without any other words.")
    assert obs.num_turns == 0 and not obs.done and obs.correct is False


def test_reference_mode_shows_reference_frame_and_categories_only():
    env = _env(ROD_RECORD, mode="reference")
    obs = env.reset()
    assert obs.options == CATEGORIES
    assert obs.image_id == 0 and obs.prompt.startswith("What type of object is in the image?")
    assert env.step("B").correct is True


def test_coco_views_are_crops_and_reference_is_uncropped():
    env = _env(COCO_LEFT)
    assert env.reset().image.size == (70, 50)        # (190,100,260,150)
    env.step("A")
    assert env.observe().image.size == (80, 50)
    assert _env(COCO_LEFT, mode="reference").reset().image.size == (600, 400)


def test_frames_accept_decoded_images_and_bytes():
    record = conformance.with_frames(QD_RECORD, QD)
    decoded = dict(record, frames=[Image.open(io.BytesIO(f["bytes"])) for f in record["frames"]])
    for row in (record, decoded):
        assert envs.make_environment(row).reset().image.size == (600, 400)


def test_random_suggestions_replace_proactive_options_deterministically():
    first = _env(QD_RECORD, random_suggestions=True, seed=3).reset().options
    again = _env(QD_RECORD, random_suggestions=True, seed=3).reset().options
    assert first == again
    assert first[0] == "I cannot answer this question."
    assert first[1] != "Make this drawing more complete."
    assert transforms.upstream_action_of(first[1]) != "DETAILS"


def test_history_keeps_earlier_turns():
    env = _env(QD_RECORD, history=True)
    env.reset()
    obs = env.step("B")
    assert len(obs.history) == 1 and obs.history[0].answer_text == "B"
    assert obs.history[0].image is not None


def test_unknown_config_and_missing_frame_are_errors():
    with pytest.raises(ValueError):
        transforms.resolve_config("nope")
    record = conformance.with_frames(QD_RECORD, QD)
    record = dict(record, frame_ids=record["frame_ids"][:1], frames=record["frames"][:1])
    env = envs.make_environment(record)
    with pytest.raises(envs.MalformedRecord):
        env.step("B")


# ---- built miniature benchmark ----------------------------------------------------------------


def _built_rows(output: str) -> dict[str, list[dict]]:
    rows = {}
    for config in transforms.known_configs():
        folder = os.path.join(output, config)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".parquet"):
                rows.setdefault(config, []).extend(pq.read_table(
                    os.path.join(folder, name)).to_pylist())
    return rows


@pytest.fixture(scope="module")
def built_rows(built_miniature):
    rows = _built_rows(built_miniature)
    assert rows, "the miniature build holds no scenario"
    return rows


def _configs():
    return sorted(transforms.known_configs())


def _play_all(rows, policy_name, **kwargs):
    results = []
    for row in rows:
        env = envs.make_environment(row, **kwargs)
        results.append((env, run_episode(env, POLICIES[policy_name]())))
    return results


@pytest.mark.parametrize("config", _configs())
def test_oracle_is_always_right_within_the_cap(built_rows, config):
    if config not in built_rows:
        pytest.skip(f"{config} is not built (scenario not registered yet)")
    for env, stats in _play_all(built_rows[config], "oracle"):
        assert stats["correct_prediction"], stats
        assert stats["num_turns"] <= env.max_steps
        for image_id in stats["image_id_history"]:
            assert image_id in env.record["frame_ids"]


@pytest.mark.parametrize("config", _configs())
def test_every_reachable_frame_exists_in_the_row(built_rows, config):
    if config not in built_rows:
        pytest.skip(f"{config} is not built")
    for row in built_rows[config]:
        for policy in ("always-suggest", "oracle"):
            env = envs.make_environment(row)
            run_episode(env, POLICIES[policy]())       # raises MalformedRecord on a missing frame
        reference = envs.make_environment(row, mode="reference").reset()
        assert reference.image is not None


@pytest.mark.parametrize("config", _configs())
def test_always_abstain_scores_zero(built_rows, config):
    if config not in built_rows:
        pytest.skip(f"{config} is not built")
    stats = [s for _, s in _play_all(built_rows[config], "always-abstain")]
    assert episode_metrics(stats) == {"n": len(stats), "acc": 0.0, "psr": 0.0}


@pytest.mark.parametrize("config", _configs())
def test_always_suggest_scores_zero_at_the_step_cap(built_rows, config):
    if config not in built_rows:
        pytest.skip(f"{config} is not built")
    played = _play_all(built_rows[config], "always-suggest")
    assert episode_metrics([s for _, s in played])["acc"] == 0.0
    for env, stats in played:
        # The cap, except where upstream runs out of moves first (COCO diagonals: 2g-2 moves
        # under a 2g cap; a ChangeIt video shorter than its cap): then the turn after the last
        # valid move ends it.
        if not stats["max_steps"]:
            twin = envs.make_environment(env.record)
            for answer in stats["generated_answers"][:-1]:
                twin.step(answer)
            assert twin.valid_proactive_options() == [], stats
            assert env.config in (COCO, CIT), stats


def test_rod_first_frame_category_is_wrong(built_rows):
    if ROD not in built_rows:
        pytest.skip("ROD is not built")
    for row in built_rows[ROD]:
        env = envs.make_environment(row)
        obs = env.step(row["answer"])
        assert obs.done and obs.correct is False


@pytest.mark.parametrize("config", _configs())
def test_category_on_first_frame_is_right_elsewhere(built_rows, config):
    if config not in built_rows or config == ROD:
        pytest.skip(f"{config} is not built or forbids it")
    for row in built_rows[config]:
        assert envs.make_environment(row).step(row["answer"]).correct is True


# ---- the declarations of the seven upstream scenarios ---------------------------------------


def test_upstream_tables_now_come_from_the_declarations():
    """What used to be per-config tables (upstream's PREDICTION_THR, short names, hints, the
    video pre-prompt, ROD's reference question) is read from each scenario's `environment`."""
    from proactivebench_builder.runtime import open_ended

    expected = {ROD: ("ROD", 2), VSOD: ("VSOD", 3), MVPN: ("MVP-N", 2),
                INC: ("IN-C", 1), QD: ("QD", 1), CIT: ("CIT", 2),
                COCO: ("COCO", 2)}
    for config, (short, threshold) in expected.items():
        assert transforms.short_name(config) == short
        assert open_ended.threshold(config) == open_ended.threshold(short) == threshold
        play = transforms.behaviour_for_config(config).play
        assert play.keyword_matching == "substring" and play.hint.startswith("Hint: ")
        video = "This is a frame extracted from a video. Answer the following question."
        assert play.pre_prompt == (video if config in (VSOD, CIT) else "")
    assert transforms.behaviour_for_config(ROD).play.reference_prompt == \
        "What type of object is in the image?"


def _ladder_record(first, ref, n):
    record = {"id": 0, "key": f"Focus/ladder{first}{ref}", "image_template": "x/{image}.png",
              "prompt": "What is shown?", "categories": list(CATEGORIES),
              "answer": "Dog.", "options": ["Bring the image into focus.", "I cannot tell."],
              "first_image": first, "reference_image": ref, "num_images": n}
    return conformance.with_frames(record, "Focus")


@pytest.mark.parametrize("first,ref", [(0, 3), (3, 0), (1, 2)])
def test_frame_ladder_walks_toward_the_reference(first, ref):
    record = _ladder_record(first, ref, 4)
    assert record["frame_ids"] == list(range(min(first, ref), max(first, ref) + 1))
    env = envs.make_environment(record)
    stats = run_episode(env, POLICIES["oracle"]())
    step = 1 if ref > first else -1
    assert stats["image_id_history"] == list(range(first, ref + step, step))
    assert stats["correct_prediction"] and stats["num_turns"] == abs(ref - first) + 1
    # The last turn takes only the category; a request there ends the episode as wrong.
    env = envs.make_environment(record)
    for _ in range(3):
        env.step("A")
    assert env.accepted_answers() == ([], ["Dog."])
    assert env.step("A").correct is False


def test_validate_checks_the_ladder_reachability():
    from proactivebench_builder.pipeline.commands.validate import row_problems

    row = dict(_ladder_record(0, 3, 4))
    assert not [p for p in row_problems(row, "Focus") if "frame" in p or "num_images" in p]
    short = dict(row, num_images=3)
    assert any("cannot reach reference_image" in p for p in row_problems(short, "Focus"))
    gap = dict(row, frame_ids=[0, 1, 3], frames=row["frames"][:2] + row["frames"][3:])
    assert any("frames [2] are reachable" in p for p in row_problems(gap, "Focus"))
