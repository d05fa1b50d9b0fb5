"""Indexing a folder of any size: files read, embedded and written in bounded batches, with a
progress bar, and a run that was stopped resumes where it was.

Every document indexed this way carries the SHA-256 of its text (and of the chunking settings)
in its chunks' metadata (:data:`CONTENT_HASH_KEY`), with the number of chunks it was split into
(:data:`DOC_CHUNKS_KEY`); both are hidden from the embedding and the LLM. Before a batch is
embedded, its documents' stored rows are read: a document whose hash is unchanged and whose
chunks are all there is skipped, so a second run over the same folder embeds nothing, and a run
killed half-way re-does only the documents it had not finished (their partial rows are replaced).
A document's sentences are written before its chunks, so a document whose chunks are all there
has its sentences too.

With ``sync=True`` (``rag-pack index DIR --sync``) the documents stored for files under the
indexed paths that are gone (deleted, moved, renamed; and the parts a file no longer has, a PDF
with fewer pages) are deleted after the new and changed files are written, everywhere the pack
keeps them; RAPTOR leaves go without an LLM call, and the summaries above them are refreshed by
``rag-pack raptor update``. A file still there that cannot be read this time keeps what was
stored for it. Documents added through the Python API (no ``file_path``) are never touched.

Example:
    >>> report = index_files(["notes/"], uri="notes.db")  # doctest: +SKIP
    >>> report.summary()  # doctest: +SKIP
    '100,000 files: 100,000 documents; 99,400 indexed as 101,220 chunks, 600 unchanged'
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core import Document

from llama_index_rag_pack.core.errors import CollectionNotFoundError, EmptyCorpusError
from llama_index_rag_pack.documents.chunking import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    chunk_id,
)
from llama_index_rag_pack.documents.ingest import (
    SUPPORTED_EXTENSIONS,
    SkippedFile,
    find_files,
    ocr_options,
    read_file_documents,
)
from llama_index_rag_pack.documents.pdf.ocr_pages import OcrOptions
from llama_index_rag_pack.milvus.document_rows import (
    ABSOLUTE_PATH_KEY,
    FILE_PATH_KEY,
    GoneDocuments,
    delete_document_rows,
    gone_documents,
    stored_documents,
)
from llama_index_rag_pack.milvus.vector_memory import forget_vectors
from llama_index_rag_pack.pack.indexing import (
    CONTENT_HASH_KEY,
    DOC_CHUNKS_KEY,
    HIDDEN_KEYS,
    adopt_recorded_chunking,
)

logger = logging.getLogger(__name__)

__all__ = [
    "BATCH_CHARS",
    "BATCH_FILES",
    "FileIndexReport",
    "content_hash",
    "delete_gone",
    "index_files",
    "unchanged_documents",
]

#: A batch ends at this many files or this many characters of text, whichever comes first.
BATCH_FILES = 512
BATCH_CHARS = 4_000_000
_READ_BATCH = 1000


@dataclass
class FileIndexReport:
    """What :func:`index_files` did.

    Attributes:
        files: Supported files found.
        indexed: Documents embedded and written (new or changed).
        unchanged: Documents skipped: stored with the same text and chunking, all chunks there.
        chunks: Chunks written.
        skipped: Files that could not be read, each with its reason.
        synced: Whether this was a sync (``sync=True``): then ``new``, ``changed`` and
            ``removed`` are counted.
        new: Of ``indexed``, documents the collection did not hold.
        changed: Of ``indexed``, documents stored before with other text (or cut short).
        removed: Documents deleted because their file is gone (or lost that part).
        removed_files: The files that were gone.
        seconds: Wall time.
        pack: The pack over the collection (``None`` when nothing was readable).
    """

    files: int = 0
    indexed: int = 0
    unchanged: int = 0
    chunks: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    synced: bool = False
    new: int = 0
    changed: int = 0
    removed: int = 0
    removed_files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    pack: Any = None

    def summary(self) -> str:
        """One line, e.g. ``7 files: 6 documents (1 file skipped); 4 indexed as 9 chunks, 2
        unchanged``."""
        text = f"{self.files:,} files: {self.indexed + self.unchanged:,} documents"
        if self.skipped:
            n = len(self.skipped)
            text += f" ({n:,} file{'s' if n != 1 else ''} skipped)"
        text = f"{text}; {self.indexed:,} indexed as {self.chunks:,} chunks"
        if self.synced:
            text += f" ({self.new:,} new, {self.changed:,} changed)"
        text += f", {self.unchanged:,} unchanged"
        if self.synced:
            gone = len(self.removed_files)
            text += f", {self.removed:,} removed ({gone:,} file{'s' if gone != 1 else ''} gone)"
        return text


def content_hash(document: Document, chunk_size: int, chunk_overlap: int) -> str:
    """The SHA-256 of a document's text and the chunking settings it is split with."""
    digest = hashlib.sha256(f"{chunk_size}|{chunk_overlap}|".encode())
    digest.update(document.text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _stamp(document: Document, chunk_size: int, chunk_overlap: int) -> None:
    document.metadata[CONTENT_HASH_KEY] = content_hash(document, chunk_size, chunk_overlap)
    hidden = list(HIDDEN_KEYS)
    path = document.metadata.get(FILE_PATH_KEY)
    if isinstance(path, str) and path:  # a sync from another directory still finds it
        document.metadata[ABSOLUTE_PATH_KEY] = str(Path(path).resolve())
        hidden.append(ABSOLUTE_PATH_KEY)
    for keys in (document.excluded_embed_metadata_keys, document.excluded_llm_metadata_keys):
        keys.extend(k for k in hidden if k not in keys)


def unchanged_documents(store: Any, documents: Sequence[Document]) -> set[str]:
    """The ids of ``documents`` stored with the same hash and all their chunks.

    Looked up by primary key (chunk ids follow from the document id and the chunk's position,
    :func:`~llama_index_rag_pack.documents.chunking.chunk_id`), never by scanning the
    collection: first each document's chunk 0, then, where its hash matches, every chunk it
    says it has.
    """
    field = getattr(store, "tenant_field", None)
    first = {chunk_id(0, d, field): d for d in documents}
    heads = _rows_by_id(store, list(first), [CONTENT_HASH_KEY, DOC_CHUNKS_KEY])
    complete: dict[str, list[str]] = {}
    for key, doc in first.items():
        row = heads.get(key)
        count = row.get(DOC_CHUNKS_KEY) if row else None
        wanted = doc.metadata.get(CONTENT_HASH_KEY)
        if row and wanted and row.get(CONTENT_HASH_KEY) == wanted and isinstance(count, int):
            complete[doc.doc_id] = [chunk_id(i, doc, field) for i in range(count)]
    found = _rows_by_id(store, [i for ids in complete.values() for i in ids], [])
    return {doc_id for doc_id, ids in complete.items() if all(i in found for i in ids)}


def _rows_by_id(store: Any, ids: list[str], fields: list[str]) -> dict[str, dict[str, Any]]:
    """The rows of primary keys ``ids`` that exist, by id (``fields`` read besides the id)."""
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), _READ_BATCH):
        part = ids[start : start + _READ_BATCH]
        rows = store.client.query(store.collection_name, ids=part, output_fields=["id", *fields])
        out.update((str(row["id"]), row) for row in rows)
    return out


