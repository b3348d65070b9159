"""Do stored first-round predictions cover the samples the leakage filter judges?

The filter judges every sample of a scenario's pool that can reach the test split (the pool less
the VSOD clips upstream's loader skips), and by default every model must have answered each of
them: a model that answered only part would silently shift the threshold for the rest. When that
does not hold, the user gets one message naming, per scenario, how many samples lack predictions
from which model, a few example keys, and the command that plays what is missing.

The check runs twice with the same wording: in the driver before any work, against the pool of a
previous build in the output folder when that pool is the one this build will make (the usual
loop: build, evaluate, rebuild into the same folder with --predictions); and inside the pool step,
where the pool is known for certain (a first build straight into a fresh folder).
"""
from __future__ import annotations

import json
from collections import defaultdict

import pyarrow.parquet as pq

from proactivebench_builder.core import fileio
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.layout import POOL_SETS, report_url
from proactivebench_builder.filters.predictions import PredictionsError, sample_ref

EXAMPLES = 3  # example keys shown per scenario
MAX_REPORT_BYTES = 256 << 20  # a previous build's report (one entry per shard and scenario)


class CoverageError(PredictionsError):
    """One scenario's samples lack predictions; the message is `missing_predictions`'s."""

HOW_TO_COMPLETE = (
    "Play the missing samples with `python -m proactivebench_builder.runtime evaluate --data DIR "
    "--first-round-only --model MODEL --results FILE` for each model (it plays the unfiltered "
    "pool, and rerun into the same FILE it plays only what is missing), or pass "
    "--allow_partial_predictions to judge each sample by the models that answered it")


def missing_predictions(config: str, required: list[str], answered: dict[str, set[str]],
                        models: list[str]) -> str | None:
    """`config: N of M samples lack predictions (model lacks n, ...), e.g. keys`, or None.
    `required`: the keys the filter judges; `answered`: key -> models that answered it."""
    lacking = defaultdict(list)
    for key in required:
        for model in models:
            if model not in answered.get(key, ()):
                lacking[model].append(key)
    if not lacking:
        return None
    keys = sorted({_shown(k) for ks in lacking.values() for k in ks})
    per_model = ", ".join(f"{m} lacks {len(ks)}" for m, ks in sorted(lacking.items()))
    return (f"{config}: {len(keys)} of {len(required)} samples lack predictions ({per_model}), "
            f"e.g. {', '.join(keys[:EXAMPLES])}")


def _shown(ref: str) -> str:
    """A sample as a user names it: its key, or `id N` (refs are `key:...` / `id:N`)."""
    kind, sep, value = ref.partition(":")
    if sep and kind == "key":
        return value
    return f"id {value}" if sep and kind == "id" else ref


def coverage_message(problems: list[str]) -> str:
    return ("the predictions do not cover the samples the filter judges: " + "; ".join(problems)
            + ". " + HOW_TO_COMPLETE + ".")


# ---------------------------------------------------------------- the driver's check, before work


def check_before_work(rows: list[dict], config: BuildConfig) -> str | None:
    """The coverage problems of the predictions `rows` (already read and validated) for the
    chosen scenarios, as one message, or None. Uses the pool of a previous build in the output
    folder when it is the pool this build makes; otherwise checks what it can without a pool
    (every chosen scenario has predictions, and the models of a scenario answer the same
    samples); the pool step checks the rest."""
    settings = config.selection
    by_config = defaultdict(list)
    for row in rows:
        by_config[row["config"]].append(row)
    configs = _configs(config)
    pools = previous_pools(config)
    problems = []
    for name in sorted(config.scenarios):
        config = configs[name]
        predictions = by_config.get(config, [])
        if not predictions:
            problems.append(f"{config}: no predictions (add its models' predictions, or leave "
                            f"{name} out with --scenarios)")
            continue
        models = sorted({r["model"] for r in predictions})
        pool = pools.get(name)
        if pool is None:
            if not settings.allow_partial:
                problem = _models_disagree(config, predictions, models)
                if problem:
                    problems.append(problem)
            continue
        refs = {f"key:{key}": key for key in pool["keys"]}
        refs.update({f"id:{i}": key for key, i in pool["ids"].items()})
        unknown = sorted({sample_ref(r) for r in predictions if sample_ref(r) not in refs})
        if unknown:
            problems.append(f"{config}: {len(unknown)} predictions name samples that are not in "
                            f"the pool, e.g. {', '.join(_shown(u) for u in unknown[:EXAMPLES])} (were they made on "
                            "another build?)")
            continue
        if settings.allow_partial:
            continue
        answered = defaultdict(set)
        for r in predictions:
            answered[refs[sample_ref(r)]].add(r["model"])
        problem = missing_predictions(config, pool["required"], answered, models)
        if problem:
            problems.append(problem)
    return coverage_message(problems) if problems else None


