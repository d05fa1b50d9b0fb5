"""Everything Milvus-specific for opening stores lives here.

The same calls work on Milvus Lite (a local ``*.db`` directory, the default), a Milvus server
(``http://host:19530``) and a Milvus cluster: only public pymilvus / MilvusVectorStore API is used.

Milvus Lite pitfalls handled here:

* a reopened database has its collections *released*: :func:`open_vector_store` loads them;
* searches before ``flush()`` are slow: :func:`flush` after bulk inserts;
* one process per database directory: a second process gets a clear error, not a hang.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    RagPackError,
)
from llama_index_rag_pack.documents.bm25_analysis import Bm25Analysis, BM25Analyzer
from llama_index_rag_pack.milvus.bm25.bm25_fields import (
    bm25_store_kwargs,
    check_async_client,
    store_analysis,
)
from llama_index_rag_pack.milvus.bm25.client_bm25 import ClientBM25, ClientBM25Function
from llama_index_rag_pack.milvus.capabilities import detect_capabilities
from llama_index_rag_pack.milvus.client_open import (  # noqa: F401  (re-exported)
    REMOTE_SCHEMES,
    START_SERVER_HINT,
    check_uri,
    client_kwargs,
    default_token,
    is_remote_uri,
    open_client,
    open_error,
)
from llama_index_rag_pack.milvus.index_creation import create_store_indexes
from llama_index_rag_pack.milvus.lite import LITE_OPEN_LOCK, is_lite_path
from llama_index_rag_pack.milvus.recovery import (
    is_connection_error,
    is_milvus_error,
    operation_error,
)
from llama_index_rag_pack.milvus.served_schema import (
    check_bm25_vectors,
    check_served,
    collection_bm25_vectors,
    new_bm25_vectors,
)
from llama_index_rag_pack.milvus.store_classes import loop_safe_store_class
from llama_index_rag_pack.milvus.tenants import resolve_tenant_field, tenant_store_class
from llama_index_rag_pack.milvus.vector_memory import forget_vectors
from llama_index_rag_pack.models.settings import (
    DEFAULT_EMBED_DIM,
    default_collection,
    default_milvus_uri,
)

logger = logging.getLogger(__name__)


def open_vector_store(
    uri: str | None = None,
    collection_name: str | None = None,
    *,
    dim: int = DEFAULT_EMBED_DIM,
    token: str | None = None,
    overwrite: bool = False,
    enable_bm25: bool = True,
    must_exist: bool = False,
    similarity_metric: str = "COSINE",
    bm25_analyzer: str | BM25Analyzer | Bm25Analysis | None = "auto",
    tenant_field: str | None = None,
    bm25_vectors: str = "auto",
    **store_kwargs: Any,
) -> Any:
    """Open (or create) a ``MilvusVectorStore`` ready to search.

    What the Milvus at ``uri`` can serve is detected first
    (:mod:`~llama_index_rag_pack.milvus.capabilities`): a new collection gets the BM25 side it
    can serve, and an existing one it cannot serve is refused before it is loaded
    (:mod:`~llama_index_rag_pack.milvus.served_schema`). A new collection that fails at any step
    is dropped before the error is raised.

    Args:
        uri: Milvus Lite path (``*.db``) or server address; default :func:`default_milvus_uri`.
        collection_name: Default :func:`default_collection`.
        dim: Embedding dimension of a new collection (384 for the bundled MiniLM).
        token: Server token, if the server needs one.
        overwrite: Drop an existing collection of that name first.
        enable_bm25: Keep BM25 sparse vectors (field ``sparse_embedding``) beside the dense
            ones, so dense, BM25 and hybrid search share one collection. On a Milvus without
            sparse vectors (2.3) the collection is created for dense search and a warning
            says so.
        must_exist: Raise :class:`CollectionNotFoundError` instead of creating a new collection.
        similarity_metric: ``COSINE`` (default, right for MiniLM), ``IP`` or ``L2``.
        bm25_analyzer: A new collection's BM25 analysis: ``auto`` (default: each chunk in its
            own language), a language (``chinese``, ``german``, ...), ``english``, ``standard``
            or a callable (:mod:`~llama_index_rag_pack.documents.bm25_analysis`); an existing one
            keeps its own. The store's ``bm25_analysis`` says which is in use.
        tenant_field: A new collection's tenant field, a VARCHAR partition key
            (:mod:`~llama_index_rag_pack.milvus.tenants`); an existing one keeps its own, and
            the store's ``tenant_field`` says which (``None``: no tenants).
        bm25_vectors: Where a new collection's BM25 vectors come from: ``auto`` (Milvus' BM25
            function where the server has it, else vectors the pack computes where it has
            sparse vectors), ``function`` or ``client``
            (:mod:`~llama_index_rag_pack.milvus.bm25.client_bm25`).
        **store_kwargs: Passed on to ``MilvusVectorStore`` (index_config, search_config, ...).
            Async methods run the sync client in a worker thread (usable from any event loop);
            ``use_async_client=True`` restores pymilvus' own async client instead.

    Raises:
        MilvusUnavailableError: Milvus cannot be reached or opened.
        CollectionNotFoundError: ``must_exist`` and the collection is missing.
        ConfigurationError: an existing collection has another dimension than ``dim``, or
            another tenant field than ``tenant_field``, or a field the server cannot serve.
        MilvusOperationError: Milvus refused a step of creating the collection (which is then
            dropped).
    """
    from llama_index.vector_stores.milvus import MilvusVectorStore

    uri = uri or default_milvus_uri()
    token = default_token(token)
    collection_name = collection_name or default_collection()
    check_bm25_vectors(bm25_vectors)
    if similarity_metric.upper() not in ("COSINE", "IP", "L2"):
        raise ConfigurationError(
            f"similarity_metric must be one of COSINE, IP, L2; got {similarity_metric!r}."
        )
    if must_exist and is_lite_path(uri) and not Path(uri).is_dir():
        # nothing to reopen: fail before Milvus Lite creates an empty database there
        raise CollectionNotFoundError(_no_collection(collection_name, uri))
    client = open_client(uri, token=token)
    caps = detect_capabilities(client, uri)
    exists = client.has_collection(collection_name)
    if must_exist and not exists:
        raise CollectionNotFoundError(_no_collection(collection_name, uri))
    new = not exists or overwrite
    vectors = _bm25_vectors(client, caps, collection_name, new, dim, enable_bm25, bm25_vectors)
    tenant_field = resolve_tenant_field(client, collection_name, tenant_field, new=new)
    analysis = store_analysis(
        client, collection_name, bm25_analyzer, new=new, bm25=vectors is not None
    )
    kwargs: dict[str, Any] = dict(
        uri=uri,
        token=token or "",
        collection_name=collection_name,
        dim=dim,
        overwrite=overwrite,
        similarity_metric=similarity_metric.upper(),
    )
    kwargs.update(_bm25_kwargs(client, collection_name, analysis, new, vectors))
    kwargs.update(client_kwargs(uri))
    kwargs.update(store_kwargs)
    kwargs.setdefault("use_async_client", False)
    check_async_client(analysis, kwargs["use_async_client"])
    store_class = loop_safe_store_class() if not kwargs["use_async_client"] else MilvusVectorStore
    if tenant_field and new:
        store_class = tenant_store_class(tenant_field, store_class)
    if overwrite:
        ClientBM25(client, collection_name).drop()
    store = _make_store(store_class, kwargs, client, new, "index_management" not in kwargs)
    if isinstance(store, loop_safe_store_class()):
        store.configure(
            bm25_analysis=analysis,
            tenant_field=tenant_field,
            capabilities=caps,
            bm25_vectors=vectors,
            created=new,
        )
    ensure_loaded(store.client, collection_name)
    logger.info(
        "Vector store: Milvus %s at %s, collection %r (%s, BM25 analysis: %s)",
        "server" if is_remote_uri(uri) else "Lite",
        uri,
        collection_name,
        "existing" if exists and not overwrite else "new",
        analysis.name if analysis is not None else "none",
    )
    return store


def _bm25_vectors(
    client: Any,
    caps: Any,
    collection_name: str,
    new: bool,
    dim: int,
    enable_bm25: bool,
    requested: str,
) -> str | None:
    """Where the collection's BM25 vectors come from (``None``: no BM25). An existing
    collection is checked against the server and ``dim`` first."""
    if not new:
        info = client.describe_collection(collection_name)
        check_served(info, caps, collection_name)
        _check_dim(client, collection_name, dim)
        return collection_bm25_vectors(info) if enable_bm25 else None
    if not enable_bm25:
        check_bm25_vectors(requested)
        return None
    return new_bm25_vectors(caps, requested, collection=collection_name)


def _bm25_kwargs(
    client: Any, collection_name: str, analysis: Any, new: bool, vectors: str | None
) -> dict[str, Any]:
    """The ``MilvusVectorStore`` arguments of the BM25 side (``{}`` without BM25)."""
    if analysis is None or vectors is None:
        return {}
    kwargs = bm25_store_kwargs(analysis, new=new, vectors=vectors)
    if vectors == "client":
        bm25 = ClientBM25(client, collection_name)
        kwargs["sparse_embedding_function"] = ClientBM25Function(bm25, analysis)
    return kwargs


def _make_store(
    store_class: type, kwargs: dict[str, Any], client: Any, new: bool, own_indexes: bool
) -> Any:
    """The store on ``client``. A ``new`` collection that fails to be made is dropped before
    the error is raised; with ``own_indexes`` (no index management asked for) its indexes are
    made without pymilvus' 0.5 s wait per index."""
    from llama_index.vector_stores.milvus import IndexManagement

    own_indexes = new and own_indexes
    if own_indexes:
        kwargs["index_management"] = IndexManagement.NO_VALIDATION
    try:
        try:
            with LITE_OPEN_LOCK:
                store = store_class(**kwargs)
        except Exception as e:
            if isinstance(e, RagPackError):
                raise
            if is_milvus_error(e) and not is_connection_error(e):
                raise operation_error(kwargs["uri"], "create_collection", None, e) from e
            raise open_error(kwargs["uri"], e) from e
        store._milvusclient = client  # the same connection, with recovery from server restarts
        if own_indexes:
            store.index_management = IndexManagement.CREATE_IF_NOT_EXISTS
            create_store_indexes(store)
    except BaseException:
        if new:
            drop_half_made(client, kwargs["collection_name"])
        raise
    return store


