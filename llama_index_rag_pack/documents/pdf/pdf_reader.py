"""Reading a PDF file page by page: PDFium's text layer in reading order, ruled tables as
Markdown rows, scanned pages read by OCR, and the section each page starts in.

Each page gives its text (:mod:`.page_text`), its label (``"iv"``, ``"3"``, as the PDF numbers
it) and the section path it starts in (from the PDF's outline, else from headings set in a
larger font). A page without a usable text layer (a scan, or fonts that map no characters) is
read by OCR when OCR is on (:mod:`.ocr`), or skipped with a reason that says how to turn it on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index_rag_pack.documents.pdf.ocr_pages import OcrOptions, file_digest, ocr_pages
from llama_index_rag_pack.documents.pdf.page_text import (
    PageContent,
    furniture_keys,
    heading_sizes,
    page_markdown,
    page_tables,
)
from llama_index_rag_pack.documents.pdf.stream_tables import PageTable
from llama_index_rag_pack.documents.pdf.text_layer import (
    FEW_TEXT_CHARS,
    PDFIUM_LOCK,
    image_cover,
    page_layer,
    unusable_reason,
)
from llama_index_rag_pack.documents.sections import Heading, outline_headings, section_after

__all__ = ["PdfPage", "PdfRead", "UnreadablePdfError", "read_pdf"]

logger = logging.getLogger(__name__)


class UnreadablePdfError(Exception):
    """A PDF that cannot be read at all; the message says why and what to do."""


@dataclass(frozen=True)
class PdfPage:
    """One page's text and where it stands.

    Attributes:
        index: The page's position in the file, from 0.
        label: Its page label as the PDF numbers it (``"iv"``, ``"3"``).
        text: Its text: paragraphs, ``#`` headings, Markdown tables.
        section: The headings it starts under, (level, title), outer first.
        ocr: The OCR engine that read it, or ``None`` for its text layer.
    """

    index: int
    label: str
    text: str
    section: tuple[Heading, ...] = ()
    ocr: str | None = None


@dataclass
class PdfRead:
    """A PDF's pages with text, and why each other page was left out."""

    pages: list[PdfPage] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def read_pdf(path: Path, options: OcrOptions | None = None) -> PdfRead:
    """The pages of the PDF at ``path`` with their text (see the module docstring).

    Raises:
        UnreadablePdfError: encrypted with a password, damaged beyond repair, or not a PDF.
    """
    import pypdfium2 as pdfium

    options = options or OcrOptions()
    with PDFIUM_LOCK:  # PDFium is not thread-safe: one file at a time in a process
        try:
            document = pdfium.PdfDocument(str(path))
        except pdfium.PdfiumError as e:
            raise UnreadablePdfError(_open_error(e)) from e
        try:
            return _read(document, path, options)
        finally:
            document.close()


def _open_error(error: Exception) -> str:
    message = str(error)
    if "password" in message.lower():
        return (
            "the PDF is encrypted with a password; save an unencrypted copy (print to PDF, or "
            "qpdf --decrypt --password=... in.pdf out.pdf) and index that"
        )
    return (
        f"the PDF cannot be read ({message.rstrip('.')}); it may be damaged or truncated: open "
        "and re-save (or re-export) it as PDF, or save its text as .txt"
    )


#: Pages read together: running heads, heading sizes and continued tables are found among
#: them, and only their text runs are held in memory at once, however long the PDF.
BLOCK_PAGES = 200


def _read(document: Any, path: Path, options: OcrOptions) -> PdfRead:
    read = PdfRead()
    outline = outline_headings(_outline(document))
    digest = file_digest(path)
    state = _Carried()
    for first in range(0, len(document), BLOCK_PAGES):
        indices = range(first, min(first + BLOCK_PAGES, len(document)))
        _read_block(document, path, digest, indices, outline, options, read, state)
    return read


@dataclass
class _Carried:
    """What one block of pages hands the next: the headings open at its end and its running
    heads and feet (a short last block has too few pages to find them again)."""

    section: tuple[Heading, ...] = ()
    furniture: set[str] = field(default_factory=set)


