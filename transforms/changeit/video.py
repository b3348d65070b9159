"""Reading ChangeIt's videos: one frame per annotated second, fetched by a fresh seek each time so
the same second gives the same bytes in every row and shard, re-encoded as JPEG."""
from __future__ import annotations

import math
import os
import posixpath
import tempfile

from proactivebench_builder.transforms.api import fileio


def local_copy(url: str) -> tuple[str, bool]:
    """A local path OpenCV can open: the file itself, or a temporary copy of a remote one
    (returns the path and whether it is a temporary file to remove)."""
    fs, path = fileio.filesystem(url)
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        fileio.open_local_regular(path).close()  # a FIFO or a device is refused, not decoded
        return path, False
    handle, tmp = tempfile.mkstemp(suffix=posixpath.splitext(path)[1])
    os.close(handle)
    fs.get(path, tmp)
    return tmp, True


class VideoReader:
    """One opened video; frames are fetched by seeking to a time, so the frame of a second never
    depends on what was read before it (the same second gives the same bytes in every row)."""

    def __init__(self, url: str):
        import cv2

        self.url = url
        self.path, self.temporary = local_copy(url)
        self.capture = cv2.VideoCapture(self.path)

    def is_open(self) -> bool:
        return self.capture.isOpened()

    def duration_s(self) -> float | None:
        """Container-reported duration, or None when the container does not say (e.g. some
        webm files report no frame count)."""
        import cv2

        fps = self.capture.get(cv2.CAP_PROP_FPS)
        count = self.capture.get(cv2.CAP_PROP_FRAME_COUNT)
        return count / fps if fps > 0 and count > 0 else None

    def frame_at(self, seconds: float, tail_s: float = 0.0):
        """The BGR frame shown at `seconds`, or None past the end or on a decoding error.

        ffmpeg's fps=1 filter (how the annotations were made) rounds to the nearest second, so
        the last annotated second can lie up to half a second past the last frame; a request
        within `tail_s` of the end gets the video's last decodable frame instead."""
        import cv2

        frame = self._read_at(seconds)
        duration = self.duration_s()
        if frame is None and duration is not None and seconds < duration + tail_s:
            fps = self.capture.get(cv2.CAP_PROP_FPS)
            for back in range(1, int(math.ceil(fps)) + 1):
                frame = self._read_at(max(0.0, duration - back / fps))
                if frame is not None:
                    break
        return frame

    def _read_at(self, seconds: float):
        import cv2

        self.capture.set(cv2.CAP_PROP_POS_MSEC, seconds * 1000.0)
        ok, frame = self.capture.read()
        return frame if ok and frame is not None else None

    def close(self) -> None:
        self.capture.release()
        if self.temporary and os.path.exists(self.path):
            os.remove(self.path)


def encode_jpeg(frame, quality: int) -> bytes:
    import cv2

    ok, buffer = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buffer.tobytes()
