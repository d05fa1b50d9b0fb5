"""Loading and chunking documents: readers for txt/md/pdf/html and a guarded splitter."""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llama_index.core import SimpleDirectoryReader
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document
from llama_index.core.utils import get_tqdm_iterable

from llama_index_rag_pack.core.errors import ConfigurationError, EmptyCorpusError
from llama_index_rag_pack.core.text_decoding import detect_text_encoding

logger = logging.getLogger(__name__)

SUPPORTED_EXTENSIONS = (".txt", ".md", ".markdown", ".pdf", ".html", ".htm", ".rst")
# all-MiniLM-L6-v2 reads at most 256 word pieces: longer chunks would be embedded truncated.
DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32


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
) -> list[Document]:
    """Read files and directories into LlamaIndex ``Document`` objects.

    Document ids are the file paths, so re-indexing a file replaces its old chunks. Binary or
    undecodable files, unreadable PDFs and blank files are skipped with a warning each (see
    :func:`read_documents` for the list of skipped files).

    Raises:
        ConfigurationError: a path does not exist.
        EmptyCorpusError: no supported file was found, or no file had any text.
    """
    return read_documents(
        paths, recursive=recursive, extensions=extensions, show_progress=show_progress
    ).documents


def read_documents(
    paths: str | Path | Sequence[str | Path],
    *,
    recursive: bool = True,
    extensions: Sequence[str] = SUPPORTED_EXTENSIONS,
    show_progress: bool = False,
) -> LoadedDocuments:
    """:func:`load_documents`, also returning the files skipped and why.

    Text files may be UTF-8 (with or without BOM), UTF-16/32 with a BOM, or a legacy encoding
    in any language (:func:`~llama_index_rag_pack.core.text_decoding.detect_text_encoding`).

    Raises:
        ConfigurationError: a path does not exist.
        EmptyCorpusError: no supported file was found, or no file had any text.
    """
    files = find_files(paths, recursive=recursive, extensions=extensions)
    loaded = LoadedDocuments()
    for path in get_tqdm_iterable(files, show_progress, "Reading files"):
        try:
            docs = _read_file(path)
        except _Skip as skip:
            loaded.skipped.append(SkippedFile(str(path), str(skip)))
            logger.warning("Skipped %s: %s", path, skip)
            continue
        if not any(d.text and d.text.strip() for d in docs):
            loaded.skipped.append(SkippedFile(str(path), "blank (no text in it)"))
            logger.warning("Skipped %s: blank (no text in it)", path)
            continue
        loaded.documents.extend(d for d in docs if d.text and d.text.strip())
    if not loaded.documents:
        listed = "; ".join(map(str, loaded.skipped[:5]))
        raise EmptyCorpusError(
            f"Nothing to index: none of the {len(files)} files has readable text ({listed})."
        )
    return loaded


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


def _read_file(path: Path) -> list[Document]:
    """The documents of one file (a PDF may give one per page).

    Raises:
        _Skip: the file is binary, undecodable or an unreadable PDF.
    """
    if path.suffix.lower() == ".pdf":
        return _read_pdf(path)
    encoding = detect_text_encoding(path.read_bytes())
    if encoding is None:
        raise _Skip(NOT_TEXT)
    reader = SimpleDirectoryReader(
        input_files=[str(path)],
        filename_as_id=True,
        encoding=encoding.encoding,
        errors=encoding.errors,
        raise_on_error=True,
    )
    return reader.load_data()


def _read_pdf(path: Path) -> list[Document]:
    pdf_logger = logging.getLogger("pypdf")
    level = pdf_logger.level
    pdf_logger.setLevel(logging.ERROR)  # pypdf logs each repair attempt of a broken file
    try:
        reader = SimpleDirectoryReader(
            input_files=[str(path)], filename_as_id=True, raise_on_error=True
        )
        return reader.load_data()
    except ImportError:
        raise
    except Exception as e:
        cause = _root_cause(e)
        raise _Skip(
            f"the PDF cannot be read ({type(cause).__name__}: {cause}); it may be damaged or "
            "truncated: open and re-save (or re-export) it as PDF, or save its text as .txt"
        ) from e
    finally:
        pdf_logger.setLevel(level)


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


def chunk_id(position: int, document: BaseNode, tenant_field: str | None = None) -> str:
    """The id of chunk number ``position`` of ``document``: stable across runs and machines.

    With ``tenant_field``, the document's tenant is part of the id, so two tenants' documents
    with the same id never share chunk ids.

    Example:
        >>> from llama_index.core import Document
        >>> chunk_id(0, Document(id_="a", text="x")) == chunk_id(0, Document(id_="a", text="y"))
        True
        >>> chunk_id(0, Document(id_="a", text="x")) == chunk_id(1, Document(id_="a", text="x"))
        False
        >>> acme, globex = (Document(id_="a", text="x", metadata={"t": t}) for t in "AG")
        >>> chunk_id(0, acme, "t") == chunk_id(0, globex, "t")
        False
    """
    key = document.node_id
    if tenant_field is not None:
        key = json.dumps([(document.metadata or {}).get(tenant_field), key])
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"llama-index-rag-pack:{key}:{position}"))


def check_chunking(chunk_size: int, chunk_overlap: int) -> None:
    """Raise :class:`ConfigurationError` unless ``0 <= chunk_overlap < chunk_size`` (whole
    numbers): checked before anything is read, loaded or deleted."""
    for name, value in (("chunk_size", chunk_size), ("chunk_overlap", chunk_overlap)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"{name} must be a whole number, got {value!r}")
    if chunk_size <= 0:
        raise ConfigurationError(f"chunk_size must be > 0, got {chunk_size}")
    if not 0 <= chunk_overlap < chunk_size:
        raise ConfigurationError(
            f"chunk_overlap must be >= 0 and < chunk_size ({chunk_size}), got {chunk_overlap}"
        )


def split_documents(
    documents: Sequence[Document],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    show_progress: bool = False,
    tenant_field: str | None = None,
) -> list[BaseNode]:
    """Split documents into sentence-aware chunks of at most ``chunk_size`` tokens.

    A chunk's id is derived from its document's id and its position in it (a UUID5), so indexing
    the same documents twice gives the same ids, and equal scores rank the same way every time;
    with ``tenant_field``, from the document's tenant too (:func:`chunk_id`).
    """
    check_chunking(chunk_size, chunk_overlap)
    ids = functools.partial(chunk_id, tenant_field=tenant_field) if tenant_field else chunk_id
    splitter = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap, id_func=ids)
    return splitter.get_nodes_from_documents(documents, show_progress=show_progress)


__all__ = [
    "check_chunking",
    "chunk_id",
    "find_files",
    "LoadedDocuments",
    "load_documents",
    "read_documents",
    "SkippedFile",
    "drop_blank_documents",
    "split_documents",
    "SUPPORTED_EXTENSIONS",
]
