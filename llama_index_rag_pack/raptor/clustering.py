"""RAPTOR clustering: UMAP reduction + Gaussian mixtures with BIC-chosen k, soft assignment.

Pure numpy / scikit-learn / umap-learn: nothing here knows about LlamaIndex or Milvus. The
reduction lives in :mod:`~llama_index_rag_pack.raptor.dimension_reduction`, the choice of ``k`` in
:mod:`~llama_index_rag_pack.raptor.mixture_selection`.

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
  deterministic fallback split, so the recursion always ends;
* the neighbour graph is exact (``dimension_reduction.exact_neighbors``, faiss's flat index;
  an HNSW graph above ``exact_neighbors_up_to`` rows when set), UMAP runs 200 epochs,
  and the global neighbourhood ``sqrt(n - 1)`` is capped at ``max_global_neighbors`` (50):
  10k x 384 vectors take 44 s of CPU, the reference 451 s (benchmarks/results);
* a set of more than ``fit_sample`` (10,000) rows is fitted on a seeded sample, and every other
  row joins the cluster of most of its nearest sampled rows
  (:mod:`~llama_index_rag_pack.raptor.cluster_propagation`): 100k x 384 in about a minute
  instead of 14, with the planted topics as pure;
* distinct topics are never merged: every cluster, and every set too small for UMAP (at most
  ``reduction_dim + 1`` rows, which the reference keeps as one cluster), is split into the groups
  that average-linkage clustering keeps apart at cosine similarity ``topic_similarity``. With a
  handful of chunks per topic, UMAP and a BIC-chosen mixture see too few points to separate
  topics (4 chunks each of two unrelated articles came out as one cluster).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from llama_index_rag_pack.raptor.cluster_propagation import (
    DEFAULT_FIT_SAMPLE,
    fit_on_sample,
)
from llama_index_rag_pack.raptor.dimension_reduction import (
    EXACT_NEIGHBORS_UP_TO,
    count_unique_rows,
    pca_project,
    reduce_embeddings,
)
from llama_index_rag_pack.raptor.mixture_selection import choose_n_clusters, one_blas_thread

__all__ = ["DEFAULT_TOPIC_SIMILARITY", "MAX_GLOBAL_NEIGHBORS", "cluster_embeddings"]

#: Average cosine similarity below which two groups of rows count as distinct topics (see
#: ``benchmarks/bench_raptor_clustering.py``: all-MiniLM-L6-v2 chunks of one Wikipedia article vs
#: chunks of two unrelated articles).
DEFAULT_TOPIC_SIMILARITY = 0.25

#: Cap on the global UMAP neighbourhood ``sqrt(n - 1)``.
MAX_GLOBAL_NEIGHBORS = 50


def _seed(random_state: int | None, offset: int) -> int | None:
    return None if random_state is None else (int(random_state) + offset) % (2**31 - 1)


def _soft_labels(probs: np.ndarray, threshold: float) -> list[np.ndarray]:
    labels = []
    for row in probs:
        members = np.flatnonzero(row > threshold)
        if members.size == 0:  # never drop a row: fall back to its most likely component
            members = np.array([int(np.argmax(row))])
        labels.append(members)
    return labels


def _split_topics(x: np.ndarray, min_similarity: float | None, max_rows: int) -> list[np.ndarray]:
    """Index groups of ``x`` that average linkage keeps apart at cosine ``min_similarity``.

    scipy's hierarchical clustering (deterministic); groups are ordered by first member. Sets
    larger than ``max_rows`` (the condensed distance matrix grows as ``n**2``) or holding a zero
    vector are left whole.
    """
    n = len(x)
    whole = [np.arange(n)]
    if min_similarity is None or n < 2 or n > max_rows:
        return whole
    x64 = np.asarray(x, dtype=np.float64)
    if np.any(np.linalg.norm(x64, axis=1) == 0):
        return whole
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(x64, method="average", metric="cosine")
    labels = fcluster(tree, t=1.0 - min_similarity, criterion="distance")
    groups = [np.flatnonzero(labels == label) for label in np.unique(labels)]
    return sorted(groups, key=lambda g: int(g[0]))


def _gmm_soft_clusters(
    reduced: np.ndarray, *, threshold: float, max_clusters: int, random_state: int | None
) -> list[np.ndarray]:
    """Member index arrays of each component (soft, every row somewhere)."""
    search = choose_n_clusters(reduced, max_clusters=max_clusters, random_state=random_state)
    if search.k == 1:
        return [np.arange(len(reduced))]
    with one_blas_thread():
        probs = search.model.predict_proba(reduced)
    labels = _soft_labels(probs, threshold)
    members: list[list[int]] = [[] for _ in range(search.k)]
    for i, row_labels in enumerate(labels):
        for c in row_labels:
            members[int(c)].append(i)
    return [np.asarray(m, dtype=np.int64) for m in members if m]


def _split_in_order(x: np.ndarray, lengths: np.ndarray, budget: int) -> list[np.ndarray]:
    """Deterministic fallback: order rows along the first principal axis and pack them greedily."""
    order = np.argsort(pca_project(x, 1)[:, 0], kind="stable") if len(x) > 1 else np.arange(len(x))
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
    max_global_neighbors: int,
    metric: str,
    topic_similarity: float | None,
    topic_split_max_rows: int,
    exact_neighbors_up_to: int | None,
) -> list[np.ndarray]:
    def split(idx: np.ndarray) -> list[np.ndarray]:
        return [idx[g] for g in _split_topics(x[idx], topic_similarity, topic_split_max_rows)]

    n = len(x)
    if n <= reduction_dim + 1 or count_unique_rows(x) <= 1:
        return split(np.arange(n))
    reduced = reduce_embeddings(
        x,
        reduction_dim,
        n_neighbors=min(int(math.sqrt(n - 1)), max_global_neighbors),
        metric=metric,
        random_state=_seed(random_state, 0),
        exact_neighbors_up_to=exact_neighbors_up_to,
    )
    global_clusters = _gmm_soft_clusters(
        reduced, threshold=threshold, max_clusters=max_clusters, random_state=_seed(random_state, 1)
    )
    clusters: list[np.ndarray] = []
    for g, members in enumerate(global_clusters):
        if len(members) <= reduction_dim + 1 or count_unique_rows(x[members]) <= 1:
            clusters.extend(split(members))
            continue
        local = reduce_embeddings(
            x[members],
            reduction_dim,
            n_neighbors=local_n_neighbors,
            metric=metric,
            random_state=_seed(random_state, 10 + g),
            exact_neighbors_up_to=exact_neighbors_up_to,
        )
        for local_members in _gmm_soft_clusters(
            local,
            threshold=threshold,
            max_clusters=max_clusters,
            random_state=_seed(random_state, 2),
        ):
            clusters.extend(split(members[local_members]))
    return clusters


def _checked_inputs(
    embeddings: np.ndarray | Sequence[Sequence[float]],
    *,
    reduction_dim: int,
    threshold: float,
    max_clusters: int,
    lengths: Sequence[int] | None,
    max_length_in_cluster: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The embeddings as a float32 matrix and the row lengths (ones when not given), validated."""
    x = np.asarray(embeddings, dtype=np.float32)
    if x.size == 0:
        return x.reshape(0, 0), np.zeros(0, dtype=np.int64)
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
    return x, lens


