"""In-memory copies of a Milvus collection's vectors, for brute-force search with numpy.

Milvus Lite answers every request from Python in the process that opened the file, scanning
every vector of a collection (about 3 µs each on a 2-core machine) and decoding each hit's
payload. A Lite file belongs to one process, so that process may hold a copy of the vectors and
search it with one matrix product instead: 0.1 ms for 3,600 chunk vectors against 10 ms in Lite,
2 ms for 25,000 sentence vectors against 80 ms.

A copy is read once per client and collection, from the collection's fourth different query on
(:func:`copy_due`: Milvus answers the first ones, faster than reading a copy for a process that
asks one question), and :func:`forget_vectors` drops it; every write
through the package (``RagPack.insert``, ``delete``, the sentence index) calls it, so a copy never
outlives the rows it was read from. A metadata filter is resolved the same way: once, to the set
of ids it keeps (:func:`matching_ids`), which masks the in-memory search and becomes an
``id in [...]`` condition on the BM25 side (a primary-key lookup instead of a JSON scan per row).
The BM25 side keeps its own copy the same way
(:mod:`~llama_index_rag_pack.milvus.bm25.bm25_memory`). Writes made around the package (another
``MilvusVectorStore`` on the same file) are not seen until :func:`forget_vectors` is called or
the client is closed.

Example:
    >>> keys, matrix = memory_vectors(client, "docs", key_field="id")  # doctest: +SKIP
    >>> top_scores(keys, matrix, query_vector, limit=50)  # doctest: +SKIP
    [('3f2a…', 0.71), ('9c1e…', 0.64), ...]
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from llama_index_rag_pack.core.similarity import normalize_rows
from llama_index_rag_pack.milvus.document_rows import ids_expression

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_ID_SET",
    "SEARCHES_BEFORE_COPY",
    "copy_due",
    "forget_vectors",
    "id_filter",
    "key_mask",
    "matching_ids",
    "MAX_VECTOR_PAGE",
    "MIN_PAGE",
    "VECTOR_PAGE_BYTES",
    "memory_copy",
    "memory_vectors",
    "read_rows",
    "row_count",
    "top_scores",
    "vector_key",
    "text_page_rows",
    "vector_page_rows",
]

#: The most ids a resolved filter keeps as a set (larger ones stay Milvus expressions).
MAX_ID_SET = 20_000
#: Different queries Milvus answers for a collection before the process copies it into memory
#: (:func:`copy_due`): reading the demo's 316 chunks and 2,276 sentences with their BM25 texts
#: takes about 0.4 s against about 50 ms for one search in Lite, so it pays for itself only over
#: several searches, while a one-question ``rag-pack ask`` makes one.
SEARCHES_BEFORE_COPY = 3

_READ_BATCH = 2000
#: Rows a page of a vector copy holds: as many as fit :data:`VECTOR_PAGE_BYTES`, between
#: :data:`MIN_PAGE` and :data:`MAX_VECTOR_PAGE` (Milvus' largest query page). Milvus Lite finds
#: each page of a query iterator by scanning the collection, so small pages make a copy's read
#: grow with the square of the rows: 14.0 s for 60,000 384-d vectors in pages of 2,000 rows,
#: 8.3 s in pages of 16,384.
MAX_VECTOR_PAGE = 16_384
#: The fewest rows a page of a copy holds, however wide its rows.
MIN_PAGE = 256
#: Bytes of vectors a page may carry (Milvus Lite and Milvus answer up to 256 MB a message).
VECTOR_PAGE_BYTES = 64 * 1024 * 1024

T = TypeVar("T")
_MISSING = object()

# client -> {(collection, what): the copy (e.g. keys and a unit-length float32 matrix)}
_COPIES: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]]
_COPIES = weakref.WeakKeyDictionary()
# client -> {(collection, expression): the ids it keeps, or None when there are too many}
_ID_SETS: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], frozenset[str] | None]]
_ID_SETS = weakref.WeakKeyDictionary()
# client -> {(collection, ""): its number of rows}
_COUNTS: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], int]] = weakref.WeakKeyDictionary()
# client -> {collection: the queries it was searched with while no copy of it was held}
_SEARCHES: weakref.WeakKeyDictionary[Any, dict[str, set[str]]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def forget_vectors(client: Any, collection_name: str) -> None:
    """Drop every in-memory copy of ``collection_name``.

    Copies held for other clients are dropped too: two clients may open the same Lite file, and
    a write through one must not leave the other's copy behind.
    """
    del client  # kept for symmetry with memory_vectors; every client's copy goes
    with _LOCK:
        for copies in [*_COPIES.values(), *_ID_SETS.values(), *_COUNTS.values()]:
            for key in [k for k in copies if k[0] == collection_name]:
                del copies[key]


def copy_due(client: Any, collection_name: str, query_key: str) -> bool:
    """Whether a search of ``collection_name`` for ``query_key`` should read (and, the first
    time, make) the collection's in-memory copies: once one is held, or once the collection has
    been searched with more than :data:`SEARCHES_BEFORE_COPY` different queries. The steps of
    one search ask with the same key and count once. Until then Milvus answers, which ranks the
    same (tests compare the default and BM25 modes, and the sentence search, both ways)."""
    with _LOCK:
        if any(key[0] == collection_name for key in _COPIES.get(client, {})):
            return True
        try:
            seen = _SEARCHES.setdefault(client, {}).setdefault(collection_name, set())
        except TypeError:  # a client without weak references: no copies kept, so always due
            return True
        if len(seen) <= SEARCHES_BEFORE_COPY:
            seen.add(query_key)
        return len(seen) > SEARCHES_BEFORE_COPY


def vector_key(vector: Sequence[float]) -> str:
    """A :func:`copy_due` key for a search by ``vector``."""
    return hashlib.blake2b(
        np.asarray(vector, dtype=np.float32).tobytes(), digest_size=16
    ).hexdigest()


def matching_ids(client: Any, collection_name: str, expr: str) -> frozenset[str] | None:
    """The ids of the rows matching the Milvus expression ``expr``, read once per client and
    expression (``None`` when more than :data:`MAX_ID_SET` match: keep the expression)."""
    with _LOCK:
        cached = _ID_SETS.get(client, {})
        if (collection_name, expr) in cached:
            return cached[(collection_name, expr)]
    ids: list[str] = []
    it = client.query_iterator(
        collection_name, batch_size=_READ_BATCH, filter=expr, output_fields=["id"]
    )
    try:
        while (batch := it.next()) and len(ids) <= MAX_ID_SET:
            ids.extend(str(row["id"]) for row in batch)
    finally:
        it.close()
    found = frozenset(ids) if len(ids) <= MAX_ID_SET else None
    with _LOCK, contextlib.suppress(TypeError):
        _ID_SETS.setdefault(client, {})[(collection_name, expr)] = found
    return found


def memory_copy(client: Any, collection_name: str, slot: str, build: Callable[[], T]) -> T:
    """What ``build()`` reads from ``collection_name``, built once per client and ``slot`` and
    dropped with the collection's other copies (:func:`forget_vectors`)."""
    key = (collection_name, slot)
    with _LOCK:
        cached = _COPIES.get(client, {}).get(key, _MISSING)
        if cached is not _MISSING:
            return cast(T, cached)
        built = build()
        with contextlib.suppress(TypeError):
            _COPIES.setdefault(client, {})[key] = built
        return built


