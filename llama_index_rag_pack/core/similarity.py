"""Vector normalisation and cosine similarity: the package's one implementation of L2
normalisation (:func:`normalize_rows`, :func:`normalize_vector`), cosine scores
(:func:`cosine_similarities`) and the best rows of a brute-force search (:func:`top_scores`,
which the in-memory copies of Milvus collections use). Pure numpy; the semantic routing
arithmetic built on them is in :mod:`~llama_index_rag_pack.routing.route_scores`.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

__all__ = [
    "UnitRows",
    "cosine_similarities",
    "key_mask",
    "normalize_rows",
    "normalize_rows_in_place",
    "normalize_vector",
    "top_scores",
]


def normalize_rows(matrix: ArrayLike, *, dtype: DTypeLike = np.float32) -> np.ndarray:
    """Every row scaled to unit L2 norm, as a 2-D ``dtype`` array (zero rows stay zero).

    Each row is divided by its largest absolute entry first, so rows of tiny or huge values
    neither underflow nor overflow on the way.

    Example:
        >>> normalize_rows([[3.0, 4.0], [0.0, 0.0]]).tolist()
        [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    return normalize_rows_in_place(np.atleast_2d(np.array(matrix, dtype=dtype)))


#: Rows :func:`normalize_rows_in_place` scales at a time (its temporaries are one block's).
_BLOCK_ROWS = 65_536


def normalize_rows_in_place(matrix: np.ndarray) -> np.ndarray:
    """:func:`normalize_rows` of a writable 2-D float array, written into it block by block
    (the one implementation: no further array of its size, 1.4 GB for a million 384-d rows).

    Example:
        >>> normalize_rows_in_place(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)).tolist()
        [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    for start in range(0, len(matrix), _BLOCK_ROWS):
        block = matrix[start : start + _BLOCK_ROWS]
        scale = np.max(np.abs(block), axis=1, keepdims=True) if block.size else block[:, :1]
        np.divide(block, np.where(scale == 0, 1, scale), out=block)
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        np.divide(block, np.where(norms == 0, 1, norms), out=block)
    return matrix


class UnitRows:
    """Rows of other float32 matrices read as one matrix of unit-length rows, without a copy of
    them: ``UnitRows(blocks) @ query`` is ``normalize_rows(rows) @ query``, where ``rows`` are
    the rows each block keeps, block after block. A block is ``(matrix, kept)``: a 2-D float32
    array, and the indices of the rows it keeps in increasing order (``None``: all of them).

    What it holds of its own is one float32 scale per row (and the blocks' ``kept``): the
    vectors stay where they are (Milvus Lite's segments, for the in-memory copies), so the
    arrays must not change while it is used. Each product scores every row of a block, then
    keeps the block's rows.

    Example:
        >>> rows = UnitRows([(np.array([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]], np.float32), [0, 2])])
        >>> (rows @ np.array([1.0, 0.0], np.float32)).tolist()
        [0.6000000238418579, 0.0]
    """

    def __init__(self, blocks: Sequence[tuple[np.ndarray, ArrayLike | None]]) -> None:
        self.blocks: list[tuple[np.ndarray, np.ndarray | None]] = []
        scales = []
        dim = 0
        for matrix, kept in blocks:
            if matrix.ndim != 2 or matrix.dtype != np.float32:
                raise ValueError("UnitRows takes 2-D float32 blocks")
            if dim and matrix.shape[1] != dim:
                raise ValueError(f"blocks of {dim} and {matrix.shape[1]} columns")
            dim = dim or matrix.shape[1]
            index = None if kept is None else np.asarray(kept, dtype=np.int64)
            self.blocks.append((matrix, index))
            scales.append(_inverse_norms(matrix, index))
        self.inverse_norms = np.concatenate(scales) if scales else np.zeros(0, np.float32)
        self.shape = (len(self.inverse_norms), dim)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes of vectors it reads (the blocks' rows it keeps, as one float32 matrix)."""
        return self.shape[0] * self.shape[1] * 4

    def rows(self) -> np.ndarray:
        """The kept rows as they are stored (not scaled), in one new float32 matrix."""
        parts = [m if index is None else m[index] for m, index in self.blocks]
        if not parts:
            return np.zeros((0, self.shape[1]), np.float32)
        return np.concatenate(parts)

    def __matmul__(self, query: np.ndarray) -> np.ndarray:
        query = np.asarray(query, dtype=np.float32)
        parts = []
        for matrix, index in self.blocks:
            scores = matrix @ query
            parts.append(scores if index is None else scores[index])
        if not parts:
            return np.zeros(0, np.float32)
        scores = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return scores * self.inverse_norms


def _inverse_norms(matrix: np.ndarray, index: np.ndarray | None) -> np.ndarray:
    """One over the L2 norm of each kept row (0 for a zero row), computed as
    :func:`normalize_rows_in_place` scales (by the largest entry first), block by block."""
    rows = len(matrix) if index is None else len(index)
    out = np.empty(rows, np.float32)
    for start in range(0, rows, _BLOCK_ROWS):
        stop = min(rows, start + _BLOCK_ROWS)
        block = matrix[start:stop] if index is None else matrix[index[start:stop]]
        scale = np.max(np.abs(block), axis=1) if block.size else np.zeros(len(block), np.float32)
        safe = np.where(scale == 0, 1, scale).astype(np.float32)
        norms = np.linalg.norm(block / safe[:, None], axis=1) * safe
        out[start:stop] = np.where(norms == 0, 0, 1 / np.where(norms == 0, 1, norms))
    return out


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


def top_scores(
    keys: Sequence[str],
    matrix: np.ndarray,
    embedding: Sequence[float],
    limit: int,
    only: frozenset[str] | None = None,
) -> list[tuple[str, float]]:
    """The ``limit`` rows most similar to ``embedding`` (cosine), as ``(key, score)``; with
    ``only``, among the rows whose key is in it.

    A key that appears on several rows keeps its best score. Best first; equal scores by key.
    """
    if not keys or limit <= 0:
        return []
    query = np.asarray(embedding, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    scores = matrix @ (query / norm if norm > 0 else query)
    if only is not None:
        keep = key_mask(keys, only)
        scores = np.where(keep, scores, -np.inf)
        limit = min(limit, int(keep.sum()))
        if limit <= 0:
            return []
    k = min(limit, len(keys))
    top = np.argpartition(-scores, k - 1)[:k]
    best: dict[str, float] = {}
    for i in top.tolist():
        key, score = keys[i], float(scores[i])
        if score > best.get(key, float("-inf")):
            best[key] = score
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))


# (id of the keys list, the id set) -> boolean mask over the keys
_MASKS: dict[tuple[int, int], tuple[Sequence[str], frozenset[str], np.ndarray]] = {}


def key_mask(keys: Sequence[str], only: frozenset[str]) -> np.ndarray:
    """Which of ``keys`` are in ``only`` (cached while both objects live)."""
    slot = (id(keys), id(only))
    cached = _MASKS.get(slot)
    if cached is not None and cached[0] is keys and cached[1] is only:
        return cached[2]
    mask = np.fromiter((k in only for k in keys), dtype=bool, count=len(keys))
    if len(_MASKS) > 32:
        _MASKS.clear()
    _MASKS[slot] = (keys, only, mask)
    return mask
