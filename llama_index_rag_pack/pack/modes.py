"""The built-in retrieval modes: their builders, registered in the one registry
(:mod:`~llama_index_rag_pack.pack.mode_registry`), and the :class:`RetrievalMode` enum derived
from them.

:class:`~llama_index_rag_pack.RagPack`, ``rag-pack eval`` and the CLI all read the registry:
``pack.retriever(mode)`` calls the mode's builder, evaluation lists the modes and what each
needs, and ``--mode`` accepts exactly the registered names. A new mode is one
:func:`register_mode` call; nothing else has to change.

Example:
    >>> from llama_index_rag_pack.pack.modes import get_mode, mode_names
    >>> mode_names()[:3]
    ['vector', 'route', 'bm25']
    >>> get_mode("hyde").needs_llm
    True
    >>> get_mode("nope")
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: Unknown retrieval mode 'nope'; valid modes: vector, route, bm25, hybrid, hybrid_weighted, hybrid_convex, fusion, hyde, rewrite, raptor, raptor_traversal, self_query.
"""  # noqa: E501  (doctest output is one line)

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.pack.filters import pack_filter_expression
from llama_index_rag_pack.pack.mode_registry import (
    ModeSpec,
    add_built_in,
    base_modes,
    get_mode,
    mode_names,
    register_mode,
    unregister_mode,
)
from llama_index_rag_pack.pack.pack_view import PackView, RoutedPackView


# ------------------------------------------------------------------ built-in builders
def _on_lite(pack: PackView) -> bool:
    """The pack's collection is a Milvus Lite file (one process owns it)."""
    from llama_index_rag_pack.milvus.connection import is_remote_uri

    return pack.uri is not None and not is_remote_uri(pack.uri)


def _in_memory(pack: PackView) -> bool:
    """Search in-memory copies: on a Lite file, unless they are off or over the memory budget
    (:mod:`~llama_index_rag_pack.milvus.memory_budget`)."""
    if not _on_lite(pack):
        return False
    from llama_index_rag_pack.milvus.memory_budget import copies_fit

    return copies_fit(pack.vector_store, pack.sentence_index)


def _milvus(pack: PackView, search_type: str, similarity_top_k: int | None, **kwargs: Any) -> Any:
    from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever

    return MilvusHybridRetriever(
        vector_store=pack.vector_store,
        embed_model=pack.embed_model,
        search_type=search_type,
        similarity_top_k=similarity_top_k or pack.similarity_top_k,
        callback_manager=pack.callback_manager,
        in_memory=_in_memory(pack),
        **kwargs,
    )


def build_vector(pack: PackView, similarity_top_k: int | None = None, filters: Any = None) -> Any:
    """Core's ``VectorIndexRetriever`` over the pack's index (what ``index.as_retriever()``
    gives), with the pack's empty-query check; ``filters`` reach Milvus as ``string_expr``."""
    from llama_index_rag_pack.fusion.vector import CheckedVectorIndexRetriever

    expr = pack_filter_expression(pack, filters)
    retriever = CheckedVectorIndexRetriever(
        pack.index,
        node_ids=list(pack.index.index_struct.nodes_dict.values()),
        callback_manager=pack.callback_manager,
        similarity_top_k=similarity_top_k or pack.similarity_top_k,
        vector_store_kwargs={"string_expr": expr} if expr else {},
    )
    if _in_memory(pack):
        from llama_index_rag_pack.milvus.vector_memory import id_filter

        retriever.id_filter = id_filter
    return retriever


def build_bm25(pack: PackView, similarity_top_k: int | None = None, filters: Any = None) -> Any:
    """Milvus' built-in BM25 full-text search."""
    return _milvus(pack, "sparse", similarity_top_k, filters=filters)


def _given(value: Any, default: Any) -> Any:
    """``value`` unless it is ``None`` (an explicit argument beats the pack's fusion config)."""
    return default if value is None else value


def build_hybrid(
    pack: PackView,
    similarity_top_k: int | None = None,
    rrf_k: float | None = None,
    candidate_pool: int | None = None,
    filters: Any = None,
) -> Any:
    """Dense + BM25 in one Milvus hybrid search, fused by reciprocal rank (``rrf_k`` and the
    candidate pool default to the pack's ``fusion_config``)."""
    config = pack.fusion_config
    return _milvus(
        pack,
        "hybrid",
        similarity_top_k,
        ranker="rrf",
        rrf_k=_given(rrf_k, config.rrf_k),
        candidate_pool=_given(candidate_pool, config.candidate_pool),
        filters=filters,
    )


