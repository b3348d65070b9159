"""Model specs: what `--model` and `--judge` name (a built-in policy, `openai:MODEL[@BASE_URL]`,
`hf:MODEL_ID`), checked before any work and turned into a `Model`."""
from __future__ import annotations

import importlib.util
from difflib import get_close_matches

from proactivebench_builder.runtime.models import (
    TRANSFORMERS_MISSING, Model, OpenAIChatModel, TransformersModel)
from proactivebench_builder.runtime.policies import POLICIES, RandomPolicy


class ModelSpecError(ValueError):
    """A --model/--judge spec that names no adapter, or one whose packages are missing."""


def check_model_spec(spec: str) -> None:
    """Refuse a spec `load_model` cannot serve, before any work: an unknown name (with the
    closest known one), a non-integer random seed, openai:/hf: without a model, or hf: without
    transformers/torch installed (looked up, not imported: importing torch takes seconds)."""
    kind, colon, rest = spec.partition(":")
    if kind == "random":
        try:
            int(rest or 0)
        except ValueError:
            raise ModelSpecError(f"random:SEED needs an integer seed, got {spec!r}") from None
        return
    if spec in POLICIES:
        return
    if colon and kind in ("openai", "hf"):
        if not rest:
            raise ModelSpecError(f"{spec!r} names no model: use {kind}:MODEL"
                                 + ("[@BASE_URL]" if kind == "openai" else "_ID"))
        if kind == "hf" and not all(importlib.util.find_spec(m) for m in ("transformers",
                                                                          "torch")):
            raise ModelSpecError(TRANSFORMERS_MISSING)
        return
    guess = get_close_matches(f"{kind}:" if colon else spec,
                              [*POLICIES, "random", "openai:", "hf:"], n=1)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    raise ModelSpecError(f"unknown model spec {spec!r}{hint} (known: {', '.join(POLICIES)}, "
                         "random:SEED, openai:MODEL[@BASE_URL], hf:MODEL_ID)")


def load_model(spec: str, **options) -> Model:
    """A model from a spec: a built-in policy ("oracle", "always-abstain", "always-suggest",
    "random[:SEED]", "first-option"), "openai:MODEL[@BASE_URL]" or "hf:MODEL_ID"."""
    check_model_spec(spec)
    kind, _, rest = spec.partition(":")
    if kind == "random":
        return RandomPolicy(int(rest or 0))
    if spec in POLICIES:
        return POLICIES[spec]()
    if kind == "openai":
        model, _, base_url = rest.partition("@")
        if base_url:
            options["base_url"] = base_url
        return OpenAIChatModel(model, **options)
    return TransformersModel(rest)
