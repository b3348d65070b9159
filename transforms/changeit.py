"""ChangeIt (`ChangeIt`): a web video of a state-changing action; the frame shown first does not
yet show what the question asks about, and the model should wait (or rewind) to see it.

Raw source: the ChangeIt repository (`categories.csv`, `labels.csv`, `videos/<category>.csv`,
`annotations/<category>/<id>.fps1.csv`, one label per second of video) plus, per annotated video,
its frames at 1 fps: pre-extracted (`frames/<category>/<id>/<second>.jpg`, unpadded) or the video
itself (`downloads/<category>/<id>.<ext>`, the youtube-dl layout the ChangeIt README suggests),
decoded with OpenCV's FFmpeg backend by seeking to each second and re-encoding as JPEG. When
both exist the pre-extracted frames win (no decoding, original bytes passed through).

One raw item is one (annotated video, question type) pair, and each video gives up to two
samples, `ChangeIt/<category>/<id>/object` and `.../action` (PB's ids reach 1,116 for 667
annotated videos, so PB builds more than one sample per video; `question_type` says which).
A bad annotation file therefore yields one dead letter per question type (each with its key).

Frames and navigation (upstream `ChangeItEnvironment`: `{image}` unpadded, REWIND/WAIT move by
`step_size`, no wrap-around, rewind hidden while `image_id - step_size < 0`, the "Wait for the"
option hidden when `image_id + step_size >= num_images`, the episode ends after `max_steps`
model calls):
- image id k is the 1 fps frame of second k (annotation row k), so `num_images` = the number of
  annotated seconds and the image file is `ChangeIt/<category>/<id>/<k>.jpg`. [our reading of the release]
- `first_image` = 0, the first video frame (paper: "the first video frame ... is shown first").
- `step_size` = ceil(num_images / target_frames) (target 20: the paper's "~20 images per sample"),
  shrunk one at a time until some informative second is a multiple of it (so the oracle can land
  on it), but never below ceil(num_images / max_frames); `frame_ids` are the reachable seconds
  0, step, 2*step, ... < num_images (the only frames the environment can show). [I]
- `reference_image` = the first reachable informative second: what the oracle reaches with the
  fewest waits. `max_steps` = len(frame_ids): enough model calls to wait through the whole video
  and still answer (upstream's other video scenario caps at `num_images` with step 1). [I]
- informative labels: for the object question the states and the action (1, 2, 3: the object is
  in view), for the action question the action (2). Label 0 (background / no annotation) is
  never informative. Both are manifest parameters. [I]
- rule exclusions (counted, documented, not dead letters): no informative second at all
  (`excluded:no_informative_frame`, e.g. an action question on a video annotated without the
  action), the first frame already informative (`excluded:informative_first_frame`; the sample
  would need no proactive step; switchable), or no step size within the frame cap reaches an
  informative second (`excluded:informative_frame_unreachable`). On the 48 real annotations of
  apple/avocado/eggs these rules keep 75 of 96 pairs, i.e. ~1,040 of 1,334 on all 667 videos,
  close to PB's 1,117 ids.

Question (paper §3.2, App. A.6, Fig. 17; the exact pools are not released):
- object questions (15) and action questions (11), written here after the paper's two examples;
- options: "Rewind the video." plus "Wait for the object to appear." (Fig. 17's wording) or, for
  the action question, "Wait for the action to happen." (PB's comment "either action or object"
  implies a second wording; ours is an [I]); one abstain option from the shared pool;
- categories: for the object question the object names (manifest `objects`, [?]: the repository
  has only ACTION_NAME; chosen as the noun each action acts on), for the action question
  ACTION_NAME from the source's categories.csv; 3 distractors drawn from the other categories.
  The paper's "69 categories" does not reconcile with 44 actions plus their objects [?].

Decoding: the frame of second k is the first frame at or after k s (+ `seek_offset_s`), fetched
by a fresh seek each time, so the same second gives the same bytes in every row and shard; it is
re-encoded as JPEG (`jpeg_quality`). ffmpeg's fps=1 filter, which made the annotations, rounds to
the nearest second, so the last annotated second may lie just past the last frame: within
`duration_tolerance_s` of the end the last frame stands in. A video must open, last at least
(annotated seconds - 1 - tolerance) s, and decode its first and last reachable frames. Videos
anywhere fsspec reaches are copied to a temporary file first (OpenCV opens only local files).
`valid_images` stays null: upstream's ChangeIt environment does not read it (it uses
range(num_images)). Shared object names (eggs for eggs/whisk_eggs, milk for milk/boil_milk)
appear once in the distractor pool.

Dead letters: an annotation with gaps, repeats, non-integer or unknown labels, or no rows; an id
missing from its `videos/<category>.csv`; a category unknown to categories.csv or to the manifest;
no frames and no video; a missing or corrupt frame file; a video that does not open or is shorter
than its annotation.
"""
from __future__ import annotations

