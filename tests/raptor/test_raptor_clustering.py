"""RAPTOR clustering: edge cases, property tests, and the BIC search against the exhaustive one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.raptor import dimension_reduction
from llama_index_rag_pack.raptor.clustering import _soft_labels, cluster_embeddings
from llama_index_rag_pack.raptor.dimension_reduction import (
    approximate_neighbors,
    exact_neighbors,
    reduce_embeddings,
)
from llama_index_rag_pack.raptor.mixture_selection import choose_n_clusters, exhaustive_n_clusters


def blobs(
    n_per: int, centers: int, dim: int, spread: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = rng.normal(0, 1, (centers, dim)) * 4
    x = np.concatenate([c[i] + rng.normal(0, spread, (n_per, dim)) for i in range(centers)])
    return x, np.repeat(np.arange(centers), n_per)


# ----------------------------------------------------------------------------- edge cases
def test_empty_input_gives_no_clusters() -> None:
    assert cluster_embeddings(np.zeros((0, 384))) == []
    assert cluster_embeddings([]) == []


@pytest.mark.parametrize("n", [1, 2, 5, 11])
def test_tiny_inputs_on_one_topic_form_one_cluster(n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.normal(size=384) + rng.normal(scale=0.5, size=(n, 384))
    assert cluster_embeddings(x, reduction_dim=10) == [[0]] * n


@pytest.mark.parametrize("per_topic", [1, 2, 4, 5])
def test_tiny_inputs_on_distinct_topics_are_kept_apart(per_topic: int) -> None:
    x, labels = blobs(per_topic, 2, 384, 0.3, per_topic)
    out = cluster_embeddings(x, reduction_dim=10)
    assert all(len(row) == 1 for row in out)
    assert len({row[0] for row in out}) == 2
    for i in range(len(x)):
        for j in range(len(x)):
            assert (out[i] == out[j]) == (labels[i] == labels[j])


def test_topic_similarity_none_keeps_the_reference_behaviour_for_tiny_inputs() -> None:
    x, _ = blobs(4, 2, 384, 0.3, 0)
    assert cluster_embeddings(x, topic_similarity=None) == [[0]] * 8


def _true_distances(x: np.ndarray, metric: str) -> np.ndarray:
    if metric == "cosine":
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        return 1.0 - unit @ unit.T
    return np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    k=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    metric=st.sampled_from(["cosine", "euclidean"]),
)
def test_exact_neighbors_are_the_brute_force_neighbours(
    n: int, k: int, seed: int, metric: str
) -> None:
    x = np.random.default_rng(seed).normal(size=(n, 16)).astype(np.float32)
    found = exact_neighbors(x, k, metric)
    assert found is not None
    idx, dist = found
    k = min(k, n)
    assert idx.shape == dist.shape == (n, k)
    full = _true_distances(x, metric)
    expected = np.sort(full, axis=1)[:, :k]
    np.testing.assert_allclose(dist, expected, atol=1e-4)
    np.testing.assert_allclose(np.take_along_axis(full, idx, axis=1), expected, atol=1e-4)
    assert np.all(np.diff(dist, axis=1) >= -1e-6), "neighbours come nearest first"
    assert np.all(idx[:, 0] == np.arange(n)), "every row is its own nearest neighbour"


def test_exact_neighbors_leave_zero_rows_and_other_metrics_to_umap() -> None:
    x = np.eye(5, 8)
    assert exact_neighbors(np.vstack([x, np.zeros(8)]), 3) is None
    assert exact_neighbors(x, 3, metric="manhattan") is None


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 120),
    k=st.integers(1, 15),
    seed=st.integers(0, 10_000),
    metric=st.sampled_from(["cosine", "euclidean"]),
)
def test_approximate_neighbors_are_real_neighbours_nearest_first(
    n: int, k: int, seed: int, metric: str
) -> None:
    x, _ = blobs(n, 1, 24, 1.0, seed)
    found = approximate_neighbors(x, k, metric, deterministic=True)
    assert found is not None
    idx, dist = found
    k = min(k, n)
    full = _true_distances(x, metric)
    assert idx.shape == dist.shape == (n, k)
    assert np.all(idx[:, 0] == np.arange(n)), "every row is its own nearest neighbour"
    assert all(len(set(row)) == k for row in idx.tolist()), "no neighbour twice, no -1"
    np.testing.assert_allclose(dist, np.take_along_axis(full, idx, axis=1), atol=1e-4)
    assert np.all(np.diff(dist[:, 1:], axis=1) >= -1e-6), "neighbours come nearest first"


@pytest.mark.slow
def test_approximate_neighbors_find_the_exact_neighbours_of_real_structure() -> None:
    x, _ = blobs(300, 8, 64, 1.5, 3)
    exact_idx, _ = exact_neighbors(x, 20)
    idx, _ = approximate_neighbors(x, 20, deterministic=True)
    recall = np.mean([len(set(a) & set(b)) / 20 for a, b in zip(idx, exact_idx, strict=True)])
    assert recall >= 0.95
    again, _ = approximate_neighbors(x, 20, deterministic=True)
    assert np.array_equal(idx, again), "the one-thread build is reproducible"


def test_approximate_neighbors_handle_duplicates_and_bad_input() -> None:
    x = np.vstack([np.tile(np.ones(16), (150, 1)), np.eye(16)])
    idx, dist = approximate_neighbors(x, 10)
    assert np.all(idx[:, 0] == np.arange(len(x)))
    assert np.all(idx >= 0) and np.all(dist >= 0)
    assert approximate_neighbors(np.vstack([x, np.zeros(16)]), 3) is None
    assert approximate_neighbors(x, 3, metric="manhattan") is None


def test_rows_the_graph_search_misses_are_searched_exactly(monkeypatch) -> None:
    faiss = pytest.importorskip("faiss")
    real = faiss.IndexHNSWFlat.search

    def lossy(self, x, k, **kwargs):  # the graph returns -1 where it found fewer than k rows
        scores, idx = real(self, x, k, **kwargs)
        idx[::7, -3:] = -1
        return scores, idx

    monkeypatch.setattr(faiss.IndexHNSWFlat, "search", lossy)
    x, _ = blobs(30, 3, 32, 1.0, 4)
    idx, dist = approximate_neighbors(x, 8, deterministic=True)
    exact_idx, exact_dist = exact_neighbors(x, 8)
    assert np.all(idx >= 0)
    np.testing.assert_array_equal(idx[::7], exact_idx[::7])
    np.testing.assert_allclose(dist[::7], exact_dist[::7], atol=1e-6)


@pytest.mark.slow
def test_large_sets_take_the_approximate_graph_and_stay_pure(monkeypatch) -> None:
    calls: list[int] = []
    real = dimension_reduction.approximate_neighbors

    def spy(x, k, metric="cosine", **kwargs):
        calls.append(len(x))
        return real(x, k, metric, **kwargs)

    monkeypatch.setattr(dimension_reduction, "approximate_neighbors", spy)
    x, labels = blobs(40, 4, 96, 0.3, 11)
    out = cluster_embeddings(x, random_state=0, exact_neighbors_up_to=100)
    assert calls and max(calls) == len(x), "the global graph over 160 rows is approximate"
    assert all(n > 100 for n in calls), "smaller (local) sets stay exact"
    for cid in {c for row in out for c in row}:
        assert len({labels[i] for i, row in enumerate(out) if cid in row}) == 1
    assert out == cluster_embeddings(x, random_state=0, exact_neighbors_up_to=100)
    calls.clear()
    cluster_embeddings(x, random_state=0, exact_neighbors_up_to=None)
    assert calls == [], "None keeps every graph exact"


def test_identical_vectors_do_not_crash_and_share_one_cluster() -> None:
    x = np.tile(np.random.default_rng(0).normal(size=384), (200, 1))
    assert cluster_embeddings(x) == [[0]] * 200


def test_identical_vectors_over_the_budget_are_split_deterministically() -> None:
    x = np.ones((30, 16))
    out = cluster_embeddings(x, lengths=[10] * 30, max_length_in_cluster=100)
    sizes = np.bincount([c for row in out for c in row])
    assert list(sizes) == [10, 10, 10]
    assert out == cluster_embeddings(x, lengths=[10] * 30, max_length_in_cluster=100)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"threshold": 1.0}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"reduction_dim": 0}, "reduction_dim"),
        ({"max_clusters": 1}, "max_clusters"),
        ({"lengths": [1, 2]}, "lengths"),
        ({"max_length_in_cluster": 0}, "max_length_in_cluster"),
        ({"exact_neighbors_up_to": -1}, "exact_neighbors_up_to"),
    ],
)
def test_bad_arguments_name_the_value(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cluster_embeddings(np.zeros((3, 4)), **kwargs)


def test_bad_shapes_and_values_are_rejected() -> None:
    with pytest.raises(ValueError, match="2-D"):
        cluster_embeddings(np.zeros(5))
    bad = np.zeros((4, 3))
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cluster_embeddings(bad)


def test_reduce_embeddings_falls_back_to_pca_for_tiny_or_constant_input() -> None:
    out = reduce_embeddings(np.ones((3, 8)), 10)
    assert out.shape == (3, 1) and np.all(out == 0)
    x = np.random.default_rng(0).normal(size=(3, 8))
    assert reduce_embeddings(x, 10).shape == (3, 1)


# ----------------------------------------------------------------------------- properties
@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=0, max_value=12),
    seed=st.integers(min_value=0, max_value=10_000),
    budget=st.integers(min_value=1, max_value=60),
    duplicate=st.booleans(),
)
def test_every_row_is_assigned_and_clusters_fit_the_budget(
    n: int, seed: int, budget: int, duplicate: bool
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6))
    if duplicate and n > 1:
        x[1:] = x[0]
    lengths = rng.integers(1, 20, size=n).tolist()
    out = cluster_embeddings(x, reduction_dim=12, lengths=lengths, max_length_in_cluster=budget)
    assert len(out) == n
    assert all(row for row in out), "every row belongs to at least one cluster"
    ids = sorted({c for row in out for c in row})
    assert ids == list(range(len(ids))), "cluster ids are 0..k-1"
    for cid in ids:
        members = [i for i, row in enumerate(out) if cid in row]
        assert len(members) == 1 or sum(lengths[i] for i in members) <= budget


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=10_000), centers=st.integers(min_value=2, max_value=6)
)
def test_bic_search_uses_fewer_fits_and_finds_the_true_number_of_blobs(
    seed: int, centers: int
) -> None:
    rng = np.random.default_rng(seed)
    angles = 2 * np.pi * np.arange(centers) / centers + rng.uniform(0, 1)
    x = np.concatenate(
        [[10 * np.cos(a), 10 * np.sin(a)] + rng.normal(0, 0.3, (30, 2)) for a in angles]
    )
    fast = choose_n_clusters(x, max_clusters=20, random_state=0)
    assert fast.n_fits < 19
    assert centers in fast.bics, "the true k is among the fits"
    assert fast.bic <= fast.bics[centers] and abs(fast.k - centers) <= 1
    assert fast.bic == pytest.approx(fast.model.bic(x))


# ----------------------------------------------------------------------------- against references
@pytest.mark.slow
def test_bic_search_matches_fitting_every_k() -> None:
    x, _ = blobs(20, 5, 3, 0.3, 3)
    fast = choose_n_clusters(x, max_clusters=20, random_state=0)
    full = exhaustive_n_clusters(x, max_clusters=20, random_state=0)
    assert full.n_fits == 19 and fast.n_fits < 12
    assert fast.k == full.k == 5
    assert fast.bic == pytest.approx(full.bic)
    assert fast.bics.items() <= full.bics.items(), "same fits, same BIC values"


def test_soft_labels_keep_rows_below_the_threshold() -> None:
    # the reference drops a row whose probabilities are all <= threshold; we keep its argmax
    probs = np.array([[0.5, 0.3, 0.2], [0.05, 0.05, 0.9], [0.34, 0.33, 0.33]])
    labels = _soft_labels(probs, 0.4)
    assert [list(row) for row in labels] == [[0], [2], [0]]
    assert [list(row) for row in _soft_labels(probs, 0.1)] == [[0, 1, 2], [2], [0, 1, 2]]


@pytest.mark.slow
def test_umap_path_separates_blobs_and_is_reproducible() -> None:
    x, labels = blobs(15, 3, 384, 0.2, 0)
    # identical vectors at different rows keep their own memberships (no O(N·N·d) value matching)
    x = np.concatenate([x, x[:3]])
    labels = np.concatenate([labels, labels[:3]])
    out = cluster_embeddings(x, random_state=7)
    assert len(out) == len(x) and all(out)
    for cid in {c for row in out for c in row}:
        members = [i for i, row in enumerate(out) if cid in row]
        assert len({labels[i] for i in members}) == 1, (
            "a cluster never mixes two well-separated blobs"
        )
    assert out == cluster_embeddings(x, random_state=7), (
        "seeded clustering is reproducible (resumable builds)"
    )


@pytest.mark.slow
def test_budget_splits_big_clusters_recursively() -> None:
    x, _ = blobs(16, 2, 32, 0.3, 5)
    lengths = [100] * len(x)
    out = cluster_embeddings(
        x, reduction_dim=3, lengths=lengths, max_length_in_cluster=500, random_state=0
    )
    for cid in {c for row in out for c in row}:
        assert sum(100 for row in out if cid in row) <= 500
