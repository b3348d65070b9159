"""QuickDraw (`QuickDraw`): a coarse sketch; the model should ask for more strokes.

Raw source: the Quick, Draw! ndjson files, one per category (`simplified/<category>.ndjson`, or
the `raw/` family). A sample is one recognised drawing; frame k shows its first k+1 strokes, so
frame 0 is the first stroke and the last frame (the reference) is the full drawing. Per class,
`samples_per_class` drawings are drawn by the smallest hash rank of (seed, key): a uniform,
order-independent sample that needs only a k-sized heap while streaming a file of any size.
The ranks after the test picks are free for the train split, which keeps the two disjoint.

A real category file holds ~145k drawings (~90 MB) of which 60 are kept, so a file is read once
for both splits and a line pays only what it needs: a regular-expression check of its canonical
form for every line, the full JSON parse and stroke validation only for the few hundred that
enter the kept ranks (`FileScan`; measured on a 92 MB file of real-format lines, one core: the
scan ~700 MB/s, `orjson.loads` ~300 MB/s, `json.loads` ~67 MB/s).
"""
from proactivebench_builder.transforms.quickdraw.scenario import \
    QuickDraw  # noqa: F401 (registers it)
