"""Loading and chunking documents: readers for txt/md/pdf/html and a guarded splitter."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

from llama_index.core import SimpleDirectoryReader
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document

from llama_index_rag_pack.core.errors import ConfigurationError, EmptyCorpusError

logger = logging.getLogger(__name__)

SUPPORTED_EXTENSIONS = (".txt", ".md", ".markdown", ".pdf", ".html", ".htm", ".rst")
# all-MiniLM-L6-v2 reads at most 256 word pieces: longer chunks would be embedded truncated.
DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32


def load_documents(
    paths: str | Path | Sequence[str | Path],
    *,
    recursive: bool = True,
    extensions: Sequence[str] = SUPPORTED_EXTENSIONS,
    show_progress: bool = False,
) -> list[Document]:
    """Read files and directories into LlamaIndex ``Document`` objects.

    Document ids are the file paths, so re-indexing a file replaces its old chunks.

    Raises:
        ConfigurationError: a path does not exist.
        EmptyCorpusError: no supported file was found, or every file was blank.
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
    reader = SimpleDirectoryReader(
        input_files=[str(f) for f in dict.fromkeys(files)], filename_as_id=True
    )
    documents = reader.load_data(show_progress=show_progress)
    return drop_blank_documents(documents)


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


def chunk_id(position: int, document: BaseNode) -> str:
    """The id of chunk number ``position`` of ``document``: stable across runs and machines.

    Example:
        >>> from llama_index.core import Document
        >>> chunk_id(0, Document(id_="a", text="x")) == chunk_id(0, Document(id_="a", text="y"))
        True
        >>> chunk_id(0, Document(id_="a", text="x")) == chunk_id(1, Document(id_="a", text="x"))
        False
    """
    return str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"llama-index-rag-pack:{document.node_id}:{position}")
    )


def split_documents(
    documents: Sequence[Document],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    show_progress: bool = False,
) -> list[BaseNode]:
    """Split documents into sentence-aware chunks of at most ``chunk_size`` tokens.

    A chunk's id is derived from its document's id and its position in it (a UUID5), so indexing
    the same documents twice gives the same ids, and equal scores rank the same way every time.
    """
    if chunk_size <= 0:
        raise ConfigurationError(f"chunk_size must be > 0, got {chunk_size}")
    if not 0 <= chunk_overlap < chunk_size:
        raise ConfigurationError(
            f"chunk_overlap must be >= 0 and < chunk_size ({chunk_size}), got {chunk_overlap}"
        )
    splitter = SentenceSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, id_func=chunk_id
    )
    return splitter.get_nodes_from_documents(documents, show_progress=show_progress)


__all__ = [
    "chunk_id",
    "load_documents",
    "drop_blank_documents",
    "split_documents",
    "SUPPORTED_EXTENSIONS",
]
