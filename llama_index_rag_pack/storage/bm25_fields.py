"""The BM25 side of a chunk collection: which field Milvus' BM25 function reads, how it was
analysed, and the upgrade of a collection indexed with another analysis.

A collection made with a client-side analyzer (``english``, the default, or a callable; see
:mod:`~llama_index_rag_pack.core.bm25_analysis`) holds two texts per chunk: ``text``, the
original (shown, cited, sent to the LLM), and ``bm25_text``, its analysed copy with the
chunk's title and headings, which the BM25 function reads. The collection property
``rag_pack.bm25_analyzer`` records the analyzer's name. A collection whose BM25 function reads
``text`` (every collection indexed before this layout) is searched with Milvus' ``standard``
analysis, as it was indexed;
:func:`~llama_index_rag_pack.storage.bm25_upgrade.upgrade_bm25_analysis` (``rag-pack index
--reindex``) rebuilds it with the new one, keeping its vectors and ids.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index_rag_pack.core.bm25_analysis import (
    ANALYSIS_PROPERTY,
    Bm25Analysis,
    BM25Analyzer,
    document_headings,
    resolve_analyzer,
)
from llama_index_rag_pack.core.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "BM25_TEXT_FIELD",
    "add_analysed_nodes",
    "bm25_row_fields",
    "check_async_client",
    "store_analysis",
    "bm25_input_field",
    "bm25_store_kwargs",
    "collection_bm25_analysis",
    "function_type_name",
    "stored_bm25_analysis",
]

#: The field holding a chunk's analysed copy (read by the BM25 function, never shown).
BM25_TEXT_FIELD = "bm25_text"


def function_type_name(value: Any) -> str:
    """The name of a Milvus function type as ``describe_collection`` reports it (``BM25``)."""
    name = getattr(value, "name", None)  # pymilvus FunctionType enum
    if name:
        return str(name).upper()
    return "BM25" if value in (1, "1") else str(value).upper()


def bm25_input_field(client: Any, collection_name: str) -> str | None:
    """The field the collection's BM25 function reads (``None`` without a BM25 function)."""
    info = client.describe_collection(collection_name)
    for fn in info.get("functions", []):
        if function_type_name(fn.get("type")) == "BM25":
            inputs = list(fn.get("input_field_names") or [])
            return str(inputs[0]) if inputs else None
    return None


def stored_bm25_analysis(client: Any, collection_name: str) -> str | None:
    """The analysis a collection was indexed with: ``standard`` when its BM25 function reads
    the original text, else the recorded name (``english``, ``custom:...``); ``None`` without
    BM25."""
    field = bm25_input_field(client, collection_name)
    if field is None:
        return None
    if field != BM25_TEXT_FIELD:
        return "standard"
    props = client.describe_collection(collection_name).get("properties") or {}
    return str(props.get(ANALYSIS_PROPERTY) or "english")


def collection_bm25_analysis(
    client: Any,
    collection_name: str,
    requested: str | BM25Analyzer | Bm25Analysis | None = None,
) -> Bm25Analysis | None:
    """How to analyse BM25 queries on this collection: the analysis it was indexed with.

    ``requested`` (what the caller asked for) is used when it names that analysis, and must be
    the callable itself for a collection indexed with a custom analyzer. A different request
    is logged once and the stored analysis wins: ranking a collection with another analysis
    than its index's would miss every changed term.

    Raises:
        ConfigurationError: the collection was indexed with a custom analyzer and no callable
            was given.
    """
    stored = stored_bm25_analysis(client, collection_name)
    if stored is None:
        return None
    wanted = resolve_analyzer(requested) if requested is not None else None
    if stored.startswith("custom:"):
        if wanted is None or not wanted.name.startswith("custom:"):
            raise ConfigurationError(
                f"Collection {collection_name!r} was indexed with the BM25 analyzer {stored!r}: "
                "pass the same callable as bm25_analyzer= to search it, or re-index it with "
                "`rag-pack index --reindex` (English analysis)."
            )
        if wanted.name != stored:
            logger.warning(
                "Collection %r was indexed with BM25 analyzer %s; searching it with %s",
                collection_name,
                stored,
                wanted.name,
            )
        return wanted
    if wanted is not None and wanted.name != stored:
        logger.info(
            "Collection %r was indexed with the %r BM25 analysis: searched with it (asked for "
            "%r; `rag-pack index --reindex` upgrades the collection)",
            collection_name,
            stored,
            wanted.name,
        )
    return resolve_analyzer(stored)


