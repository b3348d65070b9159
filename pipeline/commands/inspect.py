"""`run_pipeline.py inspect DIR`: contact sheets of sampled rows and a static page to browse them.

For each scenario config, N rows are sampled deterministically (the N smallest
md5(seed, config, "inspect", key): independent of shard layout and reading order) and each gets a
contact sheet PNG: its frames in order as thumbnails (the first frame framed green, the reference
frame blue), the question, the options as the MCQA prompt letters them (proactive and abstain
options, then the 4 categories, the answer marked) and the scenario's extra fields. `index.html`
lists the sheets by scenario with the key fields; it uses relative links only, so it opens from
the file system with no server.

Choices:
- A row whose views the environment computes from its one frame (COCO's crops) shows the views
  its scenario's behaviour names (`Behaviour.sheet_views`: for COCO the first view, the last
  view, and the full image with both boxes drawn on it).
- Rows with many frames (VSOD, ChangeIt) show at most --max_frames thumbnails, evenly spread,
  always including the first and the reference frame; the sheet says how many were left out.
- Text drawn into the PNGs uses Pillow's bundled font, which covers ASCII only, so it is folded
  to ASCII; index.html shows the exact strings.
- Only the sampled rows' frames are decoded; other rows are read without their frames column.
- When DIR/reports/plots/ is missing (an older build) the plots are drawn into OUT/plots/.
- DIR is checked as `validate`, `publish` and `evaluate` check it first (`core.buildfolder`: a
  finished "ok" build, every shard as build.json records it): a failed, unfinished or damaged
  build is refused in one line; `--force` draws it anyway, and says so on stderr and in
  index.html. A sampled row that `validate` refuses (e.g. an id that is not a number, in a shard
  whose digests were recomputed after an edit) is named on stderr and not drawn.
"""
from __future__ import annotations

import argparse
import html
import io
import os
import posixpath
import sys
from urllib.parse import quote

import pyarrow as pa
from PIL import Image, ImageDraw

from proactivebench_builder.core import buildfolder, fileio, phases, vocabulary
from proactivebench_builder.core.buildfolder import shard_folders
from proactivebench_builder.core.cli import (
    DEBUG_HELP, CommandParser, int_at_least, positive_int)
from proactivebench_builder.core.layout import (
    PLOTS_DIR, TEST, UNFILTERED, shard_folder, split_sets)
from proactivebench_builder.core.records import METADATA_COLUMNS
from proactivebench_builder.core.seeding import stable_hash
from proactivebench_builder.pipeline import plots
from proactivebench_builder.pipeline.commands import subcommand
from proactivebench_builder.pipeline.commands.output_folder import check_can_write
from proactivebench_builder.pipeline.commands.validate import (
    declared_behaviour, iter_rows, row_problems, unregistered_problem)
from proactivebench_builder.pipeline.plots import ascii_text, font, png_bytes
from proactivebench_builder.transforms import load_scenarios

HELP = "contact sheets of sampled rows per scenario and a static index.html to browse them"

SHEET_WIDTH = 1200
MARGIN = 20
THUMB = 150           # thumbnails fit a THUMB x THUMB box
CELL_GAP = 12
CAPTION_H = 34
LINE_H = 20
TEXT_SIZE = 15
FIRST_COLOR, REFERENCE_COLOR, LAST_COLOR = (40, 167, 69), (0, 102, 204), (255, 140, 0)
MARK_COLORS = {"FIRST": FIRST_COLOR, "REF": REFERENCE_COLOR, "LAST": LAST_COLOR}
ANSWER_COLOR, INK, MUTED, BAD = (40, 140, 60), (25, 25, 25), (110, 110, 110), (200, 30, 30)
EXTRA_FIELDS = ("question_type", "quality_answer", "strong_occlusions", "valid_images",
                "step_size", "max_steps", "direction", "granularity", "horizontal_step",
                "vertical_step", "crop")
