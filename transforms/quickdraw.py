"""QuickDraw (`QuickDraw`): a coarse sketch; the model should ask for more strokes.

Raw source: the Quick, Draw! ndjson files, one per category (`simplified/<category>.ndjson`, or
the `raw/` family). A sample is one recognised drawing; frame k shows its first k+1 strokes, so
frame 0 is the first stroke and the last frame (the reference) is the full drawing. Per class,
`samples_per_class` drawings are drawn by the smallest hash rank of (seed, key): a uniform,
order-independent sample that needs only a k-sized heap while streaming a file of any size.
The ranks after the test picks are free for the train split, which keeps the two disjoint.
"""
from __future__ import annotations

import heapq
import io
import json
import posixpath
import random

from PIL import Image, ImageDraw

from proactivebench_builder.pipeline import fileio
from proactivebench_builder.pipeline.seeding import hash_rank
from proactivebench_builder.transforms.base import BadItem, Scenario, SourceError
from proactivebench_builder.transforms.environment import Play
from proactivebench_builder.transforms.vocabulary import format_category

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
        if not all(isinstance(v, (int, float)) for v in xs + ys):
            raise BadItem("malformed stroke (non-numeric coordinate)")
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

    def read_unit(self, unit: str):
        yield from self._read_ranked(unit, 0, int(self.params["samples_per_class"]))

    def list_train_units(self) -> list[str]:
        return self.list_units()

    def read_train_unit(self, unit: str):
        """The train split takes the drawings ranked right after the test picks, so the two are
        disjoint by construction (same ranking, non-overlapping rank ranges)."""
        start = int(self.params["samples_per_class"])
        yield from self._read_ranked(unit, start, start + int(self.params["train_per_class"]))

    def _read_ranked(self, unit: str, start: int, stop: int):
        """Stream one category file; yield candidates for the eligible drawings whose hash rank
        is in [start, stop), dead letters for bad lines, and counts for everything else."""
        category = category_of_file(posixpath.basename(unit))
        if category not in set(self.manifest["classes"]):
            for number, _ in enumerate(self._lines(unit), start=1):
                yield self.count("raw_items")
                yield self.dead_letter(f"{unit}:{number}", f"unknown class: {category!r}")
            return
        heap, seen, eligible = [], set(), 0
        for number, line in enumerate(self._lines(unit), start=1):
            yield self.count("raw_items")
            location = f"{unit}:{number}"
            try:
                drawing = self._parse_line(line, category)
            except BadItem as err:
                yield self.dead_letter(location, err.reason)
                continue
            key_id = drawing["key_id"]
            if key_id in seen:
                yield self.dead_letter(location, f"duplicate key: key_id {key_id} seen twice")
                continue
            seen.add(key_id)
            if not drawing["recognized"]:
                yield self.count("excluded:not_recognized")
                continue
            if len(drawing["strokes"]) < int(self.params.get("min_strokes", 2)):
                yield self.count("excluded:too_few_strokes")
                continue
            eligible += 1
            rank = hash_rank(self.seed, self.name, "test", f"{category}/{key_id}")
            entry = (-rank, key_id, number, drawing["strokes"])  # a max-heap of the smallest ranks
            if len(heap) < stop:
                heapq.heappush(heap, entry)
            elif entry > heap[0]:
                heapq.heapreplace(heap, entry)
        ranked = sorted(heap, key=lambda e: -e[0])
        picked = ranked[start:stop]
        if start:
            yield self.count("excluded:in_test_pool", min(start, len(ranked)))
        if eligible > len(ranked):
            yield self.count("excluded:not_sampled", eligible - len(ranked))
        for _, key_id, number, strokes in sorted(picked, key=lambda e: e[1]):
            yield self.candidate(f"QuickDraw/{category}/{key_id}",
                                 {"category": category, "key_id": key_id, "strokes": strokes,
                                  "file": self.relative(unit), "line": number})

    @staticmethod
    def _lines(url: str):
        """Stream the lines of a file of any size (a category file can hold 300k drawings)."""
        fs, path = fileio.filesystem(url)
        with fs.open(path, "rb") as handle:
            for line in handle:
                yield line.rstrip(b"\r\n")

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
        from proactivebench_builder.pipeline.manifests import load_manifest

        params = load_manifest(cls.name)["parameters"]
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