def bm25_store_kwargs(analysis: Bm25Analysis, *, new: bool) -> dict[str, Any]:
    """``MilvusVectorStore`` arguments for a BM25 field under ``analysis``.

    Under ``standard`` the BM25 function reads ``text`` (Milvus analyses it); under a client
    analysis it reads :data:`BM25_TEXT_FIELD`, and a ``new`` collection records the analysis.
    """
    from llama_index.vector_stores.milvus.utils import BM25BuiltInFunction

    kwargs: dict[str, Any] = dict(
        enable_sparse=True,
        hybrid_ranker="RRFRanker",
        hybrid_ranker_params={"k": 60},
    )
    if not analysis.client_side:
        kwargs["sparse_embedding_function"] = BM25BuiltInFunction()
        if new:
            kwargs["collection_properties"] = {ANALYSIS_PROPERTY: analysis.name}
        return kwargs
    from pymilvus import DataType

    kwargs.update(
        sparse_embedding_function=BM25BuiltInFunction(input_field_names=BM25_TEXT_FIELD),
        scalar_field_names=[BM25_TEXT_FIELD],
        scalar_field_types=[DataType.VARCHAR],
    )
    if new:
        kwargs["collection_properties"] = {ANALYSIS_PROPERTY: analysis.name}
    return kwargs


def store_analysis(
    client: Any,
    collection_name: str,
    requested: str | BM25Analyzer | Bm25Analysis | None,
    *,
    new: bool,
    bm25: bool = True,
) -> Bm25Analysis | None:
    """The analysis of a store opened on the collection: ``requested`` for a ``new`` one, the
    collection's own otherwise (:func:`collection_bm25_analysis`); ``None`` without BM25."""
    if not bm25:
        return None
    if new:
        return resolve_analyzer(requested)
    return collection_bm25_analysis(client, collection_name, requested)


def check_async_client(analysis: Bm25Analysis | None, use_async_client: bool) -> None:
    """pymilvus' async client path of ``MilvusVectorStore`` cannot fill the analysed field.

    Raises:
        ConfigurationError: ``use_async_client`` with a client-side analysis.
    """
    if use_async_client and analysis is not None and analysis.client_side:
        raise ConfigurationError(
            f"use_async_client=True cannot fill the {analysis.name!r} BM25 field; leave "
            "use_async_client off (async methods then run in a worker thread) or pass "
            "bm25_analyzer='standard'."
        )


def bm25_row_fields(
    analysis: Bm25Analysis | None, text: str, metadata: Any = None
) -> dict[str, str]:
    """The analysed field of one row (``{}`` unless the analysis runs on the client)."""
    if analysis is None or not analysis.client_side:
        return {}
    return {BM25_TEXT_FIELD: analysis.document_text(text, document_headings(metadata))}


def add_analysed_nodes(store: Any, nodes: Any, analysis: Bm25Analysis, **add_kwargs: Any) -> Any:
    """``MilvusVectorStore.add`` with each row's analysed copy in :data:`BM25_TEXT_FIELD`
    (the rows are otherwise what ``MilvusVectorStore.add`` writes)."""
    from llama_index.core.vector_stores.utils import node_to_metadata_dict

    rows = []
    for node in nodes:
        row = node_to_metadata_dict(node, remove_text=True, text_field=store.text_key)
        text = getattr(node, store.text_key, None)
        if not isinstance(text, str):  # as MilvusVectorStore.add reads it
            text = node.dict()[store.text_key]
        row[store.text_key] = text
        row["id"] = node.node_id
        row[store.embedding_field] = node.embedding
        row.update(bm25_row_fields(analysis, text, node.metadata))
        rows.append(row)
    write = store.client.upsert if store.upsert_mode else store.client.insert
    for start in range(0, len(rows), store.batch_size):
        write(
            store.collection_name,
            rows[start : start + store.batch_size],
            partition_name=add_kwargs.get("milvus_partition_name"),
        )
    if add_kwargs.get("force_flush", False):
        store.client.flush(store.collection_name)
    return [node.node_id for node in nodes]