def vector_page_rows(client: Any, collection_name: str, vector_field: str) -> int:
    """Rows a page of ``vector_field``'s copy holds (:data:`VECTOR_PAGE_BYTES` of vectors,
    between :data:`MIN_PAGE` and :data:`MAX_VECTOR_PAGE` rows; ``_READ_BATCH`` when the field's
    dimension cannot be read)."""
    dim = 0
    with contextlib.suppress(Exception):  # any client or server failure: the small pages
        for field in client.describe_collection(collection_name).get("fields", []):
            if field.get("name") == vector_field:
                dim = int((field.get("params") or {}).get("dim") or 0)
    if dim <= 0:
        return _READ_BATCH
    return max(MIN_PAGE, min(MAX_VECTOR_PAGE, VECTOR_PAGE_BYTES // (4 * dim + 256)))


#: Rows sampled to size the pages of a copy of text fields (:func:`text_page_rows`).
_PAGE_SAMPLE = 64


def text_page_rows(client: Any, collection_name: str, fields: list[str]) -> int:
    """Rows a page of a copy of text ``fields`` holds: :data:`VECTOR_PAGE_BYTES` over four
    times the largest of :data:`_PAGE_SAMPLE` sampled rows (a page of longer rows than the
    sample's still fits the 256 MB a message may carry), between :data:`MIN_PAGE` and
    :data:`MAX_VECTOR_PAGE` rows; ``_READ_BATCH`` when the sample cannot be read."""
    try:
        sample = client.query(collection_name, filter="", output_fields=fields, limit=_PAGE_SAMPLE)
    except Exception:  # any client or server failure: the small pages
        return _READ_BATCH
    widest = max(
        (sum(len(str(row.get(f) or "").encode()) for f in fields) for row in sample or []),
        default=0,
    )
    if widest <= 0:
        return _READ_BATCH
    return max(MIN_PAGE, min(MAX_VECTOR_PAGE, VECTOR_PAGE_BYTES // (4 * widest)))


def memory_vectors(
    client: Any, collection_name: str, *, key_field: str, vector_field: str = "embedding"
) -> tuple[list[str], np.ndarray]:
    """The ``key_field`` value and unit-length vector of every row, read once per client.

    Returns:
        ``(keys, matrix)``: row ``i`` of the float32 ``matrix`` is the vector of ``keys[i]``.
    """

    def read() -> tuple[list[str], np.ndarray]:
        keys: list[str] = []
        # each batch becomes float32 at once: a list of every row's Python floats would take
        # eight times the matrix (1.2 GB for 100,000 384-d vectors) before it is converted
        parts: list[np.ndarray] = []
        page = vector_page_rows(client, collection_name, vector_field)
        for batch in read_rows(client, collection_name, [key_field, vector_field], page):
            keys.extend(str(row[key_field]) for row in batch)
            parts.append(np.asarray([row[vector_field] for row in batch], dtype=np.float32))
        flat = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        del parts
        matrix = normalize_rows(flat.reshape(len(keys), -1) if keys else flat)
        logger.info(
            "Collection %r: %d vectors held in memory (%.0f MB)",
            collection_name,
            len(keys),
            matrix.nbytes / 1e6,
        )
        return keys, matrix

    return memory_copy(client, collection_name, f"vectors:{key_field}:{vector_field}", read)


def read_rows(
    client: Any, collection_name: str, fields: list[str], batch_size: int = _READ_BATCH
) -> Iterator[list[dict]]:
    """Every row of the collection (``fields`` only), in batches of ``batch_size`` rows."""
    it = client.query_iterator(
        collection_name, batch_size=batch_size, filter="", output_fields=fields
    )
    try:
        while batch := it.next():
            yield batch
    finally:
        it.close()


def row_count(client: Any, collection_name: str) -> int:
    """The collection's number of rows, read once per client (dropped with the copies)."""
    with _LOCK:
        cached = _COUNTS.get(client, {}).get((collection_name, ""))
    if cached is not None:
        return cached
    res = client.query(collection_name, filter="", output_fields=["count(*)"])
    count = int(res[0]["count(*)"]) if res else 0
    with _LOCK, contextlib.suppress(TypeError):
        _COUNTS.setdefault(client, {})[(collection_name, "")] = count
    return count


def id_filter(client: Any, collection_name: str, expr: str) -> str:
    """``expr`` as an ``id in [...]`` condition (a primary-key lookup) when
    :func:`matching_ids` holds its ids, else ``expr`` itself."""
    if not expr:
        return expr
    ids = matching_ids(client, collection_name, expr)
    if ids is None:
        return expr
    return _ID_EXPRESSIONS.setdefault(ids, ids_expression("id", sorted(ids)))


def top_scores(
    keys: Sequence[str],
    matrix: np.ndarray,
    embedding: Sequence[float],
    limit: int,
    only: frozenset[str] | None = None,
) -> list[tuple[str, float]]:
    """The ``limit`` rows most similar to ``embedding`` (cosine), as ``(key, score)``; with
    ``only``, among the rows whose key is in it.

    A key that appears on several rows keeps its best score. Best first; equal scores by key.
    """
    if not keys or limit <= 0:
        return []
    query = np.asarray(embedding, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    scores = matrix @ (query / norm if norm > 0 else query)
    if only is not None:
        keep = key_mask(keys, only)
        scores = np.where(keep, scores, -np.inf)
        limit = min(limit, int(keep.sum()))
        if limit <= 0:
            return []
    k = min(limit, len(keys))
    top = np.argpartition(-scores, k - 1)[:k]
    best: dict[str, float] = {}
    for i in top.tolist():
        key, score = keys[i], float(scores[i])
        if score > best.get(key, float("-inf")):
            best[key] = score
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))


# an id set -> its ``id in [...]`` expression (dropped with the set)
_ID_EXPRESSIONS: weakref.WeakKeyDictionary[frozenset[str], str] = weakref.WeakKeyDictionary()
# (id of the keys list, the id set) -> boolean mask over the keys
_MASKS: dict[tuple[int, int], tuple[Sequence[str], frozenset[str], np.ndarray]] = {}


def key_mask(keys: Sequence[str], only: frozenset[str]) -> np.ndarray:
    """Which of ``keys`` are in ``only`` (cached while both objects live)."""
    slot = (id(keys), id(only))
    cached = _MASKS.get(slot)
    if cached is not None and cached[0] is keys and cached[1] is only:
        return cached[2]
    mask = np.fromiter((k in only for k in keys), dtype=bool, count=len(keys))
    if len(_MASKS) > 32:
        _MASKS.clear()
    _MASKS[slot] = (keys, only, mask)
    return mask
