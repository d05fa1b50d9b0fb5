"""Office and data files for indexing: .docx, .pptx, .xlsx, .csv and .epub.

Each is read with its own library (python-docx, python-pptx, openpyxl, the standard ``csv``
module, EbookLib), not through LlamaIndex's readers: its .docx reader (docx2txt) flattens tables
into a column of cells, its spreadsheet readers need pandas and lose the header of every chunk
but the first. Tables become Markdown rows under their header row
(:func:`~llama_index_rag_pack.documents.tables.markdown_table`), which the chunker cuts only
between rows.

=======  ==============================  ========================================================
type     documents                       metadata (besides file_path, file_name, dates, size)
=======  ==============================  ========================================================
.docx    one                             (none: a .docx holds no page numbers until rendered)
.pptx    one per slide with text         ``page_label`` (``"3"``), ``slide`` (3)
.xlsx    one per sheet with cells        ``sheet`` (its name)
.csv     one                             (none)
.epub    one per chapter (spine order)   ``chapter`` (1, 2, ...), ``chapter_title`` if it has one
=======  ==============================  ========================================================
"""

from __future__ import annotations

import csv
import datetime
import logging
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core.readers.file.base import default_file_metadata_func
from llama_index.core.schema import Document

from llama_index_rag_pack.core.text_decoding import detect_text_encoding
from llama_index_rag_pack.documents.tables import markdown_table

__all__ = [
    "FILE_METADATA_HIDDEN",
    "OFFICE_EXTENSIONS",
    "UnreadableFileError",
    "html_text",
    "read_office_file",
]

logger = logging.getLogger(__name__)

#: Expanded XML (and XHTML) a zip-based file may hold: more is a damaged file or a zip bomb.
MAX_EXPANDED_BYTES = 512 * 2**20
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # encrypted OOXML, or an old .doc/.xls/.ppt
#: File metadata kept from embeddings and prompts, as LlamaIndex's own readers keep it.
FILE_METADATA_HIDDEN = (
    "file_name",
    "file_type",
    "file_size",
    "creation_date",
    "last_modified_date",
    "last_accessed_date",
)
_HIDDEN = [*FILE_METADATA_HIDDEN, "slide", "chapter"]  # kept from embeddings and prompts

Part = tuple[str, dict[str, Any]]  # a document's text and its own metadata


class UnreadableFileError(Exception):
    """An office or data file that cannot be read; the message says why and what to do."""


def read_office_file(path: Path) -> list[Document]:
    """The documents of one .docx, .pptx, .xlsx, .csv or .epub file (see the module's table).

    Ids are the file path (``PATH_part_N`` for the N-th slide, sheet or chapter, counted from
    0), so indexing the file again replaces its chunks. Documents may be blank (an empty
    slide): the caller drops them.

    Raises:
        UnreadableFileError: a damaged, encrypted or fake file (a text file named .docx), or
            a CSV that is not text.
    """
    suffix = path.suffix.lower()
    reader, kind = _READERS[suffix]
    if suffix != ".csv":
        _check_zip(path, kind)
    try:
        parts = reader(path)
    except (UnreadableFileError, ImportError, MemoryError):
        raise
    except Exception as e:
        raise UnreadableFileError(
            f"the {kind} file cannot be read ({type(e).__name__}: {e}); it may be damaged: open "
            f"and re-save it as {suffix}, or save its text as .txt"
        ) from e
    base = default_file_metadata_func(str(path))
    documents = []
    for i, (text, metadata) in enumerate(parts):
        doc_id = str(path) if len(parts) == 1 else f"{path}_part_{i}"
        doc = Document(id_=doc_id, text=text, metadata={**base, **metadata})
        doc.excluded_embed_metadata_keys = list(_HIDDEN)
        doc.excluded_llm_metadata_keys = list(_HIDDEN)
        documents.append(doc)
    return documents


