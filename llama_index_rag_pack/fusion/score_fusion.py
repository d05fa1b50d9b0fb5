"""``MilvusScoreFusionRetriever``: dense + BM25 fused client-side by normalized scores.

Milvus' own ``WeightedRanker`` squashes each side's scores with arctan, which keeps neither
side's spread, and its ``RRFRanker`` ignores scores altogether. This retriever runs one dense and
one BM25 search of ``candidate_pool`` candidates each, at the same time, and fuses them here as a
convex combination of min-max (or mean ± 3σ) normalized scores
(:func:`~llama_index_rag_pack.fusion.convex_fusion.convex_fusion`). ``alpha`` is the dense weight;
``rag-pack eval --fit`` fits it on labelled questions.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.query_bases import PackRetriever
from llama_index_rag_pack.fusion.convex_fusion import (
    DEFAULT_CANDIDATE_POOL,
    TUNED_ALPHA,
    TUNED_SENTENCE_WEIGHT,
    ScoreNormalization,
    check_alpha,
    check_candidate_pool,
    check_convex_settings,
    check_sentence_weight,
)
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.fusion.hybrid_options import check_pre_top_k, check_top_k
from llama_index_rag_pack.fusion.memory_fusion import MemoryFusionMixin
from llama_index_rag_pack.fusion.sentence_retriever import (
    DEFAULT_SENTENCE_POOL,
    MilvusSentenceRetriever,
)
from llama_index_rag_pack.milvus.metadata_filters import Filters
from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex
from llama_index_rag_pack.models.settings import embed_model_languages

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = ["MilvusScoreFusionRetriever"]

logger = logging.getLogger(__name__)


class MilvusScoreFusionRetriever(MemoryFusionMixin, PackRetriever):
    """Dense and BM25 search on one Milvus collection, fused by normalized scores.

    ``score = alpha * norm(dense) + (1 - alpha) * norm(bm25)``, each side normalized over its
    own ``candidate_pool`` candidates (a node found by one side only gets 0 from the other).
    Equal fused scores are ordered by node id, so results never depend on which search answered
    first. Returned scores lie in [0, 1]; each node's ``retrieval_search_type`` is ``hybrid``.

    When the collection has a sentence index (``RagPack(sentence_index=True)``, the default) and
    ``sentence_weight`` ``g`` > 0, a third search scores chunks by their best-matching sentence
    (:class:`~llama_index_rag_pack.fusion.sentence_retriever.MilvusSentenceRetriever`) and the
    score becomes ``(1 - g) * (alpha * norm(dense) + (1 - alpha) * norm(bm25)) + g *
    norm(sentence)``. Without a sentence index the sentence list is left out (logged at INFO).

    Args:
        vector_store: A ``MilvusVectorStore`` (e.g. from ``open_vector_store``), or give
            ``client`` and ``collection_name``.
        embed_model: Embeds queries for the dense side (default: the bundled MiniLM).
        alpha: Dense weight in [0, 1] (1 = dense only, 0 = BM25 only).
        normalization: ``min_max`` (relative score fusion) or ``dist_based`` (mean ± 3σ).
        candidate_pool: Candidates each side fetches (at least ``similarity_top_k``).
        sentence_weight: Weight of the sentence list in [0, 1] (0 = dense and BM25 only).
        unread_weights: ``(alpha, sentence_weight)`` for a question the embedding model cannot
            read (:meth:`reads`: the bundled model reads English only); ``None``: the same
            weights for every question.
        sentence_pool: Sentences the sentence search fetches before grouping them by chunk.
        in_memory: Search in-memory copies of the chunk and sentence vectors
            (:mod:`~llama_index_rag_pack.milvus.vector_memory`) and of the BM25 index
            (:mod:`~llama_index_rag_pack.milvus.bm25.bm25_memory`), fuse on ids, and read the
            payload of the returned chunks only. Right for a Milvus Lite file, which one process
            owns and which answers every search from Python (``RagPack`` sets it there). A
            filter is resolved once to the ids it keeps, which mask the in-memory searches and
            restrict BM25 by primary key (more than ``vector_memory.MAX_ID_SET`` ids: every
            search stays in Milvus with the filter expression).
        concurrent_searches: Run the searches at the same time (threads on the sync path,
            ``asyncio.gather`` on the async one). Right for a Milvus server; Milvus Lite answers
            one request at a time from one process, and there one after another is faster
            (``RagPack`` turns it off on a Lite file).
        similarity_top_k: Nodes returned.
        reranker: A second stage over the fused nodes: any LlamaIndex node postprocessor, e.g.
            ``SentenceTransformerRerank`` with a cross-encoder you have, or ``LLMRerank``.
        pre_top_k: Fused nodes the reranker sees (default ``4 * similarity_top_k``).
        filter: A Milvus boolean expression on metadata fields, applied to both sides.
        filters: Core's ``MetadataFilters`` (or an expression string), ``and``-ed with
            ``filter`` on every side.
        dense_search_params: Extra dense search params (e.g. ``{"ef": 64}`` for HNSW).
        client: A ``pymilvus.MilvusClient`` (with ``collection_name``) instead of ``vector_store``.
        collection_name: The collection, with ``client``.
        callback_manager: LlamaIndex callback manager (shared with the two searches).

    Raises:
        ConfigurationError: ``alpha`` or ``sentence_weight`` outside [0, 1], an unknown
            normalization, a bad ``candidate_pool``, ``sentence_pool`` or ``similarity_top_k``,
            a collection without a BM25 field.
        CollectionNotFoundError: the collection does not exist.

    Example:
        >>> from llama_index_rag_pack.milvus.connection import open_vector_store
        >>> store = open_vector_store("./rag.db", "docs")  # doctest: +SKIP
        >>> retriever = MilvusScoreFusionRetriever(store, alpha=0.4)  # doctest: +SKIP
        >>> retriever.retrieve("What is BM25?")  # doctest: +SKIP
    """

    def __init__(
        self,
        vector_store: Any | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        alpha: float = TUNED_ALPHA,
        normalization: str | ScoreNormalization = ScoreNormalization.MIN_MAX,
        candidate_pool: int = DEFAULT_CANDIDATE_POOL,
        sentence_weight: float = TUNED_SENTENCE_WEIGHT,
        unread_weights: tuple[float, float] | None = None,
        sentence_pool: int = DEFAULT_SENTENCE_POOL,
        in_memory: bool = False,
        concurrent_searches: bool = True,
        similarity_top_k: int = 10,
        reranker: BaseNodePostprocessor | None = None,
        pre_top_k: int | None = None,
        filter: str | None = None,
        filters: Filters = None,
        dense_search_params: dict[str, Any] | None = None,
        client: Any | None = None,
        collection_name: str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        check_top_k(similarity_top_k)
        check_pre_top_k(pre_top_k, similarity_top_k, reranker)
        self.reranker = reranker
        self.pre_top_k = pre_top_k or (
            4 * similarity_top_k if reranker is not None else similarity_top_k
        )
        self.alpha, self.normalization, self.candidate_pool, self.sentence_weight = (
            check_convex_settings(alpha, normalization, candidate_pool, sentence_weight)
        )
        self.unread_weights = None
        if unread_weights is not None:
            self.unread_weights = (
                check_alpha(unread_weights[0], "unread alpha"),
                check_sentence_weight(unread_weights[1], "unread sentence_weight"),
            )
        check_candidate_pool(sentence_pool)
        self.similarity_top_k = similarity_top_k
        self.concurrent_searches = bool(concurrent_searches)
        self.in_memory = bool(in_memory)
        callback_manager = callback_manager or CallbackManager([])
        common: dict[str, Any] = dict(
            similarity_top_k=max(candidate_pool, self.pre_top_k),
            filter=filter,
            filters=filters,
            in_memory=self.in_memory,
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
        self.dense_languages = embed_model_languages(self.embed_model)
        self.sentences: MilvusSentenceRetriever | None = None
        if self.sentence_weight > 0 or (self.unread_weights or (0, 0))[1] > 0:
            if MilvusSentenceIndex(self.dense.client, self.dense.collection_name).exists():
                self.sentences = MilvusSentenceRetriever(
                    vector_store,
                    embed_model=self.embed_model,
                    sentence_pool=sentence_pool,
                    **common,
                )
            else:
                logger.info(
                    "Collection %r has no sentence index: hybrid search uses dense and BM25 only "
                    "(index with RagPack(sentence_index=True) to add sentence scores)",
                    self.dense.collection_name,
                )
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def weights(self, query: str) -> tuple[float, float]:
        """The dense and sentence weights for ``query``: ``unread_weights`` when the embedding
        model cannot read the question's language or the collection's main one (the bundled
        model reads English only), else ``alpha`` and ``sentence_weight``."""
        if self.unread_weights is None or self.reads(query):
            return self.alpha, self.sentence_weight
        return self.unread_weights

    def reads(self, query: str) -> bool:
        """Whether the embedding model reads ``query`` and the collection's chunks
        (:meth:`~llama_index_rag_pack.documents.bm25_analysis.Bm25Analysis.read_by`)."""
        languages, analysis = self.dense_languages, self.sparse.bm25_analysis
        return languages is None or analysis is None or analysis.read_by(languages, query)

    def _fuse(
        self,
        weights: tuple[float, float],
        dense: list[NodeWithScore],
        sparse: list[NodeWithScore],
        sentences: list[NodeWithScore] | None = None,
    ) -> list[NodeWithScore]:
        fused = self.fuse_scores(weights, dense, sparse, sentences)
        for n in fused:
            # the node objects were built for this query by the side that found them
            n.node.metadata["retrieval_search_type"] = "hybrid"
        return fused

    def _embedded(self, query_bundle: QueryBundle, embedding: list[float]) -> QueryBundle:
        return QueryBundle(
            query_str=query_bundle.query_str,
            custom_embedding_strs=query_bundle.custom_embedding_strs,
            embedding=embedding,
        )

    def _fused(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        weights = self.weights(query)
        if self._searches_memory(query):
            return self._fused_in_memory(query_bundle, query, weights)
        if not self.concurrent_searches:
            return self._fused_in_turn(query_bundle, query, weights)
        # BM25 (and the sentence search) run in worker threads, in copies of this thread's
        # context so their instrumentation spans stay children of this query's span
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="hybrid-search") as pool:
            sparse = pool.submit(contextvars.copy_context().run, self.sparse.retrieve, query_bundle)
            if self.sentences is None:
                return self._fuse(weights, self.dense.retrieve(query_bundle), sparse.result())
            embedding = query_bundle.embedding or self.embed_model.get_query_embedding(query)
            bundle = self._embedded(query_bundle, embedding)
            sentences = pool.submit(contextvars.copy_context().run, self.sentences.retrieve, bundle)
            dense = self.dense.retrieve(bundle)
            return self._fuse(weights, dense, sparse.result(), sentences.result())

    async def _afused(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        weights = self.weights(query)
        if self._searches_memory(query):
            # every step is blocking Python or numpy work in this process
            return await asyncio.to_thread(self._fused_in_memory, query_bundle, query, weights)
        if not self.concurrent_searches:
            return await self._afused_in_turn(query_bundle, query, weights)
        if self.sentences is None:
            dense, sparse = await asyncio.gather(
                self.dense.aretrieve(query_bundle), self.sparse.aretrieve(query_bundle)
            )
            return self._fuse(weights, dense, sparse)
        sparse_task = asyncio.ensure_future(self.sparse.aretrieve(query_bundle))
        try:
            embedding = query_bundle.embedding or await self.embed_model.aget_query_embedding(query)
        except BaseException:
            sparse_task.cancel()
            raise
        bundle = self._embedded(query_bundle, embedding)
        dense, sparse, sentences = await asyncio.gather(
            self.dense.aretrieve(bundle), sparse_task, self.sentences.aretrieve(bundle)
        )
        return self._fuse(weights, dense, sparse, sentences)

    def _fused_in_turn(
        self, query_bundle: QueryBundle, query: str, weights: tuple[float, float]
    ) -> list[NodeWithScore]:
        sparse = self.sparse.retrieve(query_bundle)
        if self.sentences is None:
            return self._fuse(weights, self.dense.retrieve(query_bundle), sparse)
        embedding = query_bundle.embedding or self.embed_model.get_query_embedding(query)
        bundle = self._embedded(query_bundle, embedding)
        dense, sentences = self.dense.retrieve(bundle), self.sentences.retrieve(bundle)
        return self._fuse(weights, dense, sparse, sentences)

    async def _afused_in_turn(
        self, query_bundle: QueryBundle, query: str, weights: tuple[float, float]
    ) -> list[NodeWithScore]:
        sparse = await self.sparse.aretrieve(query_bundle)
        if self.sentences is None:
            return self._fuse(weights, await self.dense.aretrieve(query_bundle), sparse)
        embedding = query_bundle.embedding or await self.embed_model.aget_query_embedding(query)
        bundle = self._embedded(query_bundle, embedding)
        dense = await self.dense.aretrieve(bundle)
        return self._fuse(weights, dense, sparse, await self.sentences.aretrieve(bundle))

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        nodes = self._fused(query_bundle, query)
        if self.reranker is not None and nodes:
            nodes = self.reranker.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes[: self.similarity_top_k]

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        nodes = await self._afused(query_bundle, query)
        if self.reranker is not None and nodes:
            nodes = await self.reranker.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes[: self.similarity_top_k]
