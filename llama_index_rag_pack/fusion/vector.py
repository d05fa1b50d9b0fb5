"""Core's dense retriever with the pack's query check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.query_bases import PackRetriever


class CheckedVectorIndexRetriever(PackRetriever, VectorIndexRetriever):
    """Core's ``VectorIndexRetriever`` (what ``index.as_retriever()`` returns) that rejects an
    empty query with the pack's error before embedding it, like every other mode.

    A Milvus ``string_expr`` in its ``vector_store_kwargs`` filters the search. With an
    ``id_filter`` (``RagPack`` hands in ``milvus.vector_memory.id_filter`` on a Milvus Lite file,
    which one process owns) each search sends the expression's resolved ``id in [...]`` form, a
    primary-key lookup, instead.
    """

    id_filter: Callable[[Any, str, str], str] | None = None

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        return VectorIndexRetriever._retrieve(self._resolved(), query_bundle)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        return await VectorIndexRetriever._aretrieve(self._resolved(), query_bundle)

    def _resolved(self) -> CheckedVectorIndexRetriever:
        """This retriever, or a copy of it whose filter is the resolved one (the original keeps
        the expression, so a later write re-resolves it)."""
        expr = self._kwargs.get("string_expr")
        if not expr or self.id_filter is None:
            return self
        store = self._vector_store
        resolved = self.id_filter(store.client, store.collection_name, expr)
        if resolved == expr:
            return self
        clone = copy.copy(self)
        clone._kwargs = {**self._kwargs, "string_expr": resolved}
        return clone


__all__ = ["CheckedVectorIndexRetriever"]
