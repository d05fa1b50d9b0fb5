"""Tenants: one collection shared by many tenants, kept apart by a Milvus partition key.

A collection made with ``tenant_field="tenant"`` has a VARCHAR field of that name marked as the
partition key: Milvus hashes each row's value to a partition and a search filtered on one value
only reads that tenant's partition. Every chunk must carry the field in its metadata
(:func:`check_tenants`, before anything is embedded or stored). The pack then scopes every
search with ``tenant == "<value>"`` (:func:`tenant_expression`), on Milvus Lite and on a server
alike (Lite keeps the field in the schema and filters on it; a server also prunes partitions).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.milvus_filter import milvus_literal

__all__ = [
    "ANY_TENANT",
    "MAX_TENANT_LENGTH",
    "check_tenant_field",
    "check_tenants",
    "partition_key_field",
    "resolve_tenant_field",
    "tenant_expression",
    "tenant_store_class",
]

#: ``tenant="*"``: search every tenant (must be asked for by name).
ANY_TENANT = "*"
#: The longest tenant value (bytes of UTF-8), the VARCHAR length of the field.
MAX_TENANT_LENGTH = 512


def partition_key_field(client: Any, collection_name: str) -> str | None:
    """The collection's partition-key field, ``None`` when it has none."""
    info = client.describe_collection(collection_name)
    for field in info.get("fields", []):
        if field.get("is_partition_key"):
            return str(field.get("name"))
    return None


def resolve_tenant_field(
    client: Any, collection_name: str, tenant_field: str | None, *, new: bool
) -> str | None:
    """The tenant field of the collection being opened: ``tenant_field`` for a new one, the
    partition key of an existing one (checked against ``tenant_field`` when given)."""
    if tenant_field is not None and not (tenant_field.isidentifier() and tenant_field.isascii()):
        raise ConfigurationError(f"tenant_field must be an identifier, got {tenant_field!r}.")
    if new:
        return tenant_field
    existing = partition_key_field(client, collection_name)
    check_tenant_field(tenant_field, existing, collection_name)
    return existing


def check_tenant_field(tenant_field: str | None, existing: str | None, collection: str) -> None:
    """Raise :class:`ConfigurationError` when an existing collection's partition key is not
    ``tenant_field`` (``existing`` is what :func:`partition_key_field` read)."""
    if tenant_field is not None and existing != tenant_field:
        raise ConfigurationError(
            f"Collection {collection!r} was created "
            + (f"with tenant field {existing!r}" if existing else "without tenants")
            + f", not tenant_field={tenant_field!r}: open it with "
            + (f"tenant_field={existing!r}" if existing else "no tenant_field")
            + " or index into a new collection."
        )


def check_tenants(documents: Iterable[Any], tenant_field: str) -> None:
    """Raise :class:`ConfigurationError` unless every document (or node) carries a tenant: a
    non-empty string of at most :data:`MAX_TENANT_LENGTH` bytes in ``metadata[tenant_field]``."""
    for doc in documents:
        value = (getattr(doc, "metadata", None) or {}).get(tenant_field)
        if not isinstance(value, str) or not value.strip() or value == ANY_TENANT:
            raise ConfigurationError(
                f"Document {getattr(doc, 'doc_id', None) or getattr(doc, 'id_', '?')!r} has no "
                f"tenant: every document of this collection needs metadata[{tenant_field!r}], a "
                f"non-empty string other than {ANY_TENANT!r} (nothing was stored)."
            )
        if len(value.encode("utf-8")) > MAX_TENANT_LENGTH:
            raise ConfigurationError(
                f"Tenant {value[:40]!r}... is longer than {MAX_TENANT_LENGTH} bytes "
                "(nothing was stored)."
            )


def tenant_expression(tenant_field: str | None, tenant: str | None) -> str:
    """The filter that scopes a search to ``tenant`` (``""`` for ``"*"``).

    Raises:
        ConfigurationError: a tenant on a collection without tenants, or no tenant on one with
            tenants (``tenant="*"`` searches them all, when that is really meant).
    """
    if tenant_field is None:
        if tenant is not None:
            raise ConfigurationError(
                f"tenant={tenant!r} given, but this collection has no tenants "
                "(create it with tenant_field=...)."
            )
        return ""
    if tenant is None:
        raise ConfigurationError(
            f"This collection keeps tenants apart by {tenant_field!r}: pass tenant='<name>' "
            f"(or tenant={ANY_TENANT!r} to search every tenant)."
        )
    if not isinstance(tenant, str) or not tenant.strip():
        raise ConfigurationError(f"tenant must be a non-empty string, got {tenant!r}.")
    if tenant == ANY_TENANT:
        return ""
    return f"{tenant_field} == {milvus_literal(tenant)}"


@functools.lru_cache(maxsize=16)
def tenant_store_class(tenant_field: str, base: type) -> type:
    """``base`` (a ``MilvusVectorStore`` class) creating new collections with ``tenant_field``
    as a VARCHAR partition key."""
    from pymilvus import DataType

    def _add_fields_to_schema(self: Any, schema: Any) -> Any:
        schema = base._add_fields_to_schema(self, schema)
        schema.add_field(
            field_name=tenant_field,
            datatype=DataType.VARCHAR,
            max_length=MAX_TENANT_LENGTH,
            is_partition_key=True,
        )
        return schema

    return type(
        f"Tenant{base.__name__}",
        (base,),
        {"_add_fields_to_schema": _add_fields_to_schema, "__module__": __name__},
    )
