"""OCR of the pages that need it: scanned PDF pages and image files.

Which pages are read is the caller's ``ocr`` mode: ``auto`` (the default) reads the pages
without a usable text layer, ``force`` every page, ``off`` none (those pages are skipped with a
reason that says how to turn OCR on). Each page is rendered at the measured dpi, read by the
engine :func:`~llama_index_rag_pack.documents.pdf.ocr.ocr_image` picks, within a time limit,
and cached by the content of its file, its position and the settings, so re-indexing or
``--sync`` never reads a page twice. Progress (pages/s, time left) shows with
``show_progress``.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index_rag_pack.documents.pdf import ocr
from llama_index_rag_pack.documents.pdf.text_layer import render_page

__all__ = ["OcrOptions", "file_digest", "ocr_pages", "read_image"]

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "pip install 'llama-index-rag-pack[ocr]' (or install Tesseract: apt install tesseract-ocr)"
)


@dataclass(frozen=True)
class OcrOptions:
    """How pages without a usable text layer are read.

    Attributes:
        mode: ``auto`` (OCR the pages without a usable text layer), ``force`` (every page) or
            ``off``.
        engine: ``auto`` (by the page's script), ``tesseract`` or ``rapidocr``.
        dpi: Render resolution (``None``: :data:`~.ocr.DEFAULT_OCR_DPI`).
        page_time_limit: Seconds one page may take (``None``: the engine's default).
        show_progress: Show a progress bar with pages/s and the time left.
        cache: Keep and reuse results on disk (:class:`~.ocr.OcrCache`).
    """

    mode: str = "auto"
    engine: str = "auto"
    dpi: int | None = None
    page_time_limit: float | None = None
    show_progress: bool = False
    cache: bool = True

    def __post_init__(self) -> None:
        ocr.OcrMode.parse(self.mode)  # a bad mode fails here, before any file is read


def ocr_pages(
    document: Any,
    path: Path,
    digest: str,
    unusable: Mapping[int, str],
    skipped: list[str],
    options: OcrOptions,
) -> dict[int, tuple[str, str]]:
    """OCR the pages of a pypdfium2 ``document`` that ``options`` asks for: the text and
    engine of each page read; why each unusable page was not read goes to ``skipped``."""
    mode = ocr.OcrMode.parse(options.mode)
    if mode is ocr.OcrMode.OFF:
        for index, reason in unusable.items():
            skipped.append(
                f"page {index + 1}: {reason}; OCR is off: index with --ocr auto (ocr='auto') "
                "to read it"
            )
        return {}
    todo = list(range(len(document))) if mode is ocr.OcrMode.FORCE else sorted(unusable)
    if not todo:
        return {}
    if not ocr.available_engines():
        for index, reason in unusable.items():
            skipped.append(f"page {index + 1}: {reason}; to read it by OCR, {INSTALL_HINT}")
        return {}

    def render(index: int) -> Any:
        page = document[index]
        try:
            return render_page(page, _dpi(options))
        finally:
            page.close()

    return _read_pages(path, digest, todo, render, unusable, skipped, options)


def read_image(path: Path, skipped: list[str], options: OcrOptions) -> dict[int, tuple[str, str]]:
    """The text of each frame of an image file (.png, .jpg, .tiff), read by OCR.

    Raises:
        ValueError: a damaged image or a decompression bomb (one line), or no OCR engine.
    """
    if not ocr.available_engines():
        raise ValueError(f"an image needs OCR to be read; {INSTALL_HINT}")
    if ocr.OcrMode.parse(options.mode) is ocr.OcrMode.OFF:
        raise ValueError("an image needs OCR to be read; OCR is off: index with --ocr auto")
    frames = ocr.read_image_file(path)
    digest = file_digest(path)
    reasons = dict.fromkeys(range(len(frames)), "an image")
    return _read_pages(
        path, digest, list(range(len(frames))), frames.__getitem__, reasons, skipped, options
    )


def _read_pages(
    path: Path,
    digest: str,
    todo: list[int],
    image_of: Callable[[int], Any],
    reasons: Mapping[int, str],
    skipped: list[str],
    options: OcrOptions,
) -> dict[int, tuple[str, str]]:
    cache = ocr.OcrCache() if options.cache else None
    limit = options.page_time_limit or ocr.DEFAULT_PAGE_TIME_LIMIT
    out: dict[int, tuple[str, str]] = {}
    started = time.perf_counter()
    for index in _progress(todo, options.show_progress, path.name):
        key = hashlib.sha256(
            f"{digest}:{index}:{_dpi(options)}:{options.engine}".encode()
        ).hexdigest()
        result = cache.get(key) if cache is not None else None
        if result is None:
            result = ocr.ocr_image(image_of(index), engine=options.engine, time_limit=limit)
            if cache is not None and not result.timed_out:
                cache.put(key, result)
        if result.timed_out:
            skipped.append(
                f"page {index + 1}: OCR stopped at the time limit ({limit:g} s); what was "
                "read before it is kept"
            )
        if result.text.strip():
            out[index] = (result.text, result.engine)
        elif index in reasons:
            skipped.append(f"page {index + 1}: {reasons[index]}; OCR found no text on it")
    seconds = time.perf_counter() - started
    logger.info(
        "OCR %s: %d pages in %.1f s (%.2f pages/s)",
        path.name,
        len(todo),
        seconds,
        len(todo) / seconds if seconds else 0.0,
    )
    return out


def _progress(pages: list[int], show: bool, name: str) -> Iterable[int]:
    if not show:
        return pages
    from tqdm.auto import tqdm

    return tqdm(pages, desc=f"OCR {name}", unit="page")


def _dpi(options: OcrOptions) -> int:
    return options.dpi or ocr.DEFAULT_OCR_DPI


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes (what its pages' OCR results are cached under)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
