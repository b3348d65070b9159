"""QuickDraw (`QuickDraw`): a coarse sketch; the model should ask for more strokes.

Raw source: the Quick, Draw! ndjson files, one per category (`simplified/<category>.ndjson`, or
the `raw/` family). A sample is one recognised drawing; frame k shows its first k+1 strokes, so
frame 0 is the first stroke and the last frame (the reference) is the full drawing. Per class,
`samples_per_class` drawings are drawn by the smallest hash rank of (seed, key): a uniform,
order-independent sample that needs only a k-sized heap while streaming a file of any size.
The ranks after the test picks are free for the train split, which keeps the two disjoint.

A real category file holds ~145k drawings (~90 MB) of which 60 are kept, so a file is read once
for both splits and a line pays only what it needs: a regular-expression check of its canonical
form for every line, the full JSON parse and stroke validation only for the few hundred that
enter the kept ranks (`FileScan`; measured on a 92 MB file of real-format lines, one core: the
scan ~700 MB/s, `orjson.loads` ~300 MB/s, `json.loads` ~67 MB/s).
"""
from __future__ import annotations

import hashlib
import heapq
import io
import json
import math
import posixpath
import random
import re
from collections import Counter

from PIL import Image, ImageDraw

from proactivebench_builder.core import fileio, results
from proactivebench_builder.transforms.base import BadItem, Scenario, SourceError
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.vocabulary import format_category

QUESTIONS = (
    "What is the category of the depicted object?",
    "Describe the object in the quickdraw in terms of its category.",
    "What does this drawing represent?",
    "Which object is shown in this sketch?",
    "What is depicted in this quickdraw?",
    "Can you identify what this sketch shows?",
    "What object is being drawn here?",
    "Classify the object in this drawing.",
    "What is the subject of this sketch?",
    "Tell me which category this drawing belongs to.",
    "What could this quickdraw be?",
    "Identify the object in the sketch.",
    "What category does the drawn object belong to?",
    "Name the object depicted in this drawing.",
    "What is this a sketch of?",
)

# Each holds exactly one DETAILS keyword (details / quickdraw / drawing / sketch) and no other.
DETAIL_REQUESTS = (
    "Add more details.",
    "Could you improve the quickdraw?",
    "Make this drawing more complete.",
    "Please add more strokes to the sketch.",
    "Continue the drawing.",
    "Keep sketching, please.",
    "Show me more details.",
    "Add a few more strokes to the quickdraw.",
    "Could you finish the drawing?",
    "Extend the sketch with more strokes.",
    "I need more details to answer.",
    "Draw more of the quickdraw.",
    "Complete the sketch.",
)

FILE_PREFIXES = ("full_simplified_", "full_raw_")  # names given by the Cloud Console download


def category_of_file(name: str) -> str:
    stem = name[: -len(".ndjson")]
    for prefix in FILE_PREFIXES:
        if stem.startswith(prefix):
            return stem[len(prefix):]
    return stem


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


