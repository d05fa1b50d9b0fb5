"""Reading order of a page's text runs: lines, columns and blocks, by recursive XY-cut.

A PDF page is a set of positioned text runs (what PDFium reports as text rectangles), in the
order the file happens to draw them: footnotes before the body, the right column before the
left. This module puts them in reading order. The page is cut recursively at the whitespace
that runs all the way across it: down a gutter between columns first (left column, then
right), else across the widest gap between lines (top, then bottom), until a block is left
whose lines are read top to bottom. Within a block, words hyphenated across lines are joined
and ligatures spelled out.

Coordinates are the displayed page's, in points: ``x`` grows to the right, ``y`` downwards
(a rotated page is already turned upright by the caller).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Block",
    "Run",
    "block_text",
    "body_size",
    "group_lines",
    "join_lines",
    "reading_order",
]

#: Ligature characters and what they spell (PDF fonts draw "fi" as one glyph).
LIGATURES = str.maketrans(
    {
        "\ufb00": "ff",
        "\ufb01": "fi",
        "\ufb02": "fl",
        "\ufb03": "ffi",
        "\ufb04": "ffl",
        "\ufb05": "st",
        "\ufb06": "st",
        "\u0132": "IJ",
        "\u0133": "ij",
    }
)
_SOFT_HYPHENS = "\u00ad\u0002"  # PDFium reports a line-end hyphen as U+0002 or U+00AD
_HYPHENS = "-" + _SOFT_HYPHENS
_HYPHENATED_LOWER = re.compile(r"(?<=[a-zà-ÿß])[-\u00ad\u0002]$")


@dataclass(frozen=True)
class Run:
    """A piece of text on one line of the page and its box.

    Attributes:
        text: The run's text (no line breaks).
        x0: Left edge, in points from the page's left.
        y0: Top edge, in points from the page's top.
        x1: Right edge.
        y1: Bottom edge.
        size: Font size in points (0: unknown).
    """

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    size: float = 0.0

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 0.1)

    @property
    def middle(self) -> float:
        return (self.y0 + self.y1) / 2


@dataclass(frozen=True)
class Block:
    """Runs read together (a paragraph, a column's part, a heading), in reading order."""

    runs: tuple[Run, ...]

    @property
    def y0(self) -> float:
        return min(r.y0 for r in self.runs)

    @property
    def size(self) -> float:
        """The font size of most of its characters (0: unknown)."""
        return body_size(self.runs)


def body_size(runs: Sequence[Run]) -> float:
    """The font size most characters of ``runs`` are set in (0 when none is known)."""
    weights: dict[float, int] = {}
    for run in runs:
        if run.size > 0:
            key = round(run.size, 1)
            weights[key] = weights.get(key, 0) + len(run.text.strip())
    return max(weights, key=lambda k: (weights[k], -k)) if weights else 0.0


def group_lines(runs: Sequence[Run]) -> list[list[Run]]:
    """``runs`` grouped into lines (runs whose middles lie within half a line of each other),
    top to bottom, each line's runs left to right."""
    lines: list[list[Run]] = []
    total = 0.0  # the sum of the middles of the last line's runs
    for run in sorted(runs, key=lambda r: (r.middle, r.x0)):
        if lines:
            last = lines[-1]
            middle = total / len(last)
            if abs(run.middle - middle) <= 0.5 * min(run.height, last[0].height):
                last.append(run)
                total += run.middle
                continue
        lines.append([run])
        total = run.middle
    return [sorted(line, key=lambda r: r.x0) for line in lines]


def _line_text(line: Sequence[Run]) -> str:
    parts: list[str] = []
    previous: Run | None = None
    for run in line:
        text = run.text
        if previous is not None and parts and not parts[-1].endswith(" "):
            gap = run.x0 - previous.x1
            if gap > 0.25 * max(run.size or run.height, 1.0) and not text.startswith(" "):
                parts.append(" ")
        parts.append(text)
        previous = run
    return " ".join("".join(parts).split())


def join_lines(lines: Sequence[str]) -> str:
    """Lines of one block as one paragraph: a word hyphenated at a line's end is joined with
    its end on the next line (``min-`` + ``utes`` = ``minutes``); a hyphen after a capital or
    a digit is a compound's and stays (``FAA-`` + ``approved`` = ``FAA-approved``); other lines
    are joined with a space; ligatures are spelled out.

    Example:
        >>> join_lines(["The meeting lasted ninety min-", "utes and ended at noon."])
        'The meeting lasted ninety minutes and ended at noon.'
        >>> join_lines(["the FAA-", "approved plan"])
        'the FAA-approved plan'
        >>> join_lines(["A well-", "Known name"])
        'A well- Known name'
    """
    out = ""
    for raw in lines:
        line = raw.translate(LIGATURES).strip()
        if not line:
            continue
        if out and out[-1] in _HYPHENS and line[0].islower():
            joint = "" if _HYPHENATED_LOWER.search(out[-2:]) else "-"
            out = out[:-1] + joint + line
        elif out:
            out = f"{out[:-1] + '-' if out[-1] in _SOFT_HYPHENS else out} {line}"
        else:
            out = line
    return out.replace("\u0002", "").replace("\u00ad", "")


def block_text(block: Block) -> str:
    """A block's text: its lines joined into one paragraph (:func:`join_lines`)."""
    return join_lines([_line_text(line) for line in group_lines(block.runs)])


def reading_order(runs: Sequence[Run]) -> list[Block]:
    """``runs`` cut into blocks in reading order (recursive XY-cut).

    A region is cut down a vertical gap that crosses it from top to bottom, at least 0.6 of
    its body text's font size wide and with two lines or more on each side (columns, read left
    to right; a few wide runs bridging the gutters are read before or after them); else across
    its widest horizontal gaps between lines, when those are wider than its usual line spacing
    (read top to bottom); else it is one block.

    Example:
        >>> left = [Run(f"left {i}", 0, 12 * i, 80, 12 * i + 10, 10) for i in range(3)]
        >>> right = [Run(f"right {i}", 100, 12 * i, 180, 12 * i + 10, 10) for i in range(3)]
        >>> [block_text(b) for b in reading_order(right + left)]
        ['left 0 left 1 left 2', 'right 0 right 1 right 2']
    """
    runs = [r for r in runs if r.text.strip()]
    if not runs:
        return []
    size = body_size(runs) or statistics.median(r.height for r in runs)
    return [Block(tuple(part)) for part in _cut(runs, size, 0)]


def _cut(runs: list[Run], size: float, depth: int) -> list[list[Run]]:
    if len(runs) <= 1 or depth > 60:
        return [runs]
    columns = _columns(runs, size)
    if len(columns) > 1:
        return [block for column in columns for block in _cut(column, size, depth + 1)]
    bands = _bands(runs, size)
    if len(bands) > 1:
        return [block for band in bands for block in _cut(band, size, depth + 1)]
    return [runs]


def _gaps(intervals: list[tuple[float, float]], minimum: float) -> list[float]:
    """The middles of the uncovered stretches at least ``minimum`` wide between ``intervals``."""
    intervals.sort()
    cuts = []
    reach = intervals[0][1]
    for start, end in intervals[1:]:
        if start - reach >= minimum:
            cuts.append((reach + start) / 2)
        reach = max(reach, end)
    return cuts


def _split(runs: list[Run], cuts: list[float], key: str) -> list[list[Run]]:
    parts: list[list[Run]] = [[] for _ in range(len(cuts) + 1)]
    for run in runs:
        position = run.x0 if key == "x" else run.y0
        index = sum(1 for c in cuts if position > c)
        parts[index].append(run)
    return [p for p in parts if p]


def _columns(runs: list[Run], size: float) -> list[list[Run]]:
    """``runs`` cut down the gutters that cross the region, left to right; where a few wide
    runs (a title, a rule of text across the page) bridge the gutters, they are read before
    or after the columns, by where they stand."""
    parts = _column_parts(runs, size)
    if len(parts) > 1:
        return parts
    width = max(r.x1 for r in runs) - min(r.x0 for r in runs)
    wide = [r for r in runs if r.x1 - r.x0 > 0.5 * width]
    if not wide or len(wide) > 0.2 * len(runs):
        return [runs]
    narrow = [r for r in runs if r.x1 - r.x0 <= 0.5 * width]
    parts = _column_parts(narrow, size)
    if len(parts) < 2:
        return [runs]
    top = min(r.y0 for r in narrow)
    above = [r for r in wide if r.y1 <= top + 0.5 * size]
    below = [r for r in wide if r.y1 > top + 0.5 * size]
    return [p for p in (above, *parts, below) if p]


def _column_parts(runs: list[Run], size: float) -> list[list[Run]]:
    if not runs:
        return [runs]
    cuts = _gaps([(r.x0, r.x1) for r in runs], max(0.6 * size, 4.0))
    if not cuts:
        return [runs]
    parts = _split(runs, cuts, "x")
    if any(len(group_lines(p)) < 2 for p in parts):
        return [runs]  # a single line with wide gaps (a table row, a header) is no column
    return parts


def _bands(runs: list[Run], size: float) -> list[list[Run]]:
    """``runs`` cut across at the horizontal gaps that stand out from the line spacing."""
    intervals = [(r.y0, r.y1) for r in runs]
    cuts = _gaps(intervals, 0.01)
    if not cuts:
        return [runs]
    widths = _gap_widths(intervals)
    widest = max(widths)
    usual = statistics.median(widths)
    if widest < max(0.5 * size, 1.6 * usual):
        return [runs]  # even line spacing: one block
    keep = [c for c, w in zip(cuts, widths, strict=True) if w >= max(0.75 * widest, 1.2 * usual)]
    return _split(runs, keep, "y")


def _gap_widths(intervals: list[tuple[float, float]]) -> list[float]:
    intervals = sorted(intervals)
    widths = []
    reach = intervals[0][1]
    for start, end in intervals[1:]:
        if start - reach >= 0.01:
            widths.append(start - reach)
        reach = max(reach, end)
    return widths
