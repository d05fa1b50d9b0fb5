"""The validated options of :class:`~llama_index_rag_pack.fusion.hybrid.MilvusHybridRetriever`:
search type, server-side ranker, result limits and ranker weights.

Every check raises :class:`~llama_index_rag_pack.core.errors.ConfigurationError` with the bad
value and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.fusion.convex_fusion import check_rrf_k

__all__ = [
    "MilvusRanker",
    "MilvusSearchType",
    "check_limits",
    "check_pre_top_k",
    "check_top_k",
    "checked_weights",
]


class MilvusSearchType(Choice):
    """Which field(s) a hybrid retriever searches: dense, sparse (BM25) or both."""

    DENSE = "dense"
    SPARSE = "sparse"
    HYBRID = "hybrid"


class MilvusRanker(Choice):
    """Server-side ranker of a hybrid search: reciprocal rank fusion or weighted scores."""

    RRF = "rrf"
    WEIGHTED = "weighted"


def check_top_k(similarity_top_k: Any) -> None:
    """Raise :class:`ConfigurationError` unless ``similarity_top_k`` is a positive integer."""
    check_count("similarity_top_k", similarity_top_k)


def check_limits(similarity_top_k: Any, rrf_k: Any) -> None:
    """Raise :class:`ConfigurationError` for a ``similarity_top_k`` or ``rrf_k`` out of range."""
    check_top_k(similarity_top_k)
    check_rrf_k(rrf_k)


def check_pre_top_k(pre_top_k: int | None, similarity_top_k: int, reranker: Any | None) -> None:
    """Raise :class:`ConfigurationError` for a ``pre_top_k`` without a reranker or below
    ``similarity_top_k``."""
    if pre_top_k is None:
        return
    if reranker is None:
        raise ConfigurationError("pre_top_k only applies with a reranker= second stage.")
    if pre_top_k < similarity_top_k:
        raise ConfigurationError(
            f"pre_top_k ({pre_top_k}) must be >= similarity_top_k ({similarity_top_k})."
        )


def checked_weights(weights: Sequence[float] | None, ranker: MilvusRanker) -> list[float] | None:
    """``(dense, sparse)`` weights as floats (``[0.5, 0.5]`` for the weighted ranker when none are
    given; ``None`` for the rrf ranker).

    Raises:
        ConfigurationError: not two weights, weights outside [0, 1] or both 0, or weights given
            with the rrf ranker.
    """
    if weights is None:
        return [0.5, 0.5] if ranker is MilvusRanker.WEIGHTED else None
    values = [float(w) for w in weights]
    if len(values) != 2:
        raise ConfigurationError(
            f"weights needs one value per searched field, (dense, sparse): 2 values, got "
            f"{len(values)} ({values!r})."
        )
    if any(not 0.0 <= w <= 1.0 for w in values) or sum(values) == 0:
        raise ConfigurationError(f"weights must lie in [0, 1] and not both be 0, got {values!r}.")
    if ranker is MilvusRanker.RRF:
        raise ConfigurationError(
            "weights are used by the weighted ranker; pass ranker='weighted' with them "
            "(the rrf ranker takes rrf_k)."
        )
    return values
