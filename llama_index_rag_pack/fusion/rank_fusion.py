"""Rank fusion: merge several ranked result lists into one.

Pure functions over lists of ``NodeWithScore``-like items (anything with ``.node.node_id`` and
``.score``, copied with ``model_copy``). Nothing here talks to an LLM, an index or Milvus.

Every function:

* takes ``result_lists`` — one ranked list per (query, retriever) search, best first;
* honours ``weights`` — one non-negative weight per list (upstream ignores them in RRF);
* de-duplicates by node id (a node repeated inside one list counts once, at its best rank);
* returns **new** items carrying the fused score, best first (ties keep first-seen order);
  the input lists and their items are never mutated;
* keeps only the best ``top_n`` when given.

Modes:

========================  ===============================================================
``reciprocal_rank``       ``sum_i w_i / (k + rank_i)`` with 1-based ranks (Cormack et al. 2009)
``relative_score``        min-max scale each list to [0, 1], weighted sum (weights sum to 1)
``dist_based_score``      scale each list by mean ± 3 std, clip to [0, 1], weighted sum
``union``                 one copy per node with its best weighted score
========================  ===============================================================
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError, check_count

__all__ = [
    "FusionMode",
    "DEFAULT_RRF_K",
    "distribution_based_fusion",
    "fuse",
    "reciprocal_rank_fusion",
    "relative_score_fusion",
    "union_fusion",
]

DEFAULT_RRF_K = 60.0

T = TypeVar("T")  # a NodeWithScore-like item


class FusionMode(Choice):
    """How :func:`fuse` merges result lists.

    ``reciprocal_rerank`` and ``simple`` (core ``QueryFusionRetriever`` names) are accepted by
    :meth:`parse` as aliases of ``reciprocal_rank`` and ``union``.
    """

    RECIPROCAL_RANK = "reciprocal_rank"
    RELATIVE_SCORE = "relative_score"
    DIST_BASED_SCORE = "dist_based_score"
    UNION = "union"

    @classmethod
    def _aliases(cls) -> dict[str, str]:
        # core's QueryFusionRetriever names
        return {"reciprocal_rerank": "reciprocal_rank", "rrf": "reciprocal_rank", "simple": "union"}


# --------------------------------------------------------------------------- validation helpers
def _check_weights(weights: Sequence[float] | None, n_lists: int) -> list[float]:
    if weights is None:
        return [1.0] * n_lists
    weights = list(weights)
    if len(weights) != n_lists:
        raise ConfigurationError(
            f"weights has {len(weights)} values but there are {n_lists} result lists: "
            "give one weight per result list (or per retriever), or weights=None."
        )
    for w in weights:
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w < 0:
            raise ConfigurationError(
                f"weights must be finite numbers >= 0, got {w!r} in {weights!r}."
            )
    if n_lists and sum(weights) <= 0:
        raise ConfigurationError(f"weights must not all be 0, got {weights!r}.")
    return [float(w) for w in weights]


def _check_top_n(top_n: int | None) -> None:
    check_count("top_n", top_n, none_ok=True)


def _node_id(item: Any) -> str:
    node = getattr(item, "node", None)
    node_id = getattr(node, "node_id", None)
    if node_id is None:
        raise ConfigurationError(
            f"Cannot fuse {type(item).__name__!r}: "
            "expected NodeWithScore items (with .node.node_id)."
        )
    return str(node_id)


def _score(item: Any) -> float | None:
    s = getattr(item, "score", None)
    if s is None:
        return None
    s = float(s)
    return s if math.isfinite(s) else None


def _dedupe(items: Sequence[T]) -> list[tuple[str, T]]:
    """(id, item) pairs, first (best-ranked) occurrence of each node id only."""
    seen: set[str] = set()
    out: list[tuple[str, T]] = []
    for item in items:
        nid = _node_id(item)
        if nid not in seen:
            seen.add(nid)
            out.append((nid, item))
    return out


def _finish(
    result_lists: Sequence[Sequence[T]],
    contributions: Callable[[int, list[tuple[str, T]]], dict[str, float]],
    combine: Callable[[float, float], float],
    top_n: int | None,
) -> list[T]:
    """Accumulate per-list contributions, sort (stable, first-seen on ties), copy with new
    scores."""
    fused: dict[str, float] = {}
    first: dict[str, T] = {}
    for li, items in enumerate(result_lists):
        deduped = _dedupe(items)
        for nid, value in contributions(li, deduped).items():
            fused[nid] = combine(fused[nid], value) if nid in fused else value
        for nid, item in deduped:
            first.setdefault(nid, item)
    order = {nid: i for i, nid in enumerate(first)}
    ranked = sorted(fused, key=lambda nid: (-fused[nid], order[nid]))
    if top_n is not None:
        ranked = ranked[:top_n]
    return [_with_score(first[nid], fused[nid]) for nid in ranked]


def _with_score(item: T, score: float) -> T:
    copy = getattr(item, "model_copy", None)
    if copy is not None:
        return copy(update={"score": score})
    return type(item)(node=item.node, score=score)  # type: ignore[attr-defined,call-arg]


# --------------------------------------------------------------------------- public functions
def reciprocal_rank_fusion(
    result_lists: Sequence[Sequence[T]],
    *,
    k: float = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    top_n: int | None = None,
) -> list[T]:
    """Weighted reciprocal rank fusion: ``score(d) = sum_i weights[i] / (k + rank_i(d))``.

    Ranks are 1-based positions in each list as given (the lists are *not* re-sorted by score,
    so a reranked list keeps its order). Scores of the inputs are ignored.

    Args:
        result_lists: Ranked lists of ``NodeWithScore``, best first.
        k: Smoothing constant (>= 0); 60 as in the original paper.
        weights: One weight >= 0 per list (default all 1).
        top_n: Keep only the best ``top_n`` fused results.

    Returns:
        New ``NodeWithScore`` items with the fused score, best first.

    Raises:
        ConfigurationError: ``k`` < 0, weights of the wrong length or negative, bad ``top_n``.

    Example:
        >>> from llama_index.core.schema import NodeWithScore, TextNode
        >>> a, b, c = (TextNode(id_=i, text=i) for i in "abc")
        >>> fused = reciprocal_rank_fusion([[NodeWithScore(node=a), NodeWithScore(node=b)],
        ...                                 [NodeWithScore(node=b), NodeWithScore(node=c)]], k=0)
        >>> [(n.node.node_id, round(n.score, 3)) for n in fused]
        [('b', 1.5), ('a', 1.0), ('c', 0.5)]
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 0:
        raise ConfigurationError(f"k must be a finite number >= 0 (60 is usual), got {k!r}.")
    w = _check_weights(weights, len(result_lists))
    _check_top_n(top_n)

    def contributions(li: int, deduped: list[tuple[str, Any]]) -> dict[str, float]:
        return {nid: w[li] / (k + rank) for rank, (nid, _) in enumerate(deduped, start=1)}

    return _finish(result_lists, contributions, float.__add__, top_n)


