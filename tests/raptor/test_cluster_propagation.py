"""Clustering a large set through a sample: the propagation vote (property tests) and
``cluster_embeddings(fit_sample=...)`` end to end."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.raptor import clustering
from llama_index_rag_pack.raptor.cluster_propagation import propagate_clusters, sample_rows
from llama_index_rag_pack.raptor.clustering import cluster_embeddings


def blobs(n_per: int, centers: int, dim: int, spread: float, seed: int):
    rng = np.random.default_rng(seed)
    c = rng.normal(0, 1, (centers, dim)) * 4
    x = np.concatenate([c[i] + rng.normal(0, spread, (n_per, dim)) for i in range(centers)])
    return x.astype(np.float32), np.repeat(np.arange(centers), n_per)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 60),
    dim=st.integers(2, 8),
    share=st.floats(0.05, 1.0),
    n_clusters=st.integers(1, 5),
    seed=st.integers(0, 10_000),
    metric=st.sampled_from(["cosine", "euclidean"]),
)
def test_every_row_joins_a_cluster_and_sampled_rows_keep_theirs(
    n: int, dim: int, share: float, n_clusters: int, seed: int, metric: str
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32) + 0.01
    sample = sample_rows(n, max(1, int(n * share)), seed)
    # soft clusters over the sample: each sampled position in one or two clusters
    first = rng.integers(0, n_clusters, len(sample))
    second = rng.integers(0, n_clusters, len(sample))
    clusters = [
        np.flatnonzero((first == c) | ((second == c) & (rng.random(len(sample)) < 0.3)))
        for c in range(n_clusters)
    ]
    out = propagate_clusters(x, sample, clusters, metric=metric)
    assert len(out) == n_clusters
    joined = np.zeros(n, dtype=int)
    for c, members in enumerate(out):
        assert np.all(np.diff(members) > 0), "sorted, no duplicates"
        joined[members] += 1
        kept = members[np.isin(members, sample)]
        np.testing.assert_array_equal(kept, np.sort(sample[clusters[c]]))
    rest = np.setdiff1d(np.arange(n), sample)
    in_a_cluster = np.isin(sample, np.concatenate(out))
    assert np.all(joined[rest] == 1), "a row outside the sample joins exactly one cluster"
    assert np.all(joined[sample[in_a_cluster]] >= 1)


def test_a_row_joins_the_cluster_of_most_of_its_nearest_sampled_rows() -> None:
    x = np.array(
        [[1.0, 0.0], [0.98, 0.2], [0.95, 0.3], [0.0, 1.0], [0.2, 0.98], [0.99, 0.1], [0.1, 0.99]],
        dtype=np.float32,
    )
    sample = np.array([0, 1, 2, 3, 4])
    out = propagate_clusters(x, sample, [np.array([0, 1, 2]), np.array([3, 4])], k=3)
    assert [c.tolist() for c in out] == [[0, 1, 2, 5], [3, 4, 6]]


def test_sample_rows_is_seeded_distinct_and_sorted() -> None:
    a, b = sample_rows(1000, 100, 3), sample_rows(1000, 100, 3)
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) == 100 and np.all(np.diff(a) > 0)
    assert not np.array_equal(a, sample_rows(1000, 100, 4))


@pytest.mark.slow
def test_sets_above_fit_sample_are_fitted_on_a_sample_and_keep_topics_apart(monkeypatch) -> None:
    x, labels = blobs(150, 4, 64, 0.4, 2)
    fitted: list[int] = []
    real = clustering.reduce_embeddings

    def spy(rows, dim, **kwargs):
        fitted.append(len(rows))
        return real(rows, dim, **kwargs)

    monkeypatch.setattr(clustering, "reduce_embeddings", spy)
    out = cluster_embeddings(x, random_state=0, fit_sample=200)
    assert fitted and max(fitted) == 200, "the reduction never sees more than the sample"
    assert len(out) == len(x) and all(out)
    for cid in {c for row in out for c in row}:
        assert len({labels[i] for i, row in enumerate(out) if cid in row}) == 1
    assert len({c for row in out for c in row}) >= 4
    assert out == cluster_embeddings(x, random_state=0, fit_sample=200), "seeded: reproducible"


@pytest.mark.slow
def test_sets_up_to_fit_sample_are_clustered_as_before() -> None:
    x, _ = blobs(40, 3, 32, 0.3, 1)
    assert cluster_embeddings(x, random_state=0, fit_sample=len(x)) == cluster_embeddings(
        x, random_state=0, fit_sample=None
    )


@pytest.mark.slow
def test_a_sampled_cluster_over_the_budget_is_split_again() -> None:
    x, _ = blobs(200, 2, 32, 0.3, 4)
    out = cluster_embeddings(
        x, random_state=0, fit_sample=100, lengths=[10] * len(x), max_length_in_cluster=600
    )
    sizes = np.bincount([c for row in out for c in row])
    assert sizes.max() * 10 <= 600
    assert all(out)


@pytest.mark.parametrize("value", [0, 5, 11])
def test_a_fit_sample_too_small_for_the_reduction_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match="fit_sample"):
        cluster_embeddings(np.zeros((3, 4)), fit_sample=value)
