"""The GRPO reward of the paper (§5): the correct category earns r_c = 1, a valid proactive
suggestion earns r_p (0.5 by default; the paper also trains with 0.75 and 1.0), anything else
(abstaining, a wrong category, an invalid suggestion, an unparseable answer) earns 0.

An answer is matched against the example's displayed `options` exactly as the upstream
environments match it (full text after normalisation, then a single letter), so a trained model
is rewarded for what the benchmark will later accept.
"""
from __future__ import annotations

from proactivebench_builder.core.prompts import evaluate_answer

R_CORRECT = 1.0
R_PROACTIVE = 0.5


def chosen_option(answer: str, options: list[str]) -> str | None:
    """The displayed option an answer selects, or None when it selects none."""
    verdict, option = evaluate_answer(answer, [], list(options))
    return option if verdict != "mismatch" else None


def reward(answer: str, ground_truth: str, proactive_actions: list[str], options: list[str],
           r_p: float = R_PROACTIVE) -> float:
    option = chosen_option(answer, options)
    if option is None:
        return 0.0
    if option == ground_truth:
        return R_CORRECT
    if option in proactive_actions:
        return float(r_p)
    return 0.0


def _text(completion) -> str:
    """A completion as TRL passes it: a string, or chat messages whose last content is the text."""
    if isinstance(completion, str):
        return completion
    message = completion[-1] if isinstance(completion, list) else completion
    content = message["content"]
    if isinstance(content, list):
        return " ".join(part.get("text") or "" for part in content if part.get("type") == "text")
    return content


def make_grpo_reward(r_p: float = R_PROACTIVE):
    """A reward function with the signature GRPO trainers call (TRL's `reward_funcs` entries):
    `f(completions, ground_truth, proactive_actions, options, **columns) -> list[float]`, the
    extra keyword arguments being the train split's columns for each completion."""

    def proactive_reward(completions, ground_truth, proactive_actions, options, **_):
        return [reward(_text(c), g, p, o, r_p)
                for c, g, p, o in zip(completions, ground_truth, proactive_actions, options)]

    proactive_reward.__name__ = f"proactive_reward_rp{r_p:g}"
    return proactive_reward
