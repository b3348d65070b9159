"""The fuzz targets' budget, in one place.

The suite runs each target briefly and reproducibly: 60 examples, derandomized, no example
database, so `.ci/run` stays fast and a failure shows on every rerun. A longer campaign is one
variable away (or `tools/fuzz.sh`, which repeats rounds until a time budget runs out):

    PB_FUZZ_EXAMPLES=20000 python -m pytest tests/fuzz/test_fuzz_sources.py -x

Setting PB_FUZZ_EXAMPLES (or PB_FUZZ_RANDOM=1) also makes the examples random, so every round
explores new inputs. A failure found that way is kept as an explicit `@example` or a file under
tests/data/fuzz/, so the short budget replays it for ever."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("PB_FUZZ_EXAMPLES", "60"))
LONG_RUN = "PB_FUZZ_EXAMPLES" in os.environ or os.environ.get("PB_FUZZ_RANDOM") == "1"

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG_RUN, database=None,
                # the targets build files and folders per example, and some strategies filter:
                # what matters is the examples run, not hypothesis' speed heuristics
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture])
