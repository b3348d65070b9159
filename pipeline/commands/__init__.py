"""The command-line entry points: `build` (run_pipeline.py itself) and one module per subcommand
(`validate`, `inspect`, `publish`), each with a `main(argv)` and a one-line `HELP`; `arguments`
is the plumbing they share.

Importing this package silences the known noise before any command imports Beam (see
`arguments.silence_known_noise`)."""
from proactivebench_builder.core.cli import silence_known_noise

silence_known_noise()
