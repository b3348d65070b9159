"""The ChangeIt scenario: per annotated video, an object question and an action question whose
frames are seconds of the video, stepping toward its informative second (the folder's
docstring)."""
from __future__ import annotations

import math
import posixpath
import re

from proactivebench_builder.transforms.api import (BadItem, DeadLetter, Scenario, SourceError,
                                                   fileio, format_category, template_literal)
from proactivebench_builder.transforms.changeit import miniature
from proactivebench_builder.transforms.changeit.csvs import (
    ANNOTATION_SUFFIX, parse_annotation, parse_categories_csv, parse_labels_csv, parse_video_list,
    read_text, video_id_of)
from proactivebench_builder.transforms.changeit.play import (
    ACTION, OBJECT, PLAY, REWIND_OPTION, WAIT_OPTIONS)
from proactivebench_builder.transforms.changeit.video import VideoReader, encode_jpeg

QUESTION_TYPES = (ACTION, OBJECT)  # sorted, so items come out in one fixed order

# categories.csv holds 44 rows and labels.csv 4: a table over this is not theirs
MAX_TABLE_BYTES = 1 << 20


OBJECT_QUESTIONS = (
    "Describe the object in the video in terms of its category.",
    "What is the main object in the video?",
    "Which object is shown in the video?",
    "What object is featured in this video?",
    "What is the category of the main object in the video?",
    "Identify the main object in the video.",
    "What object is being handled in the video?",
    "Which object does this video focus on?",
    "What is the object of interest in this video?",
    "Name the main object appearing in the video.",
    "What kind of object is in the video?",
    "Classify the main object shown in the video.",
    "What object is the person working with in the video?",
    "Tell me the category of the object in the video.",
    "What is the key object in this video?",
)


ACTION_QUESTIONS = (
    "What action is being performed in the video?",
    "Which action is shown in the video?",
    "What is the person doing in the video?",
    "Describe the action in the video in terms of its category.",
    "What activity takes place in this video?",
    "Identify the action performed in the video.",
    "What kind of action does this video show?",
    "Classify the action carried out in the video.",
    "Name the action happening in the video.",
    "What task is being carried out in the video?",
    "Which activity is depicted in this video?",
)


QUESTIONS = {OBJECT: OBJECT_QUESTIONS, ACTION: ACTION_QUESTIONS}


class Excluded(Exception):
    """A documented selection rule leaves this (video, question type) out."""

    def __init__(self, rule: str):
        super().__init__(rule)
        self.rule = rule


def plan_sequence(labels: list[int], informative, target_frames: int, max_frames: int,
                  require_uninformative_first: bool) -> dict:
    """The navigation of one sample (see the module docstring); raise Excluded by rule."""
    n = len(labels)
    informative_seconds = [s for s, label in enumerate(labels) if label in informative]
    if not informative_seconds:
        raise Excluded("no_informative_frame")
    if require_uninformative_first and informative_seconds[0] == 0:
        raise Excluded("informative_first_frame")
    largest = max(1, math.ceil(n / target_frames))
    smallest = max(1, math.ceil(n / max_frames))
    for step in range(largest, smallest - 1, -1):
        reachable = [s for s in informative_seconds if s % step == 0]
        frame_ids = list(range(0, n, step))
        if reachable and len(frame_ids) >= 2:
            return {"num_images": n, "step_size": step, "first_image": 0,
                    "reference_image": reachable[0], "frame_ids": frame_ids,
                    "max_steps": len(frame_ids)}
    raise Excluded("informative_frame_unreachable")


