"""A document's rows in a pack's collection, found and deleted by its id within its tenant.

Document ids come from users (file paths, ids of their own), so they only ever enter a Milvus
expression as escaped literals (:func:`ids_expression`). With tenants, several tenants may use the
same document id: every lookup and delete by id is also scoped to the document's tenant, and the
chunk ids of a collection with tenants include the tenant
(:func:`~llama_index_rag_pack.documents.chunking.chunk_id`), so one tenant's insert or delete
never replaces or removes another tenant's rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index_rag_pack.milvus.milvus_filter import and_expressions, milvus_literal
from llama_index_rag_pack.milvus.tenants import ANY_TENANT, tenant_expression

__all__ = ["delete_document_rows", "group_by_tenant", "ids_expression", "row_ids"]

#: Document ids per delete expression (a long ``in`` list is split into several deletes).
ID_BATCH = 500
_READ_BATCH = 1000


def ids_expression(field: str, values: Iterable[object]) -> str:
    """``field in [...]`` with every value written as an escaped Milvus string literal.

    Example:
        >>> print(ids_expression("doc_id", ['a', 'x"] or true or doc_id in ["']))
        doc_id in ["a", "x\\"] or true or doc_id in [\\""]
    """
    return f"{field} in [{', '.join(milvus_literal(str(v)) for v in values)}]"


def group_by_tenant(documents: Iterable[Any], tenant_field: str | None) -> dict[str | None, list]:
    """The documents grouped by their tenant (one group, ``None``, without tenants), in the
    order given. Each group is chunked on its own: LlamaIndex's node parsers give every chunk
    the metadata of the last document of its id, so two tenants' documents with the same id
    must never be chunked together."""
    groups: dict[str | None, list] = defaultdict(list)
    for doc in documents:
        groups[(doc.metadata or {}).get(tenant_field) if tenant_field else None].append(doc)
    return dict(groups)


def row_ids(client: Any, collection_name: str, expr: str) -> list[str]:
    """The primary keys of every row matching ``expr`` (read in batches, no result cap)."""
    found: list[str] = []
    iterator = client.query_iterator(
        collection_name, batch_size=_READ_BATCH, filter=expr, output_fields=["id"]
    )
    try:
        while batch := iterator.next():
            found.extend(str(row["id"]) for row in batch)
    finally:
        iterator.close()
    return found


def delete_document_rows(
    store: Any,
    doc_ids: Sequence[str],
    *,
    tenant: str | None = None,
    sentence_index: Any | None = None,
) -> int:
    """Delete the chunks of ``doc_ids`` (only ``tenant``'s on a collection with tenants; every
    tenant's with ``tenant="*"``) and their sentences from ``sentence_index``; the number of
    chunks deleted.

    Raises:
        ConfigurationError: a tenant on a collection without tenants, or none on one with them.
    """
    field = getattr(store, "tenant_field", None)
    scope = "" if tenant == ANY_TENANT else tenant_expression(field, tenant)
    doc_field = getattr(store, "doc_id_field", None) or "doc_id"
    client, name = store.client, store.collection_name
    deleted = 0
    for start in range(0, len(doc_ids), ID_BATCH):
        batch = list(doc_ids[start : start + ID_BATCH])
        expr = and_expressions([ids_expression(doc_field, batch), scope])
        chunks = row_ids(client, name, expr)
        if sentence_index is not None and sentence_index.exists():
            sentence_index.delete_chunks(chunks)
            if field is None:  # sentences left behind by an earlier, interrupted insert
                sentence_index.delete_documents(batch)
        if chunks:
            client.delete(name, filter=expr)
        deleted += len(chunks)
    return deleted
