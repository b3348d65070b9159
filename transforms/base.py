"""The scenario base class: what every scenario module implements, and the shared helpers.

A scenario turns one raw source into benchmark samples. It owns everything specific to its
source (finding raw items, ordering frames from hard to reference, its options and prompts, its
extra fields, its miniature raw layout); the pipeline owns everything shared (manifests, seeding,
ids, filtering, writing, reports). Subclassing registers a scenario by its `name`, and the
pipeline discovers every module in this package, so adding a scenario edits no list.

Work is split so that little crosses a shuffle: `list_units` names independent pieces of raw
reading (a category file, a class folder), `read_unit` yields small candidate items, and
`build_sample` turns one item into a row whose frames are *references* (`frame_refs`); bytes are
produced by `load_frame` only in the stage that writes them.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import posixpath
import random
import sys
from typing import ClassVar, Iterable, Iterator

import yaml

from proactivebench_builder.core import errors, fileio, manifests, results, vocabulary
from proactivebench_builder.core.errors import BadItem, ScenarioError, SourceError
from proactivebench_builder.core.images import BadImage, check_image
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.prompts import multi_choice_prompt
from proactivebench_builder.core.records import empty_row
from proactivebench_builder.core.seeding import rng_for

_REGISTRY: dict[str, type["Scenario"]] = {}
_PACKAGE = __name__.rpartition(".")[0]  # proactivebench_builder.transforms


@dataclasses.dataclass
class ReleaseLabels:
    """What a scenario derives from the upstream release's records (`labels_from_release`):
    `files` (a file name relative to its source folder -> its bytes, in the format the scenario
    reads), `labels` (how many labels the records gave), `summary` lines for the user, and
    `problems`: records that gave no label or disagree, one line each."""
    files: dict
    labels: int
    summary: list
    problems: list


class SourceChanged(BadItem):
    """A source file whose bytes are no longer those validated when its sample (or train
    example) was built: the shard writer drops the row as a dead letter."""


class Scenario:
    name: ClassVar[str] = ""          # registry key and manifest name (source_manifests/<name>.yaml)
    config_name: ClassVar[str] = ""   # the upstream dataset / Hub config name
    has_train_split: ClassVar[bool] = False  # True when it implements the train_* methods
    environment: ClassVar[Play] = Play()  # how its environment plays (transforms.environment)
    # True when its train units are its test units (QuickDraw's category files): the pipeline
    # then reads each unit once for both splits with `read_unit_with_train`
    train_units_are_test_units: ClassVar[bool] = False
    # the most one source file read whole may hold (a frame, a list, a CSV): memory never
    # depends on what a source claims; the real sources' largest such file is a few MB
    max_source_file_bytes: ClassVar[int] = 256 << 20

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "frame_path" in cls.__dict__:
            # the runtime and the export read the declaration, never this method: an override
            # would make the build write frames where nothing looks for them
            raise TypeError(f"{cls.__name__}: declare where frames live in the upstream layout "
                            "in its play declaration, `environment = Play(frame_path=...)`, "
                            "not by overriding Scenario.frame_path")
        if cls.name:
            other = _REGISTRY.get(cls.name)
            if other is not None and other is not cls:
                raise ScenarioError(f"two scenarios are named {cls.name!r}: {other.__module__}."
                                    f"{other.__name__} and {cls.__module__}.{cls.__name__}")
            _REGISTRY[cls.name] = cls

    def __init__(self, seed: int, source_root: str):
        self.seed = seed
        self.manifest = self.read_manifest()
        self.params = dict(self.manifest["parameters"])
        self.root = source_root.rstrip("/")
        # url -> sha256 of the bytes `validate_file_frame` validated, until sealed into a row;
        # a copy of the scenario (COCO's `for_split`) shares it
        self._digests: dict[str, str] = {}

    # ---- its manifest ------------------------------------------------------------------------

    @classmethod
    def module_folder(cls) -> str | None:
        """The folder of the module that defines the scenario, where a plug-in keeps its
        manifest and data files; None for a scenario of this package (a folder or a module in
        transforms/), whose manifest and data files are package data of `source_manifests`
        only: setup.py installs nothing else beside its modules."""
        if cls.__module__.startswith(_PACKAGE + "."):
            return None
        return os.path.dirname(os.path.abspath(sys.modules[cls.__module__].__file__))

    @classmethod
    def read_manifest(cls) -> dict:
        """The scenario's parsed manifest `<name>.yaml` (core.manifests)."""
        return manifests.load_manifest(cls.name, cls.module_folder())

    @classmethod
    def manifest_sha256(cls) -> str:
        return manifests.manifest_sha256(cls.name, cls.module_folder())

    @classmethod
    def manifest_location(cls) -> str:
        """Where a user finds the manifest, for messages."""
        return manifests.manifest_location(cls.name, cls.module_folder())

    @classmethod
    def data_file(cls, filename: str):
        """A JSON or YAML data file the manifest names (e.g. a class-name table)."""
        return manifests.load_data_file(filename, cls.module_folder())

    # ---- what a scenario implements -------------------------------------------------------

    def list_units(self) -> list[str]:
        """Independent units of raw reading, e.g. one per category file. Raise SourceError when
        the source root is missing or unusable: that is a configuration error, not a bad item."""
        raise NotImplementedError

    def read_unit(self, unit: str) -> Iterator[dict]:
        """Yield `results.candidate`, `results.dead_letter` and `results.count` values."""
        raise NotImplementedError

    def build_sample(self, key: str, item: dict) -> dict:
        """A row (see `pipeline.records`) with `frame_refs` in place of frames; raise BadItem."""
        raise NotImplementedError

    def load_frame(self, ref: dict) -> bytes:
        """The bytes of one frame. The default handles source files passed through unchanged."""
        if ref["kind"] == "file":
            return self.read_source(ref["url"])
        raise ValueError(f"{self.name}: unknown frame kind {ref['kind']!r}")

    def read_order(self, ref: dict) -> tuple:
        """A sort key for reading frames, when reading them in row order is slow (members of a
        compressed archive, which can only be read forward): the shard writer then reads a
        shard's frames in this order before writing its rows in id order. () = row order."""
        return ()

    def frame_path(self, row: dict, frame_id: int) -> str:
        """Where a frame lives in the upstream layout: the template filled for one slot value,
        as the scenario's play declaration says (`Play.frame_path`)."""
        return self.environment.frame_path(row, frame_id)

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        """Write a small deterministic copy of the source's real on-disk layout under `root`."""
        raise NotImplementedError

    # ---- labels the raw source lacks (optional) ----------------------------------------------

    def placeholders(self) -> list[str]:
        """What a build from this source would hold in place of the benchmark's own labels (one
        line each, e.g. placeholder class names); [] when nothing. Asked in the driver before
        any work; build.json and the card record it, and `publish` refuses it on the Hub."""
        return []

    @classmethod
    def is_placeholder_answer(cls, answer) -> bool:
        """Whether a record's `answer` is one of the placeholders this scenario's builds write
        (e.g. MVP-N's 'Product 0041.'): an imported record holding one is not the release's
        (`--import_upstream` then marks the build as a stand-in)."""
        return False

    @classmethod
    def labels_from_release(cls, records: list[tuple[int, dict]],
                            source: str = "") -> "ReleaseLabels | None":
        """The labels this scenario needs that exist only in the upstream release's records
        ((line number, parsed line) of its `<config>_preprocessed.jsonl`: untrusted, any
        shape; `source` names the file for the provenance the files record), as a
        `ReleaseLabels` whose files go into its source folder; None when the raw source holds
        every label it needs. `run_pipeline.py release_labels` calls it."""
        return None

    # ---- the train split (optional: scenarios without one return no units) ----------------

    def list_train_units(self) -> list[str]:
        """Units of raw reading for the train split; [] when the scenario has no train split."""
        return []

    def read_train_unit(self, unit: str) -> Iterator[dict]:
        raise NotImplementedError

    def read_unit_with_train(self, unit: str) -> Iterator[dict]:
        """`read_unit` and `read_train_unit` of one unit in one read (when
        `train_units_are_test_units`): train values are labelled `<name>/train`."""
        raise NotImplementedError

    def build_train_example(self, key: str, item: dict) -> dict:
        """A train row (see `pipeline.records.TRAIN_COLUMNS`) with one `image_ref`."""
        raise NotImplementedError

    @classmethod
    def reading_done(cls) -> None:
        """Drop what this process kept to read further units (e.g. COCO's annotation index):
        the build calls it once raw reading is over (the stages after it build and write
        samples, where a worker's memory peaks). Only memory is at stake: a unit read later
        reads its state again."""

    def train_example(self, key: str, *, question: str, options: list[str],
                      categories: list[str], answer: str, proactive_actions: list[str],
                      ambiguous: bool, frame_id: int, image_ref: dict, files: list[str]) -> dict:
        """A single-turn example as the released train split holds it: the multiple-choice prompt
        as chat messages (image first, then the upstream template), `options` as displayed
        (proactive and abstain options, then the categories), and the suggestions valid for
        this frame in `proactive_actions` (empty on an unambiguous frame)."""
        image_ref = self.seal_image_ref(image_ref)
        displayed = list(options) + list(categories)
        text = multi_choice_prompt(question, displayed)
        return {
            "prompt": [{"role": "user", "content": [{"type": "image", "text": None},
                                                    {"type": "text", "text": text}]}],
            "ground_truth": answer, "proactive_actions": list(proactive_actions),
            "options": displayed, "key": key, "config": self.config_name,
            "ambiguous": ambiguous, "frame_id": frame_id, "image_ref": image_ref,
            "source": {"dataset": self.manifest["dataset"], "license": self.manifest["license"],
                       "files": list(files)},
        }

    # ---- shared helpers ---------------------------------------------------------------------

    def rng(self, key: str, purpose: str) -> random.Random:
        return rng_for(self.seed, self.name, key, purpose)

    def path(self, *parts: str) -> str:
        return fileio.join(self.root, *parts)

    def relative(self, url: str) -> str:
        """A source path relative to the source root, as reported in dead letters and provenance."""
        prefix = self.root + "/"
        return url[len(prefix):] if url.startswith(prefix) else url

    def candidate(self, key: str, item: dict) -> dict:
        return results.Candidate(self.name, key, item)

    def fragment(self, key: str, item: dict):
        """A part of the raw item `key` found in this unit; the parts of a key found in all
        units are merged by `merge_fragments` before the sample is built, and counted there
        as one raw item (so a unit does not count it)."""
        return results.Fragment(self.name, key, item)

    @classmethod
    def merge_fragments(cls, items: list[dict]) -> dict:
        """The candidate item of a raw item read in fragments (`fragment`), from the items of
        its fragments, which arrive in any order. Only a scenario that yields fragments
        implements it."""
        raise NotImplementedError(f"{cls.name} yields fragments but does not merge them")

    def dead_letter(self, path: str, reason: str) -> dict:
        return results.DeadLetter(self.name, self.relative(path), reason)

    def count(self, what: str, n: int = 1) -> dict:
        return results.Count(self.name, what, n)

    def validate_file_frame(self, url: str) -> tuple[str, int, int]:
        """Read and cheaply decode a source image; raise BadItem naming the file and the reason.
        The digest of the validated bytes is kept until `seal_frame_refs` puts it in the row's
        frame reference, so the shard writer can prove it writes the bytes validated here."""
        try:
            data = self.read_source(url)
        except FileNotFoundError:
            raise BadItem("missing frame file", self.relative(url)) from None
        except OSError as err:
            if fileio.is_store_client_error(err):  # the store's failure, not the file's
                raise
            raise BadItem(f"unreadable file: {err}", self.relative(url)) from None
        try:
            checked = check_image(data, posixpath.basename(url))
        except BadImage as err:
            raise BadItem(str(err), self.relative(url)) from None
        self._validated_digests()[url] = hashlib.sha256(data).hexdigest()
        return checked

    def _validated_digests(self) -> dict:
        if not hasattr(self, "_digests"):
            self._digests = {}
        return self._digests

    def seal_frame_refs(self, row: dict | None) -> None:
        """Give each file frame reference of `row` the sha256 of the bytes validated for it
        (when this worker validated them), then forget every recorded digest."""
        digests = self._validated_digests()
        for ref in (row if isinstance(row, dict) else {}).get("frame_refs") or ():
            if ref.get("kind") == "file" and ref.get("url") in digests:
                ref["sha256"] = digests[ref["url"]]
        digests.clear()

    def seal_image_ref(self, ref: dict) -> dict:
        """A train example's image reference with the sha256 of the source bytes validated for
        it (when this worker validated them), as `seal_frame_refs` does for a row: `sha256`
        when the frame is the file itself, `source_sha256` when it is made from the file (a
        crop); then every recorded digest is forgotten."""
        digests = self._validated_digests()
        digest = digests.get(ref.get("url"))
        digests.clear()
        if digest is None:
            return ref
        return dict(ref, **{"sha256" if ref.get("kind") == "file" else "source_sha256": digest})

    def read_validated_source(self, ref: dict) -> bytes:
        """The bytes of the source file `ref["url"]` that a frame is made from, proven to be
        the bytes validated when its example was built (`source_sha256`, when sealed); raise
        SourceChanged otherwise."""
        data = self.read_source(ref["url"])
        expected = ref.get("source_sha256")
        if expected is not None and hashlib.sha256(data).hexdigest() != expected:
            raise SourceChanged("frame changed after validation: the bytes of the file it is "
                                "made from differ from those validated when it was built",
                                self.relative(ref["url"]))
        return data

    # ---- reading inside the source root ---------------------------------------------------

    def read_source(self, url: str, limit: int | None = None) -> bytes:
        """The bytes of a source file; raise BadItem when a local file resolves outside the
        source root (a symlink in the download, e.g. from an extracted archive): sources are
        untrusted, and a link must not pull other files of this machine into the output.
        A file over `max_source_file_bytes` (or the smaller `limit` a reader knows for its
        kind of file) is refused unread (fileio.FileTooLarge)."""
        cap = self.max_source_file_bytes if limit is None else min(limit,
                                                                    self.max_source_file_bytes)
        return fileio.read_bytes(self.inside_root(url), limit=cap)

    def inside_root(self, url: str) -> str:
        """`url` itself, once checked to resolve inside the source root; else raise BadItem
        naming the link and its target. Call it on every local source path before opening
        (a stream, a listing): `fs.open(self.inside_root(url))`, `self.list_source(folder)`.
        Raised in `read_unit` it is the unit's dead letter; in `build_sample` the item's."""
        target = self.outside_root(url)
        if target is not None:
            raise BadItem(f"link outside the sources root: {self.relative(url)} -> {target}",
                          self.relative(url))
        return url

    def require_inside_root(self, url: str, needed_for: str) -> str:
        """`url` itself when it resolves inside the source root; else raise SourceError (a
        clear build failure naming the link and its target) for a file that every item of
        the scenario needs, so that nothing at all could be built from it."""
        target = self.outside_root(url)
        if target is not None:
            raise SourceError(f"{self.name}: link outside the sources root: "
                              f"{self.relative(url)} -> {target} ({needed_for}; sources are "
                              f"untrusted, so a link out of the root is never followed)")
        return url

    def read_source_text(self, url: str, limit: int | None = None) -> str:
        """A source text file (metadata, CSV, labels) checked like `read_source`; a UTF-8 BOM
        is dropped."""
        return self.read_source(url, limit).decode("utf-8-sig")

    def read_source_yaml(self, url: str, needed_for: str):
        """A YAML file of the source folder (e.g. labels `release_labels` wrote there), checked
        like `read_source_text` and parsed safely; a SourceError naming it when it cannot be
        (every item needs it: the build's one configuration error)."""
        self.require_inside_root(url, needed_for)
        try:
            return yaml.safe_load(self.read_source_text(url))
        except (yaml.YAMLError, UnicodeDecodeError, BadItem) as err:
            raise SourceError(f"{self.name}: {self.relative(url)} is not readable YAML "
                              f"({needed_for}): {err}") from None

    def list_source(self, folder: str) -> list[str]:
        """`fileio.list_names` of a source folder, once checked to resolve inside the source
        root: a folder linked out of the root would otherwise list (and lead the scenario to
        open) another folder of this machine."""
        return fileio.list_names(self.inside_root(folder))

    def outside_root(self, url: str) -> str | None:
        """Where a local `url` really is, when that is outside the (resolved) source root;
        None when it is inside, or not a local path (object stores have no symlinks)."""
        if not fileio.is_local(url) or not fileio.is_local(self.root):
            return None
        real = _real_path(fileio.local_path(url))
        root = _real_dir(fileio.local_path(self.root))
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return None
        return real

    def new_row(self, key: str) -> dict:
        row = empty_row()
        row["key"] = key
        row["source"] = {"dataset": self.manifest["dataset"], "license": self.manifest["license"],
                         "files": []}
        return row

    def pick_prompt(self, key: str, pool: Iterable[str], purpose: str = "prompt") -> str:
        return self.rng(key, purpose).choice(list(pool))

    def pick_categories(self, key: str, answer: str, pool: Iterable[str]) -> list[str]:
        """The answer plus 3 distinct wrong categories drawn from `pool`, shuffled, formatted as
        upstream shows categories. Raise BadItem when the pool is too small."""
        names = sorted(set(pool) - {answer})
        formatted_answer = vocabulary.format_category(answer)
        names = [n for n in names if vocabulary.format_category(n) != formatted_answer]
        if len(names) < 3:
            raise BadItem(f"fewer than 3 distractor categories for {answer!r}")
        rng = self.rng(key, "categories")
        chosen = [answer] + rng.sample(names, 3)
        rng.shuffle(chosen)
        return [vocabulary.format_category(n) for n in chosen]

    def build_options(self, key: str, proactive: list[str]) -> list[str]:
        """The proactive option(s) plus one abstain option, shuffled once (App. A)."""
        rng = self.rng(key, "options")
        options = list(proactive) + [rng.choice(vocabulary.ABSTAIN_OPTIONS)]
        rng.shuffle(options)
        return options


