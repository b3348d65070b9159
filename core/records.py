"""The record contract: one row per benchmark sample, the same columns in every scenario config.

Columns are the fields the upstream `proactivebench` environments read from
`<config>_preprocessed.jsonl` (with the same meaning, see `docs/records.md`),
plus `key`, `frames`, `frame_ids`, `question_type` and `source`. Scenario-specific extras are null
where a scenario does not use them, so every config shares one schema and one loader.

The Arrow schema carries the Hugging Face `datasets` feature metadata, so `load_dataset` decodes
`frames` as images. Lists are declared as `Sequence` (read by datasets 3.x and by 4.x/5.x alike).
"""
from __future__ import annotations

import json

import pyarrow as pa

# Fields the upstream environments read, in the order the upstream JSONL writes them.
UPSTREAM_COMMON_FIELDS = (
    "id", "image_template", "first_image", "num_images", "reference_image",
    "prompt", "options", "categories", "answer",
)
# Scenario extras the upstream environments read (null where a scenario has none).
UPSTREAM_EXTRA_FIELDS = (
    "strong_occlusions", "valid_images", "quality_answer", "step_size", "max_steps",
    "direction", "granularity", "horizontal_step", "vertical_step", "crop",
)

# COCO's pixel counts: its step sizes and its crop box. Upstream's records hold them as JSON
# numbers, integers where they are whole, and the shards keep them so: int64 columns, unless a
# row of the config holds a fractional one (`has_fractional_pixels`); then that config's shards
# hold all of them as float64 (`arrow_schema(fractional_pixels=True)`), as a column can hold
# only one type.
PIXEL_FIELDS = ("horizontal_step", "vertical_step", "crop")
CROP_KEYS = ("top", "left", "height", "width")


def crop_type(number: pa.DataType) -> pa.DataType:
    return pa.struct([(k, number) for k in CROP_KEYS])


CROP_TYPE = crop_type(pa.int64())
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
SOURCE_TYPE = pa.struct([
    ("dataset", pa.string()), ("license", pa.string()), ("files", pa.list_(pa.string())),
])

_ARROW_FIELDS = [
    ("id", pa.int64()),
    ("key", pa.string()),
    ("image_template", pa.string()),
    ("first_image", pa.int64()),
    ("num_images", pa.int64()),
    ("reference_image", pa.int64()),
    ("prompt", pa.string()),
    ("options", pa.list_(pa.string())),
    ("categories", pa.list_(pa.string())),
    ("answer", pa.string()),
    ("question_type", pa.string()),
    ("strong_occlusions", pa.bool_()),
    ("valid_images", pa.list_(pa.int64())),
    ("quality_answer", pa.string()),
    ("step_size", pa.int64()),
    ("max_steps", pa.int64()),
    ("direction", pa.string()),
    ("granularity", pa.int64()),
    ("horizontal_step", pa.int64()),
    ("vertical_step", pa.int64()),
    ("crop", CROP_TYPE),
    ("frame_ids", pa.list_(pa.int64())),
    ("frames", pa.list_(IMAGE_TYPE)),
    ("source", SOURCE_TYPE),
]
COLUMNS = tuple(name for name, _ in _ARROW_FIELDS)
# The integer columns besides the id: what a play declaration may name as its step cap.
INT_COLUMNS = frozenset(name for name, kind in _ARROW_FIELDS
                        if kind == pa.int64() and name != "id")
# Every column except the image bytes: what crosses a shuffle before frames are materialized.
METADATA_COLUMNS = tuple(c for c in COLUMNS if c != "frames")


def _value(dtype: str) -> dict:
    return {"dtype": dtype, "_type": "Value"}


def _sequence(feature: dict) -> dict:
    return {"feature": feature, "_type": "Sequence"}


HF_FEATURES = {
    "id": _value("int64"),
    "key": _value("string"),
    "image_template": _value("string"),
    "first_image": _value("int64"),
    "num_images": _value("int64"),
    "reference_image": _value("int64"),
    "prompt": _value("string"),
    "options": _sequence(_value("string")),
    "categories": _sequence(_value("string")),
    "answer": _value("string"),
    "question_type": _value("string"),
    "strong_occlusions": _value("bool"),
    "valid_images": _sequence(_value("int64")),
    "quality_answer": _value("string"),
    "step_size": _value("int64"),
    "max_steps": _value("int64"),
    "direction": _value("string"),
    "granularity": _value("int64"),
    "horizontal_step": _value("int64"),
    "vertical_step": _value("int64"),
    "crop": {k: _value("int64") for k in CROP_KEYS},
    "frame_ids": _sequence(_value("int64")),
    "frames": _sequence({"_type": "Image"}),
    "source": {
        "dataset": _value("string"),
        "license": _value("string"),
        "files": _sequence(_value("string")),
    },
}


