"""Semantic routing arithmetic: per-route scores from text similarities, the decision rule, and
threshold calibration. Pure numpy functions: nothing here knows about LlamaIndex, embedding
models or Milvus, so they are tested against brute-force reference computations and with
property tests (cosine scores come from :mod:`~llama_index_rag_pack.core.similarity`).

Vocabulary:

* an *utterance matrix* ``U`` (``m × d``) holds one embedding per route text (descriptions and
  example utterances), and ``route_ids`` (length ``m``) says which route each row belongs to;
* a *score vector* (length ``n_routes``) holds one similarity per route, aggregated over that
  route's rows by ``max`` or ``mean``;
* the *decision rule*: the routes whose score reaches their own threshold, best first, at most
  ``top_k``; none reaching its threshold means "no route".
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "Aggregation",
    "LabelledQuery",
    "ThresholdFit",
    "aggregate_route_scores",
    "decide",
    "fit_thresholds",
    "fit_thresholds_around",
    "parse_route_labels",
    "routing_accuracy",
]


class Aggregation(Choice):
    """How a route's several texts (description, utterances) combine into one score."""

    MAX = "max"
    MEAN = "mean"


_AGGREGATIONS = tuple(a.value for a in Aggregation)

LabelledQuery = tuple[str, str | Sequence[str] | None] | Mapping[str, Any]
"""A ``(query, route)`` pair or a ``{"query": ..., "route": ...}`` dict; the route is a name, a
list of acceptable names or ``None`` (the query belongs to no route)."""


def aggregate_route_scores(
    similarities: np.ndarray, route_ids: np.ndarray, n_routes: int, aggregation: str = "max"
) -> np.ndarray:
    """One score per route from per-row similarities.

    Args:
        similarities: Shape ``(m,)`` (one query) or ``(n, m)`` (``n`` queries).
        route_ids: Shape ``(m,)``, the route index ``0..n_routes-1`` of every row.
        n_routes: Number of routes; every route must own at least one row.
        aggregation: ``"max"`` (best matching text) or ``"mean"``.

    Returns:
        Shape ``(n_routes,)`` or ``(n, n_routes)``.
    """
    if aggregation not in _AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {_AGGREGATIONS}, got {aggregation!r}")
    sims = np.asarray(similarities, dtype=np.float32)
    single = sims.ndim == 1
    sims = np.atleast_2d(sims)
    route_ids = np.asarray(route_ids)
    out = np.empty((sims.shape[0], n_routes), dtype=np.float32)
    for r in range(n_routes):
        cols = sims[:, route_ids == r]
        if cols.shape[1] == 0:
            raise ValueError(f"route {r} has no texts to compare with")
        out[:, r] = cols.max(axis=1) if aggregation == "max" else cols.mean(axis=1)
    return out[0] if single else out


def decide(scores: np.ndarray, thresholds: np.ndarray, top_k: int = 1) -> list[int]:
    """Routes whose score reaches their threshold, best first (ties: lower index), at most
    ``top_k``."""
    scores = np.asarray(scores, dtype=np.float64)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    passing = np.flatnonzero(scores >= thresholds)
    order = sorted(passing.tolist(), key=lambda r: (-scores[r], r))
    return order[:top_k]


