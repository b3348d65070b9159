"""Source manifests: one declarative YAML file per source in `source_manifests/`.

A manifest says where a source lives and what it is (layout, licence, citation, URLs, checksums),
which parameters its scenario uses (sample counts, shard sizes, ...) and its class names. It is
package data, so the installed distribution (a Dataflow or Dask worker) reads the same file.
"""
from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import math
import operator
import os
from importlib import resources

import yaml

from proactivebench_builder.core import fileio
from proactivebench_builder.core.errors import ScenarioError

MANIFEST_PACKAGE = "proactivebench_builder.source_manifests"
REQUIRED_KEYS = ("name", "config_name", "dataset", "license", "citation", "homepage",
                 "source_subdir", "layout", "parameters")
MAX_MANIFEST_BYTES = 64 << 20  # a manifest or its data file (a class table) is package text
# Keys the project reads when present; any other key is the scenario's own (class names, ...),
# except one so close to a known key that it is surely a misspelling of it.
OPTIONAL_KEYS = ("parameter_rules", "parameter_constraints", "checksums", "expected_files",
                 "downloads")


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
    outside the package: a plug-in keeps its manifest and data files beside its module). Named
    by its plain name (a path would reach outside both), read only when a regular file."""
    problem = data_file_name_problem(filename)
    if problem:
        raise ManifestError(problem)
    packaged = resources.files(MANIFEST_PACKAGE).joinpath(filename)
    if packaged.is_file():  # this package's own data
        return packaged.read_bytes()
    path = os.path.join(folder, filename) if folder else None
    if path is None:  # a scenario of this package: its files are package data only
        raise ManifestError(f"no file {filename!r} in source_manifests/ ({MANIFEST_PACKAGE}), "
                            "where a scenario inside transforms/ keeps its manifest and data "
                            "files")
    if not os.path.lexists(path):
        raise ManifestError(f"no file {filename!r} in {MANIFEST_PACKAGE} or beside the scenario "
                            "module")
    try:
        return fileio.read_bytes(path, limit=MAX_MANIFEST_BYTES)
    except OSError as err:
        raise ManifestError(f"{path}: {err.strerror or err}") from None


@functools.lru_cache(maxsize=None)
def load_manifest(name: str, folder: str | None = None) -> dict:
    """The parsed manifest `<name>.yaml` (packaged, else in `folder`), checked for the required
    keys, its rules and its own parameter values. A plug-in's manifest is its author's text:
    anything wrong with it is one ManifestError naming the file."""
    manifest = _parse_yaml(manifest_bytes(f"{name}.yaml", folder), f"manifest {name}.yaml")
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
    if not isinstance(manifest["parameters"], dict):
        raise ManifestError(f"manifest {name}.yaml: parameters is not a mapping")
    if not isinstance(manifest.get("parameter_rules") or {}, dict):
        raise ManifestError(f"manifest {name}.yaml: parameter_rules is not a mapping")
    for parameter, rule in (manifest.get("parameter_rules") or {}).items():
        if parameter not in manifest["parameters"]:
            raise ManifestError(f"manifest {name}.yaml: a rule for the unknown parameter "
                                f"{parameter!r}")
        problem = rule_problem(rule)
        if problem:
            raise ManifestError(f"manifest {name}.yaml: the rule of {parameter}: {problem}")
    for parameter, value in manifest["parameters"].items():
        problem = parameter_problem(manifest, parameter, value)
        if problem:
            raise ManifestError(f"manifest {name}.yaml: its own value of {parameter}: {problem}")
    try:
        check_constraints_declared(manifest)
    except ManifestError as err:
        raise ManifestError(f"manifest {name}.yaml: {err}") from None
    return manifest


def _parse_yaml(raw: bytes, what: str):
    """YAML (safe: no tags that build objects) or a ManifestError naming `what`."""
    try:
        return yaml.safe_load(raw)
    # PyYAML's constructors fail on some malformed scalars with their own IndexError or
    # ValueError (`!!float` alone), not a YAMLError: every failure to read the text is one
    except Exception as err:  # noqa: BLE001
        detail = " ".join(str(err).split())
        raise ManifestError(f"{what} is not valid YAML: {detail[:300]}") from None


def _misspelt(manifest: dict, missing: list[str]) -> str:
    """" (did you mean ...?)" naming the keys present that look like the missing ones."""
    hints = [f"is {found[0]!r} a misspelling of {key!r}?" for key in missing
             for found in [difflib.get_close_matches(key, [str(k) for k in manifest], n=1,
                                                     cutoff=0.75)] if found]
    return f" ({' '.join(hints)})" if hints else ""


# ---- the rules of one parameter --------------------------------------------------------------
#
# A rule (`parameter_rules: {P: RULE}`) is a mapping of:
#   type: int | float | bool | str | list | dict     choices: [allowed values]
#   min, max: bounds of a number                       data_file: true (a data file's plain name)
#   items: RULE          every element of a list
#   keys: [names]        the keys a mapping may have   values: RULE   every value of a mapping
#   fields: {key: RULE}  the keys a mapping may have, each with its own rule
#   required: [keys]     the keys a mapping must have
# Numbers are finite (YAML's .nan and .inf pass no range), and an int fits 64 bits.

TYPES = {"int": int, "float": (int, float), "bool": bool, "str": str, "list": list, "dict": dict}
RULE_KEYS = ("type", "choices", "min", "max", "data_file", "items", "keys", "values", "fields",
             "required")
LARGEST_INT = 2 ** 63 - 1
# Parameters that shape only the bundled miniature source, which is written from the manifest
# itself (pipeline/miniature.py): `--set` cannot reach them.
MINIATURE_PREFIX = "miniature_"


def rule_problem(rule) -> str | None:
    """Why `rule` (a manifest's own) is not a rule this module can apply, or None."""
    if not isinstance(rule, dict):
        return f"{rule!r} is not a mapping"
    unknown = [k for k in rule if k not in RULE_KEYS]
    if unknown:
        return f"unknown key {unknown[0]!r} (a rule holds {', '.join(RULE_KEYS)})"
    if "type" in rule and (not isinstance(rule["type"], str) or rule["type"] not in TYPES):
        return f"type {rule['type']!r} is not one of {', '.join(TYPES)}"
    if "choices" in rule and not isinstance(rule["choices"], list):
        return "choices is not a list"
    for bound in ("min", "max"):
        if bound in rule and (isinstance(rule[bound], bool)
                              or not isinstance(rule[bound], (int, float))):
            return f"{bound} {rule[bound]!r} is not a number"
    for key in ("keys", "required"):
        if key in rule and not (isinstance(rule[key], list)
                                and all(isinstance(k, str) for k in rule[key])):
            return f"{key} is not a list of names"
    nested = [rule[k] for k in ("items", "values") if k in rule]
    if "fields" in rule:
        if not isinstance(rule["fields"], dict):
            return "fields is not a mapping"
        nested += list(rule["fields"].values())
    for inner in nested:
        problem = rule_problem(inner)
        if problem:
            return problem
    return None


def parameter_rule(manifest: dict, parameter: str) -> dict:
    """The manifest's `parameter_rules` entry for `parameter`; without one, the type of the
    manifest's own value (an int stays an int, a list a list)."""
    rule = dict((manifest.get("parameter_rules") or {}).get(parameter) or {})
    if "type" not in rule and "choices" not in rule:
        kind = _kind_of(manifest["parameters"].get(parameter))
        if kind:
            rule["type"] = kind
    return rule


def _kind_of(value) -> str | None:
    return next((k for k, t in (("bool", bool), ("int", int), ("float", float), ("str", str),
                                ("list", list), ("dict", dict)) if isinstance(value, t)), None)


def parameter_problem(manifest: dict, parameter: str, value) -> str | None:
    """Why `value` is not a valid value of `parameter` (None when it is)."""
    return value_problem(parameter_rule(manifest, parameter), value)


def value_problem(rule: dict, value) -> str | None:
    """Why `value` breaks `rule` (None when it does not); an element is named by its place."""
    if "choices" in rule:
        # by type too: True == 1 and 1 == 1.0 in Python
        if not any(type(c) is type(value) and c == value for c in rule["choices"]):
            return f"{value!r} is not one of {', '.join(map(str, rule['choices']))}"
        return None
    kind = rule.get("type")
    if kind is not None:
        # bool is an int in Python, and yaml reads `1e3` as a string: neither is accepted loosely
        if isinstance(value, bool) and kind != "bool" or not isinstance(value, TYPES[kind]):
            return f"{value!r} is not {'an' if kind == 'int' else 'a'} {kind}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        problem = _number_problem(rule, value)
        if problem:
            return problem
    if rule.get("data_file"):
        problem = data_file_name_problem(value)
        if problem:
            return problem
    if isinstance(value, list) and "items" in rule:
        for index, item in enumerate(value):
            problem = value_problem(rule["items"], item)
            if problem:
                return f"item {index}: {problem}"
    if isinstance(value, dict):
        return _mapping_problem(rule, value)
    return None


def _number_problem(rule: dict, value) -> str | None:
    if isinstance(value, int):
        if abs(value) > LARGEST_INT:
            return f"{value} is too large (at most {LARGEST_INT})"
    elif not math.isfinite(value):  # NaN compares false with every bound: it passes no range
        return f"{value!r} is not a finite number"
    if "min" in rule and value < rule["min"]:
        return f"{value!r} is below its minimum {rule['min']}"
    if "max" in rule and value > rule["max"]:
        return f"{value!r} is above its maximum {rule['max']}"
    return None


def _mapping_problem(rule: dict, value: dict) -> str | None:
    fields = rule.get("fields") or {}
    allowed = list(rule.get("keys") or []) + list(fields)
    for key, item in value.items():
        if allowed and key not in allowed:
            return f"unknown key {key!r} (known: {', '.join(allowed)})"
        inner = fields.get(key) if key in fields else rule.get("values")
        problem = value_problem(inner, item) if inner else None
        if problem:
            return f"{key!r}: {problem}"
    absent = [k for k in rule.get("required") or [] if k not in value]
    if absent:
        return f"lacks {', '.join(map(repr, absent))}"
    return None


def data_file_name_problem(name) -> str | None:
    """A data file is named by its plain file name, found in this package's manifests or beside
    a plug-in's module: never a path."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name \
            or "\\" in name or "\x00" in name:
        return f"{name!r} is not the plain name of a data file (no folders)"
    return None


def settable_problem(parameter: str) -> str | None:
    """Why `--set` cannot reach `parameter`, or None."""
    if parameter.startswith(MINIATURE_PREFIX):
        return ("shapes only the bundled miniature source, which is written from the manifest "
                "(edit the manifest to change it)")
    return None


# ---- rules across parameters -----------------------------------------------------------------
#
# `parameter_constraints` lists rules no single value can break alone, each a mapping
# {check: EXPRESSION, why: TEXT}. An expression compares parameters (and other keys of the
# manifest, e.g. a table's length) with numbers: + - * /, comparisons, and, or, not, and the
# functions len, sum (of a mapping: of its values), min, max. It is parsed with `ast`, every
# node checked against that list, and evaluated by walking it: nothing else of Python runs.

_COMPARISONS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
                ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv}
_FUNCTIONS = {"len": len, "min": min, "max": max,
              "sum": lambda v: sum(v.values() if isinstance(v, dict) else v)}
_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.BinOp, ast.UnaryOp,
          ast.USub, ast.Not, ast.Constant, ast.Name, ast.Load, ast.Call,
          *_COMPARISONS, *_ARITHMETIC)


def _evaluate(node, names: dict):
    """The value of a checked expression tree (`_names_of` has vetted every node)."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, names)
    if isinstance(node, ast.BoolOp):
        values = (_evaluate(v, names) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, names)
        for op, right_node in zip(node.ops, node.comparators):
            right = _evaluate(right_node, names)
            if not _COMPARISONS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            # arithmetic on numbers only: `list * int` would allocate what a value claims
            raise TypeError(f"arithmetic on {type(left).__name__} and {type(right).__name__}")
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, names)
        return -value if isinstance(node.op, ast.USub) else not value
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](_evaluate(node.args[0], names))
    return names[node.id]


