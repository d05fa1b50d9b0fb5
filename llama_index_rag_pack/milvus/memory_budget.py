"""How much memory the in-memory copies of a Milvus Lite collection may take.

On a Lite file the retrievers search copies of the chunk vectors, the sentence vectors and the
BM25 index held in the process (:mod:`~llama_index_rag_pack.milvus.vector_memory`): a few ms per
question instead of a scan in Lite. The vectors are read where Lite keeps them (no copy of
them), so what they add grows with the collection by a key and a scale per vector (about 100
bytes per chunk, 12 per sentence) plus about 1 KB of BM25 index per chunk; read with queries
(another Lite release) the vectors are copied (about 1.6 KB each with a 384-d model). They are
bounded:

* ``RAG_PACK_MEMORY_COPIES=off`` never makes them: every search runs in Milvus Lite, as it would
  on a server (the same rankings, up to ties of equal scores; slower on large collections);
* ``RAG_PACK_MEMORY_BUDGET_MB`` (default :data:`DEFAULT_BUDGET_MB`) is the most their estimate
  may take: a collection whose copies would need more is searched in Milvus (logged once).

The estimate is taken when a retriever is built (once per mode and pack, again after an insert).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "BM25_BYTES_PER_CHUNK",
    "DEFAULT_BUDGET_MB",
    "copies_budget_mb",
    "copies_fit",
    "estimated_copies_mb",
]

#: The default budget of one collection's copies, in MB.
DEFAULT_BUDGET_MB = 4096
#: The BM25 copy's size per chunk (its terms' weights and ids), estimated.
BM25_BYTES_PER_CHUNK = 1024
#: A chunk vector's key (its id, a Python string) and its scale (float32).
_KEY_BYTES = 100
#: A sentence vector's key (its chunk's id string, shared with the chunk's other sentences:
#: a pointer) and its scale.
_SENTENCE_KEY_BYTES = 12
_WARNED: set[tuple[str, int]] = set()


def copies_budget_mb() -> float:
    """The budget in MB: 0 with ``RAG_PACK_MEMORY_COPIES=off``, else
    ``RAG_PACK_MEMORY_BUDGET_MB`` or :data:`DEFAULT_BUDGET_MB`.

    Raises:
        ConfigurationError: ``RAG_PACK_MEMORY_COPIES`` is neither ``on`` nor ``off``, or the
            budget is not a number of MB.
    """
    switch = os.environ.get("RAG_PACK_MEMORY_COPIES", "on").strip().lower()
    if switch not in ("on", "off"):
        raise ConfigurationError(f"RAG_PACK_MEMORY_COPIES must be on or off; got {switch!r}.")
    if switch == "off":
        return 0.0
    raw = os.environ.get("RAG_PACK_MEMORY_BUDGET_MB", str(DEFAULT_BUDGET_MB))
    try:
        budget = float(raw)
    except ValueError:
        budget = -1.0
    if budget < 0 or budget != budget:  # negative, or not a number
        raise ConfigurationError(
            f"RAG_PACK_MEMORY_BUDGET_MB must be a number of MB (0 or more); got {raw!r}."
        )
    return budget


def estimated_copies_mb(chunks: int, sentences: int, dim: int, *, copied: bool = False) -> float:
    """The estimated size in MB of the copies of ``chunks`` chunk vectors with their BM25
    index and ``sentences`` sentence vectors of dimension ``dim``: read from Lite's segments
    (the vectors stay Lite's), or ``copied`` (read with queries: a float32 row each)."""
    row = dim * 4 if copied else 0
    return (
        chunks * (row + _KEY_BYTES + BM25_BYTES_PER_CHUNK) + sentences * (row + _SENTENCE_KEY_BYTES)
    ) / 2**20


def copies_fit(store: Any, sentence_index: Any = None) -> bool:
    """Whether the copies of ``store``'s collection (and of its ``sentence_index``) fit the
    budget (:func:`copies_budget_mb`)."""
    from llama_index_rag_pack.milvus.connection import count_entities
    from llama_index_rag_pack.milvus.lite import served_here

    budget = copies_budget_mb()
    if budget <= 0:
        return False
    chunks = count_entities(store)
    sentences = sentence_index.count() if sentence_index is not None else 0
    dim = int(getattr(store, "dim", None) or 384)
    need = estimated_copies_mb(chunks, sentences, dim, copied=not served_here(store.client))
    if need <= budget:
        return True
    key = (str(getattr(store, "collection_name", "")), chunks)
    if key not in _WARNED:
        _WARNED.add(key)
        logger.info(
            "In-memory copies of %s would take about %.0f MB, over the %.0f MB budget "
            "(RAG_PACK_MEMORY_BUDGET_MB): searched in Milvus Lite instead",
            key[0],
            need,
            budget,
        )
    return False
