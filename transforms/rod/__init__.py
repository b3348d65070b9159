"""ROD (`Realistic-Occlusion-Dataset`): an object behind an occluder; the model should ask for
the occluder to be moved.

Raw source: the Hugging Face repo `arielnlee/Realistic-Occlusion-Dataset` as downloaded
(`rod_0.tar.gz`, `rod_1.tar.gz`, `classes_rod.py`, `dataset_info.json`). Each photo is a tar
member whose file stem is `<setting>-<class>-s<frame>` (e.g. `natural_bluebl_greenr-banana-s6`).
One *sequence* (setting + class token) is one raw item and one sample: 14 photos of an occluder
swept from the left to the right of the object.

Record semantics (as upstream's environment reads them; docs/records.md):
- frames are the 14 photos `s0`..`s13`, `frame_ids` 0..13; `first_image` = 7 (the central, most
  occluded photo), `reference_image` = 0, reached by 7 moves either way because upstream wraps
  LEFT/RIGHT modulo `num_images` (= 14); both are manifest parameters.
- options: "Move the <occluder> to the left." / "... to the right." plus one abstain option; the
  occluder description comes from the setting token through the manifest's `occluders` map
  (e.g. `bluebl` -> "blue blocks"); a setting with no known occluder token is a dead letter.
- `image_template` is `Realistic-Occlusion-Dataset/<setting>-<class token>-s{image}.<ext>`, with
  `{image}` the plain (unpadded) integer: the original stem is kept, so upstream's own path patch
  (`natural_bluebl_greenr-banana-s6` -> s5/s7) still finds its files in our upstream export.
- JPEG bytes pass through unchanged.

Choices for the reference's [I]/[?] points:
- Member paths [?]: only the base name is parsed, so flat, `<class>/` or `<sequence>/` nesting all
  work; `member_prefix` restricts reading to one folder inside the archives. The class token is
  matched leniently (case, `_`/`-`/space and a trailing instance number are ignored, so
  `cowboy hat`, `cowboy_hat`, `cowboyhat` and `banana2` all resolve); the token as spelled in the
  file name is kept in the key and the template.
- Frames per sequence (14), first (7) and reference (0) [I]: manifest parameters.
- A missing, undecodable or duplicated frame inside a sequence makes the WHOLE sequence a dead
  letter (a partial sweep would break the 7-moves-either-way geometry) -- unless the manifest's
  `frame_substitutions` lists that frame. The one listed is upstream's own patch: banana /
  `natural_bluebl_greenr` frame 6 is shown as frame 5. Upstream shows s5 when frame 6 is entered
  by LEFT and s7 otherwise; a frame id maps to one image here, and from the start frame 7 the
  only way into 6 within the step cap before passing the reference is LEFT, so s5 reproduces
  upstream on every path that matters. A substitution applies only when the listed frame is
  actually missing or corrupt (a good copy of the real frame is used as is).
- Reading: the raw archives are `.tar.gz`, which cannot seek. `read_unit` streams every archive
  once, decodes each photo cheaply (validation happens there, with the bytes in hand) and records
  each member's offset in the *uncompressed* tar stream; a frame reference names archive, member,
  offset, size and the byte span of its whole sequence. `load_frame` keeps one gzip reader per
  archive per thread and reads the whole sequence span at once (the writer asks for a row's 14
  frames in a row; the span leaves the cache once its last member is read); a gzip reader keeps
  access points every 16 MB of output (`archives.GzipAccess`), so going backwards in an archive
  restarts from the nearest one, not from the start, and a shard costs its own spans whatever
  order shards are written in (bzip2 and xz archives still restart from the start). For
  repeated full-size builds extract the archives once into `<root>/extracted/` (`tar -xzf
  rod_0.tar.gz -C extracted`, same for rod_1): when that folder exists it is used instead (plain
  file references, no decompression), with the same parsing and the same output bytes. All
  archives are read in ONE unit, so a sequence whose photos are split across the two archives
  is still assembled correctly (the price: the read stage of ROD is one unit; its photos are
  validated on a small thread pool while the archive is decompressed, so the unit still uses
  more than one core of a worker left alone with it).
- Raw items: one per sequence, plus one per member whose name does not parse (dead letter) and
  one per member that is not a photo (excluded:not_a_frame), plus one per archive that cannot be
  read to its end (dead letter; the sequences it cut short become dead letters too).
- Class vocabulary: the manifest's `classes` (the 16 names of `classes_rod.py`, which is never
  executed); when `dataset_info.json` is present its label names must agree, else SourceError.
"""
from proactivebench_builder.transforms.rod.scenario import ROD  # noqa: F401 (registers it)
