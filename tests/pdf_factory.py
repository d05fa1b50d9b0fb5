"""Small PDFs written object by object, so a test knows exactly what a page holds: text in the
standard Helvetica font at given places and sizes, rotated pages, images, damaged and hostile
files. Real PDF syntax (a cross-reference table, Flate streams), read by PDFium like any other."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Text:
    """A line of text: ``x``, ``y`` from the page's bottom-left, in points."""

    text: str
    x: float
    y: float
    size: float = 10.0
    angle: int = 0  # 0 or 90 (written bottom to top)


@dataclass
class Page:
    texts: Sequence[Text] = ()
    width: float = 612.0
    height: float = 792.0
    rotate: int = 0
    image: tuple[int, int, bytes, str] | None = None  # width, height, data, filter
    raw_content: bytes | None = None  # a content stream as given (compressed with Flate)
    lines: Sequence[tuple[float, float, float, float]] = field(default_factory=tuple)


def _escape(text: str) -> bytes:
    data = text.encode("cp1252")
    return data.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _content(page: Page) -> bytes:
    if page.raw_content is not None:
        return page.raw_content
    out = []
    if page.image is not None:
        out.append(f"q {page.width} 0 0 {page.height} 0 0 cm /Im1 Do Q".encode())
    for x0, y0, x1, y1 in page.lines:
        out.append(f"{x0} {y0} m {x1} {y1} l S".encode())
    for t in page.texts:
        matrix = "1 0 0 1" if t.angle == 0 else "0 1 -1 0"
        out.append(
            b"BT /F1 %s Tf %s %s %s Tm ("
            % (str(t.size).encode(), matrix.encode(), str(t.x).encode(), str(t.y).encode())
            + _escape(t.text)
            + b") Tj ET"
        )
    return b"\n".join(out)


def pdf_bytes(pages: Sequence[Page], *, outline: Sequence[tuple[str, int]] = ()) -> bytes:
    """A PDF of ``pages``; ``outline``: bookmarks (title, page index), all at the top level."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in last
    pages_id = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for page in pages:
        data = zlib.compress(_content(page))
        stream = add(
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
        )
        resources = b"/Font << /F1 %d 0 R >>" % font
        if page.image is not None:
            w, h, image, filt = page.image
            extra = (
                b"/BitsPerComponent 1 /ColorSpace /DeviceGray"
                if filt != "/DCTDecode"
                else (b"/BitsPerComponent 8 /ColorSpace /DeviceGray")
            )
            img = add(
                b"<< /Type /XObject /Subtype /Image /Width %d /Height %d %s /Filter %s "
                b"/Length %d >>\nstream\n"
                % (w, h, extra, filt.encode(), len(image))
                + image
                + b"\nendstream"
            )
            resources += b" /XObject << /Im1 %d 0 R >>" % img
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %s %s] /Rotate %d "
                b"/Resources << %s >> /Contents %d 0 R >>"
                % (
                    pages_id,
                    str(page.width).encode(),
                    str(page.height).encode(),
                    page.rotate,
                    resources,
                    stream,
                )
            )
        )
    objects[pages_id - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    outlines = b""
    if outline:
        root = len(objects) + 1
        items = list(range(root + 1, root + 1 + len(outline)))
        add(
            b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>"
            % (items[0], items[-1], len(items))
        )
        for i, (title, index) in enumerate(outline):
            links = b""
            if i:
                links += b" /Prev %d 0 R" % items[i - 1]
            if i + 1 < len(items):
                links += b" /Next %d 0 R" % items[i + 1]
            add(
                b"<< /Title (%s) /Parent %d 0 R /Dest [%d 0 R /XYZ 0 792 0]%s >>"
                % (_escape(title), root, kids[index], links)
            )
        outlines = b" /Outlines %d 0 R" % root
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R%s >>" % (pages_id, outlines)
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        xref,
    )
    return bytes(out)


def write_pdf(path: Path, pages: Sequence[Page], **kwargs: object) -> Path:
    path.write_bytes(pdf_bytes(pages, **kwargs))  # type: ignore[arg-type]
    return path


def prose_lines(
    words: str, x: float, top: float, width_chars: int = 60, leading: float = 12, size: float = 10
) -> list[Text]:
    """``words`` set as lines of at most ``width_chars`` characters from ``top`` down."""
    lines, line = [], ""
    for word in words.split():
        if len(line) + len(word) + 1 > width_chars and line:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        lines.append(line)
    return [Text(text, x, top - i * leading, size) for i, text in enumerate(lines)]
