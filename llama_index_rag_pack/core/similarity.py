"""Vector normalisation and cosine similarity: the package's one implementation of L2
normalisation (:func:`normalize_rows`, :func:`normalize_vector`) and cosine scores
(:func:`cosine_similarities`). Pure numpy; the semantic routing arithmetic built on them is in
:mod:`~llama_index_rag_pack.routing.route_scores`.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

__all__ = ["cosine_similarities", "normalize_rows", "normalize_vector"]


def normalize_rows(matrix: ArrayLike, *, dtype: DTypeLike = np.float32) -> np.ndarray:
    """Every row scaled to unit L2 norm, as a 2-D ``dtype`` array (zero rows stay zero).

    Each row is divided by its largest absolute entry first, so rows of tiny or huge values
    neither underflow nor overflow on the way.

    Example:
        >>> normalize_rows([[3.0, 4.0], [0.0, 0.0]]).tolist()
        [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    matrix = np.atleast_2d(np.asarray(matrix, dtype=dtype))
    scale = np.max(np.abs(matrix), axis=1, keepdims=True) if matrix.size else matrix[:, :1]
    scaled = matrix / np.where(scale == 0, 1, scale)
    norms = np.linalg.norm(scaled, axis=1, keepdims=True)
    return scaled / np.where(norms == 0, 1, norms)


def normalize_vector(vector: ArrayLike, *, dtype: DTypeLike = np.float64) -> np.ndarray:
    """``vector`` (flattened) scaled to unit L2 norm (a zero vector stays zero).

    Example:
        >>> normalize_vector([3.0, 4.0]).tolist()
        [0.6, 0.8]
    """
    return normalize_rows(np.ravel(vector), dtype=dtype)[0]


def cosine_similarities(query: ArrayLike, normalized_rows: np.ndarray) -> np.ndarray:
    """Cosine similarity of ``query`` with every row of an already row-normalized matrix, in the
    matrix's dtype.

    Example:
        >>> cosine_similarities([2.0, 0.0], normalize_rows([[1.0, 0.0], [0.0, 5.0]])).tolist()
        [1.0, 0.0]
    """
    return normalized_rows @ normalize_vector(query, dtype=normalized_rows.dtype)