@contextlib.contextmanager
def drop_new_collection_on_failure(store: Any) -> Iterator[None]:
    """Drop the store's collection and its companions when the block fails and the store made
    the collection (a failed or interrupted first ingest leaves nothing behind, on a server and
    in an existing Lite database alike)."""
    try:
        yield
    except BaseException:
        if getattr(store, "created", False):
            drop_half_made(store.client, store.collection_name)
        raise


def drop_half_made(client: Any, collection_name: str) -> None:
    """Drop a collection (and its pack companions) that failed while being made; a failure to
    drop it is logged, never raised over the error that made it fail."""
    from llama_index_rag_pack.milvus.sentence_index import sentence_collection_name

    for name in (
        collection_name,
        sentence_collection_name(collection_name),
        ClientBM25(client, collection_name).stats_name,
    ):
        try:
            if client.has_collection(name):
                client.drop_collection(name)
                logger.info("Dropped the half-made collection %r", name)
        except Exception as e:  # the server went away too: nothing more to do here
            logger.warning("Could not drop the half-made collection %r: %s", name, e)


def _check_dim(client: Any, collection_name: str, dim: int) -> None:
    existing_dim = collection_dim(client, collection_name)
    if existing_dim is not None and existing_dim != dim:
        raise ConfigurationError(
            f"Collection {collection_name!r} holds {existing_dim}-d vectors but the embedding "
            f"model makes {dim}-d ones. Use the same embedding model, another collection name, "
            "or overwrite=True to rebuild it."
        )