@functools.lru_cache(maxsize=4096)
def _real_dir(folder: str) -> str:
    return os.path.realpath(folder)


def _real_path(path: str) -> str:
    """os.path.realpath of a file, resolving its folder once per folder (a build opens ~100k
    files in a few thousand folders): only the file itself is checked for being a link."""
    folder, name = os.path.split(path)
    if os.path.islink(path):
        return os.path.realpath(path)
    return os.path.join(_real_dir(folder), name)


def template_literal(text: str) -> str:
    """Text placed in an `image_template` verbatim: its braces doubled, since the runtime, the
    export and upstream fill templates with str.format (a source name holding "{1}" would
    otherwise be read as a slot, and writing its frames fail)."""
    return text.replace("{", "{{").replace("}", "}}")


def code_failure(err: BaseException, scenario_cls: type) -> str | None:
    """One line saying that `scenario_cls`'s own code raised `err` (core.errors.code_failure),
    or None when the error is not its code's."""
    return errors.code_failure(err, scenario_cls.__module__, f"scenario {scenario_cls.name}")


def wrong_return(scenario, method: str, value, expected: str, verb: str = "returned",
                 of: str = "") -> errors.ScenarioCodeError:
    """The one-line failure of a scenario whose `method` returned (or yielded) `value`, of the
    wrong type (core.errors.wrong_return): what a method returns is its code's contract, never
    a property of an input, so it is not a dead letter."""
    return errors.ScenarioCodeError(errors.wrong_return(f"scenario {scenario.name}", method,
                                                        value, expected, verb, of))


def registered() -> dict[str, type[Scenario]]:
    return dict(_REGISTRY)
