"""Core's dense retriever with the pack's query check."""

from __future__ import annotations

from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.components.query_bases import PackRetriever


class CheckedVectorIndexRetriever(PackRetriever, VectorIndexRetriever):
    """Core's ``VectorIndexRetriever`` (what ``index.as_retriever()`` returns) that rejects an
    empty query with the pack's error before embedding it, like every other mode."""

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        return VectorIndexRetriever._retrieve(self, query_bundle)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        return await VectorIndexRetriever._aretrieve(self, query_bundle)


__all__ = ["CheckedVectorIndexRetriever"]
