"""MVP-N (`MVP-N`): an uninformative view of a retail product; the model should ask to rotate the
object or move the camera.

Raw source: the MVP-N `data/` folder (`data/<split>/<class>/<set>/<view>_<mark>.png`, mark 1 =
informative view) and its per-class lists of multi-view test samples,
`data/<split>_list/<split>_<class>_100.pkl` (a pickled list; each element is a list of 2-6 paths
`<class>/<set>/<file>.png` relative to `data/<split>/`). One raw item = one element of a list; it
becomes one sample whose frame chain is its uninformative views, in list order, followed by its
single informative view (App. A.3: "a chain of uninformative views that ends in the informative
one"). PNG bytes pass through unchanged.

How the upstream environment reads a sample (docs/records.md) and what
that asks of a record: at turn t it shows `image_id` = `first_image` (t = 0) or
`valid_images[t]` (t >= 1), filling `image_template` with `{image}` = the id zero-padded to 4
digits and `{informative}` = 1 only when t + 1 == `num_images` (and always in reference mode,
with `reference_image`). So `valid_images` is the whole chain, `first_image` its first id,
`reference_image` its last, `num_images` its length; `frame_path` sets the flag by position (the
last id of `valid_images` -> 1) and the exported files sit exactly where those reads land. Since
the chain ends in the only mark-1 view, the flag always equals the raw file's mark.

Choices made for the reference's open points:
- [?] file-name prefix before `_<mark>`: read the way MVP-N's loaders read it (stem before the
  first ".", last "_" token = mark); the rest of the stem is the view token. `frame_ids: view`
  (default) uses that token as the `{image}` id, so the export mirrors the raw set folders and
  names; `frame_ids: position` numbers the chain 0..n-1 instead, for names without an integer
  token (both in the manifest).
- [?] informative-view placement inside a list element is not documented; the informative view
  is moved to the end and the uninformative ones keep their list order (no random reordering).
  An element with no informative view, or with several, has no single reference frame: dead
  letter.
- [?] human-readable class names: unknown; `source_manifests/mvpn_class_names.yaml` (named by
  the manifest's `class_names_file`) holds placeholders "product <folder>" to be replaced.
- [I] wrong categories: App. A.3 draws them among similar categories; we take the answer's MVP-N
  confusion group (manifest `groups`), 3 group mates drawn by the seeded rng when the group has
  more, and when it has fewer than 4 classes the rest is drawn (seeded, per key) from the classes
  outside the group.
- [I] the 11 rotate phrasings are ours (the paper's pool is not released); each holds exactly one
  upstream ROTATE keyword and no other action keyword, which the tests check.

The list files are pickles, and unpickling runs whatever callables a pickle names; these files come
from a download, so they are read with an Unpickler that refuses every global: no class and no
function can be looked up, so nothing can be called, and only what pickle's own opcodes build
(lists, strings, numbers, ...) comes out; the result must then be a list of lists of strings. A
file that needs anything more is a dead letter, never executed.
"""
from __future__ import annotations

import io
import pickle
import posixpath
import random
import re

from PIL import Image, ImageDraw

from proactivebench_builder.core import fileio
from proactivebench_builder.core.manifests import ManifestError
from proactivebench_builder.transforms.base import BadItem, Scenario, SourceError
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.vocabulary import format_category

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

# Each holds exactly one ROTATE keyword (rotate / view / angle / orientation / different) and no
# other action keyword; mind substrings ("up" in "cup", "angle" in "rectangle", "rotation" holds
# no keyword at all).
ROTATE_REQUESTS = (
    "Rotate the object.",
    "Could you rotate the object?",
    "Please rotate the product so I can see it better.",
    "Show me another view of the object.",
    "Give me a view of the object from another perspective.",
    "Change the camera angle of the object.",
    "Move the camera to a new angle.",
    "Change the orientation of the object.",
    "Show me the object from a different side.",
    "Let me see the product from a different position.",
    "Turn the object to a new orientation.",
)

LIST_NAME = re.compile(r"^(?P<split>[a-z]+)_(?P<cls>.+)_(?P<count>[0-9]+)\.pkl$")


# ---- reading the list files safely -------------------------------------------------------------

class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only what pickle's own opcodes build (lists, strings, numbers...): every global
    lookup, which is how a pickle reaches a class or a callable to run, is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def load_sample_list(data: bytes) -> list:
    """The list of a `*_100.pkl` file; BadItem when it is not a pickle of a plain list."""
    try:
        value = _PlainDataUnpickler(io.BytesIO(data)).load()
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


