"""Building some scenarios into a folder that already holds a complete build of others: an update.

`run_pipeline.py --scenarios quickdraw` into a folder built with all seven rebuilds QuickDraw and
keeps the six others as they are: their shards, upstream export, build-report entries (with their
shard checksums), dead letters and filter statistics. The card and reports then cover all seven,
so the folder validates as a whole.

An update is only sound when the kept scenarios would have come out the same from a full build
with the new settings, so it is refused before any work, naming what differs, unless the folder's
build stamp agrees with this build on the code version, seed, origin and filter settings, the
upstream export is made (or skipped) by both, and the train split (one set of shards shared by
QuickDraw and COCO) can be left whole or rebuilt whole. A folder holding shards of scenarios
this build does not make, without a build report to keep them by, is refused too.

When the train split is rebuilt, the kept scenarios that have one are read again for it from
the sources the folder's build recorded (same seed, overrides and manifest), so it stays whole.

The driver checks and plans here (`plan_update`); the terminal step merges the kept part of the
previous reports into the new ones (`pipeline.reports`), reading them from the folder itself, so
a retried terminal step merges the same way.
"""
from __future__ import annotations

import json

from proactivebench_builder.core import buildfolder, fileio
from proactivebench_builder.core.buildfolder import BUILDING, FAILED, OK
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.layout import (
    BUILD_REPORT, DEAD_LETTERS, FILTER_REPORT, TRAIN, UPSTREAM_DIR)
from proactivebench_builder.transforms import PATH_VARIABLE, get_scenario, load_scenarios

WAY_OUT = ("rebuild every scenario of the folder (leave out --scenarios), or build into another "
           "--output")


class UpdateRefused(ValueError):
    """This build cannot update the folder's existing build; the message names the way out."""


