"""A PDF's pages as text: page furniture dropped, headings marked, tables as Markdown rows.

What a reader of the printed page skips is dropped: running heads and feet (a line at the
top or bottom of the page, or written sideways in its margin, that repeats on most pages once
its numbers are ignored: ``Federal Register / Vol. 85, No. 152 / ...``), page numbers, and a
gutter of line numbers (a court transcript's 1-25). Footnotes (small type low on the page) go
after the page's body. Lines set larger than the document's body text become ``#`` headings,
one level per size, so the chunker can give every chunk its section path; tables found on
the page (:mod:`.ruled_tables`) are written as Markdown rows where they stand.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index_rag_pack.documents.pdf.layout import (
    Block,
    Run,
    block_text,
    body_size,
    group_lines,
    reading_order,
)
from llama_index_rag_pack.documents.pdf.stream_tables import PageTable, find_tables
from llama_index_rag_pack.documents.tables import markdown_table

__all__ = ["PageContent", "furniture_keys", "heading_sizes", "page_markdown", "page_tables"]

#: The share of the page's height at its top and at its bottom where running heads and feet,
#: and page numbers, are looked for.
BAND = 0.09
#: Headings are set at least this much larger than the body text.
HEADING_RATIO = 1.15
MAX_HEADING_CHARS = 150
MAX_HEADING_LEVELS = 3
_PAGE_NUMBER = re.compile(
    r"^(?:(?:page|p\.|seite|página|pagina)\s*)?(?:\d{1,5}|[ivxlcdm]{1,7})"
    r"(?:\s*(?:/|of|sur|de|von|-)\s*\d{1,5})?$|^[-–—]\s*\d{1,5}\s*[-–—]$",
    re.I,
)
_GUTTER_NUMBER = re.compile(r"^\d{1,3}$")
_DIGITS = re.compile(r"\d+")
_TABLE_MARK = "\u2063table{}\u2063"  # an invisible separator around a table's place


@dataclass(frozen=True)
class PageContent:
    """What one page holds: its text runs, sideways runs and size."""

    runs: Sequence[Run]
    vertical: Sequence[Run] = ()
    width: float = 612.0
    height: float = 792.0


def _key(text: str) -> str:
    """What a running head keeps from page to page: its words, numbers aside, in any order
    (the page number moves from one side to the other)."""
    return " ".join(sorted(_DIGITS.sub("#", text.casefold()).split()))


def _margin_lines(page: PageContent) -> list[tuple[str, list[Run]]]:
    """The lines in the top and bottom bands, and each sideways run, with their runs."""
    out = []
    for line in group_lines(page.runs):
        top, bottom = min(r.y0 for r in line), max(r.y1 for r in line)
        if bottom <= BAND * page.height or top >= (1 - BAND) * page.height:
            out.append((" ".join(r.text for r in line), line))
    out += [(run.text, [run]) for run in page.vertical]
    return out


def furniture_keys(pages: Sequence[PageContent]) -> set[str]:
    """The running heads and feet of a document: lines in the page margins that repeat (their
    numbers aside) on at least half its pages, and on two pages or more."""
    counts: dict[str, int] = {}
    for page in pages:
        for key in {_key(text) for text, _ in _margin_lines(page)}:
            counts[key] = counts.get(key, 0) + 1
    need = max(2, (len(pages) + 1) // 2)
    return {key for key, n in counts.items() if n >= need and key.strip("#")}


def _drop_furniture(page: PageContent, keys: set[str]) -> tuple[list[Run], list[Run]]:
    gone: set[int] = set()
    for text, runs in _margin_lines(page):
        if _key(text) in keys or _PAGE_NUMBER.match(text.strip()):
            gone.update(id(r) for r in runs)
    runs = [r for r in page.runs if id(r) not in gone]
    vertical = [r for r in page.vertical if id(r) not in gone]
    return _drop_gutter(runs), vertical


def _drop_gutter(runs: list[Run]) -> list[Run]:
    """``runs`` without a line-number gutter: five or more bare numbers left of all the text."""
    numbers = [r for r in runs if _GUTTER_NUMBER.match(r.text.strip())]
    others = [r for r in runs if not _GUTTER_NUMBER.match(r.text.strip())]
    if len(numbers) < 5 or not others:
        return runs
    left = min(r.x0 for r in others)
    gutter = {id(r) for r in numbers if r.x1 < left - 1}
    return runs if len(gutter) < 5 else [r for r in runs if id(r) not in gutter]


def heading_sizes(pages: Sequence[PageContent]) -> dict[float, int]:
    """Font sizes that mark headings in a document, largest first, as heading levels
    (``{18.0: 1, 14.0: 2}``): sizes at least :data:`HEADING_RATIO` times the body's set on
    short lines."""
    runs = [r for p in pages for r in p.runs]
    body = body_size(runs)
    if not body:
        return {}
    sizes = set()
    for page in pages:
        for line in group_lines(page.runs):
            text = " ".join(r.text for r in line)
            size = body_size(line)
            if size >= HEADING_RATIO * body and len(text) <= MAX_HEADING_CHARS:
                sizes.add(round(size))
    ranked = sorted(sizes, reverse=True)[:MAX_HEADING_LEVELS]
    return {float(size): level for level, size in enumerate(ranked, 1)}


def page_tables(page: PageContent, keys: set[str] = frozenset()) -> list[PageTable]:
    """The tables on a page (:func:`~.stream_tables.find_tables`), page furniture aside."""
    runs, _ = _drop_furniture(page, keys)
    return find_tables(runs, body_size(runs)) if runs else []


def page_markdown(
    page: PageContent,
    keys: set[str] = frozenset(),
    headings: dict[float, int] | None = None,
    tables: Sequence[PageTable] = (),
) -> str:
    """One page's text in reading order: paragraphs apart, headings as ``#`` lines, ``tables``
    (:func:`page_tables`) as Markdown rows where they stand, footnotes and sideways text last;
    running heads and feet (``keys``, from :func:`furniture_keys`), page numbers and
    line-number gutters dropped."""
    runs, vertical = _drop_furniture(page, keys)
    tables = list(tables)
    runs = [r for r in runs if not any(t.contains(*_centre(r)) for t in tables)]
    marks = [Run(_TABLE_MARK.format(i), t.x0, t.y0, t.x1, t.y1, 0.0) for i, t in enumerate(tables)]
    blocks = reading_order(runs + marks)
    body = body_size(runs)
    main, notes = [], []
    for block in blocks:
        small = body and 0 < block.size < 0.85 * body and block.y0 > 0.5 * page.height
        (notes if small else main).append(block)
    parts = [_paragraphs(b, headings or {}) for b in main + notes]
    parts += [r.text for r in vertical]
    text = "\n\n".join(p for p in parts if p.strip())
    for i, table in enumerate(tables):
        text = text.replace(_TABLE_MARK.format(i), f"\n\n{markdown_table(table.rows)}\n\n")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _centre(run: Run) -> tuple[float, float]:
    return (run.x0 + run.x1) / 2, run.middle


def _paragraphs(block: Block, headings: dict[float, int]) -> str:
    """A block's text; lines set in a heading size become ``#`` lines of their own."""
    pieces: list[tuple[int, list[Run]]] = []
    for line in group_lines(block.runs):
        level = headings.get(float(round(body_size(line)))) or 0
        if pieces and pieces[-1][0] == level:
            pieces[-1][1].extend(line)
        else:
            pieces.append((level, list(line)))
    out = []
    for level, runs in pieces:
        text = block_text(Block(tuple(runs)))
        if level and len(text) <= MAX_HEADING_CHARS:
            out.append(f"{'#' * level} {text}")
        else:
            out.append(text)
    return "\n\n".join(out)
