"""The query-side modes (``hyde``, ``rewrite``) of a pack, searching with its best base mode.

HyDE and query rewriting change what is searched for, not how: each hands its new query to a
base retriever. By default that is the pack's default mode (``hybrid_convex`` on a collection
with BM25, the best measured on held-out questions), so the LLM's work adds to the best search
rather than replacing it with dense search alone. ``base=`` picks another base mode: any mode
registered with ``base=True`` (:func:`~llama_index_rag_pack.pack.modes.base_modes`); HyDE takes
only those that search with the query's embedding.
"""

from __future__ import annotations

from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.pack.filters import base_scope
from llama_index_rag_pack.pack.mode_registry import base_modes
from llama_index_rag_pack.pack.pack_view import PackView

__all__ = ["hyde_retriever", "query_base", "rewrite_retriever"]


def query_base(
    pack: PackView,
    base: str | None,
    similarity_top_k: int | None,
    *,
    mode: str,
    filters: Any = None,
) -> Any:
    """The base retriever of query-side ``mode``: ``base``, else the pack's default mode.

    Raises:
        ConfigurationError: ``base`` is not a base mode, or one that does not search with the
            query's embedding (``bm25``) for HyDE (it would never read the hypothetical
            answer's embedding).
    """
    choices = base_modes(embeds_query=mode == "hyde")
    name = base
    if name is None:
        default = pack.default_mode
        name = default if default in choices else "vector"
    if name not in choices:
        raise ConfigurationError(
            f"base={base!r} cannot serve mode {mode!r}: use one of {', '.join(choices)}."
        )
    # no top-k given: the pack's own retriever of that mode (cached), not a copy
    extra: dict[str, Any] = {"similarity_top_k": similarity_top_k} if similarity_top_k else {}
    return pack.retriever(name, **extra, **base_scope(pack, filters))


def hyde_retriever(
    pack: PackView,
    similarity_top_k: int | None,
    num_hypotheses: int,
    include_query: bool,
    base: str | None,
    filters: Any = None,
) -> Any:
    """HyDE over ``base``: the hypothetical answers' embedding goes to the dense side (and the
    sentence side of ``hybrid_convex``); BM25 sides still read the question's words."""
    from llama_index_rag_pack.fusion.hyde import HyDERetriever

    return HyDERetriever(
        query_base(pack, base, similarity_top_k, mode="hyde", filters=filters),
        llm=pack.llm,
        embed_model=pack.embed_model,
        num_hypotheses=num_hypotheses,
        include_query=include_query,
        callback_manager=pack.callback_manager,
    )


def rewrite_retriever(
    pack: PackView, similarity_top_k: int | None, base: str | None, filters: Any = None
) -> Any:
    """Rewrite-retrieve-read over ``base``: the rewritten query is what ``base`` searches."""
    from llama_index_rag_pack.fusion.rewrite import RewriteRetriever

    return RewriteRetriever(
        query_base(pack, base, similarity_top_k, mode="rewrite", filters=filters),
        llm=pack.llm,
        callback_manager=pack.callback_manager,
    )
