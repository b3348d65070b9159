"""MS-COCO 2014 (`coco2014`): a crop beside (or inside) the only object; the model should move
the camera toward it, or zoom out, before it answers.

Raw source: `annotations/instances_val2014.json` (a COCO instances file) and
`val2014/COCO_val2014_<12 digits>.jpg`; parameter `split: train` reads `instances_train2014.json`
and `train2014/` instead (for the GRPO train split). A sample is one image with exactly one
annotated object. It has ONE frame, the full image passed through unchanged (`frame_ids = [0]`,
`first_image = reference_image = 0`): every view the model sees is a crop of it that the upstream
environment computes at play time from `crop`, `direction`, `horizontal_step` and `vertical_step`.

The crop convention is exactly the one `COCO2014Environment` reads (upstream `proactivebench`
0.1.1 `environment.py`). With h, v the current steps (h0, v0 at turn 0; (k+1)·h0 after k moves on that axis) the
view is PIL box (left', top', right, bottom):
  * moves (left/right/up/down and the diagonals "up_left", "up_right", "down_left",
    "down_right"): `crop.width` / `crop.height` are the RIGHT / BOTTOM edge coordinates; a move
    extends the view on its side (left' = left − h, right = width + h, top' = top − v,
    bottom = height + v); the option of an axis disappears once its step reaches g·h0, so turn 0
    already shows one step and the last view shows g steps.
  * zoom: `crop.width` / `crop.height` are true SIZES; the view is (left − h, top − v,
    left + width + h, top + height + v), grown on every side, g+1 views.
The step cap that upstream computes (and that `num_images` holds, so that the environment's
`valid_images = range(num_images)` and the record agree) is g for a cardinal move, 2·g for a
diagonal, g+1 for zoom. `max_steps` stays null (upstream's COCO environment derives its cap from
`granularity` and reads no such field); the step of an axis that does not move is 0.
Every single-object image becomes a sample (no subsampling), so the pool size follows the source.

How a crop is made (the generation code is unreleased; all of this is our choice):
  * every coordinate and step is an integer (zoom's option is removed on an exact float
    equality, which integer steps always reach), every view lies inside the image (no black
    padding) and is at least `min_view_fraction` of the image side on each axis, a step is at
    least `min_step_fraction` of the side, and the stored crop (one step before the first view)
    is itself a proper box in its convention (x2 > left for moves, size >= 1 for zoom);
  * a move starts beside the object: the first view cuts off the object on the side the camera
    must move to (its IoU with the object box < `max_start_iou`, and it shows at most
    `max_start_visible_fraction` of the box); the axis that does not move spans the object plus
    some context; the last view contains the whole object box;
  * zoom starts inside the object (a window of it, IoU < `max_start_iou`) and the last view,
    grown symmetrically, contains the whole box; the window's position is drawn among those from
    which symmetric growth reaches both object ends before an image border;
  * "covers the object" means the last view contains the object's bounding box (coverage, the
    fraction of the box inside the view, is 1.0; `min_final_coverage` is checked on every plan);
  * the direction family (cardinal / diagonal / zoom) is drawn by `direction_weights`, the
    direction uniformly inside it; directions that cannot be realised for this object (no room
    beside it, object too small to zoom into) are skipped in a seeded weighted order;
    granularity is uniform in [granularity_min, granularity_max] = [3, 5] (paper: 3-5 steps).

Reading: the annotation file (val ~160 MB of JSON, train ~330 MB) is streamed once per worker
process, never parsed whole: its images[] and annotations[] elements are decoded one at a time
and reduced at once to a compact index (image records, per-image annotation counts and the lone
annotation, no segmentations), which is all a worker keeps (cached, see `load_index`); memory is
that index plus one read chunk. The units of reading are `read_shards` slices of the image ids
(id modulo read_shards), so workers share the per-image work. A raw item is one images[] record,
one image id that annotations name but images[] lacks, or one record too malformed to index (no
integer id / image_id, a duplicate image id). A file that is not valid JSON, is truncated, or
is not an instances file fails its units as a whole (each one a dead letter).

Selection: an image is a candidate when it has exactly one annotation and that annotation is
not a crowd region ([?] whether crowd regions count as objects is unknown; we count them, so an
image with one object plus a crowd of others is not "single-object"; `count_crowd_annotations:
false` ignores them instead). Images without annotations, with several, or whose single
annotation is a crowd are documented exclusions. Dead letters: an image record that is malformed,
an annotation naming an image that images[] lacks, an unknown category id, a degenerate box
(a side below `min_box_side_px`), a box outside the image (beyond `bbox_tolerance_px`), an image
smaller than `min_image_side` or with no room for any valid crop, an image file that is missing,
corrupt, or not the size the annotations state.

Distractors: the paper ranks categories by CLIP text similarity, which is not available offline.
We use a fixed, documented similarity between COCO category names instead:
  score(a, b) = 2·[same supercategory] + 1·[supercategories related in `supercategory_affinity`]
                + cosine of the names' character-trigram counts,
and take the `hard_negatives` (3) highest-scoring categories (ties by category id), shuffled with
the answer by the sample's seed.
"""
from proactivebench_builder.transforms.coco.scenario import Coco  # noqa: F401 (registers it)