def _check_zip(path: Path, kind: str) -> None:
    """Raise :class:`UnreadableFileError` unless ``path`` is a zip archive of sane size."""
    try:
        with path.open("rb") as f:
            head = f.read(8)
    except OSError as e:
        raise UnreadableFileError(
            f"cannot be read ({e.strerror or e}); check it is readable"
        ) from e
    if not head:
        raise UnreadableFileError("empty (0 bytes); nothing to index in it")
    if head == _OLE_MAGIC:
        raise UnreadableFileError(
            f"encrypted (password-protected), or an old binary Office file named as {kind}; "
            f"remove the password, or open and re-save it as {path.suffix.lower()}"
        )
    if not zipfile.is_zipfile(path):
        raise UnreadableFileError(
            f"not a real {kind} file (not a zip archive: damaged, truncated or another type "
            "renamed); re-save it, or give it the extension of its real type (e.g. .txt)"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            expanded = sum(
                i.file_size
                for i in archive.infolist()
                if i.filename.lower().endswith((".xml", ".rels", ".xhtml", ".html", ".htm"))
            )
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise UnreadableFileError(
            f"the {kind} file is damaged ({type(e).__name__}: {e}); open and re-save it"
        ) from e
    if expanded > MAX_EXPANDED_BYTES:
        raise UnreadableFileError(
            f"its text expands to {expanded / 2**20:.0f} MiB (the limit is "
            f"{MAX_EXPANDED_BYTES / 2**20:g} MiB); split it into smaller files"
        )


# --------------------------------------------------------------------------- .docx
def _read_docx(path: Path) -> list[Part]:
    """One document: paragraphs and tables in body order, headings as ``#`` lines."""
    import docx
    from docx.table import Table

    blocks = []
    for item in docx.Document(str(path)).iter_inner_content():
        if isinstance(item, Table):
            blocks.append(markdown_table(_docx_rows(item)))  # "" for an empty table
        elif item.text.strip():
            blocks.append(_docx_paragraph(item))
    return [("\n\n".join(b for b in blocks if b), {})]


def _docx_paragraph(paragraph: Any) -> str:
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    text = paragraph.text.strip()
    if style == "Title":
        return f"# {text}"
    level = style.removeprefix("Heading ").strip()
    if style.startswith("Heading ") and level.isdigit():
        return f"{'#' * min(int(level), 6)} {text}"
    if style.startswith("List"):
        return f"- {text}"
    return text


def _docx_rows(table: Any) -> list[list[str]]:
    """A table's rows of cell texts; a cell's nested tables are flattened into its text."""
    from docx.table import Table

    rows = []
    for row in table.rows:
        cells = []
        for cell in row.cells:
            texts = []
            for item in cell.iter_inner_content():
                if isinstance(item, Table):
                    texts += ["; ".join(" / ".join(r) for r in _docx_rows(item))]
                else:
                    texts.append(item.text)
            cells.append(" ".join(t for t in texts if t.strip()))
        rows.append(cells)
    return [r for r in rows if any(c.strip() for c in r)]


# --------------------------------------------------------------------------- .pptx
def _read_pptx(path: Path) -> list[Part]:
    """One document per slide: its title first, then its shapes' text and tables, then its
    notes."""
    from pptx import Presentation

    parts = []
    for number, slide in enumerate(Presentation(str(path)).slides, 1):
        title_shape = slide.shapes.title
        blocks = []
        if title_shape is not None and title_shape.text_frame.text.strip():
            blocks.append(f"# {' '.join(title_shape.text_frame.text.split())}")
        for shape in slide.shapes:
            if title_shape is None or shape.shape_id != title_shape.shape_id:
                blocks += _pptx_shape(shape)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                blocks.append(f"Notes: {notes}")
        parts.append(("\n\n".join(blocks), {"page_label": str(number), "slide": number}))
    return parts


def _pptx_shape(shape: Any) -> list[str]:
    from pptx.shapes.group import GroupShape

    if isinstance(shape, GroupShape):
        return [text for inner in shape.shapes for text in _pptx_shape(inner)]
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        table = markdown_table([r for r in rows if any(c.strip() for c in r)])
        return [table] if table else []
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        text = shape.text_frame.text.strip()
        return [text] if text else []
    return []


# --------------------------------------------------------------------------- .xlsx, .csv
def _read_xlsx(path: Path) -> list[Part]:
    """One document per worksheet: its non-empty rows as a Markdown table (the first row is
    the header), cached formula values rather than formulas."""
    import openpyxl

    book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        return [
            (
                markdown_table(_trimmed([list(r) for r in sheet.iter_rows(values_only=True)])),
                {"sheet": sheet.title},
            )
            for sheet in book.worksheets
        ]
    finally:
        book.close()


def _read_csv(path: Path) -> list[Part]:
    """One document: the rows as a Markdown table (the first row is the header), the
    delimiter sniffed among ``, ; TAB |``, the encoding detected as for text files."""
    data = path.read_bytes()
    encoding = detect_text_encoding(data)
    if encoding is None:
        raise UnreadableFileError(
            "not text (binary or undecodable bytes); save it as CSV in UTF-8, or move it out "
            "of the indexed folder"
        )
    text = data.decode(encoding.encoding, encoding.errors).removeprefix("\ufeff")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:65536], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(text.splitlines(), dialect))
    return [(markdown_table(_trimmed(rows)), {})]


