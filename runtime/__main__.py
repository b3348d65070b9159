"""`python -m proactivebench_builder.runtime evaluate ...` (see runtime/cli.py)."""
import sys

from proactivebench_builder.core.cli import launch

sys.exit(launch("python -m proactivebench_builder.runtime", "proactivebench_builder.runtime.cli"))
