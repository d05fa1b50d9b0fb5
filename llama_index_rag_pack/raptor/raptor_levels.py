"""Growing a RAPTOR tree level by level: cluster a level, summarise each cluster, repeat.

A build goes level by level: cluster the nodes of level ``L`` (``cluster_embeddings``), write one
summary per cluster as a node of level ``L + 1``, embed the summaries, repeat until one cluster
is left, ``max_levels`` is reached, or a level would not compress the one below by
``min_compression`` (``L`` nodes in ``L + 1`` clusters: then ``L`` is the top). A cluster of one
node is not sent to the LLM: its node is carried up unchanged (same text and embedding, marked
``raptor_carried``), so every level still links to the next and the node can still merge with
others higher up; retrieval returns the original, never the carried copy. A summary that failed
is never stored: the level's successful summaries are stored, then :class:`RaptorBuildError` is
raised.

Everything is deterministic, which makes building again resume: clustering is seeded and a
summary's id hashes its level and its children's ids, so summaries already stored are kept and
only the missing ones are written.

:class:`LevelBuilder` reaches the tree's store only through these methods (a
:class:`~llama_index_rag_pack.raptor.raptor_store.RaptorStore` has them): ``exists()``,
``get(ids)``, ``level(level, with_embeddings=...)``, ``level_vectors(level)`` (a level's nodes
and their vectors as one float32 matrix), ``levels()``, ``add(nodes)``,
``upsert(nodes, vectors=None)``, ``membership_writes(...)``, ``delete_ids(ids)`` and
``delete_levels_above(level)``. Each level built opens one instrumentation span
(``LevelBuilder.build_level``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_rag_pack.raptor.build_budget import BudgetReachedError, SpendGate
from llama_index_rag_pack.raptor.build_progress import (
    DEFAULT_STORE_EVERY,
    ProgressFn,
    RaptorBuildError,
    groups_of_writes,
    report,
    summarise_in_groups,
)
from llama_index_rag_pack.raptor.level_clustering import cluster_level, ids_key
from llama_index_rag_pack.raptor.raptor_nodes import (
    CARRIED_KEY,
    CHILD_KEY,
    CLUSTER_KEY,
    LEVEL_KEY,
    PARENT_KEY,
    SOURCE_CLUSTER_KEY,
    TOKENS_KEY,
    mark_raptor_node,
    summary_id,
)
from llama_index_rag_pack.raptor.raptor_summaries import (
    SummariseFn,
    SummaryBatch,
    SummaryJob,
)
from llama_index_rag_pack.raptor.tree_options import BuildStats, ClusterOptions, LevelSpend

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

DEFAULT_MIN_COMPRESSION = 2.0


@dataclass
class LevelBuilder:
    """Builds the summary levels of one tree for one operation (build, insert or delete).

    Attributes:
        store: The tree's nodes (see the module docstring for the methods used).
        embed_model: Embeds new leaves and summaries.
        summarise_fn: Writes the summaries of a list of jobs.
        clustering: How levels are clustered.
        cluster_budget: Token budget of one cluster's text (called when a level is clustered).
        count_tokens: Length of a text in tokens.
        max_levels: Highest summary level.
        new_cluster_similarity: On insert, a node less similar than this to every cluster
            centroid starts a new cluster.
        min_compression: A level is added only when the level below has at least this many
            times as many nodes as it would have (its clusters); otherwise the level below is
            the top.
        show_progress: Progress on stderr: a line per level clustered, tqdm bars for
            embeddings and summaries.
        progress: Called with a :class:`~llama_index_rag_pack.raptor.build_progress.BuildProgress`
            as levels are clustered and summaries stored (rate and ETA of the level).
        store_every: Summaries are stored in groups of this many clusters as they are
            written (:mod:`~llama_index_rag_pack.raptor.build_progress`): a killed build loses
            at most the groups in flight.
        stats: What this operation did so far.
    """

    store: Any
    embed_model: BaseEmbedding
    summarise_fn: SummariseFn
    clustering: ClusterOptions
    cluster_budget: Callable[[], int]
    count_tokens: Callable[[str], int]
    max_levels: int
    new_cluster_similarity: float
    min_compression: float = DEFAULT_MIN_COMPRESSION
    show_progress: bool = False
    progress: ProgressFn | None = None
    store_every: int = DEFAULT_STORE_EVERY
    stats: BuildStats = field(default_factory=BuildStats, init=False)
    #: Whether the tree held nothing but this operation's leaves: no level has rows it did
    #: not write, so each level is read by its known ids and nothing is looked for to delete.
    fresh: bool = field(default=False, init=False)
    known: dict[int, list[str]] = field(default_factory=dict, init=False, repr=False)
    topped: bool = field(default=False, init=False, repr=False)
    started_at: float = field(default_factory=time.perf_counter, init=False, repr=False)
    #: Admits summary requests while the operation's budget lasts, and reads what it spent.
    gate: SpendGate = field(default_factory=SpendGate)
    #: The tree's last clustering (rows digest -> assignment), shared with its estimate.
    memo: dict[str, list[list[int]]] | None = None
    #: Digest of the level-0 ids the operation clustered (matches an estimate to its build).
    leaf_key: str | None = field(default=None, init=False, repr=False)

    def _say(self, message: str) -> None:
        """A progress line on stderr (with ``show_progress``), between the tqdm bars."""
        logger.info(message)
        if self.show_progress:
            from tqdm.auto import tqdm

            tqdm.write(message, file=sys.stderr)

    def finish(self) -> BuildStats:
        """The operation's stats, with the levels now stored and the time it took."""
        self.stats.levels = (
            {lvl: len(ids) for lvl, ids in sorted(self.known.items())}
            if self.fresh and self.topped  # the known levels are the tree
            else self.store.levels()
        )
        self.stats.seconds = time.perf_counter() - self.started_at
        spent = self.gate.spent()
        self.stats.prompt_tokens, self.stats.tokens_counted = spent.prompt_tokens, spent.counted
        self.stats.completion_tokens = spent.completion_tokens
        return self.stats

    def summarise(self, jobs: list[SummaryJob]) -> SummaryBatch:
        """Write the summaries of ``jobs`` (counted in the stats' ``llm_calls``); a job of one
        child gets that child's text, without an LLM call (see :meth:`write_summaries`)."""
        carried = [job for job in jobs if _carries(job)]
        asked = [job for job in jobs if not _carries(job)]
        batch = self.summarise_fn(asked) if asked else SummaryBatch()
        for job in carried:
            batch.outcomes[job.node_id] = job.children[0].get_content()
        self.stats.llm_calls += batch.llm_calls
        self.stats.summaries_carried += len(carried)
        return batch

    # ------------------------------------------------------------------ embeddings and leaves
    def embed(self, nodes: Sequence[TextNode], what: str) -> None:
        """Embed the nodes that have no embedding yet."""
        todo = [n for n in nodes if n.embedding is None]
        if not todo:
            return
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in todo]
        vectors = self.embed_model.get_text_embedding_batch(
            texts, show_progress=self.show_progress and len(texts) > 32
        )
        for node, vec in zip(todo, vectors, strict=True):
            node.embedding = list(vec)
        logger.info("Embedded %d %s", len(todo), what)

    def store_leaves(self, leaves: list[TextNode]) -> None:
        """Embed and store the leaves that are not stored yet."""
        self.fresh = not self.store.count()
        existing = (
            {n.node_id for n in self.store.get([n.node_id for n in leaves])}
            if not self.fresh
            else set()
        )
        new = [n for n in leaves if n.node_id not in existing]
        self.embed(new, "leaves")
        self.store.add(new)
        if self.fresh:
            self.known[0] = list(dict.fromkeys(n.node_id for n in new))
        self.stats.leaves_added += len(new)
        logger.info("Leaves: %d new, %d already stored", len(new), len(leaves) - len(new))

    # ------------------------------------------------------------------ clustering
    def groups(self, nodes: Sequence[TextNode], vectors: Any = None) -> list[list[int]]:
        """Member index lists of the clusters of ``nodes`` (embeddings, or rows of ``vectors``)."""
        if len(nodes) == 0:
            return []
        emb = vectors if vectors is not None else np.asarray([n.embedding for n in nodes], "f4")
        lengths = [
            int(n.metadata.get(TOKENS_KEY) or self.count_tokens(n.get_content())) for n in nodes
        ]
        return self.cluster_rows(emb, lengths)

    def cluster_rows(self, vectors: Any, lengths: Sequence[int]) -> list[list[int]]:
        """Cluster rows as a level is clustered (see :func:`cluster_level`)."""
        return cluster_level(
            vectors, lengths, options=self.clustering, budget=self.cluster_budget(), memo=self.memo
        )

    # ------------------------------------------------------------------ growing levels
    def grow(self, start_level: int) -> None:
        """Build (or finish building) every level above ``start_level``; stop early, with
        ``stats.stopped_at_budget``, when the LLM budget is spent."""
        level = start_level
        while True:
            # the vectors once, as float32
            nodes, vectors = self.store.level_vectors(level, self.known.get(level))
            if level == 0:
                self.leaf_key = ids_key(n.node_id for n in nodes)
            if len(nodes) > 1 and level < self.max_levels:
                self._say(f"RAPTOR level {level}: clustering {len(nodes)} nodes")
                report(self, level + 1, "clustering", 0, len(nodes))
                started = time.perf_counter()
                groups = self.groups(nodes, vectors)
                self._say(
                    f"RAPTOR level {level}: {len(groups)} clusters "
                    f"({time.perf_counter() - started:.1f} s)"
                )
                report(self, level + 1, "clustering", len(groups), len(groups))
            else:
                groups = []
            if self.is_top(level, len(nodes), groups):
                self._finish_top(level, nodes, vectors)
                return
            self.build_level(level + 1, nodes, vectors, groups)
            if self.stats.stopped_at_budget:
                return
            level += 1

    def is_top(self, level: int, n_nodes: int, groups: Sequence[Sequence[int]]) -> bool:
        """Whether ``level`` (``n_nodes`` nodes in ``groups``) is the top: nothing merges, or
        too little (``min_compression``)."""
        if not groups or (len(groups) >= n_nodes and all(len(g) == 1 for g in groups)):
            return True
        if n_nodes < self.min_compression * len(groups):
            self._say(
                f"RAPTOR level {level} is the top: {n_nodes} nodes in {len(groups)} "
                f"clusters compress less than min_compression={self.min_compression:g}"
            )
            return True
        return False

    @dispatcher.span
    def build_level(
        self, level: int, nodes: list[TextNode], vectors: Any, groups: list[list[int]]
    ) -> None:
        """Write level ``level``: one summary per cluster of the level below (``groups`` of its
        ``nodes``), except those already stored; one instrumentation span per level."""
        spent_before, calls_before = self.gate.spent(), self.stats.llm_calls
        targets: dict[str, tuple[int, list[TextNode]]] = {}
        for cid, members in enumerate(groups):
            children = [nodes[i] for i in members]
            if len(members) == 1:  # carried up with its own vector
                children[0].embedding = vectors[members[0]].tolist()
            targets[summary_id(level, [c.node_id for c in children])] = (cid, children)
        existing = self._drop_stale_summaries(level, set(targets))
        jobs = [
            SummaryJob(node_id=sid, level=level, children=children, source_cluster=cid)
            for sid, (cid, children) in targets.items()
            if sid not in existing
        ]
        self.stats.summaries_reused += len(targets) - len(jobs)
        logger.info(
            "Level %d: %d nodes → %d clusters (%d to summarise, %d already stored)",
            *(level - 1, len(nodes), len(targets), len(jobs), len(targets) - len(jobs)),
        )
        # the level's rows learn their parents in the writer thread, a piece beside each
        # group of summaries (a resumed build records them again where they differ)
        pieces = groups_of_writes(len(jobs), self.store_every)
        writes = self.store.membership_writes(nodes, targets, vectors, parts=pieces)
        if jobs:
            summarise_in_groups(self, jobs, level, alongside=writes)
        else:
            for write in writes:
                write()
        self.store.flush()
        if self.fresh and not self.stats.stopped_at_budget:  # its rows are these
            self.known[level] = sorted(targets)
        spent = self.gate.spent() - spent_before
        self.stats.per_level[level] = LevelSpend(
            calls=self.stats.llm_calls - calls_before,
            carried=sum(1 for job in jobs if _carries(job)),
            reused=len(targets) - len(jobs),
            prompt_tokens=spent.prompt_tokens,
            completion_tokens=spent.completion_tokens,
        )

    def _drop_stale_summaries(self, level: int, wanted: set[str]) -> set[str]:
        """Delete the summaries of ``level`` that an earlier clustering made; return its ids."""
        if self.fresh:  # none was made
            return set()
        existing = {n.node_id for n in self.store.level(level)}
        stale = existing - wanted
        if stale:
            logger.info(
                "Level %d: removing %d summaries of an earlier clustering", level, len(stale)
            )
            self.store.delete_ids(stale)
        return existing

    def _finish_top(self, level: int, nodes: Sequence[TextNode], vectors: Any) -> None:
        """``level`` is the top: drop leftovers above it and clear the top nodes' parents."""
        if self.fresh:
            self.known = {lvl: ids for lvl, ids in self.known.items() if lvl <= level}
            self.topped = True
        else:
            self.store.delete_levels_above(level)
        orphaned = [i for i, n in enumerate(nodes) if n.metadata.get(PARENT_KEY)]
        for i in orphaned:
            nodes[i].metadata[PARENT_KEY], nodes[i].metadata[CLUSTER_KEY] = [], []
        self.store.upsert([nodes[i] for i in orphaned], vectors[orphaned] if orphaned else None)

    # ------------------------------------------------------------------ summaries
    def _summary_node(self, job: SummaryJob, text: str, inherited: dict[str, Any]) -> TextNode:
        carried = _carries(job)
        node = TextNode(id_=job.node_id, text=text)
        if carried and job.children[0].embedding is not None:
            node.embedding = list(job.children[0].embedding)  # it stands for its child
        mark_raptor_node(
            node,
            **{
                LEVEL_KEY: job.level,
                CLUSTER_KEY: [],
                PARENT_KEY: [],
                CHILD_KEY: [c.node_id for c in job.children],
                TOKENS_KEY: self.count_tokens(text),
                SOURCE_CLUSTER_KEY: job.source_cluster,
                CARRIED_KEY: carried,
                **inherited,
            },
        )
        return node

    def write_summaries(
        self,
        jobs: list[SummaryJob],
        batch: SummaryBatch,
        *,
        replace: bool,
        inherited: dict[str, dict[str, Any]] | None = None,
    ) -> list[TextNode]:
        """Embed and store the successful summaries; raise after storing when any failed.

        Args:
            jobs: The jobs ``batch`` answered.
            batch: Their outcomes.
            replace: Rewrite nodes already stored (refreshed summaries) instead of adding new ones.
            inherited: Per job id, metadata the new node keeps from the node it replaces.

        Raises:
            RaptorBuildError: some summaries failed (the others are stored).
        """
        done: list[TextNode] = []
        failed: list[tuple[str, BaseException]] = []
        for job in jobs:
            out = batch.outcomes.get(job.node_id)
            if isinstance(out, BudgetReachedError):  # not sent: the next build writes it
                self.stats.stopped_at_budget = True
            elif isinstance(out, str):
                done.append(self._summary_node(job, out, (inherited or {}).get(job.node_id, {})))
            else:
                error = out if isinstance(out, BaseException) else RuntimeError("no result")
                failed.append((job.node_id, error))
        self.embed(done, f"level-{jobs[0].level if jobs else '?'} summaries")
        (self.store.upsert if replace else self.store.add)(done)
        self.stats.summaries_written += len(done)
        if failed:
            first_id, first_err = failed[0]
            raise RaptorBuildError(
                f"{len(failed)} of {len(jobs)} summaries failed after {batch.max_attempts} "
                f"attempts each (first: {first_id}: {type(first_err).__name__}: {first_err}). "
                f"The {len(done)} that succeeded are stored: fix the LLM and build again "
                "(RaptorRetriever.from_documents with the same vector store, RaptorTree.resume(), "
                "or `rag-pack raptor build`) to resume without redoing them."
            ) from first_err
        return done


def _carries(job: SummaryJob) -> bool:
    """A cluster of one: its node is carried up as it is, not summarised."""
    return len(job.children) == 1


__all__ = [
    "DEFAULT_MIN_COMPRESSION",
    "BuildStats",
    "ClusterOptions",
    "LevelBuilder",
    "RaptorBuildError",
]
