"""Options and results of a :class:`~llama_index_rag_pack.raptor.raptor_tree.RaptorTree`
operation: how levels are clustered, what a build did, and the options' checks (each out of
range is one ConfigurationError line naming it, raised before anything loads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.raptor.build_budget import check_budget
from llama_index_rag_pack.raptor.clustering import DEFAULT_TOPIC_SIMILARITY

__all__ = ["BuildStats", "ClusterOptions", "LevelSpend", "check_tree_options"]


@dataclass
class LevelSpend:
    """What one summary level of an operation spent.

    Attributes:
        calls: Summary requests sent (retries included).
        carried: Clusters of one carried up (no call).
        reused: Summaries already stored and kept.
        prompt_tokens: Tokens sent by the level's calls.
        completion_tokens: Tokens the LLM wrote for them.
    """

    calls: int = 0
    carried: int = 0
    reused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class BuildStats:
    """What a build, insert or delete did.

    Attributes:
        levels: Nodes per level after the operation.
        llm_calls: Summary requests sent (retries included).
        summaries_written: Summaries written (new or refreshed), carried ones included.
        summaries_carried: Clusters of one carried up unchanged (no LLM call).
        summaries_reused: Summaries already stored and kept (resumed builds).
        leaves_added: New leaves stored.
        leaves_removed: Leaves deleted.
        seconds: Wall time.
        prompt_tokens: Tokens the summary calls sent (the usage meter's figures).
        completion_tokens: Tokens the LLM wrote.
        tokens_counted: The LLM reported no usage for some calls: counted with the tokenizer.
        per_level: Per summary level built, what it spent.
        stopped_at_budget: The build stopped at ``max_llm_calls`` / ``max_tokens``: what was
            written is stored, build again to go on (``complete`` is then False).
        estimate: The :class:`~llama_index_rag_pack.raptor.spend_estimate.RaptorEstimate` that
            ``RaptorTree.estimate()`` made of this build just before it, if any.
    """

    levels: dict[int, int] = field(default_factory=dict)
    llm_calls: int = 0
    summaries_written: int = 0
    summaries_carried: int = 0
    summaries_reused: int = 0
    leaves_added: int = 0
    leaves_removed: int = 0
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_counted: bool = False
    per_level: dict[int, LevelSpend] = field(default_factory=dict)
    stopped_at_budget: bool = False
    estimate: Any = None

    @property
    def complete(self) -> bool:
        """Whether the operation finished (it did not stop at its budget)."""
        return not self.stopped_at_budget

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ClusterOptions:
    """How a level is clustered (the options of
    :func:`~llama_index_rag_pack.raptor.clustering.cluster_embeddings`).

    Attributes:
        reduction_dim: UMAP dimension.
        threshold: Soft-membership probability threshold.
        max_clusters: Exclusive upper bound on clusters per mixture.
        random_state: Seed (keep it fixed so interrupted builds resume).
        topic_similarity: Clusters are split where average linkage keeps groups apart at this
            cosine similarity (``None``: never).
    """

    reduction_dim: int
    threshold: float
    max_clusters: int
    random_state: int | None
    topic_similarity: float | None = DEFAULT_TOPIC_SIMILARITY


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
    max_llm_calls: int | None = None,
    max_tokens: int | None = None,
) -> None:
    """Raise :class:`ConfigurationError` naming the first option out of range."""
    check_budget(max_llm_calls, max_tokens)
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
