"""Two-list fusion of a dense and a BM25 candidate list, with deterministic ties.

Hybrid search fuses one dense and one BM25 list. :func:`convex_fusion` is the convex combination
``alpha * norm(dense) + (1 - alpha) * norm(bm25)`` with min-max scaling
(:func:`~llama_index_rag_pack.fusion.rank_fusion.relative_score_fusion`) or mean ± 3σ scaling
(:func:`~llama_index_rag_pack.fusion.rank_fusion.distribution_based_fusion`);
:func:`two_list_rrf` is reciprocal rank fusion of the same two lists. Both put ties in one order
whatever order the candidates arrived in: higher score first, then node id. Items are
``NodeWithScore``-like (``.node.node_id`` and ``.score``); :class:`ScoredId` is the minimal one.

Example:
    >>> dense = [ScoredId.of("a", 0.9), ScoredId.of("b", 0.5), ScoredId.of("c", 0.1)]
    >>> bm25 = [ScoredId.of("c", 12.0), ScoredId.of("b", 6.0)]
    >>> [(n.node.node_id, round(n.score, 2)) for n in convex_fusion(dense, bm25, alpha=0.5)]
    [('a', 0.5), ('c', 0.5), ('b', 0.25)]
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.fusion.rank_fusion import (
    DEFAULT_RRF_K,
    distribution_based_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_CANDIDATE_POOL",
    "DEFAULT_SENTENCE_WEIGHT",
    "TUNED_ALPHA",
    "TUNED_SENTENCE_WEIGHT",
    "TUNED_UNREAD_ALPHA",
    "TUNED_UNREAD_SENTENCE_WEIGHT",
    "NodeRef",
    "ScoreNormalization",
    "ScoredId",
    "check_alpha",
    "check_candidate_pool",
    "check_convex_settings",
    "check_rrf_k",
    "check_sentence_weight",
    "convex_fusion",
    "ranked",
    "two_list_rrf",
]

#: Weight of the dense side before any fitting: both sides count the same.
DEFAULT_ALPHA = 0.5
#: Candidates each side of a hybrid search fetches, whatever the final top k.
DEFAULT_CANDIDATE_POOL = 50
#: Weight of the sentence list (chunks scored by their best-matching sentence) before fitting.
DEFAULT_SENTENCE_WEIGHT = 0.0
#: The dense weight and sentence weight ``hybrid_convex`` ships with: fitted by
#: ``rag-pack eval --fit`` on the dev split of ``wiki_qa_para`` (evidence MRR@10, min-max), and
#: checked on its test split (benchmarks/results/retrieval_quality.md).
TUNED_ALPHA = 0.65
TUNED_SENTENCE_WEIGHT = 0.4
#: The dense and sentence weights for questions the embedding model cannot read (a Chinese
#: question, or a question over Chinese chunks, with the bundled English model): fitted the
#: same way on the dev split of ``zh_qa`` (benchmarks/results/multilingual.md). The dense side
#: then adds little beside BM25 in the question's own language.
TUNED_UNREAD_ALPHA = 0.05
TUNED_UNREAD_SENTENCE_WEIGHT = 0.2

T = TypeVar("T")  # a NodeWithScore-like item


class ScoreNormalization(Choice):
    """How :func:`convex_fusion` scales each list's scores to [0, 1] before mixing them."""

    MIN_MAX = "min_max"
    DIST_BASED = "dist_based"


@dataclass(frozen=True)
class NodeRef:
    """A node known by its id only."""

    node_id: str


@dataclass(frozen=True)
class ScoredId:
    """The smallest ``NodeWithScore``-like item: a node id and a score."""

    node: NodeRef
    score: float | None

    @classmethod
    def of(cls, node_id: str, score: float | None) -> ScoredId:
        """``ScoredId(NodeRef(node_id), score)``."""
        return cls(NodeRef(str(node_id)), score)


def _in_unit_interval(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and 0.0 <= value <= 1.0
    )


def check_alpha(alpha: Any, name: str = "alpha") -> float:
    """``alpha`` as a float, or :class:`ConfigurationError` unless it is a number in [0, 1]."""
    if not _in_unit_interval(alpha):
        raise ConfigurationError(
            f"{name} (the dense weight) must be a number in [0, 1], got {alpha!r}."
        )
    return float(alpha)


def check_sentence_weight(weight: Any, name: str = "sentence_weight") -> float:
    """``weight`` as a float, or :class:`ConfigurationError` unless it is a number in [0, 1]."""
    if not _in_unit_interval(weight):
        raise ConfigurationError(
            f"{name} must be a number in [0, 1] (0 turns sentence scores off), got {weight!r}."
        )
    return float(weight)


