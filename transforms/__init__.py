"""Scenario modules. `load_scenarios()` imports every module here, and every module a user makes
visible, which registers every `Scenario` subclass: adding a scenario is adding a module (and its
manifest), and no list of scenarios is edited anywhere.

A scenario module outside this package becomes visible in one of two ways (README, "Adding a
scenario"); either way its manifest `<name>.yaml` sits in the same folder as the module:
- the environment variable `PROACTIVEBENCH_SCENARIO_PATH`: folders (separated by os.pathsep)
  whose `*.py` files are scenario modules. Each folder is put on `sys.path` and each module is
  imported by its plain name, so processes started from this one (multi-processing and Dask
  local workers inherit the environment) find the same modules;
- an entry point of group `proactivebench_builder.scenarios` in an installed distribution
  (`entry_points={"proactivebench_builder.scenarios": ["shapes = my_pkg.shapes"]}`): the way
  for remote workers (Dataflow, a Dask cluster) that install the same packages.
"""
from __future__ import annotations

import functools
import importlib
import os
import pkgutil
import sys

from proactivebench_builder.core.play import VocabularyError  # noqa: F401

_SKIP = {"base", "vocabulary", "environment"}
PATH_VARIABLE = "PROACTIVEBENCH_SCENARIO_PATH"
ENTRY_POINT_GROUP = "proactivebench_builder.scenarios"


class ScenarioPathError(RuntimeError):
    """A folder or module named by PROACTIVEBENCH_SCENARIO_PATH or an entry point is unusable."""


def load_scenarios() -> dict:
    """Every registered scenario class by name, after importing all scenario modules."""
    return dict(_load_scenarios())


def extra_module_folders() -> list[str]:
    """The folders of PROACTIVEBENCH_SCENARIO_PATH, absolute, in order."""
    value = os.environ.get(PATH_VARIABLE, "")
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p.strip()]


def _import_path_modules() -> None:
    for folder in extra_module_folders():
        if not os.path.isdir(folder):
            raise ScenarioPathError(f"{PATH_VARIABLE}: {folder} is not a folder")
        if folder not in sys.path:
            sys.path.append(folder)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py") and not name.startswith("_"):
                importlib.import_module(name[:-3])


def _import_entry_points() -> None:
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            entry.load()
        except ImportError as err:
            raise ScenarioPathError(f"entry point {entry.name} = {entry.value} "
                                    f"({ENTRY_POINT_GROUP}): {err}") from err


@functools.lru_cache(maxsize=1)  # the modules do not change while a process runs
def _load_scenarios() -> dict:
    from proactivebench_builder.transforms import base
    from proactivebench_builder.core import vocabulary

    for module in pkgutil.iter_modules(__path__):
        if module.name not in _SKIP and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    _import_path_modules()
    _import_entry_points()
    scenarios = dict(sorted(base.registered().items()))
    vocabulary.check_vocabulary(scenarios)
    return scenarios


def get_scenario(name: str):
    scenarios = load_scenarios()
    if name not in scenarios:
        raise KeyError(f"unknown scenario {name!r}; registered: {', '.join(scenarios)}")
    return scenarios[name]


def scenario_for_config(config: str):
    """The registered scenario class whose `config_name` is `config`, or None."""
    for cls in load_scenarios().values():
        if cls.config_name == config:
            return cls
    return None


def manifest_of(name: str) -> dict:
    """The manifest of the registered scenario `name` (packaged, or beside a plug-in's module)."""
    return get_scenario(name).read_manifest()
