"""The first three stages of the graph, shared by the test pools and the train split: list the
units of raw reading of each (branch, scenario) job, read each unit into result values, and
build each candidate into a row (or a train example). Errors are values at every stage: a unit
or an item that fails is a dead letter, never a crash. Two failures are not an input's, so
they stop the build in one line instead (pipeline.failures records them): a scenario method
that returns the wrong type (its code's contract, checked here where the pipeline receives
it: a ScenarioCodeError) and a remote source store's client that fails (StoreFailed)."""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter

import apache_beam as beam

from proactivebench_builder.core import fileio, results
from proactivebench_builder.core.config import BuildConfig
from proactivebench_builder.core.errors import BadItem, ScenarioCodeError, StoreFailed
from proactivebench_builder.core.layout import TRAIN
from proactivebench_builder.core.contract import check_row
from proactivebench_builder.pipeline import failures, progress
from proactivebench_builder.pipeline.row_store import RowStore, fetch
from proactivebench_builder.pipeline.scenarios import (
    branch_scenario, reads_train_with_test, scenario_instance, train_scenario)
from proactivebench_builder.transforms import get_scenario
from proactivebench_builder.transforms.base import wrong_return

LOG = logging.getLogger(__name__)


class ListUnits(beam.DoFn):
    """Names the units of raw reading of one (branch, scenario) job: its test pool or its train
    split. Both branches share the stages that follow (one queue of work per stage)."""

    def __init__(self, config: BuildConfig):
        self.config = config

    def process(self, job):
        branch, name = job
        label = results.train_label(name) if branch == TRAIN else name
        with progress.timed(self.config.progress_dir, "list", label), \
                failures.recorded(self.config.failures_dir, name):  # an unusable source folder
            scenario = branch_scenario(branch, name, self.config)
            method = "list_train_units" if branch == TRAIN else "list_units"
            with failures.store_failures_raised(scenario):
                units = getattr(scenario, method)()
            checked_units(scenario, method, units)
        LOG.info("%s: %d units of raw reading (%s)", name, len(units), branch)
        progress.report(self.config.progress_dir, progress.LISTED, label, len(units))
        progress.flush(self.config.progress_dir)
        for unit in units:
            # A unit named by a non-UTF-8 file name cannot cross a Beam coder: it travels as
            # its escaped text and becomes a dead letter in ReadUnit.
            yield branch, name, results.utf8_unit(unit)


UNIT_NAMES = "a list of unit names (str)"
VALUES = ("an iterable of self.candidate(...), self.dead_letter(...), self.count(...) and "
          "self.fragment(...) values")
A_VALUE = ("a self.candidate(...), self.dead_letter(...), self.count(...) or "
           "self.fragment(...) value")
RESULT_VALUES = (results.Candidate, results.DeadLetter, results.Count, results.Fragment)
A_ROW = "a row (the dict of self.new_row(key))"


def checked_units(scenario, method: str, units) -> None:
    """Raise ScenarioCodeError unless `units`, what `method` (list_units, list_train_units)
    returned, is a list (or tuple) of unit names: a string would be read letter by letter."""
    if not isinstance(units, (list, tuple)):
        raise wrong_return(scenario, method, units, UNIT_NAMES)
    for unit in units:
        if not isinstance(unit, str):
            raise wrong_return(scenario, method, unit, UNIT_NAMES, "named a unit by a")


