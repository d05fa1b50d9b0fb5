"""A PDF page's text layer read with PDFium (pypdfium2): positioned text runs on the upright
page, whether the layer is usable, and the page rendered as a picture for OCR.

PDFium reads fonts without a usable ToUnicode map that pypdf turns into mojibake, and reads
a page about 20 times faster. Runs are PDFium's text rectangles (a stretch of text on one
line), with the font size of their first character, in the coordinates of the page as it is
displayed: a page rotated by its ``/Rotate`` entry (a landscape table) is turned upright.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import regex

from llama_index_rag_pack.documents.pdf.layout import Run

__all__ = [
    "FEW_TEXT_CHARS",
    "MAX_RENDER_PIXELS",
    "PDFIUM_LOCK",
    "PageLayer",
    "transform_box",
    "image_cover",
    "page_layer",
    "render_page",
    "unusable_reason",
]

#: Held while PDFium works: it keeps global state and is not thread-safe.
PDFIUM_LOCK = threading.RLock()
#: The most pixels a page is rendered with for OCR (a letter page at 300 dpi is 8.4 M): a
#: 2400-dpi scan or a page of several square metres is rendered smaller, never larger.
MAX_RENDER_PIXELS = 12_000_000
#: A page whose text has fewer letters or digits than this has no usable text layer.
MIN_TEXT_CHARS = 12
#: A page with fewer letters than this, mostly covered by pictures, is also read by OCR (a
#: scanned figure with a caption or a stray label in its text layer).
FEW_TEXT_CHARS = 200
_BAD_CHARS = regex.compile(r"[\p{Co}\p{Cn}\p{Cs}\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_GOOD_CHARS = regex.compile(r"[\p{L}\p{N}]")
#: A page whose text is more than this share of unreadable characters is mojibake.
MAX_BAD_SHARE = 0.2


@dataclass(frozen=True)
class PageLayer:
    """One page's text runs and what is needed to place them.

    Attributes:
        runs: Horizontal text runs (upright page coordinates).
        vertical: Runs written sideways (margin notes, rotated labels), kept apart.
        width: The displayed page's width in points.
        height: Its height.
    """

    runs: tuple[Run, ...]
    vertical: tuple[Run, ...]
    width: float
    height: float

    @property
    def text(self) -> str:
        return " ".join(r.text for r in (*self.runs, *self.vertical))


def page_layer(page: Any) -> PageLayer:
    """The text runs of a pypdfium2 ``PdfPage``, turned upright.

    PDFium's text comes line by line in the order the page draws it; a line whose pieces stand
    apart (table cells, two columns on one baseline) becomes one run per piece, so the layout
    can tell columns apart.
    """
    import pypdfium2.raw as pdfium_c

    textpage = page.get_textpage()
    try:
        full = textpage.get_text_range()
        quadrant, mixed = _dominant_quadrant(textpage, pdfium_c, len(full))
        matrix, width, height = _reading_matrix(page, quadrant)
        runs: list[Run] = []
        vertical: list[Run] = []
        start = 0
        for line in full.split("\r\n"):
            if line.strip():
                for run, turn in _line_runs(matrix, textpage, pdfium_c, start, line, mixed):
                    (runs if turn in (quadrant, None) else vertical).append(run)
            start += len(line) + 2
    finally:
        textpage.close()
    return PageLayer(tuple(runs), tuple(vertical), width, height)


def _quadrant(textpage: Any, pdfium_c: Any, index: int) -> int | None:
    """The direction a character is written in: 0 (left to right) to 3, by quarter turns;
    ``None`` when PDFium cannot tell."""
    angle = pdfium_c.FPDFText_GetCharAngle(textpage.raw, index)
    if angle < 0:
        return None
    return round(angle / (math.pi / 2)) % 4


def _dominant_quadrant(textpage: Any, pdfium_c: Any, count: int) -> tuple[int, bool]:
    """The direction most of the page's text is written in (sampled: at most 400 characters),
    and whether the sample holds text written in another direction too."""
    votes = [0, 0, 0, 0]
    for index in range(0, count, max(1, count // 400)):
        turn = _quadrant(textpage, pdfium_c, index)
        if turn is not None:
            votes[turn] += 1
    dominant = max(range(4), key=lambda q: (votes[q], -q))
    return dominant, sum(1 for v in votes if v) > 1


def _line_runs(
    matrix: Matrix, textpage: Any, pdfium_c: Any, start: int, line: str, mixed: bool = True
) -> list[tuple[Run, int | None]]:
    """The runs of one PDFium line (its characters ``start`` to ``start + len(line)``) on the
    page turned so its text reads left to right, each with the direction it is written in
    (``None`` when the page's text is all written one way: not ``mixed``)."""
    boxes = [textpage.get_rect(i) for i in range(textpage.count_rects(start, len(line)))]
    groups: list[list[float]] = []  # boxes a letter space apart merged: l, b, r, t
    for left, bottom, right, top in sorted(boxes):
        last = groups[-1] if groups else None
        near = 0.3 * max(top - bottom, last[3] - last[1] if last else 0.0, 3.0)
        if last is not None and left <= last[2] + near and bottom < last[3] and top > last[1]:
            last[:] = [last[0], min(last[1], bottom), max(last[2], right), max(last[3], top)]
        else:
            groups.append([left, bottom, right, top])
    runs = []
    for left, bottom, right, top in groups:
        if len(groups) == 1:
            text, index = line, start + len(line) - len(line.lstrip())
        else:
            text = textpage.get_text_bounded(left, bottom, right, top)
            index = pdfium_c.FPDFText_GetCharIndexAtPos(
                textpage.raw, (left + right) / 2, (bottom + top) / 2, right - left, top - bottom
            )
        text = " ".join(text.replace("\r", " ").replace("\n", " ").split())
        if not text:
            continue
        size = _font_size(textpage, pdfium_c, index) if index >= 0 else 0.0
        turn = _quadrant(textpage, pdfium_c, index) if mixed and index >= 0 else None
        x0, y0, x1, y1 = transform_box(matrix, (left, bottom, right, top))
        run = Run(text, x0, y0, x1, y1, float(size))
        if len(groups) == 1 and sum(any(c.isdigit() for c in t) for t in line.split()) >= 2:
            runs += [(piece, turn) for piece in _split_at_gaps(matrix, textpage, start, line, run)]
        else:
            runs.append((run, turn))
    return runs


def _split_at_gaps(matrix: Matrix, textpage: Any, start: int, line: str, run: Run) -> list[Run]:
    """``run`` (all of PDFium line ``line``) cut where a space stands for a gap wider than
    a word space: the cells of a table row that the PDF draws as one piece of text."""
    pieces: list[Run] = []
    begin = 0  # where the current piece starts in ``line``
    left = None
    for k, ch in enumerate(line):
        if ch != " " or k == 0 or k + 1 >= len(line) or line[k + 1] == " ":
            continue
        before = transform_box(matrix, textpage.get_charbox(start + k - 1))
        after = transform_box(matrix, textpage.get_charbox(start + k + 1))
        if after[0] - before[2] > 0.8 * max(run.size, 1.0):
            x0 = left if left is not None else run.x0
            pieces.append(Run(line[begin:k].strip(), x0, run.y0, before[2], run.y1, run.size))
            begin, left = k + 1, after[0]
    if not pieces:
        return [run]
    pieces.append(Run(line[begin:].strip(), left or run.x0, run.y0, run.x1, run.y1, run.size))
    return [p for p in pieces if p.text]


def image_cover(page: Any) -> float:
    """The share of a pypdfium2 page covered by the pictures it draws (0 to 1; overlapping
    pictures counted once each, so a collage may pass 1 and is capped)."""
    import pypdfium2.raw as pdfium_c

    left, bottom, right, top = page.get_cropbox()
    area = max((right - left) * (top - bottom), 1.0)
    covered = 0.0
    for picture in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2):
        x0, y0, x1, y1 = picture.get_bounds()
        width = min(x1, right) - max(x0, left)
        height = min(y1, top) - max(y0, bottom)
        if width > 0 and height > 0:
            covered += width * height
    return min(covered / area, 1.0)