def _names_of(tree, known) -> list[str]:
    """The names `tree` reads, in order; ManifestError for any node outside the language."""
    functions = set()
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise ManifestError(f"{type(node).__name__} is not part of a rule (numbers, "
                                "parameters, + - * /, comparisons, and/or/not, len/sum/min/max)")
        if isinstance(node, ast.Constant) and type(node.value) not in (int, float):
            raise ManifestError(f"the constant {node.value!r} is not a number")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                    and len(node.args) == 1 and not node.keywords):
                raise ManifestError("a call other than len(x), sum(x), min(x) or max(x)")
            functions.add(id(node.func))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in functions:
            if node.id not in known:
                raise ManifestError(f"{node.id!r} is neither a parameter nor a key of the "
                                    "manifest")
            if node.id not in names:
                names.append(node.id)
    return names


def _constraints(manifest: dict) -> list[tuple]:
    """(expression, why, tree, names) of each declared rule, checked."""
    declared = manifest.get("parameter_constraints") or []
    if not isinstance(declared, list):
        raise ManifestError("parameter_constraints is not a list")
    known = set(manifest) | set(manifest.get("parameters") or {})
    parsed = []
    for entry in declared:
        if not isinstance(entry, dict) or not isinstance(entry.get("check"), str) \
                or set(entry) - {"check", "why"}:
            raise ManifestError(f"parameter_constraints: {entry!r} is not "
                                "{check: EXPRESSION, why: TEXT}")
        try:
            tree = ast.parse(entry["check"].strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            raise ManifestError(f"parameter_constraints: {entry['check']!r} does not parse "
                                f"({type(err).__name__})") from None
        try:
            names = _names_of(tree, known)
        except ManifestError as err:
            raise ManifestError(f"parameter_constraints: {entry['check']!r}: {err}") from None
        parsed.append((entry["check"], str(entry.get("why") or ""), tree, names))
    return parsed


def check_constraints_declared(manifest: dict) -> None:
    """The manifest's `parameter_constraints` are well formed, name only what exists, and its
    own values keep them (a ManifestError otherwise)."""
    problems = constraint_problems(manifest, manifest["parameters"])
    if problems:
        raise ManifestError(f"its own parameters break a rule: {problems[0]}")


def constraint_problems(manifest: dict, params: dict) -> list[str]:
    """The rules across parameters that the values `params` break, one line each ([] when
    none). `params`: every parameter's value in force (the manifest's, overridden)."""
    names = {**{k: v for k, v in manifest.items() if k != "parameters"}, **params}
    problems = []
    for check, why, tree, used in _constraints(manifest):
        try:
            holds = bool(_evaluate(tree, names))
        except (ArithmeticError, TypeError, ValueError, RecursionError) as err:
            holds, why = False, f"it cannot be evaluated: {type(err).__name__}: {err}"
        if not holds:
            shown = ", ".join(f"{n}={names[n]!r}" for n in used if n in params)
            problems.append(f"{check} does not hold" + (f" ({why})" if why else "")
                            + (f"; here {shown}" if shown else ""))
    return problems


def manifest_sha256(name: str, folder: str | None = None) -> str:
    """Checksum of the manifest file, recorded in the dataset card's reproducibility stamp."""
    return hashlib.sha256(manifest_bytes(f"{name}.yaml", folder)).hexdigest()


@functools.lru_cache(maxsize=None)
def load_data_file(filename: str, folder: str | None = None):
    """A JSON or YAML data file that manifests refer to (e.g. a long class-name table)."""
    return _parse_yaml(manifest_bytes(filename, folder), filename)
