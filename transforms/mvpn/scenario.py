"""The MVP-N scenario: samples from the release's list pickles, each a chain of views of one
product ending on its informative view (the folder's docstring)."""
from __future__ import annotations

import functools
import io
import pickle
import pickletools
import posixpath
import re

from proactivebench_builder.transforms.api import (BadItem, ManifestError, ReleaseLabels, Scenario,
                                                   SourceError, fileio, format_category,
                                                   template_literal)
from proactivebench_builder.transforms.mvpn import miniature, release
from proactivebench_builder.transforms.mvpn.play import PLAY, ROTATE_REQUESTS

QUESTIONS = (
    "Identify the object in this image.",
    "Could you name the object in this image?",
    "What product is shown in this image?",
    "Which object is depicted here?",
    "What is the object in the picture?",
    "Can you tell me what this object is?",
    "What kind of product is this?",
    "Name the product shown in the image.",
    "Which item can be seen in this photo?",
    "What is this object?",
    "Tell me which product appears in this image.",
    "Recognise the object in this picture.",
    "What item is in front of the camera?",
    "Which product is this?",
    "Classify the object in this image.",
)


LIST_NAME = re.compile(r"^(?P<split>[a-z]+)_(?P<cls>.+)_(?P<count>[0-9]+)\.pkl$")


# A list file holds about a hundred samples (some kB); a pickle builds tens of bytes of objects
# per byte of its own (EMPTY_LIST, APPEND, ...), so one over this is refused unread.
MAX_LIST_BYTES = 4 << 20

# a view token that is a frame id: ASCII digits (int() takes any Unicode digit, and
# str.isdigit() is true of '²', which int() refuses)
VIEW_ID = re.compile(r"[0-9]{1,9}")

