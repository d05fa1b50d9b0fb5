"""Building, resuming and updating RAPTOR trees stored in Milvus.

A build goes level by level: cluster the nodes of level ``L`` (``cluster_embeddings``), write one
LLM summary per cluster as a node of level ``L + 1``, embed the summaries, repeat until one
cluster is left or ``max_levels`` is reached. Summaries of a level run concurrently (a thread
pool in the sync API, ``asyncio.gather`` under a semaphore in the async one), each retried with
exponential backoff; a summary that still fails is never stored, and the build raises
:class:`RaptorBuildError` after storing every summary that succeeded.

Resuming works because everything is deterministic and idempotent: leaf ids hash the document id,
position and text; clustering is seeded (``random_state``); a summary's id hashes its level and
its children's ids. Building again over the same collection reuses stored leaves (no
re-embedding), reuses stored summaries (no LLM call) and only writes what is missing.

Incremental ``insert`` places new leaves into the existing cluster with the nearest centroid (or
clusters them on their own when nothing is close), re-summarises only the clusters that changed
and walks those changes up to the root. ``delete`` removes a document's leaves and refreshes the
summaries above them.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeRelationship, TextNode

from llama_index_rag_pack.components.ingest import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    split_documents,
)
from llama_index_rag_pack.core.clustering import cluster_embeddings
from llama_index_rag_pack.core.errors import ConfigurationError, EmptyCorpusError, RagPackError
from llama_index_rag_pack.storage.raptor_store import (
    CHILD_KEY,
    CLUSTER_KEY,
    LEVEL_KEY,
    PARENT_KEY,
    TOKENS_KEY,
    RaptorStore,
    mark_raptor_node,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

SOURCE_CLUSTER_KEY = "raptor_source_cluster"

DEFAULT_SUMMARY_PROMPT = PromptTemplate(
    "Write a summary of the following text, including as many key details as possible "
    "(names, numbers, dates, places).\n\n{context_str}\n\nSummary:"
)

_PREAMBLE_RE = re.compile(
    r"^\s*(?:(?:sure|certainly|okay|ok)[,!.]?\s*)?(?:here(?:'s| is)\b[^\n:]*:|summary\s*:)\s*",
    re.IGNORECASE,
)


class RaptorBuildError(RagPackError, RuntimeError):
    """Some summaries failed after all retries; what succeeded is stored, build again to resume."""


@dataclass
class BuildStats:
    """What a build, insert or delete did.

    Attributes:
        levels: Nodes per level after the operation.
        llm_calls: Summary requests sent (retries included).
        summaries_written: Summaries written (new or refreshed).
        summaries_reused: Summaries already stored and kept (resumed builds).
        leaves_added: New leaves stored.
        leaves_removed: Leaves deleted.
        seconds: Wall time.
    """

    levels: dict[int, int] = field(default_factory=dict)
    llm_calls: int = 0
    summaries_written: int = 0
    summaries_reused: int = 0
    leaves_added: int = 0
    leaves_removed: int = 0
    seconds: float = 0.0


@dataclass
class _Job:
    node_id: str
    level: int
    children: list[TextNode]
    source_cluster: int


SummariseFn = Callable[[list[_Job]], dict[str, "str | BaseException"]]


def clean_summary(text: str) -> str:
    """Strip chatty preambles ("Here is a summary:"), ``Summary:`` labels and wrapping quotes."""
    text = (text or "").strip()
    text = _PREAMBLE_RE.sub("", text, count=1).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def summary_id(level: int, child_ids: Sequence[str]) -> str:
    """Deterministic id of the summary of ``child_ids`` at ``level`` (what makes builds
    resumable)."""
    digest = hashlib.sha1(("\n".join(sorted(child_ids)) + f"\n@{level}").encode()).hexdigest()[:24]
    return f"raptor-{level}-{digest}"


def leaf_id(ref_doc_id: str | None, position: int, text: str) -> str:
    digest = hashlib.sha1(f"{ref_doc_id}\x00{position}\x00{text}".encode()).hexdigest()[:24]
    return f"raptor-0-{digest}"


class RaptorTree(PromptMixin):
    """A RAPTOR tree in one Milvus collection: build, resume, insert, delete.

    Args:
        vector_store: ``MilvusVectorStore`` holding the tree (all levels).
        embed_model: Embedding model; default the bundled all-MiniLM-L6-v2.
        llm: Writes the summaries; resolved (settings.resolve_llm) only when a summary is needed.
        summary_prompt: Prompt with ``{context_str}``; default :data:`DEFAULT_SUMMARY_PROMPT`.
        max_levels: Highest summary level.
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
        show_progress: tqdm bars for embeddings and summaries.

    Example:
        >>> from llama_index.core import Document
        >>> from llama_index_rag_pack.storage.milvus import open_vector_store
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
        show_progress: bool = False,
    ) -> None:
        for name, value, low in (
            ("max_levels", max_levels, 1),
            ("max_concurrency", max_concurrency, 1),
            ("max_retries", max_retries, 0),
            ("reduction_dim", reduction_dim, 1),
            ("max_clusters", max_clusters, 2),
        ):
            if not isinstance(value, int) or value < low:
                raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")
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
        from llama_index_rag_pack.components.settings import resolve_embed_model

        self.store = RaptorStore(vector_store)
        self.embed_model = resolve_embed_model(embed_model)
        self._llm_spec = llm
        self._llm: LLM | None = None if llm is None or isinstance(llm, str) else llm
        if isinstance(summary_prompt, str):
            summary_prompt = PromptTemplate(summary_prompt)
        self.summary_prompt: BasePromptTemplate = summary_prompt or DEFAULT_SUMMARY_PROMPT
        self.max_levels = max_levels
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
        self.show_progress = show_progress
        self._tokenizer: Callable[[str], list[Any]] | None = None
        self._calls = 0
        self._calls_lock = threading.Lock()
        self._rng = random.Random(random_state)

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
            from llama_index_rag_pack.components.settings import describe_llm, resolve_llm

            self._llm = resolve_llm(self._llm_spec)
            logger.info("RAPTOR summaries by %s", describe_llm(self._llm))
        return self._llm

    @llm.setter
    def llm(self, llm: LLM) -> None:
        self._llm = llm

    def count_tokens(self, text: str) -> int:
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

    # ------------------------------------------------------------------ leaves
    def make_leaves(self, documents: Sequence[BaseNode]) -> list[TextNode]:
        """Chunk ``Document`` objects (other nodes are used as chunks as they are) into level-0
        nodes.

        Raises:
            EmptyCorpusError: no documents, or only blank ones.
        """
        documents = list(documents or [])
        if not documents:
            raise EmptyCorpusError(
                "No documents given: pass at least one non-empty Document to build a RAPTOR tree."
            )
        docs, chunks = [], []
        for d in documents:
            if not isinstance(d, BaseNode):
                raise ConfigurationError(
                    f"Expected LlamaIndex Documents or nodes, got {type(d).__name__}."
                )
            if not (d.get_content() or "").strip():
                logger.warning("Skipping blank document %s", d.node_id)
                continue
            (docs if isinstance(d, Document) else chunks).append(d)
        if not docs and not chunks:
            raise EmptyCorpusError(
                f"All {len(documents)} documents are blank: nothing to build a RAPTOR tree from."
            )
        if docs:
            chunks.extend(
                split_documents(docs, chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap)
            )
        leaves: dict[str, TextNode] = {}
        renamed: dict[str, str] = {}
        positions: dict[str | None, int] = {}
        for chunk in chunks:
            ref = chunk.ref_doc_id
            pos = positions.get(ref, 0)
            positions[ref] = pos + 1
            text = chunk.get_content(metadata_mode=MetadataMode.NONE)
            new_id = leaf_id(ref, pos, text)
            renamed[chunk.node_id] = new_id
            node = TextNode(
                id_=new_id,
                text=text,
                metadata=dict(chunk.metadata),
                excluded_embed_metadata_keys=list(chunk.excluded_embed_metadata_keys),
                excluded_llm_metadata_keys=list(chunk.excluded_llm_metadata_keys),
                relationships=dict(chunk.relationships),
                start_char_idx=getattr(chunk, "start_char_idx", None),
                end_char_idx=getattr(chunk, "end_char_idx", None),
                embedding=chunk.embedding,
            )
            mark_raptor_node(
                node,
                **{
                    LEVEL_KEY: 0,
                    CLUSTER_KEY: [],
                    PARENT_KEY: [],
                    CHILD_KEY: [],
                    TOKENS_KEY: self.count_tokens(text),
                },
            )
            leaves[new_id] = node
        for node in leaves.values():  # keep prev/next links pointing at the renamed chunks
            for rel in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT):
                info = node.relationships.get(rel)
                if info is not None and getattr(info, "node_id", None) in renamed:
                    info = info.model_copy()
                    info.node_id = renamed[info.node_id]
                    node.relationships[rel] = info
        return list(leaves.values())

    def _embed(self, nodes: Sequence[TextNode], what: str) -> None:
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

    def _store_leaves(self, leaves: list[TextNode], stats: BuildStats) -> None:
        existing = (
            {n.node_id for n in self.store.get([n.node_id for n in leaves])}
            if self.store.exists()
            else set()
        )
        new = [n for n in leaves if n.node_id not in existing]
        self._embed(new, "leaves")
        self.store.add(new)
        stats.leaves_added += len(new)
        logger.info("Leaves: %d new, %d already stored", len(new), len(leaves) - len(new))

    # ------------------------------------------------------------------ summaries
    def _prompt_for(self, job: _Job) -> str:
        return "\n\n".join(
            c.get_content(metadata_mode=MetadataMode.LLM).strip() for c in job.children
        )

    def _count_call(self) -> None:
        with self._calls_lock:
            self._calls += 1

    def _backoff(self, attempt: int) -> float:
        return self.retry_backoff * (2**attempt) * (0.5 + self._rng.random())

    def _summarise_sync(self, jobs: list[_Job]) -> dict[str, str | BaseException]:
        from tqdm.auto import tqdm

        def one(job: _Job) -> str:
            last: BaseException | None = None
            for attempt in range(self.max_retries + 1):
                self._count_call()
                try:
                    text = clean_summary(
                        self.llm.predict(self.summary_prompt, context_str=self._prompt_for(job))
                    )
                    if text:
                        return text
                    last = ValueError("the LLM returned an empty summary")
                except Exception as e:  # any provider error: retry, then report
                    last = e
                logger.warning("Summary %s attempt %d failed: %s", job.node_id, attempt + 1, last)
                if attempt < self.max_retries:
                    time.sleep(self._backoff(attempt))
            raise last  # type: ignore[misc]

        results: dict[str, str | BaseException] = {}
        if not jobs:
            return results
        bar = tqdm(
            total=len(jobs),
            desc=f"RAPTOR level {jobs[0].level} summaries",
            disable=not self.show_progress,
        )
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(jobs))) as pool:
            # a copy of this thread's context per job keeps the LLM spans under the build's span
            futures = {pool.submit(contextvars.copy_context().run, one, job): job for job in jobs}
            for fut in as_completed(futures):
                job = futures[fut]
                try:
                    results[job.node_id] = fut.result()
                except Exception as e:
                    results[job.node_id] = e
                bar.update(1)
        bar.close()
        return results

    async def _asummarise(self, jobs: list[_Job]) -> dict[str, str | BaseException]:
        from tqdm.auto import tqdm

        semaphore = asyncio.Semaphore(self.max_concurrency)
        bar = tqdm(
            total=len(jobs),
            desc=f"RAPTOR level {jobs[0].level if jobs else 0} summaries",
            disable=not self.show_progress or not jobs,
        )

        async def one(job: _Job) -> str:
            last: BaseException | None = None
            for attempt in range(self.max_retries + 1):
                async with semaphore:
                    self._count_call()
                    try:
                        reply = await self.llm.apredict(
                            self.summary_prompt, context_str=self._prompt_for(job)
                        )
                        text = clean_summary(reply)
                        if text:
                            bar.update(1)
                            return text
                        last = ValueError("the LLM returned an empty summary")
                    except Exception as e:
                        last = e
                logger.warning("Summary %s attempt %d failed: %s", job.node_id, attempt + 1, last)
                if attempt < self.max_retries:
                    await asyncio.sleep(self._backoff(attempt))
            bar.update(1)
            raise last  # type: ignore[misc]

        outcomes = await asyncio.gather(*(one(job) for job in jobs), return_exceptions=True)
        bar.close()
        return {job.node_id: out for job, out in zip(jobs, outcomes, strict=True)}

    def _write_summaries(
        self,
        jobs: list[_Job],
        results: dict[str, str | BaseException],
        stats: BuildStats,
        *,
        replace: bool,
        inherited: dict[str, dict[str, Any]] | None = None,
    ) -> list[TextNode]:
        """Embed and store the successful summaries; raise after storing when any failed."""
        done: list[TextNode] = []
        failed: list[tuple[str, BaseException]] = []
        for job in jobs:
            out = results.get(job.node_id)
            if isinstance(out, str):
                node = TextNode(id_=job.node_id, text=out)
                mark_raptor_node(
                    node,
                    **{
                        LEVEL_KEY: job.level,
                        CLUSTER_KEY: [],
                        PARENT_KEY: [],
                        CHILD_KEY: [c.node_id for c in job.children],
                        TOKENS_KEY: self.count_tokens(out),
                        SOURCE_CLUSTER_KEY: job.source_cluster,
                        **(inherited or {}).get(job.node_id, {}),
                    },
                )
                done.append(node)
            else:
                failed.append(
                    (
                        job.node_id,
                        out if isinstance(out, BaseException) else RuntimeError("no result"),
                    )
                )
        self._embed(done, f"level-{jobs[0].level if jobs else '?'} summaries")
        (self.store.upsert if replace else self.store.add)(done)
        stats.summaries_written += len(done)
        if failed:
            first_id, first_err = failed[0]
            raise RaptorBuildError(
                f"{len(failed)} of {len(jobs)} summaries failed after {self.max_retries + 1} "
                f"attempts each (first: {first_id}: {type(first_err).__name__}: {first_err}). "
                f"The {len(done)} that succeeded are stored: fix the LLM and build again "
                "(RaptorRetriever.from_documents with the same vector store, RaptorTree.resume(), "
                "or `rag-pack raptor build`) to resume without redoing them."
            ) from first_err
        return done

    # ------------------------------------------------------------------ clustering
    def _groups(self, nodes: Sequence[TextNode]) -> list[list[int]]:
        """Cluster ``nodes`` (with embeddings); member index lists, numbered by cluster id."""
        if len(nodes) == 0:
            return []
        emb = np.asarray([n.embedding for n in nodes], dtype=np.float32)
        lengths = [
            int(n.metadata.get(TOKENS_KEY) or self.count_tokens(n.get_content())) for n in nodes
        ]
        assignment = cluster_embeddings(
            emb,
            reduction_dim=self.reduction_dim,
            threshold=self.threshold,
            max_clusters=self.max_clusters,
            random_state=self.random_state,
            lengths=lengths,
            max_length_in_cluster=self.cluster_budget(),
        )
        n_clusters = 1 + max(c for row in assignment for c in row)
        groups: list[list[int]] = [[] for _ in range(n_clusters)]
        for i, row in enumerate(assignment):
            for c in row:
                groups[c].append(i)
        return [g for g in groups if g]

    # ------------------------------------------------------------------ build
    def _grow(self, start_level: int, summarise: SummariseFn, stats: BuildStats) -> None:
        """Build (or finish building) every level above ``start_level``."""
        level = start_level
        while True:
            nodes = self.store.level(level, with_embeddings=True)
            groups = self._groups(nodes) if len(nodes) > 1 and level < self.max_levels else []
            if not groups or (len(groups) >= len(nodes) and all(len(g) == 1 for g in groups)):
                self._finish_top(level, nodes)
                return
            targets: dict[str, tuple[int, list[TextNode]]] = {}
            for cid, members in enumerate(groups):
                children = [nodes[i] for i in members]
                targets[summary_id(level + 1, [c.node_id for c in children])] = (cid, children)
            existing = {n.node_id for n in self.store.level(level + 1)}
            stale = existing - set(targets)
            if stale:
                logger.info(
                    "Level %d: removing %d summaries of an earlier clustering",
                    level + 1,
                    len(stale),
                )
                self.store.delete_ids(stale)
            # every node of this level learns its clusters and parents before the summaries exist
            memberships: dict[str, tuple[list[int], list[str]]] = {
                n.node_id: ([], []) for n in nodes
            }
            for sid, (cid, children) in targets.items():
                for c in children:
                    memberships[c.node_id][0].append(cid)
                    memberships[c.node_id][1].append(sid)
            changed = []
            for n in nodes:
                clusters, parents = memberships[n.node_id]
                if n.metadata.get(CLUSTER_KEY) != clusters or n.metadata.get(PARENT_KEY) != parents:
                    n.metadata[CLUSTER_KEY], n.metadata[PARENT_KEY] = clusters, parents
                    changed.append(n)
            self.store.upsert(changed)
            jobs = [
                _Job(node_id=sid, level=level + 1, children=children, source_cluster=cid)
                for sid, (cid, children) in targets.items()
                if sid not in existing
            ]
            stats.summaries_reused += len(targets) - len(jobs)
            logger.info(
                "Level %d: %d nodes → %d clusters (%d to summarise, %d already stored)",
                level,
                len(nodes),
                len(targets),
                len(jobs),
                len(targets) - len(jobs),
            )
            if jobs:
                self._write_summaries(jobs, summarise(jobs), stats, replace=False)
            level += 1

    def _finish_top(self, level: int, nodes: Sequence[TextNode]) -> None:
        """``level`` is the top: drop leftovers above it and clear the top nodes' parents."""
        above = self.store.scan(f"{LEVEL_KEY} > {int(level)}")
        if above:
            self.store.delete_ids(n.node_id for n in above)
        orphaned = [n for n in nodes if n.metadata.get(PARENT_KEY)]
        for n in orphaned:
            n.metadata[PARENT_KEY], n.metadata[CLUSTER_KEY] = [], []
        self.store.upsert(orphaned)

    def _start(self) -> tuple[BuildStats, float, int]:
        return BuildStats(), time.perf_counter(), self._calls

    def _end(self, stats: BuildStats, start: float, calls0: int) -> BuildStats:
        stats.llm_calls = self._calls - calls0
        stats.levels = self.store.levels()
        stats.seconds = time.perf_counter() - start
        return stats

    def _build(self, documents: Sequence[BaseNode] | None, summarise: SummariseFn) -> BuildStats:
        stats, start, calls0 = self._start()
        if documents is not None:
            self._store_leaves(self.make_leaves(documents), stats)
        elif not self.store.exists() or not self.store.level(0):
            raise EmptyCorpusError(
                f"Collection {self.store.collection_name!r} holds no RAPTOR leaves to build on: "
                "build from documents first."
            )
        self._grow(0, summarise, stats)
        return self._end(stats, start, calls0)

    def build(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Chunk, embed and store ``documents`` as leaves, then build every summary level.

        Building again over the same collection resumes: stored leaves and summaries are reused.

        Raises:
            EmptyCorpusError: no (non-blank) documents.
            RaptorBuildError: summaries failed after retries (the rest is stored; build again).
        """
        return self._build(documents, self._summarise_sync)

    async def abuild(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Async :meth:`build`: summaries via ``await llm.apredict`` on the running loop."""
        return await self._run_async(self._build, documents)

    def resume(self) -> BuildStats:
        """Finish an interrupted build from the leaves already stored (no documents needed)."""
        return self._build(None, self._summarise_sync)

    async def aresume(self) -> BuildStats:
        """Async :meth:`resume`."""
        return await self._run_async(self._build, None)

    async def _run_async(self, fn: Callable[..., BuildStats], *args: Any) -> BuildStats:
        """Run the sync orchestration in a worker thread; summaries run on this event loop."""
        loop = asyncio.get_running_loop()

        def summarise(jobs: list[_Job]) -> dict[str, str | BaseException]:
            return asyncio.run_coroutine_threadsafe(self._asummarise(jobs), loop).result()

        return await asyncio.to_thread(fn, *args, summarise)

    # ------------------------------------------------------------------ incremental updates
    def insert(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Add documents to the tree, re-summarising only the clusters that change.

        Documents whose id is already in the tree replace their old leaves.
        """
        return self._insert(documents, self._summarise_sync)

    async def ainsert(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Async :meth:`insert`."""
        return await self._run_async(self._insert, documents)

    def delete(self, ref_doc_ids: str | Sequence[str]) -> BuildStats:
        """Remove the leaves of these document ids and refresh the summaries above them."""
        return self._delete(ref_doc_ids, self._summarise_sync)

    async def adelete(self, ref_doc_ids: str | Sequence[str]) -> BuildStats:
        """Async :meth:`delete`."""
        return await self._run_async(self._delete, ref_doc_ids)

    def _insert(self, documents: Sequence[BaseNode], summarise: SummariseFn) -> BuildStats:
        stats, start, calls0 = self._start()
        leaves = self.make_leaves(documents)
        doc_ids = {n.ref_doc_id for n in leaves if n.ref_doc_id}
        old = (
            {n.node_id for n in self.store.by_doc(doc_ids)}
            if doc_ids and self.store.exists()
            else set()
        )
        new_ids = {n.node_id for n in leaves}
        removed = old - new_ids
        added = [n for n in leaves if n.node_id not in old]
        top = self.store.top_level() if self.store.exists() else None
        if top is None or top == 0:
            self.store.delete_ids(removed)
            stats.leaves_removed += len(removed)
            self._store_leaves(added, stats)
            self._grow(0, summarise, stats)
            return self._end(stats, start, calls0)
        self.store.delete_ids(removed)
        stats.leaves_removed += len(removed)
        self._embed(added, "new leaves")
        self.store.add(added)
        stats.leaves_added += len(added)
        self._update(added, set(), removed, summarise, stats)
        return self._end(stats, start, calls0)

    def _delete(self, ref_doc_ids: str | Sequence[str], summarise: SummariseFn) -> BuildStats:
        stats, start, calls0 = self._start()
        ids = [ref_doc_ids] if isinstance(ref_doc_ids, str) else list(ref_doc_ids)
        leaves = self.store.by_doc(ids)
        if not leaves:
            logger.warning("No RAPTOR leaves for document ids %s: nothing deleted", ids)
            return self._end(stats, start, calls0)
        removed = {n.node_id for n in leaves}
        self.store.delete_ids(removed)
        stats.leaves_removed += len(removed)
        self._update([], set(), removed, summarise, stats)
        return self._end(stats, start, calls0)

    def _update(
        self,
        added: list[TextNode],
        changed: set[str],
        removed: set[str],
        summarise: SummariseFn,
        stats: BuildStats,
    ) -> None:
        """Propagate leaf changes upwards, level by level, touching only affected clusters."""
        level = 0
        while added or changed or removed:
            parents = self.store.level(level + 1, with_embeddings=True)
            if not parents or level >= self.max_levels:
                self._grow(level, summarise, stats)  # top reached: extend the tree if it grew wider
                return
            nodes = {n.node_id: n for n in self.store.level(level, with_embeddings=True)}
            by_id = {p.node_id: p for p in parents}
            children: dict[str, list[str]] = {
                p.node_id: [c for c in (p.metadata.get(CHILD_KEY) or []) if c in nodes]
                for p in parents
            }
            affected = {
                pid
                for pid, p in by_id.items()
                if set(children[pid]) != set(p.metadata.get(CHILD_KEY) or [])
                or changed & set(children[pid])
            }
            # place new nodes into the cluster with the nearest centroid
            orphans: list[TextNode] = []
            live = [pid for pid in by_id if children[pid]]
            if added and live:
                centroids = np.asarray(
                    [np.mean([nodes[c].embedding for c in children[pid]], axis=0) for pid in live],
                    dtype=np.float32,
                )
                centroids /= np.linalg.norm(centroids, axis=1, keepdims=True) + 1e-12
                emb = np.asarray([n.embedding for n in added], dtype=np.float32)
                emb /= np.linalg.norm(emb, axis=1, keepdims=True) + 1e-12
                sims = emb @ centroids.T
                for n, row in zip(added, sims, strict=True):
                    best = int(np.argmax(row))
                    if row[best] >= self.new_cluster_similarity:
                        children[live[best]].append(n.node_id)
                        affected.add(live[best])
                    else:
                        orphans.append(n)
            else:
                orphans = list(added)
            budget = self.cluster_budget()
            next_source = 1 + max(
                (int(p.metadata.get(SOURCE_CLUSTER_KEY, -1)) for p in parents), default=-1
            )
            jobs: list[_Job] = []
            replaced: list[_Job] = []
            deleted: set[str] = set()
            new_groups: list[list[TextNode]] = []
            for pid in sorted(affected):
                members = [nodes[c] for c in children[pid]]
                if not members:
                    deleted.add(pid)
                    continue
                if (
                    sum(int(m.metadata.get(TOKENS_KEY) or 0) for m in members) > budget
                    and len(members) > 1
                ):
                    groups = self._groups(members)
                    members_first, rest = [members[i] for i in groups[0]], groups[1:]
                    new_groups.extend([members[i] for i in g] for g in rest)
                    members = members_first
                source = int(by_id[pid].metadata.get(SOURCE_CLUSTER_KEY, 0))
                replaced.append(
                    _Job(node_id=pid, level=level + 1, children=members, source_cluster=source)
                )
            if len(orphans) == 1:
                new_groups.append(orphans)
            elif orphans:
                new_groups.extend([[orphans[i] for i in g] for g in self._groups(orphans)])
            for group in new_groups:
                jobs.append(
                    _Job(
                        node_id=summary_id(level + 1, [m.node_id for m in group]),
                        level=level + 1,
                        children=group,
                        source_cluster=next_source,
                    )
                )
                next_source += 1
            # children learn their (new) parents and clusters
            membership: dict[str, tuple[list[int], list[str]]] = {}
            final_children = {job.node_id: job for job in replaced + jobs}
            for pid, p in by_id.items():
                if pid in deleted or pid in final_children:
                    continue
                final_children[pid] = _Job(
                    pid,
                    level + 1,
                    [nodes[c] for c in children[pid]],
                    int(p.metadata.get(SOURCE_CLUSTER_KEY, 0)),
                )
            for job in final_children.values():
                for c in job.children:
                    cl, pa = membership.setdefault(c.node_id, ([], []))
                    cl.append(job.source_cluster)
                    pa.append(job.node_id)
            to_upsert = []
            for nid, n in nodes.items():
                cl, pa = membership.get(nid, ([], []))
                if n.metadata.get(CLUSTER_KEY) != cl or n.metadata.get(PARENT_KEY) != pa:
                    n.metadata[CLUSTER_KEY], n.metadata[PARENT_KEY] = cl, pa
                    to_upsert.append(n)
            self.store.upsert(to_upsert)
            self.store.delete_ids(deleted)
            logger.info(
                "Level %d update: %d summaries refreshed, %d new, %d removed",
                level + 1,
                len(replaced),
                len(jobs),
                len(deleted),
            )
            all_jobs = replaced + jobs
            results = summarise(all_jobs) if all_jobs else {}
            # refreshed summaries keep their own place in the tree (parents, clusters)
            inherited = {
                job.node_id: {
                    PARENT_KEY: list(by_id[job.node_id].metadata.get(PARENT_KEY) or []),
                    CLUSTER_KEY: list(by_id[job.node_id].metadata.get(CLUSTER_KEY) or []),
                }
                for job in replaced
            }
            written_replaced, written_new = [], []
            try:
                if replaced:
                    written_replaced = self._write_summaries(
                        replaced, results, stats, replace=True, inherited=inherited
                    )
            finally:
                if jobs:
                    written_new = self._write_summaries(jobs, results, stats, replace=False)
            added, changed, removed = written_new, {n.node_id for n in written_replaced}, deleted
            level += 1


__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "BuildStats",
    "RaptorBuildError",
    "RaptorTree",
    "clean_summary",
    "leaf_id",
    "summary_id",
]
