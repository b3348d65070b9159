"""The configuration of one build, typed: what the command line decided, handed to every step of
the Beam graph. It is made once, in the driver (`pipeline.commands.build`), checked there, and
pickled with the DoFns that carry it; workers only read it.

A scenario's own parameters are not here: they are its manifest's `parameters`, overridden by
`overrides[scenario]` (`--set`), and each scenario object reads them as `self.params`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

NO_FILTER, PREDICTIONS, KEEP_LIST = "none", "predictions", "keep_list"
# No network while building: a build reads local paths and storage URLs (gs://, s3://, ...);
# what lives behind these schemes is downloaded first (`run_pipeline.py fetch` for sources).
NETWORK_SCHEMES = ("http://", "https://", "ftp://", "sftp://", "ssh://")


def network_url(url: str) -> bool:
    """Whether reading `url` would download it (a scheme the build does not read)."""
    return url.strip().lower().startswith(NETWORK_SCHEMES)
BUILT = "built"  # the origin of a pool built from the raw sources (else "upstream:<sha256>")


@dataclass(frozen=True)
class Selection:
    """How the pool step selects the test split: no filter, stored first-round predictions, or
    upstream's keep-list (`filters/`)."""
    mode: str = NO_FILTER
    predictions: str | None = None
    keep_list: str | None = None
    threshold: float = 0.25
    min_models: int = 1
    allow_partial: bool = False
    origin: str = BUILT

    def as_dict(self) -> dict:
        """The settings as `reports/filter.json` records them."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BuildConfig:
    """Everything a build's steps read besides the scenarios' own parameters.

    - `scenarios`: the scenarios whose test pools this build makes, sorted;
    - `sources`: scenario -> its source root (a folder or fsspec URL; the upstream release
      folder when importing one);
    - `train_sources`: scenario -> the source root its train split is read from (empty with
      --no_train or when importing);
    - `overrides`: scenario -> {parameter: value} from `--set`;
    - `config_to_scenario`: every registered config name -> its scenario;
    - `import_upstream` / `import_configs`: the upstream release folder and the configs read
      from it (`keep_ids`: rows keep upstream's ids);
    - `stamp`: the reproducibility stamp of the card and build.json;
    - `update`: the plan of a partial rebuild (pipeline.partial_rebuild), None for a full build;
    - `stand_ins`: scenario -> what in its part of the build stands in for the benchmark's own
      data, [{"kind": "miniature" | "placeholders", "what": one line}] (build.json and the card
      say it; `publish --repo_id` refuses it unless told);
    - `progress_dir`: where DoFns report progress (a local run's temporary folder), or None;
    - `failures_dir`: where DoFns record a typed failure for the launcher (pipeline.failures)."""
    seed: int
    output: str
    scenarios: tuple[str, ...]
    sources: dict
    config_to_scenario: dict
    selection: Selection = field(default_factory=Selection)
    train_sources: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    export_upstream: bool = False
    import_upstream: str | None = None
    import_configs: tuple[str, ...] = ()
    keep_ids: bool = False
    stamp: dict = field(default_factory=dict)
    update: dict | None = None
    stand_ins: dict = field(default_factory=dict)
    progress_dir: str | None = None
    failures_dir: str | None = None

    def replace(self, **changes) -> "BuildConfig":
        return dataclasses.replace(self, **changes)

    def overrides_of(self, scenario: str) -> dict:
        return self.overrides.get(scenario, {})