import csv
import io
import math
import os
import posixpath
import random
import re
import sys
import tempfile

from proactivebench_builder.core import fileio, results
from proactivebench_builder.transforms.base import BadItem, Scenario, SourceError
from proactivebench_builder.core.play import Play
from proactivebench_builder.core.vocabulary import format_category

OBJECT, ACTION = "object", "action"
QUESTION_TYPES = (ACTION, OBJECT)  # sorted, so items come out in one fixed order

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

# Each holds exactly one upstream action keyword ("rewind the video." / "wait for the").
REWIND_OPTION = "Rewind the video."
WAIT_OPTIONS = {OBJECT: "Wait for the object to appear.", ACTION: "Wait for the action to happen."}

ANNOTATION_SUFFIX = ".fps1.csv"
CATEGORIES_HEADER = ["DIR_NAME", "ACTION_NAME", "CENTERING_PARAM"]
LABELS_HEADER = ["LABEL_ID", "MEANING"]
# labels.csv of the repository, as written there (the miniature copies it byte for byte).
LABELS_CSV = ('LABEL_ID,MEANING\n0,"background/noannotation"\n1,"state1"\n2,"action"\n'
              '3,"state2"\n')


# ---- reading the repository files -----------------------------------------------------------

def parse_categories_csv(text: str) -> dict[str, str]:
    """DIR_NAME -> ACTION_NAME from categories.csv (quoted action names, header first)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if not rows or [c.strip() for c in rows[0]] != CATEGORIES_HEADER:
        raise SourceError(f"changeit: categories.csv does not start with {CATEGORIES_HEADER}")
    table = {}
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != 3 or not row[0].strip() or not row[1].strip():
            raise SourceError(f"changeit: categories.csv line {number} is malformed: {row}")
        table[row[0].strip()] = row[1].strip()
    return table


def parse_labels_csv(text: str) -> dict[int, str]:
    """LABEL_ID -> MEANING from labels.csv."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if not rows or [c.strip() for c in rows[0]] != LABELS_HEADER:
        raise SourceError(f"changeit: labels.csv does not start with {LABELS_HEADER}")
    try:
        return {int(r[0]): r[1] for r in rows[1:]}
    except (ValueError, IndexError) as err:
        raise SourceError(f"changeit: labels.csv is malformed: {err}") from None


def parse_video_list(text: str) -> list[str]:
    """The ids of `videos/<category>.csv` (`<id>,<score>`, no header, no final newline). Only
    the text before the first comma is the id: ids contain '-' and '_' and are never split."""
    return [line.split(",", 1)[0].strip() for line in text.splitlines() if line.strip()]


def video_id_of(filename: str) -> str:
    """The YouTube id of an annotation file: the text before the first '.' (as the authors'
    loader does; an id may start with '-')."""
    return filename.split(".", 1)[0]


def parse_annotation(text: str, known_labels) -> list[int]:
    """The label of each second, from `<second>,<label>` lines; raise BadItem unless the seconds
    run 0, 1, 2, ... without gaps or repeats and every label is a known integer id."""
    labels = []
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise BadItem("malformed annotation: no rows")
    for number, line in enumerate(lines, start=1):
        if not line.strip():  # a blank line (an editor's, a trailing one) holds no second
            continue
        fields = line.split(",")
        if len(fields) != 2:
            raise BadItem(f"malformed annotation: line {number} has {len(fields)} fields: {line!r}")
        try:
            second, label = int(fields[0]), int(fields[1])
        except ValueError:
            raise BadItem(f"malformed annotation: non-integer value on line {number}: "
                          f"{line!r}") from None
        if second != len(labels):
            raise BadItem(f"malformed annotation: seconds not consecutive from 0 (line {number} "
                          f"has second {second}, expected {len(labels)})")
        if label not in known_labels:
            raise BadItem(f"malformed annotation: unknown label {label} on line {number}")
        labels.append(label)
    return labels


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")  # a BOM (spreadsheet exports) is not part of the text
    except UnicodeDecodeError as err:
        raise BadItem(f"malformed annotation: not UTF-8 text ({err})") from None


