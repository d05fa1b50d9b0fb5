"""Core's dense retriever with the pack's query check."""

from __future__ import annotations

from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import check_query


class CheckedVectorIndexRetriever(VectorIndexRetriever):
    """Core's ``VectorIndexRetriever`` (what ``index.as_retriever()`` returns) that rejects an
    empty query with the pack's error before embedding it, like every other mode."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle)
        return super()._retrieve(query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle)
        return await super()._aretrieve(query_bundle)


__all__ = ["CheckedVectorIndexRetriever"]
