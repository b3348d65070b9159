"""Open-ended (OEG) mode: single turn, no options; a judge model decides, for each of the
sample's valid answers, whether the output expresses it (docs/environments.md;
upstream `open_ended_gen.py`).

The judge prompts are upstream's verbatim (MIT, proactivebench 0.1.1): changing a word would make
judged numbers incomparable. The valid answers come from `Environment.open_ended_answers()`;
the first `prediction_threshold` of them (declared by the scenario: upstream's PREDICTION_THR =
{ROD: 2, VSOD: 3, MVP-N: 2, IN-C: 1, QD: 1, CIT: 2, COCO: 2}) are proactive suggestions, the
rest categories.
"""
from __future__ import annotations

import random
import re

from proactivebench_builder import transforms

SYSTEM_PROMPT = (
    "You are an automatic evaluation system.\n\nYou will receive:\n- A user prompt\n"
    "- A list of correct answers (JSON list of strings)\n- A system output\n\nYour task:\n"
    "For each correct answer, determine whether the system output expresses the same idea, "
    "action, or requirement.\n\nEvaluation principles:\n\n1. Semantic equivalence is sufficient.\n"
    "   - The wording does NOT need to match exactly.\n"
    "   - Functional equivalence counts as correct.\n"
    "   - If the system output describes an action that necessarily implies the correct answer, "
    "count it as present.\n\n2. Implicit but clear implications count as correct.\n"
    "   - If the output describes the mechanism required to achieve the correct answer\u2019s "
    "goal, count it as correct.\n"
    "   - Example: \"change perspective\" can imply \"move the camera.\"\n\n"
    "3. Do NOT require exact phrasing.\n\n4. Only mark 0 if:\n   - The idea is clearly absent\n"
    "   - The idea is contradicted\n   - The answer is negated\n\nProcedure:\n"
    "1. Think step by step.\n2. For each correct answer, decide if it is semantically expressed "
    "or clearly implied.\n3. Output the result on a new line in the exact format below.\n\n"
    "<comma-separated list of 0s and 1s>\n\nThe last line must not contain anything else.")

USER_PROMPT = ("### User Prompt:\n{user_prompt}\n### Correct Answers (List):\n{correct_answers}\n"
               "### System Output:\n{generated_answer}")

# Upstream's OEG evaluation size: 100 samples per scenario, random.seed(0) shuffle, first 100.
OEG_SAMPLES = 100

_VERDICTS = re.compile(r"[01](?:\s*,\s*[01])*")


def threshold(config: str) -> int:
    """Leading valid answers that are proactive suggestions, as the scenario declares."""
    return transforms.behaviour_for_config(transforms.resolve_config(config)).play.threshold


def correct_answer_list(valid_answers: str) -> list[str]:
    return [answer.strip().replace(".", "") for answer in valid_answers.split(",")]


def judge_messages(prompt: str, valid_answers: str, generated_answer: str) -> list[dict]:
    """System + user messages for the judge; the answer list is rendered as a Python list, as
    upstream formats it."""
    user = USER_PROMPT.format(user_prompt=prompt,
                              correct_answers=correct_answer_list(valid_answers),
                              generated_answer=generated_answer)
    return [{"content": SYSTEM_PROMPT, "role": "system"}, {"content": user, "role": "user"}]


def strip_thinking(text: str) -> str:
    """The judge's visible output: what follows the last "</think>" (Qwen3 thinking mode)."""
    marker = "</think>"
    if marker in text:
        text = text[text.rindex(marker) + len(marker):]
    return text.strip("\n")


def parse_judge_prediction(valid_answers: str, raw_judge_output: str, config: str) -> dict:
    """{proactive_suggestion, category_prediction, aggregate} in {0, 1}: the last 0/1 list in the
    output; all 0 when there is none or its length differs from the number of valid answers."""
    result = {"proactive_suggestion": 0, "category_prediction": 0, "aggregate": 0}
    matches = _VERDICTS.findall(raw_judge_output)
    if not matches:
        return result
    expected = len([a for a in valid_answers.split(",") if a.strip() != ""])
    verdicts = [int(t.strip()) for t in matches[-1].split(",") if t.strip() != ""]
    if len(verdicts) != expected:
        return result
    cut = threshold(config)
    ps, cp = int(1 in verdicts[:cut]), int(1 in verdicts[cut:])
    return {"proactive_suggestion": ps, "category_prediction": cp, "aggregate": int(ps or cp)}


def oeg_subset(rows: list, seed: int = 0, size: int = OEG_SAMPLES) -> list:
    """Upstream's selection: Python's random.seed(seed), shuffle the loaded list, first `size`."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[:size]