PLOT_NAMES = ("samples_per_scenario.png", "frames_per_sample.png", "dead_letters_by_reason.png",
              "filter_before_after.png")


# ---- sampling -------------------------------------------------------------------------------

def split_of(folders: dict, config: str, split: str) -> str | None:
    """The requested split, or the pool when the config has no rows in it."""
    for candidate in (split, UNFILTERED):
        if any((shard_set, config) in folders for shard_set in split_sets(candidate)):
            return candidate
    return None


def shard_urls(root: str, folders: dict, split: str, config: str) -> list[str]:
    """The shards of a split of `config` (`folders`: buildfolder.shard_folders), in the order
    its rows come."""
    return [fileio.join(shard_folder(root, shard_set, config), name)
            for shard_set in split_sets(split) for name in folders.get((shard_set, config), [])]


def sample_keys(urls: list[str], config: str, seed: int, n: int) -> tuple[set[str], int]:
    """The n keys with the smallest md5(seed, config, "inspect", key), and the row count (a
    row without a key cannot be sampled by it: it is counted, not drawn)."""
    ranked, rows = [], 0
    for url in urls:
        for row in iter_rows(url, ["key"]):
            rows += 1
            if isinstance(row.get("key"), str):
                ranked.append((stable_hash(seed, config, "inspect", row["key"]), row["key"]))
    ranked.sort()
    return {key for _, key in ranked[:n]}, rows


def read_sampled_rows(urls: list[str], keys: set[str], config: str = "") -> list[dict]:
    """The rows of `keys`, in id order; a row `validate` refuses is named on stderr instead
    (drawing assumes what the record contract says)."""
    rows = []
    for url in urls:
        for row in iter_rows(url):
            if row.get("key") not in keys:
                continue
            problems = row_problems(row, config) if config else []
            if problems:
                print(f"inspect: {config}: key {row.get('key')!r}, id {row.get('id')!r}: not "
                      f"drawn: {problems[0]} (run_pipeline.py validate lists every problem)",
                      file=sys.stderr)
                continue
            rows.append(row)
    return sorted(rows, key=lambda r: r["id"])


# ---- frames -------------------------------------------------------------------------------

def decode(frame: dict | None) -> Image.Image | None:
    """The frame as RGB, or None when its bytes do not decode (drawn as a red cell)."""
    try:
        image = Image.open(io.BytesIO((frame or {}).get("bytes") or b""))
        image.draft("RGB", (THUMB * 2, THUMB * 2))  # JPEG: decode near thumbnail size
        return image.convert("RGB")
    except Exception:  # any undecodable frame is shown, not fatal
        return None


def shown_positions(count: int, first: int, reference: int, limit: int) -> list[int]:
    """Up to `limit` positions, evenly spread, always with the first and reference frames."""
    if count <= limit:
        return list(range(count))
    spread = {round(i * (count - 1) / (limit - 1)) for i in range(limit)}
    return sorted(spread | {p for p in (first, reference) if p >= 0})


def frame_cells(row: dict, limit: int) -> tuple[list[dict], int]:
    """Thumbnail cells (image, caption, marks) in frame order, and how many were left out."""
    ids, frames = row["frame_ids"] or [], row.get("frames") or []
    first = ids.index(row["first_image"]) if row["first_image"] in ids else -1
    reference = ids.index(row["reference_image"]) if row["reference_image"] in ids else -1
    positions = shown_positions(len(ids), first, reference, limit)
    cells = []
    for p in positions:
        marks = [m for m, hit in (("FIRST", p == first), ("REF", p == reference)) if hit]
        cells.append({"image": decode(frames[p] if p < len(frames) else None),
                      "caption": f"#{p} id {ids[p]}", "marks": marks})
    return cells, len(ids) - len(positions)