def _batches(
    files: Sequence[Path],
    skipped: list[SkippedFile],
    done: Callable[[int], None],
    ocr: OcrOptions,
) -> Iterator[list[Document]]:
    batch: list[Document] = []
    chars = count = 0
    for path in files:
        docs, skip = read_file_documents(path, ocr)
        count += 1
        if skip is not None:
            skipped.append(skip)
        batch += docs
        chars += sum(len(d.text) for d in docs)
        if count >= BATCH_FILES or chars >= BATCH_CHARS:
            yield batch
            done(count)
            batch, chars, count = [], 0, 0
    if batch or count:
        yield batch
        done(count)


def index_files(
    paths: str | Path | Sequence[str | Path],
    *,
    recursive: bool = True,
    overwrite: bool = False,
    sync: bool = False,
    show_progress: bool = False,
    ocr: str | OcrOptions = "auto",
    **pack_kwargs: Any,
) -> FileIndexReport:
    """Index files and folders into a pack's collection in batches (see the module).

    ``pack_kwargs`` are :class:`~llama_index_rag_pack.RagPack`'s (``uri``, ``collection_name``,
    ``chunk_size``, ...). ``overwrite`` drops the collection before the first batch. The
    collection is made by the first batch with any text when it does not exist. ``sync`` also
    deletes the documents of files under ``paths`` that are gone (and the parts a file lost),
    everywhere the pack keeps them
    (:func:`~llama_index_rag_pack.milvus.document_rows.gone_documents`); a folder emptied of
    supported files is then synced to nothing. ``ocr`` says how scanned PDF pages and images
    are read (``"auto"``, ``"force"``, ``"off"``:
    :func:`~llama_index_rag_pack.documents.ingest.ocr_options`).

    Raises:
        ConfigurationError: a path does not exist, or a bad setting.
        EmptyCorpusError: no supported file, or none with text (and no collection to keep).
    """
    from llama_index_rag_pack.pack.rag_pack import RagPack

    start = time.perf_counter()
    ocr_settings = ocr_options(ocr, show_progress)
    # the pack's own bars (chunking, embeddings) show progress inside each batch
    pack_kwargs.setdefault("show_progress", show_progress)
    try:
        files = find_files(paths, recursive=recursive)
    except EmptyCorpusError:
        if not sync:
            raise
        files = []  # every file under the paths is gone: the sync removes them all
    report = FileIndexReport(files=len(files), synced=sync)
    chunk_size = pack_kwargs.get("chunk_size", DEFAULT_CHUNK_SIZE)
    chunk_overlap = pack_kwargs.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP)
    pack = None if overwrite else _open_existing(RagPack, pack_kwargs)
    if pack is not None:  # the default chunking takes the collection's (hashes match it)
        adopt_recorded_chunking(pack)
        chunk_size, chunk_overlap = pack.chunk_size, pack.chunk_overlap
    # a collection this run makes holds only what it wrote: files are read once each, so
    # nothing is looked up (a lookup per batch grows with the collection)
    made_here = pack is None
    stored = stored_documents(pack) if sync and pack is not None else []
    stored_ids = {doc.doc_id for doc in stored}
    read_ids: dict[Path, set[str]] = defaultdict(set)
    try:
        with _progress(len(files), show_progress) as advance:
            for batch in _batches(files, report.skipped, advance.files, ocr_settings):
                for doc in batch:
                    _stamp(doc, chunk_size, chunk_overlap)
                    if sync and isinstance(doc.metadata.get(FILE_PATH_KEY), str):
                        read_ids[Path(doc.metadata[FILE_PATH_KEY]).resolve()].add(doc.doc_id)
                same = set() if made_here else unchanged_documents(pack.vector_store, batch)
                todo = [d for d in batch if d.doc_id not in same]
                report.unchanged += len(batch) - len(todo)
                report.changed += sum(d.doc_id in stored_ids for d in todo)
                if todo:  # in a collection made before, their old or partial rows go first
                    replace = not made_here
                    pack, written = _write(RagPack, pack, todo, overwrite, replace, pack_kwargs)
                    report.indexed += len(todo)
                    report.chunks += written
                    advance.chunks(written)
        if stored:
            gone = gone_documents(
                stored,
                _as_list(paths),
                files,
                read_ids,
                recursive=recursive,
                extensions=set(SUPPORTED_EXTENSIONS),
            )
            report.removed = delete_gone(pack, gone)
            report.removed_files = sorted(gone.files)
    finally:  # one flush: Lite seals a segment at each, and scores BM25 per segment
        if pack is not None:
            pack.flush()
    report.new = report.indexed - report.changed if sync else 0
    report.pack, report.seconds = pack, time.perf_counter() - start
    if pack is None:
        listed = "; ".join(map(str, report.skipped[:5]))
        raise EmptyCorpusError(
            f"Nothing to index: none of the {len(files)} files has readable text ({listed})."
        )
    return report


