"""Rows of a collection analysed on the client: each chunk's analysed copy, its language in its
metadata, and the collection's language profile, written as the chunks are.

:func:`add_analysed_nodes` is what the pack's ``MilvusVectorStore.add`` runs
(:mod:`~llama_index_rag_pack.milvus.store_classes`); RAPTOR's tree store writes its rows with
:func:`analysed_row` and :func:`record_languages` too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.documents.bm25_analysis import (
    LANGUAGES_PROPERTY,
    AnalysedChunk,
    Bm25Analysis,
    ChunkToAnalyse,
    analyse_chunks,
    document_headings,
)
from llama_index_rag_pack.documents.language_profile import LanguageProfile
from llama_index_rag_pack.documents.languages import CJK_LANGUAGES, normalize_language
from llama_index_rag_pack.milvus.bm25.bm25_fields import (
    BM25_TEXT_FIELD,
    LANGUAGE_KEY,
    collection_properties,
)
from llama_index_rag_pack.milvus.bm25.client_bm25 import WRITE_LOCK
from llama_index_rag_pack.milvus.bm25.client_writes import weigh_rows

logger = logging.getLogger(__name__)

__all__ = [
    "add_analysed_nodes",
    "analyse_nodes",
    "analysed_row",
    "chunks_to_analyse",
    "node_text",
    "prepare_analysed",
    "record_languages",
]


def chunks_to_analyse(nodes: Sequence[Any], texts: Sequence[str]) -> list[ChunkToAnalyse]:
    """What the analysis of ``nodes`` (whose texts are ``texts``) reads of them."""
    out = []
    for node, text in zip(nodes, texts, strict=True):
        metadata = getattr(node, "metadata", None)
        given = metadata.get(LANGUAGE_KEY) if isinstance(metadata, dict) else None
        out.append(
            ChunkToAnalyse(
                text,
                tuple(document_headings(metadata)),
                normalize_language(given),
                _doc_key(node),
                _needs_hint(node),
            )
        )
    return out


def analyse_nodes(
    analysis: Bm25Analysis | None,
    nodes: Sequence[Any],
    texts: Sequence[str],
    found: Sequence[AnalysedChunk] | None = None,
) -> list[AnalysedChunk]:
    """The analysed copies of ``nodes`` (whose texts are ``texts``; ``found``: already made by
    :func:`~llama_index_rag_pack.documents.bm25_analysis.analyse_chunks` from
    :func:`chunks_to_analyse`).

    Under a language-aware analysis, each node's language is recorded in its metadata
    (:data:`~llama_index_rag_pack.milvus.bm25.bm25_fields.LANGUAGE_KEY`, hidden from the embedding
    and LLM text), and a node that already has one (written before and read back, or set by the
    user: ``"de"``, ``"zh-CN"``, ``"German"``) is analysed in it. A value that names no
    language is left as it is, and not used. The words of a chunk too short to identify take
    the language of its document, identified over the document's chunks here.
    """
    if analysis is None or not analysis.client_side:
        return [AnalysedChunk(text) for text in texts]
    if found is None:
        found = analyse_chunks(analysis, chunks_to_analyse(nodes, texts))
    for node, chunk in zip(nodes, found, strict=True):
        metadata = getattr(node, "metadata", None)
        given = metadata.get(LANGUAGE_KEY) if isinstance(metadata, dict) else None
        if given is not None and normalize_language(given) is None:
            logger.debug("Metadata %s=%r names no language: left as it is", LANGUAGE_KEY, given)
        elif analysis.language_aware and isinstance(metadata, dict) and chunk.language:
            metadata[LANGUAGE_KEY] = chunk.language
            for keys in ("excluded_embed_metadata_keys", "excluded_llm_metadata_keys"):
                excluded = getattr(node, keys, None)
                if isinstance(excluded, list) and LANGUAGE_KEY not in excluded:
                    excluded.append(LANGUAGE_KEY)
    return list(found)


def _needs_hint(node: Any) -> bool:
    """Whether a node's words may take its document's language: not when its metadata already
    names a language other than Chinese or Japanese (read back: analysed in it as before)."""
    metadata = getattr(node, "metadata", None)
    recorded = (
        normalize_language(metadata.get(LANGUAGE_KEY)) if isinstance(metadata, dict) else None
    )
    return recorded is None or recorded in CJK_LANGUAGES


def _doc_key(node: Any) -> str:
    return str(getattr(node, "ref_doc_id", None) or getattr(node, "node_id", "") or "")


def record_languages(
    client: Any, collection_name: str, analysis: Bm25Analysis | None, analysed: Sequence[Any]
) -> None:
    """Count the main languages of chunks just written into the collection's language profile
    (in memory and in the collection's properties, merged with what other writers recorded)."""
    if analysis is None or not analysis.language_aware or not analysed:
        return
    added: dict[str, int] = {}
    for chunk in analysed:
        if chunk.language:
            added[chunk.language] = added.get(chunk.language, 0) + 1
    if not added:
        return
    try:
        stored = LanguageProfile.from_json(
            collection_properties(client, collection_name).get(LANGUAGES_PROPERTY)
        )
        stored.update(added)
        client.alter_collection_properties(
            collection_name, properties={LANGUAGES_PROPERTY: stored.to_json()}
        )
        merged = stored.counts()
    except Exception as e:  # a server without collection properties: memory only
        logger.debug("Could not record BM25 languages of %r: %s", collection_name, e)
        merged = {**analysis.profile.counts()}
        for key, value in added.items():
            merged[key] = merged.get(key, 0) + value
    current = analysis.profile.counts()
    analysis.profile.update({k: v - current.get(k, 0) for k, v in merged.items()})


def node_text(store: Any, node: Any) -> str:
    """A node's text as ``MilvusVectorStore.add`` reads it (its ``text_key`` attribute)."""
    text = getattr(node, store.text_key, None)
    if not isinstance(text, str):
        text = node.dict()[store.text_key]
    return str(text)


def prepare_analysed(
    store: Any,
    analysis: Bm25Analysis | None,
    nodes: Sequence[Any],
    found: Sequence[AnalysedChunk] | None = None,
) -> dict[str, tuple[str, AnalysedChunk]]:
    """The analysed copies of ``nodes`` by id, with the text each was made of, for
    :func:`add_analysed_nodes` (``{}`` without a client-side analysis; ``found``: see
    :func:`analyse_nodes`)."""
    if analysis is None or not analysis.client_side:
        return {}
    texts = [node_text(store, node) for node in nodes]
    analysed = analyse_nodes(analysis, nodes, texts, found)
    return {
        node.node_id: (text, found)
        for node, text, found in zip(nodes, texts, analysed, strict=True)
    }


def analysed_row(
    node: Any,
    text: str,
    embedding: Any,
    found: AnalysedChunk | None,
    text_key: str = "text",
    embedding_field: str = "embedding",
) -> dict[str, Any]:
    """The Milvus row of one chunk as ``MilvusVectorStore.add`` writes it, plus its analysed
    copy (``found``; ``None`` without a client-side analysis)."""
    from llama_index.core.vector_stores.utils import node_to_metadata_dict

    row = node_to_metadata_dict(node, remove_text=True, text_field=text_key)
    row[text_key] = text
    row["id"] = node.node_id
    row[embedding_field] = embedding
    if found is not None:
        row[BM25_TEXT_FIELD] = found.text
    return row


def add_analysed_nodes(
    store: Any,
    nodes: Any,
    analysis: Bm25Analysis,
    *,
    prepared: dict[str, tuple[str, AnalysedChunk]] | None = None,
    **add_kwargs: Any,
) -> Any:
    """``MilvusVectorStore.add`` with each row's analysed copy in
    :data:`~llama_index_rag_pack.milvus.bm25.bm25_fields.BM25_TEXT_FIELD` (the rows are otherwise
    what ``MilvusVectorStore.add`` writes; under a language-aware analysis each chunk's metadata
    also records its language). ``prepared``: copies analysed beforehand, by node id with the
    text they were made of (used when the text is the same)."""
    texts = [node_text(store, node) for node in nodes]
    prepared = prepared or {}
    ready = [prepared.get(node.node_id) for node in nodes]
    if all(r is not None and r[0] == text for r, text in zip(ready, texts, strict=True)):
        analysed = [r[1] for r in ready if r is not None]
    else:
        analysed = analyse_nodes(analysis, nodes, texts)
    rows = [
        analysed_row(node, text, node.embedding, found, store.text_key, store.embedding_field)
        for node, text, found in zip(nodes, texts, analysed, strict=True)
    ]
    write = store.client.upsert if store.upsert_mode else store.client.insert
    with WRITE_LOCK:
        # where the pack computes BM25 vectors, every row of the call gets them at once (one
        # avgdl); a batch that fails takes back what it and the batches after it counted
        weighing = weigh_rows(store.client, store.collection_name, rows, replace=store.upsert_mode)
        try:
            for start in range(0, len(rows), store.batch_size):
                batch = rows[start : start + store.batch_size]
                write(
                    store.collection_name,
                    batch,
                    partition_name=add_kwargs.get("milvus_partition_name"),
                )
                if weighing is not None:
                    weighing.written(batch)
        except BaseException:
            if weighing is not None:
                weighing.undo()
            raise
    record_languages(store.client, store.collection_name, analysis, analysed)
    if add_kwargs.get("force_flush", False):
        store.client.flush(store.collection_name)
    return [node.node_id for node in nodes]