def _configs(config: BuildConfig) -> dict[str, str]:
    return {n: c for c, n in config.config_to_scenario.items() if n in config.scenarios}


def _models_disagree(config: str, predictions: list[dict], models: list[str]) -> str | None:
    """Without the pool: every model of a scenario should answer the same samples."""
    if len({"key" if r["key"] is not None else "id" for r in predictions}) > 1:
        return None  # samples named both ways: only the pool can match them up
    answered = defaultdict(set)
    for r in predictions:
        answered[sample_ref(r)].add(r["model"])
    return missing_predictions(config, sorted(answered), answered, models)


def previous_pools(config: BuildConfig) -> dict[str, dict]:
    """Per scenario, the pool a previous build left in the output folder, when this build will
    make the same pool (same code, seed, origin, sources, manifest and parameter overrides):
    {"keys", "ids": key -> id, "required": keys the filter judges}. Anything unreadable or
    different means no pool: the pool step checks instead."""
    output = config.output
    build = _previous_report(output)
    old, new = _mapping(build.get("stamp")), config.stamp
    if not old or any(old.get(k) != new.get(k) for k in ("code_version", "seed", "origin")):
        return {}
    pools = {}
    for name in config.scenarios:
        same = (
            _mapping(build.get("sources")).get(name) == config.sources.get(name)
            and _mapping(old.get("manifests")).get(name) == new["manifests"].get(name)
            and _mapping(old.get("parameter_overrides")).get(name)
            == new["parameter_overrides"].get(name))
        entry = _mapping(_mapping(build.get("scenarios")).get(name))
        if not same or not entry.get("config"):
            continue
        files = build.get("files") if isinstance(build.get("files"), list) else []
        paths = [f["path"] for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)
                 and f.get("config") == entry["config"] and f.get("split") in POOL_SETS]
        try:
            pools[name] = _read_pool(output, paths)
        except Exception:  # noqa: BLE001 - a damaged previous build: the pool step checks
            continue
    return pools


def pool_setting_changes(config: BuildConfig) -> list[str]:
    """What of the pool's settings differs between this build and the finished build ("ok")
    in its output folder, for the scenarios this build makes: 'seed (0 there, 1 now)', ...
    ([] without such a build). Predictions played on that folder's pool do not fit the pool
    this build would make, and this build would replace it."""
    build = _previous_report(config.output)
    old, new = _mapping(build.get("stamp")), config.stamp
    if build.get("status") != "ok" or not old:
        return []
    changes = [f"{key} ({old.get(key)!r} there, {new.get(key)!r} now)"
               for key in ("seed", "origin") if old.get(key) != new.get(key)]
    for name in sorted(config.scenarios):
        if not _mapping(_mapping(build.get("scenarios")).get(name)).get("config"):
            continue  # not in the folder's build: nothing of it to replace
        before = _mapping(old.get("parameter_overrides")).get(name) or {}
        now = new["parameter_overrides"].get(name) or {}
        if before != now:
            changes.append(f"{name}'s --set ({before!r} there, {now!r} now)")
        source = _mapping(build.get("sources")).get(name)
        if source is not None and source != config.sources.get(name):
            changes.append(f"{name}'s source ({source} there, {config.sources.get(name)} now)")
    return changes


def _previous_report(output: str) -> dict:
    """The output folder's reports/build.json as a mapping, {} when it is absent or unusable
    (it is only a shortcut here: without it, the pool step checks)."""
    try:
        report = json.loads(fileio.read_bytes(report_url(output), limit=MAX_REPORT_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return _mapping(report)


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _read_pool(output: str, paths: list[str]) -> dict:
    keys, ids, required = [], {}, []
    for path in paths:
        fs, local = fileio.filesystem(fileio.join(output, path))
        with fs.open(local, "rb") as handle:
            table = pq.read_table(handle, columns=["key", "id", "strong_occlusions"])
        for row in table.to_pylist():
            keys.append(row["key"])
            ids[row["key"]] = row["id"]
            if row["strong_occlusions"] is not False:
                required.append(row["key"])
    return {"keys": keys, "ids": ids, "required": sorted(required)}
