"""``MilvusHybridRetriever``: dense, BM25 or hybrid search over one Milvus collection.

Works on the collection :func:`llama_index_rag_pack.milvus.connection.open_vector_store` makes
(dense field ``embedding``, BM25 built-in sparse field ``sparse_embedding`` computed from
``text``, node JSON in ``_node_content``), on Milvus Lite and on a Milvus server, with public
pymilvus calls only.

Milvus Lite pitfalls handled: sparse search is sent with ``drop_ratio_search=0``
(MilvusVectorStore sends 0.2, which Lite rejects) and BM25 distances, negative on Lite, are
returned as positive scores.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
)
from llama_index_rag_pack.core.query_bases import PackRetriever
from llama_index_rag_pack.documents.bm25_analysis import Bm25Analysis, BM25Analyzer
from llama_index_rag_pack.fusion.convex_fusion import DEFAULT_CANDIDATE_POOL, check_candidate_pool
from llama_index_rag_pack.fusion.filtered_bm25 import Bm25SearchMixin
from llama_index_rag_pack.fusion.hybrid_options import (
    MilvusRanker,
    MilvusSearchType,
    check_limits,
    check_pre_top_k,
    checked_weights,
)
from llama_index_rag_pack.fusion.rank_fusion import DEFAULT_RRF_K
from llama_index_rag_pack.milvus.document_rows import ids_expression
from llama_index_rag_pack.milvus.hybrid_search import hybrid_search
from llama_index_rag_pack.milvus.metadata_filters import Filters, filter_expression
from llama_index_rag_pack.milvus.milvus_filter import and_expressions

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

__all__ = ["MilvusHybridRetriever", "MilvusRanker", "MilvusSearchType"]


class MilvusHybridRetriever(Bm25SearchMixin, PackRetriever):
    """Dense, BM25 (sparse) or hybrid search on one Milvus collection, with an optional rerank
    stage.

    Hybrid search sends one dense and one BM25 request in a single ``hybrid_search`` call, each
    fetching ``candidate_pool`` candidates (at least the number of nodes wanted), and lets
    Milvus merge them with ``RRFRanker(k)`` or ``WeightedRanker(w_dense, w_sparse)``. With a
    ``reranker`` (any LlamaIndex node postprocessor: cross-encoder, LLM reranker, ...) it fetches
    ``pre_top_k`` candidates, reranks them and keeps ``similarity_top_k``.

    Returned scores: cosine similarity (dense), BM25 score >= 0 (sparse), ranker score (hybrid),
    or the reranker's score; equal scores are ordered by node id, so ties never depend on the
    order Milvus sends them in. Each node's metadata gets ``retrieval_search_type``.

    Args:
        vector_store: A ``MilvusVectorStore`` (e.g. from ``open_vector_store``); its client and
            collection are used. Or give ``client`` and ``collection_name``.
        embed_model: Embeds queries for dense/hybrid search (default: the bundled MiniLM).
        search_type: ``dense``, ``sparse`` (BM25) or ``hybrid`` (default).
        ranker: ``rrf`` (default) or ``weighted``, for hybrid search.
        rrf_k: The RRF constant.
        weights: ``(dense_weight, sparse_weight)`` for the weighted ranker, each in [0, 1].
        similarity_top_k: Nodes returned.
        candidate_pool: Candidates each side of a hybrid search fetches before fusion.
        filter: A Milvus boolean expression on scalar/metadata fields, e.g. ``'title == "Milvus"'``.
        filters: Core's ``MetadataFilters`` (or an expression string), compiled by
            :func:`~llama_index_rag_pack.milvus.metadata_filters.filter_expression` and
            ``and``-ed with ``filter``: only matching chunks are searched.
        resolve_filter: Resolve the filter once to the ids it keeps and search by primary key
            (:func:`~llama_index_rag_pack.milvus.vector_memory.id_filter`): right for a Milvus
            Lite file, which one process owns (``RagPack`` sets it there).
        in_memory: Score BM25 searches on an in-memory copy of the analysed texts
            (:mod:`~llama_index_rag_pack.milvus.bm25.bm25_memory`), then read the returned chunks
            by id; implies ``resolve_filter``. For a Milvus Lite file (``RagPack`` sets it
            there); a collection analysed by Milvus itself (``standard``) stays in Milvus.
        reranker: Optional second stage (a ``BaseNodePostprocessor``).
        pre_top_k: Candidates fetched for the reranker (default ``4 * similarity_top_k``).
        dense_field / sparse_field / text_field: Field names (defaults match MilvusVectorStore).
        dense_search_params: Extra dense search params (e.g. ``{"ef": 64}`` for HNSW).
        client: A ``pymilvus.MilvusClient`` (with ``collection_name``) instead of ``vector_store``.
        collection_name: The collection, with ``client``.
        callback_manager: LlamaIndex callback manager.
        bm25_analyzer: How BM25 queries are analysed; by default what the collection was
            indexed with (the store's ``bm25_analysis``, else the collection's record; see
            :mod:`~llama_index_rag_pack.milvus.bm25.bm25_fields`). Needed only for a collection
            indexed with a custom callable, when the retriever is built from ``client=``.

    Raises:
        ConfigurationError: unknown search type/ranker, weights of the wrong length, a sparse or
            hybrid search on a collection without a BM25 field, bad top-k values.
        CollectionNotFoundError: the collection does not exist.

    Example:
        >>> from llama_index_rag_pack.milvus.connection import open_vector_store
        >>> store = open_vector_store("./rag.db", "docs")  # doctest: +SKIP
        >>> retriever = MilvusHybridRetriever(  # doctest: +SKIP
        ...     vector_store=store, search_type="hybrid",
        ...     ranker="weighted", weights=[0.6, 0.4], similarity_top_k=5
        ... )
        >>> retriever.retrieve("What is BM25?")  # doctest: +SKIP
    """

    def __init__(
        self,
        vector_store: Any | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        search_type: str | MilvusSearchType = MilvusSearchType.HYBRID,
        ranker: str | MilvusRanker = MilvusRanker.RRF,
        rrf_k: float = DEFAULT_RRF_K,
        weights: Sequence[float] | None = None,
        similarity_top_k: int = 10,
        candidate_pool: int = DEFAULT_CANDIDATE_POOL,
        filter: str | None = None,
        filters: Filters = None,
        resolve_filter: bool = False,
        in_memory: bool = False,
        reranker: BaseNodePostprocessor | None = None,
        pre_top_k: int | None = None,
        dense_field: str = "embedding",
        sparse_field: str = "sparse_embedding",
        text_field: str = "text",
        dense_search_params: dict[str, Any] | None = None,
        client: Any | None = None,
        collection_name: str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        bm25_analyzer: str | BM25Analyzer | Bm25Analysis | None = None,
    ) -> None:
        if bm25_analyzer is None and vector_store is not None:
            bm25_analyzer = getattr(vector_store, "bm25_analysis", None)
        if vector_store is not None:
            client = client or vector_store.client
            collection_name = collection_name or vector_store.collection_name
        if client is None or not collection_name:
            raise ConfigurationError(
                "MilvusHybridRetriever needs vector_store=MilvusVectorStore(...) "
                "(e.g. llama_index_rag_pack.milvus.connection.open_vector_store), "
                "or client= and collection_name=."
            )
        self.search_type = MilvusSearchType.parse(search_type)
        self.ranker = MilvusRanker.parse(ranker)
        check_limits(similarity_top_k, rrf_k)
        weights = checked_weights(weights, self.ranker)
        check_pre_top_k(pre_top_k, similarity_top_k, reranker)
        self.client = client
        self.collection_name = collection_name
        self.rrf_k = float(rrf_k)
        self.weights = weights
        self.similarity_top_k = similarity_top_k
        self.candidate_pool = check_candidate_pool(candidate_pool)
        self.filter = filter or ""
        self._filters = filters
        self.in_memory = bool(in_memory)
        self.resolve_filter = bool(resolve_filter) or self.in_memory
        self.reranker = reranker
        self.pre_top_k = pre_top_k or (
            4 * similarity_top_k if reranker is not None else similarity_top_k
        )
        self.dense_field = dense_field
        self.sparse_field = sparse_field
        self.text_field = text_field
        self.dense_search_params = dict(dense_search_params or {})
        self.bm25_analysis: Bm25Analysis | None = None
        self._check_collection(bm25_analyzer)
        if self.search_type is not MilvusSearchType.SPARSE:
            from llama_index_rag_pack.models.settings import resolve_embed_model

            embed_model = resolve_embed_model(embed_model)
        self.embed_model = embed_model
        super().__init__(callback_manager=callback_manager or CallbackManager([]), verbose=verbose)

    # ------------------------------------------------------------------ setup
    def _check_collection(self, bm25_analyzer: Any = None) -> None:
        from llama_index_rag_pack.milvus.bm25.bm25_fields import collection_bm25_analysis
        from llama_index_rag_pack.milvus.bm25.client_bm25 import ClientBM25
        from llama_index_rag_pack.milvus.capabilities import detect_capabilities
        from llama_index_rag_pack.milvus.connection import ensure_loaded, has_bm25
        from llama_index_rag_pack.milvus.served_schema import collection_bm25_vectors

        if not self.client.has_collection(self.collection_name):
            raise CollectionNotFoundError(
                f"No Milvus collection {self.collection_name!r}: index documents first "
                "(`rag-pack index PATH` or RagPack(documents=...)) or check the collection name."
            )
        info = self.client.describe_collection(self.collection_name)
        fields = {f.get("name") for f in info.get("fields", [])}
        if self.search_type is not MilvusSearchType.SPARSE and self.dense_field not in fields:
            raise ConfigurationError(
                f"Collection {self.collection_name!r} has no dense field {self.dense_field!r} "
                f"(fields: {sorted(fields)}); set dense_field=."
            )
        if self.search_type is not MilvusSearchType.DENSE and (
            self.sparse_field not in fields or not has_bm25(self.client, self.collection_name)
        ):
            caps = detect_capabilities(self.client)
            fix = (
                f"{caps.describe()}: BM25 needs Milvus 2.4+ (or Lite); use a dense mode "
                "(vector, hyde, rewrite, raptor) here."
                if caps.bm25 is None
                else "Re-index with open_vector_store(..., enable_bm25=True) "
                "(RagPack(enable_bm25=True)), or use search_type='dense'."
            )
            raise ConfigurationError(
                f"Collection {self.collection_name!r} has no BM25 sparse field "
                f"{self.sparse_field!r}, so search_type={self.search_type.value!r} cannot work. "
                + fix
            )
        if self.search_type is not MilvusSearchType.DENSE:
            self.bm25_analysis = collection_bm25_analysis(
                self.client, self.collection_name, bm25_analyzer
            )
            if collection_bm25_vectors(info) == "client":
                self.client_bm25 = ClientBM25(self.client, self.collection_name)
        output = [self.text_field]
        if info.get("enable_dynamic_field") or "_node_content" in fields:
            output += ["_node_content", "_node_type"]
        self._output_fields = output
        if self._filters is not None:
            compiled = filter_expression(self._filters, schema_fields=fields)
            self.filter = and_expressions([self.filter, compiled])
        ensure_loaded(self.client, self.collection_name)

    # ------------------------------------------------------------------ search
    def _dense_params(self) -> dict[str, Any]:
        params = dict(self.dense_search_params)
        return {"params": params} if params and "params" not in params else params

    def _hits(self, query: str, embedding: list[float] | None, limit: int) -> list[dict[str, Any]]:
        """At most ``limit`` hits, best first: higher score, then lower id."""
        if self.search_type is MilvusSearchType.DENSE:
            hits = self.dense_search(embedding, limit)
        elif self.search_type is MilvusSearchType.SPARSE:
            hits = self.bm25_search(query, limit)
        else:
            # RRF gives nodes at the same rank on opposite sides the same score, often right at
            # the cut: the whole fused pool is fetched and ranked with ties by id, then cut, so
            # which of two tied nodes is returned never depends on the order Milvus sends them.
            hits = self.hybrid_search(query, embedding, max(self.candidate_pool, limit))
        return sorted(hits, key=lambda hit: (-self._hit_score(hit), str(hit.get("id"))))[:limit]

    @dispatcher.span
    def dense_search(self, embedding: list[float] | None, limit: int) -> list[dict[str, Any]]:
        """The dense side: Milvus hits nearest ``embedding``."""
        return self._field_search(self.dense_field, embedding, self._dense_params(), limit)

    @dispatcher.span
    def bm25_search(self, query: str, limit: int) -> list[dict[str, Any]]:
        """The BM25 side: from the in-memory index, the resolved filter's ids, or Milvus."""
        terms = self.bm25_query(query)  # only stop words: no chunk holds a query term
        hits = self._memory_bm25_hits(query, limit) if terms else []
        if hits is None:
            hits = self._resolved_bm25(query, limit)
        if hits is None:
            data = self.sparse_data(terms)
            hits = (
                self._field_search(self.sparse_field, data, self._sparse_params(), limit)
                if data
                else []
            )
        return hits

    def _field_search(
        self, field: str, data: Any, params: dict[str, Any], limit: int, filtered: bool = True
    ) -> list[dict[str, Any]]:
        res = self.client.search(
            self.collection_name,
            data=[data],
            anns_field=field,
            limit=limit,
            filter=self.active_filter() if filtered else "",
            output_fields=self._output_fields,
            search_params=params,
        )
        return list(res[0]) if res else []

    @dispatcher.span
    def hybrid_search(
        self, query: str, embedding: list[float] | None, pool: int
    ) -> list[dict[str, Any]]:
        """One dense and one BM25 request of ``pool`` candidates each, fused by the ranker."""
        terms = self.bm25_query(query)
        data = self.sparse_data(terms) if terms else {}
        if not data:  # only stop words, or no chunk holds a query term: the dense side decides
            return self._field_search(self.dense_field, embedding, self._dense_params(), pool)
        return hybrid_search(
            self.client,
            self.collection_name,
            [
                (self.dense_field, embedding, self._dense_params()),
                (self.sparse_field, data, self._sparse_params()),
            ],
            limit=pool,
            expr=self.active_filter(),
            rrf_k=self.rrf_k if self.ranker is MilvusRanker.RRF else None,
            weights=None if self.ranker is MilvusRanker.RRF else tuple(self.weights),
            output_fields=self._output_fields,
        )

    def _rows_by_id(self, ids: list[str], extra_filter: str = "") -> dict[str, dict[str, Any]]:
        """The stored rows (id and payload fields) of chunks ``ids``, by id; ids that are gone,
        or that ``extra_filter`` rejects, are missing."""
        if not ids:
            return {}
        expr = ids_expression("id", ids)
        if extra_filter:
            expr = f"({expr}) and ({extra_filter})"
        rows = self.client.query(
            self.collection_name, filter=expr, output_fields=["id", *self._output_fields]
        )
        return {str(row.get("id")): row for row in rows}

    def rows_in_rank(self, ranked: list[str], limit: int) -> dict[str, dict[str, Any]]:
        """The rows of the first ``limit`` of the ``ranked`` ids (what the chunks returned by an
        id-only ranking carry), and of the later ones too when
        some of those are gone (deleted around the package: their places are filled in turn)."""
        rows = self._rows_by_id(ranked[:limit])
        if len(rows) < min(limit, len(ranked)):
            rows.update(self._rows_by_id(ranked[limit:]))
        return rows

    def _hit_score(self, hit: dict[str, Any]) -> float:
        score = float(hit.get("distance", 0.0))
        # BM25 scores are >= 0; Milvus Lite returns them negated
        return abs(score) if self.search_type is MilvusSearchType.SPARSE else score

    def to_nodes(self, hits: list[dict[str, Any]]) -> list[NodeWithScore]:
        """Milvus hits (``id``, ``distance``, ``entity``) as scored LlamaIndex nodes."""
        out = []
        for hit in hits:
            entity = hit.get("entity", {})
            text = entity.get(self.text_field) or ""
            if entity.get("_node_content"):
                node = metadata_dict_to_node(
                    {
                        "_node_content": entity["_node_content"],
                        "_node_type": entity.get("_node_type"),
                    },
                    text=text,
                )
            else:
                node = TextNode(id_=str(hit.get("id")), text=text)
            node.metadata["retrieval_search_type"] = self.search_type.value
            if "retrieval_search_type" not in node.excluded_llm_metadata_keys:
                node.excluded_llm_metadata_keys.append("retrieval_search_type")
                node.excluded_embed_metadata_keys.append("retrieval_search_type")
            out.append(NodeWithScore(node=node, score=self._hit_score(hit)))
        return out

    def _limit(self) -> int:
        return self.pre_top_k if self.reranker is not None else self.similarity_top_k

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        embedding = None
        if self.search_type is not MilvusSearchType.SPARSE:
            embedding = query_bundle.embedding or self.embed_model.get_query_embedding(query)
        nodes = self.to_nodes(self._hits(query, embedding, self._limit()))
        if self.reranker is not None and nodes:
            nodes = self.reranker.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes[: self.similarity_top_k]

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        embedding = None
        if self.search_type is not MilvusSearchType.SPARSE:
            embedding = query_bundle.embedding or await self.embed_model.aget_query_embedding(query)
        # MilvusClient is blocking (AsyncMilvusClient does not cover Milvus Lite): run it in a
        # thread
        hits = await asyncio.to_thread(self._hits, query, embedding, self._limit())
        nodes = self.to_nodes(hits)
        if self.reranker is not None and nodes:
            nodes = await self.reranker.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes[: self.similarity_top_k]
