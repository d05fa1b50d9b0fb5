"""Milvus access for RAPTOR trees: one collection holds every level.

Each node is an ordinary LlamaIndex ``TextNode`` stored through ``MilvusVectorStore`` rows, with
its RAPTOR fields (:mod:`~llama_index_rag_pack.raptor.raptor_nodes`) in the metadata: dynamic
fields in Milvus, so they can be filtered on. Every Milvus filter expression of RAPTOR is written
here: callers ask for a level, some ids or the whole tree.

Levels are scanned with ``query`` iterators and filters, never with a huge ``top_k``. Only public
pymilvus / ``MilvusVectorStore`` API is used, so the same code runs on Milvus Lite and servers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, NodeWithScore, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus import connection as milvus_utils
from llama_index_rag_pack.milvus.bm25.bm25_rows import (
    analyse_nodes,
    analysed_row,
    record_languages,
)
from llama_index_rag_pack.milvus.document_rows import ids_expression
from llama_index_rag_pack.raptor.raptor_nodes import CHILD_KEY, LEVEL_KEY, learn_memberships

logger = logging.getLogger(__name__)

_ROW_FIELDS = ["id", "text", "_node_content", "_node_type"]
_SCAN_BATCH = 1000
_ID_CHUNK = 500
_QUERY_WINDOW = 16_384  # the most rows one query/search returns
_EVERY_ROW = 'id != ""'


def _level_expr(level: int) -> str:
    return f"{LEVEL_KEY} == {int(level)}"


def _min_level_expr(level: int) -> str:
    return f"{LEVEL_KEY} >= {int(level)}"


def _ids_expr(ids: Sequence[str]) -> str:
    return ids_expression("id", ids)


def _restricted(expr: str, only: Collection[str] | None) -> str:
    if only is None:
        return expr
    return f"{expr} and {_ids_expr(sorted(only))}" if only else "false"


# What a search may return, for :meth:`RaptorStore.search`. ``only``: ``None`` for the whole tree,
# else the ids it may return (:meth:`RaptorStore.passing_ids` under a filter; an empty set returns
# nothing).
def scope_all_levels(only: Collection[str] | None = None) -> str:
    """Leaves and summaries of every level."""
    return _restricted(_min_level_expr(0), only)


def scope_level(level: int, only: Collection[str] | None = None) -> str:
    """The nodes of ``level``."""
    return _restricted(_level_expr(level), only)


def scope_within(level: int, ids: Sequence[str]) -> str | None:
    """The nodes of ``level`` among ``ids`` (``None`` when there are none)."""
    return f"{_level_expr(level)} and {_ids_expr(ids)}" if ids else None


class RaptorStore:
    """Reads and writes RAPTOR nodes in one ``MilvusVectorStore`` collection.

    Args:
        vector_store: A ``MilvusVectorStore`` (created with ``open_vector_store`` or by hand).

    Example:
        >>> from llama_index_rag_pack.milvus.connection import open_vector_store
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
                    "llama_index_rag_pack.milvus.connection.open_vector_store(uri, "
                    "collection_name)."
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
    def _rows_of(self, nodes: Sequence[BaseNode], vectors: Any = None) -> list[dict[str, Any]]:
        """The Milvus rows of ``nodes`` (their embeddings, or the rows of ``vectors``), with their
        analysed BM25 copies (and, under a language-aware analysis, their languages, counted in
        the collection's profile)."""
        analysis = getattr(self.vector_store, "bm25_analysis", None)
        texts = [node.get_content(metadata_mode="none") for node in nodes]
        analysed = analyse_nodes(analysis, nodes, texts)
        client_side = analysis is not None and analysis.client_side
        rows = [
            analysed_row(
                node,
                text,
                vectors[i].tolist()
                if vectors is not None
                else [float(v) for v in node.get_embedding()],
                found if client_side else None,
                self.text_key,
                self.embedding_field,
            )
            for i, (node, text, found) in enumerate(zip(nodes, texts, analysed, strict=True))
        ]
        record_languages(self.client, self.collection_name, analysis, analysed)
        return rows

    def add(self, nodes: Sequence[BaseNode]) -> None:
        """Insert new nodes (with embeddings)."""
        if not nodes:
            return
        if not self.exists():
            self.vector_store.add(list(nodes))  # creates the collection with the store's schema
        else:
            rows = self._rows_of(nodes)
            for start in range(0, len(rows), _SCAN_BATCH):
                self.client.insert(self.collection_name, rows[start : start + _SCAN_BATCH])
        self.flush()

    def upsert(self, nodes: Sequence[BaseNode], vectors: Any = None, *, flush: bool = True) -> None:
        """Rewrite nodes in place (same ids), e.g. after their parents changed; their vectors
        are their embeddings, or the rows of ``vectors`` (a float32 matrix, one row per node,
        for nodes read without them). Rows are built and written a batch at a time, then
        flushed unless ``flush=False`` (a later write flushes them)."""
        if not nodes:
            return
        if not self.exists():
            self.add(nodes)
            return
        for start in range(0, len(nodes), _SCAN_BATCH):
            part = vectors[start : start + _SCAN_BATCH] if vectors is not None else None
            rows = self._rows_of(nodes[start : start + _SCAN_BATCH], part)
            self.client.upsert(self.collection_name, rows)
        if flush:
            self.flush()

    def membership_writes(
        self,
        nodes: Sequence[TextNode],
        targets: dict[str, tuple[int, list[Any]]],
        vectors: Any,
        parts: int = 1,
    ) -> list[Callable[[], None]]:
        """Every node of a level learns its clusters and parents from ``targets`` (summary id ->
        cluster id, children) now; returned: the writes of the rows whose clusters or parents
        changed (``vectors``: the nodes' vectors, one row each), unflushed, in up to ``parts``
        pieces of about the same size, to be done in any order."""
        changed = learn_memberships(nodes, targets)
        size = max(1, -(-len(changed) // max(1, parts)))
        return [
            functools.partial(self.upsert, [nodes[i] for i in piece], vectors[piece], flush=False)
            for piece in (changed[at : at + size] for at in range(0, len(changed), size))
        ]

    def delete_ids(self, ids: Iterable[str]) -> None:
        ids = list(dict.fromkeys(ids))
        if not ids or not self.exists():
            return
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            self.client.delete(self.collection_name, filter=_ids_expr(chunk))
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

    def _scan(self, expr: str, *, with_embeddings: bool = False) -> list[TextNode]:
        """Every node matching a filter expression, sorted by id."""
        if not self.exists():
            return []
        milvus_utils.ensure_loaded(self.client, self.collection_name)
        fields = list(_ROW_FIELDS) + ([self.embedding_field] if with_embeddings else [])
        nodes = [
            self._to_node(dict(row), with_embeddings)
            for batch in self._row_batches(expr, fields)
            for row in batch
        ]  # a batch of rows at a time: the rows are not held beside the nodes
        nodes.sort(key=lambda n: n.node_id)
        return nodes

    def level_vectors(
        self, level: int, ids: Sequence[str] | None = None
    ) -> tuple[list[TextNode], np.ndarray]:
        """The nodes of ``level`` without their embeddings (sorted by id), and their vectors as
        one float32 matrix in the same order: a level's vectors are held once, compactly.
        ``ids``: the level's ids, known to the caller: read by primary key (on Milvus Lite, no
        pass over every row's dynamic fields per page of a scan)."""
        if not self.exists():
            return [], np.zeros((0, 0), dtype=np.float32)
        milvus_utils.ensure_loaded(self.client, self.collection_name)
        fields = [*_ROW_FIELDS, self.embedding_field]
        nodes: list[TextNode] = []
        parts: list[np.ndarray] = []
        chunks = (ids[i : i + _ID_CHUNK] for i in range(0, len(ids or ()), _ID_CHUNK))
        by_id = (self._rows(_ids_expr(chunk), fields) for chunk in chunks)
        for batch in self._row_batches(_level_expr(level), fields) if ids is None else by_id:
            nodes.extend(self._to_node(dict(row), False) for row in batch)
            parts.append(np.asarray([row[self.embedding_field] for row in batch], np.float32))
        if not nodes:
            return nodes, np.zeros((0, 0), dtype=np.float32)
        order = sorted(range(len(nodes)), key=lambda i: nodes[i].node_id)
        return [nodes[i] for i in order], np.concatenate(parts)[np.asarray(order, np.int64)]

    def _rows(self, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        """Rows matching ``expr``: one ``query`` when they fit its window, else a query iterator."""
        return [row for batch in self._row_batches(expr, fields) for row in batch]

    def _row_batches(self, expr: str, fields: list[str]) -> Iterator[list[dict[str, Any]]]:
        """Rows matching ``expr`` in batches: one ``query`` when they fit its window, else a
        query iterator's batches."""
        rows = self.client.query(
            self.collection_name, filter=expr, output_fields=fields, limit=_QUERY_WINDOW
        )
        if len(rows) < _QUERY_WINDOW:
            yield list(rows)
            return
        del rows
        iterator = self.client.query_iterator(
            self.collection_name, batch_size=_SCAN_BATCH, filter=expr, output_fields=fields
        )
        try:
            while batch := iterator.next():
                yield batch
        finally:
            iterator.close()

    def level(self, level: int, *, with_embeddings: bool = False) -> list[TextNode]:
        """All nodes of one level, sorted by id."""
        return self._scan(_level_expr(level), with_embeddings=with_embeddings)

    def tree_nodes(self, *, min_level: int = 0, with_embeddings: bool = False) -> list[TextNode]:
        """Every tree node at ``min_level`` or above, sorted by id."""
        return self._scan(_min_level_expr(min_level), with_embeddings=with_embeddings)

    def matching(self, expr: str, *, with_embeddings: bool = False) -> list[TextNode]:
        """Every node matching the Milvus expression ``expr``, sorted by id."""
        return self._scan(expr, with_embeddings=with_embeddings)

    def all_nodes(self, *, with_embeddings: bool = False) -> list[TextNode]:
        """Every node in the collection, RAPTOR or not (e.g. a pack's chunks), sorted by id."""
        return self._scan(_EVERY_ROW, with_embeddings=with_embeddings)

    def get(self, ids: Iterable[str], *, with_embeddings: bool = False) -> list[TextNode]:
        """The stored nodes among ``ids`` (missing ids are left out)."""
        ids = list(dict.fromkeys(ids))
        out: list[TextNode] = []
        for start in range(0, len(ids), _ID_CHUNK):
            out.extend(
                self._scan(
                    _ids_expr(ids[start : start + _ID_CHUNK]), with_embeddings=with_embeddings
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
            chunk = ids[start : start + _ID_CHUNK]
            expr = f"{ids_expression(doc_field, chunk)} and {_level_expr(0)}"
            out.extend(self._scan(expr, with_embeddings=with_embeddings))
        return out

    def levels(self) -> dict[int, int]:
        """Number of nodes per level, e.g. ``{0: 312, 1: 41, 2: 6, 3: 1}``."""
        if not self.exists():
            return {}
        milvus_utils.ensure_loaded(self.client, self.collection_name)
        counts: dict[int, int] = {}
        for row in self._rows(_min_level_expr(0), [LEVEL_KEY]):
            lvl = int(row[LEVEL_KEY])
            counts[lvl] = counts.get(lvl, 0) + 1
        return dict(sorted(counts.items()))

    def top_level(self) -> int | None:
        """The highest level stored, ``None`` for an empty tree."""
        levels = self.levels()
        return max(levels) if levels else None

    def delete_levels_above(self, level: int) -> None:
        """Delete every node above ``level`` (leftovers of a taller tree)."""
        if not self.exists():
            return
        milvus_utils.ensure_loaded(self.client, self.collection_name)
        above = self._rows(_min_level_expr(level + 1), ["id"])
        self.delete_ids(str(row["id"]) for row in above)

    # ------------------------------------------------------------------ search
    def search(
        self, embedding: Sequence[float], top_k: int, where: str | None
    ) -> list[NodeWithScore]:
        """The ``top_k`` nodes nearest to ``embedding`` among those ``where`` selects: an
        expression of :func:`scope_all_levels`, :func:`scope_level` or :func:`scope_within`
        (``None``: none can match, nothing is searched)."""
        if where is None or top_k <= 0:
            return []
        query = VectorStoreQuery(query_embedding=list(embedding), similarity_top_k=top_k)
        return self._with_scores(self.vector_store.query(query, string_expr=where))

    async def asearch(
        self, embedding: Sequence[float], top_k: int, where: str | None
    ) -> list[NodeWithScore]:
        """Async :meth:`search`: the sync client in a worker thread, so the event loop never
        blocks.

        (pymilvus' ``AsyncMilvusClient`` is bound to the first event loop that used it and fails on
        any later one, e.g. after a second ``asyncio.run``; a thread works on every loop.)
        """
        return await asyncio.to_thread(self.search, embedding, top_k, where)

    def schema_fields(self) -> set[str]:
        """The names of the collection's schema fields (empty when it does not exist yet)."""
        if not self.exists():
            return set()
        info = self.client.describe_collection(self.collection_name)
        return {str(f.get("name")) for f in info.get("fields", [])}

    def passing_ids(self, expr: str) -> dict[str, int]:
        """The nodes a filter lets through, with their levels: the leaves matching ``expr``, and
        every summary whose leaves below all match it (so no summary carries text of an excluded
        chunk)."""
        milvus_utils.ensure_loaded(self.client, self.collection_name)
        leaves = self._rows(f"({_level_expr(0)}) and ({expr})", ["id"])
        passing = {str(r["id"]): 0 for r in leaves}
        summaries = self._rows(_min_level_expr(1), ["id", LEVEL_KEY, CHILD_KEY])
        for row in sorted(summaries, key=lambda r: int(r[LEVEL_KEY])):
            children = row.get(CHILD_KEY) or []
            if children and all(str(c) in passing for c in children):
                passing[str(row["id"])] = int(row[LEVEL_KEY])
        return passing

    @staticmethod
    def _with_scores(result: Any) -> list[NodeWithScore]:
        sims = result.similarities or [None] * len(result.nodes or [])
        return [
            NodeWithScore(node=n, score=s) for n, s in zip(result.nodes or [], sims, strict=False)
        ]


__all__ = ["RaptorStore", "scope_all_levels", "scope_level", "scope_within"]
