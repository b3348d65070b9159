"""`run_pipeline.py publish DIR (--repo_id OWNER/NAME | --to URL) [--dry_run] ...`

Publishes a built output folder (see `pipeline/publish.py` for what is published and how):
to a Hugging Face Hub dataset repo with `--repo_id` (token from HF_TOKEN or `hf auth login`), or
to any fsspec URL with `--to` (a local folder, gs://, s3://) in the same layout. `--dry_run`
prints the plan (every file, its size and sha256, the commit message, what is already on the
target and would be skipped, what is stale and would be deleted) and changes nothing; when the Hub
cannot be reached (no network, HF_HUB_OFFLINE=1) it still lists every file and says in one line
what it could not compare. A real publish that cannot reach the Hub stops with one error line.
"""
from __future__ import annotations

import argparse
import sys

from proactivebench_builder.core import buildfolder, phases
from proactivebench_builder.core.cli import DEBUG_HELP, CommandParser, one_line, positive_int
from proactivebench_builder.pipeline import dataset_card, publish
from proactivebench_builder.pipeline.commands import subcommand, validate
from proactivebench_builder.transforms import load_scenarios

HELP = "publish a built folder to a Hugging Face Hub dataset repo or any fsspec URL"


PROG = "run_pipeline.py publish"


def declare_flags(p: CommandParser) -> None:
    p.add_argument("folder", help="the built output folder (run_pipeline.py --output DIR)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--repo_id", help="Hub dataset repo to publish to, e.g. me/ProactiveBench")
    where.add_argument("--to", metavar="URL",
                       help="publish to this folder or fsspec URL instead (gs://, s3://, ...)")
    p.add_argument("--dry_run", action="store_true",
                   help="print the plan and change nothing")
    p.add_argument("--create", action="store_true",
                   help="create the Hub dataset repo when it does not exist")
    p.add_argument("--private", action="store_true", help="with --create: a private repo")
    p.add_argument("--revision", default=None, help="Hub branch to commit to (default: main)")
    p.add_argument("--with_upstream", action="store_true",
                   help="also publish the upstream export as the upstream release's test/ "
                        "folder: the *_preprocessed.jsonl files and one zip per image folder")
    p.add_argument("--upstream_prefix", default=publish.DEFAULT_UPSTREAM_PREFIX,
                   help="folder of the upstream export in the target (default: %(default)s)")
    p.add_argument("--commit_message", default=None,
                   help="default: names the configs, code version and seed of the build")
    p.add_argument("--max_commit_bytes", type=positive_int,
                   default=publish.DEFAULT_MAX_COMMIT_BYTES,
                   help="largest upload done as one atomic commit; above it, the resumable "
                        "multi-commit upload is used (default: %(default)s)")
    p.add_argument("--max_commit_files", type=positive_int,
                   default=publish.DEFAULT_MAX_COMMIT_FILES,
                   help="most files (uploads + deletions) in one atomic commit "
                        "(default: %(default)s)")
    p.add_argument("--archive_max_bytes", type=positive_int,
                   default=publish.DEFAULT_ARCHIVE_MAX_BYTES,
                   help="largest upstream zip before it is split into parts "
                        "(default: %(default)s)")
    p.add_argument("--staging_dir", default=None,
                   help="local folder for archives and staged uploads (default: a temporary "
                        "folder, removed afterwards); needs room for the archives")
    p.add_argument("--allow_stand_ins", action="store_true",
                   help="publish to the Hub a build that build.json marks as not the benchmark "
                        "(built from miniature sources or unverified sources, holding placeholder "
                        "labels or an unfiltered pool, or imported from other than the released "
                        "split); its card says so. Without it such a build is refused for "
                        "--repo_id")
    phases.add_flags(p)
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def target_of(args: argparse.Namespace):
    if args.repo_id:
        from huggingface_hub.utils import HFValidationError, validate_repo_id  # Hub only

        try:  # the Hub's own rule, before any request (its error would be a traceback later)
            validate_repo_id(args.repo_id)
        except HFValidationError:
            raise publish.PublishError(f"--repo_id {args.repo_id}: not a Hub repository id "
                                       "(OWNER/NAME, letters, digits, '-', '_', '.')") from None
        return publish.HubTarget(args.repo_id, revision=args.revision, create=args.create,
                                 private=args.private)
    if args.create or args.private or args.revision:
        raise publish.PublishError("--create, --private and --revision apply to --repo_id only")
    return publish.FsspecTarget(args.to)


def record_contract(folder: str) -> list[str]:
    """Every row of the folder against the record contract, and every config loaded through
    `datasets` (the `validate` command's checks). Its status and checksums are not read again:
    `publish.validate_for_publishing` has checked them just before."""
    return (validate.validate_folder(folder, check_status=False)
            or validate.load_problems(folder.rstrip("/")))


def stand_ins(folder: str) -> dict:
    """scenario -> what stands in for the benchmark's data, as build.json records it (a build
    recorded before builds said so counts as unknown)."""
    report = buildfolder.read_report(folder) or {}
    if report.get("scenarios") and "stand_ins" not in report:
        return {"?": [{"kind": "unknown", "what": "built before builds recorded their stand-ins"}]}
    return report.get("stand_ins") or {}


def check_stand_ins(args) -> None:
    """A toy or placeholder build must not reach the Hub under the benchmark's name unasked:
    refused for --repo_id (one line) unless --allow_stand_ins; a folder target, or a dry run,
    goes ahead with a note."""
    found = stand_ins(args.folder)
    if not found:
        return
    what = (f"{args.folder} is not the benchmark: {dataset_card.stand_in_summary(found)}; its card and "
            "reports/build.json say so")
    if args.repo_id and not args.dry_run and not args.allow_stand_ins:
        raise publish.PublishError(
            f"{what}. Build from the real sources (README, Regenerating the benchmark), or pass "
            "--allow_stand_ins to publish it to the Hub anyway")
    print(f"note: {what}" + (" (a real publish to the Hub refuses it without --allow_stand_ins)"
                             if args.repo_id and not args.allow_stand_ins else ""),
          file=sys.stderr)


def publish_command(args: argparse.Namespace) -> int:
    load_scenarios()  # an unusable scenario path is refused before any work
    try:
        check_stand_ins(args)
        with phases.showing(phases.mode_for(args.progress), PROG):
            plan = publish.publish(
                args.folder, target_of(args), dry_run=args.dry_run,
                with_upstream=args.with_upstream,
                upstream_prefix=args.upstream_prefix.rstrip("/"),
                commit_message=args.commit_message, max_commit_bytes=args.max_commit_bytes,
                max_commit_files=args.max_commit_files, archive_max_bytes=args.archive_max_bytes,
                staging_dir=args.staging_dir, check=record_contract)
    except publish.PublishError as err:
        print(f"PUBLISH FAILED: {one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    print(publish.format_plan(plan))
    if args.dry_run:
        print("dry run: nothing was changed")
    elif not plan.empty:
        print(f"published to {plan.target}")
    return 0


PUBLISH = subcommand("publish", HELP, __doc__, declare_flags, publish_command)
main, parser = PUBLISH.main, PUBLISH.parser
