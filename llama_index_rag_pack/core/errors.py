"""Exceptions raised by llama-index-rag-pack.

Every error says what went wrong and what to do about it. They subclass the matching
built-in exception too (``ValueError``, ``ConnectionError``, ...), so callers that already
catch those keep working.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from typing import Any

__all__ = [
    "check_count",
    "check_query",
    "RagPackError",
    "ConfigurationError",
    "EmptyCorpusError",
    "LLMNotConfiguredError",
    "MilvusUnavailableError",
    "MilvusOperationError",
    "CollectionNotFoundError",
    "EmbeddingError",
    "RerankError",
]


class RagPackError(Exception):
    """Base class of every error raised on purpose by this package."""


class ConfigurationError(RagPackError, ValueError):
    """An argument or setting has a value that cannot work."""


class EmptyCorpusError(RagPackError, ValueError):
    """There is nothing to index: no documents, or only blank ones."""


class LLMNotConfiguredError(RagPackError, RuntimeError):
    """No LLM was given and none could be resolved from the environment or a local model."""


class MilvusUnavailableError(RagPackError, ConnectionError):
    """Milvus could not be reached or opened at the given ``uri``."""


class MilvusOperationError(RagPackError, RuntimeError):
    """Milvus answered but refused or failed a request (a schema, an index, a search or a
    write this server cannot serve); the message names the call, the server's reason and what
    to do."""


class CollectionNotFoundError(RagPackError, LookupError):
    """The Milvus collection to reopen does not exist (nothing was indexed there yet)."""


class EmbeddingError(RagPackError, RuntimeError):
    """The embedding endpoint could not be reached or refused a request (``openai:MODEL``)."""


class RerankError(RagPackError, RuntimeError):
    """The reranker failed: its endpoint could not be reached, timed out, answered an HTTP
    error or a body that is not a ranking of the documents sent, or a local cross-encoder could
    not be loaded (``rerank_fallback="keep"`` keeps the un-reranked list instead)."""


EMPTY_QUERY_MESSAGE = "The query is empty: ask a question with some text in it."


def check_count(name: str, value: object, *, minimum: int = 1, none_ok: bool = False) -> Any:
    """``value`` when it is an integer >= ``minimum`` (not a bool; ``None`` too with
    ``none_ok``), else :class:`ConfigurationError` naming ``name``.

    Example:
        >>> check_count("top_k", 3)
        3
        >>> check_count("top_k", True)
        Traceback (most recent call last):
        ...
        llama_index_rag_pack.core.errors.ConfigurationError: top_k must be an integer >= 1, got True.
    """  # noqa: E501  (doctest output: the exception line can't be wrapped)
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        extra = " or None" if none_ok else ""
        raise ConfigurationError(f"{name} must be an integer >= {minimum}{extra}, got {value!r}.")
    return value


def check_query(query: object) -> str:
    """The query's text (a ``str`` or anything with ``query_str``), or ``ConfigurationError``
    when it is missing, empty or only whitespace. Every retriever and engine calls this first,
    before any model is loaded or any search is sent.

    Example:
        >>> check_query("What is Milvus?")
        'What is Milvus?'
        >>> check_query("   ")
        Traceback (most recent call last):
        ...
        llama_index_rag_pack.core.errors.ConfigurationError: The query is empty: ask a question with some text in it.
    """  # noqa: E501  (doctest output: the exception line can't be wrapped)
    text = getattr(query, "query_str", query)
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(EMPTY_QUERY_MESSAGE)
    return text