def view_cells(row: dict, views: list[dict]) -> list[dict]:
    """Cells of the views a behaviour computes from the row's one frame: each view's box cut from
    the frame, or the whole frame with the boxes it outlines drawn in their marks' colours."""
    full = decode((row.get("frames") or [None])[0])
    if full is None:
        return [{"image": None, "caption": "full image", "marks": ["FIRST", "REF"]}]
    cells = []
    for view in views:
        if view.get("box") is not None:
            image = full.crop(tuple(round(v) for v in view["box"]))
        else:
            image = full.copy()
            draw = ImageDraw.Draw(image)
            width = max(2, round(max(full.size) / 150))
            for box, mark in view.get("outlines", ()):
                draw.rectangle(box, outline=MARK_COLORS[mark], width=width)
        cells.append({"image": image, "caption": view["caption"], "marks": view["marks"]})
    return cells


# ---- the sheet ------------------------------------------------------------------------------

def wrap(draw: ImageDraw.ImageDraw, text: str, size: int, width: float) -> list[str]:
    """Word-wrap `text` (folded to ASCII) to lines of at most `width` pixels."""
    lines, line = [], ""
    for word in ascii_text(text).split():
        candidate = f"{line} {word}".strip()
        if line and draw.textlength(candidate, font=font(size)) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    return lines + [line] if line else lines or [""]


def option_lines(row: dict) -> list[tuple[str, tuple]]:
    """(text, colour) per displayed option, lettered as the MCQA prompt letters them."""
    lines = []
    options, categories = row.get("options") or [], row.get("categories") or []
    for index, option in enumerate(options + categories):
        letter = chr(ord("A") + index)
        text, color = f"{letter}. {option}", INK
        if index < len(options):
            if vocabulary.is_abstain(option):
                text += "   (abstain)"
            elif option == row.get("quality_answer"):
                text += "   (the valid enhancement)"
        elif option == row.get("answer"):
            text, color = text + "   <= answer", ANSWER_COLOR
        lines.append((text, color))
    return lines


def extras_text(row: dict) -> str:
    parts = [f"num_images={row.get('num_images')}", f"first_image={row.get('first_image')}",
             f"reference_image={row.get('reference_image')}"]
    for field in EXTRA_FIELDS:
        value = row.get(field)
        if value is not None:
            if isinstance(value, dict):
                value = "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
            parts.append(f"{field}={format_value(value)}")
    return "; ".join(parts)


def format_value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def text_block(draw: ImageDraw.ImageDraw, row: dict) -> list[tuple[str, tuple, int]]:
    """(line, colour, size) of everything written under the thumbnails."""
    width = SHEET_WIDTH - 2 * MARGIN
    block = [(line, INK, TEXT_SIZE + 1) for line in wrap(draw, "Q: " + (row["prompt"] or ""),
                                                         TEXT_SIZE + 1, width)]
    block.append(("", INK, 8))
    for text, color in option_lines(row):
        block += [(line, color, TEXT_SIZE) for line in wrap(draw, text, TEXT_SIZE, width)]
    block.append(("", INK, 8))
    block += [(line, MUTED, 13) for line in wrap(draw, extras_text(row), 13, width)]
    return block


