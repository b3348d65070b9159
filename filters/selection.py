"""Which samples of a scenario's pool reach the test split.

Modes: "none" keeps the whole pool (a build without predictions or a keep-list; the card says
so); the leakage filter and the keep-list plug in here (see `filters.leakage`). The decision runs
inside the per-scenario pool step, where the whole pool and its selection inputs meet. Inputs
that cannot filter this pool (e.g. predictions that miss samples) give a report with `error`
and an empty test split; the driver then fails the build with that message.
"""
from __future__ import annotations


def apply_selection(scenario: str, config_name: str, rows: list[dict], values: list[dict],
                    settings: dict) -> tuple[set[str], dict]:
    """(keys kept, filter report for this scenario). `rows` carry `id` and `key`; `values` are
    the selection inputs (predictions or keep-list ids) routed to this scenario."""
    mode = settings.get("mode", "none")
    # Upstream's loader skips records whose `strong_occlusions` is False (VSOD clips whose
    # occluder never covers enough of the frame): they stay in the pool, not in the test split.
    weak = {r["key"] for r in rows if r.get("strong_occlusions") is False}
    if mode == "none":
        kept, report = {r["key"] for r in rows}, {"mode": "none", "before": len(rows)}
    else:
        from proactivebench_builder.filters import leakage

        # only samples that can reach the test split need predictions
        required = sorted(r["key"] for r in rows if r["key"] not in weak)
        try:
            kept, report = leakage.select(scenario, config_name, rows, values, settings,
                                          required)
        except ValueError as err:  # PredictionsError, KeepListError: the user's input
            # An error is a value here: the pool is still written, nothing reaches the test
            # split, and the driver fails the build with this message (no Beam traceback).
            from proactivebench_builder.filters.coverage import CoverageError

            error = "coverage" if isinstance(err, CoverageError) else "input"
            return set(), {"mode": mode, "before": len(rows), "after": 0, "error": str(err),
                           "error_kind": error}
    if weak:
        report["weak_occlusion_excluded"] = len(kept & weak)
        kept -= weak
    report["after"] = len(kept)
    return kept, report
