"""The bundled miniature sources: each scenario writes a small deterministic copy of its real
on-disk layout. The default build and the tests read these, so nothing is downloaded."""
from __future__ import annotations

import hashlib
import inspect
import logging
import os
import shutil
import sys
import tempfile

from proactivebench_builder import transforms
from proactivebench_builder.core.errors import OutputError, ScenarioCodeError
from proactivebench_builder.core.locks import ExclusiveLock, Held, describe
from proactivebench_builder.transforms import manifest_of
from proactivebench_builder.transforms.base import code_failure

LOG = logging.getLogger(__name__)
MARKER = ".miniature-complete"
LOCK = ".miniature.lock"
LOCK_WAIT_SECONDS = 600  # writing every miniature takes seconds; a holder this long is stuck


def ensure_miniature_sources(root: str, scenario_classes: dict, seed: int = 0) -> str:
    """Write (once) the miniature source of every given scenario under `root`/<source_subdir>.
    Two builds started at once take turns (a lock in `root`): the second finds what the first
    wrote current and leaves it, where it would have removed a folder the first reads."""
    os.makedirs(root, exist_ok=True)
    if not _stale(root, scenario_classes):  # nothing to write: no lock (a read-only root too)
        return root
    try:
        with ExclusiveLock(os.path.join(root, LOCK), "the miniature sources' lock file",
                           wait=LOCK_WAIT_SECONDS):
            _write_stale(root, scenario_classes, seed)
    except Held as held:
        raise OutputError(f"{root}: the miniature sources are being written by "
                          f"{describe(held.holder)} for over {LOCK_WAIT_SECONDS} s; end it, or "
                          "give --sources_root another folder") from None
    return root


def _stale(root: str, scenario_classes: dict) -> list[str]:
    """The scenarios whose miniature under `root` is missing or written by other code."""
    return [name for name, cls in sorted(scenario_classes.items())
            if _read(os.path.join(root, manifest_of(name)["source_subdir"], MARKER))
            != generator_version(name, cls)]


def _write_stale(root: str, scenario_classes: dict, seed: int) -> None:
    for name in _stale(root, scenario_classes):  # again: another build may have written them
        cls = scenario_classes[name]
        target = os.path.join(root, manifest_of(name)["source_subdir"])
        version = generator_version(name, cls)
        LOG.info("writing the miniature %s source to %s", name, target)
        staging = tempfile.mkdtemp(prefix=f".{name}-", dir=root)
        try:
            try:
                cls.write_miniature(staging, seed)
            except OSError:
                raise
            except Exception as err:  # the scenario's code: its author's, in one line
                line = code_failure(err, cls)
                if line is None:
                    raise
                raise ScenarioCodeError(line) from err
            with open(os.path.join(staging, MARKER), "w") as handle:
                handle.write(version)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def generator_version(name: str, cls) -> str:
    """Changes when the scenario's code (every module of its folder, or its one module) or
    manifest changes, so a stale miniature is rewritten."""
    package = cls.__module__.rpartition(".")[0]
    if package == transforms.__name__:  # a scenario that is one module of the registry package
        package = ""
    modules = sorted(m for m in sys.modules
                     if package and (m == package or m.startswith(package + "."))) \
        or [cls.__module__]
    digest = hashlib.sha256()
    for module in modules:
        digest.update(inspect.getsource(sys.modules[module]).encode("utf-8"))
    digest.update(cls.manifest_sha256().encode("ascii"))
    return f"{name} {digest.hexdigest()}\n"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