def _no_collection(collection_name: str, uri: str) -> str:
    return (
        f"No collection {collection_name!r} in Milvus at {uri}. Index documents first "
        "(`rag-pack index PATH` or RagPack(documents=...)), or check --uri/--collection."
    )


def ensure_loaded(client: Any, collection_name: str) -> None:
    """Load a collection into memory if it exists (Milvus Lite releases them on reopen)."""
    if client.has_collection(collection_name):
        client.load_collection(collection_name)


def flush(store_or_client: Any, collection_name: str | None = None) -> None:
    """Flush writes so later searches are fast (Milvus Lite is slow on unflushed segments),
    and drop the in-memory copies of the collection's vectors, which the writes made stale."""
    client = getattr(store_or_client, "client", store_or_client)
    name = collection_name or getattr(store_or_client, "collection_name", None)
    if name:
        forget_vectors(client, name)
    if name and client.has_collection(name):
        client.flush(name)


def collection_dim(client: Any, collection_name: str, field: str = "embedding") -> int | None:
    info = client.describe_collection(collection_name)
    for f in info.get("fields", []):
        if f.get("name") == field:
            dim = f.get("params", {}).get("dim")
            return int(dim) if dim is not None else None
    return None


def has_bm25(client: Any, collection_name: str) -> bool:
    """True when the collection has BM25 vectors (built by ``enable_bm25=True``): Milvus' BM25
    function, or vectors the pack computes."""
    return collection_bm25_vectors(client.describe_collection(collection_name)) is not None


def count_entities(store_or_client: Any, collection_name: str | None = None) -> int:
    """Number of rows in a collection (0 when it does not exist)."""
    client = getattr(store_or_client, "client", store_or_client)
    name = collection_name or getattr(store_or_client, "collection_name", None)
    if not name or not client.has_collection(name):
        return 0
    ensure_loaded(client, name)
    res = client.query(name, filter="", output_fields=["count(*)"])
    return int(res[0]["count(*)"]) if res else 0


__all__ = [
    "check_uri",
    "count_entities",
    "ensure_loaded",
    "flush",
    "has_bm25",
    "is_remote_uri",
    "open_client",
    "open_vector_store",
]
