"""Options of :class:`~llama_index_rag_pack.citations.cited_query_engine.CitedQueryEngine`:
its citation modes, and the retriever it answers from."""

from __future__ import annotations

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.base import BaseIndex

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["CitationMode", "as_retriever", "check_retriever"]


class CitationMode(Choice):
    """How :class:`CitedQueryEngine` obtains citations."""

    MARKERS = "markers"
    QUOTES = "quotes"
    ANNOTATE = "annotate"


def as_retriever(source: BaseRetriever | BaseIndex, similarity_top_k: int | None) -> BaseRetriever:
    """``source`` itself when it is a retriever, else the index's retriever."""
    if similarity_top_k is not None and (
        not isinstance(similarity_top_k, int) or similarity_top_k <= 0
    ):
        raise ConfigurationError(f"similarity_top_k must be > 0, got {similarity_top_k!r}")
    if isinstance(source, BaseIndex):
        if similarity_top_k is None:
            return source.as_retriever()
        return source.as_retriever(similarity_top_k=similarity_top_k)
    if similarity_top_k is not None:
        raise ConfigurationError(
            "similarity_top_k applies when an index is given; set it on the retriever instead "
            "(index.as_retriever(similarity_top_k=...))."
        )
    return source


def check_retriever(retriever: object) -> None:
    """Raise :class:`ConfigurationError` unless ``retriever`` is a LlamaIndex ``BaseRetriever``."""
    if not isinstance(retriever, BaseRetriever):
        raise ConfigurationError(
            "retriever must be a LlamaIndex BaseRetriever (e.g. index.as_retriever()), "
            f"got {type(retriever).__name__}"
        )
