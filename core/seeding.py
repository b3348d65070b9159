"""Deterministic randomness: every choice is seeded by (global seed, scenario, key, purpose).

Choices never depend on processing order, worker count or runner, so the same inputs give the same
samples everywhere. Each purpose gets its own stream, so adding a new choice to a scenario does
not shift the ones it already makes.
"""
from __future__ import annotations

import hashlib
import random


def stable_hash(*parts: object) -> int:
    """A 128-bit integer from md5 of the parts: portable across processes and Python versions
    (unlike `hash()`, which is salted per process)."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest(), "big")


def rng_for(seed: int, scenario: str, key: str, purpose: str) -> random.Random:
    """The random stream for one choice about one sample."""
    return random.Random(stable_hash(seed, scenario, key, purpose))


def hash_rank(seed: int, scenario: str, purpose: str, key: str) -> int:
    """A sort key that orders candidates pseudo-randomly but reproducibly (used for subsampling:
    the k smallest ranks are a uniform, order-independent sample)."""
    return stable_hash(seed, scenario, purpose, key)
