"""``--filter`` and ``--tenant`` of ``rag-pack ask`` / ``chat``: checked before any model loads.

The expression is read first (no database): a bad operator or an unclosed string is one line
with its column. Then the collection is opened with a bare Milvus client (still no model) and the
fields the expression names are compared with the collection's: its schema fields and the
metadata keys of a sample of its chunks. A tenant is checked against the collection's tenant
field, as every search would.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["query_scope"]


def query_scope(args: argparse.Namespace, uri: str, routed: bool) -> dict[str, Any]:
    """``{"filters": EXPR, "tenant": NAME}`` (the given ones) for every answer of the session.

    Raises:
        ConfigurationError: a malformed expression, a field the collection does not have, or a
            tenant the collection does not take (or none on one that needs it).
    """
    from llama_index_rag_pack.pack.commands import check_filter_expression, check_query_scope

    expr = (getattr(args, "filter", None) or "").strip() or None
    if expr is not None:
        check_filter_expression(expr)  # malformed: one line, before anything opens
    tenant = getattr(args, "tenant", None)
    scope = {k: v for k, v in (("filters", expr), ("tenant", tenant)) if v is not None}
    if routed:  # each source checks the scope against its own collection when it searches
        return scope
    collection = args.collection or _default_collection()
    check_query_scope(uri, collection, expr, tenant, token=getattr(args, "token", None))
    return scope


def _default_collection() -> str:
    from llama_index_rag_pack.models.settings import default_collection

    return default_collection()
