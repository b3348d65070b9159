"""One pass over a QuickDraw category file that keeps the best-ranked eligible drawings, paying
the full parse only for lines that can be kept (`FileScan`)."""
from __future__ import annotations

import hashlib
import heapq
import re
from collections import Counter

from proactivebench_builder.transforms.api import BadItem, fileio

# A line as the real files write it: compact JSON, the fields in this order, ASCII only, the
# drawing made of integers, commas and brackets. Such a line is checked by this pattern alone
# unless it can enter the kept ranks; any other line is parsed in full (`QuickDraw._parse_line`).
CANONICAL_LINES = re.compile(
    rb'^\{"word":"([^"\\\[\]\x80-\xff\r\n]*)","countrycode":"[^"\\\[\]\x80-\xff\r\n]*",'
    rb'"timestamp":"[^"\\\[\]\x80-\xff\r\n]*","recognized":(true|false),"key_id":"([0-9]+)",'
    rb'"drawing":\[\[\[[0-9,\[\]]*\]\]\]\}\r?\n', re.MULTILINE)

READ_BYTES = 4 << 20        # whole lines are scanned a block at a time

MAX_LINE_BYTES = 16 << 20   # a real line is a few kB; a longer one is a dead letter, skipped

STROKE_SEPARATOR = b"]],[["  # between two strokes of a compact drawing, and nowhere else

BOM = b"\xef\xbb\xbf"

def duplicate(key: bytes) -> str:
    return f"duplicate key: key_id {key.decode('utf-8')} seen twice"

