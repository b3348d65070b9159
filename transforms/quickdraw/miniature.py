"""QuickDraw's miniature source: `simplified/<category>.ndjson` files in the real format (compact
JSON, the real field order), with recognised and unrecognised drawings of 1-6 strokes."""
from __future__ import annotations

import json
import random

from proactivebench_builder.transforms.api import fileio


def write_miniature(root: str, params: dict, seed: int = 0) -> None:
    for c_index, category in enumerate(params["miniature_categories"]):
        rng = random.Random(f"{seed}/quickdraw/{category}")
        lines = []
        for d in range(int(params["miniature_drawings_per_category"])):
            key_id = str(4500000000000000 + c_index * 100000 + d * 7919)
            record = {
                "word": category, "countrycode": rng.choice(["US", "DE", "IT", "JP", "BR"]),
                "timestamp": f"2017-03-{1 + d % 28:02d} 20:41:{d % 60:02d}.70725 UTC",
                "recognized": d % 7 != 3, "key_id": key_id,
                "drawing": _synthetic_drawing(rng, 1 + (d * 5 + c_index) % 6),
            }
            lines.append(json.dumps(record, separators=(",", ":")))
        fileio.write_bytes_atomic(fileio.join(root, "simplified", f"{category}.ndjson"),
                                  ("\n".join(lines) + "\n").encode("utf-8"))


def _synthetic_drawing(rng: random.Random, n_strokes: int) -> list:
    """Strokes that look like pen strokes: short polylines, scaled so the longer side is 255."""
    strokes = []
    for _ in range(n_strokes):
        x, y = rng.randint(20, 230), rng.randint(20, 230)
        xs, ys = [x], [y]
        for _ in range(rng.randint(2, 6)):
            x = min(255, max(0, x + rng.randint(-60, 60)))
            y = min(255, max(0, y + rng.randint(-60, 60)))
            xs.append(x)
            ys.append(y)
        strokes.append([xs, ys])
    all_x = [v for s in strokes for v in s[0]]
    all_y = [v for s in strokes for v in s[1]]
    mx, my = min(all_x), min(all_y)
    extent = max(max(all_x) - mx, max(all_y) - my) or 1
    return [[[round((v - mx) * 255 / extent) for v in s[0]],
             [round((v - my) * 255 / extent) for v in s[1]]] for s in strokes]
