"""Cheap, real validation of image bytes, done before a sample is admitted.

A full decode of a 3024x3024 JPEG is slow; JPEG's DCT scaling (`draft`) decodes at 1/8 size and
still reads every entropy-coded segment, so a truncated or corrupt file fails here, early, and
becomes a dead letter instead of breaking the shard writer later.
"""
from __future__ import annotations

import io
import re
import threading
import warnings

from PIL import Image

# What a file extension promises, so that e.g. PNG data named .JPEG is caught.
EXTENSION_FORMATS = {
    ".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".bmp": "BMP", ".webp": "WEBP",
}


class BadImage(ValueError):
    """The bytes are not a complete, decodable image of the expected format."""


_WARNINGS_LOCK = threading.Lock()


def check_image(data: bytes, name: str = "") -> tuple[str, int, int]:
    """Decode `data` cheaply and return (format, width, height); raise BadImage with the reason."""
    if not data:
        raise BadImage("empty file (0 bytes)")
    expected = EXTENSION_FORMATS.get(_extension(name))
    try:
        # catch_warnings swaps the process's one filter list: two threads checking at once
        # (ROD's validation pool, the shard writer's frames thread) would restore each other's
        # lists, so one decode could run without "error" and "error" could outlive both
        with _WARNINGS_LOCK, warnings.catch_warnings():
            warnings.simplefilter("error")  # PIL warns (not raises) on some corrupt data
            image = Image.open(io.BytesIO(data))
            fmt, size = image.format, image.size
            if expected and fmt != expected:
                raise BadImage(f"{fmt} data in a file named {name!r} (expected {expected})")
            if fmt == "JPEG":
                image.draft("RGB", (max(1, size[0] // 8), max(1, size[1] // 8)))
                if not data.rstrip(b"\x00").endswith(b"\xff\xd9"):
                    raise BadImage("truncated JPEG (no end-of-image marker)")
            image.load()
    except BadImage:
        raise
    except Exception as err:  # PIL raises many types for bad data; all mean the same here
        # PIL names the stream object ("<_io.BytesIO object at 0x7f...>"): drop the address so
        # that dead-letter reasons are the same on every run
        detail = re.sub(r" at 0x[0-9a-fA-F]+", "", str(err))
        raise BadImage(f"undecodable image: {type(err).__name__}: {detail}") from None
    if size[0] < 1 or size[1] < 1:
        raise BadImage(f"degenerate image size {size}")
    return fmt, size[0], size[1]


def _extension(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot >= 0 else ""
