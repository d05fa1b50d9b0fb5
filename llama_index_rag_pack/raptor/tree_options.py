"""Checks of :class:`~llama_index_rag_pack.raptor.raptor_tree.RaptorTree`'s options: each out of
range is one ConfigurationError line naming it, raised before anything loads."""

from __future__ import annotations

from llama_index_rag_pack.core.errors import ConfigurationError, check_count

__all__ = ["check_tree_options"]


def check_tree_options(
    *,
    max_levels: int,
    max_concurrency: int,
    max_retries: int,
    retry_backoff: float,
    reduction_dim: int,
    threshold: float,
    max_clusters: int,
    max_length_in_cluster: int | None,
    new_cluster_similarity: float,
    topic_similarity: float | None,
    min_compression: float,
    store_every: int,
) -> None:
    """Raise :class:`ConfigurationError` naming the first option out of range."""
    for name, value, low in (
        ("max_levels", max_levels, 1),
        ("max_concurrency", max_concurrency, 1),
        ("max_retries", max_retries, 0),
        ("reduction_dim", reduction_dim, 1),
        ("max_clusters", max_clusters, 2),
        ("store_every", store_every, 1),
    ):
        check_count(name, value, minimum=low)
    if not 0.0 <= threshold < 1.0:
        raise ConfigurationError(f"threshold must be in [0, 1), got {threshold!r}")
    if retry_backoff < 0:
        raise ConfigurationError(f"retry_backoff must be >= 0 seconds, got {retry_backoff!r}")
    if max_length_in_cluster is not None and max_length_in_cluster <= 0:
        raise ConfigurationError(
            f"max_length_in_cluster must be > 0, got {max_length_in_cluster!r}"
        )
    if not -1.0 <= new_cluster_similarity <= 1.0:
        raise ConfigurationError(
            f"new_cluster_similarity must be in [-1, 1], got {new_cluster_similarity!r}"
        )
    if topic_similarity is not None and not -1.0 <= topic_similarity <= 1.0:
        raise ConfigurationError(
            f"topic_similarity must be in [-1, 1] or None, got {topic_similarity!r}"
        )
    if not min_compression >= 1.0:  # also rejects NaN
        raise ConfigurationError(
            f"min_compression must be >= 1 (1: add levels while anything merges), "
            f"got {min_compression!r}"
        )
