"""Source manifests: one declarative YAML file per source in `source_manifests/`.

A manifest says where a source lives and what it is (layout, licence, citation, URLs, checksums),
which parameters its scenario uses (sample counts, shard sizes, ...) and its class names. It is
package data, so the installed distribution (a Dataflow or Dask worker) reads the same file.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import os
from importlib import resources

import yaml

from proactivebench_builder.core.errors import ScenarioError

MANIFEST_PACKAGE = "proactivebench_builder.source_manifests"
REQUIRED_KEYS = ("name", "config_name", "dataset", "license", "citation", "homepage",
                 "source_subdir", "layout", "parameters")
# Keys the project reads when present; any other key is the scenario's own (class names, ...),
# except one so close to a known key that it is surely a misspelling of it.
OPTIONAL_KEYS = ("parameter_rules", "checksums", "expected_files", "downloads")


class ManifestError(ScenarioError):
    """A manifest is missing or malformed."""


def manifest_location(name: str, folder: str | None = None) -> str:
    """Where a user finds scenario `name`'s manifest: `source_manifests/<name>.yaml` in this
    package, else its path in `folder` (a plug-in keeps its manifest beside its module)."""
    filename = f"{name}.yaml"
    if resources.files(MANIFEST_PACKAGE).joinpath(filename).is_file():
        return f"source_manifests/{filename}"
    if folder and os.path.isfile(os.path.join(folder, filename)):
        return os.path.join(folder, filename)
    return filename


def manifest_bytes(filename: str, folder: str | None = None) -> bytes:
    """A file of this package's manifests, else of `folder` (the folder of a scenario module
    outside the package: a plug-in keeps its manifest and data files beside its module)."""
    try:
        return resources.files(MANIFEST_PACKAGE).joinpath(filename).read_bytes()
    except FileNotFoundError as err:
        path = os.path.join(folder, filename) if folder else None
        if path and os.path.isfile(path):
            with open(path, "rb") as handle:
                return handle.read()
        raise ManifestError(f"no file {filename!r} in {MANIFEST_PACKAGE} or beside the scenario "
                            "module") from err


@functools.lru_cache(maxsize=None)
def load_manifest(name: str, folder: str | None = None) -> dict:
    """The parsed manifest `<name>.yaml` (packaged, else in `folder`), checked for the required
    keys and its own parameter values."""
    manifest = yaml.safe_load(manifest_bytes(f"{name}.yaml", folder))
    if not isinstance(manifest, dict):
        raise ManifestError(f"manifest {name}.yaml is not a mapping")
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise ManifestError(f"manifest {name}.yaml lacks {missing}" + _misspelt(manifest, missing))
    for key in manifest:
        guess = difflib.get_close_matches(str(key), OPTIONAL_KEYS, n=1, cutoff=0.85)
        if guess and key not in OPTIONAL_KEYS:
            raise ManifestError(f"manifest {name}.yaml: unknown key {key!r}; did you mean "
                                f"{guess[0]!r}?")
    if manifest["name"] != name:
        raise ManifestError(f"manifest {name}.yaml names itself {manifest['name']!r}")
    for parameter in manifest.get("parameter_rules") or {}:
        if parameter not in manifest["parameters"]:
            raise ManifestError(f"manifest {name}.yaml: a rule for the unknown parameter "
                                f"{parameter!r}")
    for parameter, value in manifest["parameters"].items():
        problem = parameter_problem(manifest, parameter, value)
        if problem:
            raise ManifestError(f"manifest {name}.yaml: its own value of {parameter}: {problem}")
    return manifest


def _misspelt(manifest: dict, missing: list[str]) -> str:
    """" (did you mean ...?)" naming the keys present that look like the missing ones."""
    hints = [f"is {found[0]!r} a misspelling of {key!r}?" for key in missing
             for found in [difflib.get_close_matches(key, [str(k) for k in manifest], n=1,
                                                     cutoff=0.75)] if found]
    return f" ({' '.join(hints)})" if hints else ""


TYPES = {"int": int, "float": (int, float), "bool": bool, "str": str, "list": list, "dict": dict}


def parameter_rule(manifest: dict, parameter: str) -> dict:
    """The manifest's `parameter_rules` entry for `parameter`; without one, the type of the
    manifest's own value (an int stays an int, a list a list)."""
    rule = dict((manifest.get("parameter_rules") or {}).get(parameter) or {})
    if "type" not in rule and "choices" not in rule:
        default = manifest["parameters"].get(parameter)
        kind = next((k for k, t in (("bool", bool), ("int", int), ("float", float),
                                    ("str", str), ("list", list), ("dict", dict))
                     if isinstance(default, t)), None)
        if kind:
            rule["type"] = kind
    return rule


def parameter_problem(manifest: dict, parameter: str, value) -> str | None:
    """Why `value` is not a valid value of `parameter` (None when it is)."""
    rule = parameter_rule(manifest, parameter)
    if "choices" in rule:
        if value not in rule["choices"]:
            return f"{value!r} is not one of {', '.join(map(str, rule['choices']))}"
        return None
    kind = rule.get("type")
    if kind is None:
        return None
    # bool is an int in Python, and yaml reads `1e3` as a string: neither is accepted loosely
    wrong = isinstance(value, bool) and kind != "bool" or not isinstance(value, TYPES[kind])
    if wrong:
        return f"{value!r} is not {'an' if kind == 'int' else 'a'} {kind}"
    if "min" in rule and value < rule["min"]:
        return f"{value!r} is below its minimum {rule['min']}"
    if "max" in rule and value > rule["max"]:
        return f"{value!r} is above its maximum {rule['max']}"
    return None


def manifest_sha256(name: str, folder: str | None = None) -> str:
    """Checksum of the manifest file, recorded in the dataset card's reproducibility stamp."""
    return hashlib.sha256(manifest_bytes(f"{name}.yaml", folder)).hexdigest()


@functools.lru_cache(maxsize=None)
def load_data_file(filename: str, folder: str | None = None):
    """A JSON or YAML data file that manifests refer to (e.g. a long class-name table)."""
    raw = manifest_bytes(filename, folder)
    return yaml.safe_load(raw)
