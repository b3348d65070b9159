"""The released split's membership: upstream's keep list (its loader's FILTER), shipped as package
data (`source_manifests/released_keep_list.json`, with its provenance).

One place for what the build's keep-list filter (`filters.leakage`, `--keep_list released`) and
the runtime (`evaluate --data <release>/test`, `runtime.loading`) know of it: the kept ids per
config, how many each config keeps (88 / 42 / 2,591 / 1,095 / 2,105 / 396 / 1,240 = 7,557), and
how to count what a folder's records keep of it, as upstream's loader does (listed ids, each
once, less the clips whose `strong_occlusions` is false).
"""
from __future__ import annotations

import functools

from proactivebench_builder.core.manifests import load_data_file

RELEASED_FILE = "released_keep_list.json"


@functools.lru_cache(maxsize=1)
def released_kept_ids() -> dict[str, frozenset[int]]:
    """config -> the sample ids the release keeps."""
    data = load_data_file(RELEASED_FILE)
    return {config: frozenset(ids) for config, ids in data["kept_ids"].items()}


def released_counts() -> dict[str, int]:
    """config -> how many samples the released keep list keeps (7,557 in all)."""
    return {config: len(ids) for config, ids in released_kept_ids().items()}


def count_kept(config: str, records) -> int:
    """How many samples the released keep list keeps among `records` ((id, strong_occlusions)
    pairs of one config): listed ids, each once, less the clips upstream's loader skips."""
    listed = released_kept_ids().get(config, frozenset())
    return len({i for i, strong in records if i in listed and strong is not False})
