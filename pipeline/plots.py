"""Build plots: PNG bar charts of a built folder's reports, for the end of every build.

`write_build_plots(DIR)` reads `reports/build.json`, `reports/filter.json` and the `frame_ids`
column of the pool shards (never the frames), and writes under `reports/plots/`:

- `samples_per_scenario.png`: raw items, rule exclusions, dead letters, pool and test samples;
- `frames_per_sample.png`: one histogram of frames per sample for each scenario;
- `dead_letters_by_reason.png`: dead letters per scenario and reason;
- `filter_before_after.png`: pool size before and after the leakage filter.

Choice: the charts are drawn with Pillow, not matplotlib. Pillow is already a dependency (every
frame is validated with it), matplotlib would add a large install to every Dataflow/Dask worker
for four bar charts, and Pillow's PNG output holds no timestamp or version text, so the same
reports give byte-identical plots (with the same Pillow and FreeType). The default font is
Pillow's bundled one (`ImageFont.load_default(size=...)`), so no system font is needed.
"""
from __future__ import annotations

import io
import json
import math
import statistics
import unicodedata
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw, ImageFont

from proactivebench_builder.core import fileio
from proactivebench_builder.core.layout import (
    BUILD_REPORT, FILTER_REPORT, PLOTS_DIR, TEST, shard_folder, shard_set_of)

WIDTH = 960
MARGIN = 24
TITLE_H = 56         # title line + subtitle line
LEGEND_H = 28
LABEL_W = 260        # room for the group labels left of the bars
BAR_H = 18
GROUP_GAP = 14
PANEL_H = 150        # one histogram panel of frames_per_sample.png
MAX_BINS = 40
BACKGROUND, INK, GRID, MUTED = "white", (30, 30, 30), (225, 225, 225), (110, 110, 110)
PALETTE = [(66, 133, 244), (251, 188, 5), (234, 67, 53), (52, 168, 83), (155, 89, 182),
           (0, 172, 193), (255, 112, 67)]


def font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def ascii_text(text: str) -> str:
    """Pillow's bundled font covers ASCII only (other characters render as boxes), so text
    drawn into PNGs is folded to ASCII: accents dropped ("José" -> "Jose"), the rest "?"."""
    folded = unicodedata.normalize("NFKD", str(text))
    return "".join(c for c in folded if not unicodedata.combining(c)).encode(
        "ascii", "replace").decode("ascii")


def text_width(draw: ImageDraw.ImageDraw, text: str, size: int) -> float:
    return draw.textlength(text, font=font(size))


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def draw_title(draw: ImageDraw.ImageDraw, title: str, subtitle: str = "") -> None:
    draw.text((MARGIN, MARGIN - 8), ascii_text(title), fill=INK, font=font(20))
    if subtitle:
        draw.text((MARGIN, MARGIN + 18), ascii_text(subtitle), fill=MUTED, font=font(13))


# ---- grouped horizontal bar chart ---------------------------------------------------------

def bar_chart_height(n_groups: int, n_series: int) -> int:
    """Height of a bar chart: title, legend, one block of bars per group (at least one block,
    so an empty chart still has room for its note)."""
    block = n_series * BAR_H + GROUP_GAP
    return TITLE_H + LEGEND_H + max(1, n_groups) * block + MARGIN


