"""ImageNet-C (`ImageNet-C`): a heavily corrupted image; the model should ask for the right
quality enhancement.

Raw source: the extracted Zenodo release, `<corruption>/<severity>/<wnid>/<file>.JPEG`. A sample
is one validation image under one corruption: frames are its five severities, shown from 5 (the
first frame) down to 1 (the reference), the `{level}` template slot. `samples_per_class` images
per class are drawn by hash rank; each sample's corruption is drawn from the corruptions present
under the root, seeded by its key. The options are the enhancement that undoes that corruption
(`quality_answer`, the only valid move upstream), three enhancements for other corruptions, and
an abstain option, shuffled together. JPEG bytes pass through unchanged.
"""
from proactivebench_builder.transforms.imagenet_c.scenario import \
    ImageNetC  # noqa: F401 (registers it)
