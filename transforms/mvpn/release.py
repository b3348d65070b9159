"""MVP-N's class names from the upstream release's records.

The MVP-N download names its 44 classes by folder ("0000" .. "0043") only; the product names the
benchmark shows ("Selex whey protein." ...) exist only in the release's `MVP-N_preprocessed.jsonl`
(reference gap 5). Each record names its class twice: in `answer` (the product name, formatted
as upstream shows categories) and in `image_template`, whose path runs through the class folder
of the raw layout. So a class's name is the answer of the records whose template names its folder.

Choices ([I], the release's records were never seen by the reference):
- the class folder is the first path component of `image_template` that is one of the manifest's
  class folders (our export writes `MVP-N/<class>/<set>/...`; a set folder may look like a class
  folder too, but comes after it);
- the stored name is the answer without its final "." (the build shows `format_category(name)`,
  which gives the answer back when the release's answers are formatted as upstream formats
  categories; an answer that would come back otherwise is reported);
- a class whose records disagree takes its most frequent answer (ties: the first in sorted
  order), and the disagreement is reported; a class no record names keeps its placeholder, so the
  build still says it holds placeholders.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict

import yaml

from proactivebench_builder.transforms.api import format_category, is_label

PLACEHOLDER = re.compile(r"^product \d{4}$")


def is_placeholder(name: str) -> bool:
    """Whether a class name is one of the shipped placeholders ('product 0041')."""
    return bool(PLACEHOLDER.match(str(name).strip().lower()))


def class_of(template, classes: set[str]) -> str | None:
    if not isinstance(template, str):
        return None
    return next((part for part in template.split("/") if part in classes), None)


def names_from_records(records, classes: list[str]) -> tuple[dict[str, str], list[str]]:
    """(class -> name for the classes the records name, problems one line each)."""
    answers: dict[str, Counter] = defaultdict(Counter)
    problems = []
    known = set(classes)
    for line, record in records:
        answer = record.get("answer") if isinstance(record, dict) else None
        cls = class_of(record.get("image_template") if isinstance(record, dict) else None, known)
        if not is_label(answer) or cls is None:
            problems.append(f"line {line}: no class folder in image_template, or no answer "
                            "(one printable line)")
            continue
        answers[cls][answer.strip()] += 1
    names = {}
    for cls in sorted(answers):
        ranked = sorted(answers[cls].items(), key=lambda kv: (-kv[1], kv[0]))
        answer = ranked[0][0]
        if len(ranked) > 1:
            problems.append(f"class {cls}: records disagree on its name "
                            f"({', '.join(repr(a) for a, _ in ranked[:3])}); kept {answer!r}")
        name = answer[:-1] if answer.endswith(".") else answer
        if format_category(name) != answer:
            problems.append(f"class {cls}: the answer {answer!r} will be shown as "
                            f"{format_category(name)!r} (categories are shown capitalised, "
                            "with a final period)")
        names[cls] = name
    shown: dict[str, list[str]] = defaultdict(list)
    for cls, name in names.items():
        shown[format_category(name)].append(cls)
    for name, same in sorted(shown.items()):
        if len(same) > 1:  # the build refuses two classes shown alike: keep neither
            problems.append(f"classes {', '.join(same)} have one name, {name!r}; they keep "
                            "their placeholders")
            for cls in same:
                del names[cls]
    return names, problems


def class_names_file(names: dict[str, str], placeholders: dict[str, str], source: str) -> bytes:
    """The class-name table in the format the MVP-N scenario reads (YAML, class folder -> name),
    every class present: the release's name where it has one, else the placeholder."""
    table = {cls: names.get(cls, placeholders[cls]) for cls in sorted(placeholders)}
    missing = sorted(set(placeholders) - set(names))
    header = (f"# MVP-N class names from the ProactiveBench release ({source}), written by\n"
              "# run_pipeline.py release_labels: each record's answer, by the class folder its\n"
              "# image_template names.\n")
    if missing:
        header += (f"# {len(missing)} classes no record names keep their placeholder: "
                   f"{', '.join(missing)}\n")
    return (header + yaml.safe_dump(table, sort_keys=True, allow_unicode=True)).encode("utf-8")
