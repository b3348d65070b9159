"""Do the frames a record needs, by each scenario's declaration, equal the frames upstream's
own environments show for it? Record by record, over a release-shaped folder.

    python3.12 benchmarks/release_standin.py --upstream DIR --out /tmp/release/test --paths /tmp/paths.json
    python benchmarks/release_frames.py /tmp/release/test /tmp/paths.json

`release_standin.py --paths` plays every record through upstream's `environment.py` (every answer
at every state, and the reference mode) and writes the image paths it shows; this compares them
with the paths of `Behaviour.upstream_frame_ids` (what `--import_upstream` reads and a row holds),
and prints per config how many records differ, with the first few differences. Exit 1 if any do.
"""
from __future__ import annotations

import json
import sys

from proactivebench_builder.transforms import behaviour_for_config


def differences(folder: str, shown: dict) -> dict[str, list]:
    """config -> [(id, paths only ours need, paths only upstream shows)]"""
    found = {}
    for config, by_id in shown.items():
        behaviour = behaviour_for_config(config)
        with open(f"{folder}/{config}_preprocessed.jsonl", encoding="utf-8") as handle:
            records = {r["id"]: r for r in map(json.loads, handle)}
        found[config] = []
        for record_id, upstream in sorted(by_id.items(), key=lambda item: int(item[0])):
            record = records[int(record_id)]
            ours = {behaviour.play.frame_path(record, f)
                    for f in behaviour.upstream_frame_ids(record)}
            if ours != set(upstream):
                found[config].append((record_id, sorted(ours - set(upstream)),
                                      sorted(set(upstream) - ours)))
    return found


def main(argv: list[str]) -> int:
    folder, paths = argv
    with open(paths, encoding="utf-8") as handle:
        shown = json.load(handle)
    found = differences(folder, shown)
    for config, differing in found.items():
        print(f"{config}: {len(shown[config]):,} records, {len(differing):,} differ")
        for record_id, ours, upstream in differing[:3]:
            print(f"  id {record_id}: only ours {ours[:3]}, only upstream's {upstream[:3]}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
