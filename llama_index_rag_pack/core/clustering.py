"""RAPTOR clustering: UMAP reduction + Gaussian mixtures with BIC-chosen k, soft assignment.

Pure numpy / scikit-learn / umap-learn: nothing here knows about LlamaIndex or Milvus.

The algorithm follows the RAPTOR paper and its reference code (global UMAP with
``n_neighbors = sqrt(n - 1)`` → Gaussian mixture → soft assignment by a probability threshold →
local UMAP + mixture inside each global cluster), with these differences:

* the number of components is chosen by BIC with a coarse geometric grid that stops once BIC has
  risen for ``patience`` grid points in a row, then a golden-section refinement between the best
  grid point's neighbours: typically 8–15 fits instead of 49, and the winning mixture is reused
  rather than fitted again;
* rows are mapped back to clusters through index arrays, not by comparing every embedding with
  every other one (the reference's ``(embeddings == local[:, None]).all(-1)`` is O(N·N·d) memory
  and merges identical vectors);
* every row ends up in at least one cluster (the reference drops rows whose probabilities are all
  below the threshold);
* n = 0, 1, 2, n ≤ ``reduction_dim + 1``, identical vectors and UMAP failures are handled;
* clusters whose total length is over a budget are split again, with a depth guard and a
  deterministic fallback split, so the recursion always ends.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "BICSearchResult",
    "choose_n_clusters",
    "cluster_embeddings",
    "exhaustive_n_clusters",
    "reduce_embeddings",
]

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


def _seed(random_state: int | None, offset: int) -> int | None:
    return None if random_state is None else (int(random_state) + offset) % (2**31 - 1)


def _n_unique(x: np.ndarray, decimals: int = 6) -> int:
    if len(x) == 0:
        return 0
    return int(len(np.unique(np.round(x, decimals), axis=0)))


def _one_blas_thread() -> Any:
    """Single-threaded BLAS for the many tiny (k x 10) linear-algebra calls of a mixture fit.

    Multi-threaded OpenBLAS spends far longer synchronising its threads than computing on such
    small matrices, and much longer still on a busy machine (measured 40x slower on 2 shared cores).
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _fit_gmm(x: np.ndarray, k: int, random_state: int | None) -> Any:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(n_components=k, random_state=random_state)
    with warnings.catch_warnings(), _one_blas_thread():
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
    return max(1, min(max_clusters - 1, len(x) - 1, _n_unique(x)))


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
    best seen for ``patience`` grid points in a row; then a golden-section search over the integers
    between the best grid point's neighbours refines ``k``. Every fitted model is kept, so the
    winner is not fitted twice.

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
    while b - a > 2:
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


def reduce_embeddings(
    embeddings: np.ndarray,
    dim: int,
    *,
    n_neighbors: int | None = None,
    metric: str = "cosine",
    random_state: int | None = None,
) -> np.ndarray:
    """Reduce ``embeddings`` to ``dim`` dimensions with UMAP (PCA when UMAP cannot run).

    Args:
        embeddings: ``(n, d)`` array.
        dim: Target dimension (capped at ``n - 2``, UMAP's spectral limit).
        n_neighbors: UMAP neighbourhood; default ``sqrt(n - 1)`` as in the paper.
        metric: UMAP input metric.
        random_state: Seed (makes UMAP deterministic, single-threaded).

    Returns:
        An ``(n, dim')`` float64 array.
    """
    x = np.asarray(embeddings, dtype=np.float32)
    n = len(x)
    dim = max(1, min(dim, n - 2, x.shape[1]))
    if n_neighbors is None:
        n_neighbors = int(math.sqrt(n - 1))
    n_neighbors = max(2, min(n_neighbors, n - 1))
    if n >= 4 and _n_unique(x) > dim + 1:
        try:
            import umap

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reducer = umap.UMAP(
                    n_neighbors=n_neighbors,
                    n_components=dim,
                    metric=metric,
                    random_state=random_state,
                    n_jobs=1 if random_state is not None else -1,
                )
                out = reducer.fit_transform(x)
            if np.all(np.isfinite(out)):
                return np.asarray(out, dtype=np.float64)
            logger.warning("UMAP returned non-finite values for %d points; using PCA instead", n)
        except Exception as e:  # umap/numba raise assorted errors on degenerate inputs
            logger.warning(
                "UMAP failed on %d points (%s: %s); using PCA instead", n, type(e).__name__, e
            )
    return _pca(x, dim)


