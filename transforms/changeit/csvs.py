"""ChangeIt's repository files: `categories.csv`, `labels.csv`, the `videos/<category>.csv` id
lists and the per-video 1 fps annotations, parsed strictly (a bad file is a dead letter or a
clear build failure, never a guess)."""
from __future__ import annotations

import csv
import io
import re

from proactivebench_builder.transforms.api import BadItem, SourceError

ANNOTATION_SUFFIX = ".fps1.csv"

CATEGORIES_HEADER = ["DIR_NAME", "ACTION_NAME", "CENTERING_PARAM"]

LABELS_HEADER = ["LABEL_ID", "MEANING"]

# labels.csv of the repository, as written there (the miniature copies it byte for byte).
LABELS_CSV = ('LABEL_ID,MEANING\n0,"background/noannotation"\n1,"state1"\n2,"action"\n'
              '3,"state2"\n')

def csv_rows(text: str, name: str) -> list[list[str]]:
    """The non-empty rows of a small CSV table; lines end as CSV says (CR, LF or CRLF: read
    with newline="", or a lone CR is an error). Raise SourceError naming the table for what
    the csv module refuses (e.g. a cell over its field limit)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return [r for r in reader if r]
    except csv.Error as err:
        raise SourceError(f"changeit: {name} line {reader.line_num} is not CSV: {err}") from None


def parse_categories_csv(text: str) -> dict[str, str]:
    """DIR_NAME -> ACTION_NAME from categories.csv (quoted action names, header first)."""
    rows = csv_rows(text, "categories.csv")
    if not rows or [c.strip() for c in rows[0]] != CATEGORIES_HEADER:
        raise SourceError(f"changeit: categories.csv does not start with {CATEGORIES_HEADER}")
    table = {}
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != 3 or not row[0].strip() or not row[1].strip():
            raise SourceError(f"changeit: categories.csv row {number} is malformed: "
                              f"{str(row)[:200]}")
        table[row[0].strip()] = row[1].strip()
    return table

def parse_labels_csv(text: str) -> dict[int, str]:
    """LABEL_ID -> MEANING from labels.csv."""
    rows = csv_rows(text, "labels.csv")
    if not rows or [c.strip() for c in rows[0]] != LABELS_HEADER:
        raise SourceError(f"changeit: labels.csv does not start with {LABELS_HEADER}")
    try:
        return {integer(r[0]): r[1] for r in rows[1:]}
    except (ValueError, IndexError) as err:
        raise SourceError(f"changeit: labels.csv is malformed: {err}") from None


INTEGER = re.compile(r"-?[0-9]{1,18}")


def integer(text: str) -> int:
    """An integer written in ASCII digits (blanks around it allowed); ValueError otherwise.
    int() alone takes any Unicode digit ('٣' is 3), underscores ('1_0' is 10) and refuses
    more than 4,300 digits with an error of its own."""
    text = text.strip()
    if not INTEGER.fullmatch(text):
        raise ValueError(f"not an integer: {text[:40]!r}")
    return int(text)

def parse_video_list(text: str) -> list[str]:
    """The ids of `videos/<category>.csv` (`<id>,<score>`, no header, no final newline). Only
    the text before the first comma is the id: ids contain '-' and '_' and are never split."""
    ids = (line.split(",", 1)[0].strip() for line in text.splitlines())
    return [i for i in ids if i]  # a line with no id before its comma lists nothing

def video_id_of(filename: str) -> str:
    """The YouTube id of an annotation file: the text before the first '.' (as the authors'
    loader does; an id may start with '-')."""
    return filename.split(".", 1)[0]

def parse_annotation(text: str, known_labels) -> list[int]:
    """The label of each second, from `<second>,<label>` lines; raise BadItem unless the seconds
    run 0, 1, 2, ... without gaps or repeats and every label is a known integer id."""
    labels = []
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise BadItem("malformed annotation: no rows")
    for number, line in enumerate(lines, start=1):
        if not line.strip():  # a blank line (an editor's, a trailing one) holds no second
            continue
        fields = line.split(",")
        if len(fields) != 2:
            raise BadItem(f"malformed annotation: line {number} has {len(fields)} fields: {line!r}")
        try:
            second, label = integer(fields[0]), integer(fields[1])
        except ValueError:
            raise BadItem(f"malformed annotation: non-integer value on line {number}: "
                          f"{line!r}") from None
        if second != len(labels):
            raise BadItem(f"malformed annotation: seconds not consecutive from 0 (line {number} "
                          f"has second {second}, expected {len(labels)})")
        if label not in known_labels:
            raise BadItem(f"malformed annotation: unknown label {label} on line {number}")
        labels.append(label)
    return labels

def read_text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")  # a BOM (spreadsheet exports) is not part of the text
    except UnicodeDecodeError as err:
        raise BadItem(f"malformed annotation: not UTF-8 text ({err})") from None
