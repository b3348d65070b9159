"""Scenarios: one folder or one module per scenario, and this registry. `load_scenarios()` imports
every scenario of this package and every module a user makes visible, which registers every
`Scenario` subclass: adding a scenario is adding a folder or module (and its manifest), and no
list of scenarios is edited anywhere. A scenario imports what it needs of this project from
`transforms.api` alone.

Inside this package, every folder and every module is a scenario (a built-in's folder holds its
`Scenario` class, its play declaration and its miniature writer; one module `transforms/dim.py`
is a whole scenario too), except the shared modules (`SHARED_MODULES`: the base class and the
API) and names starting with `_`. Their manifests and data files are in `source_manifests/`,
which setup.py packages with them (for `pip install .` and Dataflow's `--setup_file`).

What the rest of the project asks about scenarios by config (the runtime, `validate`, `inspect`,
the upstream export and import) it asks here, of the declarations (`core.play.Play`): their
behaviour, short names, aliases and order, upstream's keyword table, the probe's pool.

A scenario module outside this package becomes visible in one of two ways
(docs/adding_a_scenario.md); either way its manifest `<name>.yaml` sits in the same folder as
the module:
- the environment variable `PROACTIVEBENCH_SCENARIO_PATH`: folders (separated by os.pathsep)
  whose `*.py` files (not starting with `_`) are scenario modules. Each is imported from its
  file under a private name made from its path (`plugin_module_name`), so no plug-in hides a
  module of the standard library or of an installed package, nor is hidden by one; processes
  started from this one (multi-processing and Dask local workers inherit the environment) import
  the same files. The folder is also appended to `sys.path`, for the helper modules (`_*.py`) a
  scenario module imports by name. Those files are code: every command that loads the registry
  (build, validate, inspect, publish, evaluate) runs them, so the variable names only folders
  whose every `*.py` file is trusted;
- an entry point of group `proactivebench_builder.scenarios` in an installed distribution
  (`entry_points={"proactivebench_builder.scenarios": ["shapes = my_pkg.shapes"]}`): the way
  for remote workers (Dataflow, a Dask cluster) that install the same packages.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
from importlib.metadata import entry_points

from proactivebench_builder.core import moved
from proactivebench_builder.core.errors import ScenarioError
from proactivebench_builder.core.play import Behaviour
# by name, not as the module `vocabulary`: this package has no module of that name (it moved to
# core; importing `transforms.vocabulary` says so, see core.moved)
from proactivebench_builder.core.vocabulary import (action_of, check_vocabulary, known_table,
                                                    upstream_table)
from proactivebench_builder.transforms import base

moved.install()  # an import of a module that moved from here names its new home

PATH_VARIABLE = "PROACTIVEBENCH_SCENARIO_PATH"
ENTRY_POINT_GROUP = "proactivebench_builder.scenarios"
# this package's modules that are not scenarios: the base class and the scenario author's API
SHARED_MODULES = ("api", "base")


class ScenarioPathError(ScenarioError):
    """A folder or module named by PROACTIVEBENCH_SCENARIO_PATH or an entry point is unusable."""


class UnknownConfig(ScenarioError):
    """No registered scenario declares this config."""


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
        if folder not in sys.path:  # for the helper modules (`_*.py`) a scenario module imports
            sys.path.append(folder)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py") and not name.startswith("_"):
                _import_plugin(os.path.join(folder, name))


def plugin_module_name(path: str) -> str:
    """The private name a scenario module of PROACTIVEBENCH_SCENARIO_PATH is imported under:
    made from its path, so that it neither hides nor is hidden by any other module (a plug-in
    `calendar.py` imported by plain name would be the standard library's `calendar`), and the
    same in every process that imports it (multi-processing workers inherit the variable)."""
    stem = "".join(c if c.isalnum() else "_" for c in os.path.basename(path)[:-3])
    digest = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()
    return f"_proactivebench_plugin_{digest[:12]}_{stem}"


def _import_plugin(where: str) -> None:
    """Import a scenario module of the user's by its file path: any error in it is the author's,
    one line (a ScenarioError) naming the file; --debug shows its traceback."""
    module = plugin_module_name(where)
    if module in sys.modules:
        return
    try:
        if not os.path.isfile(where):  # a folder, a FIFO, a dangling link: never opened
            raise ImportError("not a regular file")
        spec = importlib.util.spec_from_file_location(module, where)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module] = loaded  # as import does: the module may look itself up
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[module]
            raise
    except ScenarioError:
        raise
    except Exception as err:  # noqa: BLE001 - the plug-in's own code: reported, not hidden
        raise _import_failed(where, err) from err


def _import_failed(where: str, err: Exception) -> ScenarioPathError:
    """One line naming the file of a scenario module whose import failed: its author's error."""
    line = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
    return ScenarioPathError(f"{where}{line}: {type(err).__name__}: {err}")


def _import_entry_points() -> None:
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            entry.load()
        except ScenarioError:
            raise
        except Exception as err:  # noqa: BLE001 - the plug-in's own code: reported, not hidden
            raise ScenarioPathError(f"entry point {entry.name} = {entry.value} "
                                    f"({ENTRY_POINT_GROUP}): {err}") from err


def package_scenario_modules() -> list[str]:
    """The scenarios inside this package, by module name: every folder and every module here
    except the shared ones (`SHARED_MODULES`) and those whose name starts with `_`."""
    return [f"{__name__}.{module.name}" for module in pkgutil.iter_modules(__path__)
            if not module.name.startswith("_") and module.name not in SHARED_MODULES]


def _import_package_scenario(module: str) -> None:
    """Import a scenario folder or module of this package; an error in a module a user added
    here is one line (a ScenarioError) naming its file, as for a plug-in."""
    try:
        importlib.import_module(module)
    except ScenarioError:
        raise
    except Exception as err:  # noqa: BLE001 - the scenario's own code: reported, not hidden
        spec = importlib.util.find_spec(module)
        raise _import_failed(spec.origin if spec and spec.origin else module, err) from err


@functools.lru_cache(maxsize=1)  # the modules do not change while a process runs
def _load_scenarios() -> dict:
    for module in package_scenario_modules():
        _import_package_scenario(module)
    _import_path_modules()
    _import_entry_points()
    scenarios = dict(sorted(base.registered().items()))
    check_vocabulary(scenarios)
    return scenarios


def get_scenario(name: str):
    scenarios = load_scenarios()
    if name not in scenarios:
        raise KeyError(f"unknown scenario {name!r}; registered: {', '.join(scenarios)}")
    return scenarios[name]


def manifest_of(name: str) -> dict:
    """The manifest of the registered scenario `name` (packaged, or beside a plug-in's module)."""
    return get_scenario(name).read_manifest()


def scenario_for_config(config: str):
    """The registered scenario class whose `config_name` is `config`, or None."""
    for cls in load_scenarios().values():
        if cls.config_name == config:
            return cls
    return None


# ---- what the declarations say, by config --------------------------------------------------------

def known_configs() -> list[str]:
    """The configs of every registered scenario: upstream's seven in the paper's order
    (`Play.upstream_order`), then the others sorted."""
    classes = load_scenarios().values()
    upstream = sorted((c.environment.upstream_order, c.config_name) for c in classes
                      if c.environment.upstream_order is not None)
    others = sorted(c.config_name for c in classes if c.environment.upstream_order is None)
    return [config for _, config in upstream] + others


def config_order(configs) -> list[str]:
    """`configs` in the order of `known_configs`, unknown ones last, sorted."""
    order = known_configs()
    known = [c for c in order if c in configs]
    return known + sorted(set(configs) - set(known))


def config_aliases() -> dict[str, str]:
    """Every name a user may give for a config (lower case: its config name, scenario name,
    short name and declared aliases) and the config it names."""
    aliases = {}
    for name, cls in load_scenarios().items():
        play = cls.environment
        for alias in (cls.config_name, name, play.short_name or cls.config_name, *play.aliases):
            aliases[alias.lower()] = cls.config_name
    return aliases


def resolve_config(name: str) -> str:
    """The config name from a config name, a scenario name, a short name or an alias (any case)."""
    config = config_aliases().get(name.strip().lower())
    if config is None:
        raise ValueError(f"unknown scenario/config {name!r}; known: "
                         f"{', '.join(known_configs())}")
    return config


def short_name(config: str) -> str:
    """The label of a config in tables: its scenario's declared short name, else the config."""
    cls = scenario_for_config(config)
    return (cls.environment.short_name if cls else "") or config


@functools.lru_cache(maxsize=None)
def behaviour_for_config(config: str) -> Behaviour:
    """The behaviour that plays `config`, as its scenario declares it."""
    cls = scenario_for_config(config)
    if cls is None:
        raise UnknownConfig(f"no registered scenario has config {config!r} (registered: "
                            f"{', '.join(c.config_name for c in load_scenarios().values())}); "
                            f"make its module visible with {PATH_VARIABLE}=FOLDER or an "
                            "entry point (README: Adding a scenario)")
    return cls.environment.rules(config, known_keywords())


def known_keywords() -> dict[str, str]:
    """keyword -> action over upstream's table and every registered scenario's declaration."""
    return known_table(load_scenarios())


def upstream_keywords() -> dict[str, str]:
    """Upstream's keyword table: the actions of its seven scenarios, in the paper's order."""
    return upstream_table(load_scenarios())


def upstream_action_of(option: str) -> str:
    """The action an option requests by upstream's unscoped rule (ValueError unless exactly one
    keyword of upstream's table occurs in it)."""
    return action_of(option, upstream_keywords())


def probe_pool() -> tuple[str, ...]:
    """The random-suggestion probe's fixed pool: the suggestions upstream's seven scenarios offer
    it (`Play.probe_suggestions`), in the paper's order. Fixed, so that adding a scenario never
    changes another scenario's probe."""
    upstream = sorted((c.environment.upstream_order, c.environment.probe_suggestions)
                      for c in load_scenarios().values()
                      if c.environment.upstream_order is not None)
    return tuple(option for _, options in upstream for option in options)


def conformance_cases() -> list[dict]:
    """Every declared conformance case, upstream's scenarios in the paper's order."""
    plays = sorted((c.environment.upstream_order or 99, c.config_name, c.environment)
                   for c in load_scenarios().values())
    return [case for _, _, play in plays for case in play.conformance_cases]
