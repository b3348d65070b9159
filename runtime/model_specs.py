"""Model specs: what `--model` and `--judge` name (a built-in policy, `openai:MODEL[@BASE_URL]`,
`hf:MODEL_ID`), checked before any work and turned into a `Model`."""
from __future__ import annotations

import importlib.util
import urllib.parse
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
        if kind == "openai":
            check_base_url(spec, rest.partition("@")[2])
        if kind == "hf" and not all(importlib.util.find_spec(m) for m in ("transformers",
                                                                          "torch")):
            raise ModelSpecError(TRANSFORMERS_MISSING)
        return
    guess = get_close_matches(f"{kind}:" if colon else spec,
                              [*POLICIES, "random", "openai:", "hf:"], n=1)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    raise ModelSpecError(f"unknown model spec {spec!r}{hint} (known: {', '.join(POLICIES)}, "
                         "random:SEED, openai:MODEL[@BASE_URL], hf:MODEL_ID)")


DEFAULT_BASE_URL = "http://localhost:8000/v1"  # OpenAIChatModel's default endpoint


def check_base_url(spec: str, base_url: str) -> None:
    """An endpoint is an http(s) URL with a host (urllib would also open file: and ftp: URLs,
    reading a local file as every reply)."""
    if not base_url:
        return
    try:
        parts = urllib.parse.urlsplit(base_url.strip())
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ModelSpecError(f"{spec!r}: the endpoint must be an http(s) URL such as "
                             f"{DEFAULT_BASE_URL}")


def model_identity(spec: str) -> str:
    """What a result line records of the model (or judge) that decided it, so that a resume
    reuses only its own lines: the adapter, the model and, for an endpoint, its URL (without
    user:password, with the default made explicit). `oracle` (the built-in policy) is not
    `openai:oracle@URL`, `openai:M@URL1` is not `openai:M@URL2`, and `hf:M` is neither."""
    kind, _, rest = spec.partition(":")
    if kind == "random":
        return f"random:{int(rest or 0)}"
    if spec in POLICIES or kind != "openai":
        return spec
    model, _, base_url = rest.partition("@")
    return f"openai:{model}@{endpoint_identity(base_url or DEFAULT_BASE_URL)}"


def is_policy(name: str) -> bool:
    """Whether `name` is a built-in policy's identity (its name: `oracle`, `random:3`, ...)."""
    kind, _, rest = name.partition(":")
    return name in POLICIES or (kind == "random" and rest.lstrip("-").isdigit())


def endpoint_identity(url: str) -> str:
    """`url` as it identifies an endpoint: scheme and host in lower case, no credentials, no
    trailing slash."""
    parts = urllib.parse.urlsplit(url.strip())
    host = parts.hostname or ""
    host = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if _port(parts) else "")
    return urllib.parse.urlunsplit((parts.scheme.lower(), host, parts.path.rstrip("/"),
                                    parts.query, ""))


def _port(parts) -> int | None:
    try:
        return parts.port
    except ValueError:  # a port that is not a number: the URL fails later, named as given
        return None


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