def build_hybrid_weighted(
    pack: PackView,
    similarity_top_k: int | None = None,
    weights: Sequence[float] = (0.7, 0.3),
    candidate_pool: int | None = None,
    filters: Any = None,
) -> Any:
    """Dense + BM25 in one Milvus hybrid search, fused by Milvus' weighted (arctan) scores."""
    return _milvus(
        pack,
        "hybrid",
        similarity_top_k,
        ranker="weighted",
        weights=tuple(weights),
        candidate_pool=_given(candidate_pool, pack.fusion_config.candidate_pool),
        filters=filters,
    )


def build_hybrid_convex(
    pack: PackView,
    similarity_top_k: int | None = None,
    alpha: float | None = None,
    normalization: str | None = None,
    candidate_pool: int | None = None,
    sentence_weight: float | None = None,
    reranker: Any | None = None,
    pre_top_k: int | None = None,
    filters: Any = None,
) -> Any:
    """Dense + BM25 (+ best sentence, with a sentence index), fused here by
    normalized scores (defaults from the pack's ``fusion_config``, fitted by
    ``rag-pack eval --fit``)."""
    from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever

    config = pack.fusion_config
    lite = _on_lite(pack)  # one process serves Lite
    return MilvusScoreFusionRetriever(
        vector_store=pack.vector_store,
        embed_model=pack.embed_model,
        alpha=_given(alpha, config.alpha),
        normalization=_given(normalization, config.normalization),
        candidate_pool=_given(candidate_pool, config.candidate_pool),
        sentence_weight=_given(sentence_weight, config.sentence_weight),
        # weights given here are meant for every question
        unread_weights=None
        if alpha is not None or sentence_weight is not None
        else (config.unread_alpha, config.unread_sentence_weight),
        in_memory=_in_memory(pack),
        concurrent_searches=not lite,
        reranker=reranker,
        pre_top_k=pre_top_k,
        filters=filters,
        similarity_top_k=similarity_top_k or pack.similarity_top_k,
        callback_manager=pack.callback_manager,
    )


def build_fusion(
    pack: PackView,
    similarity_top_k: int | None = None,
    num_queries: int = 4,
    fusion_mode: str = "reciprocal_rank",
    weights: Sequence[float] | None = None,
    filters: Any = None,
) -> Any:
    """RAG-Fusion: LLM query variants, each searched dense (and BM25), fused."""
    from llama_index_rag_pack.fusion.rag_fusion import FusionRetriever
    from llama_index_rag_pack.milvus.connection import has_bm25

    top_k = similarity_top_k or pack.similarity_top_k
    per_list = max(2 * top_k, 10)
    # MilvusHybridRetriever's dense search is not tied to one event loop (MilvusVectorStore's
    # async client is), so the async fusion path also works across asyncio.run calls.
    retrievers = {"dense": _milvus(pack, "dense", per_list, filters=filters)}
    if has_bm25(pack.vector_store.client, pack.vector_store.collection_name):
        retrievers["bm25"] = _milvus(pack, "sparse", per_list, filters=filters)
    return FusionRetriever(
        retrievers,
        llm=pack.llm,
        num_queries=num_queries,
        mode=fusion_mode,
        weights=None if weights is None else tuple(weights),
        similarity_top_k=top_k,
        callback_manager=pack.callback_manager,
    )


def build_hyde(
    pack: PackView,
    similarity_top_k: int | None = None,
    num_hypotheses: int = 1,
    include_query: bool = False,
    base: str | None = None,
    filters: Any = None,
) -> Any:
    """HyDE: search with the embedding of LLM-written hypothetical answers, through ``base``
    (default: the pack's default mode)."""
    from llama_index_rag_pack.pack.query_modes import hyde_retriever

    return hyde_retriever(pack, similarity_top_k, num_hypotheses, include_query, base, filters)


def build_rewrite(
    pack: PackView,
    similarity_top_k: int | None = None,
    base: str | None = None,
    filters: Any = None,
) -> Any:
    """The LLM rewrites the question into a search query, searched through ``base`` (default:
    the pack's default mode)."""
    from llama_index_rag_pack.pack.query_modes import rewrite_retriever

    return rewrite_retriever(pack, similarity_top_k, base, filters)


def build_raptor(
    pack: PackView, similarity_top_k: int | None = None, filters: Any = None, tenant: Any = None
) -> Any:
    """RAPTOR, collapsed tree: leaves and summaries of every level in one ranking."""
    from llama_index_rag_pack.pack.raptor import pack_raptor_retriever

    return pack_raptor_retriever(pack, "collapsed", similarity_top_k, filters, tenant)


def build_raptor_traversal(
    pack: PackView, similarity_top_k: int | None = None, filters: Any = None, tenant: Any = None
) -> Any:
    """RAPTOR, tree traversal: from the top level down through the chosen nodes' children."""
    from llama_index_rag_pack.pack.raptor import pack_raptor_retriever

    return pack_raptor_retriever(pack, "tree_traversal", similarity_top_k, filters, tenant)


