"""``MilvusScoreFusionRetriever``: dense + BM25 fused client-side by normalized scores.

Milvus' own ``WeightedRanker`` squashes each side's scores with arctan, which keeps neither
side's spread, and its ``RRFRanker`` ignores scores altogether. This retriever runs one dense and
one BM25 search of ``candidate_pool`` candidates each, at the same time, and fuses them here as a
convex combination of min-max (or mean ± 3σ) normalized scores
(:func:`~llama_index_rag_pack.core.convex_fusion.convex_fusion`). ``alpha`` is the dense weight;
``rag-pack eval --fit`` fits it on labelled questions.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.convex_fusion import (
    DEFAULT_ALPHA,
    DEFAULT_CANDIDATE_POOL,
    ScoreNormalization,
    check_alpha,
    check_candidate_pool,
    convex_fusion,
)
from llama_index_rag_pack.core.errors import check_query
from llama_index_rag_pack.storage.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.storage.hybrid_options import check_top_k

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = ["MilvusScoreFusionRetriever"]


class MilvusScoreFusionRetriever(BaseRetriever):
    """Dense and BM25 search on one Milvus collection, fused by normalized scores.

    ``score = alpha * norm(dense) + (1 - alpha) * norm(bm25)``, each side normalized over its
    own ``candidate_pool`` candidates (a node found by one side only gets 0 from the other).
    Equal fused scores are ordered by node id, so results never depend on which search answered
    first. Returned scores lie in [0, 1]; each node's ``retrieval_search_type`` is ``hybrid``.

    Args:
        vector_store: A ``MilvusVectorStore`` (e.g. from ``open_vector_store``), or give
            ``client`` and ``collection_name``.
        embed_model: Embeds queries for the dense side (default: the bundled MiniLM).
        alpha: Dense weight in [0, 1] (1 = dense only, 0 = BM25 only).
        normalization: ``min_max`` (relative score fusion) or ``dist_based`` (mean ± 3σ).
        candidate_pool: Candidates each side fetches (at least ``similarity_top_k``).
        similarity_top_k: Nodes returned.
        filter: A Milvus boolean expression on metadata fields, applied to both sides.
        dense_search_params: Extra dense search params (e.g. ``{"ef": 64}`` for HNSW).
        client: A ``pymilvus.MilvusClient`` (with ``collection_name``) instead of ``vector_store``.
        collection_name: The collection, with ``client``.
        callback_manager: LlamaIndex callback manager (shared with the two searches).

    Raises:
        ConfigurationError: ``alpha`` outside [0, 1], an unknown normalization, a bad
            ``candidate_pool`` or ``similarity_top_k``, a collection without a BM25 field.
        CollectionNotFoundError: the collection does not exist.

    Example:
        >>> from llama_index_rag_pack.storage.milvus import open_vector_store
        >>> store = open_vector_store("./rag.db", "docs")  # doctest: +SKIP
        >>> retriever = MilvusScoreFusionRetriever(store, alpha=0.4)  # doctest: +SKIP
        >>> retriever.retrieve("What is BM25?")  # doctest: +SKIP
    """

    def __init__(
        self,
        vector_store: Any | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        alpha: float = DEFAULT_ALPHA,
        normalization: str | ScoreNormalization = ScoreNormalization.MIN_MAX,
        candidate_pool: int = DEFAULT_CANDIDATE_POOL,
        similarity_top_k: int = 10,
        filter: str | None = None,
        dense_search_params: dict[str, Any] | None = None,
        client: Any | None = None,
        collection_name: str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        check_top_k(similarity_top_k)
        self.alpha = check_alpha(alpha)
        self.normalization = ScoreNormalization.parse(normalization)
        self.candidate_pool = check_candidate_pool(candidate_pool)
        self.similarity_top_k = similarity_top_k
        callback_manager = callback_manager or CallbackManager([])
        common: dict[str, Any] = dict(
            similarity_top_k=max(candidate_pool, similarity_top_k),
            filter=filter,
            client=client,
            collection_name=collection_name,
            callback_manager=callback_manager,
        )
        self.dense = MilvusHybridRetriever(
            vector_store,
            embed_model=embed_model,
            search_type="dense",
            dense_search_params=dense_search_params,
            **common,
        )
        self.sparse = MilvusHybridRetriever(vector_store, search_type="sparse", **common)
        self.embed_model = self.dense.embed_model
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _fuse(self, dense: list[NodeWithScore], sparse: list[NodeWithScore]) -> list[NodeWithScore]:
        fused = convex_fusion(
            dense,
            sparse,
            alpha=self.alpha,
            normalization=self.normalization,
            top_n=self.similarity_top_k,
        )
        for n in fused:
            # the node objects were built for this query by the side that found them
            n.node.metadata["retrieval_search_type"] = "hybrid"
        return fused

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle)
        # the BM25 search runs in a worker thread, in a copy of this thread's context so its
        # instrumentation spans stay children of this query's span
        context = contextvars.copy_context()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bm25-search") as pool:
            sparse = pool.submit(context.run, self.sparse.retrieve, query_bundle)
            dense = self.dense.retrieve(query_bundle)
            return self._fuse(dense, sparse.result())

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle)
        dense, sparse = await asyncio.gather(
            self.dense.aretrieve(query_bundle), self.sparse.aretrieve(query_bundle)
        )
        return self._fuse(dense, sparse)
