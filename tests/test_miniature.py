"""pipeline/miniature.py: the bundled miniature sources, written once per version of a
scenario's code, and shared by builds that start at once."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

# One build's writing of the QuickDraw miniature, slowed so that a second build starts while
# the first writes; each write is counted in a file.
WRITER = textwrap.dedent("""
    import os, sys, time
    from proactivebench_builder.pipeline.miniature import ensure_miniature_sources
    from proactivebench_builder.transforms import load_scenarios
    cls = load_scenarios()["quickdraw"]
    real = cls.write_miniature.__func__
    def slow(klass, root, seed=0):
        with open(sys.argv[2], "a") as counts:
            counts.write("write\\n")
        time.sleep(2)
        real(klass, root, seed)
    cls.write_miniature = classmethod(slow)
    ensure_miniature_sources(sys.argv[1], {"quickdraw": cls})
    print(sorted(os.listdir(sys.argv[1])))
""")


def test_two_builds_starting_at_once_write_the_miniature_once(tmp_path):
    root, counts = str(tmp_path / "sources"), str(tmp_path / "writes")
    first = subprocess.Popen([sys.executable, "-c", WRITER, root, counts],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not os.path.exists(counts):  # the first is writing
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-c", WRITER, root, counts],
                            capture_output=True, text=True, timeout=120)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, err + second.stderr
    assert open(counts).read() == "write\n"  # the second found the first's miniature current
    assert out == second.stdout == "['quickdraw']\n"  # and no lock file left