def check_candidate_pool(candidate_pool: Any) -> int:
    """``candidate_pool``, or :class:`ConfigurationError` unless it is a positive integer."""
    if (
        isinstance(candidate_pool, bool)
        or not isinstance(candidate_pool, int)
        or candidate_pool <= 0
    ):
        raise ConfigurationError(
            f"candidate_pool must be a positive integer (50 is usual), got {candidate_pool!r}."
        )
    return candidate_pool


def check_rrf_k(rrf_k: Any) -> float:
    """``rrf_k`` as a float, or :class:`ConfigurationError` unless it is a finite number >= 0."""
    if (
        isinstance(rrf_k, bool)
        or not isinstance(rrf_k, (int, float))
        or not math.isfinite(rrf_k)
        or rrf_k < 0
    ):
        raise ConfigurationError(f"rrf_k must be a number >= 0 (60 is usual), got {rrf_k!r}.")
    return float(rrf_k)


def check_convex_settings(
    alpha: Any, normalization: Any, candidate_pool: Any, sentence_weight: Any
) -> tuple[float, ScoreNormalization, int, float]:
    """The settings of a convex hybrid search (dense weight, score normalization, candidates per
    side, sentence weight), checked in that order.

    Raises:
        ConfigurationError: the first value out of range (the message names it).

    Example:
        >>> check_convex_settings(0.5, "dist_based", 50, 0)
        (0.5, <ScoreNormalization.DIST_BASED: 'dist_based'>, 50, 0.0)
    """
    return (
        check_alpha(alpha),
        ScoreNormalization.parse(normalization),
        check_candidate_pool(candidate_pool),
        check_sentence_weight(sentence_weight),
    )


def _check_top_n(top_n: Any) -> None:
    check_count("top_n", top_n, none_ok=True)


def _order_key(item: Any) -> tuple[float, str]:
    score = getattr(item, "score", None)
    value = float(score) if score is not None and math.isfinite(float(score)) else -math.inf
    return (-value, str(item.node.node_id))


def ranked(items: Sequence[T]) -> list[T]:
    """``items`` best first: higher score first, equal scores by node id (no score counts last)."""
    return sorted(items, key=_order_key)


def convex_fusion(
    dense: Sequence[T],
    sparse: Sequence[T],
    *,
    alpha: float = DEFAULT_ALPHA,
    normalization: str | ScoreNormalization = ScoreNormalization.MIN_MAX,
    top_n: int | None = None,
    sentences: Sequence[T] = (),
    sentence_weight: float = DEFAULT_SENTENCE_WEIGHT,
) -> list[T]:
    """``alpha * norm(dense) + (1 - alpha) * norm(sparse)``, best first.

    With ``sentences`` (chunks scored by their best-matching sentence) and ``sentence_weight``
    ``g`` > 0 the score is ``(1 - g) * (alpha * norm(dense) + (1 - alpha) * norm(sparse)) +
    g * norm(sentences)``; ``g = 0`` gives exactly the two-list fusion.

    A node found by one side only gets 0 from the other. The result does not depend on the order
    the candidates come in: every list is ranked by score then node id first, and fused ties
    are broken by node id.

    Args:
        dense: The dense candidates (any order).
        sparse: The BM25 candidates (any order).
        alpha: Weight of the dense side in [0, 1] (1 = dense only, 0 = BM25 only).
        normalization: ``min_max`` or ``dist_based`` (mean ± 3σ, clipped to [0, 1]).
        top_n: Keep only the best ``top_n``.
        sentences: Chunks scored by their best sentence (any order).
        sentence_weight: Weight of ``sentences`` in [0, 1].

    Returns:
        New items carrying the fused score in [0, 1].

    Raises:
        ConfigurationError: ``alpha`` or ``sentence_weight`` outside [0, 1], an unknown
            normalization, a bad ``top_n``.
    """
    alpha = check_alpha(alpha)
    gamma = check_sentence_weight(sentence_weight)
    fuse = {
        ScoreNormalization.MIN_MAX: relative_score_fusion,
        ScoreNormalization.DIST_BASED: distribution_based_fusion,
    }[ScoreNormalization.parse(normalization)]
    _check_top_n(top_n)
    lists, weights = [ranked(dense), ranked(sparse)], [alpha, 1.0 - alpha]
    if gamma > 0.0 and sentences:
        lists.append(ranked(sentences))
        weights = [(1.0 - gamma) * alpha, (1.0 - gamma) * (1.0 - alpha), gamma]
    fused = fuse(lists, weights=weights)
    return ranked(fused)[:top_n]


def two_list_rrf(
    dense: Sequence[T],
    sparse: Sequence[T],
    *,
    k: float = DEFAULT_RRF_K,
    top_n: int | None = None,
) -> list[T]:
    """Reciprocal rank fusion of the two lists ranked by score (ties by node id), best first.

    Raises:
        ConfigurationError: ``k`` < 0 or a bad ``top_n``.
    """
    _check_top_n(top_n)
    fused = reciprocal_rank_fusion([ranked(dense), ranked(sparse)], k=k)
    return ranked(fused)[:top_n]
