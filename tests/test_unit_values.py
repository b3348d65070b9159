"""Reading one unit: counts are summed over the unit (one value per kind, not one per raw item),
other values pass through in order, and a unit that fails part way keeps what it counted."""
from proactivebench_builder.core import results
from proactivebench_builder.pipeline.reading import unit_values
from proactivebench_builder.transforms.quickdraw.scenario import QuickDraw


def scenario():
    return QuickDraw(0, "/nowhere")


def reader(values, error=None):
    def read(unit):
        yield from values
        if error:
            raise error
    return read


def counts_of(values):
    return {(v.scenario, v.what): v.n for v in values if v.kind == "count"}


def test_counts_are_summed_once_per_unit():
    values = []
    for i in range(1000):
        values.append(results.Count("quickdraw", "raw_items"))
        if i % 10 == 0:
            values.append(results.Count("quickdraw", "excluded:not_recognized"))
    values.append(results.Candidate("quickdraw", "QuickDraw/cat/1", {"x": 1}))
    values.append(results.Count("quickdraw", "excluded:not_sampled", 899))
    out = list(unit_values(scenario(), "cat.ndjson", reader(values)))
    assert [v.kind for v in out] == ["candidate", "count", "count", "count"]
    assert counts_of(out) == {("quickdraw", "raw_items"): 1000,
                              ("quickdraw", "excluded:not_recognized"): 100,
                              ("quickdraw", "excluded:not_sampled"): 899}


def test_a_unit_failing_part_way_keeps_its_counts_and_becomes_a_dead_letter():
    values = [results.Count("quickdraw", "raw_items"), results.Count("quickdraw", "raw_items"),
              results.DeadLetter("quickdraw", "cat.ndjson:2", "malformed ndjson line")]
    out = list(unit_values(scenario(), "cat.ndjson", reader(values, OSError("disk gone"))))
    letters = [v for v in out if v.kind == "dead_letter"]
    assert [v.reason for v in letters] == [
        "malformed ndjson line", "unreadable source unit: OSError: disk gone (1 raw items read "
        "before the failure are lost with it)"]
    # the item read but not resolved (no sample, no dead letter yet) is lost with the unit,
    # whose dead letter stands for it: raw items = dead letters, the accounting balances
    assert counts_of(out) == {("quickdraw", "raw_items"): 2}
