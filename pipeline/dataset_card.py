"""The dataset card (`DIR/README.md`): YAML front matter with one `configs:` entry per scenario
(so `load_dataset(DIR, name=CONFIG, split=...)` and the Hub viewer find every config and split),
then what ProactiveBench is, counts, source licences, the citation and a reproducibility stamp."""
from __future__ import annotations

import yaml

from proactivebench_builder.core.buildfolder import dataset_info
from proactivebench_builder.core.layout import TEST, UNFILTERED, split_glob
from proactivebench_builder.transforms import manifest_of

CITATION = """@article{demin2026proactivebench,
  title   = {ProactiveBench: Benchmarking Proactiveness in Multimodal Large Language Models},
  author  = {De Min, Thomas and Roy, Subhankar and Lathuili{\\`e}re, St{\\'e}phane and
             Ricci, Elisa and Mancini, Massimiliano},
  journal = {arXiv preprint arXiv:2603.19466},
  year    = {2026}
}"""

ABOUT = """ProactiveBench measures whether a multimodal model asks for help when an image does not hold
enough to answer (\"move the occluder\", \"rotate the object\", \"add more strokes\", \"rewind the
video\") instead of guessing. Each sample is a multi-turn environment whose frames run from an
ambiguous first frame to a fully informative reference frame. This copy was rebuilt from the raw
source datasets by the ProactiveBench builder; rows follow the upstream `*_preprocessed.jsonl`
record semantics and carry their frames as images, so no loose files are needed."""


def configs_block(configs: list[str], extra_configs: list[dict] | None = None) -> list[dict]:
    entries = list(extra_configs or [])
    for config in configs:
        entries.append({
            "config_name": config,
            "data_files": [
                {"split": TEST, "path": split_glob(TEST, config)},
                {"split": UNFILTERED, "path": split_glob(UNFILTERED, config)},
            ],
        })
    return entries


def front_matter(configs: list[str], licenses: list[str], extra_configs=None,
                 files=None) -> str:
    meta = {
        "pretty_name": "ProactiveBench (rebuilt)",
        "license": "other",
        "license_details": "; ".join(licenses),
        "language": ["en"],
        "task_categories": ["visual-question-answering"],
        "tags": ["proactive", "multimodal", "benchmark"],
        "configs": configs_block(configs, extra_configs),
    }
    if files:
        meta["dataset_info"] = dataset_info(files)
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def render(report: dict, filters: dict, stamp: dict, extra_configs=None, train=None,
           files=None) -> str:
    names = [n for n in sorted(report) if report[n]["config"]]
    manifests = {n: manifest_of(n) for n in names}
    configs = [manifests[n]["config_name"] for n in names]
    licenses = sorted({f"{manifests[n]['dataset']}: {manifests[n]['license']}" for n in names})
    lines = [front_matter(configs, licenses, extra_configs, files), "# ProactiveBench (rebuilt)", "",
             ABOUT, "", "## Configs and sizes", "",
             "| config | unfiltered pool | test (after filtering) | filter |",
             "|---|---|---|---|"]
    for n in names:
        r = report[n]
        mode = filters.get(n, {}).get("mode", "none")
        lines.append(f"| {r['config']} | {r['samples']} | {r['kept']} | {mode} |")
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
