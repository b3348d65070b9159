"""The train split: loads with decoded images, is disjoint from the test pool, mixes ambiguous and
unambiguous frames, its frames are checked like the test split's (one changed after validation
is a dead letter), and the reward scores each kind of answer."""
from __future__ import annotations

import json
import os
import shutil

import datasets
import pytest

from conftest import private_miniature, read_json
from proactivebench_builder.core import results
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


# ---- the train split: frames checked like the test split's -----------------------

@pytest.mark.build
@pytest.mark.parametrize("kind", ["file", "view"])
def test_a_train_frame_changed_after_validation_is_a_dead_letter(kind, tmp_path_factory,
                                                                 monkeypatch):
    """The example is dropped as a counted dead letter, as in the test split."""
    import dataclasses

    from conftest import IN_PROCESS, read_jsonl, run
    from proactivebench_builder.pipeline import row_store, shards

    root = str(tmp_path_factory.mktemp("coco_train_changing"))
    shutil.copytree(private_miniature(tmp_path_factory, "coco"), root, dirs_exist_ok=True)
    truncated = []
    original = shards.AssignIdsAndShards.process

    def truncate_then_assign(self, element):
        pool, values = element
        values = list(values)
        if pool == shards.TRAIN_POOL and not truncated:
            examples = sorted((v for v in map(results.unpacked, values)  # packed to cross
                               if isinstance(v, results.TrainExample)), key=lambda v: v.key)
            examples = [dataclasses.replace(e, row=row_store.fetch(self.config.output, e.row))
                        for e in examples]  # (their rows cross as references)
            for example in examples:
                ref = example.row["image_ref"]
                if example.name == "coco" and ref["kind"] == kind:
                    with open(ref["url"], "r+b") as handle:
                        handle.truncate(os.path.getsize(ref["url"]) // 2)
                    truncated.extend(e.key for e in examples
                                     if e.row["image_ref"].get("url") == ref["url"])
                    break
        yield from original(self, (pool, values))

    monkeypatch.setattr(shards.AssignIdsAndShards, "process", truncate_then_assign)
    output = str(tmp_path_factory.mktemp("coco_train_changing_out") / "out")
    report = run(output, root, "coco", IN_PROCESS, "--max_bad_fraction=1",
                 "--no_upstream_export")
    assert truncated, f"no COCO train example of kind {kind}"
    letters = [d for d in read_jsonl(os.path.join(output, "reports", "dead_letters.jsonl"))
               if "frame changed after validation" in d["reason"]]
    assert sorted(d["key"] for d in letters) == sorted(truncated)
    assert {d["scenario"] for d in letters} == {"coco/train"}
    import pyarrow.parquet as pq

    keys = [k for name in os.listdir(os.path.join(output, "data"))
            for k in pq.read_table(os.path.join(output, "data", name),
                                   columns=["key"]).column("key").to_pylist()]
    assert not set(truncated) & set(keys)
    train = report["train"]
    assert train["scenarios"]["coco"]["accounted"] is True
    assert train["examples"] == train["rows"] == len(keys)
    assert report["status"] in ("building", "ok")