def _normalised_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    w = _check_weights(weights, n)
    total = sum(w)
    return [x / total for x in w] if total > 0 else w


def _scaled_sum(
    result_lists: Sequence[Sequence[T]],
    weights: Sequence[float] | None,
    top_n: int | None,
    scaler: Callable[[list[float]], Callable[[float], float]],
) -> list[T]:
    """Each list's scores scaled to [0, 1] by ``scaler(scores of the list)`` (an item without a
    score counts 0), then summed with the weights normalised to sum to 1."""
    w = _normalised_weights(weights, len(result_lists))
    _check_top_n(top_n)

    def contributions(li: int, deduped: list[tuple[str, Any]]) -> dict[str, float]:
        scores = [s for _, item in deduped if (s := _score(item)) is not None]
        if not scores:
            return {nid: 0.0 for nid, _ in deduped}
        scale = scaler(scores)
        out = {}
        for nid, item in deduped:
            s = _score(item)
            out[nid] = w[li] * (0.0 if s is None else scale(s))
        return out

    return _finish(result_lists, contributions, float.__add__, top_n)


def _min_max(scores: list[float]) -> Callable[[float], float]:
    lo, hi = min(scores), max(scores)
    if hi == lo:
        return lambda s: 1.0
    return lambda s: (s - lo) / (hi - lo)


