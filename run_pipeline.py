#!/usr/bin/env python
"""Build ProactiveBench. Without arguments: every registered scenario, from the bundled miniature
sources, into ./build/proactivebench, on the local runner. `--help` lists every flag."""
import sys

from proactivebench_builder.core.cli import launch

if __name__ == "__main__":
    sys.exit(launch("run_pipeline.py", "proactivebench_builder.pipeline.commands.main"))
