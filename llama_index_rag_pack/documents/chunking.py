"""Chunking documents: sentence-aware chunks with stable ids, long texts cut first.

A chunk's id is derived from its document's id (and tenant) and its position in it, so indexing
the same documents twice gives the same ids. Texts longer than :data:`MAX_SPLIT_CHARS` are cut
at paragraph ends before LlamaIndex's ``SentenceSplitter`` sees them (nltk's sentence tokenizer
gives up after 5 s, at about 7 MB of text), and whatever the splitter raises is one
:class:`~llama_index_rag_pack.core.errors.ConfigurationError` naming the file.

Markdown tables (what :mod:`~llama_index_rag_pack.documents.office_files` writes) are cut only
between rows: each row is one unit of the splitter, and a table that does not fit whole in one
chunk is cut into groups of whole rows, each under the table's header row (:mod:`.tables`).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterator, Sequence

from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document, MetadataMode
from llama_index.core.utils import get_tokenizer, get_tqdm_iterable

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.text_decoding import split_at_breaks
from llama_index_rag_pack.documents.sections import (
    SECTION_KEY,
    SectionPaths,
    format_section,
    heading_positions,
    parse_section,
    section_at,
)
from llama_index_rag_pack.documents.sentences import punkt_sentences
from llama_index_rag_pack.documents.tables import (
    MarkdownTable,
    find_tables,
    split_table_rows,
    table_row_groups,
)

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "MAX_SPLIT_CHARS",
    "check_chunking",
    "chunk_id",
    "split_documents",
]

# all-MiniLM-L6-v2 reads at most 256 word pieces: longer chunks would be embedded truncated.
DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32
#: Longer texts are cut (at paragraph ends) before chunking: nltk times out at 5 s, ~7 MB.
MAX_SPLIT_CHARS = 100_000


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
    with ``tenant_field``, from the document's tenant too (:func:`chunk_id`). Texts longer than
    :data:`MAX_SPLIT_CHARS` are first cut at paragraph ends (:class:`_LongTextSplitter`).
    Markdown tables are cut only between rows; one that does not fit whole in a chunk is cut
    into groups of rows, each under the header row
    (:func:`~llama_index_rag_pack.documents.tables.table_row_groups`).

    Raises:
        ConfigurationError: bad ``chunk_size``/``chunk_overlap``, or a document that cannot be
            split with them (its metadata, e.g. a long file path, fills the chunk size).
    """
    check_chunking(chunk_size, chunk_overlap)
    ids = functools.partial(chunk_id, tenant_field=tenant_field) if tenant_field else chunk_id
    tokenizer = get_tokenizer()
    splitter = _LongTextSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        id_func=ids,
        tokenizer=tokenizer,
        chunking_tokenizer_fn=split_table_rows(punkt_sentences),
    )
    for doc in get_tqdm_iterable(documents, show_progress, "Splitting documents"):
        modes = (MetadataMode.EMBED, MetadataMode.LLM)
        metadata_len = max(len(tokenizer(doc.get_metadata_str(m))) for m in modes)
        if metadata_len >= chunk_size:
            raise ConfigurationError(
                f"{_name(doc)}: its metadata (file path and other fields) is {metadata_len} "
                f"tokens, which leaves no room for text in chunks of {chunk_size}; use a larger "
                f"chunk size (--chunk-size / chunk_size {metadata_len + 64} or more)"
            )
    nodes: list[BaseNode] = []
    for batch in _distinct_id_runs(documents):
        try:  # one call for many documents: core's per-call instrumentation paid once
            nodes += _with_sections(batch, splitter.get_nodes_from_documents)
        except (ValueError, TimeoutError) as error:
            culprit, e = batch[0], error
            for doc in batch:  # which one: the same error, for that document alone
                try:
                    splitter.get_nodes_from_documents([doc])
                except (ValueError, TimeoutError) as alone:
                    culprit, e = doc, alone
                    break
            raise ConfigurationError(
                f"{_name(culprit)}: cannot be split into chunks of {chunk_size} tokens ({e}); "
                "use a larger chunk size, or split the file into smaller ones"
            ) from e
    return nodes


def _with_sections(
    documents: list[Document], split: Callable[[list[Document]], list[BaseNode]]
) -> list[BaseNode]:
    """``split(documents)``, each chunk given the section path open where it starts
    (:mod:`~llama_index_rag_pack.documents.sections`) in its ``section`` metadata. The chunks
    are the ones the documents give without paths: a path never takes room from the text."""
    if SectionPaths.from_env() is SectionPaths.OFF:
        return split(documents)
    plans = {}
    for doc in documents:
        positions = heading_positions(doc.text)
        start = parse_section(doc.metadata.get(SECTION_KEY))
        if positions or start:
            plans[doc.doc_id] = (positions, start)
    nodes = split(documents)
    texts = {doc.doc_id: doc.text for doc in documents}
    after: dict[str, int] = {}  # where the document's last chunk was found
    for node in nodes:
        doc_id = node.ref_doc_id or ""
        plan = plans.get(doc_id)
        if plan is None:
            continue
        content = node.get_content()
        offset = _chunk_offset(texts[doc_id], content, after.get(doc_id, 0))
        after[doc_id] = offset
        path = format_section(section_at(plan[0], plan[1], offset + _headings_first(content)))
        if path:
            node.metadata[SECTION_KEY] = path
        else:
            node.metadata.pop(SECTION_KEY, None)
    return nodes


