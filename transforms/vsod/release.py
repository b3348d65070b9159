"""VSOD's labels from the upstream release's records.

OcclusionDataSet-MM20 has no identity labels: the paper's answers (speaker names found with
Google Images, people counts, event types: 94 categories) exist only in the release's
`OcclusionDataSet-MM20_preprocessed.jsonl`. From its records this writes the two files the VSOD
scenario reads in its source folder: the labels file (`segment,question_type,answer,first_image,
reference_image`, one line per record) and the answer vocabulary (question type -> categories,
also the distractor pool), in place of the manifest's stand-in lists.

Choices ([I], the release's records were never seen by the reference):
- the segment is the folder that holds the frame file `image_template` names
  (`OcclusionDataSet-MM20/<segment>/{image}.jpg` in our export);
- the question type is the record's own `question_type` when it has one (our export), else read
  from the prompt: "how many / count / number" asks for the number of people, "who / speak /
  talk" for the speaker, "event / occasion / happening / gathering / meeting" for the event;
- the frame pins are the record's `first_image` and `reference_image` (the release chose them
  by hand, App. A.2), read as indices of the segment's frames in name order;
- the vocabulary of a type is every category its records show (answers included), without the
  final "."; two records of one segment and type keep the lower id, a disagreement reported.
"""
from __future__ import annotations

import csv
import io
import posixpath
import re

import yaml

from proactivebench_builder.transforms.api import is_label

PROMPT_TYPES = (
    ("number_of_people", re.compile(r"\b(how many|count|number of)\b", re.IGNORECASE)),
    ("speaker", re.compile(r"\b(who|whose|speak\w*|talk\w*|speech|voice)\b", re.IGNORECASE)),
    ("event", re.compile(r"\b(event|occasion|happening|gathering|meeting|situation)\b",
                         re.IGNORECASE)),
)


def question_type(record: dict) -> str | None:
    given = record.get("question_type")
    if given in {kind for kind, _ in PROMPT_TYPES}:
        return given
    prompt = record.get("prompt")
    if not isinstance(prompt, str):
        return None
    return next((kind for kind, pattern in PROMPT_TYPES if pattern.search(prompt)), None)


def segment_of(template) -> str | None:
    if not isinstance(template, str) or "/" not in template:
        return None
    folder = posixpath.dirname(template)
    segment = posixpath.basename(folder)
    if not segment or "{" in segment or "}" in segment or segment in (".", ".."):
        return None
    return segment


def _name(category: str) -> str:
    category = category.strip()
    return category[:-1] if category.endswith(".") else category


def _frame(value) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else ""


def labels_from_records(records) -> tuple[list[dict], dict[str, list[str]], list[str]]:
    """(label rows, vocabulary by question type, problems one line each)."""
    chosen: dict[tuple[str, str], tuple[int, dict]] = {}
    vocabulary: dict[str, set[str]] = {}
    problems = []
    for line, record in records:
        if not isinstance(record, dict):
            problems.append(f"line {line}: not a record")
            continue
        segment, kind = segment_of(record.get("image_template")), question_type(record)
        answer, categories = record.get("answer"), record.get("categories")
        if segment is None or kind is None or not is_label(answer) \
                or not isinstance(categories, list):
            problems.append(f"line {line}: no segment folder in image_template, no question "
                            "type, or no answer (one printable line) and categories")
            continue
        vocabulary.setdefault(kind, set()).update(
            _name(c) for c in categories + [answer] if is_label(c))
        try:
            record_id = int(record.get("id"))
        except (TypeError, ValueError):
            record_id = line
        label = {"segment": segment, "question_type": kind, "answer": _name(answer),
                 "first_image": _frame(record.get("first_image")),
                 "reference_image": _frame(record.get("reference_image"))}
        earlier = chosen.get((segment, kind))
        if earlier is not None:
            keep = min(earlier, (record_id, label), key=lambda pair: pair[0])
            if earlier[1]["answer"] != label["answer"]:
                problems.append(f"line {line}: segment {segment} {kind}: answer "
                                f"{label['answer']!r} disagrees with {earlier[1]['answer']!r}; "
                                f"kept the record with id {keep[0]}")
            chosen[(segment, kind)] = keep
        else:
            chosen[(segment, kind)] = (record_id, label)
    rows = [label for _, (_, label) in sorted(chosen.items())]
    return rows, {k: sorted(v) for k, v in sorted(vocabulary.items())}, problems


LABEL_HEADER = ("segment", "question_type", "answer", "first_image", "reference_image")


def labels_file(rows: list[dict]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=LABEL_HEADER, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")


def vocabulary_file(vocabulary: dict[str, list[str]], source: str) -> bytes:
    header = (f"# OcclusionDataSet-MM20 answer vocabulary from the ProactiveBench release "
              f"({source}),\n# written by run_pipeline.py release_labels: question type -> "
              "every category its records show.\n")
    return (header + yaml.safe_dump(vocabulary, sort_keys=True, allow_unicode=True)).encode()
