"""``RaptorTree``: build, resume and update a RAPTOR tree stored in one Milvus collection.

The class wires the store-agnostic build steps of ``components`` to a :class:`RaptorStore`:
leaves come from :mod:`~llama_index_rag_pack.raptor.raptor_leaves`, summaries from
:mod:`~llama_index_rag_pack.raptor.raptor_summaries`, levels are grown by
:mod:`~llama_index_rag_pack.raptor.raptor_levels` and updated incrementally by
:mod:`~llama_index_rag_pack.raptor.raptor_updates`.

Resuming works because everything is deterministic and idempotent: leaf ids hash the document id,
position and text; clustering is seeded (``random_state``); a summary's id hashes its level and
its children's ids. Building again over the same collection reuses stored leaves (no
re-embedding), reuses stored summaries (no LLM call) and only writes what is missing.

The async methods run the same orchestration in a worker thread while every summary is awaited
(``llm.apredict`` under a semaphore) on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType
from llama_index.core.schema import BaseNode, TextNode

from llama_index_rag_pack.core.errors import EmptyCorpusError
from llama_index_rag_pack.documents.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from llama_index_rag_pack.raptor.build_budget import SpendGate, Spent, check_budget, current_gate
from llama_index_rag_pack.raptor.build_progress import DEFAULT_STORE_EVERY, ProgressFn
from llama_index_rag_pack.raptor.clustering import DEFAULT_TOPIC_SIMILARITY
from llama_index_rag_pack.raptor.raptor_estimate import EstimateResult, estimate_build
from llama_index_rag_pack.raptor.raptor_leaves import make_leaves
from llama_index_rag_pack.raptor.raptor_levels import (
    DEFAULT_MIN_COMPRESSION,
    BuildStats,
    ClusterOptions,
    LevelBuilder,
)
from llama_index_rag_pack.raptor.raptor_store import RaptorStore
from llama_index_rag_pack.raptor.raptor_summaries import (
    DEFAULT_SUMMARY_PROMPT,
    SummariseFn,
    Summariser,
    SummaryBatch,
    SummaryJob,
)
from llama_index_rag_pack.raptor.spend_estimate import RaptorEstimate
from llama_index_rag_pack.raptor.tree_options import check_tree_options
from llama_index_rag_pack.raptor.tree_updates import TreeUpdates

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)


def _spent_fields(usage: Any) -> dict[str, Any]:
    """A usage meter's ``TokenUsage`` as :class:`Spent` fields."""
    names = ("llm_calls", "prompt_tokens", "completion_tokens", "counted")
    return {name: getattr(usage, name) for name in names}


