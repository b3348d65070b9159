"""The sizes a dry run shows (fetch/sizes.py): what fetch recorded counts only when it has the
right shape and is of the URL planned."""
from __future__ import annotations

from proactivebench_builder.fetch import plan as fetch_plan, sizes as fetch_sizes
from proactivebench_builder.fetch.download import FileSpec


def test_a_recorded_size_of_the_wrong_shape_gives_the_dry_run_no_size(tmp_path):
    """Entries of the wrong shape (a text, a boolean, a negative size, a list, another URL)
    give no size; a well-formed one does."""
    spec = FileSpec(url="https://example.org/x", path="x")
    planned = fetch_plan.PlannedFile(spec, unknown_size="nobody publishes it")
    record = {"files": {}, "extracted": {}, "sizes": {}}
    for bad in ({"url": spec.url, "size": "12"}, {"url": spec.url, "size": True},
                {"url": spec.url, "size": -1}, [12], {"url": "https://example.org/y", "size": 12}):
        record["sizes"]["x"] = bad
        assert fetch_sizes.known_file(planned, str(tmp_path), record).size is None, bad
    record["sizes"]["x"] = {"url": spec.url, "size": 12}
    assert fetch_sizes.known_file(planned, str(tmp_path), record) == fetch_sizes.KnownFile(
        "to fetch", 12, fetch_sizes.RECORDED)