def _trimmed(rows: list[list[Any]]) -> list[list[str]]:
    """Rows as cell texts, without empty rows and without columns empty in every row."""
    texts = [[_cell_text(v) for v in row] for row in rows]
    texts = [row for row in texts if any(row)]
    width = max((max(i for i, v in enumerate(row) if v) + 1 for row in texts), default=0)
    return [row[:width] for row in texts]


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value).strip()


# --------------------------------------------------------------------------- .epub
def _read_epub(path: Path) -> list[Part]:
    """One document per chapter (each XHTML file of the spine, in reading order)."""
    from ebooklib import ITEM_DOCUMENT, epub

    book = epub.read_epub(str(path), options={"ignore_ncx": True})
    parts = []
    for idref, *_ in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ITEM_DOCUMENT or not item.is_chapter():
            continue  # the EPUB 3 navigation page (a table of contents) is not a chapter
        text, title = html_text(item.get_content())
        metadata: dict[str, Any] = {"chapter": len(parts) + 1}
        if title:
            metadata["chapter_title"] = title
        parts.append((text, metadata))
    return parts


_BLOCKS = {"p", "div", "li", "pre", "blockquote", "dd", "dt", "section", "article", "figure"}
_BLOCKS |= {"figcaption", "caption", "aside", "header", "footer", "ul", "ol", "dl", "nav"}
_BLOCKS |= {"h1", "h2", "h3", "h4", "h5", "h6", "table", "body", "main"}


def html_text(html: bytes | str) -> tuple[str, str | None]:
    """An (X)HTML page's text (blocks apart, headings as ``#`` lines, tables as Markdown) and
    its first heading: EPUB chapters and ``.html`` files."""
    import lxml.html

    if not html.strip():
        return "", None
    if isinstance(html, str):  # lxml refuses text that declares its own encoding
        html = re.sub(r"^\s*<\?xml[^>]*\?>", "", html)
        if not html.strip():
            return "", None
    root = lxml.html.document_fromstring(html)
    for bad in root.xpath("//script|//style|//head"):
        bad.drop_tree()
    for br in root.xpath("//br"):  # a line break, not nothing, between the words around it
        br.tail = "\n" + (br.tail or "")
    blocks: list[str] = []
    _html_blocks(root, blocks)
    title = next((b.lstrip("#").strip() for b in blocks if b.startswith("#")), None)
    return "\n\n".join(blocks), title


def _html_blocks(element: Any, blocks: list[str]) -> None:
    """Append the text blocks of ``element``: a block without blocks inside is one, inline
    text between blocks is one, a table is one Markdown table."""
    tag = element.tag.lower() if isinstance(element.tag, str) else ""
    if tag == "table":
        rows = [
            [" ".join(c.text_content().split()) for c in tr.xpath("./th|./td")]
            for tr in element.xpath(".//tr")
        ]
        blocks.append(markdown_table([r for r in rows if any(r)]))
        return
    if not _has_blocks(element):
        text = " ".join(element.text_content().split())
        level = int(tag[1]) if len(tag) == 2 and tag[0] == "h" and tag[1].isdigit() else 0
        if text:
            blocks.append(f"{'#' * level} {text}" if level else text)
        return
    inline = [element.text or ""]
    for child in element:
        if not isinstance(child.tag, str):  # a comment or processing instruction
            pass
        elif child.tag.lower() in _BLOCKS or _has_blocks(child):
            _flush(inline, blocks)
            _html_blocks(child, blocks)
        else:
            inline.append(child.text_content())
        inline.append(child.tail or "")
    _flush(inline, blocks)


def _has_blocks(element: Any) -> bool:
    return any(
        isinstance(e.tag, str) and e.tag.lower() in _BLOCKS for e in element.iterdescendants()
    )


def _flush(inline: list[str], blocks: list[str]) -> None:
    text = " ".join("".join(inline).split())
    if text:
        blocks.append(text)
    inline.clear()


_Reader = Callable[[Path], list[Part]]
_READERS: dict[str, tuple[_Reader, str]] = {
    ".docx": (_read_docx, "Word (.docx)"),
    ".pptx": (_read_pptx, "PowerPoint (.pptx)"),
    ".xlsx": (_read_xlsx, "Excel (.xlsx)"),
    ".csv": (_read_csv, "CSV"),
    ".epub": (_read_epub, "EPUB"),
}
#: The file types read here, in the order the docs list them.
OFFICE_EXTENSIONS = tuple(_READERS)
