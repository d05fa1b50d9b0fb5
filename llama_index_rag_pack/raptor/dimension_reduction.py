"""Dimensionality reduction for RAPTOR clustering: UMAP, with PCA when UMAP cannot run.

Pure numpy / umap-learn: nothing here knows about LlamaIndex or Milvus.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import logging
import math
import os
import warnings
from typing import Any

import numpy as np

from llama_index_rag_pack.core.similarity import normalize_rows

logger = logging.getLogger(__name__)

__all__ = [
    "EXACT_NEIGHBORS_UP_TO",
    "approximate_neighbors",
    "count_unique_rows",
    "exact_neighbors",
    "pca_project",
    "reduce_embeddings",
    "umap_module",
]

#: UMAP optimisation epochs. UMAP's own default is 500 up to 10,000 points and 200 above; 200 at
#: every size halves the time of a RAPTOR clustering at 10k points, with clusters as pure on
#: labelled data (``benchmarks/bench_raptor_clustering.py``).
DEFAULT_N_EPOCHS = 200

#: Default row count above which the UMAP neighbour graph comes from an HNSW graph
#: (:func:`approximate_neighbors`) instead of the exact search, whose cost grows as ``n**2``.
#: ``None``: exact at every size. At 100k rows the HNSW graph saves 22 s of search, but UMAP
#: runs longer on it, and the whole global reduction gains 6%
#: (``benchmarks/results/raptor_neighbors.md``), so HNSW is an opt-in for larger sets.
EXACT_NEIGHBORS_UP_TO: int | None = None


def count_unique_rows(x: np.ndarray, decimals: int = 6) -> int:
    """Number of distinct rows of ``x`` once rounded to ``decimals`` places."""
    if len(x) == 0:
        return 0
    return int(len(np.unique(np.round(x, decimals), axis=0)))


@functools.cache
def umap_module() -> Any:
    """``umap``, imported once, with numba's on-disk cache switched on for its compiled functions.

    umap-learn compiles several functions (``smooth_knn_dist``, the layout epochs, ...) without
    ``cache=True``, so every new process paid 10-30 s of JIT compilation before its first
    reduction. With the cache on, the first process on a machine compiles and writes the cache
    (next to umap's sources, or numba's user-wide cache directory, or ``NUMBA_CACHE_DIR``) and
    later ones load it in about a second. ``RAG_PACK_NUMBA_CACHE=0`` leaves umap as it is.
    """
    import umap
    from umap import distances, layouts, spectral, umap_, utils

    if os.environ.get("RAG_PACK_NUMBA_CACHE", "1") == "0":
        return umap
    try:
        from numba.core.registry import CPUDispatcher
    except ImportError:  # pragma: no cover - numba moved its dispatcher
        return umap
    for module in (umap_, layouts, utils, distances, spectral):
        for obj in vars(module).values():
            if isinstance(obj, CPUDispatcher):
                try:
                    obj.enable_caching()
                except Exception as e:  # no writable cache location: compile as before
                    logger.debug("numba cache unavailable for %s: %s", obj, e)
                    return umap
    return umap


def _search_input(x: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, int] | None:
    """``x`` as a C-contiguous float32 matrix (rows normalised for cosine) and ``k`` capped at
    ``n``; ``None`` for another metric or a zero row under cosine."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = min(int(k), len(x))
    if metric == "cosine":
        if not np.all(np.any(x != 0, axis=1)):  # a zero row has no direction
            return None
        x = np.ascontiguousarray(normalize_rows(x))
    elif metric != "euclidean":
        return None
    return x, k


def _as_distances(scores: np.ndarray, metric: str) -> np.ndarray:
    """faiss scores as UMAP distances: cosine ``1 - inner product``, Euclidean from squared L2."""
    if metric == "cosine":
        return np.clip(1.0 - scores, 0.0, 2.0).astype(np.float32)
    return np.sqrt(np.maximum(scores, 0.0)).astype(np.float32)