class ChangeIt(Scenario):
    name = "changeit"
    config_name = "ChangeIt"
    # How upstream's environment plays ChangeIt (runtime.behaviours; texts from upstream).
    environment = PLAY  # how it plays (play.py)

    def __init__(self, seed: int, source_root: str):
        super().__init__(seed, source_root)
        self._reader: VideoReader | None = None

    # -- listing and reading --

    def list_units(self) -> list[str]:
        """One unit per category folder of `annotations/` (only test videos are annotated).
        The two tables every category needs are checked here: a broken one is one line naming
        it (in `read_unit` it would be a dead letter per unit, naming none)."""
        for name in ("categories.csv", "labels.csv"):
            if not fileio.exists(self.path(name)):
                raise SourceError(f"changeit: no {name} under {self.root} (expected a clone of "
                                  f"github.com/soCzech/ChangeIt)")
            self.require_inside_root(self.path(name), "a table every category needs")
        self.tables()
        folder = self.require_inside_root(self.path("annotations"), "the annotations folder")
        units = [fileio.join(folder, n) for n in fileio.list_names(folder)
                 if not n.startswith(".") and fileio.is_dir(fileio.join(folder, n))]
        if not units:
            raise SourceError(f"changeit: no category folders under {folder}")
        return units

    def read_unit(self, unit: str):
        category = posixpath.basename(unit)
        # checked again here (BadItem: the unit's dead letter), as every file of the unit
        actions, labels = self.tables()
        listed, list_problem = self._listed_ids(category)
        problem = self._category_problem(category, actions) or list_problem
        for name in self.list_source(unit):
            if name.startswith("."):
                continue
            path = fileio.join(unit, name)
            if not name.endswith(ANNOTATION_SUFFIX):
                yield self.count("raw_items")
                yield self.dead_letter(path, f"unexpected file in annotations: {name!r}")
                continue
            video_id = video_id_of(name)
            keys = {qt: f"ChangeIt/{category}/{video_id}/{qt}" for qt in QUESTION_TYPES}
            yield self.count("raw_items", len(QUESTION_TYPES))
            try:
                if problem:
                    raise BadItem(problem)
                if video_id not in listed:
                    raise BadItem(f"inconsistent source: id {video_id!r} is not listed in "
                                  f"videos/{category}.csv")
                per_second = parse_annotation(read_text(self.read_source(path)), labels)
            except (BadItem, OSError) as err:  # one annotation file, not the whole category
                reason = getattr(err, "reason", None) or f"unreadable annotation: {err}"
                for qt in QUESTION_TYPES:
                    yield DeadLetter(self.name, self.relative(path), reason, keys[qt])
                continue
            for qt in QUESTION_TYPES:
                yield from self._question_item(keys[qt], qt, category, video_id, path,
                                               per_second, actions)

    def tables(self) -> tuple[dict[str, str], dict[int, str]]:
        """(categories.csv's DIR_NAME -> ACTION_NAME, labels.csv's LABEL_ID -> MEANING); raise
        SourceError naming the table that cannot be read."""
        texts = {}
        for name in ("categories.csv", "labels.csv"):
            try:
                texts[name] = self.read_source_text(self.path(name), limit=MAX_TABLE_BYTES)
            except (OSError, UnicodeDecodeError) as err:
                if fileio.is_store_client_error(err):  # the store failed, not this input
                    raise
                reason = getattr(err, "strerror", None) or err
                raise SourceError(f"changeit: unreadable {name}: {reason}") from None
        return (parse_categories_csv(texts["categories.csv"]),
                parse_labels_csv(texts["labels.csv"]))

    def _listed_ids(self, category: str) -> tuple[set, str]:
        url = self.path("videos", f"{category}.csv")
        try:
            return set(parse_video_list(self.read_source_text(url))), ""
        except FileNotFoundError:
            return set(), f"inconsistent source: no id list videos/{category}.csv"
        except BadItem as err:  # a link out: every video of the category is a dead letter
            return set(), err.reason
        except (OSError, UnicodeDecodeError) as err:  # a folder, a FIFO, not UTF-8, too large
            if fileio.is_store_client_error(err):  # the store failed, not this input
                raise
            return set(), (f"inconsistent source: unreadable id list videos/{category}.csv: "
                           f"{getattr(err, 'strerror', None) or err}")

    def _category_problem(self, category: str, actions: dict) -> str:
        if category not in actions:
            return f"unknown category: {category!r} is not in categories.csv"
        if category not in self.manifest["objects"]:
            return f"unknown category: {category!r} has no object name in the manifest"
        return ""

    def _question_item(self, key, question_type, category, video_id, path, per_second, actions):
        p = self.params
        informative = set(p["object_labels"] if question_type == OBJECT else p["action_labels"])
        try:
            plan = plan_sequence(per_second, informative, int(p["target_frames"]),
                                 int(p["max_frames"]), bool(p["require_uninformative_first_frame"]))
        except Excluded as rule:
            yield self.count(f"excluded:{rule.rule}")
            return
        if question_type == OBJECT:
            answer = self.manifest["objects"][category]
            pool = [self.manifest["objects"][c] for c in sorted(actions) if c in self.manifest["objects"]]
        else:
            answer, pool = actions[category], [actions[c] for c in sorted(actions)]
        yield self.candidate(key, dict(plan, category=category, video_id=video_id,
                                       question_type=question_type, answer=answer, pool=pool,
                                       annotation=self.relative(path)))

    # -- building a sample --

    def build_sample(self, key: str, item: dict) -> dict:
        refs, media, extension = self._frame_refs(item)
        qt = item["question_type"]
        row = self.new_row(key)
        row.update(
            image_template=(template_literal(f"ChangeIt/{item['category']}/{item['video_id']}/")
                            + "{image}" + template_literal(f".{extension}")),
            first_image=item["first_image"], num_images=item["num_images"],
            reference_image=item["reference_image"], step_size=item["step_size"],
            max_steps=item["max_steps"], question_type=qt,
            prompt=self.pick_prompt(key, QUESTIONS[qt]),
            options=self.build_options(key, [REWIND_OPTION, WAIT_OPTIONS[qt]]),
            categories=self.pick_categories(key, item["answer"], item["pool"]),
            answer=format_category(item["answer"]),
            frame_ids=list(item["frame_ids"]),
        )
        row["source"]["files"] = [item["annotation"], media]
        row["frame_refs"] = refs
        return row

    def _frame_refs(self, item: dict) -> tuple[list[dict], str, str]:
        """References to every reachable frame, after checking that each can be produced:
        pre-extracted frames are decoded cheaply, a video must open and be long enough."""
        category, video_id = item["category"], item["video_id"]
        frames = self.path(self.params["frames_dir"], category, video_id)
        if fileio.is_dir(frames):
            extension = self.params["frame_extension"]
            refs = []
            for k in item["frame_ids"]:
                url = fileio.join(frames, f"{k}.{extension}")
                self._validate_frame_file(url)
                refs.append({"kind": "file", "url": url})
            return refs, self.relative(frames), extension
        video = self._find_video(category, video_id)
        self._check_video(video, item)
        refs = [{"kind": "video", "url": video, "second": k} for k in item["frame_ids"]]
        return refs, self.relative(video), "jpg"

    def _validate_frame_file(self, url: str) -> None:
        """The shared check, with object addresses ("<... at 0x7f...>") that PIL puts in some
        messages removed, so a dead letter's reason is the same on every run."""
        try:
            self.validate_file_frame(url)
        except BadItem as err:
            raise BadItem(re.sub(r" at 0x[0-9a-fA-F]+", "", err.reason), err.path) from None

    def _find_video(self, category: str, video_id: str) -> str:
        folder = self.path(self.params["video_dir"], category)
        for extension in self.params["video_extensions"]:
            url = fileio.join(folder, f"{video_id}.{extension}")
            if fileio.exists(url):
                return url
        tried = "|".join(self.params["video_extensions"])
        raise BadItem(f"missing video: no {self.params['frames_dir']}/{category}/{video_id}/ "
                      f"and no {self.params['video_dir']}/{category}/{video_id}.{{{tried}}}",
                      f"{self.params['video_dir']}/{category}/{video_id}")

    def _check_video(self, url: str, item: dict) -> None:
        try:
            reader = VideoReader(self.inside_root(url))  # checked before OpenCV opens it
        except OSError as err:  # a FIFO, a device, a folder, unreadable: never decoded
            if fileio.is_store_client_error(err):  # the store failed, not this input
                raise
            raise BadItem(f"unreadable video: {err.strerror or err}", self.relative(url)) \
                from None
        try:
            self._check_opened_video(reader, item)
        finally:
            reader.close()  # the shard writer opens it again; a remote copy is not kept around

    def _check_opened_video(self, reader: VideoReader, item: dict) -> None:
        where = self.relative(reader.url)
        if not reader.is_open():
            raise BadItem("unreadable video: OpenCV/FFmpeg cannot open it", where)
        n = item["num_images"]
        duration = reader.duration_s()
        shortest = n - 1 - float(self.params["duration_tolerance_s"])
        if duration is not None and duration < shortest:
            raise BadItem(f"video too short: {duration:.1f} s for an annotation of {n} s", where)
        offset = float(self.params["seek_offset_s"])
        for k in (item["frame_ids"][0], item["frame_ids"][-1]):
            if reader.frame_at(k + offset, self._tail_s()) is None:
                raise BadItem(f"video too short or undecodable: no frame at {k} s "
                              f"(annotation of {n} s)", where)

    def _tail_s(self) -> float:
        return float(self.params["duration_tolerance_s"])

    # -- producing frames --

    def _open(self, url: str) -> VideoReader:
        """The reader of `url`, reused while consecutive frames come from the same video."""
        if self._reader is None or self._reader.url != url:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            # a video is a source file like any other
            self._reader = VideoReader(self.inside_root(url))
        return self._reader

    def load_frame(self, ref: dict) -> bytes:
        if ref["kind"] != "video":
            return super().load_frame(ref)
        reader = self._open(ref["url"])
        frame = reader.frame_at(ref["second"] + float(self.params["seek_offset_s"]), self._tail_s())
        if frame is None:
            raise ValueError(f"changeit: no frame at {ref['second']} s in {ref['url']}")
        return encode_jpeg(frame, int(self.params["jpeg_quality"]))

    # -- the miniature --

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        miniature.write_miniature(root, cls.read_manifest(), seed)
