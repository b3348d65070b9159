"""Metrics as the paper reports them (docs/environments.md, 'Metrics').

MCQA: acc = % of episodes ending in the correct category; psr = mean of (num_turns - 1), the
proactive suggestions per sample. OEG: cc / ps / agg = % of samples whose judged answer holds the
category / a valid proactive suggestion / either. The average is the unweighted mean over the
scenarios present (the paper's "avg" column).
"""
from __future__ import annotations

from proactivebench_builder import transforms


def episode_metrics(stats: list[dict]) -> dict:
    """acc (percent) and psr over one scenario's episodes."""
    n = len(stats)
    if n == 0:
        return {"n": 0, "acc": 0.0, "psr": 0.0}
    correct = sum(bool(s["correct_prediction"]) for s in stats)
    suggestions = sum(s["num_turns"] - 1 for s in stats)
    return {"n": n, "acc": 100.0 * correct / n, "psr": suggestions / n}


def open_ended_metrics(judged: list[dict]) -> dict:
    n = len(judged)
    if n == 0:
        return {"n": 0, "cc": 0.0, "ps": 0.0, "agg": 0.0}
    total = {k: sum(j[k] for j in judged) for k in
             ("category_prediction", "proactive_suggestion", "aggregate")}
    return {"n": n, "cc": 100.0 * total["category_prediction"] / n,
            "ps": 100.0 * total["proactive_suggestion"] / n,
            "agg": 100.0 * total["aggregate"] / n}


def by_scenario(results: list[dict], metric=episode_metrics) -> dict:
    """{config: metrics} in the paper's column order, plus "avg" over the scenarios present."""
    grouped: dict[str, list[dict]] = {}
    for result in results:
        grouped.setdefault(result["config"], []).append(result)
    order = transforms.config_order(grouped)
    table = {config: metric(grouped[config]) for config in order}
    if table:
        keys = [k for k in next(iter(table.values())) if k != "n"]
        table["avg"] = {k: sum(m[k] for m in table.values()) / len(table) for k in keys}
        table["avg"]["n"] = sum(m["n"] for c, m in table.items() if c != "avg")
    return table


def format_table(table: dict) -> str:
    """A plain-text table: one row per scenario (upstream short names) and the average."""
    if not table:
        return "(no results)"
    keys = [k for k in table["avg"] if k != "n"]
    lines = [f"{'scenario':<10}{'n':>7}" + "".join(f"{k:>9}" for k in keys)]
    for config, metrics in table.items():
        label = transforms.short_name(config) if config != "avg" else config
        lines.append(f"{label:<10}{metrics['n']:>7}"
                     + "".join(f"{metrics[k]:>9.1f}" if k != "psr" else f"{metrics[k]:>9.2f}"
                               for k in keys))
    return "\n".join(lines)
