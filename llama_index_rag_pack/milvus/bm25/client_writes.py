"""The pack's client writing to a collection whose BM25 vectors it computes
(:mod:`~llama_index_rag_pack.milvus.bm25.client_bm25`): every insert and upsert weighs its rows
and counts them into the statistics, every delete takes its rows out, and a write that fails takes
back what it counted. :mod:`~llama_index_rag_pack.milvus.recovery` routes the client's writes
through here; a collection of any other kind is written as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from llama_index_rag_pack.milvus.bm25.bm25_fields import BM25_TEXT_FIELD, BM25_VECTORS_PROPERTY
from llama_index_rag_pack.milvus.bm25.client_bm25 import (
    EMPTY_VECTOR,
    SPARSE_FIELD,
    STATS_SUFFIX,
    WRITE_LOCK,
    ClientBM25,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Weighing",
    "collection_client_bm25",
    "counted_delete",
    "forget_collection",
    "stored_texts",
    "weigh_rows",
    "weighed_write",
]

_READ_BATCH = 1000


def collection_client_bm25(client: Any, collection_name: Any) -> ClientBM25 | None:
    """The statistics of ``collection_name`` when the pack computes its BM25 vectors (read once
    per client and collection), else ``None``."""
    if not isinstance(collection_name, str) or collection_name.endswith(STATS_SUFFIX):
        return None
    cache = client.__dict__.setdefault("_rag_pack_client_bm25", {})
    if collection_name in cache:
        return cache[collection_name]
    if not client.has_collection(collection_name):
        return None
    props = client.describe_collection(collection_name).get("properties") or {}
    found = None
    if props.get(BM25_VECTORS_PROPERTY) == "client":
        found = ClientBM25(client, collection_name)
    cache[collection_name] = found
    return found


def forget_collection(client: Any, collection_name: Any) -> None:
    """Read the collection's kind again on its next write (it was created or dropped)."""
    client.__dict__.get("_rag_pack_client_bm25", {}).pop(collection_name, None)


def stored_texts(
    client: Any, collection_name: str, *, ids: Any = None, expr: str = ""
) -> dict[str, str]:
    """The analysed copies of the rows with ``ids`` or matching ``expr``, by row id (read at
    ``Strong`` consistency: rows written just before are seen)."""
    if ids is not None:
        ids = list(ids) if isinstance(ids, (list, tuple, set)) else [ids]
        if not ids:
            return {}
        from llama_index_rag_pack.milvus.document_rows import ids_expression

        expr = ids_expression("id", ids)
    texts: dict[str, str] = {}
    iterator = client.query_iterator(
        collection_name,
        batch_size=_READ_BATCH,
        filter=expr,
        output_fields=["id", BM25_TEXT_FIELD],
        consistency_level="Strong",
    )
    try:
        while batch := iterator.next():
            texts.update({str(r["id"]): str(r.get(BM25_TEXT_FIELD) or "") for r in batch})
    finally:
        iterator.close()
    return texts


#: Rows weighed by :func:`weigh_rows` and not written yet (by ``id()``): written as they are.
_WEIGHED: set[int] = set()


class Weighing:
    """What :func:`weigh_rows` counted, so a write that fails can take it back: the new rows'
    terms out, the replaced rows' terms in, for the rows not written."""

    def __init__(
        self, bm25: ClientBM25, new: dict[int, tuple[str, str]], old: dict[str, str]
    ) -> None:
        self.bm25, self._new, self._old = bm25, new, old

    def written(self, rows: Iterable[dict[str, Any]]) -> None:
        """``rows`` were written: nothing of theirs is taken back any more."""
        for row in rows:
            entry = self._new.pop(id(row), None)
            _WEIGHED.discard(id(row))
            if entry is not None:
                self._old.pop(entry[0], None)

    def undo(self) -> None:
        """Take back what the rows not written changed (a failure is logged: the error of the
        write is the one raised)."""
        new = [text for _, text in self._new.values()]
        old = list(self._old.values())
        for key in self._new:
            _WEIGHED.discard(key)
        self._new, self._old = {}, {}
        try:
            if new:
                self.bm25.remove(new)
            if old:
                self.bm25.add(old)
        except Exception as e:  # the server went away too: the statistics are off until reindex
            logger.warning(
                "Could not restore the BM25 statistics of %r after a failed write (%s): "
                "`rag-pack index --reindex` rebuilds them.",
                self.bm25.collection_name,
                e,
            )