@dataclass(frozen=True)
class _BudgetedClustering:
    """Clusters rows, then splits clusters whose total length is over the budget."""

    x: np.ndarray
    lengths: np.ndarray
    budget: int | None
    max_split_depth: int
    random_state: int | None
    members: Callable[..., list[np.ndarray]]  # _cluster_members, its options but the seed bound

    def clusters(self, idx: np.ndarray, depth: int = 0) -> list[np.ndarray]:
        """Member index arrays (into ``x``) of the clusters of rows ``idx``."""
        if len(idx) == 1:
            return [idx]
        seed = _seed(self.random_state, 100 * depth)
        found = [idx[m] for m in self.members(self.x[idx], random_state=seed)]
        if self.budget is None:
            return found
        out: list[np.ndarray] = []
        for members in found:
            total = int(self.lengths[members].sum())
            if total <= self.budget or len(members) == 1:
                out.append(members)
            elif depth < self.max_split_depth and len(members) < len(idx):
                out.extend(self.clusters(members, depth + 1))
            else:  # clustering cannot shrink it further: split deterministically
                out.extend(
                    members[g]
                    for g in _split_in_order(self.x[members], self.lengths[members], self.budget)
                )
        return out


def _assignment(clusters: list[np.ndarray], n: int) -> list[list[int]]:
    """Each row's sorted cluster ids; duplicate member sets (soft membership can produce them)
    count once, and clusters are numbered by their first member."""
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
    max_global_neighbors: int = MAX_GLOBAL_NEIGHBORS,
    metric: str = "cosine",
    topic_similarity: float | None = DEFAULT_TOPIC_SIMILARITY,
    topic_split_max_rows: int = 2000,
    exact_neighbors_up_to: int | None = EXACT_NEIGHBORS_UP_TO,
    fit_sample: int | None = DEFAULT_FIT_SAMPLE,
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
        max_global_neighbors: Cap on the global UMAP neighbourhood ``sqrt(n - 1)`` (the cost of
            UMAP grows with it: 316 neighbours at 100k rows).
        metric: UMAP input metric.
        topic_similarity: Clusters (and sets too small for UMAP) are split into the groups that
            average-linkage clustering keeps apart at this cosine similarity; ``None`` never
            splits.
        topic_split_max_rows: Larger clusters are not checked (quadratic memory).
        exact_neighbors_up_to: Sets of more rows get their UMAP neighbour graph from an HNSW
            graph (faiss) instead of the exact search, whose cost grows as ``n**2``; ``None``
            (the default): exact at every size.
        fit_sample: Sets of more rows are clustered through a seeded sample of this many rows
            (reduction, mixtures and topic splits fitted on the sample), and every other row
            joins the cluster of most of its nearest sampled rows
            (:mod:`~llama_index_rag_pack.raptor.cluster_propagation`); a cluster still over
            ``max_length_in_cluster`` is clustered again the same way. ``None``: every row is
            fitted.

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
    x, lens = _checked_inputs(
        embeddings,
        reduction_dim=reduction_dim,
        threshold=threshold,
        max_clusters=max_clusters,
        lengths=lengths,
        max_length_in_cluster=max_length_in_cluster,
    )
    if topic_similarity is not None and not -1.0 <= topic_similarity <= 1.0:
        raise ValueError(f"topic_similarity must be in [-1, 1] or None, got {topic_similarity}")
    if max_global_neighbors < 2:
        raise ValueError(f"max_global_neighbors must be >= 2, got {max_global_neighbors}")
    if exact_neighbors_up_to is not None and exact_neighbors_up_to < 0:
        raise ValueError(f"exact_neighbors_up_to must be >= 0 or None, got {exact_neighbors_up_to}")
    if fit_sample is not None and fit_sample <= reduction_dim + 1:
        raise ValueError(f"fit_sample must be > reduction_dim + 1 or None, got {fit_sample}")
    if len(x) == 0:
        return []
    clustering = _BudgetedClustering(
        x=x,
        lengths=lens,
        budget=max_length_in_cluster,
        max_split_depth=max_split_depth,
        random_state=random_state,
        members=functools.partial(
            fit_on_sample,
            fit_sample=fit_sample,
            metric=metric,
            members=functools.partial(
                _cluster_members,
                reduction_dim=reduction_dim,
                threshold=threshold,
                max_clusters=max_clusters,
                local_n_neighbors=local_n_neighbors,
                max_global_neighbors=max_global_neighbors,
                metric=metric,
                topic_similarity=topic_similarity,
                topic_split_max_rows=topic_split_max_rows,
                exact_neighbors_up_to=exact_neighbors_up_to,
            ),
        ),
    )
    return _assignment(clustering.clusters(np.arange(len(x))), len(x))