def _self_first(idx: np.ndarray, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every row's own index first, at distance 0 (duplicates or an approximate search can put
    another row there or leave the row out); the others keep their order."""
    rows = np.arange(len(idx))
    for i in np.flatnonzero(idx[:, 0] != rows):
        others = idx[i] != i
        kept_idx, kept_dist = idx[i][others], dist[i][others]
        k = idx.shape[1]
        idx[i] = np.concatenate([[i], kept_idx])[:k]
        dist[i] = np.concatenate([[0.0], kept_dist])[:k]
    return idx, dist


def _faiss() -> Any | None:
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency (and milvus-lite's)
        return None
    return faiss


def _flat_search(
    faiss: Any, rows: np.ndarray, queries: np.ndarray, k: int, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """faiss's exact search of ``queries`` among ``rows``: (scores, indices)."""
    kind = faiss.IndexFlatIP if metric == "cosine" else faiss.IndexFlatL2
    index = kind(rows.shape[1])
    index.add(rows)
    return index.search(queries, k)


def exact_neighbors(
    x: np.ndarray, k: int, metric: str = "cosine"
) -> tuple[np.ndarray, np.ndarray] | None:
    """The exact ``k`` nearest neighbours of every row (itself first), by brute force.

    faiss's flat index: blocked matrix products and a heap per row, exact and deterministic,
    1.9-4.2x faster than scikit-learn's brute force from 10k to 100k rows of 384 dimensions
    (``benchmarks/results/raptor_neighbors.md``; scikit-learn is used when faiss is missing).
    For ``"cosine"`` the rows are normalised and searched by inner product, and the distances
    are returned as cosine distances ``1 - cos``. This replaces UMAP's own neighbour
    search: NN-descent at 10k points costs ~50 s single-threaded, and for fewer than 4,096 points
    UMAP computes every pairwise distance through a Python-level callable (~0.6 s for 400 points).

    Args:
        x: ``(n, d)`` array.
        k: Neighbours per row (at most ``n``).
        metric: ``"cosine"`` or ``"euclidean"``.

    Returns:
        ``(indices, distances)``, each ``(n, k)``, nearest first; ``None`` for another metric or,
        with cosine, a zero row (let UMAP decide then).

    Example:
        >>> import numpy as np
        >>> idx, dist = exact_neighbors(np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]), 2)
        >>> idx[:, 0].tolist(), int(idx[0, 1])
        ([0, 1, 2], 1)
    """
    prepared = _search_input(x, k, metric)
    if prepared is None:
        return None
    x, k = prepared
    faiss = _faiss()
    if faiss is None:  # pragma: no cover
        from sklearn.neighbors import NearestNeighbors

        search = NearestNeighbors(n_neighbors=k, metric="euclidean", algorithm="brute").fit(x)
        dist, idx = search.kneighbors(x)
        dist = dist**2 / 2.0 if metric == "cosine" else dist
        dist = np.clip(dist, 0.0, None).astype(np.float32)
        return _self_first(idx.astype(np.int64), dist)
    scores, idx = _flat_search(faiss, x, x, k, metric)
    return _self_first(idx.astype(np.int64), _as_distances(scores, metric))


#: HNSW graph settings for :func:`approximate_neighbors`: links per node, and the candidate lists
#: of construction and search (search: at least twice ``k``).
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 80, 100


