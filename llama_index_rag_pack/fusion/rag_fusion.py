"""``FusionRetriever``: RAG-Fusion — query variants × retrievers, searched concurrently,
rank-fused.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.core.node_tags import annotate_node
from llama_index_rag_pack.fusion.fusion_queries import (
    DEFAULT_QUERY_GEN_PROMPT,
    agenerate_queries,
    generate_queries,
)
from llama_index_rag_pack.fusion.llm_query import LLMQueryRetriever
from llama_index_rag_pack.fusion.rank_fusion import DEFAULT_RRF_K, FusionMode, fuse

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

__all__ = ["FusionRetriever", "FUSION_METADATA_KEYS", "annotate_node"]

#: Metadata keys FusionRetriever adds to each returned node (kept out of LLM and embedding text).
FUSION_METADATA_KEYS = ("fusion_queries", "fusion_retrievers", "fusion_hits")


class FusionRetriever(LLMQueryRetriever):
    """RAG-Fusion: the LLM writes query variants, every variant × retriever is searched
    concurrently, and the result lists are merged by rank fusion.

    The async path awaits ``llm.acomplete`` and every ``retriever.aretrieve`` under one semaphore;
    a retriever that implements only the sync ``_retrieve`` runs in a worker thread instead of
    blocking the event loop. The sync path runs the searches in a thread pool.

    Each returned node records what found it in its metadata (hidden from the LLM):
    ``fusion_queries`` (the query strings), ``fusion_retrievers`` (retriever names) and
    ``fusion_hits`` (``{"query", "retriever", "rank", "score"}`` per hit).

    Args:
        retrievers: The retrievers to search; a mapping gives them names (default
            ``"<ClassName>_<i>"``).
        llm: Writes the query variants. Needed only when ``num_queries > 1``; ``None`` resolves
            the default LLM (see
            :func:`~llama_index_rag_pack.models.settings.resolve_llm`) on first use.
        num_queries: Queries searched in total, the original included (1 = no LLM call).
        mode: ``reciprocal_rank`` (default), ``relative_score``, ``dist_based_score`` or ``union``.
        weights: One weight per retriever, honoured in every mode.
        similarity_top_k: Nodes returned after fusion.
        k: The RRF constant.
        include_original: Search the original query too (as in RAG-Fusion).
        max_concurrency: Searches in flight at once (async tasks or sync threads); 1 searches
            one after another.
        query_gen_prompt: Template with ``{num_queries}`` and ``{query}``.
        raise_on_failure: Raise when the LLM fails instead of falling back to the original query.
        callback_manager: LlamaIndex callback manager.

    Raises:
        ConfigurationError: no retrievers, an unknown mode, weights of the wrong length, or a bad
            ``num_queries``/``similarity_top_k``/``max_concurrency``.

    Example:
        >>> from llama_index_rag_pack.testing import ScriptedLLM
        >>> fusion = FusionRetriever(  # doctest: +SKIP
        ...     {"dense": index.as_retriever(similarity_top_k=10), "bm25": bm25_retriever},
        ...     llm=ScriptedLLM(replies=["1. milvus sparse search\\n2. BM25 in Milvus"]),
        ...     num_queries=3, weights=[0.7, 0.3], similarity_top_k=5)
        >>> nodes = await fusion.aretrieve("How does Milvus do keyword search?")  # doctest: +SKIP
        >>> nodes[0].node.metadata["fusion_queries"]  # doctest: +SKIP
        ['How does Milvus do keyword search?', 'BM25 in Milvus']
    """

    prompt_key = "query_gen_prompt"

    def __init__(
        self,
        retrievers: Sequence[BaseRetriever] | Mapping[str, BaseRetriever],
        *,
        llm: LLM | None = None,
        num_queries: int = 4,
        mode: str | FusionMode = FusionMode.RECIPROCAL_RANK,
        weights: Sequence[float] | None = None,
        similarity_top_k: int = 10,
        k: float = DEFAULT_RRF_K,
        include_original: bool = True,
        max_concurrency: int = 16,
        query_gen_prompt: str | BasePromptTemplate | None = None,
        raise_on_failure: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if isinstance(retrievers, Mapping):
            names, items = list(retrievers.keys()), list(retrievers.values())
        else:
            items = list(retrievers)
            names = [f"{type(r).__name__}_{i}" for i, r in enumerate(items)]
        if not items:
            raise ConfigurationError("FusionRetriever needs at least one retriever, got none.")
        for r in items:
            if not isinstance(r, BaseRetriever):
                raise ConfigurationError(
                    "FusionRetriever takes LlamaIndex BaseRetriever objects, "
                    f"got {type(r).__name__!r}."
                )
        if len(set(names)) != len(names):
            raise ConfigurationError(f"Retriever names must be unique, got {names!r}.")
        check_count("num_queries", num_queries)
        if not include_original and num_queries < 2:
            raise ConfigurationError(
                "include_original=False needs num_queries >= 2 (one generated query)."
            )
        check_count("similarity_top_k", similarity_top_k)
        check_count("max_concurrency", max_concurrency)
        self.mode = FusionMode.parse(mode)
        if weights is not None and len(list(weights)) != len(items):
            raise ConfigurationError(
                f"weights has {len(list(weights))} values for {len(items)} retrievers ({names}): "
                "give one weight per retriever."
            )
        self.weights = list(weights) if weights is not None else None
        # validates values (negative, all zero, ...) and k eagerly, with the same messages
        fuse([[] for _ in items], self.mode, k=k, weights=self.weights)
        self.retrievers = items
        self.retriever_names = names
        self.num_queries = num_queries
        self.similarity_top_k = similarity_top_k
        self.k = k
        self.include_original = include_original
        self.max_concurrency = max_concurrency
        self.raise_on_failure = raise_on_failure
        super().__init__(llm, query_gen_prompt, DEFAULT_QUERY_GEN_PROMPT, callback_manager, verbose)

    # ------------------------------------------------------------------ parts
    @property
    def _num_generated(self) -> int:
        return self.num_queries - 1 if self.include_original else self.num_queries

    # ------------------------------------------------------------------ steps
    def _query_list(self, query_bundle: QueryBundle, generated: list[str]) -> list[QueryBundle]:
        queries = [query_bundle] if self.include_original else []
        queries.extend(QueryBundle(q) for q in generated)
        if not queries:  # include_original=False and the LLM gave nothing usable
            queries = [query_bundle]
        logger.debug("Fusion queries: %s", [q.query_str for q in queries])
        return queries

    @dispatcher.span
    def generate_queries(self, query: str) -> list[str]:
        """The generated variants for ``query`` (without the original)."""
        if self._num_generated <= 0:
            return []
        return generate_queries(
            self.llm,
            query,
            self._num_generated,
            prompt=self.query_gen_prompt,
            raise_on_failure=self.raise_on_failure,
        )

    @dispatcher.span
    async def agenerate_queries(self, query: str) -> list[str]:
        """Async :meth:`generate_queries`."""
        if self._num_generated <= 0:
            return []
        return await agenerate_queries(
            self.llm,
            query,
            self._num_generated,
            prompt=self.query_gen_prompt,
            raise_on_failure=self.raise_on_failure,
        )

    def _jobs(self, queries: list[QueryBundle]) -> list[tuple[int, int]]:
        return [(qi, ri) for qi in range(len(queries)) for ri in range(len(self.retrievers))]

    def search_variant(self, query_bundle: QueryBundle, retriever: str) -> list[NodeWithScore]:
        """One query variant searched by the retriever named ``retriever`` (its own
        ``retrieve`` span, with the variant as its query, is the trace's record of it)."""
        return self.retrievers[self.retriever_names.index(retriever)].retrieve(query_bundle)

    async def asearch_variant(
        self, query_bundle: QueryBundle, retriever: str
    ) -> list[NodeWithScore]:
        """Async :meth:`search_variant`."""
        return await self.retrievers[self.retriever_names.index(retriever)].aretrieve(query_bundle)

    @dispatcher.span
    def fuse_ranks(
        self,
        queries: list[QueryBundle],
        jobs: list[tuple[int, int]],
        results: list[list[NodeWithScore]],
    ) -> list[NodeWithScore]:
        list_weights = None
        if self.weights is not None:
            list_weights = [self.weights[ri] for _, ri in jobs]
        fused = fuse(
            results, self.mode, k=self.k, weights=list_weights, top_n=self.similarity_top_k
        )
        hits: dict[str, list[dict[str, Any]]] = {}
        for (qi, ri), nodes in zip(jobs, results, strict=True):
            seen: set[str] = set()
            for rank, n in enumerate(nodes, start=1):
                if n.node.node_id in seen:
                    continue
                seen.add(n.node.node_id)
                hits.setdefault(n.node.node_id, []).append(
                    {
                        "query": queries[qi].query_str,
                        "retriever": self.retriever_names[ri],
                        "rank": rank,
                        "score": n.score,
                    }
                )
        out = []
        for n in fused:
            node_hits = hits.get(n.node.node_id, [])
            out.append(
                annotate_node(
                    n,
                    {
                        "fusion_queries": list(dict.fromkeys(h["query"] for h in node_hits)),
                        "fusion_retrievers": list(dict.fromkeys(h["retriever"] for h in node_hits)),
                        "fusion_hits": node_hits,
                    },
                )
            )
        return out

    # ------------------------------------------------------------------ search
    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        queries = self._query_list(query_bundle, self.generate_queries(query))
        jobs = self._jobs(queries)

        def run(job: tuple[int, int]) -> list[NodeWithScore]:
            qi, ri = job
            return self.search_variant(queries[qi], self.retriever_names[ri])

        if self.max_concurrency == 1 or len(jobs) == 1:
            results = [run(j) for j in jobs]
        else:
            # each search runs in a copy of this thread's context, so its instrumentation spans
            # (and callbacks) stay children of this query's span
            contexts = [contextvars.copy_context() for _ in jobs]
            with ThreadPoolExecutor(
                max_workers=min(self.max_concurrency, len(jobs)), thread_name_prefix="fusion-search"
            ) as pool:
                results = list(pool.map(lambda ctx, job: ctx.run(run, job), contexts, jobs))
        return self.fuse_ranks(queries, jobs, results)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        generated = await self.agenerate_queries(query)
        queries = self._query_list(query_bundle, generated)
        jobs = self._jobs(queries)
        semaphore = asyncio.Semaphore(self.max_concurrency)
        n_blocking = sum(1 for _, ri in jobs if _sync_only(self.retrievers[ri]))
        pool = (
            ThreadPoolExecutor(
                max_workers=min(self.max_concurrency, n_blocking),
                thread_name_prefix="fusion-search",
            )
            if n_blocking
            else None
        )
        loop = asyncio.get_running_loop()

        async def run(job: tuple[int, int]) -> list[NodeWithScore]:
            qi, ri = job
            retriever = self.retrievers[ri]
            async with semaphore:
                if pool is not None and _sync_only(retriever):
                    # its aretrieve would run the blocking _retrieve on the event loop and
                    # serialise every search: run it in a worker thread instead
                    ctx = contextvars.copy_context()  # keeps the span parent in the thread
                    return await loop.run_in_executor(
                        pool, ctx.run, self.search_variant, queries[qi], self.retriever_names[ri]
                    )
                return await self.asearch_variant(queries[qi], self.retriever_names[ri])

        try:
            results = list(await asyncio.gather(*(run(j) for j in jobs)))
        finally:
            if pool is not None:
                pool.shutdown(wait=False)
        return self.fuse_ranks(queries, jobs, results)


def _sync_only(retriever: BaseRetriever) -> bool:
    """True when the retriever implements only ``_retrieve`` (BaseRetriever's ``_aretrieve``
    just calls it, blocking the event loop)."""
    return type(retriever)._aretrieve is BaseRetriever._aretrieve