def template_literal(text: str) -> str:
    """Text placed in a str.format template verbatim (braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


class MVPN(Scenario):
    name = "mvpn"
    config_name = "MVP-N"
    # How upstream's environment plays MVP-N (runtime.behaviours; texts verbatim from upstream).
    environment = Play(
        actions={"ROTATE": ("rotate", "view", "angle", "orientation", "different")},
        behaviour="valid_images_chain", last_turn="category",
        hint="Hint: rotating the object could provide a more informative view.",
        short_name="MVP-N", open_ended_suggestions=("Rotate the object", "Move the camera"),
        open_ended_category=False, prediction_threshold=2, keyword_matching="substring",
        suggestions=ROTATE_REQUESTS)

    def __init__(self, seed: int, source_root: str):
        super().__init__(seed, source_root)
        self.classes = list(self.manifest["classes"])
        self.group_of = {c: sorted(g) for g in self.manifest["groups"] for c in g}
        self.class_names = {str(k): str(v) for k, v in
                            self.data_file(self.params["class_names_file"]).items()}

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
            elements = load_sample_list(self.read_source(unit))
        except BadItem as err:
            yield self.count("raw_items")
            yield self.dead_letter(unit, err.reason)
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
        if not all(t.isdigit() for t in tokens):
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

    def frame_path(self, row: dict, frame_id: int) -> str:
        """Informative = 1 for the last id of `valid_images` (the last turn and the reference
        image upstream), 0 before it."""
        informative = int(frame_id == row["valid_images"][-1])
        return row["image_template"].format(image=f"{frame_id:04d}", informative=informative)

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
        """`data/{train,valid,test}/<class>/<set>/<view:04d>_<mark>.png` (32x32 RGB PNG, one
        informative view per set, not always the last) and `data/{valid,test}_list/` pickles of
        2-4 paths per sample, the informative view listed at varying positions."""
        params = cls.read_manifest()["parameters"]
        for split in ("train", "valid", "test"):
            for c_index, class_folder in enumerate(params["miniature_classes"]):
                rng = random.Random(f"{seed}/mvpn/{split}/{class_folder}")
                sets = _write_miniature_sets(root, split, class_folder, c_index, rng, params)
                if split != "train":
                    count = int(params["miniature_samples_per_list"])
                    samples = _miniature_samples(sets, rng, count)
                    fileio.write_bytes_atomic(
                        fileio.join(root, "data", f"{split}_list",
                                    f"{split}_{class_folder}_100.pkl"),
                        pickle.dumps(samples, protocol=3))


def _write_miniature_sets(root, split, class_folder, c_index, rng, params) -> list[list[str]]:
    """Writes the set folders of one class; returns each set's relative paths."""
    size = int(params["miniature_image_size"])
    n_views = int(params["miniature_views_per_set"])
    sets = []
    for s in range(int(params["miniature_sets_per_class"])):
        informative_at = rng.randrange(n_views)
        paths = []
        for v in range(n_views):
            mark = int(v == informative_at)
            rel = f"{class_folder}/{s:04d}/{v:04d}_{mark}.png"
            data = _miniature_view(c_index, v, mark, size)
            fileio.write_bytes_atomic(fileio.join(root, "data", split, rel), data)
            paths.append(rel)
        sets.append(paths)
    return sets


def _miniature_samples(sets, rng, count) -> list[list[str]]:
    """Samples of 2-4 views of one set, each holding its set's single informative view."""
    samples = []
    for k in range(count):
        views = sets[k % len(sets)]
        informative = [p for p in views if p.endswith("_1.png")][0]
        others = [p for p in views if p != informative]
        chosen = rng.sample(others, 1 + k % len(others)) + [informative]
        rng.shuffle(chosen)
        samples.append(chosen)
    return samples


def _miniature_view(c_index: int, view: int, mark: int, size: int) -> bytes:
    """A box silhouette in the class colour, seen from a slightly different side per view; the
    informative view adds a label pattern unique to the class (so only it tells classes apart)."""
    colour = (60 + 40 * (c_index % 4), 90, 200 - 30 * (c_index % 5))
    image = Image.new("RGB", (size, size), (235, 235, 235))
    draw = ImageDraw.Draw(image)
    inset = 4 + view % 3
    draw.rectangle((inset, 6, size - 1 - inset, size - 6), fill=(110, 110, 110))
    if mark:
        draw.rectangle((8, 10, size - 9, size - 10), fill=colour)
        for stripe in range(c_index % 5 + 1):
            y = 12 + 3 * stripe
            draw.line((10, y, size - 11, y), fill=(255, 255, 255), width=1)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