def unit_values(scenario, unit, read, labels=()):
    """The result values of reading one unit with `read` (the scenario's `read_unit` or
    `read_train_unit`): a unit named by a non-UTF-8 file name, or one that fails as a whole,
    becomes one dead letter (under each of `labels`, default the scenario's name: a unit read
    once for both splits fails in both), never a crash; every value is made safe to cross a coder.

    Counts are summed over the unit and emitted once at its end (also when it fails part way):
    a scenario counts per raw item, and a real QuickDraw file holds ~150k drawings, so one value
    per item would put tens of millions of elements through every shuffle after this stage."""
    name = scenario.name
    labels = labels or (name,)
    if isinstance(unit, dict):  # a unit named by a non-UTF-8 file name (results.utf8_unit)
        for label in labels:
            yield results.Count(label, "raw_items", 1)
            yield results.relabelled(scenario.dead_letter(
                unit["not_utf8"], results.non_utf8_reason(unit["text"])), label)
        return
    counts, resolved = Counter(), Counter()
    method = read.__name__
    try:
        values = read(unit)
        if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
            raise wrong_return(scenario, method, values, VALUES, of=f"unit {unit!r}")
        for value in values:
            if not isinstance(value, RESULT_VALUES):
                raise wrong_return(scenario, method, value, A_VALUE, "yielded", f"unit {unit!r}")
            if isinstance(value, results.Count):
                counts[value.scenario, value.what] += value.n
                if value.what.startswith("excluded:"):
                    resolved[value.scenario] += value.n
            elif isinstance(value, results.Fragment):
                # counted where the fragments of its raw item meet (`merged_fragments`), unless
                # it cannot cross a coder: then it is a dead letter, and its raw item counts here
                safe = results.utf8_safe(value)
                if not isinstance(safe, results.Fragment):
                    counts[value.scenario, "raw_items"] += 1
                    resolved[value.scenario] += 1
                yield safe
            else:
                resolved[value.scenario] += 1
                yield results.utf8_safe(value)
    except (ScenarioCodeError, StoreFailed):
        raise
    except Exception as err:  # noqa: BLE001 - errors are values here
        if fileio.is_store_client_error(err):
            raise failures.store_failed(scenario, err) from err
        LOG.warning("%s: unit %s failed: %s", name, unit, err)
        # Items counted before the failure but not yet resolved (e.g. drawings waiting for
        # their rank) are lost with the unit: its one dead letter (per label) stands for them
        # and for the rest of the unit, so raw items = samples + dead letters + exclusions
        # still holds.
        for label in labels:
            unresolved = max(0, counts[label, "raw_items"] - resolved[label])
            counts[label, "raw_items"] += 1 - unresolved
            detail = (f" ({unresolved} raw items read before the failure are lost with it)"
                      if unresolved else "")
            yield results.utf8_safe(results.relabelled(scenario.dead_letter(
                unit, f"unreadable source unit: {type(err).__name__}: {err}{detail}"), label))
    for (label, what), n in sorted(counts.items()):
        yield results.Count(label, what, n)


def merged_fragments(fragments: list):
    """The raw items read in fragments (results.Fragment: ROD's sequences, parts of which may
    lie in different archives), each merged by its scenario into one Candidate
    (`Scenario.merge_fragments`, which orders the parts itself: they arrive in any order) and
    counted as one raw item. `SpreadCandidates` brings the fragments of a key together."""
    parts: dict[tuple[str, str], list[dict]] = {}
    for fragment in fragments:
        parts.setdefault((fragment.scenario, fragment.key), []).append(fragment.item)
    for (name, key), items in sorted(parts.items()):
        item = get_scenario(name).merge_fragments(items)
        if not isinstance(item, dict):
            raise wrong_return(get_scenario(name), "merge_fragments", item,
                               "the candidate item (a dict)", of=key)
        yield results.Count(name, "raw_items", 1)
        yield results.Candidate(name, key, item)


def bad_item_letter(scenario, label: str, key: str, err: BadItem) -> results.DeadLetter:
    """The dead letter of a raw item that could not become a sample (or train example): its
    source path relative to the root when the scenario named one, else its key."""
    path = scenario.relative(err.path) if err.path else key
    return results.DeadLetter(label, path, err.reason, key)


def read_train_unit(name: str, unit, config: BuildConfig):
    """The result values of one train unit, labelled `<scenario>/train`."""
    scenario = train_scenario(name, config)
    for value in unit_values(scenario, unit, scenario.read_train_unit):
        yield results.relabelled(value, results.train_label(name))


class ReadUnit(beam.DoFn):
    """Raw reading; a unit that fails as a whole becomes one dead letter, never a crash. A
    candidate's item goes to the row store (pipeline.row_store): what crosses the shuffle to
    the building stage is its reference."""

    def __init__(self, config: BuildConfig):
        self.config = config
        self._store = None

    def start_bundle(self):
        self._store = RowStore(self.config.output)

    def process(self, element):
        branch, name, unit = element
        label = results.train_label(name) if branch == TRAIN else name
        with failures.recorded(self.config.failures_dir, name), \
                progress.timed(self.config.progress_dir, "read", label):
            for value in self.read(branch, name, unit):
                if isinstance(value, results.Candidate):
                    value = dataclasses.replace(value, item=self._store.put(value.item))
                yield value
        progress.report(self.config.progress_dir, progress.READ, label)

    def read(self, branch: str, name: str, unit):
        if branch == TRAIN:
            yield from read_train_unit(name, unit, self.config)
            return
        scenario = scenario_instance(name, self.config)
        if reads_train_with_test(name, self.config):
            yield from unit_values(scenario, unit, scenario.read_unit_with_train,
                                   (name, results.train_label(name)))
        else:
            yield from unit_values(scenario, unit, scenario.read_unit)

    def finish_bundle(self):
        self._store.close()
        progress.flush(self.config.progress_dir)


