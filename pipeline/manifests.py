"""Source manifests: one declarative YAML file per source in `source_manifests/`.

A manifest says where a source lives and what it is (layout, licence, citation, URLs, checksums),
which parameters its scenario uses (sample counts, shard sizes, ...) and its class names. It is
package data, so the installed distribution (a Dataflow or Dask worker) reads the same file.
"""
from __future__ import annotations

import functools
import hashlib
import os
from importlib import resources

import yaml

MANIFEST_PACKAGE = "proactivebench_builder.source_manifests"
REQUIRED_KEYS = ("name", "config_name", "dataset", "license", "citation", "homepage",
                 "source_subdir", "layout", "parameters")


class ManifestError(ValueError):
    """A manifest is missing or malformed."""


def manifest_bytes(filename: str) -> bytes:
    """A file of this package's manifests, else of the folder of a scenario module outside the
    package (`transforms.manifest_folders`: a plug-in keeps its manifest beside its module)."""
    try:
        return resources.files(MANIFEST_PACKAGE).joinpath(filename).read_bytes()
    except FileNotFoundError as err:
        from proactivebench_builder.transforms import manifest_folders

        for folder in manifest_folders():
            path = os.path.join(folder, filename)
            if os.path.isfile(path):
                with open(path, "rb") as handle:
                    return handle.read()
        raise ManifestError(f"no file {filename!r} in {MANIFEST_PACKAGE} or beside a scenario "
                            "module") from err


@functools.lru_cache(maxsize=None)
def load_manifest(name: str) -> dict:
    """The parsed manifest `source_manifests/<name>.yaml`, checked for the required keys."""
    manifest = yaml.safe_load(manifest_bytes(f"{name}.yaml"))
    if not isinstance(manifest, dict):
        raise ManifestError(f"manifest {name}.yaml is not a mapping")
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise ManifestError(f"manifest {name}.yaml lacks {missing}")
    if manifest["name"] != name:
        raise ManifestError(f"manifest {name}.yaml names itself {manifest['name']!r}")
    return manifest


def manifest_sha256(name: str) -> str:
    """Checksum of the manifest file, recorded in the dataset card's reproducibility stamp."""
    return hashlib.sha256(manifest_bytes(f"{name}.yaml")).hexdigest()


@functools.lru_cache(maxsize=None)
def load_data_file(filename: str):
    """A JSON or YAML data file that manifests refer to (e.g. a long class-name table)."""
    raw = manifest_bytes(filename)
    return yaml.safe_load(raw)
