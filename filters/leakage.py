"""First-round leakage filtering (paper §3.3, App. A.8) and the released keep-list.

Predictions mode: a sample is dropped when at least `threshold` (default 0.25) of the models that
answered it chose the correct category in the first multiple-choice turn; a sample answered by
fewer than `min_models` models cannot be judged and is kept (and counted as unjudged). By default
every model must cover every sample of a scenario it appears in: a partial model would silently
shift thresholds.

Keep-list mode keeps exactly the listed upstream ids. Upstream ids only name upstream's samples,
so it applies only to a pool imported from an upstream release (`--import_upstream`); a freshly
built pool, whose ids mean other samples, is refused. With `released` (the published keep-list)
each config must keep exactly as many samples as the release does (88 / 42 / 2,591 / 1,095 /
2,105 / 396 / 1,240): the driver checks the release's ids before any work
(`released_count_problems`), and the pool step checks what was built (a record of the release
that became a dead letter, e.g. a frame missing because an archive was not unzipped).

Both run inside the per-scenario pool step, so they work the same on every runner.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import apache_beam as beam

from proactivebench_builder.core import results
from proactivebench_builder.core.config import KEEP_LIST, PREDICTIONS, BuildConfig, Selection
from proactivebench_builder.core.released import released_counts, released_kept_ids
from proactivebench_builder.filters import coverage
from proactivebench_builder.filters.predictions import (
    PredictionsError, closest_config_hint, read_input, read_predictions, sample_ref)

RELEASED = "released"
MAX_KEEP_LIST_BYTES = 64 << 20  # the released list is ~60 kB: ids of 7,557 samples


class KeepListError(ValueError):
    """A keep-list cannot be applied to this pool."""


def input_transform(config: BuildConfig):
    """The selection inputs as a function of the pipeline root: (scenario, value) pairs."""
    settings = config.selection
    config_to_scenario, chosen = config.config_to_scenario, set(config.scenarios)

    if settings.mode == PREDICTIONS:
        url = settings.predictions

        def read(_):
            for row in read_predictions(url):
                scenario = config_to_scenario.get(row["config"])
                if scenario in chosen:
                    yield scenario, results.Prediction(row)
    else:
        spec = settings.keep_list

        def read(_):
            for name, ids in load_keep_list(spec).items():
                scenario = config_to_scenario.get(name)
                if scenario in chosen:
                    yield scenario, results.KeepIds(name, tuple(sorted(ids)))

    return lambda pbegin: (pbegin | "SelectionSource" >> beam.Create([None], reshuffle=False)
                           | "ReadSelection" >> beam.FlatMap(read))


def load_keep_list(spec: str) -> dict[str, set[int]]:
    """`released` (the published kept ids, carried with their provenance) or a JSON file
    mapping config -> ids (or holding such a mapping under `kept_ids`); a KeepListError naming
    the file and what is wrong otherwise."""
    if spec == RELEASED:
        data = {config: sorted(ids) for config, ids in released_kept_ids().items()}
    else:
        raw = read_input(spec, "keep list", MAX_KEEP_LIST_BYTES, KeepListError)
        try:
            data = json.loads(raw)
        except ValueError as err:  # not JSON, not UTF-8
            raise KeepListError(f"keep-list {spec}: not JSON ({err})") from None
        except RecursionError:
            raise KeepListError(f"keep-list {spec}: not JSON of a usable shape (nested too "
                                "deeply)") from None
    if isinstance(data, dict) and "kept_ids" in data:
        data = data["kept_ids"]
    if not isinstance(data, dict):
        raise KeepListError(f"keep-list {spec}: expected a mapping {{config: [ids]}}, got "
                            f"{type(data).__name__}")
    kept = {}
    for config, ids in data.items():
        if not isinstance(ids, list):
            raise KeepListError(f"keep-list {spec}: {config!r}: expected a list of ids, got "
                                f"{type(ids).__name__}")
        for i in ids:  # 0.9 and true were kept as ids 0 and 1; null and 1e400 a traceback
            if not isinstance(i, int) or isinstance(i, bool) or i < 0:
                raise KeepListError(f"keep-list {spec}: {config!r}: id {i!r} is not a sample id "
                                    "(an integer, 0 or more)")
        kept[config] = set(ids)
    return kept


def keep_list_problem(spec: str, kept: dict, configs: list[str],
                      aliases: dict[str, str]) -> str | None:
    """What makes keep list `kept` unusable for a pool of `configs`, or None: a config no
    registered scenario has (its ids would be ignored), or a config of the pool it does not
    list (every sample of it would be dropped without a word; list it with [] to mean that).
    `aliases`: every name a user may give for a config, lower case -> the config."""
    known = set(aliases.values())
    unknown = sorted(c for c in kept if c not in known)
    if unknown:
        return (f"keep-list {spec}: config {unknown[0]!r} is no registered scenario's"
                + closest_config_hint(unknown[0], aliases) + f" (known: {', '.join(sorted(known))})")
    absent = [c for c in configs if c not in kept]
    if absent:
        return (f"keep-list {spec}: no ids for {', '.join(absent)}, which this build imports: "
                "every sample of it would be dropped (list it, with [] to drop them all, or "
                "leave it out with --scenarios)")
    return None


def released_count_problem(config: str, kept: int, what: str = "keeps") -> str | None:
    """'MVP-N: 2,590 samples kept where the release keeps 2,591', or None when they agree (or
    the config is not one of the release's)."""
    expected = released_counts().get(config)
    if expected is None or kept == expected:
        return None
    return f"{config}: {what} {kept:,} samples where the release keeps {expected:,}"


def select(scenario: str, config: str, rows: list[dict], values: list,
           settings: Selection, required: list[str] | None = None) -> tuple[set[str], dict]:
    """`required`: the keys every model must have answered (default: every row's)."""
    if settings.mode == KEEP_LIST:
        return _select_by_keep_list(config, rows, values, settings)
    if required is None:
        required = sorted(r["key"] for r in rows)
    return _select_by_predictions(config, rows, values, settings, required)


def _select_by_keep_list(config, rows, values, settings):
    if not str(settings.origin).startswith("upstream"):
        raise KeepListError(
            f"{config}: a keep-list names upstream's sample ids, but this pool was built from the "
            "raw sources, where ids mean other samples. Filter a fresh pool with --predictions, "
            "or import the upstream release with --import_upstream to use --keep_list.")
    listed = set()
    for value in values:
        listed.update(value.ids)
    by_id = {r["id"]: r["key"] for r in rows}
    kept = {by_id[i] for i in listed if i in by_id}
    missing = sorted(listed - set(by_id))
    if settings.keep_list == RELEASED:
        # the driver checked the release's records; here what the build made of them: a record
        # that became a dead letter (a frame missing, say) must not shrink the split unseen
        strong = {r["key"] for r in rows if r.get("strong_occlusions") is not False}
        problem = released_count_problem(config, len(kept & strong), "the build keeps")
        if problem:
            raise KeepListError(f"{problem} ({len(missing)} listed ids are not in the pool: "
                                "see reports/dead_letters.jsonl for the records that could not "
                                "be read)")
    return kept, {"mode": KEEP_LIST, "keep_list": settings.keep_list, "before": len(rows),
                  "after": len(kept), "listed": len(listed), "missing_ids": missing}


def _select_by_predictions(config, rows, values, settings, required):
    threshold, min_models = float(settings.threshold), int(settings.min_models)
    # a prediction names its sample by key or by id (predictions.sample_ref)
    pool = {f"key:{r['key']}": r["key"] for r in rows}
    pool.update({f"id:{r['id']}": r["key"] for r in rows})
    answers = defaultdict(dict)          # key -> model -> correct
    unknown = []
    for value in (v.row for v in values):
        ref = sample_ref(value)
        key = pool.get(ref)
        if key is None:
            unknown.append(ref)
            continue
        if value["model"] in answers[key]:
            raise PredictionsError(f"{config}: model {value['model']!r} answers {key} twice "
                                   "(once by key, once by id)")
        answers[key][value["model"]] = value["correct"]
    if unknown:
        raise PredictionsError(f"{config}: {len(unknown)} predictions name samples that are not "
                               f"in the pool, e.g. {', '.join(unknown[:5])} (were they made on "
                               "another build?)")
    if not answers:
        raise PredictionsError(f"{config}: the predictions cover no sample of this config; "
                               "add its predictions or leave it out with --scenarios")
    models = sorted({m for per in answers.values() for m in per})
    if not settings.allow_partial:
        answered = {key: set(per) for key, per in answers.items()}
        problem = coverage.missing_predictions(config, required, answered, models)
        if problem:
            raise coverage.CoverageError(problem)
    kept, fractions, unjudged = set(), {}, 0
    for row in rows:
        per = answers.get(row["key"], {})
        if len(per) < min_models:
            unjudged += 1
            kept.add(row["key"])
            continue
        fraction = sum(per.values()) / len(per)
        fractions[row["key"]] = fraction
        if fraction < threshold:
            kept.add(row["key"])
    return kept, _report(rows, kept, fractions, answers, models, unjudged, threshold, min_models)


def _report(rows, kept, fractions, answers, models, unjudged, threshold, min_models) -> dict:
    def mean(values):
        values = list(values)
        return round(sum(values) / len(values), 6) if values else None

    per_model = {m: mean(per[m] for per in answers.values() if m in per) for m in models}
    histogram = Counter(round(f, 4) for f in fractions.values())
    return {
        "mode": "predictions", "threshold": threshold, "min_models": min_models,
        "models": len(models), "before": len(rows), "after": len(kept),
        "dropped": len(rows) - len(kept), "unjudged": unjudged,
        "first_round_accuracy_before": mean(fractions.values()),
        "first_round_accuracy_after": mean(f for k, f in fractions.items() if k in kept),
        "per_model_accuracy": per_model,
        "correct_fraction_histogram": {str(k): histogram[k] for k in sorted(histogram)},
    }
