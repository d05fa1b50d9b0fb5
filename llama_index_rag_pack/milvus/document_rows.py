"""A document's rows in a pack's collection, found and deleted by its id within its tenant, and
the stored documents whose files are gone (a sync of a folder,
:func:`~llama_index_rag_pack.pack.file_indexing.index_files` with ``sync=True``).

Document ids come from users (file paths, ids of their own), so they only ever enter a Milvus
expression as escaped literals (:func:`ids_expression`). With tenants, several tenants may use the
same document id: every lookup and delete by id is also scoped to the document's tenant, and the
chunk ids of a collection with tenants include the tenant
(:func:`~llama_index_rag_pack.documents.chunking.chunk_id`), so one tenant's insert or delete
never replaces or removes another tenant's rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.text_decoding import escape_undecodable
from llama_index_rag_pack.milvus.milvus_filter import and_expressions, milvus_literal
from llama_index_rag_pack.milvus.tenants import ANY_TENANT, tenant_expression

__all__ = [
    "ABSOLUTE_PATH_KEY",
    "FILE_PATH_KEY",
    "GoneDocuments",
    "StoredDocument",
    "delete_document_rows",
    "gone_documents",
    "group_by_tenant",
    "ids_expression",
    "row_ids",
    "stored_documents",
]

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


# --------------------------------------------------------------------------- files that are gone
#: Metadata key of the file a document was read from (LlamaIndex's file readers).
FILE_PATH_KEY = "file_path"
#: Hidden metadata key: that file's absolute path when it was indexed (a sync from another
#: working directory still finds it).
ABSOLUTE_PATH_KEY = "file_abspath"


@dataclass(frozen=True)
class StoredDocument:
    """A document stored in the collection: its id, tenant and the file it was read from."""

    doc_id: str
    tenant: str | None
    file_path: str | None
    absolute_path: str | None = None


def stored_documents(pack: Any) -> list[StoredDocument]:
    """Every document of the pack's collection (one row per document), read in one scan."""
    store = pack.vector_store
    doc_field = getattr(store, "doc_id_field", None) or "doc_id"
    tenant_field = getattr(pack, "tenant_field", None)
    fields = [
        doc_field,
        FILE_PATH_KEY,
        ABSOLUTE_PATH_KEY,
        *([tenant_field] if tenant_field else []),
    ]
    found: dict[tuple[str | None, str], StoredDocument] = {}
    iterator = store.client.query_iterator(
        store.collection_name, batch_size=_READ_BATCH, filter="", output_fields=fields
    )
    try:
        while batch := iterator.next():
            for row in batch:
                doc_id = str(row.get(doc_field) or "")
                tenant = row.get(tenant_field) if tenant_field else None
                path, absolute = row.get(FILE_PATH_KEY), row.get(ABSOLUTE_PATH_KEY)
                if doc_id and (tenant, doc_id) not in found:
                    found[(tenant, doc_id)] = StoredDocument(
                        doc_id,
                        tenant,
                        path if isinstance(path, str) and path else None,
                        absolute if isinstance(absolute, str) and absolute else None,
                    )
    finally:
        iterator.close()
    return list(found.values())


def _resolved(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


def _under(path: Path, root: Path, recursive: bool) -> bool:
    if path == root:
        return True
    return path.is_relative_to(root) and (recursive or path.parent == root)


@dataclass
class GoneDocuments:
    """What a sync deletes: documents of files that are gone, and parts a file lost."""

    documents: list[StoredDocument] = field(default_factory=list)
    files: set[str] = field(default_factory=set)


def gone_documents(
    stored: Iterable[StoredDocument],
    roots: Sequence[str | Path],
    found_files: Iterable[str | Path],
    read_ids: dict[Path, set[str]],
    *,
    recursive: bool = True,
    extensions: Collection[str] | None = None,
) -> GoneDocuments:
    """The stored documents a sync of ``roots`` deletes.

    Args:
        stored: The collection's documents (:func:`stored_documents`).
        roots: The indexed paths (folders or files).
        found_files: Every supported file found under them this run (read or skipped).
        read_ids: For each file read this run (resolved path), the ids of its documents.
        recursive: Whether sub-folders were searched (a file in one is not gone otherwise).
        extensions: The file types searched (lower case, with the dot): a stored document of
            another type (added from Python under the same folder) is not touched.

    Paths are compared as the readers record them (undecodable bytes of a file name escaped),
    each document by the absolute path it was indexed from when it has one.
    """
    tops = [_resolved(r) for r in roots]
    present = {_resolved(escape_undecodable(str(f))) for f in found_files}
    gone = GoneDocuments()
    for doc in stored:
        if doc.file_path is None:
            continue
        if extensions is not None and Path(doc.file_path).suffix.lower() not in extensions:
            continue
        path = Path(doc.absolute_path) if doc.absolute_path else _resolved(doc.file_path)
        if not any(_under(path, top, recursive) for top in tops):
            continue
        if path not in present:  # the file was deleted, moved or renamed
            gone.documents.append(doc)
            gone.files.add(doc.file_path)
        elif path in read_ids and doc.doc_id not in read_ids[path]:  # a part it lost
            gone.documents.append(doc)
    return gone