def weigh_rows(
    client: Any, collection_name: str, rows: list[dict[str, Any]], *, replace: bool
) -> Weighing | None:
    """Give each row its BM25 vector, made from its analysed copy, and count it into the
    statistics: with ``replace`` (an upsert) the stored rows of the same ids are taken out
    first. Returns what undoes it for rows a failed write did not store, or ``None`` when the
    collection's BM25 vectors are not the pack's. Hold :data:`WRITE_LOCK` from here until the
    rows are written."""
    bm25 = collection_client_bm25(client, collection_name)
    if bm25 is None:
        return None
    ids = [str(r["id"]) for r in rows if "id" in r]
    old = stored_texts(client, collection_name, ids=ids) if replace and ids else {}
    texts = [str(r.get(BM25_TEXT_FIELD) or "") for r in rows]
    if old:
        bm25.remove(list(old.values()))
    try:
        vectors = bm25.add(texts)
    except BaseException:
        Weighing(bm25, {}, old).undo()
        raise
    new = {}
    for row, text, vector in zip(rows, texts, vectors, strict=True):
        row[SPARSE_FIELD] = vector or dict(EMPTY_VECTOR)
        new[id(row)] = (str(row.get("id", "")), text)
        _WEIGHED.add(id(row))
    return Weighing(bm25, new, old)


def weighed_write(
    write: Any, client: Any, collection_name: str, data: Any, *, replace: bool, **kwargs: Any
) -> Any:
    """``write(collection_name, data, **kwargs)`` (an insert, or with ``replace`` an upsert)
    with :func:`weigh_rows` done first (and undone when the write fails). Rows weighed
    beforehand (the pack's ``add`` weighs a whole call's chunks at once, so they share one
    ``avgdl``) are written as they are."""
    rows = [data] if isinstance(data, dict) else list(data)
    if not rows or all(id(r) in _WEIGHED for r in rows):
        result = write(collection_name, rows, **kwargs)
        for row in rows:
            _WEIGHED.discard(id(row))
        return result
    if collection_client_bm25(client, collection_name) is None:
        return write(collection_name, rows, **kwargs)
    with WRITE_LOCK:
        weighing = weigh_rows(client, collection_name, rows, replace=replace)
        try:
            result = write(collection_name, rows, **kwargs)
        except BaseException:
            if weighing is not None:
                weighing.undo()
            raise
        if weighing is not None:
            weighing.written(rows)
        return result


def counted_delete(delete: Any, client: Any, collection_name: str, **kwargs: Any) -> Any:
    """``delete(collection_name, **kwargs)`` with the deleted rows' terms taken out of the
    statistics (``ids``, pymilvus' ``pks`` or ``filter``)."""
    bm25 = collection_client_bm25(client, collection_name)
    if bm25 is None:
        return delete(collection_name, **kwargs)
    ids = kwargs.get("ids") if kwargs.get("ids") is not None else kwargs.get("pks")
    if ids is None and not kwargs.get("filter"):
        return delete(collection_name, **kwargs)  # Milvus refuses it: nothing to count
    with WRITE_LOCK:
        if ids is not None:
            texts = stored_texts(client, collection_name, ids=ids)
        else:
            texts = stored_texts(client, collection_name, expr=kwargs["filter"])
        result = delete(collection_name, **kwargs)
        if texts:
            bm25.remove(list(texts.values()))
    return result
