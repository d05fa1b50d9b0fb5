"""In-memory copies of a Milvus collection's vectors, for brute-force search with numpy.

Milvus Lite answers every request from Python in the process that opened the file, scanning
every vector (about 3 µs each on 2 cores). That process may search the vectors itself with one
matrix product instead (0.1 ms for 3,600 chunk vectors against 10 ms in Lite): on Lite they are
read where Lite keeps them, without a copy (:func:`~llama_index_rag_pack.milvus.lite.
lite_columns`), elsewhere copied from a query iterator (14.6 s for 120,000 rows on Lite).

A chunk collection's copy is read once per client from its fourth different query on
(:func:`copy_due`; a sentence index searches Lite's vectors from the first), in a background
thread past :data:`SEARCH_READS_UP_TO` rows while Milvus keeps answering
(:func:`wait_for_copies`); :func:`forget_vectors`, which every write through the package calls,
drops it, and a write during a read throws the read away. A metadata filter is resolved once to
the ids it keeps (:func:`matching_ids`): a mask here, an ``id in [...]`` condition on the BM25
side (:mod:`~llama_index_rag_pack.milvus.bm25.bm25_memory`, which keeps its own copy). Writes
around the package are not seen until :func:`forget_vectors` or the client is closed.

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
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from llama_index_rag_pack.core.similarity import (
    UnitRows,
    key_mask,
    normalize_rows_in_place,
    top_scores,
)
from llama_index_rag_pack.milvus.document_rows import ids_expression
from llama_index_rag_pack.milvus.lite import lite_columns
from llama_index_rag_pack.milvus.lite_engine.fast_paths import release_arrow_memory

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_ID_SET",
    "SEARCHES_BEFORE_COPY",
    "BACKGROUND_COPIES",
    "SEARCH_READS_UP_TO",
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
    "vectors_slot",
    "text_page_rows",
    "vector_page_rows",
    "wait_for_copies",
]

#: The most ids a resolved filter keeps as a set (larger ones stay Milvus expressions).
MAX_ID_SET = 20_000
#: Different queries Milvus answers for a collection before its copies are read (:func:`copy_due`).
SEARCHES_BEFORE_COPY = 3
#: Whether a large due copy is read in a background thread (``False``: by the search; tests).
BACKGROUND_COPIES = True
#: Rows up to which a due copy is read by the search even with :data:`BACKGROUND_COPIES`: from
#: Lite's segments, 50,000 rows take about 0.2 s, less than the Lite searches run meanwhile.
SEARCH_READS_UP_TO = 50_000

_READ_BATCH = 2000
#: Rows a query iterator's page holds: as many as fit :data:`VECTOR_PAGE_BYTES`, up to Milvus'
#: largest page (Lite scans per page: 60,000 vectors, 14.0 s in pages of 2,000, 8.3 s of 16,384).
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
# collection -> how many times its copies were dropped (a copy read meanwhile is not kept)
_GENERATIONS: dict[str, int] = {}
# client -> {collection: the slots a background read finished for the current generation}
_READ: weakref.WeakKeyDictionary[Any, dict[str, set[str]]] = weakref.WeakKeyDictionary()
# (id of the client, collection) -> the thread reading its copies
_READERS: dict[tuple[int, str], threading.Thread] = {}
_ONE_READ = threading.Lock()  # one background read at a time
# client -> {(collection, slot): the lock held while that copy is read}
_SLOT_LOCKS: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], threading.Lock]]
_SLOT_LOCKS = weakref.WeakKeyDictionary()


def forget_vectors(client: Any, collection_name: str) -> None:
    """Drop every in-memory copy of ``collection_name``; a copy being read is not kept.

    Copies held for other clients are dropped too: two clients may open the same Lite file, and
    a write through one must not leave the other's copy behind.
    """
    del client  # every client's copy goes
    with _LOCK:
        _GENERATIONS[collection_name] = _GENERATIONS.get(collection_name, 0) + 1
        for copies in [*_COPIES.values(), *_ID_SETS.values(), *_COUNTS.values()]:
            for key in [k for k in copies if k[0] == collection_name]:
                del copies[key]
        for read in _READ.values():
            read.pop(collection_name, None)


def vectors_slot(key_field: str, vector_field: str = "embedding") -> str:
    """The name under which :func:`memory_vectors` holds a copy (a :func:`copy_due` slot)."""
    return f"vectors:{key_field}:{vector_field}"


def wait_for_copies(timeout: float | None = None) -> bool:
    """Wait for the background reads (at most ``timeout`` s); ``True`` when none is left."""
    with _LOCK:
        readers = list(_READERS.values())
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in readers:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    with _LOCK:
        return not any(t.is_alive() for t in _READERS.values())


def copy_due(
    client: Any,
    collection_name: str,
    query_key: str,
    prefetch: Mapping[str, Callable[[], object]] | None = None,
) -> bool:
    """Whether a search of ``collection_name`` for ``query_key`` should read its copies: once
    held, or after more than :data:`SEARCHES_BEFORE_COPY` different queries (one search's
    steps count once); until then Milvus answers, ranking the same (tested both ways).
    ``prefetch``: the copies the search reads (:func:`memory_copy` slots and their reads). With
    it and :data:`BACKGROUND_COPIES`, a due collection of more than :data:`SEARCH_READS_UP_TO`
    rows is read in a background thread, ``False`` until held (one failing there is read by
    the search, which reports why)."""
    with _LOCK:
        held = _COPIES.get(client, {})
        if prefetch is None:
            if any(key[0] == collection_name for key in held):
                return True
        elif all((collection_name, slot) in held for slot in prefetch):
            return True
        try:
            seen = _SEARCHES.setdefault(client, {}).setdefault(collection_name, set())
        except TypeError:  # a client without weak references: no copies kept, so always due
            return True
        if len(seen) <= SEARCHES_BEFORE_COPY:
            seen.add(query_key)
        if len(seen) <= SEARCHES_BEFORE_COPY:
            return False
        if not (prefetch and BACKGROUND_COPIES):
            return True
    if _small(client, collection_name):
        return True  # read by this search, at once
    with _LOCK:
        if set(prefetch) <= _READ.get(client, {}).get(collection_name, set()):
            return True  # read in the background, yet not held: the search reads it itself
        reader = (id(client), collection_name)
        if reader not in _READERS:
            _start_reader(client, collection_name, dict(prefetch))
        return False


def _small(client: Any, collection_name: str) -> bool:
    """Whether the collection has at most :data:`SEARCH_READS_UP_TO` rows (``False``: unknown)."""
    try:
        return row_count(client, collection_name) <= SEARCH_READS_UP_TO
    except Exception:  # any client or server failure
        return False


def _start_reader(
    client: Any, collection_name: str, prefetch: dict[str, Callable[[], object]]
) -> None:
    """Read ``prefetch``'s copies in a daemon thread (called holding ``_LOCK``)."""
    reader, generation = (id(client), collection_name), _GENERATIONS.get(collection_name, 0)

    def read() -> None:
        try:
            with _ONE_READ:
                for build in prefetch.values():
                    build()
        except Exception as e:  # any client or server failure: the search reads it itself
            logger.info("Collection %r: copy not read in the background: %s", collection_name, e)
        finally:
            with _LOCK:
                _READERS.pop(reader, None)
                if _GENERATIONS.get(collection_name, 0) == generation:
                    slots = _READ.setdefault(client, {}).setdefault(collection_name, set())
                    slots.update(prefetch)

    thread = threading.Thread(target=read, name=f"rag-pack-copy-{collection_name}", daemon=True)
    _READERS[reader] = thread
    thread.start()


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
    dropped with the collection's other copies (:func:`forget_vectors`). A copy whose collection
    was written to while it was read is returned but not kept."""
    key = (collection_name, slot)
    with _LOCK:
        try:
            slot_lock = _SLOT_LOCKS.setdefault(client, {}).setdefault(key, threading.Lock())
        except TypeError:  # a client without weak references: nothing is kept
            slot_lock = threading.Lock()
    with slot_lock:  # one read of a copy at a time; the others wait for it
        with _LOCK:
            cached = _COPIES.get(client, {}).get(key, _MISSING)
            generation = _GENERATIONS.get(collection_name, 0)
        if cached is not _MISSING:
            return cast(T, cached)
        built = build()
        release_arrow_memory()  # what reading Lite's columns freed
        with _LOCK, contextlib.suppress(TypeError):
            if _GENERATIONS.get(collection_name, 0) == generation:
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


_PAGE_SAMPLE = 64  # rows sampled to size the pages of a copy of text fields


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
) -> tuple[list[str], np.ndarray | UnitRows]:
    """The ``key_field`` value and unit-length vector of every row, read once per client.

    Returns:
        ``(keys, matrix)``: row ``i`` of ``matrix`` is the vector of ``keys[i]``; ``matrix @
        query`` scores them all. On Milvus Lite in this process it is a
        :class:`~llama_index_rag_pack.core.similarity.UnitRows` over Lite's own arrays (the
        vectors are not held twice), elsewhere a float32 matrix read with queries.
    """

    def read() -> tuple[list[str], np.ndarray | UnitRows]:
        direct = lite_columns(client, collection_name, [key_field, vector_field])
        if direct is not None:  # Lite's own rows and arrays: no copy of the vectors
            shared: dict[str, str] = {}  # a chunk's sentences share one string of its id
            keys = [shared.setdefault(k, k) for k in map(str, direct[key_field])]
            matrix: np.ndarray | UnitRows = direct[vector_field]
            del direct, shared
        else:
            keys, matrix = _read_vectors(client, collection_name, key_field, vector_field)
        logger.info("Collection %r: %d vectors searched in memory", collection_name, len(keys))
        return keys, matrix

    return memory_copy(client, collection_name, vectors_slot(key_field, vector_field), read)


def _read_vectors(
    client: Any, collection_name: str, key_field: str, vector_field: str
) -> tuple[list[str], np.ndarray]:
    """Keys and unit-length float32 rows read with queries, page by page, each page float32 at
    once (a list of every row's Python floats would take eight times the matrix)."""
    keys: list[str] = []
    parts: list[np.ndarray] = []
    page = vector_page_rows(client, collection_name, vector_field)
    for batch in read_rows(client, collection_name, [key_field, vector_field], page):
        keys.extend(str(row[key_field]) for row in batch)
        parts.append(np.asarray([row[vector_field] for row in batch], dtype=np.float32))
    if not parts:
        return keys, np.zeros((0, 0), dtype=np.float32)
    flat = parts[0] if len(parts) == 1 else np.concatenate(parts)  # a fresh array: scaled here
    del parts
    flat = np.require(flat.reshape(len(keys), -1), np.float32, ["C", "W"])
    return keys, normalize_rows_in_place(flat) if keys else flat


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


# an id set -> its ``id in [...]`` expression (dropped with the set)
_ID_EXPRESSIONS: weakref.WeakKeyDictionary[frozenset[str], str] = weakref.WeakKeyDictionary()
