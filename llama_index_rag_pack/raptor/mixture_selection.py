"""Choosing the number of Gaussian mixture components by BIC, with few fits.

Pure numpy / scikit-learn: nothing here knows about LlamaIndex or Milvus. RAPTOR's clustering
(:mod:`llama_index_rag_pack.raptor.clustering`) fits a mixture per level with the ``k`` chosen here.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llama_index_rag_pack.raptor.dimension_reduction import count_unique_rows

__all__ = ["BICSearchResult", "choose_n_clusters", "exhaustive_n_clusters", "one_blas_thread"]

#: Brackets at most this wide are fitted in full (narrower ones by golden-section search first).
_FULL_BRACKET = 8
_GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass
class BICSearchResult:
    """Outcome of a search for the number of mixture components.

    Attributes:
        k: The chosen number of components.
        bic: BIC of the chosen mixture.
        model: The fitted ``GaussianMixture`` for ``k`` (reused, not fitted again).
        bics: Every ``k`` that was fitted, with its BIC.
    """

    k: int
    bic: float
    model: Any
    bics: dict[int, float] = field(default_factory=dict)

    @property
    def n_fits(self) -> int:
        return len(self.bics)


def one_blas_thread() -> Any:
    """Single-threaded BLAS for the many tiny (k x 10) linear-algebra calls of a mixture fit.

    Multi-threaded OpenBLAS spends far longer synchronising its threads than computing on such
    small matrices, and much longer still on a busy machine (measured 40x slower on 2 shared cores).
    """
    return _threadpool_controller().limit(limits=1, user_api="blas")


@functools.cache
def _threadpool_controller() -> Any:
    # Scanning the loaded libraries is the slow part of threadpool_limits (~12 ms a call, 2 s of
    # a 10k-row clustering): do it once. Libraries loaded later are not seen, but BLAS is loaded
    # with numpy, long before the first fit.
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _fit_gmm(x: np.ndarray, k: int, random_state: int | None) -> Any:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(n_components=k, random_state=random_state)
    with warnings.catch_warnings(), one_blas_thread():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.fit(x)
    return gm


def _geometric_grid(k_max: int, ratio: float) -> list[int]:
    grid = [1]
    value = 1.0
    while grid[-1] < k_max:
        value *= ratio
        nxt = min(k_max, max(grid[-1] + 1, int(round(value))))
        grid.append(nxt)
    return grid


def _max_components(x: np.ndarray, max_clusters: int) -> int:
    # Like the reference (range(1, min(max_clusters, n))), never more components than distinct
    # points.
    return max(1, min(max_clusters - 1, len(x) - 1, count_unique_rows(x)))


def choose_n_clusters(
    x: np.ndarray,
    *,
    max_clusters: int = 50,
    random_state: int | None = None,
    patience: int = 2,
    grid_ratio: float = 1.5,
) -> BICSearchResult:
    """Choose the number of Gaussian mixture components by BIC, with few fits.

    Candidates are ``1 .. max_clusters - 1`` (as in the reference code). A geometric grid
    (1, 2, 3, 4, 6, 9, 13, ...) is fitted in increasing order until BIC has been worse than the
    best seen for ``patience`` grid points in a row; then every ``k`` between the best grid point's
    neighbours is fitted, narrowed first by a golden-section search while that range is wider than
    8 (BIC over ``k`` is often not unimodal near the true ``k``: a golden-section search down to
    2 integers can step over it). Every fitted model is kept, so the winner is not fitted twice.

    Args:
        x: ``(n, d)`` data (already reduced, e.g. by UMAP).
        max_clusters: Exclusive upper bound on ``k`` (the reference's ``max_clusters=50``).
        random_state: Seed for the mixtures.
        patience: Grid points with a worse BIC before the grid scan stops.
        grid_ratio: Growth factor of the grid.

    Returns:
        A :class:`BICSearchResult`.

    Raises:
        ValueError: ``x`` is empty or the arguments are out of range.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> x = np.concatenate([rng.normal(c, 0.1, (40, 2)) for c in (0, 5, 10)])
        >>> choose_n_clusters(x, random_state=0).k
        3
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"x must be a non-empty 2-D array, got shape {x.shape}")
    if max_clusters < 2:
        raise ValueError(f"max_clusters must be >= 2, got {max_clusters}")
    if patience < 1 or grid_ratio <= 1:
        raise ValueError(f"patience must be >= 1 and grid_ratio > 1, got {patience}, {grid_ratio}")
    k_max = _max_components(x, max_clusters)
    bics: dict[int, float] = {}
    models: dict[int, Any] = {}

    def bic_of(k: int) -> float:
        if k not in bics:
            models[k] = _fit_gmm(x, k, random_state)
            bics[k] = float(models[k].bic(x))
        return bics[k]

    grid = _geometric_grid(k_max, grid_ratio)
    best_i, worse = 0, 0
    for i, k in enumerate(grid):
        if bic_of(k) < bic_of(grid[best_i]) or i == 0:
            best_i, worse = i, 0
        else:
            worse += 1
            if worse >= patience:
                break
    # Golden-section search on the integers strictly between the best grid point's neighbours.
    lo = grid[best_i - 1] if best_i > 0 else grid[0]
    hi = grid[best_i + 1] if best_i + 1 < len(grid) else grid[best_i]
    a, b = lo, hi
    while b - a > _FULL_BRACKET:
        c = int(round(b - _GOLDEN * (b - a)))
        d = int(round(a + _GOLDEN * (b - a)))
        c, d = min(max(c, a + 1), b - 2), max(min(d, b - 1), a + 2)
        if c >= d:
            d = c + 1
        if bic_of(c) <= bic_of(d):
            b = d
        else:
            a = c
    for k in range(a, b + 1):
        bic_of(k)
    best_k = min(bics, key=lambda k: (bics[k], k))
    return BICSearchResult(
        k=best_k, bic=bics[best_k], model=models[best_k], bics=dict(sorted(bics.items()))
    )


def exhaustive_n_clusters(
    x: np.ndarray, *, max_clusters: int = 50, random_state: int | None = None
) -> BICSearchResult:
    """The reference search: fit every ``k`` in ``1 .. max_clusters - 1`` (for comparison only)."""
    x = np.asarray(x, dtype=np.float64)
    k_max = _max_components(x, max_clusters)
    bics: dict[int, float] = {}
    best_k, best_model = 1, None
    for k in range(1, k_max + 1):
        gm = _fit_gmm(x, k, random_state)
        bics[k] = float(gm.bic(x))
        if best_model is None or bics[k] < bics[best_k]:
            best_k, best_model = k, gm
    return BICSearchResult(k=best_k, bic=bics[best_k], model=best_model, bics=bics)
