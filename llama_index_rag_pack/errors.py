"""Exceptions raised by llama-index-rag-pack.

Every error says what went wrong and what to do about it. They subclass the matching
built-in exception too (``ValueError``, ``ConnectionError``, ...), so callers that already
catch those keep working.
"""

from __future__ import annotations

__all__ = [
    "RagPackError",
    "ConfigurationError",
    "EmptyCorpusError",
    "LLMNotConfiguredError",
    "MilvusUnavailableError",
    "CollectionNotFoundError",
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


class CollectionNotFoundError(RagPackError, LookupError):
    """The Milvus collection to reopen does not exist (nothing was indexed there yet)."""
