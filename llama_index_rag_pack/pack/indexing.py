"""Indexing steps of a :class:`~llama_index_rag_pack.RagPack` beside the chunks themselves: the
sentence index, and which mode a collection answers with by default."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from llama_index.core.indices.utils import embed_nodes

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.chunking import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    split_documents,
)
from llama_index_rag_pack.documents.sentences import embed_sentence_units, sentence_units
from llama_index_rag_pack.milvus import connection as milvus_utils
from llama_index_rag_pack.milvus.document_rows import delete_document_rows, group_by_tenant
from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex
from llama_index_rag_pack.models import index_settings
from llama_index_rag_pack.pack.modes import DEFAULT_MODE, DENSE_ONLY_DEFAULT_MODE

logger = logging.getLogger(__name__)

__all__ = [
    "SLICE_CHARS",
    "document_slices",
    "nothing_stored",
    "write_slice",
    "chunk_slice",
    "CONTENT_HASH_KEY",
    "DOC_CHUNKS_KEY",
    "HIDDEN_KEYS",
    "stamp_chunk_counts",
    "default_mode_for",
    "check_sentence_vectors",
    "embed_for_index",
    "describe_milvus",
    "embed_chunks",
    "open_pack_store",
    "open_sentence_index",
    "sentence_vectors",
    "store_sentences",
]


#: Metadata key of a document's text hash (with the chunking settings), on each of its chunks.
CONTENT_HASH_KEY = "content_sha256"
#: Metadata key of the number of chunks the document was split into, on each of them.
DOC_CHUNKS_KEY = "doc_chunks"
#: Both, hidden from the embedding and the LLM.
HIDDEN_KEYS = (CONTENT_HASH_KEY, DOC_CHUNKS_KEY)


def stamp_chunk_counts(nodes: Sequence[Any]) -> None:
    """Record on each chunk of a hashed document how many chunks that document has (what
    :func:`~llama_index_rag_pack.pack.file_indexing.unchanged_documents` checks); chunks of
    other documents are left as they are."""
    counts: dict[str, int] = {}
    for node in nodes:
        if CONTENT_HASH_KEY in node.metadata:
            counts[node.ref_doc_id] = counts.get(node.ref_doc_id, 0) + 1
    for node in nodes:
        if node.ref_doc_id in counts:
            node.metadata[DOC_CHUNKS_KEY] = counts[node.ref_doc_id]
            for keys in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
                if DOC_CHUNKS_KEY not in keys:
                    keys.append(DOC_CHUNKS_KEY)


#: Characters of document text chunked, embedded and written at a time (about 2,000 chunks of
#: English at the default size): what one insert holds in memory, however large the input.
SLICE_CHARS = 2_000_000


def document_slices(
    documents: Sequence[Any], tenant_field: str | None = None, max_chars: int | None = None
) -> Iterator[list[Any]]:
    """``documents`` in slices of about ``max_chars`` (default :data:`SLICE_CHARS`) characters
    of text, in order; the documents of one id (of one tenant) always share a slice, so a
    slice's delete never removes another slice's new rows."""
    limit = SLICE_CHARS if max_chars is None else max_chars
    by_id: dict[tuple[Any, str], list[Any]] = {}
    for doc in documents:
        owner = (doc.metadata or {}).get(tenant_field) if tenant_field else None
        by_id.setdefault((owner, doc.doc_id), []).append(doc)
    part: list[Any] = []
    size = 0
    for docs in by_id.values():
        chars = sum(len(d.text) for d in docs)
        if part and size + chars > limit:
            yield part
            part, size = [], 0
        part += docs
        size += chars
    if part:
        yield part


def nothing_stored(pack: Any) -> bool:
    """Whether the pack's collection and its sentence index hold no row (an insert then has
    no old rows to replace: its slices have ids of their own)."""
    if milvus_utils.count_entities(pack.vector_store):
        return False
    return pack.sentence_index is None or not pack.sentence_index.count()


def chunk_slice(pack: Any, documents: Sequence[Any]) -> list[Any]:
    """The chunks of a slice, each tenant's documents split apart, with their chunk counts."""
    field = pack.tenant_field
    nodes = [
        node
        for group in group_by_tenant(documents, field).values()
        for node in split_documents(
            group, chunk_size=pack.chunk_size, chunk_overlap=pack.chunk_overlap,
            show_progress=pack.show_progress, tenant_field=field,
        )
    ]  # fmt: skip
    stamp_chunk_counts(nodes)  # a resumed run skips documents stored whole
    return nodes


