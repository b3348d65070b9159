"""Scenario objects on the workers, built from the build's configuration (DoFns carry names and
plain parameters and look scenarios up here, as seqio looks tasks up by name)."""
from __future__ import annotations

import threading

from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.layout import TRAIN
from proactivebench_builder.pipeline.allocator import return_freed_buffers
from proactivebench_builder.transforms import get_scenario

_SCENARIOS: dict = {}


def scenario_instance(name: str, config: BuildConfig, root: str | None = None):
    """A scenario object on the worker, built from plain parameters: the seed, its source root
    (or `root`) and the manifest parameters overridden with --set. Built once per thread for
    the same arguments (DoFns call this for every element; a scenario may keep per-instance
    readers, e.g. ChangeIt's open video, so instances are not shared between threads)."""
    root = root or config.sources[name]
    overrides = config.overrides_of(name)
    cache_key = (threading.get_ident(), name, config.seed, root, repr(sorted(overrides.items())))
    scenario = _SCENARIOS.get(cache_key)
    if scenario is None:
        return_freed_buffers()  # in every worker process (idempotent)
        scenario = get_scenario(name)(config.seed, root)
        scenario.params.update(overrides)
        _SCENARIOS[cache_key] = scenario
    return scenario


def train_scenario(name: str, config: BuildConfig):
    """The scenario object that reads `name`'s train sources."""
    return scenario_instance(name, config, config.train_sources[name])


def branch_scenario(branch: str, name: str, config: BuildConfig):
    """The scenario object that reads `name`'s test pool (branch TEST) or train split (TRAIN)."""
    if branch == TRAIN:
        return train_scenario(name, config)
    return scenario_instance(name, config)


def reads_train_with_test(name: str, config: BuildConfig) -> bool:
    """Whether the test read of `name` also yields its train split: its train units are its
    test units, from the same root, so each file is read once per build (not once per split)."""
    train = config.train_sources
    return (name in train and train[name] == config.sources[name]
            and get_scenario(name).train_units_are_test_units)
