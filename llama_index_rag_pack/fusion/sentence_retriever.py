"""``MilvusSentenceRetriever``: chunks ranked by their best-matching sentence.

It searches the sentence index of a chunk collection
(:class:`~llama_index_rag_pack.milvus.sentence_index.MilvusSentenceIndex`), keeps each chunk's
best sentence score, and returns the chunks themselves, read from the chunk collection (with the
retriever's ``filter`` applied there). :class:`~llama_index_rag_pack.MilvusScoreFusionRetriever`
uses it as the third list of hybrid search.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import NodeWithScore

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.convex_fusion import check_candidate_pool
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex

__all__ = ["DEFAULT_SENTENCE_POOL", "MilvusSentenceRetriever"]

#: Sentences fetched per query before they are grouped by chunk.
DEFAULT_SENTENCE_POOL = 200


class MilvusSentenceRetriever(MilvusHybridRetriever):
    """Chunks scored by the cosine similarity of their best sentence to the query.

    Args:
        vector_store: The chunk collection's ``MilvusVectorStore`` (or ``client`` and
            ``collection_name``), indexed with sentences (``RagPack(sentence_index=True)``).
        embed_model: Embeds queries (the model the sentences were embedded with).
        sentence_pool: Sentences fetched before grouping them by chunk.
        in_memory: Search an in-memory copy of the sentence vectors instead of Milvus (for a
            Milvus Lite file, which one process owns; ``RagPack`` turns it on there).
        similarity_top_k: Chunks returned.
        filter: A Milvus boolean expression on the chunks' metadata fields.
        **kwargs: Other :class:`~llama_index_rag_pack.MilvusHybridRetriever` arguments.

    Raises:
        ConfigurationError: the collection has no sentence index, or a bad ``sentence_pool``.
    """

    def __init__(
        self,
        vector_store: Any | None = None,
        *,
        sentence_pool: int = DEFAULT_SENTENCE_POOL,
        in_memory: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs["search_type"] = "dense"
        super().__init__(vector_store, in_memory=in_memory, **kwargs)
        self.sentence_pool = check_candidate_pool(sentence_pool)
        self.sentences = MilvusSentenceIndex(self.client, self.collection_name, in_memory=in_memory)
        if not self.sentences.exists():
            raise ConfigurationError(
                f"Collection {self.collection_name!r} has no sentence index "
                f"({self.sentences.collection_name!r}): index it with "
                "RagPack(..., sentence_index=True), or search without sentences."
            )

    def _hits(self, query: str, embedding: list[float] | None, limit: int) -> list[dict[str, Any]]:
        if embedding is None:  # pragma: no cover - the base class always embeds for dense
            raise ValueError("sentence search needs the query embedding")
        best = self.sentences.search(embedding, max(self.sentence_pool, limit))[:limit]
        if not best:
            return []
        by_id = self._rows_by_id([chunk for chunk, _ in best], self.active_filter())
        # a sentence whose chunk is gone (or filtered out) is skipped
        return [
            {"id": chunk, "distance": score, "entity": by_id[chunk]}
            for chunk, score in best
            if chunk in by_id
        ]

    def to_nodes(self, hits: list[dict[str, Any]]) -> list[NodeWithScore]:
        nodes = super().to_nodes(hits)
        for n in nodes:
            n.node.metadata["retrieval_search_type"] = "sentence"
        return nodes
