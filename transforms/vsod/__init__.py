"""VSOD (`OcclusionDataSet-MM20`): someone passes in front of the camera; the model should
suggest rewinding the video or waiting for the occlusion to disappear.

Raw source: OcclusionDataSet-MM20 (VSOD v1.0, Liao et al., ACM MM 2020) as the authors' loader
reads it: `OcclusionDataSet-MM20/Data/<split>/<segment>/` holds the frames (sorted file names =
temporal order) and `OcclusionDataSet-MM20/Annotations/<split>/<segment>/` one VOC-style XML per
frame, paired with the frames by sort position; each `<object>` child of the root is an occluder
with a `<bndbox>`. The source has no identity labels, so the answers come from a labels file that
the manifest names (`parameters.labels_file`, relative to the source root or any URL):

    segment,question_type,answer[,first_image,reference_image]
    seg_0001,speaker,Ursula von der Leyen
    seg_0001,number_of_people,Two,,
    seg_0001,event,Press conference,5,11

`question_type` is one of `speaker`, `number_of_people`, `event`; `answer` must be in the
manifest's vocabulary for that type (`categories.<type>`, also the distractor pool);
`first_image` / `reference_image` optionally pin the frames (the paper picked the fully occluded
frame by hand). One labels row joined to its segment is one raw item and one sample, keyed
`OcclusionDataSet-MM20/<segment>/<question_type>`.

Record semantics (as upstream's environment reads them; docs/records.md):
- frames: every frame of the segment, `frame_ids` 0..n-1 in sorted-name order, `num_images` = n;
  `image_template` `OcclusionDataSet-MM20/<segment>/{image}.<ext>` with `{image}` zero-padded to
  4 digits (the base class default); frame bytes pass through unchanged.
- options: "Rewind the video." and "Wait for the occlusion to disappear." plus one abstain
  option; upstream moves -1/+1 modulo `num_images` and never changes the option set, so both
  moves and the correct category are valid at every step.
- prompt: one of 15 paraphrases of the row's question type; `question_type` is set. The video
  pre-prompt ("This is a frame extracted from a video...") is added by the runtime, not stored.
- categories: the answer plus 3 distractors from the same type's vocabulary.

Choices for the reference's [I]/[?] points:
- `first_image` (unless pinned): the frame whose occluder boxes cover the largest fraction of the
  frame (union of boxes / frame area; the earliest on ties).
- `reference_image` (unless pinned): the unoccluded frame (no `<object>`) nearest to the first
  frame in the circular order the environment walks; on a tie the later one (reached by
  waiting). A segment with no unoccluded frame uses its least occluded frame.
- `strong_occlusions` (a ProactiveBench-derived flag whose rule is unpublished): True when at
  least `strong_occlusion.min_frames` frames have a union-box fraction of at least
  `strong_occlusion.min_union_fraction` (defaults 1 and 0.5). Weakly occluded samples stay in
  the pool with the flag False (upstream's loader skips them at load time; the selection step is
  shared code and does not).
- A segment without any occluded frame has no ambiguous first frame: its label rows are rule
  exclusions (`excluded:no_occlusion`); a segment with no label row is `excluded:no_labels` (the
  paper discarded instances it could not name).
- Frame files are the files with an image extension, annotations the `.xml` files (other files,
  e.g. Thumbs.db, are ignored); pairing is by sort position as in the authors' loader, so the
  counts must match. `frame_order: natural` sorts digit runs numerically (for unpadded names).
- Dead letters (one per label row of the segment, with the segment's path and the reason): bad
  XML, an object without a numeric bndbox, a box outside the image or empty, an XML `<size>`
  that disagrees with the frame, an undecodable or missing frame, an XML/frame count mismatch,
  mixed frame formats, pinned frames out of range. Label rows with an unknown question type or
  answer, a duplicate (segment, type), a malformed line or a segment that does not exist are
  dead letters naming `labels_file:line`.
"""
from proactivebench_builder.transforms.vsod.scenario import VSOD  # noqa: F401 (registers it)
