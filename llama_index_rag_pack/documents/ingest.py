"""Loading documents: readers for txt/md/pdf/html (office and data files:
:mod:`~llama_index_rag_pack.documents.office_files`) that keep binaries, devices and oversized
files out (chunking them: :mod:`~llama_index_rag_pack.documents.chunking`)."""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llama_index.core import SimpleDirectoryReader
from llama_index.core.readers.file.base import default_file_metadata_func
from llama_index.core.schema import Document
from llama_index.core.utils import get_tqdm_iterable

from llama_index_rag_pack.core.errors import ConfigurationError, EmptyCorpusError
from llama_index_rag_pack.core.text_decoding import (
    detect_text_encoding,
    escape_undecodable,
    without_lone_surrogates,
)
from llama_index_rag_pack.documents.office_files import (
    FILE_METADATA_HIDDEN,
    OFFICE_EXTENSIONS,
    UnreadableFileError,
    html_text,
    read_office_file,
)
from llama_index_rag_pack.documents.pdf.ocr_pages import OcrOptions
from llama_index_rag_pack.documents.pdf_documents import (
    IMAGE_EXTENSIONS,
    PageSkips,
    UnreadablePdfError,
    read_image_documents,
    read_pdf_documents,
)

logger = logging.getLogger(__name__)

#: The file types read: text, office and data files (.docx .pptx .xlsx .csv .epub), images.
SUPPORTED_EXTENSIONS = (
    (".txt", ".md", ".markdown", ".pdf", ".html", ".htm", ".rst")
    + OFFICE_EXTENSIONS
    + IMAGE_EXTENSIONS
)
_HTML = (".html", ".htm")
#: Larger files are skipped (a PDF's size is mostly images): 32 MiB of text is ~36,000 chunks,
#: 27 s and 0.6 GB to split, about an hour to embed on 2 cores; bigger is a log or a dump.
#: .docx/.pptx/.xlsx/.epub (zip archives, mostly images) have the PDF limit, .csv the other.
MAX_FILE_BYTES, MAX_PDF_BYTES = 32 * 2**20, 512 * 2**20


