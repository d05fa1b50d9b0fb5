"""A collection's schema against what the Milvus serving it can do
(:mod:`~llama_index_rag_pack.milvus.capabilities`).

A new collection gets the BM25 side the server can serve: Milvus' BM25 function (2.5+, Lite),
sparse vectors the pack computes (2.4, or ``bm25_vectors="client"``), or none (2.3: dense modes
only, said in one warning line). An existing collection is checked before it is loaded: a field or
function the server cannot serve is refused in one line, since loading it can bring a 2.3
server down.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.bm25.bm25_fields import function_type_name
from llama_index_rag_pack.milvus.bm25.client_bm25 import BM25_VECTORS_PROPERTY
from llama_index_rag_pack.milvus.capabilities import MilvusCapabilities

logger = logging.getLogger(__name__)

__all__ = [
    "BM25_VECTORS",
    "check_bm25_vectors",
    "check_served",
    "collection_bm25_vectors",
    "new_bm25_vectors",
]

#: Where BM25 vectors come from: ``auto`` (the server's function where it has one, else the
#: pack's own sparse vectors where the server has sparse vectors), ``function`` or ``client``.
BM25_VECTORS = ("auto", "function", "client")
_SPARSE_TYPE = 104  # DataType.SPARSE_FLOAT_VECTOR

_warned: set[str] = set()


def check_bm25_vectors(requested: str) -> None:
    """Raises :class:`ConfigurationError` unless ``requested`` is one of :data:`BM25_VECTORS`."""
    if requested not in BM25_VECTORS:
        raise ConfigurationError(
            f"bm25_vectors must be one of {', '.join(BM25_VECTORS)}; got {requested!r}."
        )


def new_bm25_vectors(caps: MilvusCapabilities, requested: str, *, collection: str) -> str | None:
    """The BM25 side of a new collection with BM25 on: ``function``, ``client``, or ``None``
    (the server has no sparse vectors: one warning line says so and what to upgrade).

    Raises:
        ConfigurationError: ``requested`` is unknown, or asks for what the server lacks.
    """
    check_bm25_vectors(requested)
    if requested == "function" and not caps.bm25_function:
        raise ConfigurationError(
            f"{caps.describe()}: it has no BM25 function (Milvus 2.5+ and Milvus Lite do). Use "
            "bm25_vectors='auto' (the pack computes BM25 vectors on 2.4) or upgrade the server."
        )
    if requested == "client" and not caps.sparse_vectors:
        raise ConfigurationError(
            f"{caps.describe()}: it has no sparse vectors, so BM25 cannot be stored there "
            "(Milvus 2.4+ has them). Use enable_bm25=False or upgrade the server."
        )
    if requested == "client" or (requested == "auto" and caps.bm25 == "client"):
        return "client"
    if caps.bm25 == "function":
        return "function"
    message = (
        f"{caps.describe()}: collection {collection!r} is created for dense search only (modes "
        "vector, hyde, rewrite, raptor; no bm25 or hybrid). Milvus 2.4 adds sparse vectors, "
        "which the pack fills with BM25 itself; 2.5 adds Milvus' own BM25 function."
    )
    if collection not in _warned:
        _warned.add(collection)
        logger.warning(message)
    return None


def collection_bm25_vectors(info: dict[str, Any]) -> str | None:
    """Where an existing collection's BM25 vectors come from (``describe_collection`` of it):
    ``function``, ``client`` or ``None`` (no BM25)."""
    if any(function_type_name(fn.get("type")) == "BM25" for fn in info.get("functions") or []):
        return "function"
    props = info.get("properties") or {}
    if props.get(BM25_VECTORS_PROPERTY) == "client":
        return "client"
    return None


def _field_type(field: dict[str, Any]) -> int:
    value = field.get("type")
    return int(getattr(value, "value", value) or 0)


def check_served(info: dict[str, Any], caps: MilvusCapabilities, collection: str) -> None:
    """Refuse, before anything loads it, a collection the server cannot serve.

    Raises:
        ConfigurationError: the collection has a sparse vector field on a server without sparse
            vectors, or a BM25 function on one without the function.
    """
    sparse = [f.get("name") for f in info.get("fields") or [] if _field_type(f) == _SPARSE_TYPE]
    if sparse and not caps.sparse_vectors:
        raise ConfigurationError(
            f"Collection {collection!r} has a sparse vector field ({', '.join(map(str, sparse))}) "
            f"that {caps.describe()} cannot serve; loading it could stop the server. It was not "
            "loaded: drop it and index again here (dense modes), or open it on Milvus 2.4+."
        )
    if collection_bm25_vectors(info) == "function" and not caps.bm25_function:
        raise ConfigurationError(
            f"Collection {collection!r} uses Milvus' BM25 function, which {caps.describe()} "
            "lacks; it was not loaded. Open it on Milvus 2.5+ or Lite, or index again here."
        )
