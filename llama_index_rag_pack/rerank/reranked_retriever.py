"""A retriever with a second stage: the first stage's candidates, reranked, the best kept.

What ``RagPack(rerank=...)`` puts around every mode's retriever: the mode retrieves
``rerank_top_n`` candidates (fused, for the hybrid modes), the reranker orders them, and the
``top_k`` best are returned, each scored by the reranker (``metadata["rerank_score"]``).

Example:
    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> from llama_index_rag_pack.core.query_bases import PackRetriever
    >>> from llama_index_rag_pack.rerank.reranker_base import PackReranker
    >>> class Words(PackRetriever):
    ...     def _search(self, query_bundle, query):
    ...         return [NodeWithScore(node=TextNode(text=t), score=1.0) for t in ("a", "bbb", "cc")]
    >>> class Longest(PackReranker):
    ...     def _score(self, query, texts):
    ...         return [float(len(t)) for t in texts]
    >>> retriever = RerankedRetriever(Words(), Longest(), top_k=2)
    >>> [(n.node.text, n.score) for n in retriever.retrieve("which is longest?")]
    [('bbb', 3.0), ('cc', 2.0)]
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.core.query_bases import PackRetriever, wrapped_retriever

__all__ = ["RerankedRetriever"]


class RerankedRetriever(PackRetriever):
    """``retriever``'s nodes reordered by ``reranker``, the ``top_k`` best kept.

    Args:
        retriever: The first stage (any LlamaIndex retriever), set to return the candidates.
        reranker: Any LlamaIndex node postprocessor (a
            :class:`~llama_index_rag_pack.rerank.PackReranker` or another).
        top_k: Nodes returned.
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        reranker: BaseNodePostprocessor,
        *,
        top_k: int,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if not isinstance(reranker, BaseNodePostprocessor):
            raise ConfigurationError(
                "reranker must be a LlamaIndex node postprocessor, got "
                f"{type(reranker).__name__!r}."
            )
        self.retriever = wrapped_retriever(retriever, "RerankedRetriever")
        self.reranker = reranker
        self.top_k = check_count("top_k", top_k)
        super().__init__(callback_manager=callback_manager)

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        nodes = self.retriever.retrieve(query_bundle)
        return self.reranker.postprocess_nodes(nodes, query_bundle=query_bundle)[: self.top_k]

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        nodes = await self.retriever.aretrieve(query_bundle)
        ranked = await self.reranker.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return ranked[: self.top_k]

    def __getattr__(self, name: str) -> Any:
        # the first stage's own attributes (``reads``, ``select``, ...) stay reachable
        if name == "retriever":
            raise AttributeError(name)
        return getattr(self.retriever, name)