def arrow_schema(fractional_pixels: bool = False) -> pa.Schema:
    """The Parquet schema of every test/unfiltered shard, with the `datasets` feature metadata;
    `fractional_pixels`: the variant whose PIXEL_FIELDS are float64."""
    fields, features = list(_ARROW_FIELDS), dict(HF_FEATURES)
    if fractional_pixels:
        fields = [(n, crop_type(pa.float64()) if n == "crop" else pa.float64()
                   if n in PIXEL_FIELDS else t) for n, t in fields]
        features.update({"horizontal_step": _value("float64"),
                         "vertical_step": _value("float64"),
                         "crop": {k: _value("float64") for k in CROP_KEYS}})
    metadata = {"huggingface": json.dumps({"info": {"features": features}}, sort_keys=True)}
    return pa.schema([pa.field(n, t) for n, t in fields], metadata=metadata)


def pixel_values(row: dict) -> list:
    """The row's pixel counts (PIXEL_FIELDS, the crop's four), nulls left out."""
    crop = row.get("crop") or {}
    values = [row.get("horizontal_step"), row.get("vertical_step")]
    values += [crop.get(k) for k in CROP_KEYS] if isinstance(crop, dict) else []
    return [v for v in values if v is not None]


def has_fractional_pixels(row: dict) -> bool:
    """Whether a pixel count of the row is a number that is not an integer (11.5, or 11.0 as
    the record wrote it): its config's shards then hold them as float64."""
    return any(isinstance(v, float) for v in pixel_values(row))


def schema_of(shard_schema: pa.Schema) -> pa.Schema:
    """The variant of the contract a shard's schema claims (by its horizontal_step column)."""
    fractional = ("horizontal_step" in shard_schema.names
                  and pa.types.is_floating(shard_schema.field("horizontal_step").type))
    return arrow_schema(fractional_pixels=fractional)


def empty_row() -> dict:
    """A row with every column present and null, for scenarios to fill in."""
    return {name: None for name in COLUMNS}


# ---- the train split (GRPO post-training; the released `default` config's `train` split) ----

MESSAGE_TYPE = pa.struct([
    ("role", pa.string()),
    ("content", pa.list_(pa.struct([("type", pa.string()), ("text", pa.string())]))),
])
# the released split's per-key confidence changes: a list of {key, value}
DELTA_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.float32())]))
# The released train split's columns, in its order, then ours. `qwen_conf` ... `llava_delta`
# are first-round confidences of the two post-trained models (unpublished definition; filled
# from train predictions that carry them, filters/predictions.py, else null).
_TRAIN_ARROW_FIELDS = [
    ("prompt", pa.list_(MESSAGE_TYPE)),
    ("ground_truth", pa.string()),
    ("proactive_actions", pa.list_(pa.string())),
    ("options", pa.list_(pa.string())),
    ("qwen_conf", pa.float32()),
    ("qwen_delta", DELTA_TYPE),
    ("llava_conf", pa.float32()),
    ("llava_delta", DELTA_TYPE),
    ("images", pa.list_(IMAGE_TYPE)),
    ("key", pa.string()),
    ("config", pa.string()),
    ("ambiguous", pa.bool_()),
    ("frame_id", pa.int64()),
    ("source", SOURCE_TYPE),
]
TRAIN_COLUMNS = tuple(name for name, _ in _TRAIN_ARROW_FIELDS)
TRAIN_HF_FEATURES = {
    "prompt": _sequence({
        "role": _value("string"),
        "content": _sequence({"type": _value("string"), "text": _value("string")}),
    }),
    "ground_truth": _value("string"),
    "proactive_actions": _sequence(_value("string")),
    "options": _sequence(_value("string")),
    "qwen_conf": _value("float32"),
    "qwen_delta": _sequence({"key": _value("string"), "value": _value("float32")}),
    "llava_conf": _value("float32"),
    "llava_delta": _sequence({"key": _value("string"), "value": _value("float32")}),
    "images": _sequence({"_type": "Image"}),
    "key": _value("string"),
    "config": _value("string"),
    "ambiguous": _value("bool"),
    "frame_id": _value("int64"),
    "source": HF_FEATURES["source"],
}


def train_arrow_schema() -> pa.Schema:
    metadata = {"huggingface": json.dumps({"info": {"features": TRAIN_HF_FEATURES}},
                                          sort_keys=True)}
    return pa.schema([pa.field(n, t) for n, t in _TRAIN_ARROW_FIELDS], metadata=metadata)
