"""The dataset card (`DIR/README.md`): YAML front matter with one `configs:` entry per scenario
(so `load_dataset(DIR, name=CONFIG, split=...)` and the Hub viewer find every config and split),
then what ProactiveBench is, counts, source licences, the citation and a reproducibility stamp."""
from __future__ import annotations

import yaml

from proactivebench_builder.core.buildfolder import dataset_info
from proactivebench_builder.core.layout import TEST, UNFILTERED, set_glob, split_sets
from proactivebench_builder.transforms import manifest_of

CITATION = """@article{demin2026proactivebench,
  title   = {ProactiveBench: Benchmarking Proactiveness in Multimodal Large Language Models},
  author  = {De Min, Thomas and Roy, Subhankar and Lathuili{\\`e}re, St{\\'e}phane and
             Ricci, Elisa and Mancini, Massimiliano},
  journal = {arXiv preprint arXiv:2603.19466},
  year    = {2026}
}"""

INTRO = """ProactiveBench measures whether a multimodal model asks for help when an image does not hold
enough to answer (\"move the occluder\", \"rotate the object\", \"add more strokes\", \"rewind the
video\") instead of guessing. Each sample is a multi-turn environment whose frames run from an
ambiguous first frame to a fully informative reference frame."""
ABOUT = INTRO + """ This copy was rebuilt from the raw
source datasets by the ProactiveBench builder; rows follow the upstream `*_preprocessed.jsonl`
record semantics and carry their frames as images, so no loose files are needed."""
# an import of the release (--import_upstream): its own records, not a rebuild
IMPORTED = INTRO + """ This copy was imported from the
upstream release's own records (its `test/` folder) by the ProactiveBench builder; rows keep
upstream's ids and texts and carry their frames as images, so no loose files are needed."""
# an import of records in the upstream layout that are not the released split (see its stand-ins)
IMPORTED_OTHER = INTRO + """ This copy was imported by the
ProactiveBench builder from records in the upstream layout that are not the upstream release's
test split (see "Not the benchmark" below); rows carry their frames as images."""


def configs_block(configs: list[str], extra_configs: list[dict] | None = None,
                  files: list[dict] | None = None) -> list[dict]:
    """One entry per config with a `data_files` entry per split: `test` names the pool's
    `test` set, `unfiltered` both sets (`core.layout`), so one copy of the rows serves both.
    Given the build's `files`, a set without rows is left out (`datasets` cannot load a 0-row
    shard, and no shard is written for it), a split without any, and a config without any
    rows altogether."""
    entries = list(extra_configs or [])
    present = None if files is None else {(f["config"], f["split"]) for f in files}
    for config in configs:
        data_files = []
        for split in (TEST, UNFILTERED):
            patterns = [set_glob(s, config) for s in split_sets(split)
                        if present is None or (config, s) in present]
            if patterns:
                data_files.append({"split": split,
                                   "path": patterns[0] if len(patterns) == 1 else patterns})
        if data_files:
            entries.append({"config_name": config, "data_files": data_files})
    return entries


def stand_ins_of(report: dict) -> dict[str, list[dict]]:
    """scenario -> what in its part of the build stands in for the real benchmark (miniature
    sources, placeholder labels), as build.json records it per scenario."""
    return {n: list(r.get("stand_ins") or []) for n, r in sorted(report.items())
            if r.get("stand_ins")}


def imported(stamp: dict) -> bool:
    return str(stamp.get("origin") or "").startswith("upstream")


# What each kind of stand-in is called in a title or a one-line summary (build.json's
# `stand_ins`: pipeline.commands.configure, pipeline.import_upstream).
STAND_IN_WORDS = {
    "builder_export": "a builder's export",
    "miniature": "miniature sources",
    "placeholders": "placeholder labels",
    "unverified": "unverified sources",
    "unfiltered": "an unfiltered pool",
    "not_released_split": "records other than the released split",
}


def stand_in_kinds(stand_ins: dict[str, list[dict]]) -> list[str]:
    """The kinds present, in the order of STAND_IN_WORDS (unknown kinds last, sorted)."""
    kinds = {item["kind"] for items in stand_ins.values() for item in items}
    order = list(STAND_IN_WORDS)
    return sorted(kinds, key=lambda k: (order.index(k) if k in order else len(order), k))


def stand_in_summary(found: dict) -> str:
    """'miniature sources (changeit, coco); placeholder labels (mvpn, vsod)' (build.json's
    `stand_ins`: scenario -> items)."""
    by_kind: dict[str, list[str]] = {}
    for name, items in sorted(found.items()):
        for item in items:
            by_kind.setdefault(item.get("kind", "?"), []).append(name)
    return "; ".join(f"{STAND_IN_WORDS.get(k, k)} ({', '.join(sorted(set(v)))})"
                     for k, v in sorted(by_kind.items()))