def _predictions(score_matrix: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Top-1 decision per row, ``-1`` for no route (vectorised :func:`decide` with ``top_k=1``)."""
    masked = np.where(score_matrix >= thresholds[None, :], score_matrix, -np.inf)
    best = masked.argmax(axis=1)
    best[np.isneginf(masked.max(axis=1))] = -1
    return best


def routing_accuracy(
    score_matrix: np.ndarray, labels: Sequence[frozenset[int]], thresholds: np.ndarray
) -> float:
    """Share of rows whose top-1 decision is acceptable.

    ``labels[i]`` is the set of acceptable routes of row ``i``; an empty set means "no route"
    (out of scope), which is correct only when no route reaches its threshold.
    """
    if len(labels) == 0:
        return 0.0
    preds = _predictions(
        np.asarray(score_matrix, dtype=np.float64), np.asarray(thresholds, dtype=np.float64)
    )
    correct = [
        (p == -1 and not lab) or (p in lab) for p, lab in zip(preds.tolist(), labels, strict=False)
    ]
    return float(np.mean(correct))


@dataclass(frozen=True)
class ThresholdFit:
    """Result of :func:`fit_thresholds`."""

    thresholds: np.ndarray
    accuracy: float
    initial_accuracy: float
    passes: int


def _candidates(values: np.ndarray) -> np.ndarray:
    """Thresholds that change a decision: below everything, midpoints, above everything."""
    u = np.unique(values)
    mids = (u[:-1] + u[1:]) / 2.0 if u.size > 1 else np.empty(0)
    return np.concatenate(([u[0] - 1e-3], mids, [u[-1] + 1e-3]))


def _best_of(accuracies: list[float], candidates: np.ndarray) -> tuple[float, float]:
    best = max(accuracies)
    tied = [c for a, c in zip(accuracies, candidates.tolist(), strict=True) if a >= best - 1e-12]
    # the middle of the optimal thresholds: the largest margin to both sides
    return tied[len(tied) // 2], best


def fit_thresholds(
    score_matrix: np.ndarray,
    labels: Sequence[frozenset[int]],
    *,
    initial: np.ndarray | None = None,
    max_passes: int = 10,
) -> ThresholdFit:
    """Per-route thresholds maximising top-1 routing accuracy on labelled examples.

    First the best single threshold shared by all routes (exhaustive over the midpoints of the
    observed scores), then coordinate ascent: each route's threshold in turn is set to the best of
    its candidates while the others stay fixed, until a pass changes nothing. Among equally good
    thresholds the middle one is taken, which keeps the widest margin on both sides. On a few
    dozen examples this overfits; ``threshold_calibration.fit_thresholds_robust`` cross-validates
    how far to move from a default threshold.

    Args:
        score_matrix: ``(n_examples, n_routes)`` route scores.
        labels: Acceptable route indices per example; empty = out of scope.
        initial: Thresholds to start from instead of the shared-threshold search.
        max_passes: Upper bound on coordinate-ascent passes.

    Returns:
        The fitted thresholds and the accuracy before (``initial`` or the shared threshold) and
        after.
    """
    s = np.asarray(score_matrix, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != len(labels) or s.shape[0] == 0:
        raise ValueError(
            f"need a non-empty (n_examples, n_routes) matrix matching {len(labels)} labels"
        )
    n_routes = s.shape[1]
    if initial is None:
        shared = _candidates(s.ravel())
        accs = [routing_accuracy(s, labels, np.full(n_routes, t)) for t in shared.tolist()]
        t0, _ = _best_of(accs, shared)
        thresholds = np.full(n_routes, t0)
    else:
        thresholds = np.asarray(initial, dtype=np.float64).copy()
    initial_accuracy = routing_accuracy(s, labels, thresholds)
    accuracy = initial_accuracy
    passes = 0
    for pass_no in range(1, max_passes + 1):
        passes = pass_no
        changed = False
        for r in range(n_routes):
            cands = _candidates(s[:, r])
            accs = []
            for c in cands.tolist():
                trial = thresholds.copy()
                trial[r] = c
                accs.append(routing_accuracy(s, labels, trial))
            value, best = _best_of(accs, cands)
            if best > accuracy + 1e-12:
                thresholds[r], accuracy, changed = value, best, True
        if not changed:
            break
    return ThresholdFit(
        thresholds=thresholds, accuracy=accuracy, initial_accuracy=initial_accuracy, passes=passes
    )


def fit_thresholds_around(
    score_matrix: np.ndarray,
    labels: Sequence[frozenset[int]],
    fixed: Mapping[int, float],
    *,
    max_passes: int = 10,
) -> np.ndarray:
    """:func:`fit_thresholds` for the routes not in ``fixed``; those keep their given threshold.

    The free routes are fitted from scratch, the fixed thresholds are put in, and when there are
    any the free ones are refitted around them (coordinate ascent from that start).

    Args:
        score_matrix: ``(n_examples, n_routes)`` route scores.
        labels: Acceptable route indices per example; empty = out of scope.
        fixed: ``{route index: threshold}`` of routes whose threshold must not change.
        max_passes: Upper bound on coordinate-ascent passes.

    Returns:
        One threshold per route.

    Example:
        >>> scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.1, 0.2]])
        >>> labels = [frozenset({0}), frozenset({1}), frozenset()]
        >>> fit_thresholds_around(scores, labels, {1: 0.5}).round(2).tolist()
        [0.5, 0.5]
    """
    fitted = fit_thresholds(score_matrix, labels, max_passes=max_passes).thresholds.copy()
    if not fixed:
        return fitted
    for i, threshold in fixed.items():
        fitted[i] = threshold
    fitted = fit_thresholds(
        score_matrix, labels, initial=fitted, max_passes=max_passes
    ).thresholds.copy()
    for i, threshold in fixed.items():
        fitted[i] = threshold
    return fitted


def parse_route_labels(
    labelled_queries: Iterable[LabelledQuery], names: Sequence[str]
) -> tuple[list[str], list[frozenset[int]]]:
    """Query texts and, per query, the set of acceptable route indices (empty: no route).

    Example:
        >>> parse_route_labels([("What is 2+2?", "math"), {"query": "Hi", "route": None}],
        ...                    ["physics", "math"])
        (['What is 2+2?', 'Hi'], [frozenset({1}), frozenset()])

    Raises:
        ConfigurationError: no examples, a query without text, or a label naming no route.
    """
    queries, labels = [], []
    for item in labelled_queries:
        if isinstance(item, Mapping):
            query, label = item.get("query"), item.get("route", item.get("routes"))
        else:
            query, label = item
        if not isinstance(query, str) or not query.strip():
            raise ConfigurationError(f"Every labelled query needs query text, got {query!r}.")
        acceptable = [] if label is None else [label] if isinstance(label, str) else list(label)
        unknown = [a for a in acceptable if a not in names]
        if unknown:
            raise ConfigurationError(
                f"Label(s) {unknown} for {query!r} name no route; routes: {list(names)}."
            )
        queries.append(query)
        labels.append(frozenset(list(names).index(a) for a in acceptable))
    if not queries:
        raise ConfigurationError("fit_thresholds needs at least one labelled query.")
    return queries, labels
