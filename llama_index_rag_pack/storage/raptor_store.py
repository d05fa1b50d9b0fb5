"""Milvus access for RAPTOR trees: one collection holds every level.

Each node is an ordinary LlamaIndex ``TextNode`` stored through ``MilvusVectorStore`` rows, with
RAPTOR fields in its metadata (dynamic fields in Milvus, so they can be filtered on):

========================  ====================================================
``raptor_level``          0 for leaves (chunks), 1 for their summaries, ...
``raptor_cluster_ids``    ids of the clusters the node belongs to at its level
``raptor_parent_ids``     ids of the summary nodes that summarise it
``raptor_child_ids``      ids of the nodes a summary summarises (empty for leaves)
``raptor_tokens``         the node's length in tokens (for token budgets)
========================  ====================================================

Levels are scanned with ``query`` iterators and filters, never with a huge ``top_k``. Only public
pymilvus / ``MilvusVectorStore`` API is used, so the same code runs on Milvus Lite and servers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.schema import BaseNode, NodeWithScore, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.storage import milvus as milvus_utils

logger = logging.getLogger(__name__)

LEVEL_KEY = "raptor_level"
CLUSTER_KEY = "raptor_cluster_ids"
PARENT_KEY = "raptor_parent_ids"
CHILD_KEY = "raptor_child_ids"
TOKENS_KEY = "raptor_tokens"
RAPTOR_KEYS = (LEVEL_KEY, CLUSTER_KEY, PARENT_KEY, CHILD_KEY, TOKENS_KEY)

_ROW_FIELDS = ["id", "text", "_node_content", "_node_type"]
_SCAN_BATCH = 1000
_ID_CHUNK = 500
_QUERY_WINDOW = 16_384  # the most rows one query/search returns


def quote_ids(ids: Iterable[str]) -> str:
    """A Milvus list literal of string ids: ``["a", "b"]``."""
    return "[" + ", ".join(json.dumps(str(i)) for i in ids) + "]"


def mark_raptor_node(node: BaseNode, **fields: Any) -> None:
    """Set RAPTOR metadata on ``node``, kept out of the text the embedder and the LLM see."""
    node.metadata.update(fields)
    for key in RAPTOR_KEYS:
        if key not in node.excluded_embed_metadata_keys:
            node.excluded_embed_metadata_keys.append(key)
        if key not in node.excluded_llm_metadata_keys:
            node.excluded_llm_metadata_keys.append(key)


def node_level(node: BaseNode) -> int:
    return int(node.metadata.get(LEVEL_KEY, 0))


class RaptorStore:
    """Reads and writes RAPTOR nodes in one ``MilvusVectorStore`` collection.

    Args:
        vector_store: A ``MilvusVectorStore`` (created with ``open_vector_store`` or by hand).

    Example:
        >>> from llama_index_rag_pack.storage.milvus import open_vector_store
        >>> store = RaptorStore(open_vector_store("./raptor.db", "docs_raptor"))  # doctest: +SKIP
        >>> store.levels()  # doctest: +SKIP
        {0: 312, 1: 41, 2: 6, 3: 1}
    """

    def __init__(self, vector_store: Any) -> None:
        for attr in ("client", "collection_name", "add", "query"):
            if not hasattr(vector_store, attr):
                raise ConfigurationError(
                    "RAPTOR needs a MilvusVectorStore "
                    f"(got {type(vector_store).__name__}). Create one with "
                    "llama_index_rag_pack.storage.milvus.open_vector_store(uri, collection_name)."
                )
        self.vector_store = vector_store

    # ------------------------------------------------------------------ basics
    @property
    def client(self) -> Any:
        return self.vector_store.client

    @property
    def collection_name(self) -> str:
        return self.vector_store.collection_name

    @property
    def text_key(self) -> str:
        return getattr(self.vector_store, "text_key", "text") or "text"

    @property
    def embedding_field(self) -> str:
        return getattr(self.vector_store, "embedding_field", "embedding") or "embedding"

    def exists(self) -> bool:
        return bool(self.client.has_collection(self.collection_name))

    def flush(self) -> None:
        milvus_utils.flush(self.client, self.collection_name)

    def count(self) -> int:
        return milvus_utils.count_entities(self.client, self.collection_name)

    # ------------------------------------------------------------------ writes
    def _row(self, node: BaseNode) -> dict[str, Any]:
        entry = node_to_metadata_dict(node, remove_text=True, text_field=self.text_key)
        entry[self.text_key] = node.get_content(metadata_mode="none")
        entry["id"] = node.node_id
        entry[self.embedding_field] = [float(v) for v in node.get_embedding()]
        return entry

    def add(self, nodes: Sequence[BaseNode]) -> None:
        """Insert new nodes (with embeddings)."""
        if not nodes:
            return
        if not self.exists():
            self.vector_store.add(list(nodes))  # creates the collection with the store's schema
        else:
            rows = [self._row(n) for n in nodes]
            for start in range(0, len(rows), _SCAN_BATCH):
                self.client.insert(self.collection_name, rows[start : start + _SCAN_BATCH])
        self.flush()

    def upsert(self, nodes: Sequence[BaseNode]) -> None:
        """Rewrite nodes in place (same ids), e.g. after their parents changed."""
        if not nodes:
            return
        if not self.exists():
            self.add(nodes)
            return
        rows = [self._row(n) for n in nodes]
        for start in range(0, len(rows), _SCAN_BATCH):
            self.client.upsert(self.collection_name, rows[start : start + _SCAN_BATCH])
        self.flush()

    def delete_ids(self, ids: Iterable[str]) -> None:
        ids = list(dict.fromkeys(ids))
        if not ids or not self.exists():
            return
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            self.client.delete(self.collection_name, filter=f"id in {quote_ids(chunk)}")
        self.flush()

    # ------------------------------------------------------------------ reads
    def _to_node(self, row: dict[str, Any], with_embedding: bool) -> TextNode:
        node = metadata_dict_to_node(
            {"_node_content": row["_node_content"], "_node_type": row.get("_node_type")}
        )
        node.text = row.get(self.text_key, node.text) or ""
        if with_embedding and row.get(self.embedding_field) is not None:
            node.embedding = [float(v) for v in row[self.embedding_field]]
        return node  # type: ignore[return-value]

    def scan(self, expr: str, *, with_embeddings: bool = False) -> list[TextNode]:
        """Every node matching a filter expression, read with a query iterator."""
        if not self.exists():
            return []
        milvus_utils.ensure_loaded(self.client, self.collection_name)
        fields = list(_ROW_FIELDS) + ([self.embedding_field] if with_embeddings else [])
        nodes = [self._to_node(dict(row), with_embeddings) for row in self._rows(expr, fields)]
        nodes.sort(key=lambda n: n.node_id)
        return nodes

    def _rows(self, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        """Rows matching ``expr``: one ``query`` when they fit its window, else a query iterator."""
        rows = self.client.query(
            self.collection_name, filter=expr, output_fields=fields, limit=_QUERY_WINDOW
        )
        if len(rows) < _QUERY_WINDOW:
            return list(rows)
        rows = []
        iterator = self.client.query_iterator(
            self.collection_name, batch_size=_SCAN_BATCH, filter=expr, output_fields=fields
        )
        try:
            while True:
                batch = iterator.next()
                if not batch:
                    break
                rows.extend(batch)
        finally:
            iterator.close()
        return rows

    def level(self, level: int, *, with_embeddings: bool = False) -> list[TextNode]:
        """All nodes of one level, sorted by id."""
        return self.scan(f"{LEVEL_KEY} == {int(level)}", with_embeddings=with_embeddings)

    def get(self, ids: Iterable[str], *, with_embeddings: bool = False) -> list[TextNode]:
        ids = list(dict.fromkeys(ids))
        out: list[TextNode] = []
        for start in range(0, len(ids), _ID_CHUNK):
            out.extend(
                self.scan(
                    f"id in {quote_ids(ids[start : start + _ID_CHUNK])}",
                    with_embeddings=with_embeddings,
                )
            )
        return out

    def by_doc(
        self, ref_doc_ids: Iterable[str], *, with_embeddings: bool = False
    ) -> list[TextNode]:
        """Leaves that came from the given documents."""
        ids = list(dict.fromkeys(ref_doc_ids))
        doc_field = getattr(self.vector_store, "doc_id_field", "doc_id") or "doc_id"
        out: list[TextNode] = []
        for start in range(0, len(ids), _ID_CHUNK):
            expr = (
                f"{doc_field} in {quote_ids(ids[start : start + _ID_CHUNK])} and {LEVEL_KEY} == 0"
            )
            out.extend(self.scan(expr, with_embeddings=with_embeddings))
        return out

    def levels(self) -> dict[int, int]:
        """Number of nodes per level, e.g. ``{0: 312, 1: 41, 2: 6, 3: 1}``."""
        if not self.exists():
            return {}
        milvus_utils.ensure_loaded(self.client, self.collection_name)
        counts: dict[int, int] = {}
        for row in self._rows(f"{LEVEL_KEY} >= 0", [LEVEL_KEY]):
            lvl = int(row[LEVEL_KEY])
            counts[lvl] = counts.get(lvl, 0) + 1
        return dict(sorted(counts.items()))

    def top_level(self) -> int | None:
        levels = self.levels()
        return max(levels) if levels else None

    # ------------------------------------------------------------------ search
    def _query(self, embedding: Sequence[float], top_k: int, expr: str) -> VectorStoreQuery:
        return VectorStoreQuery(query_embedding=list(embedding), similarity_top_k=top_k)

    @staticmethod
    def _with_scores(result: Any) -> list[NodeWithScore]:
        sims = result.similarities or [None] * len(result.nodes or [])
        return [
            NodeWithScore(node=n, score=s) for n, s in zip(result.nodes or [], sims, strict=False)
        ]

    def search(self, embedding: Sequence[float], top_k: int, expr: str = "") -> list[NodeWithScore]:
        """Dense search restricted by a filter expression."""
        if top_k <= 0:
            return []
        result = self.vector_store.query(self._query(embedding, top_k, expr), string_expr=expr)
        return self._with_scores(result)

    async def asearch(
        self, embedding: Sequence[float], top_k: int, expr: str = ""
    ) -> list[NodeWithScore]:
        """Async :meth:`search`: the sync client in a worker thread, so the event loop never blocks.

        (pymilvus' ``AsyncMilvusClient`` is bound to the first event loop that used it and fails on
        any later one, e.g. after a second ``asyncio.run``; a thread works on every loop.)
        """
        if top_k <= 0:
            return []
        query = self._query(embedding, top_k, expr)
        result = await asyncio.to_thread(self.vector_store.query, query, string_expr=expr)
        return self._with_scores(result)


__all__ = [
    "CHILD_KEY",
    "CLUSTER_KEY",
    "LEVEL_KEY",
    "PARENT_KEY",
    "RAPTOR_KEYS",
    "TOKENS_KEY",
    "RaptorStore",
    "mark_raptor_node",
    "node_level",
    "quote_ids",
]