def bar_chart(title: str, subtitle: str, groups: list[tuple[str, list[float]]],
              series: list[str], empty_note: str = "nothing to show") -> Image.Image:
    """Horizontal grouped bars: one block per group, one bar per series, values written at the
    bar ends; the scale is shared by every bar."""
    image = Image.new("RGB", (WIDTH, bar_chart_height(len(groups), len(series))), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw_title(draw, title, subtitle)
    draw_legend(draw, series, TITLE_H)
    top = TITLE_H + LEGEND_H
    if not groups:
        draw.text((LABEL_W, top + 8), empty_note, fill=MUTED, font=font(15))
        return image
    peak = max((v for _, values in groups for v in values), default=0) or 1
    span = WIDTH - LABEL_W - MARGIN - 70  # room for the value text after the longest bar
    for label, values in groups:
        draw.text((MARGIN, top + 2), shorten(draw, label, 14, LABEL_W - MARGIN - 8), fill=INK,
                  font=font(14))
        for i, value in enumerate(values):
            y = top + i * BAR_H
            length = span * value / peak
            draw.rectangle((LABEL_W, y + 2, LABEL_W + max(1, length), y + BAR_H - 3),
                           fill=PALETTE[i % len(PALETTE)])
            draw.text((LABEL_W + length + 6, y + 2), format_number(value), fill=INK,
                      font=font(12))
        top += len(values) * BAR_H + GROUP_GAP
    draw.line((LABEL_W, TITLE_H + LEGEND_H, LABEL_W, top - GROUP_GAP), fill=MUTED)
    return image


def draw_legend(draw: ImageDraw.ImageDraw, series: list[str], y: int) -> None:
    x = LABEL_W
    for i, name in enumerate(series):
        draw.rectangle((x, y + 4, x + 12, y + 16), fill=PALETTE[i % len(PALETTE)])
        draw.text((x + 18, y + 2), ascii_text(name), fill=INK, font=font(13))
        x += 18 + text_width(draw, name, 13) + 22


def format_number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def shorten(draw: ImageDraw.ImageDraw, text: str, size: int, width: float) -> str:
    """The text, cut with an ellipsis to fit `width` pixels."""
    text = ascii_text(text)
    if text_width(draw, text, size) <= width:
        return text
    while text and text_width(draw, text + "...", size) > width:
        text = text[:-1]
    return text + "..."


# ---- histogram panels -----------------------------------------------------------------------

def histogram_height(n_panels: int) -> int:
    return TITLE_H + max(1, n_panels) * PANEL_H + MARGIN


def bins_of(counts: Counter) -> tuple[int, int, int]:
    """(low, bin width, number of bins) covering every value; at most MAX_BINS bins."""
    low, high = min(counts), max(counts)
    width = max(1, math.ceil((high - low + 1) / MAX_BINS))
    return low, width, (high - low) // width + 1


def histogram_panels(title: str, subtitle: str, panels: list[tuple[str, Counter]],
                     unit: str = "frames") -> Image.Image:
    """One small vertical-bar histogram per panel (value -> how many samples)."""
    image = Image.new("RGB", (WIDTH, histogram_height(len(panels))), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw_title(draw, title, subtitle)
    if not panels:
        draw.text((MARGIN, TITLE_H + 8), "no samples", fill=MUTED, font=font(15))
    for index, (label, counts) in enumerate(panels):
        draw_histogram(draw, TITLE_H + index * PANEL_H, label, counts, PALETTE[index % 7], unit)
    return image


def draw_histogram(draw, top: int, label: str, counts: Counter, color,
                   unit: str = "frames") -> None:
    values = sorted(counts.elements())
    draw.text((MARGIN, top + 4), shorten(draw, label, 15, LABEL_W - MARGIN), fill=INK,
              font=font(15))
    if not values:
        draw.text((MARGIN, top + 26), "no samples", fill=MUTED, font=font(12))
        return
    for line, text in enumerate((f"{len(values)} samples",
                                 f"{unit}: min {values[0]}, max {values[-1]}",
                                 f"median {format_number(statistics.median(values))}")):
        draw.text((MARGIN, top + 26 + 16 * line), text, fill=MUTED, font=font(12))
    low, width, n_bins = bins_of(counts)
    heights = [0] * n_bins
    for value, n in counts.items():
        heights[(value - low) // width] += n
    plot_left, plot_right = LABEL_W + 24, WIDTH - MARGIN
    base, room = top + PANEL_H - 30, PANEL_H - 52
    step = min(48.0, (plot_right - plot_left) / n_bins)  # a lone value is not a wall of colour
    peak = max(heights)
    draw.line((plot_left, base, plot_right, base), fill=GRID)
    draw.line((plot_left - 4, base - room, plot_left, base - room), fill=MUTED)
    draw.text((LABEL_W - 12, base - room - 7), str(peak), fill=MUTED, font=font(11))
    for i, h in enumerate(heights):
        x0 = plot_left + i * step
        if h:
            draw.rectangle((x0 + 1, base - room * h / peak, x0 + max(2.0, step - 2), base),
                           fill=color)
        if i in (0, n_bins - 1) or n_bins <= 16:
            tick = str(low + i * width) if width == 1 else f"{low + i * width}+"
            draw.text((x0 + 1, base + 3), tick, fill=MUTED, font=font(11))


# ---- reading the built folder -----------------------------------------------------------------

REPORT_MAX_BYTES = 256 * 2 ** 20  # as core.buildfolder reads build.json


def read_report(output_dir: str, relative: str) -> dict:
    """A report as a dict; {} when it is missing or is not a JSON object (plots draw what they
    can: `inspect --force` draws a folder whose reports may be damaged)."""
    url = fileio.join(output_dir, relative)
    try:
        report = json.loads(fileio.read_bytes(url, limit=REPORT_MAX_BYTES))
    except (OSError, ValueError, RecursionError):  # missing, a FIFO, too large, not JSON
        return {}
    return report if isinstance(report, dict) else {}


def entries(report: dict, key: str = "scenarios") -> dict[str, dict]:
    """report[key]'s entries that are objects, each with only its numeric counts and config."""
    found = report.get(key)
    return {name: entry for name, entry in (found.items() if isinstance(found, dict) else ())
            if isinstance(entry, dict)}


def counts(entry: dict, key: str) -> dict[str, float]:
    """entry[key] as {label: number}, leaving out what is not a number."""
    found = entry.get(key)
    return {str(k): v for k, v in (found.items() if isinstance(found, dict) else ())
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def number(entry: dict, key: str) -> float:
    value = entry.get(key, 0)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def frame_counts(output_dir: str, config: str) -> Counter:
    """len(frame_ids) -> samples, from the pool shards' `frame_ids` column only (both of its
    sets; a shard that cannot be read, e.g. in a damaged folder drawn with `inspect --force`,
    is left out)."""
    counts = Counter()
    folder = shard_folder(output_dir, TEST, config)
    for name in fileio.list_names(folder):
        if shard_set_of(name) is None:
            continue
        try:
            with fileio.open_source(fileio.join(folder, name)) as handle:
                column = pq.ParquetFile(handle).read(columns=["frame_ids"]).column("frame_ids")
        except (OSError, ValueError, KeyError, pa.ArrowException):
            continue
        counts.update(len(ids or []) for ids in column.to_pylist())
    return counts


def scenario_label(name: str, entry: dict) -> str:
    config = entry.get("config")
    return f"{name} ({config})" if isinstance(config, str) and config != name else name


# ---- the four plots ---------------------------------------------------------------------------

def samples_chart(build: dict) -> Image.Image:
    series = ["raw items", "rule exclusions", "dead letters", "samples (pool)", "test"]
    groups = [(scenario_label(n, e), [number(e, "raw_items"), sum(counts(e, "excluded").values()),
                                       number(e, "dead_letters"), number(e, "samples"),
                                       number(e, "kept")])
              for n, e in sorted(entries(build).items())]
    return bar_chart("Samples per scenario", "raw items = exclusions + dead letters + samples; "
                     "test = samples kept by the leakage filter", groups, series)


def frames_chart(output_dir: str, build: dict) -> Image.Image:
    panels = [(scenario_label(n, e), frame_counts(output_dir, e["config"]))
              for n, e in sorted(entries(build).items()) if isinstance(e.get("config"), str)]
    return histogram_panels("Frames per sample", "unfiltered pool; from each row's frame_ids",
                            panels)


def dead_letters_chart(build: dict) -> Image.Image:
    groups = [(f"{name}: {reason}", [count])
              for name, entry in sorted(entries(build).items())
              for reason, count in sorted(counts(entry, "dead_letters_by_reason").items())]
    total = sum(v[0] for _, v in groups)
    return bar_chart("Dead letters by reason", f"{total} raw items rejected; every path and reason "
                     "is in reports/dead_letters.jsonl", groups, ["dead letters"],
                     empty_note="no dead letters in this build")


def filter_chart(filters: dict) -> Image.Image:
    settings = filters.get("settings") if isinstance(filters.get("settings"), dict) else {}
    groups = [(name, [number(entry, "before"), number(entry, "after")])
              for name, entry in sorted(entries(filters).items())]
    subtitle = f"filter mode: {settings.get('mode', 'unknown')}"
    if settings.get("mode") == "predictions":
        subtitle += (f"; removed when >= {settings.get('threshold')} of the models answer from "
                     "the first frame")
    return bar_chart("Leakage filter: samples before and after", subtitle, groups,
                     ["before (pool)", "after (test)"])


def correct_fractions_chart(filters: dict) -> Image.Image:
    """Per scenario, how many samples each share of models answered from the first frame
    (in percent; the filter drops everything at or above the threshold)."""
    panels = []
    for name, entry in sorted(entries(filters).items()):
        histogram = Counter()
        for fraction, n in counts(entry, "correct_fraction_histogram").items():
            try:
                histogram[round(float(fraction) * 100)] = n  # as a dict of them: last wins
            except (ValueError, OverflowError):  # a label that is not a finite number
                continue
        panels.append((name, histogram))
    threshold = filters.get("settings", {}).get("threshold")
    return histogram_panels("First-round correct answers per sample",
                            f"% of probing models right on the first frame; threshold "
                            f"{threshold}", panels, unit="% of models")


def write_build_plots(output_dir: str, target: str | None = None) -> list[str]:
    """Write the PNG plots under DIR/reports/plots/ (or `target`); returns their URLs."""
    build = read_report(output_dir, BUILD_REPORT)
    filters = read_report(output_dir, FILTER_REPORT)
    charts = {
        "samples_per_scenario.png": samples_chart(build),
        "frames_per_sample.png": frames_chart(output_dir, build),
        "dead_letters_by_reason.png": dead_letters_chart(build),
        "filter_before_after.png": filter_chart(filters),
    }
    if not isinstance(filters.get("settings"), dict):
        filters["settings"] = {}
    if filters["settings"].get("mode") == "predictions":
        charts["first_round_correct_fractions.png"] = correct_fractions_chart(filters)
    written = []
    for name, image in charts.items():
        url = fileio.join(target or fileio.join(output_dir, PLOTS_DIR), name)
        fileio.write_bytes_atomic(url, png_bytes(image))
        written.append(url)
    return written