def build_route(
    pack: RoutedPackView,
    similarity_top_k: int | None = None,
    filters: Any = None,
    tenant: str | None = None,
    **kwargs: Any,
) -> Any:
    """Pick the source(s) for the question, retrieve from each, fuse (``RoutedRagPack``)."""
    from llama_index.core.tools import RetrieverTool, ToolMetadata

    from llama_index_rag_pack.routing.router import FusionRouterRetriever

    if not getattr(pack, "sources", None):
        raise ConfigurationError(
            "mode 'route' needs a pack over several sources: build it with "
            "RoutedRagPack([RouteSource(name, description, ...), ...]) "
            "or RagPack.from_sources(...)."
        )
    tools = []
    for name, src in pack.sources.items():
        extra: dict[str, Any] = {"similarity_top_k": similarity_top_k} if similarity_top_k else {}
        extra.update({k: v for k, v in (("filters", filters), ("tenant", tenant)) if v is not None})
        retriever = pack.source_packs[name].retriever(src.mode, **extra)
        description = src.description or src.utterances[0]
        tools.append(
            RetrieverTool(
                retriever=retriever, metadata=ToolMetadata(name=name, description=description)
            )
        )
    return FusionRouterRetriever(
        tools,
        selector=pack.selector,
        top_n=similarity_top_k or pack.similarity_top_k if pack.top_k_routes > 1 else None,
        callback_manager=pack.callback_manager,
        **kwargs,
    )


def build_self_query(pack: PackView, similarity_top_k: int | None = None, **kwargs: Any) -> Any:
    """Self-query: the LLM writes the search query and a validated Milvus metadata filter."""
    from llama_index_rag_pack.pack.self_query import self_query_retriever

    return self_query_retriever(pack, similarity_top_k, **kwargs)


for _spec in (
    ModeSpec(
        "vector",
        build_vector,
        "dense vector search (core's VectorIndexRetriever)",
        base=True,
        aliases=("dense",),
    ),
    ModeSpec("route", build_route, "route between sources, then fuse", needs_sources=True),
    ModeSpec(
        "bm25",
        build_bm25,
        "Milvus BM25 full-text search",
        base=True,
        embeds_query=False,
        aliases=("sparse", "full_text"),
        listed=True,
    ),
    ModeSpec(
        "hybrid",
        build_hybrid,
        "dense + BM25, reciprocal rank fusion in Milvus",
        base=True,
        listed=True,
    ),
    ModeSpec("hybrid_weighted", build_hybrid_weighted, "dense + BM25, weighted scores", base=True),
    ModeSpec(
        "hybrid_convex",
        build_hybrid_convex,
        "dense + BM25, convex combination of normalized scores (fit: rag-pack eval --fit)",
        base=True,
    ),
    ModeSpec(
        "fusion",
        build_fusion,
        "RAG-Fusion: LLM query variants, fused",
        needs_llm=True,
        listed=True,
    ),
    ModeSpec(
        "hyde", build_hyde, "HyDE: search with hypothetical answers", needs_llm=True, listed=True
    ),
    ModeSpec("rewrite", build_rewrite, "LLM query rewriting", needs_llm=True, listed=True),
    ModeSpec(
        "raptor",
        build_raptor,
        "RAPTOR tree, collapsed",
        needs_tree=True,
        aliases=("raptor_collapsed",),
        listed=True,
    ),
    ModeSpec("raptor_traversal", build_raptor_traversal, "RAPTOR tree traversal", needs_tree=True),
    ModeSpec("self_query", build_self_query, "LLM-written Milvus metadata filter", needs_llm=True),
):
    add_built_in(_spec)


class _ModeEnum(str, Enum):
    @classmethod
    def parse(cls, value: str | Enum) -> str:
        """The registered mode name for ``value`` (built-in or added by :func:`register_mode`).

        Raises:
            ConfigurationError: unknown mode.
        """
        return get_mode(value).name


#: The built-in retrieval modes as an enum (``RetrievalMode.HYBRID_CONVEX.value ==
#: "hybrid_convex"``), derived from the registrations above; :func:`register_mode` adds more
#: by name.
RetrievalMode = _ModeEnum(  # type: ignore[call-overload]
    "RetrievalMode", [(name.upper(), name) for name in mode_names()], module=__name__
)

#: The mode a pack uses when none is named: the best measured on the held-out questions
#: (benchmarks/results/retrieval_quality.md). Collections without BM25 use ``vector``.
DEFAULT_MODE = RetrievalMode.HYBRID_CONVEX.value
#: The default on a collection indexed without BM25 (``enable_bm25=False``).
DENSE_ONLY_DEFAULT_MODE = RetrievalMode.VECTOR.value

__all__ = [
    "ModeSpec",
    "RetrievalMode",
    "base_modes",
    "get_mode",
    "mode_names",
    "register_mode",
    "unregister_mode",
]
