"""Which samples of a scenario's pool reach the test split.

Modes: "none" keeps the whole pool (a build without predictions or a keep-list; the card says
so); the leakage filter and the keep-list plug in here (see `filters.leakage`). The decision runs
inside the per-scenario pool step, where the whole pool and its selection inputs meet. Inputs
that cannot filter this pool (e.g. predictions that miss samples) give a report with `error`
and an empty test split; the driver then fails the build with that message.
"""
from __future__ import annotations

from proactivebench_builder.core.config import NO_FILTER, BuildConfig, Selection
from proactivebench_builder.filters import leakage
from proactivebench_builder.filters.coverage import CoverageError


def selection_inputs(config: BuildConfig):
    """What the pool step's selection reads, as a function that adds it to the pipeline (None
    when the build keeps the whole pool)."""
    if config.selection.mode == NO_FILTER:
        return None
    return leakage.input_transform(config)


def apply_selection(scenario: str, config_name: str, rows: list[dict], values: list,
                    settings: Selection) -> tuple[set[str], dict]:
    """(keys kept, filter report for this scenario). `rows` carry `id` and `key`; `values` are
    the selection inputs (results.Prediction or results.KeepIds) routed to this scenario."""
    mode = settings.mode
    # Upstream's loader skips records whose `strong_occlusions` is False (VSOD clips whose
    # occluder never covers enough of the frame): they stay in the pool, not in the test split.
    weak = {r["key"] for r in rows if r.get("strong_occlusions") is False}
    if mode == NO_FILTER:
        kept, report = {r["key"] for r in rows}, {"mode": NO_FILTER, "before": len(rows)}
    else:
        # only samples that can reach the test split need predictions
        required = sorted(r["key"] for r in rows if r["key"] not in weak)
        try:
            kept, report = leakage.select(scenario, config_name, rows, values, settings,
                                          required)
        except ValueError as err:  # PredictionsError, KeepListError: the user's input
            # An error is a value here: the pool is still written, nothing reaches the test
            # split, and the driver fails the build with this message (no Beam traceback).
            error = "coverage" if isinstance(err, CoverageError) else "input"
            return set(), {"mode": mode, "before": len(rows), "after": 0, "error": str(err),
                           "error_kind": error}
    if weak:
        report["weak_occlusion_excluded"] = len(kept & weak)
        kept -= weak
    report["after"] = len(kept)
    return kept, report
