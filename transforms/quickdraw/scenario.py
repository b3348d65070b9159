"""The QuickDraw scenario: per category file, the best-ranked recognised drawings; a sample's
frames are its stroke prefixes (the folder's docstring)."""
from __future__ import annotations

import json
import posixpath

from proactivebench_builder.transforms.api import (BadItem, Candidate, Count, DeadLetter, Scenario,
                                                   SourceError, fileio, format_category,
                                                   train_label)
from proactivebench_builder.transforms.quickdraw import miniature
from proactivebench_builder.transforms.quickdraw.play import DETAIL_REQUESTS, PLAY
from proactivebench_builder.transforms.quickdraw.scan import FileScan
from proactivebench_builder.transforms.quickdraw.strokes import parse_strokes, render_strokes

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


FILE_PREFIXES = ("full_simplified_", "full_raw_")  # names given by the Cloud Console download


def category_of_file(name: str) -> str:
    stem = name[: -len(".ndjson")]
    for prefix in FILE_PREFIXES:
        if stem.startswith(prefix):
            return stem[len(prefix):]
    return stem


class QuickDraw(Scenario):
    name = "quickdraw"
    config_name = "QuickDraw"
    has_train_split = True
    environment = PLAY  # how it plays (play.py)
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
        k, t = int(self.params["samples_per_class"]), int(self.params["train_per_class"])
        splits = ([(self.name, 0, k)] if test else []) + \
                 ([(train_label(self.name), k, k + t)] if train else [])
        category = category_of_file(posixpath.basename(unit))
        scan = FileScan(self, unit, category, capacity=k + t)
        scan.run()
        for label, start, stop in splits:
            yield Count(label, "raw_items", scan.raw_items)
            for what, n in sorted(scan.excluded.items()):
                yield Count(label, f"excluded:{what}", n)
            for path, reason in scan.bad:
                yield DeadLetter(label, self.relative(path), reason)
            ranked = scan.ranked()
            picked = ranked[start:stop]
            if start:
                yield Count(label, "excluded:in_test_pool", min(start, len(ranked)))
            if scan.eligible > min(len(ranked), stop):
                yield Count(label, "excluded:not_sampled",
                            scan.eligible - min(len(ranked), stop))
            for key_id, number, strokes in sorted(picked):
                yield Candidate(label, f"QuickDraw/{category}/{key_id}",
                                {"category": category, "key_id": key_id,
                                 "strokes": strokes, "file": self.relative(unit),
                                 "line": number})

    def _parse_line(self, line: bytes, category: str) -> dict:
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BadItem(f"malformed ndjson line: {err}") from None
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise BadItem("malformed ndjson line: nested too deeply to decode") from None
        if not isinstance(record, dict):
            raise BadItem("malformed ndjson line: not a JSON object")
        missing = [f for f in ("word", "key_id", "recognized", "drawing") if f not in record]
        if missing:
            raise BadItem(f"malformed ndjson line: missing fields {missing}")
        if record["word"] != category:
            raise BadItem(f"inconsistent record: word {record['word']!r} in the file of "
                          f"{category!r}")
        key_id = str(record["key_id"])
        if not (key_id.isascii() and key_id.isdigit()):  # as CANONICAL_LINES reads it
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
        miniature.write_miniature(root, cls.read_manifest()["parameters"], seed)