def render_sheet(row: dict, config: str, max_frames: int) -> Image.Image:
    views = declared_behaviour(config).sheet_views(row)
    if views is not None:
        cells, hidden = view_cells(row, views), 0
    else:
        cells, hidden = frame_cells(row, max_frames)
    columns = max(1, (SHEET_WIDTH - 2 * MARGIN + CELL_GAP) // (THUMB + CELL_GAP))
    grid_rows = -(-len(cells) // columns)
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    block = text_block(measure, row)
    header_h = 62 + (LINE_H if hidden else 0)
    height = (header_h + grid_rows * (THUMB + CAPTION_H + CELL_GAP) + 10
              + sum(line_height(size) for _, _, size in block) + MARGIN)
    sheet = Image.new("RGB", (SHEET_WIDTH, height), "white")
    draw = ImageDraw.Draw(sheet)
    draw_header(draw, row, config, hidden, any("LAST" in c["marks"] for c in cells))
    for index, cell in enumerate(cells):
        x = MARGIN + (index % columns) * (THUMB + CELL_GAP)
        y = header_h + (index // columns) * (THUMB + CAPTION_H + CELL_GAP)
        draw_cell(sheet, draw, cell, x, y)
    y = header_h + grid_rows * (THUMB + CAPTION_H + CELL_GAP) + 10
    for text, color, size in block:
        draw.text((MARGIN, y), text, fill=color, font=font(size))
        y += line_height(size)
    return sheet


def line_height(size: int) -> int:
    return max(8, round(size * 1.35))


def draw_header(draw: ImageDraw.ImageDraw, row: dict, config: str, hidden: int,
                last_view: bool) -> None:
    title = f"{config}   id {row['id']}   {row['key']}"
    draw.text((MARGIN, 12), plots.shorten(draw, title, 20, SHEET_WIDTH - 2 * MARGIN), fill=INK,
              font=font(20))
    legend = (f"{len(row['frame_ids'] or [])} frame(s); green frame = first frame shown, "
              "blue = reference frame" + ("; orange = last view" if last_view else ""))
    draw.text((MARGIN, 38), plots.shorten(draw, legend, 13, SHEET_WIDTH - 2 * MARGIN),
              fill=MUTED, font=font(13))
    if hidden:
        draw.text((MARGIN, 56), f"{hidden} frames not shown (evenly spread selection)",
                  fill=MUTED, font=font(13))


def fit(image: Image.Image, box: int) -> Image.Image:
    """The image scaled to fit a box x box square; small images are enlarged with nearest
    neighbour so their pixels stay visible (miniature frames are a few dozen pixels)."""
    scale = min(box / image.width, box / image.height)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    resample = Image.Resampling.NEAREST if scale > 1 else Image.Resampling.LANCZOS
    return image.resize(size, resample)


def draw_cell(sheet: Image.Image, draw: ImageDraw.ImageDraw, cell: dict, x: int, y: int) -> None:
    draw.rectangle((x, y, x + THUMB - 1, y + THUMB - 1), fill=(240, 240, 240))
    image = cell["image"]
    if image is None:
        draw.line((x, y, x + THUMB, y + THUMB), fill=BAD, width=3)
        draw.line((x, y + THUMB, x + THUMB, y), fill=BAD, width=3)
        draw.text((x + 6, y + 6), "undecodable", fill=BAD, font=font(13))
    else:
        thumb = fit(image, THUMB)
        sheet.paste(thumb, (x + (THUMB - thumb.width) // 2, y + (THUMB - thumb.height) // 2))
    colors = MARK_COLORS
    for inset, mark in enumerate(cell["marks"]):
        pad = inset * 4
        draw.rectangle((x - 3 + pad, y - 3 + pad, x + THUMB + 2 - pad, y + THUMB + 2 - pad),
                       outline=colors[mark], width=4)
    draw.text((x, y + THUMB + 4), plots.shorten(draw, cell["caption"], 12, THUMB), fill=INK,
              font=font(12))
    mark_x = x
    for mark in cell["marks"]:
        draw.text((mark_x, y + THUMB + 18), mark, fill=colors[mark], font=font(12))
        mark_x += draw.textlength(mark, font=font(12)) + 8


# ---- the page ---------------------------------------------------------------------------------

def sheet_name(split: str, row: dict) -> str:
    return f"{split}-{row['id']:06d}.png"


def local_relpath(target: str, start: str) -> str | None:
    """A relative link from `start` to `target` when both are local paths, else None."""
    if "://" in target or "://" in start:
        return None
    return os.path.relpath(target, start).replace(os.sep, "/")


def page(title: str, summary: str, sections: list[dict], plot_links: list[str]) -> str:
    esc = html.escape
    nav = " | ".join(f'<a href="#{quote(s["config"])}">{esc(s["config"])}</a> '
                     f'({len(s["entries"])})' for s in sections)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{esc(title)}</title>", f"<style>{STYLE}</style></head><body>",
             f"<h1>{esc(title)}</h1>", f"<p>{esc(summary)}</p>", f"<nav>{nav}</nav>"]
    if plot_links:
        parts.append("<h2>Build plots</h2><p>" + " ".join(
            f'<a href="{quote(link)}"><img class="plot" src="{quote(link)}" '
            f'alt="{esc(posixpath.basename(link))}"></a>' for link in plot_links) + "</p>")
    for section in sections:
        parts.append(f'<section id="{esc(section["config"])}"><h2>{esc(section["config"])}</h2>'
                     f'<p>{esc(section["note"])}</p><table><tr><th>sheet</th><th>id / key</th>'
                     "<th>question and options</th><th>answer</th><th>frames</th>"
                     "<th>extras</th></tr>")
        for entry in section["entries"]:
            parts.append(entry_row(entry))
        parts.append("</table></section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def entry_row(entry: dict) -> str:
    esc, row = html.escape, entry["row"]
    shown = (row["options"] or []) + (row["categories"] or [])
    options = "".join(f"<li>{esc(o)}</li>" for o in shown)
    link = quote(entry["sheet"])
    return (f'<tr><td><a href="{link}"><img class="thumb" src="{link}" alt="sheet"></a></td>'
            f"<td>{row['id']}<br><code>{esc(row['key'])}</code></td>"
            f"<td>{esc(row['prompt'] or '')}<ol type=\"A\">{options}</ol></td>"
            f"<td>{esc(row['answer'] or '')}</td>"
            f"<td>{len(row['frame_ids'] or [])} (first {row['first_image']}, "
            f"reference {row['reference_image']})</td>"
            f"<td><small>{esc(extras_text(row))}</small></td></tr>")


STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:1400px}"
         "table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:6px;"
         "vertical-align:top;text-align:left}img.thumb{width:360px}img.plot{width:460px;"
         "margin:4px;border:1px solid #ddd}nav{margin:1em 0}code{font-size:90%}"
         "section{margin-top:2em}")


# ---- the command ------------------------------------------------------------------------------

def plot_links(root: str, out: str) -> list[str]:
    """Relative links to the build plots; drawn into OUT/plots when the build has none."""
    built = fileio.join(root, PLOTS_DIR)
    if all(fileio.exists(fileio.join(built, n)) for n in PLOT_NAMES):
        rel = local_relpath(built, out)
        if rel is not None:
            return [f"{rel}/{n}" for n in PLOT_NAMES]
    plots.write_build_plots(root, target=fileio.join(out, "plots"))
    return [f"plots/{n}" for n in PLOT_NAMES]


def inspect_folder(root: str, out: str, per_scenario: int = 4, seed: int = 0,
                   split: str = TEST, max_frames: int = 32, warning: str = "") -> list[str]:
    """Write the contact sheets and index.html; returns the written files (sheets, page).
    `warning`: what is wrong with the folder (drawn anyway), said at the top of the page."""
    root = root.rstrip("/")
    folders = shard_folders(root)
    sections, written = [], []
    configs = sorted({c for _, c in folders})
    rows = f"{per_scenario} sampled row{'s' if per_scenario != 1 else ''}"
    with phases.phase(f"drawing {rows} of each config",
                      total=len(configs), unit="configs") as step:
        for config in configs:
            section = config_section(root, out, folders, config, per_scenario, seed, split,
                                     max_frames, written)
            if section is not None:
                sections.append(section)
            step.update()
    links = plot_links(root, out)
    summary = (f"Contact sheets of {root}: up to {per_scenario} rows per scenario. Each sheet "
               "shows the frames in order (green = first frame shown, blue = reference), the "
               "question, the options as lettered in the MCQA prompt, and the answer.")
    if warning:
        summary = f"WARNING: not an intact build, drawn with --force: {warning}. {summary}"
    index = fileio.join(out, "index.html")
    fileio.write_bytes_atomic(index, page("ProactiveBench: inspect", summary, sections,
                                          links).encode("utf-8"))
    return written + [index]


def config_section(root: str, out: str, folders: dict, config: str, per_scenario: int,
                   seed: int, split: str, max_frames: int, written: list[str]) -> dict | None:
    """Draw the sheets of one config's sampled rows (their URLs appended to `written`);
    returns its section of index.html, None when its shards cannot be read."""
    unknown = unregistered_problem(config, "its rows are drawn as plain frames")
    if unknown:  # its scenario's own views cannot be drawn
        print(f"inspect: {unknown}", file=sys.stderr)
    chosen_split = split_of(folders, config, split)
    urls = shard_urls(root, folders, chosen_split, config)
    try:
        keys, total = sample_keys(urls, config, seed, per_scenario)
        sampled = read_sampled_rows(urls, keys, config)
    except (OSError, ValueError, pa.ArrowException) as err:  # drawn with --force only
        print(f"inspect: {config}: not drawn: its shards cannot be read "
              f"({type(err).__name__}: {err})", file=sys.stderr)
        return None
    entries = []
    for row in sampled:
        rel = f"{config}/{sheet_name(chosen_split, row)}"
        url = fileio.join(out, config, sheet_name(chosen_split, row))
        fileio.write_bytes_atomic(url, png_bytes(render_sheet(row, config, max_frames)))
        written.append(url)
        entries.append({"sheet": rel, "row": {c: row.get(c) for c in METADATA_COLUMNS}})
    return {"config": config, "entries": entries,
            "note": f"{len(entries)} of {total} rows of the {chosen_split} split, "
                    f"sampled with seed {seed}"}


PROG = "run_pipeline.py inspect"


def declare_flags(parser: CommandParser) -> None:
    parser.add_argument("dir", metavar="DIR", help="a built folder")
    parser.add_argument("--out", help="where to write the sheets and index.html "
                        "(default: DIR/inspect)")
    parser.add_argument("--per_scenario", type=positive_int, default=4,
                        help="rows sampled per scenario (default: 4)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    parser.add_argument("--split", choices=(TEST, UNFILTERED), default=TEST,
                        help="split to sample from (default: test; the pool when a config has "
                        "no test rows)")
    parser.add_argument("--max_frames", type=int_at_least(2), default=32,
                        help="most thumbnails per sheet, at least 2 (default: 32)")
    parser.add_argument("--force", action="store_true",
                        help="draw a folder that is not an intact build (failed, unfinished, "
                        "damaged) anyway, saying so")
    phases.add_flags(parser)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def inspect_command(args: argparse.Namespace) -> int:
    load_scenarios()  # an unusable scenario path is refused before any work
    with phases.showing(phases.mode_for(args.progress), PROG):
        return inspect_checked(args)


def inspect_checked(args) -> int:
    """The folder checked (drawn anyway with --force), then drawn."""
    out = args.out or fileio.join(args.dir.rstrip("/"), "inspect")
    if fileio.is_local(out):
        check_can_write("--out", out, fileio.local_path(out))
    problems = buildfolder.folder_problems(args.dir)
    warning = ""
    if problems:
        more = (f" (and {len(problems) - 1} more; run_pipeline.py validate {args.dir} lists "
                "them)" if len(problems) > 1 else "")
        if not args.force:
            print(f"inspect: {args.dir} is not an intact build: {problems[0]}{more}; --force "
                  "draws it anyway", file=sys.stderr)
            return 1
        warning = problems[0] + more
        print(f"inspect: warning: {args.dir} is not an intact build, drawn with --force: "
              f"{warning}", file=sys.stderr)
    if not shard_folders(args.dir.rstrip("/")):
        print(f"no Parquet shards under {args.dir}", file=sys.stderr)
        return 1
    written = inspect_folder(args.dir, out, args.per_scenario, args.seed, args.split,
                             args.max_frames, warning)
    print(f"wrote {len(written) - 1} contact sheets and {written[-1]}")
    return 0


INSPECT = subcommand("inspect", HELP, __doc__, declare_flags, inspect_command)
main = INSPECT.main


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