def train_example_values(value: results.Candidate, config: BuildConfig):
    """A train candidate as a TrainExample, or its dead letter."""
    name = value.scenario.rsplit("/", 1)[0]
    scenario = train_scenario(name, config)
    try:
        example = scenario.build_train_example(value.key, value.item)
        if not isinstance(example, dict):
            raise wrong_return(scenario, "build_train_example", example,
                               "a train row (the dict of self.train_example(...))", of=value.key)
    except BadItem as err:
        yield bad_item_letter(scenario, value.scenario, value.key, err)
        return
    except (ScenarioCodeError, StoreFailed):
        raise
    except Exception as err:  # noqa: BLE001 - one odd item is its own dead letter (as a test one)
        if fileio.is_store_client_error(err):
            raise failures.store_failed(scenario, err) from err
        LOG.warning("%s: %s failed", value.scenario, value.key, exc_info=True)
        yield results.DeadLetter(value.scenario, value.key,
                                 f"unexpected error: {type(err).__name__}: {err}", value.key)
        return
    yield results.TrainExample(value.scenario, name, value.key, example)


class BuildSample(beam.DoFn):
    """A candidate built into a row of the record contract (frames still references), or its
    dead letter; other values pass through."""

    def __init__(self, config: BuildConfig):
        self.config = config

    def start_bundle(self):
        # raw reading is over once samples are built (a shuffle lies between the two stages):
        # state kept for reading, like COCO's annotation index, is dropped before the stages
        # that hold frames, where a worker's memory peaks
        for name in sorted(set(self.config.scenarios) | set(self.config.train_sources)):
            get_scenario(name).reading_done()

    def process(self, value):
        if not isinstance(value, results.Candidate):
            yield value
            return
        if isinstance(value.item, results.RowRef):  # (a merged fragment's item comes inline)
            value = dataclasses.replace(value, item=fetch(self.config.output, value.item))
        folder = self.config.progress_dir
        with failures.recorded(self.config.failures_dir, value.scenario), \
                progress.timed(folder, "build", value.scenario):
            for built in self.built(value):
                if isinstance(built, (results.Sample, results.TrainExample)):
                    progress.report(folder, progress.BUILT, value.scenario)
                yield built

    def finish_bundle(self):
        progress.flush(self.config.progress_dir)

    def built(self, value: results.Candidate):
        if results.is_train_label(value.scenario):
            yield from train_example_values(value, self.config)
            return
        name, key = value.scenario, value.key
        scenario = scenario_instance(name, self.config)
        row = None
        try:
            row = scenario.build_sample(key, value.item)
            if not isinstance(row, dict):
                raise wrong_return(scenario, "build_sample", row, A_ROW, of=key)
            check_row(row)
            if not row["key"].startswith(f"{scenario.config_name}/"):
                raise ValueError(f"key {row['key']!r} does not start with its config "
                                 f"'{scenario.config_name}/'")
        except BadItem as err:
            yield bad_item_letter(scenario, name, key, err)
            return
        except ValueError as err:
            yield results.DeadLetter(name, key, f"inconsistent sample: {err}", key)
            return
        except (ScenarioCodeError, StoreFailed):
            raise
        except Exception as err:  # noqa: BLE001 - one odd item is its own dead letter
            if fileio.is_store_client_error(err):
                raise failures.store_failed(scenario, err) from err
            LOG.warning("%s: %s failed", name, key, exc_info=True)
            yield results.DeadLetter(name, key, f"unexpected error: {type(err).__name__}: {err}",
                                     key)
            return
        finally:
            scenario.seal_frame_refs(row)  # the validated bytes' digests, then forgets them
        yield results.Sample(name, row["key"], row)

