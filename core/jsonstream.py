"""Streaming the top level of a JSON file: the members of a top-level object, decoded one at a
time, with the elements of chosen arrays decoded one by one, so that a file of hundreds of
megabytes (COCO's annotation files) is read holding about one chunk and one value, never the
parsed file. Errors are `ValueError`s naming the character position.

The standard library's decoder does the decoding (`json.JSONDecoder.raw_decode` over a sliding
window of text); this module only finds where each value starts and ends and keeps the window
short. ijson's C backend was measured beside it at real size (docs/benchmark.md) and is not
faster here, so no dependency is added for it.
"""
from __future__ import annotations

import codecs
import json
import re

READ_CHUNK_BYTES = 1 << 20
# One value (an annotation, the categories list) longer than this is a broken file, not data:
# without a cap, a value that never ends would be read (and re-parsed) to the end of the file.
MAX_VALUE_CHARS = 64 << 20
_WHITESPACE = re.compile(r"[ \t\n\r]*")   # JSON's whitespace, exactly


class NotAJsonObject(ValueError):
    """The top-level value of the file is not a JSON object."""


class StreamedArray:
    """The elements of a top-level array, decoded one at a time as it is iterated (once, and
    before `iter_top_level` is asked for its next member)."""

    def __init__(self, elements):
        self._elements = elements

    def __iter__(self):
        return self._elements


def iter_top_level(stream, streamed_keys, chunk_bytes: int = READ_CHUNK_BYTES):
    """Parse a JSON file whose top level is an object without holding more of it than the
    member being decoded: yields (key, value) per member, in file order. A value is decoded
    whole, except the value of a key in `streamed_keys` that is an array: that one is a
    StreamedArray whose elements are decoded one by one (what the caller leaves unread of it
    is skipped). `stream` is a binary file of UTF-8 text, read `chunk_bytes` at a time.

    Raises NotAJsonObject when the top level is another JSON value, and ValueError naming the
    character position for invalid JSON, a truncated file, a value over MAX_VALUE_CHARS or one
    nested too deeply to decode."""
    text = _JsonText(stream, chunk_bytes)
    first = text.next_char()
    if first != "{":
        if first == "":
            raise text.truncated("where a JSON object should begin")
        raise NotAJsonObject(f"the top level is not a JSON object (it starts with {first!r})")
    text.pos += 1
    if text.next_char() == "}":
        text.pos += 1
    else:
        while True:
            key = text.key()
            text.take(":", f"after the key {key!r}")
            if key in streamed_keys and text.next_char() == "[":
                text.pos += 1
                elements = _array_elements(text, key)
                yield key, StreamedArray(elements)
                for _ in elements:
                    pass
            else:
                yield key, text.value(f"the value of {key!r}")
            if text.take(",}", f"after the value of {key!r}") == "}":
                break
    if text.next_char() != "":
        raise text.invalid(text.pos, "extra data after the top-level object")


def _array_elements(text: _JsonText, key: str):
    """The elements of the array whose "[" `text` has just passed, up to and past its "]"."""
    if text.next_char() == "]":
        text.pos += 1
        return
    position = 0
    while True:
        yield text.value(f"{key}[{position}]")
        if text.take(",]", f"after {key}[{position}]") == "]":
            return
        position += 1


