"""The first-round predictions schema, shared with the leakage filter (filters/).

One JSON object per line: a model's answer on the first MCQA turn of one sample, and whether it
named the correct category there (upstream's leakage rule: a sample leaks when >= 25% of the
probing models answer it correctly in the first turn). `model` is the model's identity
(`model_specs.model_identity`: a built-in policy's name, `openai:MODEL@URL` or `hf:MODEL_ID`),
so that two models of one name stay two models for the filter.
"""
from __future__ import annotations

SCHEMA_VERSION = 1
FIELDS = ("schema_version", "model", "config", "key", "id", "answer_text", "chosen_option",
          "correct")


def prediction_row(model: str, config: str, key: str, sample_id: int, answer_text: str,
                   chosen_option: str, correct: bool) -> dict:
    return {"schema_version": SCHEMA_VERSION, "model": model, "config": config, "key": key,
            "id": sample_id, "answer_text": answer_text, "chosen_option": chosen_option,
            "correct": bool(correct)}
