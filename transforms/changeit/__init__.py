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
from proactivebench_builder.transforms.changeit.scenario import \
    ChangeIt  # noqa: F401 (registers it)
