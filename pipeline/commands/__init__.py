"""The command-line entry points: `build` (run_pipeline.py itself) and one module per subcommand
(`validate`, `inspect`, `publish`), each with a `main(argv)` and a one-line `HELP`."""