class QuickDraw(Scenario):
    name = "quickdraw"
    config_name = "QuickDraw"
    has_train_split = True
    # How upstream's environment plays QuickDraw (runtime.behaviours; texts from upstream).
    environment = Play(
        actions={"DETAILS": ("details", "quickdraw", "drawing", "sketch")},
        behaviour="steps", moves={"DETAILS": 1}, last_turn="category",
        hint="Hint: Adding more details to the quickdraw could help with classification.",
        short_name="QD", open_ended_suggestions=("Add more details to the drawing",),
        prediction_threshold=1, keyword_matching="substring", suggestions=DETAIL_REQUESTS)
    train_units_are_test_units = True

    @property
    def family(self) -> str:
        return self.params.get("family", "simplified")

    def list_units(self) -> list[str]:
        folder = self.path(self.family)
        names = [n for n in fileio.list_names(folder) if n.endswith(".ndjson")]
        if not names:
            raise SourceError(f"quickdraw: no .ndjson files under {folder} "
                              f"(expected the {self.family!r} family, one file per category)")
        return [fileio.join(folder, n) for n in names]

    def list_train_units(self) -> list[str]:
        return self.list_units()

    # Both splits come from the same ranking of the same file: the test split takes ranks
    # [0, samples_per_class), the train split the `train_per_class` ranks after them, so the two
    # are disjoint by construction. The pipeline reads each file once for both
    # (`read_unit_with_train`); `read_unit` / `read_train_unit` read one split each.
    def read_unit(self, unit: str):
        yield from self._read_splits(unit, test=True, train=False)

    def read_train_unit(self, unit: str):
        yield from self._read_splits(unit, test=False, train=True)

    def read_unit_with_train(self, unit: str):
        yield from self._read_splits(unit, test=True, train=True)

    def _read_splits(self, unit: str, test: bool, train: bool):
        """Stream one category file once; per split, yield candidates for the eligible drawings
        in its rank range, dead letters for bad lines and counts for everything else (summed
        over the file, emitted at its end: raw items = candidates + dead letters + exclusions).

        Every line is checked cheaply (`FileScan.scan_block`); the full JSON parse and stroke
        validation are paid only by lines that enter the kept ranks (see `FileScan`)."""
        from proactivebench_builder.pipeline.train import train_label

        k, t = int(self.params["samples_per_class"]), int(self.params["train_per_class"])
        splits = ([(self.name, 0, k)] if test else []) + \
                 ([(train_label(self.name), k, k + t)] if train else [])
        category = category_of_file(posixpath.basename(unit))
        scan = FileScan(self, unit, category, capacity=k + t)
        scan.run()
        for label, start, stop in splits:
            yield results.count(label, "raw_items", scan.raw_items)
            for what, n in sorted(scan.excluded.items()):
                yield results.count(label, f"excluded:{what}", n)
            for path, reason in scan.bad:
                yield results.dead_letter(label, self.relative(path), reason)
            ranked = scan.ranked()
            picked = ranked[start:stop]
            if start:
                yield results.count(label, "excluded:in_test_pool", min(start, len(ranked)))
            if scan.eligible > min(len(ranked), stop):
                yield results.count(label, "excluded:not_sampled",
                                    scan.eligible - min(len(ranked), stop))
            for key_id, number, strokes in sorted(picked):
                yield results.candidate(label, f"QuickDraw/{category}/{key_id}",
                                        {"category": category, "key_id": key_id,
                                         "strokes": strokes, "file": self.relative(unit),
                                         "line": number})

    def _parse_line(self, line: bytes, category: str) -> dict:
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BadItem(f"malformed ndjson line: {err}") from None
        if not isinstance(record, dict):
            raise BadItem("malformed ndjson line: not a JSON object")
        missing = [f for f in ("word", "key_id", "recognized", "drawing") if f not in record]
        if missing:
            raise BadItem(f"malformed ndjson line: missing fields {missing}")
        if record["word"] != category:
            raise BadItem(f"inconsistent record: word {record['word']!r} in the file of "
                          f"{category!r}")
        key_id = str(record["key_id"])
        if not key_id.isdigit():
            raise BadItem(f"malformed ndjson line: key_id {key_id!r} is not an integer")
        strokes = parse_strokes(record["drawing"], raw=self.family == "raw")
        return {"key_id": key_id, "recognized": record["recognized"] is True, "strokes": strokes}

    def build_sample(self, key: str, item: dict) -> dict:
        strokes = item["strokes"]
        n = len(strokes)
        row = self.new_row(key)
        folder = item["category"].replace(" ", "_")
        row.update(
            image_template=f"QuickDraw/{folder}/{item['key_id']}/{{image}}.png",
            first_image=0, num_images=n, reference_image=n - 1,
            prompt=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, [self.rng(key, "request").choice(DETAIL_REQUESTS)]),
            categories=self.pick_categories(key, item["category"], self.manifest["classes"]),
            frame_ids=list(range(n)),
        )
        row["answer"] = format_category(item["category"])
        row["source"]["files"] = [f"{item['file']}:{item['line']}"]
        row["frame_refs"] = [{"kind": "strokes", "strokes": strokes[: i + 1]} for i in range(n)]
        return row

    def build_train_example(self, key: str, item: dict) -> dict:
        """One frame of a train drawing: an early stroke prefix (ambiguous: the valid reply is to
        ask for more strokes) or the full drawing (unambiguous: the valid reply is the class),
        mixed by `train_ambiguous_fraction`."""
        strokes = item["strokes"]
        rng = self.rng(key, "train_mix")
        ambiguous = rng.random() < float(self.params["train_ambiguous_fraction"])
        frame = rng.randrange(0, len(strokes) - 1) if ambiguous else len(strokes) - 1
        request = self.rng(key, "request").choice(DETAIL_REQUESTS)
        return self.train_example(
            key, question=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, [request]),
            categories=self.pick_categories(key, item["category"], self.manifest["classes"]),
            answer=format_category(item["category"]),
            proactive_actions=[request] if ambiguous else [], ambiguous=ambiguous,
            frame_id=frame, image_ref={"kind": "strokes", "strokes": strokes[: frame + 1]},
            files=[f"{item['file']}:{item['line']}"])

    def load_frame(self, ref: dict) -> bytes:
        if ref["kind"] != "strokes":
            return super().load_frame(ref)
        return render_strokes(ref["strokes"], int(self.params["render_size"]),
                              int(self.params["render_padding"]), int(self.params["line_width"]))

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        """`simplified/<category>.ndjson` files in the real format (compact JSON, real field
        order), with recognised and unrecognised drawings of 1-6 strokes."""
        params = cls.read_manifest()["parameters"]
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


