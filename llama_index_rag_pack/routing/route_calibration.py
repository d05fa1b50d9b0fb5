"""Fitting a :class:`~llama_index_rag_pack.routing.semantic_selector.SemanticSelector`'s
per-route thresholds on labelled queries (what ``SemanticSelector.fit_thresholds`` runs).

The arithmetic is in :mod:`~llama_index_rag_pack.routing.threshold_calibration` and
:mod:`~llama_index_rag_pack.routing.route_scores`; this module scores the queries with the selector
and sets the thresholds it finds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from llama_index_rag_pack.routing import route_scores
from llama_index_rag_pack.routing.routes import ThresholdReport
from llama_index_rag_pack.routing.threshold_calibration import (
    ThresholdFitMethod,
    ThresholdObjective,
    fit_thresholds_robust,
)

logger = logging.getLogger(__name__)

__all__ = ["fit_selector_thresholds"]


def fit_selector_thresholds(
    selector: Any,
    labelled_queries: Iterable[route_scores.LabelledQuery],
    *,
    max_passes: int = 10,
    method: str | ThresholdFitMethod = ThresholdFitMethod.ROBUST,
    objective: str | ThresholdObjective = ThresholdObjective.BALANCED,
    shrinkage: float | None = None,
    n_folds: int = 5,
    random_state: int = 0,
) -> ThresholdReport:
    """Calibrate per-route thresholds on labelled queries.

    ``method="robust"`` (default) fits thresholds under ``objective`` in the middle of the
    widest plateau and pulls them toward the default (``threshold``, or a route's own) by a
    shrinkage chosen by ``n_folds``-fold cross-validation; when cross-validation says the fit
    does not beat the default, the default is kept (``report.fit.kept_default``); see
    :func:`~llama_index_rag_pack.routing.threshold_calibration.fit_thresholds_robust`.
    ``method="exact"`` maximises accuracy on the given queries (overfits small sets).

    Args:
        labelled_queries: ``(query, route)`` pairs or dicts with ``query`` and ``route``; the
            route is a name, a list of acceptable names (ambiguous queries) or ``None`` for a
            query that belongs to no route (out of scope — these teach the thresholds to say
            no).
        max_passes: Coordinate-ascent passes per fit.
        method: ``"robust"`` or ``"exact"``.
        objective: Robust only: ``"balanced"`` (mean of in-scope and out-of-scope accuracy)
            or ``"accuracy"``.
        shrinkage: Robust only: ``None`` chooses it by cross-validation; a number in
            ``[0, 1]`` (0 = full fit, 1 = keep the default) is used as given.
        n_folds: Robust only: cross-validation folds.
        random_state: Robust only: seed of the fold assignment.

    Returns:
        The thresholds now in force for routes without their own, the accuracy on the given
        queries before and after, and (robust) the shrinkage and cross-validated scores.

    Raises:
        ConfigurationError: no examples, a label that names no configured route, or an
            unknown method or objective.
    """
    method = ThresholdFitMethod.parse(method)
    names = [r.name for r in selector.configured_routes()]
    queries, labels = route_scores.parse_route_labels(labelled_queries, names)
    routes, matrix = selector.route_scores(queries)
    start = np.asarray([selector.threshold_for(r) for r in routes])
    own = {i: float(start[i]) for i, r in enumerate(routes) if r.threshold is not None}
    robust = None
    if method is ThresholdFitMethod.EXACT:
        fitted = route_scores.fit_thresholds_around(matrix, labels, own, max_passes=max_passes)
    else:
        robust = fit_thresholds_robust(
            matrix,
            labels,
            selector.threshold,
            objective=objective,
            shrinkage=shrinkage,
            n_folds=n_folds,
            random_state=random_state,
            fixed=own,
            max_passes=max_passes,
        )
        fitted = robust.thresholds
    before = route_scores.routing_accuracy(matrix, labels, start)
    after = route_scores.routing_accuracy(matrix, labels, fitted)
    selector.set_fitted({n: float(fitted[i]) for i, n in enumerate(names) if i not in own})
    how = f"{method.value}; {robust.reason}" if robust else method.value
    logger.info("Fitted routing thresholds (%s) on %d queries", how, len(queries))
    logger.info("Routing accuracy on them %.3f -> %.3f", before, after)
    return ThresholdReport(
        thresholds=selector.thresholds,
        accuracy_before=before,
        accuracy_after=after,
        n_examples=len(queries),
        method=method.value,
        fit=robust,
    )
