"""``pack.delete(filters=..., tenant=...)``: remove whole documents, everywhere the pack keeps
them.

A document matches when any of its chunks matches the filters (and belongs to the tenant); then
all of it goes: its chunks, its sentences (the sentence index), and its RAPTOR leaves, whose
clusters are summarised again (RAPTOR's own delete path). ``delete(tenant="acme")`` alone removes
every document of that tenant and drops the tenant's tree.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.document_rows import delete_document_rows
from llama_index_rag_pack.milvus.milvus_filter import and_expressions
from llama_index_rag_pack.milvus.tenants import ANY_TENANT, tenant_expression
from llama_index_rag_pack.milvus.vector_memory import forget_vectors
from llama_index_rag_pack.pack.filters import pack_filter_expression
from llama_index_rag_pack.pack.pack_view import PackView
from llama_index_rag_pack.pack.raptor import (
    drop_pack_tree,
    open_pack_tree,
    open_raptor_store,
    raptor_collection_name,
    tree_tenant,
)

__all__ = ["delete_documents", "documents_by_tenant", "remove_from_trees"]

logger = logging.getLogger(__name__)

_READ_BATCH = 1000


def _scope(pack: PackView, filters: Any, tenant: str | None) -> str:
    if filters is None and tenant in (None, ANY_TENANT):
        raise ConfigurationError(
            "delete needs filters=... or tenant='<name>' (deleting everything is "
            "RagPack(..., overwrite=True))."
        )
    scope = tenant_expression(pack.tenant_field, tenant)  # the checks of a search
    return and_expressions([pack_filter_expression(pack, filters), scope])


def documents_by_tenant(pack: PackView, expr: str) -> dict[str | None, set[str]]:
    """The ids of the documents with a chunk matching ``expr``, by tenant (``None`` without
    tenants)."""
    store = pack.vector_store
    field = pack.tenant_field
    doc_field = getattr(store, "doc_id_field", "doc_id") or "doc_id"
    fields = [doc_field, *([field] if field else [])]
    found: dict[str | None, set[str]] = defaultdict(set)
    iterator = store.client.query_iterator(
        store.collection_name, batch_size=_READ_BATCH, filter=expr, output_fields=fields
    )
    try:
        while batch := iterator.next():
            for row in batch:
                found[row.get(field) if field else None].add(str(row[doc_field]))
    finally:
        iterator.close()
    return dict(found)


def delete_documents(pack: PackView, *, filters: Any = None, tenant: str | None = None) -> int:
    """Delete the documents matching ``filters`` (of ``tenant``); the number deleted.

    Raises:
        ConfigurationError: neither filters nor a tenant, a missing tenant on a pack with
            tenants, or bad filters.
    """
    expr = _scope(pack, filters, tenant)
    by_tenant = documents_by_tenant(pack, expr)
    store = pack.vector_store
    whole_tenant = filters is None and tenant not in (None, ANY_TENANT)
    for owner, doc_ids in by_tenant.items():
        ids = sorted(doc_ids)
        delete_document_rows(store, ids, tenant=owner, sentence_index=pack.sentence_index)
        _delete_from_tree(pack, owner, ids, drop=whole_tenant)
    forget_vectors(store.client, store.collection_name)
    store.client.flush(store.collection_name)
    pack.forget_engines()
    deleted = sum(len(ids) for ids in by_tenant.values())
    logger.info("Deleted %d documents (%s)", deleted, expr)
    return deleted


def _delete_from_tree(
    pack: PackView, tenant: str | None, doc_ids: list[str], *, drop: bool
) -> None:
    """Remove ``doc_ids`` from the RAPTOR tree they belong to (re-summarising what lost
    leaves); a tenant deleted whole has its tree dropped."""
    if not getattr(pack, "uri", None):
        return
    name = raptor_collection_name(pack.vector_store.collection_name, tenant)
    if not pack.vector_store.client.has_collection(name):
        return
    if drop:
        drop_pack_tree(pack, tenant)
        return
    open_pack_tree(pack, tenant=tenant).delete(doc_ids)


def remove_from_trees(pack: PackView, tenant: str | None, doc_ids: list[str]) -> int:
    """Remove the RAPTOR leaves of ``doc_ids`` from their tree without calling the LLM (a sync
    of a folder); the number of leaves removed. The summaries above them still hold their text
    until ``rag-pack raptor update`` (:meth:`RaptorTree.refresh
    <llama_index_rag_pack.raptor.raptor_tree.RaptorTree.refresh>`) writes them again."""
    if not getattr(pack, "uri", None) or not doc_ids:
        return 0
    collection = pack.vector_store.collection_name
    if not pack.vector_store.client.has_collection(raptor_collection_name(collection, tenant)):
        return 0
    from llama_index_rag_pack.raptor.raptor_store import RaptorStore

    dim = len(pack.embed_model.get_text_embedding("dimension probe"))
    store = RaptorStore(
        open_raptor_store(pack.uri, collection, dim=dim, tenant=tree_tenant(pack, tenant))
    )
    leaves = [n.node_id for n in store.by_doc(doc_ids)]
    if leaves:
        store.delete_ids(leaves)
        store.flush()
        logger.info("Removed %d RAPTOR leaves; the tree's summaries are stale", len(leaves))
    return len(leaves)
