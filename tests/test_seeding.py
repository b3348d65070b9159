"""core/seeding.py: a build's choices derive from its seed; any integer is a seed."""
from __future__ import annotations

import json
import os

from conftest import build, copy_sources, read_json


def test_any_integer_seed_is_accepted_and_recorded(tmp_path, miniature_root):
    """--seed takes any integer (negative, beyond 64 bits): choices derive from a hash of
    (seed, scenario, key), and the seed is recorded as given."""
    from proactivebench_builder.core.seeding import rng_for

    for seed in (-(2 ** 70), 2 ** 70):
        assert rng_for(seed, "quickdraw", "k", "p").random() == \
            rng_for(seed, "quickdraw", "k", "p").random()
    assert rng_for(2 ** 70, "quickdraw", "k", "p").random() != \
        rng_for(-(2 ** 70), "quickdraw", "k", "p").random()
    sources = copy_sources(miniature_root, tmp_path, "quickdraw")
    result, output = build(tmp_path, sources, "quickdraw", f"--seed={-(2 ** 70)}")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    report = read_json(os.path.join(output, "reports", "build.json"))
    assert report["status"] == "ok"
    assert str(-(2 ** 70)) in json.dumps(report)
