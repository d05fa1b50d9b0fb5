"""The BM25 side of :class:`~llama_index_rag_pack.fusion.hybrid.MilvusHybridRetriever`: the
analysed query, the ids-only search, the filter as sent to Milvus, and a filtered search read off
the unfiltered ranking.

A filter does not change BM25 scores (term statistics are the collection's), so the filtered
top-k is the unfiltered ranking restricted to the kept chunks. On a Milvus Lite file, where a
filter is resolved once to the ids it keeps (:func:`~llama_index_rag_pack.milvus.vector_memory.
matching_ids`), the search asks without the filter for as many ids as should hold the wanted
number of kept ones (the wanted number over the share of rows the filter keeps, with a margin)
and keeps those in the set: about as fast as an unfiltered search, and exact. When too few kept
chunks are among them, the caller searches with the filter instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llama_index_rag_pack.documents.bm25_analysis import Bm25Analysis
from llama_index_rag_pack.milvus.bm25.bm25_fields import BM25_TEXT_FIELD
from llama_index_rag_pack.milvus.bm25.bm25_memory import MemoryBM25, bm25_slot, memory_bm25
from llama_index_rag_pack.milvus.bm25.client_bm25 import ClientBM25
from llama_index_rag_pack.milvus.document_rows import ids_expression
from llama_index_rag_pack.milvus.vector_memory import copy_due, id_filter, matching_ids, row_count

__all__ = ["OVERSAMPLE", "Bm25SearchMixin"]

#: The margin over the expected number of ids to fetch (wanted / share kept).
OVERSAMPLE = 1.5
#: Filters keeping less than this share of the rows are searched with the filter directly.
MIN_SHARE = 0.1


class Bm25SearchMixin:
    """The BM25 and filter helpers of ``MilvusHybridRetriever`` (which sets the attributes)."""

    client: Any
    collection_name: str
    filter: str
    resolve_filter: bool
    in_memory: bool
    rows_in_rank: Callable[[list[str], int], dict[str, dict[str, Any]]]
    sparse_field: str
    bm25_analysis: Bm25Analysis | None
    #: The collection's statistics where the pack computes BM25 vectors (``None``: Milvus' BM25
    #: function does, and the analysed query is sent as text).
    client_bm25: ClientBM25 | None = None

    def _sparse_params(self) -> dict[str, Any]:
        # Lite rejects the 0.2 drop ratio MilvusVectorStore sends; 0 keeps every query term.
        metric = "IP" if self.client_bm25 is not None else "BM25"
        return {"metric_type": metric, "params": {"drop_ratio_search": 0}}

    def sparse_data(self, terms: str) -> Any:
        """What a sparse search sends for the analysed ``terms``: the terms themselves (Milvus'
        BM25 function weighs them), or their IDF-weighted sparse vector where the pack computes
        BM25 vectors (empty when no chunk holds any of them: callers then search nothing)."""
        return self.client_bm25.query_vector(terms) if self.client_bm25 is not None else terms

    def _resolved_bm25(self, query: str, limit: int) -> list[dict[str, Any]] | None:
        if not (self.resolve_filter and self.filter):
            return None
        return self._bm25_hits_off_unfiltered(query, limit)

    def _bm25_hits_off_unfiltered(self, query: str, limit: int) -> list[dict[str, Any]] | None:
        """The ``limit`` best hits of the filtered BM25 search (rows as Milvus returns
        them), or ``None`` when the unfiltered ranking cannot tell (too few kept chunks in it, or a
        filter with too many ids to hold)."""
        client, name = self.client, self.collection_name
        only = matching_ids(client, name, self.filter)
        if only is None:
            return None
        share = len(only) / max(1, row_count(client, name))
        if share < MIN_SHARE:
            return None
        pool = math.ceil(OVERSAMPLE * limit / share)
        terms = self.bm25_query(query)
        params = self._sparse_params()
        data = self.sparse_data(terms)
        if not data:  # no chunk holds a query term
            return []
        ranked = self._field_search(self.sparse_field, data, params, pool, filtered=False)
        kept = [hit for hit in ranked if str(hit.get("id")) in only][:limit]
        if len(kept) < limit and len(ranked) == pool:
            return None  # kept chunks may rank below the pool: search with the filter
        return kept

    def active_filter(self) -> str:
        """The filter sent to Milvus: ``filter``, or its ``id in [...]`` form when resolved."""
        if self.resolve_filter and self.filter:
            return id_filter(self.client, self.collection_name, self.filter)
        return self.filter

    def bm25_query(self, query: str) -> str:
        """What the BM25 side searches for ``query``: its terms under the collection's
        analysis (e.g. ``"runners running"`` -> ``"runner run"`` under ``english``)."""
        if self.bm25_analysis is None:
            return query
        return self.bm25_analysis.query_text(query)

    def bm25_ids(
        self, query: str, limit: int, only: frozenset[str] | None = None, filtered: bool = True
    ) -> list[tuple[str, float]]:
        """The ``limit`` best chunk ids by BM25 with their scores (>= 0), best first (ties by
        id), without reading the chunks: for callers that read only the chunks they return.
        ``only``: the ids this retriever's filter keeps, already resolved (searched as a
        primary-key list instead of the filter expression); ``filtered=False`` ignores the
        filter."""
        terms = self.bm25_query(query)
        if not terms or (only is not None and not only):
            return []
        copy = self._bm25_copy(query)
        if copy is not None and only is None and filtered and self.filter:
            only = matching_ids(self.client, self.collection_name, self.filter)
            copy = copy if only is not None else None  # too many ids to hold: ask Milvus
        if copy is not None:
            return copy.search(terms, limit, only)
        if only is not None:
            expr = ids_expression("id", sorted(only))
        else:
            expr = self.active_filter() if filtered else ""
        return self._milvus_bm25_ids(terms, limit, expr)

    def _milvus_bm25_ids(self, terms: str, limit: int, expr: str) -> list[tuple[str, float]]:
        """``bm25_ids`` as Milvus answers it (analysed ``terms``, a filter expression)."""
        data = self.sparse_data(terms)
        if not data:  # no chunk holds a query term
            return []
        res = self.client.search(
            self.collection_name,
            data=[data],
            anns_field=self.sparse_field,
            limit=limit,
            filter=expr,
            output_fields=["id"],
            search_params=self._sparse_params(),
        )
        hits = [(str(h.get("id")), abs(float(h.get("distance", 0.0)))) for h in (res or [[]])[0]]
        return sorted(hits, key=lambda hit: (-hit[1], hit[0]))

    def _bm25_copy(self, query: str) -> MemoryBM25 | None:
        """The in-memory BM25 index (``in_memory`` on a collection analysed on the client),
        once searches of the collection make it worth reading and it is read
        (:func:`~llama_index_rag_pack.milvus.vector_memory.copy_due`)."""
        slots = self.bm25_copy_slots()
        if not (slots and copy_due(self.client, self.collection_name, query, slots)):
            return None
        return self._read_bm25_copy()

    def bm25_copy_slots(self) -> dict[str, Callable[[], object]]:
        """The in-memory BM25 copy this retriever searches, as a
        :func:`~llama_index_rag_pack.milvus.vector_memory.copy_due` slot with the call that
        reads it (none when BM25 stays in Milvus)."""
        analysis = self.bm25_analysis
        if not (self.in_memory and analysis is not None and analysis.client_side):
            return {}
        return {bm25_slot(BM25_TEXT_FIELD): self._read_bm25_copy}

    def _read_bm25_copy(self) -> MemoryBM25 | None:
        return memory_bm25(
            self.client,
            self.collection_name,
            text_field=BM25_TEXT_FIELD,
            milvus_scores=lambda terms, limit: self._milvus_bm25_ids(terms, limit, ""),
        )

    def _memory_bm25_hits(self, query: str, limit: int) -> list[dict[str, Any]] | None:
        """The ``limit`` best BM25 hits with their rows, scored in memory and read from Milvus
        by id (``None`` without an in-memory copy). A chunk deleted around the package (still
        in the copy, gone from Milvus) is skipped and the next one takes its place."""
        if self._bm25_copy(query) is None:
            return None
        ranked = self.bm25_ids(query, 2 * limit)
        rows = self.rows_in_rank([key for key, _ in ranked], limit)
        hits = [
            {"id": key, "distance": score, "entity": rows[key]}
            for key, score in ranked
            if key in rows
        ]
        return hits[:limit]
