"""Clustering a large set through a sample: RAPTOR's reduction and mixtures are fitted on a
seeded sample of the rows, and every other row joins the cluster its nearest sampled rows are in.

UMAP and the BIC search cost more than linearly in the rows they see (a neighbour graph, an
optimised layout, a dozen mixture fits per level), and at 100k rows they took 14 minutes on two
cores. Fitted on :data:`DEFAULT_FIT_SAMPLE` rows and applied to the rest through a nearest-neighbour
vote in the original space (exact, faiss's flat index), the same planted topics come back at a
fraction of the cost (``benchmarks/results/raptor_clustering_scaling.md``).

Pure numpy / scipy / faiss: nothing here knows about LlamaIndex or Milvus.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from llama_index_rag_pack.core.similarity import normalize_rows

__all__ = [
    "DEFAULT_FIT_SAMPLE",
    "PROPAGATION_NEIGHBORS",
    "fit_on_sample",
    "propagate_clusters",
    "sample_rows",
]

#: Rows above which a set is clustered through a seeded sample of this many rows
#: (:func:`~llama_index_rag_pack.raptor.clustering.cluster_embeddings`' ``fit_sample``).
DEFAULT_FIT_SAMPLE = 10_000

#: Sampled neighbours whose clusters vote for each row outside the sample.
PROPAGATION_NEIGHBORS = 10

#: Query rows searched at a time (bounds the search's score matrix).
_QUERY_BATCH = 8_192


def sample_rows(n: int, size: int, random_state: int | None) -> np.ndarray:
    """``size`` distinct row indices out of ``n`` (sorted), drawn with ``random_state``.

    Example:
        >>> sample_rows(10, 3, 0).tolist() == sample_rows(10, 3, 0).tolist()
        True
        >>> len(sample_rows(10, 20, 0))
        10
    """
    if size >= n:
        return np.arange(n)
    rng = np.random.default_rng(random_state)
    return np.sort(rng.choice(n, size=size, replace=False))


def _nearest_sampled(
    x: np.ndarray, sample: np.ndarray, queries: np.ndarray, k: int, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """``(indices into sample, similarity weights)`` of each query row's ``k`` nearest sampled
    rows (cosine: by inner product of normalised rows; else by Euclidean distance)."""
    import faiss

    rows = np.ascontiguousarray(x[sample], dtype=np.float32)
    if metric == "cosine":
        rows = np.ascontiguousarray(normalize_rows(rows))
        index = faiss.IndexFlatIP(rows.shape[1])
    else:
        index = faiss.IndexFlatL2(rows.shape[1])
    index.add(rows)
    k = min(k, len(sample))
    idx = np.empty((len(queries), k), dtype=np.int64)
    weight = np.empty((len(queries), k), dtype=np.float32)
    for start in range(0, len(queries), _QUERY_BATCH):
        part = np.ascontiguousarray(x[queries[start : start + _QUERY_BATCH]], dtype=np.float32)
        if metric == "cosine":
            part = np.ascontiguousarray(normalize_rows(part))
        scores, found = index.search(part, k)
        idx[start : start + len(part)] = found
        if metric == "cosine":  # similarity in [0, 1]; a tiny floor keeps every vote counted
            weight[start : start + len(part)] = np.clip(scores, 0.0, None) + 1e-6
        else:
            weight[start : start + len(part)] = 1.0 / (1.0 + np.sqrt(np.maximum(scores, 0.0)))
    return idx, weight


def propagate_clusters(
    x: np.ndarray,
    sample: np.ndarray,
    sample_clusters: Sequence[np.ndarray],
    *,
    k: int = PROPAGATION_NEIGHBORS,
    metric: str = "cosine",
) -> list[np.ndarray]:
    """Clusters of every row of ``x`` from the clusters of its sampled rows.

    A sampled row keeps its (soft) memberships. Every other row joins the one cluster with the
    largest similarity-weighted vote of its ``k`` nearest sampled rows (a sampled row in two
    clusters votes for both; ties go to the lower cluster number).

    Args:
        x: ``(n, d)`` rows.
        sample: Indices into ``x`` of the sampled rows.
        sample_clusters: Member arrays of each cluster, as positions in ``sample``.
        k: Sampled neighbours that vote.
        metric: ``"cosine"`` or ``"euclidean"`` (how neighbours are found).

    Returns:
        Member index arrays (into ``x``, sorted) of the same clusters, in the same order.

    Example:
        >>> import numpy as np
        >>> x = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [0.1, 0.9]])
        >>> found = propagate_clusters(x, np.array([0, 1]), [np.array([0]), np.array([1])])
        >>> [c.tolist() for c in found]
        [[0, 2], [1, 3]]
    """
    from scipy import sparse

    n, n_clusters = len(x), len(sample_clusters)
    sample = np.asarray(sample, dtype=np.int64)
    rest = np.setdiff1d(np.arange(n), sample, assume_unique=True)
    members = [sample[np.asarray(c, dtype=np.int64)] for c in sample_clusters]
    if rest.size == 0 or n_clusters == 0:
        return [np.sort(m) for m in members]
    positions = np.concatenate([np.asarray(c, dtype=np.int64) for c in sample_clusters])
    labels = np.concatenate(
        [np.full(len(c), cid, dtype=np.int64) for cid, c in enumerate(sample_clusters)]
    )
    membership = sparse.csr_matrix(
        (np.ones(len(positions), dtype=np.float32), (positions, labels)),
        shape=(len(sample), n_clusters),
    )
    idx, weight = _nearest_sampled(x, sample, rest, k, metric)
    votes_of = sparse.csr_matrix(
        (weight.ravel(), (np.repeat(np.arange(len(rest)), idx.shape[1]), idx.ravel())),
        shape=(len(rest), len(sample)),
    )
    chosen = np.empty(len(rest), dtype=np.int64)
    for start in range(0, len(rest), _QUERY_BATCH):  # a dense vote matrix per batch only
        votes = (votes_of[start : start + _QUERY_BATCH] @ membership).toarray()
        chosen[start : start + len(votes)] = np.argmax(votes, axis=1)  # ties: lower number
    order = np.argsort(chosen, kind="stable")
    bounds = np.searchsorted(chosen[order], np.arange(n_clusters + 1))
    return [
        np.sort(np.concatenate([members[c], rest[order[bounds[c] : bounds[c + 1]]]]))
        for c in range(n_clusters)
    ]


def fit_on_sample(
    x: np.ndarray,
    *,
    members: Callable[..., list[np.ndarray]],
    fit_sample: int | None,
    random_state: int | None,
    metric: str = "cosine",
) -> list[np.ndarray]:
    """``members(x, random_state=...)`` (member index arrays of each cluster), fitted on a seeded
    sample of ``fit_sample`` rows and propagated to the others when ``x`` has more rows."""
    n = len(x)
    if fit_sample is None or n <= fit_sample:
        return members(x, random_state=random_state)
    seed = None if random_state is None else (int(random_state) + 3) % (2**31 - 1)
    sample = sample_rows(n, fit_sample, seed)
    return propagate_clusters(
        x, sample, members(x[sample], random_state=random_state), metric=metric
    )
