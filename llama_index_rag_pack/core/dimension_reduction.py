"""Dimensionality reduction for RAPTOR clustering: UMAP, with PCA when UMAP cannot run.

Pure numpy / umap-learn: nothing here knows about LlamaIndex or Milvus.
"""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["count_unique_rows", "pca_project", "reduce_embeddings"]


def count_unique_rows(x: np.ndarray, decimals: int = 6) -> int:
    """Number of distinct rows of ``x`` once rounded to ``decimals`` places."""
    if len(x) == 0:
        return 0
    return int(len(np.unique(np.round(x, decimals), axis=0)))


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
