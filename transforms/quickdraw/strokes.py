"""QuickDraw's strokes: validating a drawing's strokes (both families) and rendering a prefix of
them as a frame."""
from __future__ import annotations

import io
import math

from PIL import Image, ImageDraw

from proactivebench_builder.transforms.api import BadItem


def parse_strokes(drawing, raw: bool) -> list[list[list[int]]]:
    """Validated strokes as [[xs], [ys]] in the simplified 0-255 space. Raw drawings (device
    coordinates plus timings) are translated and uniformly scaled the way the simplified files
    were made, so both families render alike."""
    if not isinstance(drawing, list) or not drawing:
        raise BadItem("drawing with no strokes")
    strokes = []
    for stroke in drawing:
        if not isinstance(stroke, list) or len(stroke) < 2:
            raise BadItem("malformed stroke (expected [xs, ys, ...])")
        xs, ys = stroke[0], stroke[1]
        if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys) or not xs:
            raise BadItem("malformed stroke (x and y lists differ or are empty)")
        if not all(type(v) in (int, float) and math.isfinite(v) for v in xs + ys):
            raise BadItem("malformed stroke (non-numeric coordinate)")
        if not raw and not all(type(v) is int or v.is_integer() for v in xs + ys):
            raise BadItem("malformed stroke (non-integer coordinate in a simplified drawing)")
        strokes.append([list(xs), list(ys)])
    if raw:
        strokes = _normalise_raw(strokes)
    for xs, ys in strokes:
        if min(xs + ys) < 0 or max(xs + ys) > 255:
            raise BadItem("stroke coordinates outside 0-255 in a simplified drawing")
    return [[[int(v) for v in xs], [int(v) for v in ys]] for xs, ys in strokes]


def _normalise_raw(strokes):
    all_x = [v for xs, _ in strokes for v in xs]
    all_y = [v for _, ys in strokes for v in ys]
    min_x, min_y = min(all_x), min(all_y)
    extent = max(max(all_x) - min_x, max(all_y) - min_y) or 1.0
    scale = 255.0 / extent
    return [[[round((x - min_x) * scale) for x in xs], [round((y - min_y) * scale) for y in ys]]
            for xs, ys in strokes]


def render_strokes(strokes, size: int, padding: int, line_width: int) -> bytes:
    """Black strokes on white, PNG: line art stays sharp (JPEG would smear it)."""
    scale = (size - 2 * padding) / 255.0
    image = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(image)
    for xs, ys in strokes:
        points = [(padding + x * scale, padding + y * scale) for x, y in zip(xs, ys)]
        if len(points) == 1:
            x, y = points[0]
            r = line_width / 2
            draw.ellipse((x - r, y - r, x + r, y + r), fill=0)
        else:
            draw.line(points, fill=0, width=line_width, joint="curve")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
