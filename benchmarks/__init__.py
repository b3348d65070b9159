"""The scale benchmark of the build (issue #6): `python benchmarks/run.py --help`."""