def _headings_first(chunk: str) -> int:
    """How many characters of ``chunk`` its opening headings and blank lines take: a chunk
    that starts with headings sits under them."""
    skipped = 0
    for line in chunk.splitlines(keepends=True):
        if line.strip() and not heading_positions(line):
            break
        skipped += len(line)
    return min(skipped, max(len(chunk) - 1, 0))


def _chunk_offset(text: str, chunk: str, start: int) -> int:
    """Where ``chunk`` starts in ``text``, looked for from ``start`` (the document's chunks
    come in order): the chunk, else its first line, else ``start``."""
    for probe in (chunk, chunk.strip().split("\n", 1)[0][:200]):
        found = text.find(probe, start) if probe else -1
        if found >= 0:
            return found
    return start


def _name(doc: Document) -> str:
    return str((doc.metadata or {}).get("file_path") or doc.doc_id)


def _distinct_id_runs(documents: Sequence[Document]) -> Iterator[list[Document]]:
    """``documents`` in runs of consecutive documents with distinct ids, in order: core's node
    parser gives each chunk the metadata of the last document of its id in one call, so two
    documents of one id are never split in the same call."""
    run: list[Document] = []
    ids: set[str] = set()
    for doc in documents:
        if doc.doc_id in ids:
            yield run
            run, ids = [], set()
        run.append(doc)
        ids.add(doc.doc_id)
    if run:
        yield run


class _LongTextSplitter(SentenceSplitter):
    """A ``SentenceSplitter`` that cuts texts into pieces first (:data:`MAX_SPLIT_CHARS`), and
    Markdown tables that do not fit whole in one chunk into groups of whole rows, each under the
    table's header row."""

    def split_text_metadata_aware(self, text: str, metadata_str: str) -> list[str]:
        budget = self.chunk_size - len(self._tokenizer(metadata_str))
        # Tables longer than a chunk first, whole: cut into pieces, they would lose their header.
        long = [t for t in find_tables(text) if self._count(text[t.start : t.end]) > budget]
        if long:
            return self._split_tables(text, long, metadata_str, self._split_pieces)
        return self._split_pieces(text, metadata_str)

    def _split_pieces(self, text: str, metadata_str: str) -> list[str]:
        """``text`` cut at paragraph ends into pieces the sentence splitter can take; a table
        that the splitter would cut is cut into row groups instead."""
        chunks: list[str] = []
        for piece in split_at_breaks(text, MAX_SPLIT_CHARS):
            plain = super().split_text_metadata_aware(piece, metadata_str)
            cut = [
                table
                for table in find_tables(piece)
                if not any(piece[table.start : table.end].strip() in chunk for chunk in plain)
            ]
            if cut:
                plain = self._split_tables(
                    piece, cut, metadata_str, super().split_text_metadata_aware
                )
            chunks += plain
        return chunks

    def _split_tables(
        self,
        text: str,
        tables: list[MarkdownTable],
        metadata_str: str,
        split_text: Callable[[str, str], list[str]],
    ) -> list[str]:
        """``text`` in chunks: ``tables`` in groups of rows under their header row, the text
        around them split by ``split_text``. A table's first group shares a chunk with the text
        before it (a title, a caption) where its header and a row fit beside it."""
        budget = self.chunk_size - len(self._tokenizer(metadata_str))
        chunks: list[str] = []
        position = 0
        for table in tables:
            before = text[position : table.start]
            room = None
            if before.strip():
                chunks += split_text(before, metadata_str)
                room = budget - self._count(f"{chunks[-1]}\n\n") if chunks else None
            if self._count(text[table.start : table.end]) <= budget:
                room = None  # it fits a chunk whole: beside the text before it, or alone
            groups = table_row_groups(table, budget, self._count, first_budget=room)
            first = groups[0].strip()
            if room is not None and self._count(f"{chunks[-1]}\n\n{first}") <= budget:
                chunks[-1] = f"{chunks[-1]}\n\n{first}"
                groups = groups[1:]
            for group in groups:
                if self._count(group) > budget:  # one row longer than a chunk: cut it
                    chunks += super().split_text_metadata_aware(group, metadata_str)
                else:
                    chunks.append(group.strip())
            position = table.end
        if text[position:].strip():
            chunks += split_text(text[position:], metadata_str)
        return chunks

    def _count(self, text: str) -> int:
        return len(self._tokenizer(text))