def _font_size(textpage: Any, pdfium_c: Any, index: int) -> float:
    """A character's font size as drawn: its font's nominal size scaled by its text matrix
    (many PDFs set text in a 1-point font scaled up)."""
    size = pdfium_c.FPDFText_GetFontSize(textpage.raw, index)
    matrix = pdfium_c.FS_MATRIX()
    if pdfium_c.FPDFText_GetMatrix(textpage.raw, index, matrix):
        size *= abs(matrix.a * matrix.d - matrix.b * matrix.c) ** 0.5
    return float(size)


Matrix = tuple[float, float, float, float, float, float]


def transform_box(matrix: Matrix, box: tuple[float, float, float, float]) -> tuple[float, ...]:
    """``box`` (PDF user space: left, bottom, right, top) as (x0, y0, x1, y1) under
    ``matrix`` (:func:`_reading_matrix`)."""
    a, b, c, d, e, f = matrix
    left, bottom, right, top = box
    xs = (a * left + c * bottom + e, a * right + c * top + e)
    ys = (b * left + d * bottom + f, b * right + d * top + f)
    return min(xs), min(ys), max(xs), max(ys)


def _reading_matrix(page: Any, quadrant: int) -> tuple[Matrix, float, float]:
    """The map from the page's user space to the page turned so that text written in
    ``quadrant`` reads left to right, y downwards, origin at the crop box's corner; with
    the turned page's width and height. A table set sideways, on a page displayed sideways
    or upright, comes out upright either way."""
    theta = quadrant * math.pi / 2  # PDFium's angles turn clockwise
    cos, sin = round(math.cos(theta)), round(math.sin(theta))
    # rotate by the text's angle (counter-clockwise), then flip y to grow downwards
    a, c, b, d = cos, -sin, -sin, -cos
    left, bottom, right, top = page.get_cropbox()
    corners = [(a * x + c * y, b * x + d * y) for x in (left, right) for y in (bottom, top)]
    e, f = -min(x for x, _ in corners), -min(y for _, y in corners)
    width = max(x for x, _ in corners) + e
    height = max(y for _, y in corners) + f
    return (a, b, c, d, e, f), float(width), float(height)


