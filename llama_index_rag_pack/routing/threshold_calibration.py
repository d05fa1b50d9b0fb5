"""Robust calibration of per-route routing thresholds: a fit that generalises past its examples.

:func:`~llama_index_rag_pack.routing.route_scores.fit_thresholds` maximises accuracy on the labelled
examples it is given. On a few dozen examples that overfits: a threshold moves to win one more
calibration question and loses several unseen ones, often the out-of-scope ones (there are few
of them, so sacrificing them costs little calibration accuracy). :func:`fit_thresholds_robust`
guards against that in three ways:

* **objective** — ``"balanced"`` (default) scores thresholds by the mean of the in-scope and the
  out-of-scope accuracy, so a handful of out-of-scope examples weigh as much as all the in-scope
  ones; ``"accuracy"`` is plain accuracy;
* **margin** — among equally good thresholds it takes the middle of the widest plateau of the
  objective, as far as possible from the examples on either side;
* **shrinkage chosen by cross-validation** — the fitted thresholds are pulled toward the default
  ones, ``default + (1 - shrinkage) * (fitted - default)``; k-fold cross-validation (stratified
  by in-scope / out-of-scope, repeated) picks the shrinkage whose out-of-fold objective is best.
  When no shrinkage below 1 beats the default's cross-validated objective, the default is kept
  (``kept_default``), and the result is never worse than the default on the examples it was
  fitted on.

Pure numpy, deterministic for a given ``random_state``.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "DEFAULT_SHRINKAGE_GRID",
    "RobustThresholdFit",
    "ThresholdFitMethod",
    "ThresholdObjective",
    "fit_thresholds_robust",
    "objective_score",
]

_EPS = 1e-12
_PAD = 1e-3  # how far past the lowest / highest observed score the outermost plateaus reach

DEFAULT_SHRINKAGE_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Shrinkages cross-validation chooses from: 0 = the full fit, 1 = the default thresholds."""


class ThresholdObjective(Choice):
    """What a threshold fit maximises."""

    BALANCED = "balanced"
    ACCURACY = "accuracy"


class ThresholdFitMethod(Choice):
    """``robust``: :func:`fit_thresholds_robust`; ``exact``: maximise calibration accuracy."""

    ROBUST = "robust"
    EXACT = "exact"


@dataclass(frozen=True)
class RobustThresholdFit:
    """Result of :func:`fit_thresholds_robust`.

    Attributes:
        thresholds: One threshold per route (the default ones when ``kept_default``).
        default: The default thresholds the fit was shrunk toward.
        shrinkage: The shrinkage used (1.0 when the default was kept).
        objective: The objective maximised.
        score_default: Objective of the default thresholds on all the examples.
        score_fitted: Objective of ``thresholds`` on all the examples (``>= score_default``).
        cv_scores: Cross-validated (out-of-fold) objective per shrinkage; empty when there were
            too few examples to cross-validate.
        kept_default: Whether the default thresholds were kept.
        reason: One line saying why these thresholds were chosen.
    """

    thresholds: np.ndarray
    default: np.ndarray
    shrinkage: float
    objective: ThresholdObjective
    score_default: float
    score_fitted: float
    cv_scores: dict[float, float]
    kept_default: bool
    reason: str


def _weights(oos: np.ndarray, objective: ThresholdObjective) -> np.ndarray:
    """Example weights summing to 1; balanced: half on the in-scope, half on the out-of-scope."""
    n, n_oos = oos.size, int(oos.sum())
    if objective is ThresholdObjective.ACCURACY or n_oos in (0, n):
        return np.full(n, 1.0 / n)
    return np.where(oos, 0.5 / n_oos, 0.5 / (n - n_oos))


