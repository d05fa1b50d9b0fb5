"""Tables on a PDF page found from where its text stands: rows of short cells whose columns
line up, ruled or not, on upright or rotated pages.

Statistics and spending tables are drawn with few rules or none (a ruled-table finder cuts
them into groups of five rows, or finds one cell holding a whole column), so tables are found
from the text runs themselves, the way a reader sees them: several lines in a row, each of at
least :data:`MIN_COLUMNS` short pieces of text, whose gaps fall at the same places. A column's
boundaries are the stretches of the page that nearly no row of the table covers. A line in a
table with fewer pieces (a wrapped description, a second line of a name) continues the row
above it. Multi-column prose is not a table: its pieces are long lines of text.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index_rag_pack.documents.pdf.layout import Run, group_lines

__all__ = ["MIN_COLUMNS", "MIN_ROWS", "PageTable", "find_tables"]

MIN_COLUMNS = 3
_NUMBER = re.compile(r"^[(\-–−+$€£]?[\d][\d.,]*%?\)?$|^[-–—*]$")
MIN_ROWS = 3
#: A table's cells are short: the median piece of a row is at most this many characters.
MAX_MEDIAN_CELL_CHARS = 30
#: ... and at most this many words less one (lines of a prose column hold more).
MAX_MEDIAN_CELL_WORDS = 4
#: A column boundary is a stretch of the page at most this share of the table's rows cover.
MAX_BOUNDARY_COVER = 0.15


@dataclass(frozen=True)
class PageTable:
    """A table found on a page: its box on the upright page and its rows (header first)."""

    x0: float
    y0: float
    x1: float
    y1: float
    rows: tuple[tuple[str, ...], ...]

    def contains(self, x: float, y: float) -> bool:
        return self.x0 - 1 <= x <= self.x1 + 1 and self.y0 - 1 <= y <= self.y1 + 1


def find_tables(runs: Sequence[Run], size: float) -> list[PageTable]:
    """The tables among a page's ``runs`` (body text ``size`` points), top to bottom.

    Example:
        >>> def row(y, *cells):
        ...     return [Run(c, 100 * i, y, 100 * i + 40, y + 8, 8) for i, c in enumerate(cells)]
        >>> runs = row(0, "State", "Permits", "Checks") + row(10, "Alabama", "18,870", "23,022")
        >>> runs += row(20, "Alaska", "209", "3,062") + row(30, "Arizona", "2,303", "12,382")
        >>> find_tables(runs, 8)[0].rows[2]
        ('Alaska', '209', '3,062')
    """
    lines = [_phrases(line, size) for line in group_lines(runs)]
    tables = []
    for start, end in _regions(lines):
        table = _table(lines[start:end], size)
        if table is not None:
            tables.append(table)
    return tables


def _numbers_apart(run: Run) -> list[Run]:
    """A run of two numbers or more (``23.65 20.81 3.04``, drawn as one piece of text) as one
    run per number, each placed by its characters' share of the run's width."""
    tokens = run.text.split()
    if len(tokens) < 2 or not all(_NUMBER.match(t) for t in tokens):
        return [run]
    width = (run.x1 - run.x0) / max(len(run.text), 1)
    out, offset = [], 0
    for token in tokens:
        offset = run.text.index(token, offset)
        x0 = run.x0 + offset * width
        out.append(Run(token, x0, run.y0, x0 + len(token) * width, run.y1, run.size))
        offset += len(token)
    return out


def _phrases(line: list[Run], size: float) -> list[Run]:
    """A line's runs with the ones a word space apart merged: one piece per cell (a run of
    numbers is one piece per number)."""
    out: list[Run] = []
    for run in [piece for whole in line for piece in _numbers_apart(whole)]:
        last = out[-1] if out else None
        numbers = last is not None and _NUMBER.match(last.text) and _NUMBER.match(run.text)
        if last is not None and not numbers and run.x0 - last.x1 < 0.4 * max(size, 1.0):
            out[-1] = Run(
                f"{last.text} {run.text}",
                last.x0,
                min(last.y0, run.y0),
                max(last.x1, run.x1),
                max(last.y1, run.y1),
                last.size,
            )
        else:
            out.append(run)
    return out


def _is_row(line: list[Run]) -> bool:
    return len(line) >= MIN_COLUMNS


def _regions(lines: list[list[Run]]) -> list[tuple[int, int]]:
    """Stretches of lines that hold :data:`MIN_ROWS` rows or more; up to three other lines in
    a row inside one (wrapped cells, a header on several lines) belong to it."""
    regions = []
    start = None
    other = 0
    for i, line in enumerate([*lines, []]):
        if line and _is_row(line):
            if start is None:
                start = i
            other = 0
            end = i + 1
            continue
        other += 1
        if start is not None and (other > 3 or not line):
            if sum(_is_row(x) for x in lines[start:end]) >= MIN_ROWS:
                regions.append((start, end))
            start = None
    return regions


def _table(lines: list[list[Run]], size: float) -> PageTable | None:
    rows = [line for line in lines if _is_row(line)]
    pieces = [p.text for line in rows for p in line]
    if (
        statistics.median(len(p) for p in pieces) > MAX_MEDIAN_CELL_CHARS
        or statistics.median(len(p.split()) for p in pieces) >= MAX_MEDIAN_CELL_WORDS
    ):
        return None  # columns of prose, not a table
    bounds = _boundaries(rows, size)
    if len(bounds) + 1 < MIN_COLUMNS:
        return None
    grid: list[list[str]] = []
    for line in lines:
        cells = [""] * (len(bounds) + 1)
        for piece in line:
            column = sum(1 for b in bounds if piece.x0 > b)
            cells[column] = f"{cells[column]} {piece.text}".strip()
        if grid and not _is_row(line):  # a wrapped cell: it goes on in the row above
            grid[-1] = [f"{a} {b}".strip() for a, b in zip(grid[-1], cells, strict=True)]
        else:
            grid.append(cells)
    keep = [j for j in range(len(bounds) + 1) if any(row[j] for row in grid)]
    table_rows = tuple(tuple(row[j] for j in keep) for row in grid if any(row))
    pieces = [p for line in lines for p in line]
    return PageTable(
        min(p.x0 for p in pieces),
        min(p.y0 for p in pieces),
        max(p.x1 for p in pieces),
        max(p.y1 for p in pieces),
        table_rows,
    )


def _boundaries(rows: list[list[Run]], size: float) -> list[float]:
    """The x positions between columns: the middles of stretches, at least a third of the
    body size wide, that at most :data:`MAX_BOUNDARY_COVER` of ``rows`` cover with text."""
    left = min(p.x0 for line in rows for p in line)
    right = max(p.x1 for line in rows for p in line)
    step = 0.5
    bins = int((right - left) / step) + 1
    cover = [0] * bins
    for line in rows:
        for piece in line:
            for b in range(int((piece.x0 - left) / step), int((piece.x1 - left) / step) + 1):
                cover[min(b, bins - 1)] += 1
    limit = MAX_BOUNDARY_COVER * len(rows)
    bounds = []
    start = None
    for b, count in enumerate([*cover, len(rows) + 1]):
        if count <= limit and start is None:
            start = b
        elif count > limit and start is not None:
            if (b - start) * step >= max(size, 3.0) / 3 and start > 0 and b < bins:
                bounds.append(left + (start + b) / 2 * step)
            start = None
    return bounds
