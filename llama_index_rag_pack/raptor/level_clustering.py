"""Clustering one level of a RAPTOR tree into member lists, remembering the last result so that
an estimate followed by the build it estimated clusters the chunks once."""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from llama_index_rag_pack.raptor.clustering import cluster_embeddings

__all__ = ["cluster_level", "ids_key"]

#: Clusterings a tree keeps (a level's is about as large as its rows' cluster ids).
_MEMO_SIZE = 16


def ids_key(ids: Iterable[str]) -> str:
    """Digest of a level's node ids, in their order."""
    return hashlib.sha1("\n".join(ids).encode()).hexdigest()


def _memo_key(emb: np.ndarray, lengths: Sequence[int], budget: int, options: Any) -> str:
    digest = hashlib.sha1(np.ascontiguousarray(emb, dtype=np.float32).tobytes())
    digest.update(np.asarray(lengths, dtype=np.int64).tobytes())
    digest.update(repr((emb.shape, budget, options)).encode())
    return digest.hexdigest()


def cluster_level(
    vectors: Any,
    lengths: Sequence[int],
    *,
    options: Any,
    budget: int,
    memo: dict[str, list[list[int]]] | None = None,
) -> list[list[int]]:
    """Member index lists (numbered by cluster id) of rows ``vectors`` whose texts have
    ``lengths`` tokens, clustered with ``options`` (a ``ClusterOptions``) under the cluster
    token ``budget``. With a seeded clustering, ``memo`` keeps the last results (an estimate's
    levels, the first of which a build right after it clusters again): the same rows with the same
    options are not clustered twice."""
    emb = np.asarray(vectors, dtype=np.float32)
    key = _memo_key(emb, lengths, budget, options)
    assignment = memo.get(key) if memo is not None else None
    if assignment is None:
        assignment = cluster_embeddings(
            emb,
            reduction_dim=options.reduction_dim,
            threshold=options.threshold,
            max_clusters=options.max_clusters,
            random_state=options.random_state,
            topic_similarity=options.topic_similarity,
            lengths=lengths,
            max_length_in_cluster=budget,
        )
        if memo is not None and options.random_state is not None:
            while len(memo) >= _MEMO_SIZE:  # the oldest goes: every level of an estimate fits
                memo.pop(next(iter(memo)))
            memo[key] = assignment
    n_clusters = 1 + max((c for row in assignment for c in row), default=-1)
    groups: list[list[int]] = [[] for _ in range(n_clusters)]
    for i, row in enumerate(assignment):
        for c in row:
            groups[c].append(i)
    return [g for g in groups if g]
