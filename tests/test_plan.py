"""The fetch plan (fetch/plan.py): a manifest's downloads section that cannot be fetched
safely (a malformed entry, a source folder outside the sources root, a manual-list line that
cannot be formatted, one download inside another) is a PlanError naming what is wrong."""
from __future__ import annotations

import pytest

from proactivebench_builder.fetch.plan import PlanError, plan


@pytest.mark.parametrize("change, message", [
    ({"url": "https://[::1/x"}, "not an http(s) URL"),
    ({"path": "a\nb"}, "not a plain relative path"),
])
def test_malformed_download_entries_are_a_plan_error(change, message):
    entry = {"url": "https://example.org/x", "path": "x", "record_only": "because, a test",
             **change}
    with pytest.raises(PlanError) as caught:
        plan({"name": "demo", "source_subdir": "demo", "downloads": {"files": [entry]}})
    assert message in str(caught.value)


@pytest.mark.parametrize("subdir", ["../elsewhere", "/etc", "", "a/../../b"])
def test_a_source_subdir_outside_the_sources_root_is_a_plan_error(subdir):
    with pytest.raises(PlanError, match="source_subdir"):
        plan({"name": "demo", "source_subdir": subdir, "downloads": {"files": [
            {"url": "https://example.org/x", "path": "x", "record_only": "a test, really"}]}})


@pytest.mark.parametrize("line", ["{a.b}", "{a[0]}", "{a!z}", "{a:{b}}"])
def test_a_manual_list_line_that_cannot_be_formatted_is_a_plan_error(line):
    section = {"manual": "do it by hand", "record_only": "nobody publishes sums",
               "manual_list": {"glob": "*", "regex": "(?P<a>.*)", "line": line, "write": "l.txt"}}
    with pytest.raises(PlanError, match="manual_list"):
        plan({"name": "demo", "source_subdir": "demo", "downloads": section})


def test_two_downloads_where_one_is_inside_the_other_are_a_plan_error():
    files = [{"url": "https://example.org/x", "path": p, "record_only": "a test, really"}
             for p in ("a", "a/b")]
    with pytest.raises(PlanError, match="both a file and a folder"):
        plan({"name": "demo", "source_subdir": "demo", "downloads": {"files": files}})