# ---- the frame sequence -----------------------------------------------------------------------

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


# ---- decoding videos ----------------------------------------------------------------------------

def local_copy(url: str) -> tuple[str, bool]:
    """A local path OpenCV can open: the file itself, or a temporary copy of a remote one
    (returns the path and whether it is a temporary file to remove)."""
    fs, path = fileio.filesystem(url)
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        return path, False
    handle, tmp = tempfile.mkstemp(suffix=posixpath.splitext(path)[1])
    os.close(handle)
    fs.get(path, tmp)
    return tmp, True


class VideoReader:
    """One opened video; frames are fetched by seeking to a time, so the frame of a second never
    depends on what was read before it (the same second gives the same bytes in every row)."""

    def __init__(self, url: str):
        import cv2

        self.url = url
        self.path, self.temporary = local_copy(url)
        self.capture = cv2.VideoCapture(self.path)

    def is_open(self) -> bool:
        return self.capture.isOpened()

    def duration_s(self) -> float | None:
        """Container-reported duration, or None when the container does not say (e.g. some
        webm files report no frame count)."""
        import cv2

        fps = self.capture.get(cv2.CAP_PROP_FPS)
        count = self.capture.get(cv2.CAP_PROP_FRAME_COUNT)
        return count / fps if fps > 0 and count > 0 else None

    def frame_at(self, seconds: float, tail_s: float = 0.0):
        """The BGR frame shown at `seconds`, or None past the end or on a decoding error.

        ffmpeg's fps=1 filter (how the annotations were made) rounds to the nearest second, so
        the last annotated second can lie up to half a second past the last frame; a request
        within `tail_s` of the end gets the video's last decodable frame instead."""
        import cv2

        frame = self._read_at(seconds)
        duration = self.duration_s()
        if frame is None and duration is not None and seconds < duration + tail_s:
            fps = self.capture.get(cv2.CAP_PROP_FPS)
            for back in range(1, int(math.ceil(fps)) + 1):
                frame = self._read_at(max(0.0, duration - back / fps))
                if frame is not None:
                    break
        return frame

    def _read_at(self, seconds: float):
        import cv2

        self.capture.set(cv2.CAP_PROP_POS_MSEC, seconds * 1000.0)
        ok, frame = self.capture.read()
        return frame if ok and frame is not None else None

    def close(self) -> None:
        self.capture.release()
        if self.temporary and os.path.exists(self.path):
            os.remove(self.path)


def encode_jpeg(frame, quality: int) -> bytes:
    import cv2

    ok, buffer = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buffer.tobytes()


# ---- the scenario -------------------------------------------------------------------------------

