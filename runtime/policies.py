"""Built-in policies for tests and sanity checks: oracle, always-abstain, always-suggest, random,
first-option. They implement the same `Model` interface as real model adapters, but read the
environment (`answer(observation, env)`) instead of the pixels.

- oracle: walks toward the reference view (greedily taking the valid proactive option that
  brings the state closest to it, looked up on a clone of the environment) and names the
  category once no move gets closer and the category is accepted; it must score 100%.
- always-abstain: the displayed abstain option (0% by construction).
- always-suggest: a valid proactive option while there is one, else any displayed proactive
  option, else a suggestion that is not displayed: never a category, so 0% with every episode
  at its step cap (psr = cap - 1) wherever the moves last that long.
- random: a uniformly drawn displayed option, seeded by (seed, key, turn).
- first-option: always "A".
"""
from __future__ import annotations

import random

from proactivebench_builder.core import vocabulary
from proactivebench_builder.runtime.models import Model

UNDISPLAYED_SUGGESTION = "Please show me another view."


class OraclePolicy(Model):
    name = "oracle"

    def answer(self, observation, env) -> str:
        if env.mode == "oeg":
            return env.answer
        options, categories = env.accepted_answers()
        here = env.distance_to_reference()
        best, best_distance = None, None
        for option in env.valid_proactive_options():
            twin = env.clone()
            twin.step(option)
            distance = twin.distance_to_reference()
            if best_distance is None or distance < best_distance:
                best, best_distance = option, distance
        if categories and (best is None or best_distance >= here):
            return env.answer
        return best if best is not None else env.answer


class AlwaysAbstainPolicy(Model):
    name = "always-abstain"

    def answer(self, observation, env) -> str:
        for option in observation.options:
            if vocabulary.is_abstain(option):
                return option
        return vocabulary.ABSTAIN_OPTIONS[0]


class AlwaysSuggestPolicy(Model):
    name = "always-suggest"

    def answer(self, observation, env) -> str:
        valid = env.valid_proactive_options()
        if valid:
            return valid[0]
        for option in env.displayed_options():
            if not vocabulary.is_abstain(option):
                return option
        return UNDISPLAYED_SUGGESTION


class RandomPolicy(Model):
    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.name = f"random:{seed}"  # each seed is a different "model" in stored predictions

    def answer(self, observation, env) -> str:
        rng = random.Random(f"{self.seed}|{env.key}|{observation.num_turns}")
        return rng.choice(observation.options) if observation.options else ""


class FirstOptionPolicy(Model):
    name = "first-option"

    def answer(self, observation, env) -> str:
        return "A"


POLICIES = {cls.name: cls for cls in (OraclePolicy, AlwaysAbstainPolicy, AlwaysSuggestPolicy,
                                      RandomPolicy, FirstOptionPolicy)}
