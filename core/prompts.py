"""Prompt texts, the multiple-choice template and answer parsing, exactly as upstream has them.

Upstream is `proactivebench` 0.1.1 (github.com/tdemin16/proactivebench at c743420, MIT), read in
`environment.py`, `data_utils.py` and `open_ended_gen.py`. The strings below (the template, the
OEG hint) and the ones each scenario declares (pre-prompt, hint, ROD's reference question) are
data the model sees, so they are kept verbatim: any
change would make numbers incomparable with the paper's. The parsing functions re-implement the
behaviour described in `docs/environments.md`, including its quirks:

- full-text normalisation removes everything up to the *last* "<capital letter>." in the answer
  (a greedy `^.*[A-Z]\\.\\s*`), then lower-cases, strips and deletes every space;
- a letter answer is the text before the first "." and counts only when it is one character;
- categories are matched with their letters shifted by the number of displayed non-category
  options, so "E" can be the first category when four options precede it.
"""
from __future__ import annotations

import re

# Appended to the question in open-ended mode with hints (upstream's tests/oeg.py).
OEG_HINT = "If you cannot answer this question, please tell me what I should do to help you."

SHORT_ANSWER_LINE = "Please only return one of the options without any other words."


def option_letter(index: int) -> str:
    return chr(65 + index)


def multi_choice_prompt(question: str, options: list[str], short_answer: bool = True) -> str:
    """The MCQA template (data_utils.apply_multi_choice_template); the reference loop uses
    short_answer=True."""
    text = question + " Choose from the following options. Options:\n"
    text += "".join(f"{option_letter(i)}. {option}\n" for i, option in enumerate(options))
    if short_answer:
        text += SHORT_ANSWER_LINE
    return text


def compose_question(question: str, pre_prompt: str = "", hint: str | None = None) -> str:
    """Pre-prompt first, then the question, then the hint, each joined by one space."""
    if pre_prompt:
        question = f"{pre_prompt} {question}"
    if hint:
        question = f"{question} {hint}"
    return question


_LETTER_PREFIX = re.compile(r"^.*[A-Z]\.\s*")


def standardize_full_answer(answer: str) -> str:
    """Drop a leading "X. " (greedily: up to the last capital-letter-dot), lower-case, strip,
    remove all spaces."""
    answer = _LETTER_PREFIX.sub("", answer)
    return answer.lower().strip().replace(" ", "")


def standardize_letter_answer(answer: str) -> str:
    """The text before the first ".", lower-cased and stripped; "#" unless it is at most one
    character (an empty answer stays "", which matches no letter)."""
    answer = answer.split(".")[0].lower().strip()
    return "#" if len(answer) > 1 else answer


def evaluate_answer(answer: str, correct: list[str], options: list[str],
                    shift: int = 0) -> tuple[str, str]:
    """("correct" | "wrong" | "mismatch", chosen option) for one block of displayed options.

    Full text first (against the correct answers, then against every option), then the letter,
    with this block's letters starting at `shift`."""
    full = standardize_full_answer(answer)
    std_options = [standardize_full_answer(o) for o in options]
    if full in {standardize_full_answer(c) for c in correct}:
        return "correct", options[std_options.index(full)]
    if full in std_options:
        return "wrong", options[std_options.index(full)]
    letter = standardize_letter_answer(answer)
    letters = [standardize_letter_answer(option_letter(i + shift)) for i in range(len(options))]
    correct_letters = {letters[options.index(c)] for c in correct if c in options}
    if letter in correct_letters:
        return "correct", options[letters.index(letter)]
    if letter in letters:
        return "wrong", options[letters.index(letter)]
    return "mismatch", ""
