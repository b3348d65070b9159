"""Which samples of a scenario's pool reach the test split.

Modes: "none" keeps the whole pool (a build without predictions or a keep-list; the card says
so); the leakage filter and the keep-list plug in here (see `filters.leakage`). The decision runs
inside the per-scenario pool step, where the whole pool and its selection inputs meet.
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

        kept, report = leakage.select(scenario, config_name, rows, values, settings)
    if weak:
        report["weak_occlusion_excluded"] = len(kept & weak)
        kept -= weak
    report["after"] = len(kept)
    return kept, report
