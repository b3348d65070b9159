"""Playing one episode: the loop of upstream's tests/mcqa.py over our environment."""
from __future__ import annotations


def run_episode(env, model, first_round_only: bool = False) -> dict:
    """Play `env` with `model` until it stops (or after one turn); returns the statistics with
    the chosen option of every turn."""
    observation = env.reset()
    while not observation.done:
        answer = model.answer(observation, env)
        observation = env.step(answer if isinstance(answer, str) else str(answer))
        if first_round_only:
            break
    stats = env.statistics()
    stats["chosen_options"] = [turn.chosen for turn in env.turns]
    return stats
