"""Upgrading a collection's BM25 side to another analysis (``rag-pack index --reindex``).

The chunks, their vectors, metadata and ids are read back and written into a new collection made
with the new analysis (:mod:`~llama_index_rag_pack.milvus.bm25.bm25_fields`), which then replaces
the old one: no re-embedding, and the sentence index (keyed by chunk id) stays valid.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index_rag_pack.core.errors import CollectionNotFoundError, ConfigurationError
from llama_index_rag_pack.documents.bm25_analysis import BM25Analyzer, resolve_analyzer
from llama_index_rag_pack.milvus.bm25.bm25_fields import analysis_outdated, stored_bm25_analysis
from llama_index_rag_pack.milvus.bm25.client_bm25 import stats_collection_name
from llama_index_rag_pack.milvus.bm25.client_writes import forget_collection
from llama_index_rag_pack.milvus.connection import collection_dim, flush, open_client
from llama_index_rag_pack.milvus.connection import open_vector_store as open_store
from llama_index_rag_pack.milvus.served_schema import collection_bm25_vectors
from llama_index_rag_pack.milvus.vector_memory import forget_vectors

logger = logging.getLogger(__name__)

__all__ = ["stored_nodes", "upgrade_bm25_analysis"]

_UPGRADE_SUFFIX = "__bm25_upgrade"
_READ_BATCH = 1000


def stored_nodes(client: Any, collection_name: str) -> list[Any]:
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
    bm25_analyzer: str | BM25Analyzer | None = "auto",
    similarity_metric: str = "COSINE",
) -> int:
    """Rebuild a collection's BM25 side with ``bm25_analyzer``, keeping its chunks, vectors,
    metadata and ids (no re-embedding; its sentence index stays valid). A collection analysed
    by the same language-aware analysis with another version of it or of its segmenters is
    re-analysed too; chunks keep the language recorded in their metadata.

    The chunks are copied into a new collection, which then replaces the old one, so an
    interruption leaves the old collection whole.

    Returns:
        The number of chunks copied (0 when the collection already had that analysis, at the
        installed version).

    Raises:
        CollectionNotFoundError: no such collection.
        ConfigurationError: the collection has no BM25 field.
    """
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
    vectors = collection_bm25_vectors(client.describe_collection(collection_name))
    if (
        stored == analysis.name
        and not analysis_outdated(client, collection_name, analysis)
        and vectors != "client"  # the pack's vectors are rewritten with current statistics
    ):
        logger.info("Collection %r already uses the %r BM25 analysis", collection_name, stored)
        return 0
    dim = collection_dim(client, collection_name) or 0
    nodes = stored_nodes(client, collection_name)
    staging = f"{collection_name}{_UPGRADE_SUFFIX}"
    store = open_store(
        uri,
        staging,
        dim=dim,
        token=token,
        overwrite=True,
        bm25_analyzer=analysis,
        similarity_metric=similarity_metric,
        bm25_vectors=vectors or "auto",
    )
    store.add(nodes)
    flush(store)
    client.drop_collection(collection_name)  # and its BM25 statistics, if the pack kept them
    client.rename_collection(staging, collection_name)
    if client.has_collection(stats_collection_name(staging)):
        client.rename_collection(
            stats_collection_name(staging), stats_collection_name(collection_name)
        )
    forget_collection(client, staging)
    forget_collection(client, collection_name)
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