def write_slice(
    pack: Any,
    documents: Sequence[Any],
    *,
    check_language: bool = True,
    replace: bool = True,
    nodes: list[Any] | None = None,
    found: Sequence[Any] | None = None,
) -> int:
    """Chunk, embed and store one slice of :meth:`RagPackBase.insert
    <llama_index_rag_pack.pack.pack_base.RagPackBase.insert>` (not flushed); the chunks
    written. ``nodes``: its chunks (:func:`chunk_slice`), already made; ``found``: their BM25
    copies, made by the analysis helper (:mod:`~llama_index_rag_pack.pack.pipeline.slice_prep`).
    Everything that can fail on the input or the model runs before the slice's documents' old
    rows are deleted (``replace=False``: none can exist); sentences are written before chunks."""
    field, store, sentences = pack.tenant_field, pack.vector_store, pack.sentence_index
    nodes = chunk_slice(pack, documents) if nodes is None else nodes
    before_embedding(store, nodes, pack.embed_model, check_language=check_language, found=found)
    units, vectors = embed_for_index(
        nodes, sentences, pack.embed_model, pack.sentence_vectors, pack.show_progress
    )
    for owner, group in group_by_tenant(documents, field).items() if replace else ():
        ids = list(dict.fromkeys(doc.doc_id for doc in group))  # a failure above leaves them
        delete_document_rows(store, ids, tenant=owner, sentence_index=sentences)
    # sentences first: a document whose chunks are all stored has its sentences too
    store_sentences(sentences, units, vectors)
    pack.index.insert_nodes(nodes, show_progress=pack.show_progress)
    return len(nodes)


def open_pack_store(
    uri: str | None, collection_name: str | None, embed_model: Any, **kwargs: Any
) -> Any:
    """The pack's ``MilvusVectorStore``, for vectors of ``embed_model``'s dimension
    (``kwargs``: :func:`~llama_index_rag_pack.milvus.connection.open_vector_store`'s options)."""
    dim = len(embed_model.get_text_embedding("dimension probe"))
    return milvus_utils.open_vector_store(uri, collection_name, dim=dim, **kwargs)


def open_sentence_index(
    vector_store: Any, *, enabled: bool, overwrite: bool = False
) -> MilvusSentenceIndex | None:
    """The sentence index beside the store's collection (dropped first with ``overwrite``), or
    ``None`` when ``enabled`` is off or the store has no Milvus client."""
    if not enabled or getattr(vector_store, "client", None) is None:
        return None
    index = MilvusSentenceIndex(vector_store.client, vector_store.collection_name)
    if overwrite:
        index.drop()
    return index


#: Chunks sampled to tell whether a corpus is mostly in a language the embedding model can't read.
LANGUAGE_SAMPLE = 64


