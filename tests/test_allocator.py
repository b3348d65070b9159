"""Freed image buffers go back to the operating system once glibc's thresholds are fixed: after
allocating and freeing 300 buffers of 1 MB with small live objects between them, resident
memory is back where it started (with glibc's dynamic threshold it stays 300 MB higher)."""
import subprocess
import sys

import pytest

PROBE = """
import sys
def rss_mb():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096 / 2**20
if sys.argv[1] == "on":
    from proactivebench_builder.pipeline.allocator import return_freed_buffers
    assert return_freed_buffers() and return_freed_buffers()  # idempotent
warm = bytes(1 << 20)
del warm  # the free that raises glibc's dynamic threshold above 1 MB
base = rss_mb()
big, small = [], []
for _ in range(300):
    big.append(bytearray(1 << 20))  # an image buffer
    small.append(bytearray(1000))   # something still alive above it on the heap
del big
print(round(rss_mb() - base))
"""


def retained_mb(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip())


@pytest.mark.build
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc only")
def test_freed_buffers_are_returned():
    if retained_mb("off") < 200:
        pytest.skip("this C library returns freed buffers by itself")
    assert retained_mb("on") < 50
