"""The bundled miniature sources: each scenario writes a small deterministic copy of its real
on-disk layout. The default build and the tests read these, so nothing is downloaded."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile

from proactivebench_builder.pipeline.manifests import load_manifest

LOG = logging.getLogger(__name__)
MARKER = ".miniature-complete"


def ensure_miniature_sources(root: str, scenario_classes: dict, seed: int = 0) -> str:
    """Write (once) the miniature source of every given scenario under `root`/<source_subdir>."""
    os.makedirs(root, exist_ok=True)
    for name, cls in sorted(scenario_classes.items()):
        target = os.path.join(root, load_manifest(name)["source_subdir"])
        if os.path.exists(os.path.join(target, MARKER)):
            continue
        LOG.info("writing the miniature %s source to %s", name, target)
        staging = tempfile.mkdtemp(prefix=f".{name}-", dir=root)
        try:
            cls.write_miniature(staging, seed)
            with open(os.path.join(staging, MARKER), "w") as handle:
                handle.write(f"{name}\n")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return root