def unusable_reason(text: str) -> str | None:
    """Why a page's text layer cannot be used (``None`` when it can): no text at all, or
    mojibake (private-use, replacement or control characters where letters should be).

    Example:
        >>> unusable_reason("The committee met on Tuesday and approved the budget.") is None
        True
        >>> unusable_reason("")
        'no text layer'
        >>> unusable_reason("\\ue001\\ue002\\ue003 \\ue004\\ue005\\ue006\\ue007 \\ue008\\ue009" * 3)
        'an unreadable text layer (mojibake: its fonts map no characters)'
    """
    bad = len(_BAD_CHARS.findall(text))
    good = len(_GOOD_CHARS.findall(text))
    if good + bad < MIN_TEXT_CHARS:
        return "no text layer"
    if bad > MAX_BAD_SHARE * (good + bad):
        return "an unreadable text layer (mojibake: its fonts map no characters)"
    return None


def render_page(page: Any, dpi: float, max_pixels: int = MAX_RENDER_PIXELS) -> Any:
    """The page as a grey PIL image at ``dpi``, scaled down to at most ``max_pixels``."""
    width, height = page.get_size()
    scale = dpi / 72
    pixels = width * scale * height * scale
    if pixels > max_pixels:
        scale *= (max_pixels / pixels) ** 0.5
    with PDFIUM_LOCK:
        bitmap = page.render(scale=scale, grayscale=True)
        try:
            return bitmap.to_pil().convert("L").copy()
        finally:
            bitmap.close()