class _Problem:
    """Scores, labels as a boolean matrix and example weights; evaluates thresholds fast.

    ``ok[i, r]``: route ``r`` is acceptable for example ``i``; column ``n_routes`` is "no route".
    """

    def __init__(self, s: np.ndarray, ok: np.ndarray, objective: ThresholdObjective) -> None:
        self.s, self.ok, self.objective = s, ok, objective
        self.n_routes = s.shape[1]
        self.oos = ok[:, -1]
        self.w = _weights(self.oos, objective)
        self.rows = np.arange(s.shape[0])

    def subset(self, idx: np.ndarray) -> _Problem:
        return _Problem(self.s[idx], self.ok[idx], self.objective)

    def correct(self, thresholds: np.ndarray) -> np.ndarray:
        """Whether each example's top-1 decision is acceptable (as ``route_scores.decide``)."""
        masked = np.where(self.s >= thresholds[None, :], self.s, -np.inf)
        best = masked.argmax(axis=1)
        best[np.isneginf(masked[self.rows, best])] = self.n_routes
        return self.ok[self.rows, best]

    def score(self, thresholds: np.ndarray) -> float:
        return float(self.w @ self.correct(thresholds))

    def route_curve(self, thresholds: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
        """The objective as route ``r``'s threshold moves, the others fixed.

        Returns ``edges`` (``K + 1``) and ``values`` (``K``): every threshold in
        ``(edges[k], edges[k + 1]]`` gives objective ``values[k]``.
        """
        masked = np.where(self.s >= thresholds[None, :], self.s, -np.inf)
        masked[:, r] = -np.inf
        other = masked.argmax(axis=1)
        other_score = masked[self.rows, other]
        other[np.isneginf(other_score)] = self.n_routes
        sr = self.s[:, r]
        # when route r passes, it wins over the best other route (argmax: lower index on ties)
        wins = (sr > other_score) | ((sr == other_score) & (r < other))
        u = np.unique(sr)
        passes = sr[None, :] >= np.append(u, np.inf)[:, None]
        correct = np.where(
            passes & wins[None, :], self.ok[:, r][None, :], self.ok[self.rows, other][None, :]
        )
        return np.concatenate(([u[0] - _PAD], u, [u[-1] + _PAD])), correct @ self.w

    def shared_curve(self, start: np.ndarray, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`route_curve` for one threshold shared by every free route."""
        u = np.unique(self.s[:, free])
        values = np.array(
            [self.score(np.where(free, c, start)) for c in np.append(u, u[-1] + _PAD).tolist()]
        )
        return np.concatenate(([u[0] - _PAD], u, [u[-1] + _PAD])), values


def _widest_plateau(edges: np.ndarray, values: np.ndarray, current: float) -> tuple[float, float]:
    """Middle of the widest run of optimal intervals (ties: the one nearest ``current``)."""
    best = float(values.max())
    idx = np.flatnonzero(values >= best - _EPS)
    runs = np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1)
    lows = np.array([edges[run[0]] for run in runs])
    highs = np.array([edges[run[-1] + 1] for run in runs])
    mids = (lows + highs) / 2.0
    pick = min(range(len(runs)), key=lambda i: (-(highs[i] - lows[i]), abs(mids[i] - current)))
    # every threshold in (low, high] is optimal; guard the midpoint against rounding onto low
    mid = mids[pick] if mids[pick] > lows[pick] else highs[pick]
    return float(mid), best


def _ascend(p: _Problem, start: np.ndarray, free: np.ndarray, max_passes: int) -> np.ndarray:
    """Coordinate ascent: each free route in turn to the middle of its widest optimal plateau."""
    t = start.copy()
    current = p.score(t)
    for _ in range(max_passes):
        improved = False
        for r in np.flatnonzero(free).tolist():
            mid, best = _widest_plateau(*p.route_curve(t, r), current=float(t[r]))
            if best >= current - _EPS:
                t[r] = mid
                improved |= best > current + _EPS
                current = p.score(t)
        if not improved:
            break
    return t


def _fit(p: _Problem, default: np.ndarray, free: np.ndarray, max_passes: int) -> np.ndarray:
    """Best shared threshold when it beats the default, then per-route coordinate ascent."""
    start = default.copy()
    if free.any():
        mid, best = _widest_plateau(
            *p.shared_curve(default, free), current=float(np.median(default[free]))
        )
        if best > p.score(default) + _EPS:
            start = np.where(free, mid, default)
    return _ascend(p, start, free, max_passes)


def _folds(oos: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``k`` folds stratified by in-scope / out-of-scope (dealt round-robin after shuffling)."""
    order = np.concatenate(
        [rng.permutation(np.flatnonzero(~oos)), rng.permutation(np.flatnonzero(oos))]
    )
    return [np.sort(order[i::k]) for i in range(k)]


def _cv_scores(
    p: _Problem,
    default: np.ndarray,
    free: np.ndarray,
    grid: Sequence[float],
    *,
    n_folds: int,
    n_repeats: int,
    random_state: int,
    max_passes: int,
) -> np.ndarray:
    """Out-of-fold objective per shrinkage, pooled over the folds, averaged over repeats."""
    n = p.s.shape[0]
    rng = np.random.default_rng(random_state)
    totals = np.zeros(len(grid))
    for _ in range(n_repeats):
        correct = np.zeros((len(grid), n), dtype=bool)
        for held in _folds(p.oos, min(n_folds, n), rng):
            fitted = _fit(p.subset(np.setdiff1d(p.rows, held)), default, free, max_passes)
            held_p = p.subset(held)
            for g, shrink in enumerate(grid):
                correct[g, held] = held_p.correct(default + (1.0 - shrink) * (fitted - default))
        totals += correct @ p.w
    return totals / n_repeats


def _problem(
    score_matrix: np.ndarray, labels: Sequence[frozenset[int]], objective: ThresholdObjective
) -> _Problem:
    s = np.asarray(score_matrix, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != len(labels) or s.shape[0] == 0 or s.shape[1] == 0:
        raise ValueError(
            f"need a non-empty (n_examples, n_routes) matrix matching {len(labels)} labels"
        )
    if not np.isfinite(s).all():
        raise ValueError("route scores must be finite")
    if any(not 0 <= r < s.shape[1] for label in labels for r in label):
        raise ValueError(f"labels must name route indices 0..{s.shape[1] - 1}")
    ok = np.zeros((s.shape[0], s.shape[1] + 1), dtype=bool)
    for i, label in enumerate(labels):
        ok[i, sorted(label) if label else [s.shape[1]]] = True
    return _Problem(s, ok, objective)


def objective_score(
    score_matrix: np.ndarray,
    labels: Sequence[frozenset[int]],
    thresholds: np.ndarray,
    objective: str | ThresholdObjective = ThresholdObjective.BALANCED,
) -> float:
    """The objective of ``thresholds`` on labelled examples.

    ``"accuracy"``: share of top-1 decisions that are acceptable (as
    :func:`~llama_index_rag_pack.routing.route_scores.routing_accuracy`). ``"balanced"``: the
    mean of that share over the in-scope examples and over the out-of-scope ones (plain accuracy
    when only one kind is present).

    Example:
        >>> s = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.2]])
        >>> labels = [frozenset({0}), frozenset({1}), frozenset()]
        >>> objective_score(s, labels, np.array([0.25, 0.25]))  # the out-of-scope one is routed
        0.5
    """
    p = _problem(score_matrix, labels, ThresholdObjective.parse(objective))
    return p.score(_vector(thresholds, p.n_routes, "thresholds"))


def _vector(values: float | np.ndarray, n: int, name: str) -> np.ndarray:
    out = np.broadcast_to(np.asarray(values, dtype=np.float64), (n,)).copy()
    if not np.isfinite(out).all():
        raise ValueError(f"{name} must be finite, got {values!r}")
    return out


def _grid(shrinkage: float | None) -> list[float]:
    if shrinkage is None:
        return list(DEFAULT_SHRINKAGE_GRID)
    if not 0.0 <= float(shrinkage) <= 1.0:
        raise ConfigurationError(
            f"shrinkage must be in [0, 1] (0 = full fit, 1 = keep the default), got {shrinkage!r}."
        )
    return sorted({float(shrinkage), 1.0})


def fit_thresholds_robust(
    score_matrix: np.ndarray,
    labels: Sequence[frozenset[int]],
    default: float | np.ndarray,
    *,
    objective: str | ThresholdObjective = ThresholdObjective.BALANCED,
    shrinkage: float | None = None,
    n_folds: int = 5,
    n_repeats: int = 3,
    random_state: int = 0,
    fixed: Mapping[int, float] | None = None,
    max_passes: int = 10,
) -> RobustThresholdFit:
    """Per-route thresholds fitted on labelled examples, shrunk toward ``default`` by as much as
    cross-validation says generalises (see the module docstring).

    Args:
        score_matrix: ``(n_examples, n_routes)`` route scores.
        labels: Acceptable route indices per example; empty = out of scope.
        default: Default threshold (one for all routes, or one per route).
        objective: ``"balanced"`` (mean of in-scope and out-of-scope accuracy) or
            ``"accuracy"``.
        shrinkage: ``None``: chosen by cross-validation from :data:`DEFAULT_SHRINKAGE_GRID`; a
            number in ``[0, 1]``: used as given (0 = the full fit, 1 = the default), still kept
            only when cross-validation says it beats the default.
        n_folds: Cross-validation folds (at most one per example).
        n_repeats: Cross-validation repeats with fresh fold assignments.
        random_state: Seed of the fold assignment.
        fixed: ``{route index: threshold}`` of routes whose threshold must not change.
        max_passes: Upper bound on coordinate-ascent passes per fit.

    Returns:
        A :class:`RobustThresholdFit`: the thresholds, the shrinkage, the cross-validated
        objective per shrinkage and whether the default was kept.

    Example:
        >>> s = np.array([[0.62, 0.10], [0.58, 0.20], [0.15, 0.55], [0.20, 0.61],
        ...               [0.35, 0.30], [0.30, 0.33], [0.60, 0.15], [0.18, 0.57]])
        >>> labels = [frozenset({0}), frozenset({0}), frozenset({1}), frozenset({1}),
        ...           frozenset(), frozenset(), frozenset({0}), frozenset({1})]
        >>> fit = fit_thresholds_robust(s, labels, 0.0, n_folds=2)
        >>> fit.kept_default, fit.shrinkage, fit.score_fitted, fit.thresholds.round(3).tolist()
        (False, 0.0, 1.0, [0.465, 0.44])
    """
    p = _problem(score_matrix, labels, ThresholdObjective.parse(objective))
    grid = _grid(shrinkage)
    if n_folds < 2 or n_repeats < 1:
        raise ConfigurationError(
            f"need n_folds >= 2 and n_repeats >= 1, got n_folds={n_folds}, n_repeats={n_repeats}."
        )
    base = _vector(default, p.n_routes, "default")
    free = np.ones(p.n_routes, dtype=bool)
    for i, threshold in (fixed or {}).items():
        base[i], free[i] = float(threshold), False
    before = p.score(base)

    def keep(reason: str, cv: dict[float, float]) -> RobustThresholdFit:
        return RobustThresholdFit(
            base, base.copy(), 1.0, p.objective, before, before, cv, True, reason
        )

    if p.s.shape[0] < 2 or not free.any():
        return keep("nothing to cross-validate: kept the default thresholds", {})
    cv_values = _cv_scores(
        p,
        base,
        free,
        grid,
        n_folds=n_folds,
        n_repeats=n_repeats,
        random_state=random_state,
        max_passes=max_passes,
    )
    cv = dict(zip(grid, cv_values.tolist(), strict=True))
    # the best cross-validated shrinkage; among near-ties the largest (closest to the default)
    g = int(np.flatnonzero(cv_values >= cv_values.max() - _EPS)[-1])
    name = p.objective.value
    if grid[g] == 1.0 or cv_values[g] <= cv[1.0] + _EPS:
        return keep(
            f"cross-validated {name} of the default ({cv[1.0]:.3f}) not beaten: kept it", cv
        )
    thresholds = base + (1.0 - grid[g]) * (_fit(p, base, free, max_passes) - base)
    after = p.score(thresholds)
    if after < before - _EPS:
        return keep(f"fit scores {after:.3f} < default {before:.3f} on the examples: kept it", cv)
    reason = (
        f"shrinkage {grid[g]:g}: cross-validated {name} {cv_values[g]:.3f} vs default {cv[1.0]:.3f}"
    )
    return RobustThresholdFit(
        thresholds, base.copy(), grid[g], p.objective, before, after, cv, False, reason
    )
