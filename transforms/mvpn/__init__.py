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
from proactivebench_builder.transforms.mvpn.scenario import MVPN  # noqa: F401 (registers it)