def delete_gone(pack: Any, gone: GoneDocuments) -> int:
    """Delete ``gone``'s documents everywhere the pack keeps them (chunks, sentences, BM25
    statistics, RAPTOR leaves); the number deleted."""
    from llama_index_rag_pack.pack.deletion import remove_from_trees

    by_tenant: dict[str | None, list[str]] = defaultdict(list)
    for doc in gone.documents:
        by_tenant[doc.tenant].append(doc.doc_id)
    store = pack.vector_store
    for tenant, ids in by_tenant.items():
        delete_document_rows(store, sorted(ids), tenant=tenant, sentence_index=pack.sentence_index)
        remove_from_trees(pack, tenant, sorted(ids))
    if by_tenant:
        forget_vectors(store.client, store.collection_name)
        store.client.flush(store.collection_name)
        pack.forget_engines()
        logger.info("Sync removed %d documents of %d files", len(gone.documents), len(gone.files))
    return len(gone.documents)


def _as_list(paths: str | Path | Sequence[str | Path]) -> list[str | Path]:
    return [paths] if isinstance(paths, (str, Path)) else list(paths)


def _open_existing(rag_pack: Any, pack_kwargs: dict[str, Any]) -> Any:
    try:
        return rag_pack.open(**pack_kwargs)
    except CollectionNotFoundError:
        return None


def _write(
    rag_pack: Any,
    pack: Any,
    docs: list[Document],
    overwrite: bool,
    replace: bool,
    kwargs: dict[str, Any],
) -> tuple[Any, int]:
    if pack is None:  # the first batch with text makes (or replaces) the collection
        pack = rag_pack(docs, overwrite=overwrite, flush=False, **kwargs)
        return pack, pack.count()
    return pack, pack.insert(docs, flush=False, replace=replace)


class _Advance:
    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.start = time.perf_counter()
        self.total_chunks = 0

    def files(self, count: int) -> None:
        if self.bar is not None:
            self.bar.update(count)

    def chunks(self, count: int) -> None:
        self.total_chunks += count
        if self.bar is not None:
            rate = self.total_chunks / max(1e-9, time.perf_counter() - self.start)
            self.bar.set_postfix_str(f"{self.total_chunks:,} chunks, {rate:.0f} chunks/s")


class _progress:  # noqa: N801  (a context manager used as a function)
    def __init__(self, total: int, show: bool) -> None:
        self.total, self.show, self.bar = total, show, None

    def __enter__(self) -> _Advance:
        if self.show:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, unit="file", desc="Indexing files")
        return _Advance(self.bar)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
