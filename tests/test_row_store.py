"""The build's row store: values written once and read back by reference, one file per bundle,
a store file cut short named in the error, and every store file (and nothing else) removed."""
from __future__ import annotations

import os

import pytest

from proactivebench_builder.pipeline import row_store


def test_values_come_back_by_reference_in_any_order(tmp_path):
    store = row_store.RowStore(str(tmp_path))
    values = [{"key": f"k{i}", "frame_refs": [{"url": "x" * i}]} for i in range(50)]
    refs = [store.put(v) for v in values]
    store.close()
    assert len({r.name for r in refs}) == 1  # one file for the bundle
    assert row_store.fetch_many(str(tmp_path), list(reversed(refs))) == list(reversed(values))
    assert row_store.fetch(str(tmp_path), refs[7]) == values[7]


def test_each_bundle_writes_a_file_of_its_own(tmp_path):
    store = row_store.RowStore(str(tmp_path))
    first = store.put("a")
    store.close()
    second = store.put("b")
    store.close()
    assert first.name != second.name
    assert [row_store.fetch(str(tmp_path), r) for r in (first, second)] == ["a", "b"]


def test_a_store_file_cut_short_is_named(tmp_path):
    store = row_store.RowStore(str(tmp_path))
    ref = store.put({"row": "x" * 1000})
    store.close()
    row_store.close_all()
    with open(tmp_path / ref.name, "r+b") as handle:
        handle.truncate(ref.length // 2)
    with pytest.raises(OSError, match=ref.name):
        row_store.fetch(str(tmp_path), ref)


def test_remove_store_removes_store_files_only(tmp_path):
    store = row_store.RowStore(str(tmp_path))
    store.put("a")
    store.close()
    (tmp_path / "README.md").write_text("the card")
    (tmp_path / ".tmp-notes-rows").write_text("a user's file, not named as a store file")
    assert row_store.remove_store(str(tmp_path)) == 1
    assert sorted(os.listdir(tmp_path)) == [".tmp-notes-rows", "README.md"]