class RaptorTree(TreeUpdates, PromptMixin):
    """A RAPTOR tree in one Milvus collection: build, resume, insert, delete.

    Args:
        vector_store: ``MilvusVectorStore`` holding the tree (all levels).
        embed_model: Embedding model; default the bundled all-MiniLM-L6-v2.
        llm: Writes the summaries; resolved (settings.resolve_llm) only when a summary is needed.
        summary_prompt: Prompt with ``{context_str}``; default :data:`DEFAULT_SUMMARY_PROMPT`.
        max_levels: Highest summary level.
        min_compression: A new level is built only when the level below has at least this many
            times as many nodes as the new level would (its clusters); otherwise the level
            below is the top. Stops levels that would spend LLM calls to merge little (e.g.
            19 nodes into 12 clusters at 2.0); 1: add levels while anything merges.
        max_concurrency: Summaries in flight at once.
        max_retries: Retries per summary (exponential backoff from ``retry_backoff`` seconds).
        retry_backoff: First backoff delay in seconds.
        reduction_dim: UMAP dimension for clustering.
        threshold: Soft-membership probability threshold.
        max_clusters: Exclusive upper bound on clusters per mixture.
        max_length_in_cluster: Token budget of one cluster's text (default: the LLM's context
            window minus room for the prompt and answer, at most 10,000).
        random_state: Seed of the clustering (keep it fixed so interrupted builds resume).
        chunk_size: Leaf chunk size in tokens.
        chunk_overlap: Leaf chunk overlap in tokens.
        new_cluster_similarity: On insert, a new node whose cosine similarity to every cluster
            centroid is below this starts a new cluster.
        topic_similarity: Clusters are split into the groups that average-linkage clustering
            keeps apart at this cosine similarity, so distinct topics never share a summary
            (``None``: never split; see ``cluster_embeddings``).
        show_progress: Progress on stderr: a line per level clustered, bars for embeddings and
            summaries (clusters done of the level's total, LLM calls, ETA).
        progress: Called with a :class:`~llama_index_rag_pack.raptor.build_progress.BuildProgress`
            as levels are clustered and summaries stored (rate and ETA of the level).
        store_every: Summaries are stored in groups of this many as they are written, so a
            killed build loses at most the groups in flight and resumes from the rest.
        max_llm_calls: A build (or resume) sends at most this many summary requests, retries
            included; then it stores what was written and stops (``stats.stopped_at_budget``).
        max_tokens: A build starts no request once its calls spent this many tokens (prompt
            and completion); the requests in flight may take it past.

    Example:
        >>> from llama_index.core import Document
        >>> from llama_index_rag_pack.milvus.connection import open_vector_store
        >>> tree = RaptorTree(  # doctest: +SKIP
        ...     open_vector_store("./raptor.db", "docs_raptor"), llm=my_llm
        ... )
        >>> tree.build([Document(text="...")]).levels  # doctest: +SKIP
        {0: 40, 1: 5, 2: 1}
    """

    def __init__(
        self,
        vector_store: Any,
        *,
        embed_model: BaseEmbedding | str | None = None,
        llm: LLM | str | None = None,
        summary_prompt: BasePromptTemplate | str | None = None,
        max_levels: int = 5,
        min_compression: float = DEFAULT_MIN_COMPRESSION,
        max_concurrency: int = 16,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        reduction_dim: int = 10,
        threshold: float = 0.1,
        max_clusters: int = 50,
        max_length_in_cluster: int | None = None,
        random_state: int | None = 0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        new_cluster_similarity: float = 0.3,
        topic_similarity: float | None = DEFAULT_TOPIC_SIMILARITY,
        show_progress: bool = False,
        progress: ProgressFn | None = None,
        store_every: int = DEFAULT_STORE_EVERY,
        max_llm_calls: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        check_tree_options(
            max_levels=max_levels,
            max_concurrency=max_concurrency,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            reduction_dim=reduction_dim,
            threshold=threshold,
            max_clusters=max_clusters,
            max_length_in_cluster=max_length_in_cluster,
            new_cluster_similarity=new_cluster_similarity,
            topic_similarity=topic_similarity,
            min_compression=min_compression,
            store_every=store_every,
            max_llm_calls=max_llm_calls,
            max_tokens=max_tokens,
        )
        from llama_index_rag_pack.models.settings import resolve_embed_model

        self.store = RaptorStore(vector_store)
        self.embed_model = resolve_embed_model(embed_model)
        self._llm_spec = llm
        self._llm: LLM | None = None if llm is None or isinstance(llm, str) else llm
        if isinstance(summary_prompt, str):
            summary_prompt = PromptTemplate(summary_prompt)
        self.summary_prompt: BasePromptTemplate = summary_prompt or DEFAULT_SUMMARY_PROMPT
        self.max_levels = max_levels
        self.min_compression = min_compression
        self.progress, self.store_every = progress, store_every
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.reduction_dim = reduction_dim
        self.threshold = threshold
        self.max_clusters = max_clusters
        self.max_length_in_cluster = max_length_in_cluster
        self.random_state = random_state
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.new_cluster_similarity = new_cluster_similarity
        self.topic_similarity = topic_similarity
        self.show_progress = show_progress
        self.max_llm_calls, self.max_tokens = max_llm_calls, max_tokens
        self._tokenizer: Callable[[str], list[Any]] | None = None
        self._rng = random.Random(random_state)
        self._memo: dict[str, list[list[int]]] = {}  # the last clustering (estimate -> build)
        self._estimated: EstimateResult | None = None

    # ------------------------------------------------------------------ prompts / parts
    def _get_prompts(self) -> PromptDictType:
        return {"summary_prompt": self.summary_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "summary_prompt" in prompts:
            self.summary_prompt = prompts["summary_prompt"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    @property
    def vector_store(self) -> Any:
        return self.store.vector_store

    @property
    def llm(self) -> LLM:
        """The summarising LLM, resolved on first use."""
        if self._llm is None:
            from llama_index_rag_pack.models.settings import describe_llm, resolve_llm

            self._llm = resolve_llm(self._llm_spec)
            logger.info("RAPTOR summaries by %s", describe_llm(self._llm))
        return self._llm

    @llm.setter
    def llm(self, llm: LLM) -> None:
        self._llm = llm

    def count_tokens(self, text: str) -> int:
        """Length of ``text`` in tokens (LlamaIndex's default tokenizer)."""
        if self._tokenizer is None:
            from llama_index.core.utils import get_tokenizer

            self._tokenizer = get_tokenizer()
        return len(self._tokenizer(text))

    def cluster_budget(self) -> int:
        """Token budget of one cluster's text (what one summary prompt may hold)."""
        if self.max_length_in_cluster is not None:
            return self.max_length_in_cluster
        meta = self.llm.metadata
        room = int(meta.context_window) - max(int(meta.num_output or 0), 256) - 200
        return max(256, min(10_000, room))

    def levels(self) -> dict[int, int]:
        """Nodes per level in the store."""
        return self.store.levels()

    def make_leaves(self, documents: Sequence[BaseNode]) -> list[TextNode]:
        """Chunk ``Document`` objects (other nodes are used as chunks as they are) into level-0
        nodes.

        Raises:
            EmptyCorpusError: no documents, or only blank ones.
        """
        return make_leaves(
            documents,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            count_tokens=self.count_tokens,
        )

    # ------------------------------------------------------------------ wiring
    def _summariser(self) -> Summariser:
        return Summariser(
            self.llm,
            self.summary_prompt,
            max_concurrency=self.max_concurrency,
            max_retries=self.max_retries,
            retry_backoff=self.retry_backoff,
            rng=self._rng,
            show_progress=self.show_progress,
            gate=current_gate(),
        )

    def _summarise(self, jobs: list[SummaryJob]) -> SummaryBatch:
        return self._summariser().summarise(jobs)

    async def _asummarise(self, jobs: list[SummaryJob]) -> SummaryBatch:
        return await self._summariser().asummarise(jobs)

    def _builder(self, summarise: SummariseFn, gate: SpendGate | None = None) -> LevelBuilder:
        """A builder for one operation, with the options as they are now."""
        return LevelBuilder(
            gate=gate or SpendGate(),
            memo=self._memo,
            store=self.store,
            embed_model=self.embed_model,
            summarise_fn=summarise,
            clustering=ClusterOptions(
                reduction_dim=self.reduction_dim,
                threshold=self.threshold,
                max_clusters=self.max_clusters,
                random_state=self.random_state,
                topic_similarity=self.topic_similarity,
            ),
            cluster_budget=self.cluster_budget,
            count_tokens=self.count_tokens,
            max_levels=self.max_levels,
            min_compression=self.min_compression,
            new_cluster_similarity=self.new_cluster_similarity,
            show_progress=self.show_progress,
            progress=self.progress,
            store_every=self.store_every,
        )

    async def _run_async(self, operation: Callable[..., BuildStats], *args: Any) -> BuildStats:
        """Run the sync orchestration in a worker thread; summaries run on this event loop."""
        loop = asyncio.get_running_loop()

        def summarise(jobs: list[SummaryJob]) -> SummaryBatch:
            return asyncio.run_coroutine_threadsafe(self._asummarise(jobs), loop).result()

        return await asyncio.to_thread(operation, *args, summarise)

    # ------------------------------------------------------------------ build
    def _operation(
        self, run: Callable[[LevelBuilder], None], summarise: SummariseFn, budget: bool
    ) -> BuildStats:
        """Run one operation under a usage meter (and the tree's budget, for builds)."""
        from llama_index_rag_pack.core.usage import metered

        if budget:  # the attributes may have been set after construction
            check_budget(self.max_llm_calls, self.max_tokens)
        with metered() as meter:
            gate = SpendGate(
                self.max_llm_calls if budget else None,
                self.max_tokens if budget else None,
                spent=lambda: Spent(**_spent_fields(meter.usage)),
            )
            with gate.active():
                builder = self._builder(summarise, gate)
                run(builder)
                return builder.finish()

    @dispatcher.span
    def _build(self, documents: Sequence[BaseNode] | None, summarise: SummariseFn) -> BuildStats:
        estimated, self._estimated = self._estimated, None

        def run(builder: LevelBuilder) -> None:
            if documents is not None:
                leaves = self.make_leaves(documents)
                for leaf in leaves:  # the estimate embedded them already
                    if leaf.embedding is None and estimated is not None:
                        leaf.embedding = estimated.new_vectors.get(leaf.node_id)
                builder.store_leaves(leaves)
            elif not self.store.exists() or not self.store.level(0):
                raise EmptyCorpusError(
                    f"Collection {self.store.collection_name!r} holds no RAPTOR leaves to build "
                    "on: build from documents first."
                )
            builder.grow(0)

        keys: list[str | None] = []
        stats = self._operation(lambda b: (run(b), keys.append(b.leaf_key)), summarise, True)
        if estimated is not None and keys == [estimated.leaf_key]:
            stats.estimate = estimated.estimate
        return stats

    def estimate(
        self, documents: Sequence[BaseNode] | None = None, *, reuse: bool = True
    ) -> RaptorEstimate:
        """What the next :meth:`build` of ``documents`` (``None``: :meth:`resume`) would spend,
        without any LLM call and without writing anything: summary calls, prompt and summary
        tokens per level (see :mod:`~llama_index_rag_pack.raptor.spend_estimate`). Only the
        remaining work counts: stored summaries are reused, clusters of one carried. Leaves not
        stored yet are embedded (kept for the build). ``reuse=False``: as if the tree were empty.
        A :meth:`build` right after it reuses its clustering of the leaves, and its
        ``BuildStats.estimate`` is this estimate.
        """
        builder = self._builder(self._summarise)
        leaves = self.make_leaves(documents) if documents is not None else None
        self._estimated = estimate_build(self, builder, leaves, reuse=reuse)
        return self._estimated.estimate

    async def aestimate(
        self, documents: Sequence[BaseNode] | None = None, *, reuse: bool = True
    ) -> RaptorEstimate:
        """Async :meth:`estimate` (in a worker thread)."""
        return await asyncio.to_thread(self.estimate, documents, reuse=reuse)

    def build(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Chunk, embed and store ``documents`` as leaves, then build every summary level.

        Building again over the same collection resumes: stored leaves and summaries are reused.

        Raises:
            EmptyCorpusError: no (non-blank) documents.
            RaptorBuildError: summaries failed after retries (the rest is stored; build again).
        """
        return self._build(documents, self._summarise)

    async def abuild(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Async :meth:`build`: summaries via ``await llm.apredict`` on the running loop."""
        return await self._run_async(self._build, documents)

    def resume(self) -> BuildStats:
        """Finish an interrupted build from the leaves already stored (no documents needed)."""
        return self._build(None, self._summarise)

    async def aresume(self) -> BuildStats:
        """Async :meth:`resume`."""
        return await self._run_async(self._build, None)


__all__ = ["RaptorTree"]
