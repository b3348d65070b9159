"""Scenario modules. Importing `load_scenarios()` imports every module here, which registers
every `Scenario` subclass: adding a scenario is adding a module (and its manifest)."""
from __future__ import annotations

import functools
import importlib
import pkgutil

_SKIP = {"base", "vocabulary"}


def load_scenarios() -> dict:
    """Every registered scenario class by name, after importing all scenario modules."""
    return dict(_load_scenarios())


@functools.lru_cache(maxsize=1)  # the modules do not change while a process runs
def _load_scenarios() -> dict:
    from proactivebench_builder.transforms import base

    for module in pkgutil.iter_modules(__path__):
        if module.name not in _SKIP and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    return dict(sorted(base.registered().items()))


def get_scenario(name: str):
    scenarios = load_scenarios()
    if name not in scenarios:
        raise KeyError(f"unknown scenario {name!r}; registered: {', '.join(scenarios)}")
    return scenarios[name]
