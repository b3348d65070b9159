"""Selection inputs of the pool step: what the leakage filter or the keep-list reads, as a
function that adds them to the pipeline (None when the build keeps the whole pool)."""
from __future__ import annotations


def selection_inputs(params: dict):
    mode = params["selection"]["mode"]
    if mode == "none":
        return None
    from proactivebench_builder.filters import leakage

    return leakage.input_transform(params)