def _read_block(
    document: Any,
    path: Path,
    digest: str,
    indices: range,
    outline: dict[int, list[Heading]],
    options: OcrOptions,
    read: PdfRead,
    state: _Carried,
) -> None:
    """Read the pages ``indices`` into ``read``, carrying ``state`` from block to block."""
    contents: dict[int, PageContent] = {}
    unusable: dict[int, str] = {}
    pictures: set[int] = set()  # pages with a text layer, read by OCR too
    for index in indices:
        page = document[index]
        try:
            layer = page_layer(page)
            reason = unusable_reason(layer.text)
            if reason is None and _mostly_picture(page, layer.text):
                reason = "mostly a picture, with little text in its text layer"
                pictures.add(index)
        finally:
            page.close()
        contents[index] = PageContent(layer.runs, layer.vertical, layer.width, layer.height)
        if reason is not None:
            unusable[index] = reason
    usable = [i for i in indices if i not in unusable or i in pictures]
    keys = state.furniture = furniture_keys([contents[i] for i in usable]) | state.furniture
    tables = {i: page_tables(contents[i], keys) for i in usable}
    _continue_headers(contents, tables)
    sizes = {} if outline else heading_sizes([contents[i] for i in usable])
    texts = {i: page_markdown(contents[i], keys, sizes, tables[i]) for i in usable}
    contents.clear()
    skipped: list[str] = []
    ocr_texts = ocr_pages(document, path, digest, unusable, skipped, options)
    # a picture page OCR did not read keeps its text layer (a caption, a label) unremarked
    unread = tuple(f"page {i + 1}:" for i in pictures if i not in ocr_texts)
    read.skipped += [reason for reason in skipped if not reason.startswith(unread)]
    for index in indices:
        text, engine = texts.get(index), None
        if index in ocr_texts:
            layer_text = text if index in pictures else None
            text, engine = ocr_texts[index]
            if layer_text and layer_text.strip() not in text:
                text = f"{text}\n\n{layer_text}"
        text = _with_outline(text or "", outline.get(index, ()))
        if text.strip():
            label = _label(document, index)
            read.pages.append(PdfPage(index, label, text, state.section, engine))
        state.section = section_after(text, state.section)


def _mostly_picture(page: Any, text: str) -> bool:
    """A page with a text layer of a few words that is mostly a picture (a scanned figure)."""
    if len(text) > 4 * FEW_TEXT_CHARS or sum(ch.isalnum() for ch in text) >= FEW_TEXT_CHARS:
        return False
    return image_cover(page) >= 0.5


def _continue_headers(contents: Sequence[PageContent], tables: dict[int, list[PageTable]]) -> None:
    """A table that goes on from the page before without its header row gets that header:
    the last table of a page, low on it, and the first table of the next page, high on it,
    with as many columns, where the earlier header holds no number and the new first row does."""
    for index in sorted(tables):
        before_tables, after_tables = tables.get(index - 1), tables[index]
        if not before_tables or not after_tables:
            continue
        before, after = contents[index - 1], contents[index]
        last, first = before_tables[-1], after_tables[0]
        header, row = last.rows[0], first.rows[0]
        if (
            len(header) == len(row)
            and last.y1 > 0.5 * before.height
            and first.y0 < 0.5 * after.height
            and header != row
            and not any(_has_digit(c) for c in header)
            and any(_has_digit(c) for c in row)
        ):
            after_tables[0] = PageTable(
                first.x0, first.y0, first.x1, first.y1, (header, *first.rows)
            )


def _has_digit(text: str) -> bool:
    return any(ch.isdigit() for ch in text)


def _outline(document: Any) -> list[tuple[int, str, int]]:
    """The PDF's outline (bookmarks) as (level, title, page index) entries."""
    out = []
    try:
        for bookmark in document.get_toc(max_depth=6):
            title, dest = " ".join(bookmark.get_title().split()), bookmark.get_dest()
            index = dest.get_index() if dest is not None else None
            if title and index is not None and index >= 0:
                out.append((bookmark.level, title, index))
    except Exception as e:  # a damaged outline: read without it
        logger.debug("Outline unreadable (%s)", e)
    return out


def _with_outline(text: str, headings: Sequence[tuple[int, str]]) -> str:
    """``text`` with the outline's headings of its page as ``#`` lines: where the page's text
    starts a paragraph with the title, there; else at the top of the page."""
    top: list[str] = []
    for level, title in headings:
        line = f"{'#' * level} {title}"
        position = _paragraph_starting(text, title)
        if position is None:
            top.append(line)
        else:
            text = f"{text[:position]}{line}\n\n{text[position:]}"
    return "\n\n".join([*top, text]) if top else text


def _paragraph_starting(text: str, title: str) -> int | None:
    wanted = title.casefold()
    position = 0
    for paragraph in text.split("\n\n"):
        bare = paragraph.lstrip("#").strip().casefold()
        if bare.startswith(wanted):
            return position if not paragraph.startswith("#") else None
        position += len(paragraph) + 2
    return None


def _label(document: Any, index: int) -> str:
    try:
        label = document.get_page_label(index)
    except Exception:
        label = ""
    return label.strip() if isinstance(label, str) and label.strip() else str(index + 1)
