"""The in-memory path of the default mode's retriever
(:class:`~llama_index_rag_pack.fusion.score_fusion.MilvusScoreFusionRetriever`): BM25, dense
and sentence candidates from the in-memory copies of a Lite collection, as bare ids, fused on
ids, then one read of the chunks returned.

Each step is a method with its own instrumentation span (``bm25_search``, ``dense_search``,
``sentence_search``, ``fuse_scores``, ``read_chunks``), so a trace shows the legs of the default
mode's search even where no Milvus request is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.fusion.convex_fusion import convex_fusion
from llama_index_rag_pack.milvus.vector_memory import (
    copy_due,
    matching_ids,
    memory_vectors,
    top_scores,
    vectors_slot,
)

__all__ = ["MemoryFusionMixin"]

dispatcher = get_dispatcher(__name__)


class MemoryFusionMixin:
    """The in-memory searches and fusion of the score-fusion retriever (which sets ``dense``,
    ``sparse``, ``sentences``, ``embed_model``, ``in_memory``, ``normalization`` and
    ``pre_top_k``)."""

    dense: Any
    sparse: Any
    sentences: Any
    embed_model: Any
    in_memory: bool
    normalization: Any
    pre_top_k: int

    def _searches_memory(self, query: str) -> bool:
        return (
            self.in_memory
            and copy_due(self.dense.client, self.dense.collection_name, query, self._copies())
            and (not self.dense.filter or self._only() is not None)
        )

    def _copies(self) -> dict[str, Callable[[], Any]]:
        """The chunk collection's in-memory copies a search reads, with the calls reading them."""
        dense = vectors_slot("id", self.dense.dense_field)
        return {dense: self._dense_copy, **self.sparse.bm25_copy_slots()}

    def _dense_copy(self) -> tuple[list[str], Any]:
        d = self.dense
        return memory_vectors(
            d.client, d.collection_name, key_field="id", vector_field=d.dense_field
        )

    def _only(self) -> frozenset[str] | None:
        """The ids the filter keeps (``None``: no filter, or too many to hold)."""
        if not self.dense.filter:
            return None
        return matching_ids(self.dense.client, self.dense.collection_name, self.dense.filter)

    def _fused_in_memory(
        self, query_bundle: QueryBundle, query: str, weights: tuple[float, float]
    ) -> list[NodeWithScore]:
        """BM25, dense and sentence scores from in-memory copies, all as bare ids; fused on
        ids; then one read of the chunks returned. The steps run in turn: each is a few ms of
        Python and numpy holding the GIL, so worker threads would only wait for each other."""
        limit, only = self.dense.similarity_top_k, self._only()
        sparse = self.bm25_search(query, limit, only)
        embedding = query_bundle.embedding
        if embedding is None:
            embedding = self.embed_model.get_query_embedding(query)
        dense = self.dense_search(embedding, limit, only)
        sentences = None
        if self.sentences is not None:
            sentences = self.sentence_search(embedding, limit, only)
        # room for chunks whose sentences outlived them (skipped by read_chunks)
        fused = self.fuse_scores(weights, dense, sparse, sentences, 2 * self.pre_top_k)
        return self.read_chunks(fused)[: self.pre_top_k]

    @dispatcher.span
    def bm25_search(
        self, query: str, limit: int, only: frozenset[str] | None = None
    ) -> list[NodeWithScore]:
        """The ``limit`` best chunks by BM25 (bare ids) from the in-memory index."""
        return [_bare(key, score) for key, score in self.sparse.bm25_ids(query, limit, only)]

    @dispatcher.span
    def dense_search(
        self, embedding: list[float], limit: int, only: frozenset[str] | None = None
    ) -> list[NodeWithScore]:
        """The ``limit`` chunks nearest ``embedding`` (bare ids) from the in-memory vectors."""
        keys, matrix = self._dense_copy()
        return [_bare(k, s) for k, s in top_scores(keys, matrix, embedding, limit, only)]

    @dispatcher.span
    def sentence_search(
        self, embedding: list[float], limit: int, only: frozenset[str] | None = None
    ) -> list[NodeWithScore]:
        """The ``limit`` chunks whose best sentence is nearest ``embedding`` (bare ids)."""
        best = self.sentences.sentences.search(
            embedding, max(self.sentences.sentence_pool, limit), only
        )
        return [_bare(key, score) for key, score in best[:limit]]

    @dispatcher.span
    def fuse_scores(
        self,
        weights: tuple[float, float],
        dense: list[NodeWithScore],
        sparse: list[NodeWithScore],
        sentences: list[NodeWithScore] | None = None,
        top_n: int | None = None,
    ) -> list[NodeWithScore]:
        """The convex combination of the normalized dense, BM25 (and sentence) scores
        (:func:`~llama_index_rag_pack.fusion.convex_fusion.convex_fusion`), ``top_n`` kept
        (default ``pre_top_k``)."""
        return convex_fusion(
            dense,
            sparse,
            alpha=weights[0],
            normalization=self.normalization,
            top_n=top_n or self.pre_top_k,
            sentences=sentences or (),
            sentence_weight=weights[1] if sentences is not None else 0.0,
        )

    @dispatcher.span
    def read_chunks(self, fused: list[NodeWithScore]) -> list[NodeWithScore]:
        """``fused`` with each bare id replaced by its chunk (dropped when the chunk is gone)."""
        return self._with_payloads(fused)

    def _with_payloads(self, fused: list[NodeWithScore]) -> list[NodeWithScore]:
        rows = self.dense.rows_in_rank([n.node.node_id for n in fused], self.pre_top_k)
        hits = [{"id": key, "distance": 0.0, "entity": row} for key, row in rows.items()]
        read = {n.node.node_id: n.node for n in self.dense.to_nodes(hits)}
        out = []
        for n in fused:
            node = read.get(n.node.node_id)
            if node is not None:
                node.metadata["retrieval_search_type"] = "hybrid"
                out.append(NodeWithScore(node=node, score=n.score))
        return out


def _bare(node_id: str, score: float) -> NodeWithScore:
    """A candidate known by id and score only (its payload is read once it is returned)."""
    return NodeWithScore(node=TextNode(id_=node_id, text=""), score=score)