def warn_if_model_cannot_read(nodes: Sequence[Any], embed_model: Any) -> str | None:
    """One warning line when the bundled English embedding model meets chunks mostly in other
    languages (a sample of them); the line is also returned. BM25 still reads them in their
    language, so this is never an error."""
    from llama_index_rag_pack.documents.language_analysis import LanguageAnalyzer
    from llama_index_rag_pack.models.settings import is_bundled_embed_model

    if not nodes or not is_bundled_embed_model(embed_model):
        return None
    step = max(1, len(nodes) // LANGUAGE_SAMPLE)
    sample = list(nodes)[::step][:LANGUAGE_SAMPLE]
    analyzer = LanguageAnalyzer.auto()
    counts: dict[str, int] = {}
    for node in sample:
        language = analyzer.main_language(node.get_content()[:2000])
        counts[language] = counts.get(language, 0) + 1
    other = len(sample) - counts.get("en", 0)
    if other * 2 <= len(sample):
        return None
    shares = ", ".join(
        f"{code} {100 * n // len(sample)}%"
        for code, n in sorted(counts.items(), key=lambda kv: -kv[1])
        if code != "en"
    )
    message = (
        f"Most chunks are not English ({shares} of a sample) and the embedding model is the "
        "bundled English all-MiniLM-L6-v2: BM25 reads them in their language, but dense and "
        "hybrid ranking will be weak. For a multilingual model pass embed_model='openai:MODEL' "
        "(an OpenAI-compatible endpoint, e.g. text-embedding-v3) or a local multilingual "
        "sentence-transformers directory (--embed-model; docs/languages.md)."
    )
    logger.warning(message)
    return message


def before_embedding(
    store: Any,
    nodes: Sequence[Any],
    embed_model: Any,
    *,
    check_language: bool = True,
    found: Sequence[Any] | None = None,
) -> None:
    """What indexing checks before the chunks are embedded and anything is written: their BM25
    analysis (a store of the pack's analyses them now, so a segmenter that fails does so with
    the collection untouched; ``found``: their analysed copies, already made) and whether the
    embedding model reads their language."""
    prepare = getattr(store, "prepare_bm25", None)
    if callable(prepare):
        prepare(list(nodes), found=found)
    if check_language:
        warn_if_model_cannot_read(nodes, embed_model)


def describe_bm25(store: Any) -> dict[str, str]:
    """``{"bm25": ...}``: the store's BM25 analysis in one line (``{}`` without BM25)."""
    analysis = getattr(store, "bm25_analysis", None)
    return {"bm25": analysis.describe()} if analysis is not None else {}


def describe_milvus(store: Any) -> dict[str, str]:
    """``{"milvus": ...}``: the server's version and what it can serve, in one line (``{}`` for
    a store the pack did not open)."""
    caps = getattr(store, "capabilities", None)
    if caps is None:
        return {}
    vectors = getattr(store, "bm25_vectors", None)
    if vectors == caps.bm25 or vectors is None:
        return {"milvus": caps.describe()}
    return {"milvus": f"{caps.describe()}; this collection's BM25 vectors are the pack's own"}


def embed_chunks(nodes: Sequence[Any], embed_model: Any, show_progress: bool = False) -> None:
    """Give every chunk its embedding now, as core's index would when storing it (so that a
    model that fails, fails before any old row is deleted)."""
    vectors = embed_nodes(nodes, embed_model, show_progress=show_progress)
    for node in nodes:
        node.embedding = vectors[node.node_id]


def sentence_vectors(
    index: MilvusSentenceIndex | None,
    nodes: Sequence[Any],
    embed_model: Any,
    show_progress: bool = False,
) -> tuple[list[Any], list[Any]]:
    """The sentence units of new chunks ``nodes`` and their vectors, for :func:`store_sentences`
    (none without a sentence index)."""
    if index is None:
        return [], []
    units = sentence_units(nodes)
    if not units:
        return [], []
    return units, embed_sentence_units(units, embed_model, show_progress=show_progress)


def check_sentence_vectors(value: str | None) -> str:
    """``value``, or ``RAG_PACK_SENTENCE_VECTORS``, or ``separate``, checked.

    Raises:
        ConfigurationError: not one of ``separate`` and ``pooled``.
    """

    from llama_index_rag_pack.models.token_pooling import SENTENCE_VECTORS

    chosen = value or os.environ.get("RAG_PACK_SENTENCE_VECTORS") or "separate"
    if chosen not in SENTENCE_VECTORS:
        raise ConfigurationError(
            f"sentence_vectors must be one of {', '.join(SENTENCE_VECTORS)}; got {chosen!r}."
        )
    return chosen


def embed_for_index(
    nodes: Sequence[Any],
    index: MilvusSentenceIndex | None,
    embed_model: Any,
    mode: str = "separate",
    show_progress: bool = False,
) -> tuple[list[Any], list[Any]]:
    """Give every chunk its embedding, and return its sentences' units and vectors (none
    without a sentence index). ``mode="pooled"``: one pass per chunk gives both, where the
    model can (:mod:`~llama_index_rag_pack.models.token_pooling`); sentences its pass does not
    reach are embedded on their own. Otherwise chunks and sentences are embedded apart."""
    pooler = getattr(embed_model, "token_pooler", None)
    pooler = pooler() if mode == "pooled" and index is not None and callable(pooler) else None
    if pooler is None and mode == "pooled" and index is not None:
        logger.info(
            "Sentence vectors embedded one by one: %s cannot pool", type(embed_model).__name__
        )
    if pooler is None:
        embed_chunks(nodes, embed_model, show_progress)
        return sentence_vectors(index, nodes, embed_model, show_progress)
    from llama_index.core.schema import MetadataMode

    from llama_index_rag_pack.core.text_decoding import without_lone_surrogates
    from llama_index_rag_pack.documents.sentences import chunk_sentences

    texts = [
        without_lone_surrogates(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes
    ]
    bodies = [chunk_sentences(n.get_content(metadata_mode=MetadataMode.NONE)) for n in nodes]
    chunk_vectors, pooled = pooler.pool(texts, bodies)
    for node, vector in zip(nodes, chunk_vectors, strict=True):
        node.embedding = vector.tolist()
    units = sentence_units(nodes)
    by_chunk = {n.node_id: iter(p) for n, p in zip(nodes, pooled, strict=True)}
    vectors: list[Any] = [next(by_chunk[u.chunk_id], None) for u in units]
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:  # past the model's length: embedded on their own
        found = embed_sentence_units([units[i] for i in missing], embed_model)
        for i, vector in zip(missing, found, strict=True):
            vectors[i] = vector
    return units, np.asarray(vectors, dtype=np.float32)


def store_sentences(index: MilvusSentenceIndex | None, units: list[Any], vectors: list[Any]) -> int:
    """Store what :func:`sentence_vectors` made (the sentences of the chunks they replace went
    with those chunks: ``milvus.document_rows.delete_document_rows``), unflushed, like the
    chunks (:meth:`RagPackBase.flush <llama_index_rag_pack.pack.pack_base.RagPackBase.flush>`
    flushes both); the number written."""
    if index is None or not units:
        return 0
    index.create(dim=int(np.shape(vectors)[1]))
    written = index.insert(units, vectors, flush=False)  # flushed with the chunks
    logger.info("Indexed %d sentences", written)
    return written


def default_mode_for(vector_store: Any) -> str:
    """``hybrid_convex`` on a collection with BM25, else ``vector``."""
    client = getattr(vector_store, "client", None)
    if client is not None and milvus_utils.has_bm25(client, vector_store.collection_name):
        return DEFAULT_MODE
    return DENSE_ONLY_DEFAULT_MODE


# ------------------------------------------------------------------- one model per collection
def adopt_recorded_chunking(pack: Any) -> None:
    """A pack left at the default chunking takes its collection's
    (:func:`~llama_index_rag_pack.models.index_settings.adopt_recorded_chunking`)."""
    index_settings.adopt_recorded_chunking(pack, (DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP))


def check_index_settings(pack: Any, requested_bm25: Any = None) -> dict[str, str]:
    """Refuse an insert made with another embedding model or chunking than the collection's
    (:mod:`~llama_index_rag_pack.models.index_settings`), or with a BM25 analysis asked for by
    name that is not the stored one; the settings to record where none are yet.

    Raises:
        ConfigurationError: one line naming what differs and ``--overwrite`` or ``--reindex``.
    """
    adopt_recorded_chunking(pack)
    analysis = getattr(pack.vector_store, "bm25_analysis", None)
    if isinstance(requested_bm25, str) and requested_bm25 != "auto" and analysis is not None:
        from llama_index_rag_pack.documents.bm25_analysis import resolve_analyzer

        if resolve_analyzer(requested_bm25).name != analysis.name:
            raise ConfigurationError(
                f"Collection {pack.vector_store.collection_name!r} is analysed for BM25 as "
                f"{analysis.name!r}, not {requested_bm25!r}: re-analyse it first (`rag-pack "
                f"index --reindex --bm25-analyzer {requested_bm25}`), or rebuild it "
                "(`--overwrite`)."
            )
    return index_settings.check_index_settings(pack)


record_index_settings = index_settings.record_index_settings
