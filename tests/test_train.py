"""The train split: loads with decoded images, is disjoint from the test pool, mixes ambiguous and
unambiguous frames, and the reward scores each kind of answer."""
from __future__ import annotations

import json
import os

import datasets
import pytest

from conftest import read_json
from proactivebench_builder.runtime.reward import make_grpo_reward, reward


@pytest.fixture(scope="module")
def train(built_miniature):
    return datasets.load_dataset(built_miniature, split="train")


def test_train_split_loads_under_the_default_config(train):
    assert len(train) > 0
    for row in train:
        assert len(row["images"]) == 1 and row["images"][0].size[0] > 0
        message = row["prompt"][0]
        assert message["role"] == "user"
        assert [part["type"] for part in message["content"]] == ["image", "text"]
        assert row["ground_truth"] in row["options"]
        assert set(row["proactive_actions"]) <= set(row["options"])


def test_train_is_disjoint_from_the_test_pool(train, built_miniature):
    pool = set()
    for config in ("QuickDraw", "coco2014"):
        path = os.path.join(built_miniature, "upstream", f"{config}_preprocessed.jsonl")
        if os.path.exists(path):
            pool.update(json.loads(line)["key"] for line in open(path))
    assert pool and not pool & set(train["key"])


def test_ambiguous_and_unambiguous_frames_are_mixed(train, built_miniature):
    for config in set(train["config"]):
        rows = [r for r in train if r["config"] == config]
        ambiguous = [r for r in rows if r["ambiguous"]]
        clear = [r for r in rows if not r["ambiguous"]]
        assert ambiguous and clear, config
        assert all(r["proactive_actions"] for r in ambiguous)
        assert not any(r["proactive_actions"] for r in clear)
    report = read_json(os.path.join(built_miniature, "reports", "build.json"))["train"]
    assert report["rows"] == len(train)


def test_quickdraw_ambiguous_frames_show_less_ink(train):
    def ink(image):
        return sum(1 for p in image.convert("L").get_flattened_data() if p < 128)

    rows = [r for r in train if r["config"] == "QuickDraw"]
    clear = [ink(r["images"][0]) for r in rows if not r["ambiguous"]]
    vague = [ink(r["images"][0]) for r in rows if r["ambiguous"]]
    assert sum(vague) / len(vague) < sum(clear) / len(clear)


def test_reward_for_each_kind_of_answer():
    options = ["Add more details.", "I cannot tell.", "Cat.", "Dog.", "Sun.", "House."]
    ambiguous = dict(ground_truth="Cat.", proactive_actions=["Add more details."], options=options)
    assert reward("C", **ambiguous) == 1.0                       # correct category, by letter
    assert reward("Cat.", **ambiguous) == 1.0                    # by full text
    assert reward("A. Add more details.", **ambiguous) == 0.5   # valid suggestion
    assert reward("A", **ambiguous, r_p=0.75) == 0.75
    assert reward("B", **ambiguous) == 0.0                       # abstain
    assert reward("D", **ambiguous) == 0.0                       # wrong category
    assert reward("no idea", **ambiguous) == 0.0                 # unparseable
    clear = dict(ambiguous, proactive_actions=[])
    assert reward("A", **clear) == 0.0                           # suggestion on a clear frame


def test_grpo_reward_signature():
    fn = make_grpo_reward(r_p=1.0)
    options = [["Add more details.", "I cannot tell.", "Cat.", "Dog.", "Sun.", "House."]] * 2
    scores = fn([[{"role": "assistant", "content": "A"}], "C"], ground_truth=["Cat.", "Cat."],
                proactive_actions=[["Add more details."], []], options=options, prompts=None)
    assert scores == [1.0, 1.0]
