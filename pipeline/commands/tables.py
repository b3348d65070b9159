"""The tables a build prints at its end: per scenario its counts, and the leakage filter's
before and after."""
from __future__ import annotations


def summary_table(scenarios: dict) -> str:
    header = ("scenario", "raw items", "excluded", "samples", "test", "dead letters", "shards",
              "bytes")
    rows = [header]
    for name, r in sorted(scenarios.items()):
        rows.append((name, r["raw_items"], sum(r["excluded"].values()), r["samples"], r["kept"],
                     r["dead_letters"], sum(r["shards"].values()), sum(r["bytes"].values())))
    return format_table(rows)


def filter_table(scenarios: dict) -> str:
    """The leakage filter per scenario: samples and mean first-round accuracy before/after."""
    def pct(value):
        return "-" if value is None else f"{100 * value:.1f}%"

    rows = [("scenario", "mode", "before", "after", "first-round acc before", "after", "models")]
    for name, f in sorted(scenarios.items()):
        rows.append((name, f["mode"], f["before"], f["after"],
                     pct(f.get("first_round_accuracy_before")),
                     pct(f.get("first_round_accuracy_after")), f.get("models", "-")))
    return format_table(rows)


def format_table(rows: list[tuple]) -> str:
    header = rows[0]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(v).rjust(w) if i else str(v).ljust(w)
                       for i, (v, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
