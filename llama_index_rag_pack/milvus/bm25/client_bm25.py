"""BM25 sparse vectors computed by the pack, for a Milvus with sparse vectors and no BM25
function (2.4), or wherever ``bm25_vectors="client"`` asks for them.

A chunk collection ``docs`` analysed on the client holds each chunk's analysed copy
(``bm25_text``). Where Milvus has no BM25 function, the pack turns that copy into the chunk's
sparse vector itself and searches the sparse field with an inner product, with the formula and
parameters Milvus Lite uses (``k1`` 1.5, ``b`` 0.75)::

    document side   w(t, D) = tf(t, D) · (k1 + 1) / (tf(t, D) + k1 · (1 - b + b · |D| / avgdl))
    query side      q(t)    = count(t, Q) · ln((N - df(t) + 0.5) / (df(t) + 0.5) + 1)
    score(D, Q)     = Σ_t q(t) · w(t, D)

A term's dimension is the first 32 bits of its BLAKE2b hash (Milvus hashes terms to 32 bits
too). The statistics (``N`` chunks, their total length, each term's document frequency ``df``)
live beside the collection, in ``docs__bm25_stats`` (one row per term), and are updated by every
insert, upsert and delete through the pack's client (:mod:`~llama_index_rag_pack.milvus.recovery`):
the rows a write replaces or deletes are read first and their terms taken out. One writer at a
time keeps them exact; two processes writing at once may lose each other's updates.

A chunk's weights use the average length ``avgdl`` at the time it is written, where Milvus'
function reads the current one. A collection written in one go (``RagPack(documents)``, ``rag-pack
index``) ranks exactly as the function does; chunks added later carry the average of their
time until ``rag-pack index --reindex`` rewrites them (the query side, ``df`` and ``N``, is always
current).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index_rag_pack.milvus.bm25.bm25_fields import BM25_VECTORS_PROPERTY

logger = logging.getLogger(__name__)

__all__ = [
    "BM25_VECTORS_PROPERTY",
    "CLIENT_BM25_B",
    "CLIENT_BM25_K1",
    "STATS_SUFFIX",
    "EMPTY_VECTOR",
    "NO_MATCH_QUERY",
    "SPARSE_FIELD",
    "WRITE_LOCK",
    "ClientBM25",
    "ClientBM25Function",
    "bm25_idf",
    "stats_collection_name",
    "term_id",
]

#: The companion collection of a chunk collection's BM25 statistics.
STATS_SUFFIX = "__bm25_stats"
CLIENT_BM25_K1 = 1.5
CLIENT_BM25_B = 0.75
#: Statistics rows of the whole collection: its chunk count and total length.
_DOCS_ROW, _LENGTH_ROW = -1, -2
_READ_BATCH = 1000
#: Held by one writer of statistics at a time in this process.
WRITE_LOCK = threading.RLock()
#: Terms hash below this; Milvus' sparse indices run below 2^32 - 1.
_TERM_DIMS = 2**32 - 3
#: The vector of a chunk without terms (Milvus refuses an empty one): one weight on a dimension
#: no term hashes to, so no query ever scores it.
EMPTY_VECTOR = {_TERM_DIMS: 1e-9}
#: The vector of a query without a known term: a dimension no term and no chunk uses.
NO_MATCH_QUERY = {_TERM_DIMS + 1: 1.0}
#: The sparse field of the pack's chunk collections.
SPARSE_FIELD = "sparse_embedding"


def stats_collection_name(collection_name: str) -> str:
    """The statistics collection of chunk collection ``collection_name``."""
    return f"{collection_name}{STATS_SUFFIX}"


def term_id(term: str) -> int:
    """A term's sparse dimension: the first 32 bits of its BLAKE2b hash.

    Example:
        >>> term_id("milvus") == term_id("milvus") and 0 <= term_id("milvus") < 2**32 - 3
        True
    """
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little") % _TERM_DIMS


def _terms(text: str) -> list[str]:
    return [t for t in (text or "").split() if t]


class ClientBM25:
    """The BM25 statistics of one chunk collection and the sparse vectors made from them.

    Args:
        client: A ``pymilvus.MilvusClient``.
        collection_name: The chunk collection (its statistics are in
            :func:`stats_collection_name` of it).
    """

    def __init__(
        self,
        client: Any,
        collection_name: str,
        *,
        k1: float = CLIENT_BM25_K1,
        b: float = CLIENT_BM25_B,
    ) -> None:
        self.client = client
        self.collection_name = collection_name
        self.stats_name = stats_collection_name(collection_name)
        self.k1, self.b = k1, b
        self._loaded = False

    # ------------------------------------------------------------------ the statistics
    def create(self) -> None:
        """Create the statistics collection unless it exists (read at ``Strong`` consistency:
        each write reads what the one before wrote)."""
        from pymilvus import DataType, MilvusClient

        if self.client.has_collection(self.stats_name):
            return
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("df", DataType.INT64)
        # Milvus needs a vector field in every collection; this one is never searched
        schema.add_field("v", DataType.FLOAT_VECTOR, dim=2)
        params = self.client.prepare_index_params()
        params.add_index(field_name="v", index_type="FLAT", metric_type="L2")
        self.client.create_collection(
            self.stats_name, schema=schema, index_params=params, consistency_level="Strong"
        )
        self._loaded = True

    def drop(self) -> None:
        """Drop the statistics collection if it exists."""
        if self.client.has_collection(self.stats_name):
            self.client.drop_collection(self.stats_name)
        self._loaded = False

    def _ensure(self, *, create: bool) -> bool:
        """Whether the statistics collection is there (loaded); ``create`` makes it first."""
        if self._loaded:
            return True
        if not self.client.has_collection(self.stats_name):
            if not create:
                _warn_missing(self.collection_name)
                return False
            self.create()
        self.client.load_collection(self.stats_name)
        self._loaded = True
        return True

    def _read(self, ids: Sequence[int], *, create: bool = False) -> dict[int, int]:
        found: dict[int, int] = {}
        if not self._ensure(create=create):
            return found
        unique = sorted(set(ids))
        for start in range(0, len(unique), _READ_BATCH):
            batch = unique[start : start + _READ_BATCH]
            rows = self.client.query(
                self.stats_name,
                filter=f"id in {batch}",
                output_fields=["id", "df"],
                consistency_level="Strong",
            )
            found.update({int(r["id"]): int(r["df"]) for r in rows or []})
        return found

    def _write(self, values: dict[int, int]) -> None:
        rows = [{"id": key, "df": int(value), "v": [0.0, 0.0]} for key, value in values.items()]
        for start in range(0, len(rows), _READ_BATCH):
            self.client.upsert(self.stats_name, rows[start : start + _READ_BATCH])

    def totals(self) -> tuple[int, int]:
        """``(N, total length)`` of the chunks the statistics count."""
        found = self._read([_DOCS_ROW, _LENGTH_ROW])
        return max(0, found.get(_DOCS_ROW, 0)), max(0, found.get(_LENGTH_ROW, 0))

    def _change(self, texts: Iterable[str], sign: int) -> tuple[int, int]:
        """Add (``sign`` 1) or take out (-1) the terms of ``texts``; the new ``(N, length)``
        (threads of one process take turns: each reads, adds and writes back)."""
        with WRITE_LOCK:
            return self._change_now(texts, sign)

    def _change_now(self, texts: Iterable[str], sign: int) -> tuple[int, int]:
        df: Counter[int] = Counter()
        docs = length = 0
        for text in texts:
            terms = _terms(text)
            docs += 1
            length += len(terms)
            df.update({term_id(t) for t in terms})
        if not docs:
            return self.totals()
        current = self._read([*df, _DOCS_ROW, _LENGTH_ROW], create=True)
        new = {key: current.get(key, 0) + sign * count for key, count in df.items()}
        new[_DOCS_ROW] = current.get(_DOCS_ROW, 0) + sign * docs
        new[_LENGTH_ROW] = current.get(_LENGTH_ROW, 0) + sign * length
        gone = [key for key, value in new.items() if value <= 0 and key >= 0]
        for key in gone:
            del new[key]
        self._write({k: max(0, v) for k, v in new.items()})
        if gone:
            self.client.delete(self.stats_name, ids=gone)
        return max(0, new[_DOCS_ROW]), max(0, new[_LENGTH_ROW])

    def add(self, texts: Sequence[str]) -> list[dict[int, float]]:
        """Count the analysed ``texts`` into the statistics; their sparse vectors."""
        docs, length = self._change(texts, 1)
        avgdl = length / docs if docs else 1.0
        return [self.document_vector(text, avgdl) for text in texts]

    def remove(self, texts: Iterable[str]) -> None:
        """Take the analysed ``texts`` (of rows being deleted or replaced) out of the
        statistics."""
        self._change(texts, -1)

    def clear(self) -> None:
        """Forget every statistic (the chunk collection was emptied or dropped)."""
        self.drop()

    # ------------------------------------------------------------------ vectors
    def document_vector(self, text: str, avgdl: float) -> dict[int, float]:
        """The sparse vector of one analysed text, for the average length ``avgdl``."""
        terms = _terms(text)
        if not terms:
            return {}
        norm = self.k1 * (1 - self.b + self.b * len(terms) / max(avgdl, 1e-9))
        out: dict[int, float] = {}
        for term, tf in Counter(terms).items():
            key = term_id(term)
            out[key] = out.get(key, 0.0) + tf * (self.k1 + 1) / (tf + norm)
        return out

    def query_vector(self, text: str) -> dict[int, float]:
        """The sparse vector of an analysed query: each term's count times its IDF under the
        current statistics (``{}``: no term of it is in any chunk)."""
        counts = Counter(term_id(t) for t in _terms(text))
        if not counts:
            return {}
        found = self._read([*counts, _DOCS_ROW])
        docs = max(0, found.get(_DOCS_ROW, 0))
        out = {}
        for key, count in counts.items():
            df = found.get(key, 0)
            if df > 0:
                out[key] = count * bm25_idf(docs, df)
        return out


def bm25_idf(docs: int, df: int) -> float:
    """A term's inverse document frequency among ``docs`` chunks, ``df`` of which hold it.

    Example:
        >>> round(bm25_idf(10, 1), 4), round(bm25_idf(10, 10), 4)
        (1.9924, 0.0465)
    """
    return math.log((docs - df + 0.5) / (df + 0.5) + 1)


def _base_sparse_function() -> type:
    from llama_index.vector_stores.milvus.utils import BaseSparseEmbeddingFunction

    return BaseSparseEmbeddingFunction


class ClientBM25Function(_base_sparse_function()):  # type: ignore[misc]
    """``MilvusVectorStore``'s sparse embedding function for pack-computed BM25: queries are
    analysed and weighted by IDF; documents are the analysed copies themselves (the pack's
    client weights them as it writes them).

    Args:
        bm25: The collection's statistics.
        analysis: The collection's BM25 analysis (a client-side one).
    """

    def __init__(self, bm25: ClientBM25, analysis: Any) -> None:
        self.bm25, self.analysis = bm25, analysis

    def encode_queries(self, queries: list[str]) -> list[dict[int, float]]:
        # a query none of whose terms any chunk holds matches nothing (Milvus refuses an empty
        # sparse vector): one weight on a dimension no term and no chunk uses
        return [
            self.bm25.query_vector(self.analysis.query_text(q)) or dict(NO_MATCH_QUERY)
            for q in queries
        ]

    def encode_documents(self, documents: list[str]) -> list[dict[int, float]]:
        # rows the pack writes carry their analysed copy and are weighed (and counted) by the
        # pack's client as they are written; these are weighed with the current statistics
        docs, length = self.bm25.totals()
        avgdl = length / docs if docs else 1.0
        texts = [self.analysis.analyse_document(d).text for d in documents]
        return [self.bm25.document_vector(t, avgdl) or dict(EMPTY_VECTOR) for t in texts]


_warned_missing: set[str] = set()


def _warn_missing(collection_name: str) -> None:
    if collection_name not in _warned_missing:
        _warned_missing.add(collection_name)
        logger.warning(
            "The BM25 statistics of collection %r (%s) are missing: its BM25 searches find "
            "nothing until `rag-pack index --reindex` rebuilds them.",
            collection_name,
            stats_collection_name(collection_name),
        )