# A line as the real files write it: compact JSON, the fields in this order, ASCII only, the
# drawing made of integers, commas and brackets. Such a line is checked by this pattern alone
# unless it can enter the kept ranks; any other line is parsed in full (`QuickDraw._parse_line`).
CANONICAL_LINES = re.compile(
    rb'^\{"word":"([^"\\\[\]\x80-\xff\r\n]*)","countrycode":"[^"\\\[\]\x80-\xff\r\n]*",'
    rb'"timestamp":"[^"\\\[\]\x80-\xff\r\n]*","recognized":(true|false),"key_id":"([0-9]+)",'
    rb'"drawing":\[\[\[[0-9,\[\]]*\]\]\]\}\r?\n', re.MULTILINE)
READ_BYTES = 4 << 20        # whole lines are scanned a block at a time
MAX_LINE_BYTES = 16 << 20   # a real line is a few kB; a longer one is a dead letter, skipped
STROKE_SEPARATOR = b"]],[["  # between two strokes of a compact drawing, and nowhere else
BOM = b"\xef\xbb\xbf"



def duplicate(key: bytes) -> str:
    return f"duplicate key: key_id {key.decode('utf-8')} seen twice"

class FileScan:
    """One pass over a category file that keeps the `capacity` best-ranked eligible drawings.

    What "every line counts" means here: every non-blank line is a raw item and ends as a
    dead letter, an exclusion or an eligible drawing. Every line is checked cheaply: a line
    in the real files' canonical form (`CANONICAL_LINES`) is structurally checked by the
    pattern (valid ASCII JSON framing, the fields present and typed, a drawing of integers),
    its key, recognised flag and stroke count read from it; any other line is parsed in full.
    The full stroke validation (x and y of equal length, coordinates in range) is paid only
    by a drawing whose rank enters the kept ranks: if it fails, it is a dead letter and the
    next rank takes its place, so the kept drawings are exactly those a full parse of every
    line keeps. A canonical-looking line whose strokes are broken but that ranks outside the
    kept ranks (or has too few strokes) is counted as that exclusion instead of a dead
    letter: its bytes are never used. A UTF-8 BOM at the start and blank lines are not items.
    An error inside one line is that line's dead letter; an I/O error part way is one more
    dead letter for the unread rest, and what was read still counts."""

    def __init__(self, scenario: "QuickDraw", unit: str, category: str, capacity: int):
        self.scenario, self.unit, self.category = scenario, unit, category
        self.capacity = capacity
        self.known = category in set(scenario.manifest["classes"])
        self.min_strokes = int(scenario.params.get("min_strokes", 2))
        self.raw_items, self.eligible = 0, 0
        self.excluded = Counter()
        self.bad: list[tuple[str, str]] = []  # (path, reason) in line order
        self.heap: list = []  # (-rank, key_id, line number, strokes): the smallest ranks
        self.seen: set = set()  # key ids (bytes) read so far
        self.worst = b""  # the rank (md5 digest) of the worst kept drawing, once the heap is full
        self.word = category.encode("utf-8")
        # hash_rank(seed, name, "test", f"{category}/{key_id}") with the common prefix hashed once
        self.rank_prefix = hashlib.md5("\x1f".join(
            (str(scenario.seed), scenario.name, "test", f"{category}/")).encode("utf-8"))

    def run(self) -> None:
        """Read the file once, a block of whole lines at a time: the canonical lines of a block
        are found by one `finditer` (C speed), and each costs only `canonical`'s few steps
        (a set lookup, a stroke count, an md5 of the key: a rank is compared as digest bytes,
        which order as the integers `hash_rank` makes); other lines go to `other_line`."""
        self.lines_done = 0
        try:
            # a category file linked out of the sources root is the unit's dead letter
            fs, path = fileio.filesystem(self.scenario.inside_root(self.unit))
            with fs.open(path, "rb") as handle:
                pending, first, skipping = b"", True, False
                while True:
                    data = handle.read(READ_BYTES)
                    if first and data.startswith(BOM):
                        data = data[len(BOM):]
                    first = False
                    if not data:
                        if pending and not skipping:
                            self.scan_block(pending + b"\n")
                        break
                    if skipping:  # the rest of an over-long line
                        end = data.find(b"\n")
                        if end < 0:
                            continue
                        data, skipping = data[end + 1:], False
                        self.lines_done += 1
                    block = pending + data
                    cut = block.rfind(b"\n") + 1
                    if cut == 0 and len(block) > MAX_LINE_BYTES:
                        self.raw_items += 1
                        self.bad.append((f"{self.unit}:{self.lines_done + 1}",
                                         f"malformed ndjson line: longer than "
                                         f"{MAX_LINE_BYTES >> 20} MiB"))
                        pending, skipping = b"", True
                        continue
                    pending = block[cut:]
                    if cut:
                        self.scan_block(block[:cut])
        except Exception as err:  # noqa: BLE001 - I/O part way: the unread rest is one item
            self.raw_items += 1
            number = self.lines_done + 1
            where = f"{self.unit}:{number}" if self.lines_done else self.unit
            self.bad.append((where, f"unreadable source unit from line {number}: "
                                    f"{type(err).__name__}: {err}"))

    def scan_block(self, block: bytes) -> None:
        """Whole lines (`block` ends with a newline), the first numbered `lines_done` + 1."""
        self.block, self.mark, self.mark_line = block, 0, self.lines_done + 1
        pos = 0
        finditer = CANONICAL_LINES.finditer if self.known else (lambda _: ())
        seen, word, prefix = self.seen, self.word, self.rank_prefix
        min_strokes, capacity = self.min_strokes, self.capacity
        for found in finditer(block):
            start, end = found.span()
            if start != pos:  # other lines in between
                self.other_lines(pos, start)
            pos = end
            self.raw_items += 1
            line_word, flag, key = found.groups()
            if line_word != word:
                self.bad.append((self.where(start), self.wrong_word(line_word)))
            elif key in seen:
                self.bad.append((self.where(start), duplicate(key)))
            else:
                seen.add(key)
                if flag != b"true":
                    self.excluded["not_recognized"] += 1
                elif (block.find(STROKE_SEPARATOR, start, pos) < 0 if min_strokes == 2
                      else block.count(STROKE_SEPARATOR, start, pos) + 1 < min_strokes):
                    self.excluded["too_few_strokes"] += 1
                else:
                    digest = prefix.copy()
                    digest.update(key)
                    rank = digest.digest()
                    if len(self.heap) >= capacity and rank > self.worst:
                        self.eligible += 1  # ranked out: its strokes are never needed
                    else:
                        self.enter(block[start:pos], self.line_of(start), key, rank, None)
        if pos != len(block):
            self.other_lines(pos, len(block))
        self.lines_done += block.count(b"\n")

    def line_of(self, offset: int) -> int:
        """The line number at `offset` of the block (offsets asked for only grow)."""
        self.mark_line += self.block.count(b"\n", self.mark, offset)
        self.mark = offset
        return self.mark_line

    def where(self, offset: int) -> str:
        return f"{self.unit}:{self.line_of(offset)}"

    def other_lines(self, start: int, end: int) -> None:
        for line in self.block[start:end].split(b"\n")[:-1]:
            self.other_line(line, self.line_of(start))
            start += len(line) + 1

    def other_line(self, line: bytes, number: int) -> None:
        """A line not in the canonical form: not an item when blank (or only a BOM), else
        parsed in full at once; any error inside it is its own dead letter."""
        line = line.rstrip(b"\r\n")
        if not line or line.isspace():
            return
        self.raw_items += 1
        try:
            if not self.known:
                raise BadItem(f"unknown class: {self.category!r}")
            record = self.scenario._parse_line(line, self.category)
            key = record["key_id"].encode("utf-8")
            if key in self.seen:
                raise BadItem(duplicate(key))
            self.seen.add(key)
            if not record["recognized"]:
                self.excluded["not_recognized"] += 1
                return
            if len(record["strokes"]) < self.min_strokes:
                self.excluded["too_few_strokes"] += 1
                return
            digest = self.rank_prefix.copy()
            digest.update(key)
            rank = digest.digest()
            if len(self.heap) >= self.capacity and rank > self.worst:
                self.eligible += 1
                return
            self.enter(line, number, key, rank, record["strokes"])
        except BadItem as err:
            self.bad.append((f"{self.unit}:{number}", err.reason))
        except Exception as err:  # noqa: BLE001 - one line's fault is that line's
            self.bad.append((f"{self.unit}:{number}",
                             f"unreadable drawing: {type(err).__name__}: {err}"))

    def enter(self, line: bytes, number: int, key: bytes, rank: bytes, strokes) -> None:
        """A drawing whose rank enters the kept ranks: validated in full now (a canonical
        line's strokes were not parsed yet). If it fails it is a dead letter, as if never read
        (its key is free again, as a full parse of every line would have left it)."""
        if strokes is None:
            try:
                strokes = self.scenario._parse_line(line.rstrip(b"\r\n"), self.category)["strokes"]
            except BadItem as err:
                self.seen.discard(key)
                self.bad.append((f"{self.unit}:{number}", err.reason))
                return
            except Exception as err:  # noqa: BLE001
                self.seen.discard(key)
                self.bad.append((f"{self.unit}:{number}",
                                 f"unreadable drawing: {type(err).__name__}: {err}"))
                return
        self.eligible += 1
        entry = (-int.from_bytes(rank, "big"), key.decode("utf-8"), number, strokes)
        if len(self.heap) < self.capacity:
            heapq.heappush(self.heap, entry)  # a max-heap of the smallest ranks
        else:
            heapq.heapreplace(self.heap, entry)
        self.worst = (-self.heap[0][0]).to_bytes(16, "big")

    def wrong_word(self, word: bytes) -> str:
        return f"inconsistent record: word {word.decode()!r} in the file of {self.category!r}"

    def ranked(self) -> list[tuple]:
        """(key_id, line number, strokes) of the kept drawings, best rank first."""
        return [(key, number, strokes)
                for _, key, number, strokes in sorted(self.heap, key=lambda e: -e[0])]


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
