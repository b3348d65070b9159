"""The scenario author's API: everything a scenario module imports from this project, in one
module. A scenario (a plug-in, or a built-in under `transforms/`) imports from here alone, so the
project's layout can change behind these names (docs/adding_a_scenario.md documents them):

    from proactivebench_builder.transforms.api import BadItem, Play, Scenario, fileio

The scenario
    Scenario          the base class: subclassing registers a scenario (transforms.base)
    ReleaseLabels     what `Scenario.labels_from_release` returns
    template_literal  text placed verbatim in an `image_template` (its braces doubled)
How its environment plays (core.play)
    Play              the play declaration, `environment = Play(...)`
    Behaviour, Steps  rules of play: the base class of your own, and the declared-offset one
    MalformedRecord, cap_problem, unreachable   what a behaviour's `record_problems` reports
    case, record, foreign   conformance cases a play declaration lists (core.conformance)
Errors (core.errors)
    BadItem           one raw item cannot become a sample: a dead letter, the build goes on
    SourceError       the source as a whole is unusable (e.g. its root is missing)
    ScenarioError     the scenario's own declaration is wrong; ManifestError: its manifest
What `read_unit` yields (core.results; `Scenario.candidate`, `.dead_letter`, `.count` make them)
    Candidate, DeadLetter, Count, train_label
Files and images
    fileio            file access on any fsspec URL: join, list_names, exists, is_dir,
                      read_bytes, open_source, write_bytes_atomic (the miniature), ...
    check_image, BadImage   decode-check image bytes (core.images)
    iter_top_level, StreamedArray, NotAJsonObject, READ_CHUNK_BYTES   a huge JSON object read
                      as a stream (core.jsonstream)
Seeding (core.seeding): every choice from (seed, scenario, key), never from processing order
    rng_for, hash_rank, stable_hash   (`Scenario.rng(key, purpose)` is rng_for for this scenario)
Vocabulary (core.vocabulary)
    format_category   a class name as upstream shows categories ("Traffic light.")
    is_abstain, is_label
"""
from __future__ import annotations

from proactivebench_builder.core import fileio
from proactivebench_builder.core.conformance import case, foreign, record
from proactivebench_builder.core.errors import BadItem, ScenarioError, SourceError
from proactivebench_builder.core.images import BadImage, check_image
from proactivebench_builder.core.jsonstream import (READ_CHUNK_BYTES, NotAJsonObject,
                                                    StreamedArray, iter_top_level)
from proactivebench_builder.core.manifests import ManifestError
from proactivebench_builder.core.play import (Behaviour, MalformedRecord, Play, Steps, cap_problem,
                                              unreachable)
from proactivebench_builder.core.results import Candidate, Count, DeadLetter, train_label
from proactivebench_builder.core.seeding import hash_rank, rng_for, stable_hash
from proactivebench_builder.core.vocabulary import format_category, is_abstain, is_label
from proactivebench_builder.transforms.base import ReleaseLabels, Scenario, template_literal

__all__ = [
    "Scenario", "ReleaseLabels", "template_literal",
    "Play", "Behaviour", "Steps", "MalformedRecord", "cap_problem", "unreachable",
    "case", "record", "foreign",
    "BadItem", "SourceError", "ScenarioError", "ManifestError",
    "Candidate", "DeadLetter", "Count", "train_label",
    "fileio", "check_image", "BadImage",
    "iter_top_level", "StreamedArray", "NotAJsonObject", "READ_CHUNK_BYTES",
    "rng_for", "hash_rank", "stable_hash",
    "format_category", "is_abstain", "is_label",
]
