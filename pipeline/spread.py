"""Redistributing elements across workers, the same way on every runner."""
from __future__ import annotations

import apache_beam as beam

from proactivebench_builder.core import results
from proactivebench_builder.core.seeding import stable_hash
from proactivebench_builder.pipeline import failures
from proactivebench_builder.pipeline.reading import merged_fragments

SPREAD_LANES = 256  # most partitions a spread stage can use on the DaskRunner


def _no_element(_) -> bool:
    return False


KEY_BITS = 62  # a group key fits Beam's variable-length int coder


def _keyed_by_hash(value):
    # packed (results.packed): the local runner holds grouped values in the build process;
    # the fragments of one raw item share a key, so they meet in one group. Other values get
    # keys of their own: the local runner deals a stage's groups to its workers in turn, in the
    # order they arrive, so the units a job lists one after the other (ROD's archives) go to
    # different workers; two values sharing a key would go to one
    what = (value.scenario, value.key) if isinstance(value, results.Fragment) else (repr(value),)
    return stable_hash(*what) >> (128 - KEY_BITS), results.packed(value)


def _ungrouped(keyed, failures_dir=None):
    """The group's values, the fragments among them merged into the raw items they are parts
    of (`reading.merged_fragments`; a scenario's merge that fails is recorded in
    `failures_dir`, pipeline.failures)."""
    fragments = []
    for packed in keyed[1]:
        value = results.unpacked(packed)
        if isinstance(value, results.Fragment):
            fragments.append(value)
        else:
            yield value
    if fragments:
        with failures.recorded(failures_dir, fragments[0].scenario):
            yield from merged_fragments(fragments)


class Spread(beam.PTransform):
    """Redistribute elements across workers by a stable hash (a plain GroupByKey, which every
    runner supports; `beam.Reshuffle` relies on windowing machinery the DaskRunner lacks).

    On the DaskRunner a GroupByKey keeps the partition count of its input, and a Create of a
    few scenario names is a single partition, so the group would run on one worker. The input
    is therefore flattened with an empty collection made from a Create of SPREAD_LANES
    placeholders: it adds no element, but on Dask it brings its partitions (`--dask_npartitions`
    of them), over which the hash spreads the elements. On other runners it is just empty."""

    def __init__(self, failures_dir: str | None = None):
        super().__init__()
        self.failures_dir = failures_dir

    def expand(self, pcoll):
        lanes = (
            pcoll.pipeline
            | "Lanes" >> beam.Create(list(range(SPREAD_LANES)))
            | "NoElements" >> beam.Filter(_no_element)
        )
        return (
            (pcoll, lanes)
            | "WithLanes" >> beam.Flatten()
            | "KeyByHash" >> beam.Map(_keyed_by_hash)
            | "Group" >> beam.GroupByKey()
            | "Ungroup" >> beam.FlatMap(_ungrouped, self.failures_dir)
        )
