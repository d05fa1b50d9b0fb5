"""The BM25 side of a chunk collection: which field Milvus' BM25 function reads, how it was
analysed, and the upgrade of a collection indexed with another analysis.

A collection made with a client-side analyzer (``english``, the default, or a callable; see
:mod:`~llama_index_rag_pack.core.bm25_analysis`) holds two texts per chunk: ``text``, the
original (shown, cited, sent to the LLM), and ``bm25_text``, its analysed copy with the
chunk's title and headings, which the BM25 function reads. The collection property
``rag_pack.bm25_analyzer`` records the analyzer's name. A collection whose BM25 function reads
``text`` (every collection indexed before this layout) is searched with Milvus' ``standard``
analysis, as it was indexed; :func:`upgrade_bm25_analysis` (``rag-pack index --reindex``)
rebuilds it with the new one, keeping its vectors and ids.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index_rag_pack.core.bm25_analysis import (
    ANALYSIS_PROPERTY,
    Bm25Analysis,
    BM25Analyzer,
    resolve_analyzer,
)
from llama_index_rag_pack.core.errors import CollectionNotFoundError, ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "BM25_TEXT_FIELD",
    "bm25_input_field",
    "bm25_store_kwargs",
    "collection_bm25_analysis",
    "stored_bm25_analysis",
    "upgrade_bm25_analysis",
]

#: The field holding a chunk's analysed copy (read by the BM25 function, never shown).
BM25_TEXT_FIELD = "bm25_text"
_UPGRADE_SUFFIX = "__bm25_upgrade"
_READ_BATCH = 1000


def bm25_input_field(client: Any, collection_name: str) -> str | None:
    """The field the collection's BM25 function reads (``None`` without a BM25 function)."""
    from llama_index_rag_pack.storage.milvus import _function_type_name

    info = client.describe_collection(collection_name)
    for fn in info.get("functions", []):
        if _function_type_name(fn.get("type")) == "BM25":
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


def _stored_nodes(client: Any, collection_name: str) -> list[Any]:
    """Every chunk of the collection as a node with its stored text, metadata and vector."""
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.utils import metadata_dict_to_node

    client.load_collection(collection_name)
    iterator = client.query_iterator(
        collection_name,
        batch_size=_READ_BATCH,
        filter="",
        output_fields=["id", "text", "embedding", "_node_content", "_node_type"],
    )
    nodes = []
    try:
        while True:
            rows = iterator.next()
            if not rows:
                break
            for row in rows:
                text = row.get("text") or ""
                if row.get("_node_content"):
                    stored = {"_node_content": row["_node_content"]}
                    stored["_node_type"] = row.get("_node_type")
                    node = metadata_dict_to_node(stored, text=text)
                else:
                    node = TextNode(id_=str(row["id"]), text=text)
                node.embedding = [float(x) for x in row["embedding"]]
                nodes.append(node)
    finally:
        iterator.close()
    return nodes


def upgrade_bm25_analysis(
    uri: str,
    collection_name: str,
    *,
    token: str | None = None,
    bm25_analyzer: str | BM25Analyzer | None = "english",
    similarity_metric: str = "COSINE",
) -> int:
    """Rebuild a collection's BM25 side with ``bm25_analyzer``, keeping its chunks, vectors,
    metadata and ids (no re-embedding; its sentence index stays valid).

    The chunks are copied into a new collection, which then replaces the old one, so an
    interruption leaves the old collection whole.

    Returns:
        The number of chunks copied (0 when the collection already had that analysis).

    Raises:
        CollectionNotFoundError: no such collection.
        ConfigurationError: the collection has no BM25 field.
    """
    from llama_index_rag_pack.storage.milvus import collection_dim, flush, open_client
    from llama_index_rag_pack.storage.milvus import open_vector_store as open_store
    from llama_index_rag_pack.storage.vector_memory import forget_vectors

    analysis = resolve_analyzer(bm25_analyzer)
    client = open_client(uri, token=token)
    if not client.has_collection(collection_name):
        raise CollectionNotFoundError(f"No collection {collection_name!r} in Milvus at {uri}.")
    stored = stored_bm25_analysis(client, collection_name)
    if stored is None:
        raise ConfigurationError(
            f"Collection {collection_name!r} has no BM25 field: re-index its documents with "
            "`rag-pack index PATH --overwrite` to add one."
        )
    if stored == analysis.name:
        logger.info("Collection %r already uses the %r BM25 analysis", collection_name, stored)
        return 0
    dim = collection_dim(client, collection_name) or 0
    nodes = _stored_nodes(client, collection_name)
    staging = f"{collection_name}{_UPGRADE_SUFFIX}"
    store = open_store(
        uri,
        staging,
        dim=dim,
        token=token,
        overwrite=True,
        bm25_analyzer=analysis,
        similarity_metric=similarity_metric,
    )
    store.add(nodes)
    flush(store)
    client.drop_collection(collection_name)
    client.rename_collection(staging, collection_name)
    forget_vectors(client, collection_name)
    client.load_collection(collection_name)
    logger.info(
        "Collection %r: BM25 analysis %s -> %s (%d chunks)",
        collection_name,
        stored,
        analysis.name,
        len(nodes),
    )
    return len(nodes)
