"""`python -m proactivebench_builder.runtime evaluate ...` (see runtime/cli.py)."""
import sys

from proactivebench_builder.runtime.cli import main

sys.exit(main())