_MEMO_STORES = {"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only what pickle's own opcodes build (lists, strings, numbers...): every global
    lookup, which is how a pickle reaches a class or a callable to run, is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _check_memo(data: bytes) -> None:
    """Refuse a pickle that names a memo slot beyond the entries it has made so far: the C
    unpickler sizes its memo to the largest index named (a 9-byte pickle could claim 64 GB).
    Picklers number entries 0, 1, 2, ... (pickletools reads the opcodes, building nothing)."""
    made = 0
    for opcode, arg, position in pickletools.genops(data):
        if opcode.name not in _MEMO_STORES:
            continue
        if opcode.name != "MEMOIZE" and arg > made:
            raise BadItem(f"bad pickle: memo index {arg:,} at byte {position} after {made} "
                          "memo entries (a claim on memory, not data)")
        made += 1


def load_sample_list(data: bytes) -> list:
    """The list of a `*_100.pkl` file; BadItem when it is not a pickle of a plain list."""
    try:
        _check_memo(data)
        value = _PlainDataUnpickler(io.BytesIO(data)).load()
    except BadItem:
        raise
    except Exception as err:  # noqa: BLE001 - any failure means the same: not a plain list
        raise BadItem(f"bad pickle: {type(err).__name__}: {err}") from None
    if not isinstance(value, list):
        raise BadItem(f"bad pickle: top level is {type(value).__name__}, expected a list")
    return value


def sample_paths(element, min_views: int, max_views: int) -> list[str]:
    """The relative paths of one list element, checked to be 2-6 safe relative paths."""
    if not isinstance(element, list) or not all(isinstance(p, str) for p in element):
        raise BadItem("malformed sample: expected a list of path strings")
    if not min_views <= len(element) <= max_views:
        raise BadItem(f"malformed sample: {len(element)} views (expected {min_views}-{max_views})")
    paths = [p.strip().replace("\\", "/") for p in element]
    for path in paths:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or len(parts) != 3 or not all(parts):
            raise BadItem(f"malformed sample: path {path!r} is not <class>/<set>/<file>.png")
    if len(set(paths)) != len(paths):
        raise BadItem("malformed sample: a view is listed twice")
    return paths


def split_file_name(name: str) -> tuple[str, int]:
    """(view token, mark) of `<view>_<mark>.png`, read as MVP-N's loaders read it: the stem
    before the first "." split on "_", the last token is the mark."""
    stem = name.split(".")[0]
    token, sep, mark = stem.rpartition("_")
    if not name.lower().endswith(".png") or not sep or mark not in ("0", "1"):
        raise BadItem(f"malformed file name: {name!r} is not <view>_<0|1>.png")
    return token, int(mark)


def order_views(paths: list[str]) -> list[str]:
    """Uninformative views in list order, then the one informative view."""
    marks = [split_file_name(posixpath.basename(p))[1] for p in paths]
    informative = [p for p, m in zip(paths, marks) if m == 1]
    if not informative:
        raise BadItem("no informative view")
    if len(informative) > 1:
        raise BadItem(f"several informative views: {len(informative)}")
    return [p for p, m in zip(paths, marks) if m == 0] + informative


class MVPN(Scenario):
    name = "mvpn"
    config_name = "MVP-N"
    environment = PLAY  # how it plays (play.py)

    def __init__(self, seed: int, source_root: str):
        super().__init__(seed, source_root)
        self.classes = list(self.manifest["classes"])
        self.group_of = {c: sorted(g) for g in self.manifest["groups"] for c in g}

    # ---- class names --------------------------------------------------------------------------

    def release_names_url(self) -> str:
        return self.path(self.params["release_class_names_file"])

    @functools.cached_property
    def class_names(self) -> dict[str, str]:
        """class folder -> name: the release's names (`release_class_names_file` in the source
        folder, written by `run_pipeline.py release_labels`) when present, else the shipped
        placeholders (`class_names_file`). Read on first use, so a bad file is the build's one
        configuration error (from `list_units`, or the driver asking `placeholders`)."""
        url = self.release_names_url()
        if not fileio.exists(url):
            return self.placeholder_names()
        table = self.read_source_yaml(url, "the class names of every sample")
        if not isinstance(table, dict) or not all(
                isinstance(v, str) and v.strip() for v in table.values()):
            raise SourceError(f"mvpn: {self.relative(url)} must map each class folder to a name "
                              "(derive it with run_pipeline.py release_labels)")
        return {str(k): v for k, v in table.items()}

    def placeholder_names(self) -> dict[str, str]:
        """The shipped placeholders, from the table `params["class_names_file"]` names (read
        when used, not in __init__: `--set` overrides reach `self.params` after __init__)."""
        filename = self.params["class_names_file"]
        table = self.data_file(filename)
        if not isinstance(table, dict):
            raise ManifestError(f"mvpn: {filename} is not a mapping of class folder -> name")
        return {str(k): str(v) for k, v in table.items()}

    @classmethod
    def is_placeholder_answer(cls, answer) -> bool:
        return isinstance(answer, str) and release.is_placeholder(answer.strip().rstrip("."))

    def placeholders(self) -> list[str]:
        shown = [c for c in self.classes if release.is_placeholder(self.class_names.get(c, ""))]
        if not shown:
            return []
        return [f"{len(shown)} of {len(self.classes)} class names are placeholders (e.g. "
                f"{format_category(self.class_names[shown[0]])!r}), not the release's product "
                f"names: derive them with run_pipeline.py release_labels (they are only in the "
                f"release's MVP-N_preprocessed.jsonl)"]

    @classmethod
    def labels_from_release(cls, records, source=""):
        manifest = cls.read_manifest()
        params = manifest["parameters"]
        names, problems = release.names_from_records(records, list(manifest["classes"]))
        placeholders = {str(k): str(v) for k, v in cls.data_file(params["class_names_file"]).items()}
        data = release.class_names_file(names, placeholders, source)
        left = len(manifest["classes"]) - len(names)
        summary = [f"{len(names)} of {len(manifest['classes'])} class names from "
                   f"{len(records)} records" + (f" ({left} keep their placeholder)" if left else "")]
        return ReleaseLabels({params["release_class_names_file"]: data}, len(names), summary,
                             problems)

    @property
    def split(self) -> str:
        return str(self.params.get("split", "test"))

    # ---- listing and reading ------------------------------------------------------------------

    def list_units(self) -> list[str]:
        self._check_class_names()
        if self.params.get("frame_ids", "view") not in ("view", "position"):
            raise ManifestError(f"mvpn: parameters.frame_ids must be view or position, "
                                f"got {self.params['frame_ids']!r}")
        folder = self.require_inside_root(self.path("data", f"{self.split}_list"),
                                          "the folder of every sample list")
        names = [n for n in fileio.list_names(folder)
                 if n.startswith(f"{self.split}_") and n.endswith(".pkl")]
        if not names:
            raise SourceError(f"mvpn: no {self.split}_<class>_100.pkl lists under {folder} "
                              f"(expected the MVP-N data/ folder under the source root)")
        return [fileio.join(folder, n) for n in names]

    def _check_class_names(self) -> None:
        """A names file that misses a class or makes two answers look alike is a configuration
        error for the whole build, not a per-sample problem."""
        missing = [c for c in self.classes if c not in self.class_names]
        if missing:
            raise ManifestError(f"mvpn: {self.params['class_names_file']} has no name for "
                                f"classes {missing}")
        shown = [format_category(self.class_names[c]) for c in self.classes]
        if len(set(shown)) != len(shown):
            raise ManifestError(f"mvpn: {self.params['class_names_file']} gives two classes "
                                f"the same displayed name")

    def read_unit(self, unit: str):
        name = posixpath.basename(unit)
        match = LIST_NAME.match(name)
        list_class = match.group("cls") if match else None
        try:
            elements = load_sample_list(self.read_source(unit, limit=MAX_LIST_BYTES))
        except (BadItem, OSError) as err:  # OSError: over MAX_LIST_BYTES, a folder, a FIFO
            yield self.count("raw_items")
            yield self.dead_letter(unit, getattr(err, "reason", None)
                                   or f"unreadable list file: {err.strerror or err}")
            return
        stem = name[: -len(".pkl")]
        for index, element in enumerate(elements):
            yield self.count("raw_items")
            location = f"{unit}[{index}]"
            try:
                item = self._parse_element(element, list_class)
            except BadItem as err:
                yield self.dead_letter(location, err.reason)
                continue
            except Exception as err:  # noqa: BLE001 - one odd element, not the whole list
                yield self.dead_letter(location, f"malformed sample: {type(err).__name__}: {err}")
                continue
            item.update(list_file=self.relative(unit), index=index, list_stem=stem)
            yield self.candidate(f"MVP-N/{self.split}/{stem}/{index:04d}", item)

    def _parse_element(self, element, list_class) -> dict:
        """Class, ordered views and frame ids of one list element (no file access yet)."""
        p = self.params
        paths = sample_paths(element, int(p.get("min_views", 2)), int(p.get("max_views", 6)))
        chain = order_views(paths)
        classes = sorted({path.split("/")[0] for path in chain})
        if len(classes) > 1:
            raise BadItem(f"inconsistent sample: views of several classes {classes}")
        cls = classes[0]
        if cls not in self.class_names or cls not in self.classes:
            raise BadItem(f"unknown class: {cls!r}")
        if list_class is not None and cls != list_class:
            raise BadItem(f"inconsistent sample: class {cls!r} in the list of {list_class!r}")
        return {"class": cls, "views": chain, "frame_ids": self._frame_ids(chain)}

    def _frame_ids(self, chain: list[str]) -> list[int]:
        if self.params.get("frame_ids", "view") == "position":
            return list(range(len(chain)))
        folders = sorted({posixpath.dirname(path) for path in chain})
        if len(folders) > 1:
            raise BadItem(f"views from several set folders: {folders} "
                          f"(parameters.frame_ids: position handles them)")
        tokens = [split_file_name(posixpath.basename(path))[0] for path in chain]
        if not all(VIEW_ID.fullmatch(t) for t in tokens):
            raise BadItem(f"non-integer view token in {tokens} "
                          f"(parameters.frame_ids: position handles them)")
        ids = [int(t) for t in tokens]
        if len(set(ids)) != len(ids):
            raise BadItem(f"duplicate view id in {tokens}")
        return ids

    # ---- the sample ---------------------------------------------------------------------------

    def build_sample(self, key: str, item: dict) -> dict:
        urls = [self.path("data", self.split, view) for view in item["views"]]
        for url in urls:
            self.validate_file_frame(url)
        ids = item["frame_ids"]
        row = self.new_row(key)
        row.update(
            image_template=self._template(item),
            first_image=ids[0], num_images=len(ids), reference_image=ids[-1],
            valid_images=list(ids), frame_ids=list(ids),
            prompt=self.pick_prompt(key, QUESTIONS),
            options=self.build_options(key, [self.rng(key, "request").choice(ROTATE_REQUESTS)]),
            categories=self.confusable_categories(key, item["class"]),
            answer=format_category(self.class_names[item["class"]]),
        )
        row["source"]["files"] = ([f"{item['list_file']}[{item['index']}]"]
                                  + [self.relative(u) for u in urls])
        row["frame_refs"] = [{"kind": "file", "url": url} for url in urls]
        return row

    def _template(self, item: dict) -> str:
        """`<prefix>/<class>/<set>/{image}_{informative}.png` (view ids) or one folder per sample
        (positions); the slots are what the upstream MVP-N environment fills."""
        prefix = str(self.params.get("template_prefix", "MVP-N"))
        if self.params.get("frame_ids", "view") == "view":
            folder = posixpath.dirname(item["views"][0])
        else:
            folder = f"{item['class']}/{item['list_stem']}_{item['index']:04d}"
        return template_literal(f"{prefix}/{folder}/") + "{image}_{informative}.png"

    def confusable_categories(self, key: str, cls: str) -> list[str]:
        """The answer, 3 wrong classes from its confusion group (topped up from the other
        classes when the group is smaller than 4), shuffled, as display strings."""
        rng = self.rng(key, "categories")
        group = self.group_of.get(cls, [cls])
        mates = [c for c in group if c != cls]
        if len(mates) >= 3:
            wrong = rng.sample(mates, 3)
        else:
            others = [c for c in self.classes if c not in group]
            wrong = mates + rng.sample(others, 3 - len(mates))
        chosen = [cls] + wrong
        rng.shuffle(chosen)
        return [format_category(self.class_names[c]) for c in chosen]

    # ---- the miniature source -----------------------------------------------------------------

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        miniature.write_miniature(root, cls.read_manifest()["parameters"], seed)
