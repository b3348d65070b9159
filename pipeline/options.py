"""Command-line options of a build, as a Beam `PipelineOptions` subclass: the app flags travel
inside the serialized options, so workers (and Dataflow templates) see them too.

Flags are declared with underscores, the only spelling Beam's parser knows; the build's command
line (`pipeline/commands/build.py`) accepts hyphens too and rewrites them before Beam sees them.
Value types carry their ranges, so a bad value stops the command before any work."""
from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from proactivebench_builder.core.cli import fraction, non_empty, positive_fraction, positive_int

DEFAULT_OUTPUT = "build/proactivebench"
DEFAULT_MINIATURE_ROOT = "build/miniature_sources"


class BuildOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--output", default=DEFAULT_OUTPUT, type=non_empty,
            help="Output folder or fsspec URL (default: %(default)s).")
        parser.add_argument(
            "--sources_root", default=None,
            help="Folder or fsspec URL (gs://, s3://, ...) holding one folder per source, named as "
                 "each manifest's `source_subdir`. Default: the bundled miniature sources, "
                 f"generated on first use under {DEFAULT_MINIATURE_ROOT}.")
        parser.add_argument(
            "--source", action="append", default=[], metavar="SCENARIO=URL",
            help="Root of one source, overriding --sources_root for that scenario (repeatable).")
        parser.add_argument(
            "--scenarios", default="all",
            help="Comma-separated scenario names to build (default: every registered scenario).")
        parser.add_argument(
            "--set", action="append", default=[], dest="overrides",
            metavar="SCENARIO.PARAMETER=VALUE",
            help="Override one parameter of a scenario's manifest for this build (a sample "
                 "count, a shard size; see source_manifests/<scenario>.yaml): a YAML value, "
                 "repeatable, recorded in the card's reproducibility stamp.")
        parser.add_argument(
            "--seed", type=int, default=0,
            help="Global seed; every random choice derives from (seed, scenario, key).")
        parser.add_argument(
            "--predictions", default=None, type=non_empty,
            help="Stored first-round predictions (Parquet, JSONL or CSV, any fsspec URL) for the "
                 "leakage filter.")
        parser.add_argument(
            "--keep_list", default=None, type=non_empty,
            help="'released' (the published kept ids) or a JSON file of kept ids per config; "
                 "only valid on an imported upstream release.")
        parser.add_argument(
            "--filter_threshold", type=positive_fraction, default=0.25,
            help="Drop a sample when at least this fraction of models answers it correctly in "
                 "the first round; above 0, at most 1 (default: %(default)s).")
        parser.add_argument(
            "--min_models", type=positive_int, default=1,
            help="Fewest models that must have answered a sample for the filter to judge it.")
        parser.add_argument(
            "--allow_partial_predictions", action="store_true",
            help="Judge each sample by the models that answered it, instead of requiring every "
                 "model to cover every sample of a config.")
        parser.add_argument(
            "--import_upstream", default=None, metavar="DIR", type=non_empty,
            help="Build from an upstream release folder (<config>_preprocessed.jsonl plus its "
                 "image folders) instead of the raw sources, keeping upstream's ids.")
        parser.add_argument(
            "--verify_sources", action="store_true",
            help="Before any work, compare each source folder with its manifest's pinned file "
                 "counts (expected_files) and sha256 checksums, the published sizes of its "
                 "downloads and its lock file (when recorded), and stop listing every mismatch.")
        parser.add_argument(
            "--record", action="store_true",
            help="With --verify_sources: once the pins agree, write each source folder's lock "
                 "file (<source folder>/.proactivebench-lock.jsonl: relative path, size and "
                 "sha256 of every file), which later --verify_sources builds compare against; "
                 "then build.")
        parser.add_argument(
            "--max_bad_fraction", type=fraction, default=0.05,
            help="Fail the build when dead letters exceed this fraction of a scenario's raw "
                 "items; between 0 and 1 (default: %(default)s).")
        parser.add_argument(
            "--final_validation", choices=("full", "fast", "off"), default="fast",
            help="Check the written folder against the record contract at the end (as the "
                 "`validate` command does): 'full' also decodes every frame (frames were already "
                 "checked when read), 'fast' skips that, 'off' skips the check (default: "
                 "%(default)s).")
        parser.add_argument(
            "--no_train", action="store_true",
            help="Skip the train split (data/train-*.parquet, built from the scenarios that "
                 "offer one).")
        parser.add_argument(
            "--progress", dest="progress", action="store_true", default=None,
            help="Show the build's progress on stderr (units read, samples built, shards "
                 "written, time left) even when stderr is not a terminal. Default: shown on a "
                 "terminal, for a local run.")
        parser.add_argument(
            "--no_progress", "--no-progress", dest="progress", action="store_false",
            help="Do not show the build's progress.")
        export = parser.add_mutually_exclusive_group()
        export.add_argument(
            "--upstream_export", action="store_true",
            help="Also write DIR/upstream: the upstream layout (<config>_preprocessed.jsonl plus "
                 "an image file per frame) that the authors' own `proactivebench` scripts read. "
                 "Its images are written from the bytes encoded for the shards, a second copy "
                 "of every frame on disk (README: What a build writes).")
        export.add_argument(
            "--no_upstream_export", action="store_true",
            help="Write no upstream export (the default; kept so that older commands run).")
        parser.add_argument(
            "--debug", action="store_true",
            help="Show the full traceback of a refused command or an interrupted build (a bug "
                 "always shows its traceback).")
