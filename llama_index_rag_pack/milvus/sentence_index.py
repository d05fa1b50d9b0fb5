"""The sentence index: one Milvus collection of sentence vectors beside a chunk collection.

For a chunk collection ``docs`` it is the collection ``docs__sentences``, holding for every
sentence of every chunk (:mod:`~llama_index_rag_pack.documents.sentences`) its id, its chunk's
id, its document's id and its embedding. A search returns chunks scored by their best sentence.
It lives on the same Milvus as the chunks (Lite or a server), so nothing else has to be kept.

Milvus Lite searches by scanning every vector at about 3 µs each (80 ms for 25,000 sentences on
a 2-core machine), and the sentence index holds about seven times as many vectors as there are
chunks. With ``in_memory=True`` (what the retrievers use on a Lite file, which only one process
can open) the index reads its vectors once into a float32 matrix and searches that with numpy
(a few ms); writes through this class drop the copy, so it never goes stale. On a server the
search runs in Milvus.

Example:
    >>> index = MilvusSentenceIndex(client, "docs")  # doctest: +SKIP
    >>> index.create(dim=384)  # doctest: +SKIP
    >>> index.insert(units, vectors)  # doctest: +SKIP
    >>> index.search(query_vector, limit=200)  # doctest: +SKIP
    [('3f2a…', 0.71), ('9c1e…', 0.64), ...]
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.document_rows import ids_expression
from llama_index_rag_pack.milvus.index_creation import create_indexes
from llama_index_rag_pack.milvus.lite import served_here
from llama_index_rag_pack.milvus.vector_memory import (
    copy_due,
    forget_vectors,
    memory_vectors,
    top_scores,
    vector_key,
    vectors_slot,
)

logger = logging.getLogger(__name__)

__all__ = ["SENTENCE_COLLECTION_SUFFIX", "MilvusSentenceIndex", "sentence_collection_name"]

SENTENCE_COLLECTION_SUFFIX = "__sentences"
_ID_MAX = 64
_INSERT_BATCH = 1000
_DELETE_BATCH = 500


def _floats(vector: Any) -> list[float]:
    """A vector as the list of floats a row carries (from a numpy row or any sequence)."""
    return vector.tolist() if hasattr(vector, "tolist") else [float(x) for x in vector]


def sentence_collection_name(collection_name: str) -> str:
    """The name of the sentence collection of chunk collection ``collection_name``."""
    return f"{collection_name}{SENTENCE_COLLECTION_SUFFIX}"


class MilvusSentenceIndex:
    """Sentence vectors of a chunk collection, searched for the chunks' best sentences.

    Args:
        client: A ``pymilvus.MilvusClient`` (the chunk store's ``.client``).
        collection_name: The *chunk* collection; the sentences go to
            :func:`sentence_collection_name` of it.
        in_memory: Search an in-memory copy of the vectors (for Milvus Lite) instead of Milvus.
    """

    def __init__(self, client: Any, collection_name: str, *, in_memory: bool = False) -> None:
        self.client = client
        self.chunk_collection = collection_name
        self.collection_name = sentence_collection_name(collection_name)
        self.in_memory = in_memory
        self._loaded = False

    def _forget_memory(self) -> None:
        # the sentences change with their chunks: drop the copies of both
        forget_vectors(self.client, self.collection_name)
        forget_vectors(self.client, self.chunk_collection)

    # ------------------------------------------------------------------ lifecycle
    def exists(self) -> bool:
        """True when the sentence collection exists."""
        return bool(self.client.has_collection(self.collection_name))

    def create(self, dim: int, *, overwrite: bool = False) -> None:
        """Create the collection (COSINE, FLAT) unless it exists; ``overwrite`` drops it first.

        Raises:
            ConfigurationError: an existing collection holds vectors of another dimension.
        """
        from pymilvus import DataType, MilvusClient

        self._forget_memory()
        if overwrite:
            self.drop()
        if self.exists():
            existing = self._dim()
            if existing is not None and existing != dim:
                raise ConfigurationError(
                    f"Sentence collection {self.collection_name!r} holds {existing}-d vectors but "
                    f"the embedding model makes {dim}-d ones: re-index with overwrite=True."
                )
            return
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=_ID_MAX)
        schema.add_field("chunk_id", DataType.VARCHAR, max_length=_ID_MAX * 4)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=65535)
        schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=dim)
        index_params = self.client.prepare_index_params()
        index_params.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
        self.client.create_collection(self.collection_name, schema=schema)
        create_indexes(self.client, self.collection_name, index_params)
        self._loaded = False

    def drop(self) -> None:
        """Drop the collection if it exists."""
        if self.exists():
            self.client.drop_collection(self.collection_name)
        self._loaded = False
        self._forget_memory()

    def _dim(self) -> int | None:
        info = self.client.describe_collection(self.collection_name)
        for f in info.get("fields", []):
            if f.get("name") == "embedding":
                dim = f.get("params", {}).get("dim")
                return int(dim) if dim is not None else None
        return None

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.client.load_collection(self.collection_name)
            self._loaded = True

    # ------------------------------------------------------------------ writes
    def insert(
        self, units: Sequence[Any], vectors: Sequence[Sequence[float]], *, flush: bool = True
    ) -> int:
        """Store ``units`` (``SentenceUnit``-like: id, chunk_id, doc_id) with their vectors.
        ``flush=False`` leaves the flush to the caller (:meth:`flush`, after more inserts): the
        rows are stored and searchable either way, and Milvus Lite seals a segment at every
        flush.

        Returns:
            The number of rows written.
        """
        if len(units) != len(vectors):
            raise ValueError(f"{len(units)} sentences but {len(vectors)} vectors")
        self._forget_memory()
        for start in range(0, len(units), _INSERT_BATCH):  # rows made batch by batch
            stop = start + _INSERT_BATCH
            rows = [
                {"id": u.id, "chunk_id": u.chunk_id, "doc_id": u.doc_id, "embedding": _floats(v)}
                for u, v in zip(units[start:stop], vectors[start:stop], strict=True)
            ]
            self.client.upsert(self.collection_name, data=rows)
        if len(units) and flush:
            self.flush()
        return len(units)

    def flush(self) -> None:
        """Seal what was inserted (when the collection exists)."""
        if self.exists():
            self.client.flush(self.collection_name)

    def delete_documents(self, doc_ids: Sequence[str]) -> None:
        """Delete the sentences of these documents, whatever their tenant (see
        :meth:`delete_chunks`)."""
        self._delete("doc_id", doc_ids)

    def delete_chunks(self, chunk_ids: Sequence[str]) -> None:
        """Delete the sentences of these chunks (chunk ids are unique across tenants)."""
        self._delete("chunk_id", chunk_ids)

    def _delete(self, field: str, values: Sequence[str]) -> None:
        if not values or not self.exists():
            return
        self._forget_memory()
        for start in range(0, len(values), _DELETE_BATCH):
            expr = ids_expression(field, values[start : start + _DELETE_BATCH])
            self.client.delete(self.collection_name, filter=expr)

    # ------------------------------------------------------------------ reads
    def count(self) -> int:
        """Number of sentences stored (0 when the collection does not exist)."""
        if not self.exists():
            return 0
        self._ensure_loaded()
        res = self.client.query(self.collection_name, filter="", output_fields=["count(*)"])
        return int(res[0]["count(*)"]) if res else 0

    def search(
        self, embedding: Sequence[float], limit: int, only: frozenset[str] | None = None
    ) -> list[tuple[str, float]]:
        """Chunks of the ``limit`` sentences nearest ``embedding``, each scored by its best
        sentence (cosine similarity), best first; equal scores by chunk id. ``only`` (in-memory
        search): the chunk ids that may be returned."""
        if self.in_memory and (
            only is not None  # only the in-memory search can keep to it
            # Lite's vectors are searched where they are (no copy): at once, a Lite search
            # would normalise a copy of every vector per question
            or served_here(self.client)
            or copy_due(
                self.client,
                self.collection_name,
                vector_key(embedding),
                {vectors_slot("chunk_id"): self._read_copy},
            )
        ):
            return self._search_memory(embedding, limit, only)
        self._ensure_loaded()
        res = self.client.search(
            self.collection_name,
            data=[list(embedding)],
            anns_field="embedding",
            limit=limit,
            output_fields=["chunk_id"],
            search_params={"metric_type": "COSINE"},
        )
        best: dict[str, float] = {}
        for hit in res[0] if res else []:
            chunk = str(hit.get("entity", {}).get("chunk_id") or "")
            score = float(hit.get("distance", 0.0))
            if chunk and score > best.get(chunk, float("-inf")):
                best[chunk] = score
        return sorted(best.items(), key=lambda item: (-item[1], item[0]))

    def _search_memory(
        self, embedding: Sequence[float], limit: int, only: frozenset[str] | None = None
    ) -> list[tuple[str, float]]:
        chunk_ids, matrix = self._read_copy()
        return top_scores(chunk_ids, matrix, embedding, limit, only)

    def _read_copy(self) -> tuple[list[str], Any]:
        self._ensure_loaded()
        return memory_vectors(self.client, self.collection_name, key_field="chunk_id")
