"""What the command line asks of a Milvus collection outside a pack: its door to Milvus, so that
``cli/`` parses and prints only.

Each function checks or changes one collection by its ``uri`` and name: a filter expression or
a tenant checked before any model loads, a fields file read, the chunks a RAPTOR tree is built
from, a tree dropped, the BM25 analysis upgraded in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "check_filter_expression",
    "check_query_scope",
    "collection_leaves",
    "drop_raptor_tree",
    "load_field_file",
    "reindex_collection",
]


def check_filter_expression(expression: str) -> None:
    """Read a Milvus filter expression without opening anything: a bad operator or an unclosed
    string is one ``ConfigurationError`` naming its column."""
    from llama_index_rag_pack.milvus.milvus_expr import expression_fields

    expression_fields(expression)


def check_query_scope(
    uri: str, collection: str, expression: str | None, tenant: str | None, token: str | None = None
) -> None:
    """Check ``expression`` and ``tenant`` against the collection with a bare client (no model):
    the fields the expression names must be the collection's (its schema or its chunks'
    metadata), and the tenant must fit its tenant field. A missing collection passes: opening
    it says so.

    Raises:
        ConfigurationError: a field the collection does not have, or a tenant it does not take
            (or none on a collection that needs one).
    """
    from llama_index_rag_pack.milvus.connection import open_client
    from llama_index_rag_pack.milvus.filter_fields import check_filter_fields
    from llama_index_rag_pack.milvus.tenants import partition_key_field, tenant_expression

    client = open_client(uri, token=token)
    if not client.has_collection(collection):
        return
    tenant_expression(partition_key_field(client, collection), tenant)
    check_filter_fields(client, collection, expression, what="--filter")


def load_field_file(path: str | Path) -> Any:
    """The self-query fields declared in a JSON or YAML file (``load_field_specs``)."""
    from llama_index_rag_pack.milvus.metadata_fields import load_field_specs

    return load_field_specs(path)


def collection_leaves(uri: str, collection: str, token: str | None = None) -> list[Any]:
    """The chunks of a collection as RAPTOR leaves, their embeddings reused.

    Raises:
        CollectionNotFoundError: no such collection.
    """
    from llama_index_rag_pack.milvus.connection import open_vector_store
    from llama_index_rag_pack.pack.raptor import leaves_from_collection

    source = open_vector_store(uri, collection, token=token, must_exist=True)
    return leaves_from_collection(source)


def drop_raptor_tree(uri: str, collection: str, token: str | None = None) -> bool:
    """Drop the RAPTOR tree stored next to ``collection``; ``False`` when there was none."""
    from llama_index_rag_pack.milvus.connection import open_client
    from llama_index_rag_pack.pack.raptor import raptor_collection_name

    client = open_client(uri, token=token)
    name = raptor_collection_name(collection)
    if not client.has_collection(name):
        return False
    client.drop_collection(name)
    return True


def reindex_collection(
    uri: str, collection: str, *, token: str | None = None, bm25_analyzer: str = "auto"
) -> int:
    """Re-analyse the collection's BM25 side in place (no re-embedding); the chunks copied, 0
    when it already had that analysis (``upgrade_bm25_analysis``)."""
    from llama_index_rag_pack.milvus.bm25.bm25_upgrade import upgrade_bm25_analysis

    return upgrade_bm25_analysis(uri, collection, token=token, bm25_analyzer=bm25_analyzer)
