"""PDF and image files as LlamaIndex documents: one per page (or image frame) with text.

The reading itself is :mod:`~llama_index_rag_pack.documents.pdf`'s: PDFium's text layer in
reading order, ruled tables as Markdown rows, page furniture dropped, scanned pages and images
read by OCR. Here each page becomes a ``Document`` with the ids and metadata the rest of the
pack expects: id ``PATH_part_N`` (N the page's position from 0, so indexing the file again
replaces its pages), ``page_label`` for citations, and ``section``, the headings the page
starts under.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from llama_index.core.readers.file.base import default_file_metadata_func
from llama_index.core.schema import Document

from llama_index_rag_pack.documents.office_files import FILE_METADATA_HIDDEN
from llama_index_rag_pack.documents.pdf.ocr_pages import OcrOptions, read_image
from llama_index_rag_pack.documents.pdf.pdf_reader import PdfPage, UnreadablePdfError, read_pdf
from llama_index_rag_pack.documents.sections import SECTION_KEY, format_section

__all__ = ["IMAGE_EXTENSIONS", "PageSkips", "read_image_documents", "read_pdf_documents"]

logger = logging.getLogger(__name__)

#: Image files read by OCR, one document per image (per frame of a multi-page TIFF).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
_HIDDEN = [*FILE_METADATA_HIDDEN, "ocr"]  # kept from embeddings and prompts


class PageSkips(Exception):
    """A file none of whose pages could be read; the message is the first page's reason."""


def read_pdf_documents(path: Path, options: OcrOptions | None = None) -> list[Document]:
    """The pages of a PDF with text, as documents (pages left out are logged with why).

    Raises:
        UnreadablePdfError: encrypted with a password, or damaged beyond repair.
        PageSkips: no page has text, even by OCR (the message says why and what to do).
    """
    read = read_pdf(path, options)
    for reason in read.skipped:
        logger.warning("%s: %s", path, reason)
    if not read.pages:
        raise PageSkips(_why_empty(read.skipped))
    return [_document(path, page) for page in read.pages]


def read_image_documents(path: Path, options: OcrOptions | None = None) -> list[Document]:
    """An image file's text, read by OCR: one document per frame with text.

    Raises:
        PageSkips: no OCR engine, a damaged image or a decompression bomb, or no text found.
    """
    skipped: list[str] = []
    try:
        texts = read_image(path, skipped, options or OcrOptions())
    except ValueError as e:
        raise PageSkips(str(e)) from e
    for reason in skipped:
        logger.warning("%s: %s", path, reason)
    pages = [
        PdfPage(index, str(index + 1), text, ocr=engine)
        for index, (text, engine) in sorted(texts.items())
    ]
    if not pages:
        raise PageSkips(_why_empty(skipped) if skipped else "blank (OCR found no text in it)")
    return [_document(path, page) for page in pages]


def _why_empty(skipped: list[str]) -> str:
    if not skipped:
        return "blank (no text in it)"
    first = skipped[0]
    first = first.split(": ", 1)[1] if first.startswith("page ") else first
    more = f" (and {len(skipped) - 1} more pages)" if len(skipped) > 1 else ""
    return f"no page has text: {first}{more}"


def _document(path: Path, page: PdfPage) -> Document:
    metadata: dict[str, Any] = default_file_metadata_func(str(path))
    metadata["page_label"] = page.label
    if page.section:
        metadata[SECTION_KEY] = format_section(page.section)
    if page.ocr:
        metadata["ocr"] = page.ocr
    document = Document(text=page.text, id_=f"{path!s}_part_{page.index}", metadata=metadata)
    document.excluded_embed_metadata_keys = list(_HIDDEN)
    document.excluded_llm_metadata_keys = list(_HIDDEN)
    return document


__all__ += ["UnreadablePdfError"]