class ChangeIt(Scenario):
    name = "changeit"
    config_name = "ChangeIt"
    # How upstream's environment plays ChangeIt (runtime.behaviours; texts from upstream).
    environment = Play(
        actions={"REWIND": ("rewind the video.",), "FORWARD": ("wait for the",)},
        behaviour="video_steps", moves={"REWIND": -1, "FORWARD": 1},  # times step_size
        last_turn="any", step_cap="max_steps",
        pre_prompt="This is a frame extracted from a video. Answer the following question.",
        hint="Hint: If you cannot answer the question, waiting for it to appear or rewinding the "
             "video could help with classification.",
        short_name="CIT", prediction_threshold=2, keyword_matching="substring",
        suggestions=(REWIND_OPTION, *WAIT_OPTIONS.values()))

    def __init__(self, seed: int, source_root: str):
        super().__init__(seed, source_root)
        self._reader: VideoReader | None = None

    # -- listing and reading --

    def list_units(self) -> list[str]:
        """One unit per category folder of `annotations/` (only test videos are annotated)."""
        for name in ("categories.csv", "labels.csv"):
            if not fileio.exists(self.path(name)):
                raise SourceError(f"changeit: no {name} under {self.root} (expected a clone of "
                                  f"github.com/soCzech/ChangeIt)")
            self.require_inside_root(self.path(name), "a table every category needs")
        folder = self.require_inside_root(self.path("annotations"), "the annotations folder")
        units = [fileio.join(folder, n) for n in fileio.list_names(folder)
                 if not n.startswith(".") and fileio.is_dir(fileio.join(folder, n))]
        if not units:
            raise SourceError(f"changeit: no category folders under {folder}")
        return units

    def read_unit(self, unit: str):
        category = posixpath.basename(unit)
        # checked again here (BadItem: the unit's dead letter), as every file of the unit
        actions = parse_categories_csv(self.read_source_text(self.path("categories.csv")))
        labels = parse_labels_csv(self.read_source_text(self.path("labels.csv")))
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
                per_second = parse_annotation(_text(self.read_source(path)), labels)
            except (BadItem, OSError) as err:  # one annotation file, not the whole category
                reason = getattr(err, "reason", None) or f"unreadable annotation: {err}"
                for qt in QUESTION_TYPES:
                    yield results.dead_letter(self.name, self.relative(path), reason, keys[qt])
                continue
            for qt in QUESTION_TYPES:
                yield from self._question_item(keys[qt], qt, category, video_id, path,
                                               per_second, actions)

    def _listed_ids(self, category: str) -> tuple[set, str]:
        url = self.path("videos", f"{category}.csv")
        try:
            return set(parse_video_list(self.read_source_text(url))), ""
        except FileNotFoundError:
            return set(), f"inconsistent source: no id list videos/{category}.csv"
        except BadItem as err:  # a link out: every video of the category is a dead letter
            return set(), err.reason

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
            image_template=f"ChangeIt/{item['category']}/{item['video_id']}/{{image}}.{extension}",
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
        reader = VideoReader(self.inside_root(url))  # checked before OpenCV opens it
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

    def frame_path(self, row: dict, frame_id: int) -> str:
        """Upstream fills ChangeIt's `{image}` with the plain frame id (no zero padding)."""
        return row["image_template"].format(image=str(frame_id))

    # -- the miniature --

    @classmethod
    def write_miniature(cls, root: str, seed: int = 0) -> None:
        """The repository files in their real format (categories.csv and labels.csv byte for byte,
        id lists without a final newline, annotations with one), and per annotated video its frames
        or its video, every second painted with its label's colour (0 grey, 1 blue, 2 yellow,
        3 green) so tests can check frame/annotation alignment. Covers: an id starting with '-',
        an id in two categories, a video without state1, one without the action, one that starts
        informative, pre-extracted frames, an mp4 and a webm."""
        manifest = cls.read_manifest()
        table = manifest["categories_table"]
        lines = ["DIR_NAME,ACTION_NAME,CENTERING_PARAM"] + [f'{d},"{a}",{t}' for d, a, t in table]
        fileio.write_bytes_atomic(fileio.join(root, "categories.csv"),
                                  ("\n".join(lines) + "\n").encode("utf-8"))
        fileio.write_bytes_atomic(fileio.join(root, "labels.csv"), LABELS_CSV.encode("utf-8"))
        rng = random.Random(f"{seed}/changeit")
        by_category: dict[str, list] = {}
        for video in MINIATURE_VIDEOS:
            by_category.setdefault(video["category"], []).append(video)
        for category in manifest["parameters"]["miniature_categories"]:
            videos = by_category.get(category, [])
            _write_video_list(root, category, [v["id"] for v in videos], rng)
            for video in videos:
                labels = _expand_runs(video["runs"])
                text = "".join(f"{s},{label}\n" for s, label in enumerate(labels))
                fileio.write_bytes_atomic(
                    fileio.join(root, "annotations", category, video["id"] + ANNOTATION_SUFFIX),
                    text.encode("ascii"))
                _write_media(root, manifest["parameters"], video, labels)


# The miniature's annotated videos: label runs as (label, seconds) and how their frames are given.
MINIATURE_VIDEOS = (
    {"category": "apple", "id": "-aB3dE5fG7h", "media": "frames",
     "runs": [(0, 10), (1, 7), (2, 15), (3, 10)]},                  # 42 s: step 3
    {"category": "apple", "id": "Qw3_rTy8uIo", "media": "mp4",
     "runs": [(1, 3), (2, 4), (3, 5), (0, 2)]},                     # starts informative (object)
    {"category": "beer", "id": "Qw3_rTy8uIo", "media": "frames",
     "runs": [(0, 5), (2, 4), (3, 9)]},                             # same id as apple's; no state1
    {"category": "beer", "id": "Zx9-cVb7nM1", "media": "webm",
     "runs": [(0, 4), (1, 4), (3, 4)]},                             # no action
    {"category": "tie", "id": "Lm4kJh8gF2d", "media": "mp4",
     "runs": [(0, 6), (1, 2), (2, 8), (3, 6)]},                     # 22 s: step 2
)
LABEL_COLOURS_RGB = {0: (128, 128, 128), 1: (0, 0, 255), 2: (255, 255, 0), 3: (0, 160, 0)}
MINIATURE_SIZE = (64, 48)   # width, height
MINIATURE_FPS = 4