class FileScan:
    """One pass over a category file that keeps the `capacity` best-ranked eligible drawings.

    What "every line counts" means here: every non-blank line is a raw item and ends as a
    dead letter, an exclusion or an eligible drawing. Every line is checked cheaply: a line
    in the real files' canonical form (`CANONICAL_LINES`) is structurally checked by the
    pattern (valid ASCII JSON framing, the fields present and typed, a drawing of integers),
    its key, recognised flag and stroke count read from it; any other line is parsed in full.
    The full stroke validation (x and y of equal length, coordinates in range) is paid only
    by a drawing whose rank enters the kept ranks: if it fails, it is a dead letter and the
    next rank takes its place, so the kept drawings are exactly those a full parse of every
    line keeps. A canonical-looking line whose strokes are broken but that ranks outside the
    kept ranks (or has too few strokes) is counted as that exclusion instead of a dead
    letter: its bytes are never used. Such a line still claims its key_id, so a later line
    repeating that key is the duplicate (a full parse would have dropped the broken line and
    kept the later one): the kept drawings equal a full parse's whenever no key_id repeats,
    and a repeated key is itself a fault of the file, counted either way. A UTF-8 BOM at the
    start and blank lines are not items.
    An error inside one line is that line's dead letter; an I/O error part way is one more
    dead letter for the unread rest, and what was read still counts."""

    def __init__(self, scenario, unit: str, category: str, capacity: int):
        self.scenario, self.unit, self.category = scenario, unit, category
        self.capacity = capacity
        self.known = category in set(scenario.manifest["classes"])
        self.min_strokes = int(scenario.params.get("min_strokes", 2))
        self.raw_items, self.eligible = 0, 0
        self.excluded = Counter()
        self.bad: list[tuple[str, str]] = []  # (path, reason) in line order
        self.heap: list = []  # (-rank, key_id, line number, strokes): the smallest ranks
        self.seen: set = set()  # key ids (bytes) read so far
        self.worst = b""  # the rank (md5 digest) of the worst kept drawing, once the heap is full
        self.word = category.encode("utf-8")
        # hash_rank(seed, name, "test", f"{category}/{key_id}") with the common prefix hashed once
        self.rank_prefix = hashlib.md5("\x1f".join(
            (str(scenario.seed), scenario.name, "test", f"{category}/")).encode("utf-8"))

    def run(self) -> None:
        """Read the file once, a block of whole lines at a time: the canonical lines of a block
        are found by one `finditer` (C speed), and each costs only `canonical`'s few steps
        (a set lookup, a stroke count, an md5 of the key: a rank is compared as digest bytes,
        which order as the integers `hash_rank` makes); other lines go to `other_line`."""
        self.lines_done = 0
        try:
            # a category file linked out of the sources root is the unit's dead letter
            with fileio.open_source(self.scenario.inside_root(self.unit)) as handle:
                pending, first, skipping = b"", True, False
                while True:
                    data = handle.read(READ_BYTES)
                    if first and data.startswith(BOM):
                        data = data[len(BOM):]
                    first = False
                    if not data:
                        if pending and not skipping:
                            self.scan_block(pending + b"\n")
                        break
                    if skipping:  # the rest of an over-long line
                        end = data.find(b"\n")
                        if end < 0:
                            continue
                        data, skipping = data[end + 1:], False
                        self.lines_done += 1
                    block = pending + data
                    cut = block.rfind(b"\n") + 1
                    if cut == 0 and len(block) > MAX_LINE_BYTES:
                        self.raw_items += 1
                        self.bad.append((f"{self.unit}:{self.lines_done + 1}",
                                         f"malformed ndjson line: longer than "
                                         f"{MAX_LINE_BYTES >> 20} MiB"))
                        pending, skipping = b"", True
                        continue
                    pending = block[cut:]
                    if cut:
                        self.scan_block(block[:cut])
        except Exception as err:  # noqa: BLE001 - I/O part way: the unread rest is one item
            if fileio.is_store_client_error(err):  # the store failed, not this input
                raise
            self.raw_items += 1
            number = self.lines_done + 1
            where = f"{self.unit}:{number}" if self.lines_done else self.unit
            self.bad.append((where, f"unreadable source unit from line {number}: "
                                    f"{type(err).__name__}: {err}"))

    def scan_block(self, block: bytes) -> None:
        """Whole lines (`block` ends with a newline), the first numbered `lines_done` + 1."""
        self.block, self.mark, self.mark_line = block, 0, self.lines_done + 1
        pos = 0
        finditer = CANONICAL_LINES.finditer if self.known else (lambda _: ())
        seen, word, prefix = self.seen, self.word, self.rank_prefix
        min_strokes, capacity = self.min_strokes, self.capacity
        for found in finditer(block):
            start, end = found.span()
            if start != pos:  # other lines in between
                self.other_lines(pos, start)
            pos = end
            self.raw_items += 1
            line_word, flag, key = found.groups()
            if line_word != word:
                self.bad.append((self.where(start), self.wrong_word(line_word)))
            elif key in seen:
                self.bad.append((self.where(start), duplicate(key)))
            else:
                seen.add(key)
                if flag != b"true":
                    self.excluded["not_recognized"] += 1
                elif (block.find(STROKE_SEPARATOR, start, pos) < 0 if min_strokes == 2
                      else block.count(STROKE_SEPARATOR, start, pos) + 1 < min_strokes):
                    self.excluded["too_few_strokes"] += 1
                else:
                    digest = prefix.copy()
                    digest.update(key)
                    rank = digest.digest()
                    if len(self.heap) >= capacity and rank > self.worst:
                        self.eligible += 1  # ranked out: its strokes are never needed
                    else:
                        self.enter(block[start:pos], self.line_of(start), key, rank, None)
        if pos != len(block):
            self.other_lines(pos, len(block))
        self.lines_done += block.count(b"\n")

    def line_of(self, offset: int) -> int:
        """The line number at `offset` of the block (offsets asked for only grow)."""
        self.mark_line += self.block.count(b"\n", self.mark, offset)
        self.mark = offset
        return self.mark_line

    def where(self, offset: int) -> str:
        return f"{self.unit}:{self.line_of(offset)}"

    def other_lines(self, start: int, end: int) -> None:
        for line in self.block[start:end].split(b"\n")[:-1]:
            self.other_line(line, self.line_of(start))
            start += len(line) + 1

    def other_line(self, line: bytes, number: int) -> None:
        """A line not in the canonical form: not an item when blank (or only a BOM), else
        parsed in full at once; any error inside it is its own dead letter."""
        line = line.rstrip(b"\r\n")
        if not line or line.isspace():
            return
        self.raw_items += 1
        try:
            if not self.known:
                raise BadItem(f"unknown class: {self.category!r}")
            record = self.scenario._parse_line(line, self.category)
            key = record["key_id"].encode("utf-8")
            if key in self.seen:
                raise BadItem(duplicate(key))
            self.seen.add(key)
            if not record["recognized"]:
                self.excluded["not_recognized"] += 1
                return
            if len(record["strokes"]) < self.min_strokes:
                self.excluded["too_few_strokes"] += 1
                return
            digest = self.rank_prefix.copy()
            digest.update(key)
            rank = digest.digest()
            if len(self.heap) >= self.capacity and rank > self.worst:
                self.eligible += 1
                return
            self.enter(line, number, key, rank, record["strokes"])
        except BadItem as err:
            self.bad.append((f"{self.unit}:{number}", err.reason))
        except Exception as err:  # noqa: BLE001 - one line's fault is that line's
            self.bad.append((f"{self.unit}:{number}",
                             f"unreadable drawing: {type(err).__name__}: {err}"))

    def enter(self, line: bytes, number: int, key: bytes, rank: bytes, strokes) -> None:
        """A drawing whose rank enters the kept ranks: validated in full now (a canonical
        line's strokes were not parsed yet). If it fails it is a dead letter, as if never read
        (its key is free again, as a full parse of every line would have left it)."""
        if strokes is None:
            try:
                strokes = self.scenario._parse_line(line.rstrip(b"\r\n"), self.category)["strokes"]
            except BadItem as err:
                self.seen.discard(key)
                self.bad.append((f"{self.unit}:{number}", err.reason))
                return
            except Exception as err:  # noqa: BLE001
                self.seen.discard(key)
                self.bad.append((f"{self.unit}:{number}",
                                 f"unreadable drawing: {type(err).__name__}: {err}"))
                return
        self.eligible += 1
        entry = (-int.from_bytes(rank, "big"), key.decode("utf-8"), number, strokes)
        if len(self.heap) < self.capacity:
            heapq.heappush(self.heap, entry)  # a max-heap of the smallest ranks
        else:
            heapq.heapreplace(self.heap, entry)
        self.worst = (-self.heap[0][0]).to_bytes(16, "big")

    def wrong_word(self, word: bytes) -> str:
        return f"inconsistent record: word {word.decode()!r} in the file of {self.category!r}"

    def ranked(self) -> list[tuple]:
        """(key_id, line number, strokes) of the kept drawings, best rank first."""
        return [(key, number, strokes)
                for _, key, number, strokes in sorted(self.heap, key=lambda e: -e[0])]