class _JsonText:
    """A sliding window over the text of a JSON file: `text[pos:]` is read but not yet parsed,
    and `offset` is the position of `text[0]` in the whole file (for error messages). What has
    been parsed is dropped whenever more is read, so the window stays about one chunk long."""

    def __init__(self, stream, chunk_bytes: int):
        self.stream = stream
        self.chunk_bytes = chunk_bytes
        # utf-8-sig and surrogatepass decode bytes as json.loads does (a BOM is allowed)
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")("surrogatepass")
        # a decoder of its own: the pure-Python scanner keeps state between calls
        self.raw_decode = json.JSONDecoder().raw_decode
        self.text, self.pos, self.offset = "", 0, 0
        self.bytes_read = 0
        self.at_end = False

    def read_more(self) -> bool:
        """Append the next chunk, dropping what is parsed; False at the end of the file. The
        chunk is at least as long as the unparsed text, so a long value is re-parsed only
        O(log(length / chunk)) times while it is completed, never quadratically."""
        if self.at_end:
            return False
        pending = len(self.text) - self.pos
        data = self.stream.read(max(self.chunk_bytes, pending))
        self.at_end = not data
        try:
            added = self.decoder.decode(data, final=self.at_end)
        except UnicodeDecodeError as err:
            raise ValueError(f"not UTF-8 text near byte {self.bytes_read + err.start}: "
                             f"{err.reason}") from None
        self.bytes_read += len(data)
        self.offset += self.pos
        self.text, self.pos = self.text[self.pos:] + added, 0
        return not self.at_end or bool(added)

    def next_char(self) -> str:
        """The next character that is not whitespace (not consumed), "" at the end of the file."""
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.read_more():
                return ""

    def take(self, allowed: str, where: str) -> str:
        """Consume the next character, which must be one of `allowed`."""
        char = self.next_char()
        if char and char in allowed:
            self.pos += 1
            return char
        wanted = " or ".join(repr(c) for c in allowed)
        if char == "":
            raise self.truncated(f"where {wanted} should come {where}")
        raise self.invalid(self.pos, f"expected {wanted} {where}, found {char!r}")

    def key(self) -> str:
        """The next key of the top-level object: a string, as JSON requires."""
        char = self.next_char()
        if char == "":
            raise self.truncated("where a key of the top-level object should begin")
        if char != '"':
            raise self.invalid(self.pos, f"expected a key in double quotes, found {char!r}")
        return self.value("a key of the top-level object")

    def value(self, what: str):
        """Decode the JSON value at the cursor and move past it. A value that does not end in
        the window is retried with more text read, until it ends or reaches MAX_VALUE_CHARS."""
        if self.next_char() == "":
            raise self.truncated(f"where {what} should begin")
        while True:
            try:
                value, end = self.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as err:
                if self.at_end or not self._may_continue(err):
                    raise self._syntax_error(err, what) from None
            except RecursionError:  # the decoder recurses once per level of nesting
                raise self.invalid(self.pos, f"{what} is nested too deeply to decode (more "
                                             "levels than the interpreter's recursion "
                                             "limit)") from None
            else:
                if self.at_end or not _may_be_cut_short(value, len(self.text) - end):
                    self.pos = end
                    return value
            if len(self.text) - self.pos > MAX_VALUE_CHARS:
                raise ValueError(f"{what} at character {self.offset + self.pos} is longer than "
                                 f"{MAX_VALUE_CHARS >> 20} MiB without ending: a broken file")
            self.read_more()

    def _may_continue(self, err: json.JSONDecodeError) -> bool:
        """Whether a decoding error may only mean that the window ends inside the value: the
        decoder stops where the text runs out, or within a literal or a \\uXXXX escape of it
        (so near the end), or reports a string left open (at its start)."""
        return err.pos >= len(self.text) - 16 or err.msg.startswith("Unterminated string")

    def _syntax_error(self, err: json.JSONDecodeError, what: str) -> ValueError:
        if self.at_end and (err.pos >= len(self.text) or err.msg.startswith("Unterminated")):
            return self.truncated(f"inside {what}")
        return self.invalid(err.pos, f"{err.msg} (in {what})")

    def invalid(self, pos: int, message: str) -> ValueError:
        return ValueError(f"invalid JSON at character {self.offset + pos}: {message}")

    def truncated(self, where: str) -> ValueError:
        return ValueError(f"truncated JSON: the file ends at character "
                          f"{self.offset + len(self.text)}, {where}")


def _may_be_cut_short(value, chars_after: int) -> bool:
    """A number is the one JSON value that decodes without error when the window cuts it short
    ("12" of "125", "1" of "1.5" or "1e-5"): trust it only with more than 2 characters after it
    (the longest unfinished tail, "e-", is 2) or at the end of the file."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and chars_after <= 2