def _pca(x: np.ndarray, dim: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    if not np.any(centred):
        return np.zeros((len(x), dim))
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    out = centred @ vt[:dim].T
    if out.shape[1] < dim:
        out = np.pad(out, ((0, 0), (0, dim - out.shape[1])))
    return out


def _soft_labels(probs: np.ndarray, threshold: float) -> list[np.ndarray]:
    labels = []
    for row in probs:
        members = np.flatnonzero(row > threshold)
        if members.size == 0:  # never drop a row: fall back to its most likely component
            members = np.array([int(np.argmax(row))])
        labels.append(members)
    return labels


def _gmm_soft_clusters(
    reduced: np.ndarray, *, threshold: float, max_clusters: int, random_state: int | None
) -> list[np.ndarray]:
    """Member index arrays of each component (soft, every row somewhere)."""
    search = choose_n_clusters(reduced, max_clusters=max_clusters, random_state=random_state)
    if search.k == 1:
        return [np.arange(len(reduced))]
    with _one_blas_thread():
        probs = search.model.predict_proba(reduced)
    labels = _soft_labels(probs, threshold)
    members: list[list[int]] = [[] for _ in range(search.k)]
    for i, row_labels in enumerate(labels):
        for c in row_labels:
            members[int(c)].append(i)
    return [np.asarray(m, dtype=np.int64) for m in members if m]


def _split_in_order(x: np.ndarray, lengths: np.ndarray, budget: int) -> list[np.ndarray]:
    """Deterministic fallback: order rows along the first principal axis and pack them greedily."""
    order = np.argsort(_pca(x, 1)[:, 0], kind="stable") if len(x) > 1 else np.arange(len(x))
    groups: list[list[int]] = [[]]
    total = 0
    for i in order:
        if groups[-1] and total + lengths[i] > budget:
            groups.append([])
            total = 0
        groups[-1].append(int(i))
        total += int(lengths[i])
    return [np.asarray(sorted(g), dtype=np.int64) for g in groups]


def _cluster_members(
    x: np.ndarray,
    *,
    reduction_dim: int,
    threshold: float,
    max_clusters: int,
    random_state: int | None,
    local_n_neighbors: int,
    metric: str,
) -> list[np.ndarray]:
    n = len(x)
    if n <= reduction_dim + 1 or _n_unique(x) <= 1:
        return [np.arange(n)]
    reduced = reduce_embeddings(
        x, reduction_dim, metric=metric, random_state=_seed(random_state, 0)
    )
    global_clusters = _gmm_soft_clusters(
        reduced, threshold=threshold, max_clusters=max_clusters, random_state=_seed(random_state, 1)
    )
    clusters: list[np.ndarray] = []
    for g, members in enumerate(global_clusters):
        if len(members) <= reduction_dim + 1 or _n_unique(x[members]) <= 1:
            clusters.append(members)
            continue
        local = reduce_embeddings(
            x[members],
            reduction_dim,
            n_neighbors=local_n_neighbors,
            metric=metric,
            random_state=_seed(random_state, 10 + g),
        )
        for local_members in _gmm_soft_clusters(
            local,
            threshold=threshold,
            max_clusters=max_clusters,
            random_state=_seed(random_state, 2),
        ):
            clusters.append(members[local_members])
    return clusters


def cluster_embeddings(
    embeddings: np.ndarray | Sequence[Sequence[float]],
    *,
    reduction_dim: int = 10,
    threshold: float = 0.1,
    max_clusters: int = 50,
    random_state: int | None = None,
    lengths: Sequence[int] | None = None,
    max_length_in_cluster: int | None = None,
    max_split_depth: int = 3,
    local_n_neighbors: int = 10,
    metric: str = "cosine",
) -> list[list[int]]:
    """Soft-cluster embeddings the RAPTOR way.

    Args:
        embeddings: ``(n, d)`` vectors.
        reduction_dim: UMAP output dimension; sets of at most ``reduction_dim + 1`` rows form one
            cluster without reduction.
        threshold: A row joins every component whose probability exceeds this.
        max_clusters: Exclusive upper bound on components per mixture.
        random_state: Seed for UMAP and the mixtures (``None``: not reproducible, faster UMAP).
        lengths: Size of each row's text (e.g. tokens), used with ``max_length_in_cluster``.
        max_length_in_cluster: Clusters whose total ``lengths`` exceed this are split again.
        max_split_depth: How many times an over-long cluster is re-clustered before the
            deterministic fallback split (rows packed in order along the first principal axis).
        local_n_neighbors: UMAP neighbourhood of the local (per global cluster) reduction.
        metric: UMAP input metric.

    Returns:
        For each row, the sorted ids of the clusters it belongs to (at least one; ids are
        ``0 .. n_clusters - 1``, numbered by first member).

    Raises:
        ValueError: bad shapes or argument values.

    Example:
        >>> import numpy as np
        >>> cluster_embeddings(np.zeros((3, 8)))
        [[0], [0], [0]]
        >>> cluster_embeddings(np.ones((4, 8)), lengths=[5, 5, 5, 5], max_length_in_cluster=10)
        [[0], [0], [1], [1]]
    """
    x = np.asarray(embeddings, dtype=np.float32)
    if x.size == 0:
        return []
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D array (n, d), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("embeddings contain NaN or infinite values")
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
    if reduction_dim < 1:
        raise ValueError(f"reduction_dim must be >= 1, got {reduction_dim}")
    if max_clusters < 2:
        raise ValueError(f"max_clusters must be >= 2, got {max_clusters}")
    n = len(x)
    if lengths is not None:
        lens = np.asarray(lengths, dtype=np.int64)
        if lens.shape != (n,):
            raise ValueError(f"lengths must have one entry per row ({n}), got {lens.shape}")
    else:
        lens = np.ones(n, dtype=np.int64)
    if max_length_in_cluster is not None and max_length_in_cluster <= 0:
        raise ValueError(f"max_length_in_cluster must be > 0, got {max_length_in_cluster}")

    options = dict(
        reduction_dim=reduction_dim,
        threshold=threshold,
        max_clusters=max_clusters,
        local_n_neighbors=local_n_neighbors,
        metric=metric,
    )

    def run(idx: np.ndarray, depth: int) -> list[np.ndarray]:
        if len(idx) == 1:
            return [idx]
        found = [
            idx[m]
            for m in _cluster_members(
                x[idx], random_state=_seed(random_state, 100 * depth), **options
            )
        ]
        if max_length_in_cluster is None:
            return found
        out: list[np.ndarray] = []
        for members in found:
            total = int(lens[members].sum())
            if total <= max_length_in_cluster or len(members) == 1:
                out.append(members)
            elif depth < max_split_depth and len(members) < len(idx):
                out.extend(run(members, depth + 1))
            else:  # clustering cannot shrink it further: split deterministically
                out.extend(
                    members[g]
                    for g in _split_in_order(x[members], lens[members], max_length_in_cluster)
                )
        return out

    clusters = run(np.arange(n), 0)
    # Drop duplicate member sets (soft membership can produce them), number by first member.
    unique: dict[tuple[int, ...], None] = {}
    for members in clusters:
        key = tuple(sorted(set(int(i) for i in members)))
        if key:
            unique.setdefault(key, None)
    ordered = sorted(unique, key=lambda m: (m[0], len(m), m))
    assignment: list[list[int]] = [[] for _ in range(n)]
    for cid, members in enumerate(ordered):
        for i in members:
            assignment[i].append(cid)
    for i, row in enumerate(assignment):
        if not row:  # defensive: cannot happen, every step keeps every row
            assignment[i] = [len(ordered)]
            ordered.append((i,))
    return [sorted(set(row)) for row in assignment]
