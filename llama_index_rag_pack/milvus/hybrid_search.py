"""Milvus' own hybrid search: several ANN requests on one collection, fused server-side by
Milvus' RRF or weighted ranker (``client.hybrid_search``), for
:class:`~llama_index_rag_pack.fusion.hybrid.MilvusHybridRetriever`'s ``hybrid`` and
``hybrid_weighted`` modes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["hybrid_search"]


def hybrid_search(
    client: Any,
    collection_name: str,
    requests: Sequence[tuple[str, Any, dict[str, Any]]],
    *,
    limit: int,
    expr: str = "",
    rrf_k: float | None = None,
    weights: Sequence[float] | None = None,
    output_fields: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The fused hits of one request per ``(field, query data, search params)``, each of
    ``limit`` candidates under the filter ``expr``, by RRF (``rrf_k``) or, with ``weights``,
    Milvus' weighted ranker (one weight per request)."""
    from pymilvus import AnnSearchRequest, RRFRanker, WeightedRanker

    reqs = [
        AnnSearchRequest(
            data=[data], anns_field=field, param=params, limit=limit, expr=expr or None
        )
        for field, data, params in requests
    ]
    ranker = WeightedRanker(*weights) if weights is not None else RRFRanker(rrf_k or 60)
    res = client.hybrid_search(
        collection_name, reqs=reqs, ranker=ranker, limit=limit, output_fields=list(output_fields)
    )
    return list(res[0]) if res else []