def relative_score_fusion(
    result_lists: Sequence[Sequence[T]],
    *,
    weights: Sequence[float] | None = None,
    top_n: int | None = None,
) -> list[T]:
    """Relative score fusion: min-max scale each list's scores to [0, 1], then weighted sum.

    Weights are normalised to sum to 1, so fused scores lie in [0, 1]. A list whose scores are
    all equal scales them to 1.0; an item without a score counts as the list's minimum (0.0).
    Works with any score scale, including negative BM25 distances.

    Args:
        result_lists: Ranked lists of ``NodeWithScore``, best first.
        weights: One weight >= 0 per list (default equal).
        top_n: Keep only the best ``top_n`` fused results.

    Returns:
        New ``NodeWithScore`` items with the fused score, best first.

    Example:
        >>> from llama_index.core.schema import NodeWithScore, TextNode
        >>> a, b = TextNode(id_="a", text="a"), TextNode(id_="b", text="b")
        >>> fused = relative_score_fusion([[NodeWithScore(node=a, score=0.9),
        ...                                 NodeWithScore(node=b, score=0.5)]])
        >>> [(n.node.node_id, n.score) for n in fused]
        [('a', 1.0), ('b', 0.0)]
    """
    return _scaled_sum(result_lists, weights, top_n, _min_max)


def _mean_std(scores: list[float]) -> Callable[[float], float]:
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    lo, span = mean - 3 * std, 6 * std
    if span <= 0:
        return lambda s: 1.0
    return lambda s: min(1.0, max(0.0, (s - lo) / span))


def distribution_based_fusion(
    result_lists: Sequence[Sequence[T]],
    *,
    weights: Sequence[float] | None = None,
    top_n: int | None = None,
) -> list[T]:
    """Distribution-based score fusion: scale each list by ``mean ± 3·std``, then weighted sum.

    Each score ``s`` becomes ``(s - (mean - 3 std)) / (6 std)`` clipped to [0, 1] (a list with
    one distinct score scales it to 1.0), so one outlier does not squash the rest as in min-max
    scaling. Weights are normalised to sum to 1; items without a score count as 0. Arguments and
    result as for :func:`relative_score_fusion`.

    Example:
        >>> from llama_index.core.schema import NodeWithScore, TextNode
        >>> nodes = [NodeWithScore(node=TextNode(id_=str(i), text="t"), score=s)
        ...          for i, s in enumerate([0.9, 0.5, 0.1])]
        >>> [round(n.score, 3) for n in distribution_based_fusion([nodes])]
        [0.704, 0.5, 0.296]
    """
    return _scaled_sum(result_lists, weights, top_n, _mean_std)


def union_fusion(
    result_lists: Sequence[Sequence[T]],
    *,
    weights: Sequence[float] | None = None,
    top_n: int | None = None,
) -> list[T]:
    """Plain union: one copy per node id, scored by its best ``weight * score`` over the lists.

    Raw scores are compared as they are (only meaningful when every list uses one scale, e.g.
    several queries against one dense retriever). Items without a score count as 0.

    Args:
        result_lists: Ranked lists of ``NodeWithScore``, best first.
        weights: One weight >= 0 per list (default all 1).
        top_n: Keep only the best ``top_n`` results.

    Returns:
        New ``NodeWithScore`` items, best first.

    Example:
        >>> from llama_index.core.schema import NodeWithScore, TextNode
        >>> a = TextNode(id_="a", text="a")
        >>> fused = union_fusion(
        ...     [[NodeWithScore(node=a, score=0.4)], [NodeWithScore(node=a, score=0.7)]]
        ... )
        >>> [(n.node.node_id, n.score) for n in fused]
        [('a', 0.7)]
    """
    w = _check_weights(weights, len(result_lists))
    _check_top_n(top_n)

    def contributions(li: int, deduped: list[tuple[str, Any]]) -> dict[str, float]:
        return {nid: w[li] * (_score(item) or 0.0) for nid, item in deduped}

    return _finish(result_lists, contributions, max, top_n)


def fuse(
    result_lists: Sequence[Sequence[T]],
    mode: str | FusionMode = FusionMode.RECIPROCAL_RANK,
    *,
    k: float = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    top_n: int | None = None,
) -> list[T]:
    """Fuse ``result_lists`` with the function of ``mode`` (``k`` only matters for RRF).

    Raises:
        ConfigurationError: an unknown mode (the message lists the valid ones) or bad arguments.
    """
    mode = FusionMode.parse(mode)
    if mode is FusionMode.RECIPROCAL_RANK:
        return reciprocal_rank_fusion(result_lists, k=k, weights=weights, top_n=top_n)
    fn = {
        FusionMode.RELATIVE_SCORE: relative_score_fusion,
        FusionMode.DIST_BASED_SCORE: distribution_based_fusion,
        FusionMode.UNION: union_fusion,
    }[mode]
    return fn(result_lists, weights=weights, top_n=top_n)