def joined(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def title(stand_ins: dict[str, list[dict]], stamp: dict | None = None) -> str:
    """The card's name: it says when the build is not the benchmark, so that a toy build is
    never taken for it (on the Hub the name is what people see first). An import is "from the
    upstream release" only without stand-ins: the released keep list applied (its counts
    checked) to records that look like the release's."""
    kinds = stand_in_kinds(stand_ins)
    verb = "imported" if imported(stamp or {}) else "rebuilt"
    if not kinds:
        return ("ProactiveBench (imported from the upstream release)" if verb == "imported"
                else "ProactiveBench (rebuilt)")
    return (f"ProactiveBench ({verb} from "
            + joined([STAND_IN_WORDS.get(k, k) for k in kinds]) + "; not the benchmark)")


def about(stand_ins: dict, stamp: dict) -> str:
    if not imported(stamp):
        return ABOUT
    return IMPORTED if not stand_ins else IMPORTED_OTHER


def front_matter(configs: list[str], licenses: list[str], extra_configs=None,
                 files=None, name: str = "ProactiveBench (rebuilt)") -> str:
    meta = {
        "pretty_name": name,
        "license": "other",
        "license_details": "; ".join(licenses),
        "language": ["en"],
        "task_categories": ["visual-question-answering"],
        "tags": ["proactive", "multimodal", "benchmark"],
        "configs": configs_block(configs, extra_configs, files),
    }
    if files:
        meta["dataset_info"] = dataset_info(files)
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def stand_in_lines(stand_ins: dict[str, list[dict]], manifests: dict) -> list[str]:
    if not stand_ins:
        return []
    lines = ["## Not the benchmark", "",
             "Parts of this build stand in for data the real benchmark has, so its rows are "
             "not ProactiveBench's and its scores are not comparable with the paper's:", ""]
    configs_of: dict[str, list[str]] = {}  # one line per stand-in, naming every config it hits
    for name, items in stand_ins.items():
        for item in items:
            configs_of.setdefault(item["what"], []).append(manifests[name]["config_name"])
    for what, configs in configs_of.items():
        lines.append(f"- {', '.join(configs)}: {what}")
    return lines + [""]


def render(report: dict, filters: dict, stamp: dict, extra_configs=None, train=None,
           files=None) -> str:
    names = [n for n in sorted(report) if report[n]["config"]]
    manifests = {n: manifest_of(n) for n in names}
    configs = [manifests[n]["config_name"] for n in names]
    licenses = sorted({f"{manifests[n]['dataset']}: {manifests[n]['license']}" for n in names})
    stand_ins = stand_ins_of({n: report[n] for n in names})
    name = title(stand_ins, stamp)
    lines = [front_matter(configs, licenses, extra_configs, files, name), f"# {name}", "",
             about(stand_ins, stamp), "", *stand_in_lines(stand_ins, manifests),
             "## Configs and sizes", "",
             "| config | unfiltered pool | test (after filtering) | filter |",
             "|---|---|---|---|"]
    for n in names:
        r = report[n]
        mode = filters.get(n, {}).get("mode", "none")
        lines.append(f"| {r['config']} | {r['samples']} | {r['kept']} | {mode} |")
    empty = [report[n]["config"] for n in names if not report[n]["kept"]]
    if empty:
        lines += ["", "No test rows in " + ", ".join(empty) + ": the `test` split is left out "
                  "of their `configs:` entries (a config with no rows at all is left out)."]
    if train and train.get("rows"):
        mix = ", ".join(f"{c}: {m.get('ambiguous', 0)} ambiguous / {m.get('unambiguous', 0)} "
                        f"unambiguous" for c, m in sorted(train.get("mix", {}).items()))
        lines += ["", f"The `default` config holds the `train` split for GRPO post-training: "
                  f"{train['rows']} single-turn examples ({mix})."]
    lines += ["", "Load a config with `datasets.load_dataset(PATH_OR_REPO, name=CONFIG, split=\"test\")`"
              " (or `split=\"unfiltered\"` for the pool before leakage filtering).", "",
              "## Sources and licences", "", "| config | source | licence | homepage |",
              "|---|---|---|---|"]
    for n in names:
        m = manifests[n]
        lines.append(f"| {m['config_name']} | {m['dataset']} | {m['license']} | {m['homepage']} |")
    lines += ["", "Each source keeps its own licence; the benchmark as a whole inherits the most "
              "restrictive of them.", "", "## Citation", "", "```bibtex", CITATION, "```", ""]
    for n in names:
        lines += ["```bibtex", manifests[n]["citation"].strip(), "```", ""]
    lines += ["## Reproducibility", "", "```yaml",
              yaml.safe_dump(stamp, sort_keys=True, allow_unicode=True).strip(), "```", ""]
    return "\n".join(lines)
