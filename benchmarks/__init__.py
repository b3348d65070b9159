"""The scale benchmark of the build: `python benchmarks/run.py --help`."""