@dataclass
class SkippedFile:
    """A file left out of the index, and why (one line that says what to do)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class LoadedDocuments:
    """What :func:`read_documents` found: the documents, and the files it skipped."""

    documents: list[Document] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)

    def summary(self) -> str:
        """E.g. ``3 documents (1 file skipped)``."""
        text = f"{len(self.documents)} documents"
        if self.skipped:
            n = len(self.skipped)
            text += f" ({n} file{'s' if n != 1 else ''} skipped)"
        return text


def load_documents(
    paths: str | Path | Sequence[str | Path],
    *,
    recursive: bool = True,
    extensions: Sequence[str] = SUPPORTED_EXTENSIONS,
    show_progress: bool = False,
    ocr: str | OcrOptions = "auto",
) -> list[Document]:
    """Read files and directories into LlamaIndex ``Document`` objects.

    Document ids are the file paths (a name's bytes that are not UTF-8 escaped: ``caf\\xe9.txt``),
    so re-indexing a file replaces its old chunks. Binary, undecodable or blank files, unreadable
    PDFs and office files (damaged, encrypted, a text file named .docx), FIFOs and devices, and
    files over :data:`MAX_FILE_BYTES` (32 MiB; PDFs, .docx, .pptx, .xlsx and .epub
    :data:`MAX_PDF_BYTES`, 512 MiB) are skipped with a warning each (:func:`read_documents`).
    Office and data files: :mod:`~llama_index_rag_pack.documents.office_files`; PDFs and
    images (read by OCR where they have no text layer, as ``ocr`` says: ``"auto"``,
    ``"force"``, ``"off"`` or an :class:`~llama_index_rag_pack.documents.pdf.ocr_pages.OcrOptions`):
    :mod:`~llama_index_rag_pack.documents.pdf_documents`.

    Raises:
        ConfigurationError: a path does not exist.
        EmptyCorpusError: no supported file was found, or no file had any text.
    """
    return read_documents(
        paths,
        recursive=recursive,
        extensions=extensions,
        show_progress=show_progress,
        ocr=ocr,
    ).documents


def read_documents(
    paths: str | Path | Sequence[str | Path],
    *,
    recursive: bool = True,
    extensions: Sequence[str] = SUPPORTED_EXTENSIONS,
    show_progress: bool = False,
    ocr: str | OcrOptions = "auto",
) -> LoadedDocuments:
    """:func:`load_documents`, also returning the files skipped and why.

    Text files may be UTF-8 (with or without BOM), UTF-16/32 with a BOM, or a legacy encoding
    in any language (:func:`~llama_index_rag_pack.core.text_decoding.detect_text_encoding`).

    Raises:
        ConfigurationError: a path does not exist.
        EmptyCorpusError: no supported file was found, or no file had any text.
    """
    options = ocr_options(ocr, show_progress)
    files = find_files(paths, recursive=recursive, extensions=extensions)
    loaded = LoadedDocuments()
    for path in get_tqdm_iterable(files, show_progress, "Reading files"):
        docs, skipped = read_file_documents(path, options)
        if skipped is not None:
            loaded.skipped.append(skipped)
        loaded.documents.extend(docs)
    if not loaded.documents:
        listed = "; ".join(map(str, loaded.skipped[:5]))
        raise EmptyCorpusError(
            f"Nothing to index: none of the {len(files)} files has readable text ({listed})."
        )
    return loaded


def ocr_options(ocr: str | OcrOptions | None, show_progress: bool = False) -> OcrOptions:
    """``ocr`` as :class:`~llama_index_rag_pack.documents.pdf.ocr_pages.OcrOptions` (a mode
    name: ``"auto"``, ``"force"`` or ``"off"``), checked before any file is read.

    Raises:
        ConfigurationError: an unknown mode.
    """
    if isinstance(ocr, OcrOptions):
        return ocr
    try:
        return OcrOptions(mode=ocr or "auto", show_progress=show_progress)
    except ValueError as e:
        raise ConfigurationError(str(e)) from e


def read_file_documents(
    path: Path, ocr: str | OcrOptions | None = None
) -> tuple[list[Document], SkippedFile | None]:
    """The documents of one file with text (blank ones dropped), or none and why it was
    skipped (logged as a warning). ``ocr``: how scanned pages and images are read
    (:func:`ocr_options`)."""
    name = escape_undecodable(str(path))  # printable and loggable whatever its bytes
    options = ocr_options(ocr)
    try:
        docs = _read_file(path, options)
    except _Skip as skip:
        logger.warning("Skipped %s: %s", name, skip)
        return [], SkippedFile(name, str(skip))
    kept = [d for d in docs if d.text and d.text.strip()]
    if not kept:
        logger.warning("Skipped %s: blank (no text in it)", name)
        return [], SkippedFile(name, "blank (no text in it)")
    return kept, None


def find_files(
    paths: str | Path | Sequence[str | Path],
    *,
    recursive: bool = True,
    extensions: Sequence[str] = SUPPORTED_EXTENSIONS,
) -> list[Path]:
    """The supported files named by ``paths`` (directories are searched), without duplicates.

    Raises:
        ConfigurationError: a path does not exist, or a file named directly is not supported.
        EmptyCorpusError: no supported file was found.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise EmptyCorpusError("No paths given: name at least one file or directory to index.")
    exts = {e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions}
    files: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise ConfigurationError(
                f"Path not found: {str(raw)!r}. Check the spelling or the working directory."
            )
        if path.is_dir():
            pattern = "**/*" if recursive else "*"
            found = sorted(
                p for p in path.glob(pattern) if p.is_file() and p.suffix.lower() in exts
            )
            if not found:
                logger.warning("No %s files in %s", "/".join(sorted(exts)), path)
            files.extend(found)
        elif path.suffix.lower() in exts:
            files.append(path)
        else:
            raise ConfigurationError(
                f"Unsupported file type {path.suffix or '(none)'!r} for {str(raw)!r}; supported: "
                f"{', '.join(sorted(exts))}."
            )
    if not files:
        raise EmptyCorpusError(
            f"No supported files ({', '.join(sorted(exts))}) under {', '.join(map(str, paths))}."
        )
    return list(dict.fromkeys(files))


class _Skip(Exception):
    """A file that cannot be indexed; the message says why and what to do."""


NOT_TEXT = (
    "not text (binary or undecodable bytes); convert it to UTF-8 text, or move it out of the "
    "indexed folder"
)


def _read_file(path: Path, options: OcrOptions) -> list[Document]:
    """The documents of one file (a PDF may give one per page), ids and metadata valid UTF-8.

    Raises:
        _Skip: not a regular file, too large, binary, undecodable, or an unreadable PDF or
            office file.
    """
    suffix = path.suffix.lower()
    is_pdf = suffix == ".pdf"
    big = is_pdf or suffix in IMAGE_EXTENSIONS or (suffix in OFFICE_EXTENSIONS and suffix != ".csv")
    _check_regular_file(path, MAX_PDF_BYTES if big else MAX_FILE_BYTES)
    if is_pdf or suffix in IMAGE_EXTENSIONS:
        return _valid_utf8(_read_pages(path, options))
    if suffix in OFFICE_EXTENSIONS:
        try:
            return _valid_utf8(read_office_file(path))
        except UnreadableFileError as e:
            raise _Skip(str(e)) from e
    raw = path.read_bytes()
    encoding = detect_text_encoding(raw)
    if encoding is None:
        raise _Skip(NOT_TEXT)
    if suffix in _HTML:
        return _valid_utf8(_read_html(path, raw.decode(encoding.encoding, encoding.errors)))
    reader = SimpleDirectoryReader(
        input_files=[str(path)],
        filename_as_id=True,
        encoding=encoding.encoding,
        errors=encoding.errors,
        raise_on_error=True,
    )
    return _valid_utf8(reader.load_data())


def _check_regular_file(path: Path, limit: int) -> None:
    """Raise :class:`_Skip` unless ``path`` (symlinks followed) is a regular file of at most
    ``limit`` bytes: a FIFO would block for ever, a device (``/dev/zero``) never ends."""
    try:
        st = path.stat()
    except OSError as e:
        raise _Skip(f"cannot be read ({e.strerror or e}); check it exists and is readable") from e
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device, socket or other special file"
        raise _Skip(f"not a regular file ({kind}); name a file that holds the text to index")
    if st.st_size > limit:
        raise _Skip(
            f"too large ({st.st_size / 2**20:.1f} MiB, the limit is {limit / 2**20:g} MiB); "
            "split it into smaller files"
        )


def _valid_utf8(documents: list[Document]) -> list[Document]:
    """``documents`` with ids, string metadata and text that UTF-8 (so gRPC, Milvus) can encode:
    a file name's undecodable bytes escaped (stable, unique), stray surrogates in text replaced."""
    for doc in documents:
        doc.id_ = escape_undecodable(doc.id_)
        for key, value in doc.metadata.items():
            if isinstance(value, str):
                doc.metadata[key] = escape_undecodable(value)
        if doc.text and not doc.text.isascii():
            doc.set_content(without_lone_surrogates(doc.text))
    return documents


def _read_pages(path: Path, options: OcrOptions) -> list[Document]:
    """A PDF's or an image's pages with text; why a file yields none is its skip reason."""
    try:
        if path.suffix.lower() == ".pdf":
            return read_pdf_documents(path, options)
        return read_image_documents(path, options)
    except (UnreadablePdfError, PageSkips) as e:
        raise _Skip(str(e)) from e
    except (ImportError, MemoryError):
        raise
    except Exception as e:  # whatever a damaged file makes a library raise: this file only
        cause = _root_cause(e)
        kind = "PDF" if path.suffix.lower() == ".pdf" else "image"
        raise _Skip(
            f"the {kind} cannot be read ({type(cause).__name__}: {cause}); it may be damaged "
            f"or truncated: open and re-save it, or save its text as .txt"
        ) from e


def _read_html(path: Path, markup: str) -> list[Document]:
    """An HTML file's text: blocks apart, ``h1``-``h6`` as ``#`` headings, tables as Markdown
    rows, scripts and styles left out."""
    text, _ = html_text(markup)
    metadata = default_file_metadata_func(str(path))
    document = Document(text=text, id_=str(path), metadata=metadata)
    document.excluded_embed_metadata_keys = list(FILE_METADATA_HIDDEN)
    document.excluded_llm_metadata_keys = list(FILE_METADATA_HIDDEN)
    return [document]


def _root_cause(e: BaseException) -> BaseException:
    """The innermost exception behind ``e`` (through ``raise ... from`` and tenacity retries)."""
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        last = getattr(e, "last_attempt", None)  # tenacity.RetryError
        inner = last.exception() if last is not None and last.failed else e.__cause__
        if inner is None:
            break
        e = inner
    return e


def drop_blank_documents(documents: Iterable[Document]) -> list[Document]:
    """Remove documents without text, warning about each; raise when nothing is left.

    Raises:
        EmptyCorpusError: the list is empty or every document is blank.
    """
    documents = list(documents)
    if not documents:
        raise EmptyCorpusError("No documents given: pass at least one non-empty Document.")
    kept = []
    for doc in documents:
        if not isinstance(doc, Document):
            raise ConfigurationError(
                f"Expected llama_index Document objects, got {type(doc).__name__}. Wrap text with "
                "Document(text=...)."
            )
        if doc.text and doc.text.strip():
            kept.append(doc)
        else:
            logger.warning("Skipping blank document %s", doc.metadata.get("file_path", doc.doc_id))
    if not kept:
        raise EmptyCorpusError(f"All {len(documents)} documents are blank: nothing to index.")
    return kept


__all__ = [
    "find_files",
    "LoadedDocuments",
    "ocr_options",
    "load_documents",
    "read_documents",
    "read_file_documents",
    "SkippedFile",
    "drop_blank_documents",
    "SUPPORTED_EXTENSIONS",
]