def read_json(output: str, relative: str) -> dict | None:
    """A report of the folder's previous build as a dict, None when there is none; one that
    cannot be read as a JSON object refuses the update (nothing in it can be trusted)."""
    try:
        report = json.loads(fileio.read_bytes(fileio.join(output, relative),
                                              limit=buildfolder.REPORT_MAX_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as err:  # a FIFO, too large, not JSON
        raise UpdateRefused(f"{output} holds an unreadable {relative} ({err}): {WAY_OUT}") \
            from None
    if not isinstance(report, dict):
        raise UpdateRefused(f"{output} holds a {relative} that is not a JSON object: {WAY_OUT}")
    return report


def plan_update(config: BuildConfig, train_capable: set[str]) -> dict | None:
    """None for a plain build (nothing in the folder, or nothing this build would leave out);
    else {"kept": scenarios kept, "keep_train": bool, "stamp": merged stamp}. Raises
    UpdateRefused when the update would not be sound."""
    output, chosen = config.output, set(config.scenarios)
    try:
        previous = buildfolder.load_report(output)
    except FileNotFoundError:
        previous = None
    except buildfolder.UnusableReport as err:  # a list, a FIFO, nested too deep, not JSON...
        raise UpdateRefused(f"{output} holds an unusable {err}: {WAY_OUT}") from None
    if previous is not None and "scenarios" in previous:  # else nothing in it can be kept
        shape = buildfolder.report_shape_problems(previous)
        if shape:
            raise UpdateRefused(f"{output} holds a {BUILD_REPORT} of another shape than a "
                                f"build writes ({'; '.join(shape[:3])}): {WAY_OUT}")
    if previous is None or unfinished(previous):
        _refuse_foreign_shards(output, config)
        return None
    old_scenarios = {n for n, e in (previous.get("scenarios") or {}).items() if e.get("config")}
    kept = sorted(old_scenarios - chosen)
    if not kept:
        return None
    unregistered = [n for n in kept if n not in load_scenarios()]
    if unregistered:
        raise UpdateRefused(
            f"cannot update {output}: it also holds {', '.join(unregistered)}, which no "
            f"registered scenario is (a scenario of your own: make its module visible with "
            f"{PATH_VARIABLE}=FOLDER, as for the build that wrote the folder); or {WAY_OUT}")
    unusable = not_finished_ok(previous)
    if unusable:
        raise UpdateRefused(f"cannot update {output}: it holds {unusable}; {WAY_OUT}")
    mismatches = _setting_mismatches(previous, read_json(output, FILTER_REPORT) or {}, config)
    if mismatches:
        raise UpdateRefused(
            f"cannot update {output} (it also holds {', '.join(kept)}, kept by an update): this "
            f"build differs from the folder's build in {'; '.join(mismatches)}; {WAY_OUT}")
    train_again = _train_plan(previous, config, kept, chosen, train_capable, output)
    keep_train = train_again is None and "train" in previous
    _check_kept_files(output, previous, kept, keep_train)
    previous_dead_letters(output)  # merged at the end: refused now if it cannot be
    old_overrides = (previous.get("stamp") or {}).get("parameter_overrides") or {}
    return {"kept": kept, "keep_train": keep_train, "stamp": merged_stamp(previous, config, kept),
            # the build marks build.json "building" before the terminal step merges, so the
            # report to keep comes from here (the plan), not from the folder
            "previous": previous,
            "train_sources": train_again or {},
            "train_overrides": {n: old_overrides[n] for n in train_again or {}
                                if n in old_overrides}}


def unfinished(report: dict) -> bool:
    """A build.json that only says a build was under way (core.buildfolder.mark_building)."""
    return report.get("status") == BUILDING and "scenarios" not in report


def not_finished_ok(report: dict) -> str | None:
    """What the folder's build is when it did not finish with status "ok" (the only build
    whose scenarios an update may keep), else None. A build killed after its reports were
    written, before its final checks, still says "building"."""
    status = report.get("status")
    if status == OK:
        return None
    if status == FAILED:
        return "a failed build"
    return f"a build that did not finish (status {status!r})"


def _refuse_foreign_shards(output: str, config: BuildConfig) -> None:
    """Shards of other configs in a folder without a build report cannot be kept consistently."""
    if not fileio.is_dir(output):
        return
    ours = {c for c, n in config.config_to_scenario.items() if n in config.scenarios}
    others = set(config.config_to_scenario) - ours
    present = sorted(c for c in others
                     if any(name.endswith(".parquet") for name in _names(fileio.join(output, c))))
    if present:
        raise UpdateRefused(f"{output} holds shards of {', '.join(sorted(set(present)))} but no "
                            f"reports/build.json to keep them by (an unfinished build?): {WAY_OUT}")


def _names(folder: str) -> list[str]:
    try:
        return fileio.list_names(folder) if fileio.is_dir(folder) else []
    except OSError:
        return []


def _setting_mismatches(previous: dict, filters: dict, config: BuildConfig) -> list[str]:
    old, new = previous.get("stamp") or {}, config.stamp
    found = [f"{what} ({old.get(key)!r} there, {new.get(key)!r} now)"
             for key, what in (("code_version", "code version"), ("seed", "seed"),
                               ("origin", "origin"))
             if old.get(key) != new.get(key)]
    old_filter, new_filter = filters.get("settings") or {}, config.selection.as_dict()
    for key in ("mode", "predictions", "keep_list", "threshold", "min_models", "allow_partial"):
        if old_filter.get(key) != new_filter.get(key):
            found.append(f"filter {key} ({old_filter.get(key)!r} there, "
                         f"{new_filter.get(key)!r} now)")
    had_export = previous.get("upstream_export")
    if had_export is None:  # a report from before this field: the folder says
        had_export = fileio.is_dir(fileio.join(config.output, UPSTREAM_DIR))
    if bool(had_export) != bool(config.export_upstream):
        found.append("the upstream export (" + ("made there, not asked for now: add "
                                                "--upstream_export" if had_export else
                                                "not made there, asked for now") + ")")
    return found


def _train_plan(previous: dict, config: BuildConfig, kept: list[str], chosen: set[str],
                train_capable: set[str], output: str) -> dict | None:
    """The existing train split is one set of shards for every scenario with a train split,
    drawn next to their test picks: kept whole (returns None), or rebuilt whole (returns the
    kept scenarios whose train examples are read again: {name: source URL}, from the folder's
    build, with their overrides and an unchanged manifest)."""
    old_train = set(((previous.get("train") or {}).get("scenarios") or {}))
    if not config.train_sources:
        rebuilt = sorted(old_train & chosen)
        if rebuilt:
            raise UpdateRefused(
                f"cannot update {output}: its train split holds examples of {', '.join(rebuilt)}, "
                "drawn next to the test picks this build remakes; drop --no_train (the train "
                f"split is then rebuilt whole), or {WAY_OUT}")
        return None
    if "train" not in previous and train_capable & set(kept):
        raise UpdateRefused(
            f"cannot update {output}: it was built without a train split (--no_train) and keeps "
            f"{', '.join(sorted(train_capable & set(kept)))}; pass --no_train, or {WAY_OUT}")
    again = {}
    old_stamp = previous.get("stamp") or {}
    for name in sorted(old_train & set(kept)):
        url = (previous.get("sources") or {}).get(name)
        if url is None or not fileio.is_dir(url):
            where = url or "not recorded in the folder's build.json"
            raise UpdateRefused(
                f"cannot update {output}: the train split is rebuilt whole and needs {name}'s "
                f"source ({where}), which is not there; add {name} to --scenarios with its "
                f"source, or {WAY_OUT}")
        if (old_stamp.get("manifests") or {}).get(name) != {"sha256": get_scenario(name).manifest_sha256()}:
            raise UpdateRefused(
                f"cannot update {output}: the train split is rebuilt whole, and {name}'s manifest "
                f"changed since the folder was built; add {name} to --scenarios, or {WAY_OUT}")
        again[name] = url
    return again


def _check_kept_files(output: str, previous: dict, kept: list[str], keep_train: bool) -> None:
    """Every kept shard is where build.json says, with its size (checksums are checked by
    `validate` at the end of the build)."""
    for f in kept_files(previous, kept, keep_train):
        url = fileio.join(output, f["path"])
        fs, path = fileio.filesystem(url)
        if not fs.exists(path) or fs.size(path) != f["bytes"]:
            raise UpdateRefused(f"cannot update {output}: {f['path']}, kept from its build, is "
                                f"missing or changed since: {WAY_OUT}")


def kept_configs(previous: dict, kept: list[str]) -> set[str]:
    return {previous["scenarios"][n]["config"] for n in kept}


def kept_files(previous: dict, kept: list[str], keep_train: bool) -> list[dict]:
    configs = kept_configs(previous, kept)
    return [f for f in previous.get("files", [])
            if f.get("config") in configs or (keep_train and f.get("split") == TRAIN)]


def merged_stamp(previous: dict, config: BuildConfig, kept: list[str]) -> dict:
    """The new stamp, with the kept scenarios' manifests and overrides, the command of the
    folder's build, and per rebuilt scenario the command that last updated it."""
    old, new = previous.get("stamp") or {}, config.stamp
    stamp = dict(new)
    stamp["manifests"] = {**{n: v for n, v in (old.get("manifests") or {}).items() if n in kept},
                          **new["manifests"]}
    stamp["parameter_overrides"] = {
        **{n: v for n, v in (old.get("parameter_overrides") or {}).items() if n in kept},
        **new["parameter_overrides"]}
    stamp["command"] = old.get("command", new["command"])
    stamp["updated_by"] = {**{n: c for n, c in (old.get("updated_by") or {}).items() if n in kept},
                           **{n: new["command"] for n in config.scenarios}}
    return stamp


# ------------------------------------------------------------ the terminal step's merge


DEAD_LETTER_FIELDS = ("scenario", "path", "reason", "key")


def previous_dead_letters(output: str) -> list[dict]:
    """The dead letters of the folder's previous build (reports/dead_letters.jsonl, which no
    digest in build.json covers), each checked to be a line the build writes; one that is not
    refuses the update in one line naming it."""
    where = f"{output} holds a {DEAD_LETTERS}"
    try:
        data = fileio.read_bytes(fileio.join(output, DEAD_LETTERS),
                                 limit=buildfolder.REPORT_MAX_BYTES)
    except FileNotFoundError:
        return []
    except OSError as err:  # a FIFO, a folder, too large
        raise UpdateRefused(f"{where} that cannot be read ({err.strerror or err}): "
                            f"{WAY_OUT}") from None
    letters = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line:
            continue
        try:
            letter = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep
            letter = None
        if not (isinstance(letter, dict) and set(letter) == set(DEAD_LETTER_FIELDS)
                and all(isinstance(letter[f], str) for f in DEAD_LETTER_FIELDS)):
            raise UpdateRefused(f"{where} whose line {number} is not a dead letter this "
                                f"builder writes: {WAY_OUT}")
        letters.append(letter)
    return letters


def merge_reports(output: str, update: dict, report: dict, filters: dict, files: list[dict],
                  dead_lines: list[dict], sources: dict) -> dict:
    """The kept part of the folder's previous reports added to this build's (the build report
    as the driver read it, the others from the folder, so a retried terminal step merges the
    same). Returns the pieces to write."""
    previous = update["previous"]
    old_filters = (read_json(output, FILTER_REPORT) or {}).get("scenarios") or {}
    kept, keep_train = update["kept"], update["keep_train"]
    report = {**{n: previous["scenarios"][n] for n in kept}, **report}
    filters = {**{n: old_filters[n] for n in kept if n in old_filters}, **filters}
    files = sorted(kept_files(previous, kept, keep_train) + files, key=lambda f: f["path"])
    sources = {**{n: u for n, u in (previous.get("sources") or {}).items() if n in kept},
               **sources}
    old_dead = previous_dead_letters(output)

    def is_kept(scenario: str) -> bool:
        name, _, branch = scenario.partition("/")
        return name in kept and (not branch or keep_train)

    dead_lines = sorted([d for d in old_dead if is_kept(d["scenario"])] + dead_lines,
                        key=lambda v: (v["scenario"], v["path"], v["reason"], v["key"]))
    return {"report": report, "filters": filters, "files": files, "dead": dead_lines,
            "sources": sources, "train": previous.get("train") if keep_train else None}