def approximate_neighbors(
    x: np.ndarray, k: int, metric: str = "cosine", *, deterministic: bool = False
) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``k`` nearest neighbours of every row (itself first) from a faiss HNSW graph.

    Building and searching the graph grows as ``n log n`` where the exact search grows as
    ``n**2`` (``benchmarks/results/raptor_neighbors.md`` times both and reports the share of the
    exact neighbours found). Rows the graph search misses are searched exactly. Without faiss,
    this is :func:`exact_neighbors`.

    Args:
        x: ``(n, d)`` array.
        k: Neighbours per row (at most ``n``).
        metric: ``"cosine"`` or ``"euclidean"``.
        deterministic: Build the graph on one thread, so that the same input gives the same
            neighbours (the parallel build inserts rows in a varying order).

    Returns:
        ``(indices, distances)`` as :func:`exact_neighbors` returns them, or ``None``.
    """
    faiss = _faiss()
    prepared = _search_input(x, k, metric)
    if prepared is None or faiss is None:
        return exact_neighbors(x, k, metric) if prepared is not None else None
    x, k = prepared
    kind = faiss.METRIC_INNER_PRODUCT if metric == "cosine" else faiss.METRIC_L2
    index = faiss.IndexHNSWFlat(x.shape[1], HNSW_M, kind)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    threads = faiss.omp_get_max_threads()
    try:
        if deterministic:
            faiss.omp_set_num_threads(1)
        index.add(x)
    finally:
        faiss.omp_set_num_threads(threads)
    index.hnsw.efSearch = max(HNSW_EF_SEARCH, 2 * k)
    scores, idx = index.search(x, k)
    missed = np.flatnonzero((idx < 0).any(axis=1))
    if missed.size:  # the graph search found fewer than k rows: search those rows exactly
        scores[missed], idx[missed] = _flat_search(faiss, x, x[missed], k, metric)
    return _self_first(idx.astype(np.int64), _as_distances(scores, metric))


def reduce_embeddings(
    embeddings: np.ndarray,
    dim: int,
    *,
    n_neighbors: int | None = None,
    metric: str = "cosine",
    random_state: int | None = None,
    n_epochs: int = DEFAULT_N_EPOCHS,
    exact_neighbors_up_to: int | None = EXACT_NEIGHBORS_UP_TO,
) -> np.ndarray:
    """Reduce ``embeddings`` to ``dim`` dimensions with UMAP (PCA when UMAP cannot run).

    The neighbour graph is computed by :func:`exact_neighbors` (or, above
    ``exact_neighbors_up_to`` rows, :func:`approximate_neighbors`) and handed to UMAP.

    Args:
        embeddings: ``(n, d)`` array.
        dim: Target dimension (capped at ``n - 2``, UMAP's spectral limit).
        n_neighbors: UMAP neighbourhood; default ``sqrt(n - 1)`` as in the paper.
        metric: UMAP input metric.
        random_state: Seed (makes UMAP deterministic, single-threaded).
        n_epochs: UMAP optimisation epochs.
        exact_neighbors_up_to: Largest ``n`` whose neighbour graph is exact (HNSW above);
            ``None`` (the default): exact at every size.

    Returns:
        An ``(n, dim')`` float64 array.

    Example:
        >>> import numpy as np
        >>> reduce_embeddings(np.eye(3), 2).shape
        (3, 1)
    """
    x = np.asarray(embeddings, dtype=np.float32)
    n = len(x)
    dim = max(1, min(dim, n - 2, x.shape[1]))
    if n_neighbors is None:
        n_neighbors = int(math.sqrt(n - 1))
    n_neighbors = max(2, min(n_neighbors, n - 1))
    if n >= 4 and count_unique_rows(x) > dim + 1:
        try:
            umap = umap_module()
            if exact_neighbors_up_to is None or n <= exact_neighbors_up_to:
                knn = exact_neighbors(x, n_neighbors, metric)
            else:
                knn = approximate_neighbors(
                    x, n_neighbors, metric, deterministic=random_state is not None
                )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reducer = umap.UMAP(
                    n_neighbors=n_neighbors,
                    n_components=dim,
                    metric=metric,
                    random_state=random_state,
                    n_jobs=1 if random_state is not None else -1,
                    n_epochs=n_epochs,
                    precomputed_knn=(None, None, None) if knn is None else knn,
                )
                out = reducer.fit_transform(x)
            if np.all(np.isfinite(out)):
                return np.asarray(out, dtype=np.float64)
            logger.warning("UMAP returned non-finite values for %d points; using PCA instead", n)
        except Exception as e:  # umap/numba raise assorted errors on degenerate inputs
            logger.warning(
                "UMAP failed on %d points (%s: %s); using PCA instead", n, type(e).__name__, e
            )
    return pca_project(x, dim)


def pca_project(x: np.ndarray, dim: int) -> np.ndarray:
    """Project the rows of ``x`` on their first ``dim`` principal axes (zero-padded to ``dim``).

    Example:
        >>> import numpy as np
        >>> pca_project(np.zeros((2, 3)), 2).tolist()
        [[0.0, 0.0], [0.0, 0.0]]
    """
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    if not np.any(centred):
        return np.zeros((len(x), dim))
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    out = centred @ vt[:dim].T
    if out.shape[1] < dim:
        out = np.pad(out, ((0, 0), (0, dim - out.shape[1])))
    return out