def _expand_runs(runs) -> list[int]:
    return [label for label, length in runs for _ in range(length)]


def _write_video_list(root: str, category: str, annotated: list[str], rng: random.Random) -> None:
    """`<id>,<score>` lines sorted by score, no final newline; a few unannotated ids too (the real
    lists hold hundreds of training videos per category)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    ids = list(annotated) + ["".join(rng.choice(alphabet) for _ in range(11)) for _ in range(3)]
    scored = sorted(((round(rng.uniform(0.053, 0.752), 3), i) for i in ids), reverse=True)
    text = "\n".join(f"{i},{score:.3f}" for score, i in scored)
    fileio.write_bytes_atomic(fileio.join(root, "videos", f"{category}.csv"), text.encode("ascii"))


def _painted_frame(label: int, second: int, sub: int = 0):
    """A frame in its label's colour with a white marker whose position encodes the second."""
    import numpy as np

    width, height = MINIATURE_SIZE
    r, g, b = LABEL_COLOURS_RGB[label]
    frame = np.empty((height, width, 3), np.uint8)
    frame[:] = (b, g, r)
    x = (second * 5) % (width - 8)
    frame[2:8, x:x + 6] = 255
    frame[height - 4:, : (sub + 1) * 4] = 0  # sub-second ticks, so frames inside a second differ
    return frame


def _write_media(root: str, params: dict, video: dict, labels: list[int]) -> None:
    import cv2

    category, video_id = video["category"], video["id"]
    if video["media"] == "frames":
        for second, label in enumerate(labels):
            data = encode_jpeg(_painted_frame(label, second), 90)
            fileio.write_bytes_atomic(
                fileio.join(root, params["frames_dir"], category, video_id, f"{second}.jpg"), data)
        return
    fourcc = {"mp4": "mp4v", "webm": "VP80"}[video["media"]]
    folder = os.path.join(root, params["video_dir"], category)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{video_id}.{video['media']}")
    writer = _open_video_writer(cv2, path, fourcc)
    if not writer.isOpened():
        raise RuntimeError(f"changeit: OpenCV cannot write {video['media']} video {path}")
    for second, label in enumerate(labels):
        for sub in range(MINIATURE_FPS):
            writer.write(_painted_frame(label, second, sub))
    writer.release()
    if video["media"] == "webm":
        _fix_matroska_track_uid(path, f"{category}/{video_id}")
    check = VideoReader(path)
    try:
        if not check.is_open() or check.frame_at(len(labels) - 1) is None:
            raise RuntimeError(f"changeit: the miniature video {path} does not decode")
    finally:
        check.close()


def _open_video_writer(cv2, path: str, fourcc: str):
    """OpenCV's FFmpeg backend prints (with a bare fprintf to stderr, which no log level
    reaches) that the WebM muxer has no tag for 'VP80', then writes VP8, the codec asked for.
    That line means nothing to a user whose first build writes the miniature, so stderr is
    captured at the descriptor while the writer opens and every other line is passed on."""
    notice = f"OpenCV: FFMPEG: tag 0x{cv2.VideoWriter_fourcc(*fourcc):08x}/'{fourcc}' is not " \
             "supported with codec id"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            return cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), MINIATURE_FPS,
                                   MINIATURE_SIZE)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not line.startswith(notice):
                    sys.stderr.write(line)


def _fix_matroska_track_uid(path: str, name: str) -> None:
    """FFmpeg's Matroska muxer draws a random TrackUID (written in the track entry and its tag);
    replace it with one derived from the video's name, so the miniature is byte-identical on
    every run (OpenCV's writer offers no bitexact flag)."""
    import hashlib

    with open(path, "rb") as handle:
        data = handle.read()
    at = data.find(b"\x73\xc5\x88")  # TrackUID element, 8-byte payload
    if at < 0:
        return
    uid = data[at + 3: at + 11]
    fixed = b"\x01" + hashlib.md5(name.encode("utf-8")).digest()[:7]
    with open(path, "wb") as handle:
        handle.write(data.replace(uid, fixed))
