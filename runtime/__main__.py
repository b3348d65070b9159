"""`python -m proactivebench_builder.runtime evaluate ...` (see runtime/cli.py), and the
`proactivebench-eval` console script: light launchers, so that Ctrl-C while the runtime's
dependencies import is one line too."""
import sys

from proactivebench_builder.core.cli import launch

CLI = "proactivebench_builder.runtime.cli"


def launch_evaluate() -> int:
    return launch("proactivebench-eval", CLI)


if __name__ == "__main__":
    sys.exit(launch("python -m proactivebench_builder.runtime", CLI))
