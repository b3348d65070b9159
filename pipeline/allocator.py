"""Give freed image buffers back to the operating system.

A build allocates and frees a stream of buffers of 10 KB to a few MB (source images, encoded
frames, row groups). glibc serves a block above its mmap threshold with a mapping of its own and
unmaps it on free, but the threshold is dynamic: each time such a block is freed, the threshold
rises to its size (up to 32 MB), so from then on image buffers come from the heap, whose freed
pages stay in the process. Resident memory then follows the buffers the build has seen rather
than what it holds. Fixing the threshold (which also stops it moving) and trimming the heap top
sooner keep resident memory near what is live. A no-op where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading

M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 128 * 1024  # glibc's initial value, kept fixed

_DONE = False
_LOCK = threading.Lock()


def return_freed_buffers() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (once); False when not glibc."""
    global _DONE
    with _LOCK:
        if not _DONE:
            try:
                mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
            except (OSError, AttributeError):
                return False
            mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
            _DONE = bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and \
                bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES))
        return _DONE
