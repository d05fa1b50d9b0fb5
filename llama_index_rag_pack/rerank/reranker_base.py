"""The base of the pack's rerankers: a LlamaIndex node postprocessor that scores each node's
text against the query and orders the nodes by that score.

A subclass implements :meth:`PackReranker._score` (and :meth:`PackReranker._ascore` when it has
a non-blocking path). Here the scores become the nodes' order and score, and each node carries
its score in ``metadata["rerank_score"]`` (hidden from the LLM and the embedder; the node a
retriever handed out is not changed). A failure is one
:class:`~llama_index_rag_pack.core.errors.RerankError`; ``fallback="keep"`` logs it as a warning
and keeps the nodes in their first-stage order instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError, RerankError, check_count
from llama_index_rag_pack.core.node_tags import annotate_node

__all__ = ["FALLBACKS", "RERANK_SCORE_KEY", "PackReranker"]

logger = logging.getLogger(__name__)

#: The metadata key of a reranked node's score.
RERANK_SCORE_KEY = "rerank_score"
#: What a failed rerank does: raise its ``RerankError``, or keep the first-stage order.
FALLBACKS = ("raise", "keep")


class PackReranker(BaseNodePostprocessor):
    """Scores nodes against the query and orders them by the score (highest first; equal
    scores keep their first-stage order).

    Args:
        top_n: Nodes kept after reranking (``None``: all of them, reordered).
        batch_size: Documents per request (per forward pass for a local model).
        fallback: ``"raise"`` (default) or ``"keep"``: on a failure, log a warning and return
            the nodes as they came.
    """

    top_n: int | None = Field(default=None, description="nodes kept (None: all, reordered)")
    batch_size: int = Field(default=32, description="documents per request")
    fallback: str = Field(default="raise", description="on failure: raise, or keep the order")

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        # checked here, not by pydantic validators: one ConfigurationError line, not a
        # ValidationError
        check_count("top_n", self.top_n, none_ok=True)
        check_count("batch_size", self.batch_size)
        if self.fallback not in FALLBACKS:
            raise ConfigurationError(
                f"rerank fallback must be one of {', '.join(FALLBACKS)}, got {self.fallback!r}."
            )

    @classmethod
    def class_name(cls) -> str:
        return "PackReranker"

    def describe(self) -> str:
        """What reranks, in one line (for ``pack.describe()``)."""
        return type(self).__name__

    # ------------------------------------------------------------------ subclasses
    def _score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text, in order (higher: more relevant)."""
        raise NotImplementedError

    async def _ascore(self, query: str, texts: Sequence[str]) -> list[float]:
        """Async :meth:`_score`; by default the sync one in a worker thread."""
        return await asyncio.to_thread(self._score, query, texts)

    # ------------------------------------------------------------------ LlamaIndex
    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if not nodes:
            return []
        query, texts = _inputs(nodes, query_bundle)
        try:
            scores = self._score(query, texts)
        except RerankError as e:
            return self._kept(nodes, e)
        return self._ranked(nodes, scores)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if not nodes:
            return []
        query, texts = _inputs(nodes, query_bundle)
        try:
            scores = await self._ascore(query, texts)
        except RerankError as e:
            return self._kept(nodes, e)
        return self._ranked(nodes, scores)

    def _ranked(self, nodes: list[NodeWithScore], scores: list[float]) -> list[NodeWithScore]:
        order = sorted(range(len(nodes)), key=lambda i: -scores[i])  # stable: ties keep order
        ranked = []
        for i in order[: self.top_n]:
            tagged = annotate_node(nodes[i], {RERANK_SCORE_KEY: scores[i]})
            tagged.score = scores[i]
            ranked.append(tagged)
        return ranked

    def _kept(self, nodes: list[NodeWithScore], error: RerankError) -> list[NodeWithScore]:
        if self.fallback != "keep":
            raise error
        logger.warning("reranking failed, keeping the first-stage order: %s", error)
        return list(nodes[: self.top_n])


def _inputs(
    nodes: Sequence[NodeWithScore], query_bundle: QueryBundle | None
) -> tuple[str, list[str]]:
    """The query's text and each node's text (without metadata)."""
    if query_bundle is None:
        raise ConfigurationError("A reranker needs the query: pass query_bundle or query_str.")
    return query_bundle.query_str, [n.node.get_content(MetadataMode.NONE) for n in nodes]
