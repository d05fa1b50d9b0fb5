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
import functools
import logging
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    MilvusUnavailableError,
)
from llama_index_rag_pack.documents.bm25_analysis import Bm25Analysis, BM25Analyzer
from llama_index_rag_pack.milvus.bm25_fields import (
    bm25_store_kwargs,
    check_async_client,
    function_type_name,
    store_analysis,
)
from llama_index_rag_pack.milvus.index_creation import create_store_indexes
from llama_index_rag_pack.milvus.lite import LITE_OPEN_LOCK, is_lite_path, lite_lock_problem
from llama_index_rag_pack.milvus.recovery import recovering_client_class
from llama_index_rag_pack.milvus.store_classes import loop_safe_store_class
from llama_index_rag_pack.milvus.tenants import resolve_tenant_field, tenant_store_class
from llama_index_rag_pack.milvus.vector_memory import forget_vectors
from llama_index_rag_pack.models.settings import (
    DEFAULT_EMBED_DIM,
    default_collection,
    default_milvus_uri,
)

logger = logging.getLogger(__name__)

REMOTE_SCHEMES = ("http", "https", "tcp", "grpc", "unix")
START_SERVER_HINT = (
    "Start one with `milvus-lite server --data-dir ./milvus-data --host 127.0.0.1 --port 19530`, "
    "check the uri, or use a local Milvus Lite path such as ./rag_pack_data/milvus.db"
)


def default_token(token: str | None = None) -> str:
    """``token`` or ``RAG_PACK_MILVUS_TOKEN`` (``user:password`` or an API key), else empty."""
    return token or os.environ.get("RAG_PACK_MILVUS_TOKEN", "")


def is_remote_uri(uri: str) -> bool:
    """True for a Milvus server/cluster address, False for a Milvus Lite path."""
    return urlparse(uri).scheme in REMOTE_SCHEMES


def check_uri(uri: str, *, timeout: float = 3.0) -> None:
    """Fail fast, with a helpful message, when ``uri`` cannot work.

    Raises:
        ConfigurationError: a local path that Milvus Lite cannot use.
        MilvusUnavailableError: a server address where nothing answers.
    """
    if not uri:
        raise ConfigurationError("Milvus uri is empty: give a *.db path or http://host:19530.")
    if is_remote_uri(uri):
        parsed = urlparse(uri)
        host = parsed.hostname or "127.0.0.1"
        port = parsed.port or (443 if parsed.scheme == "https" else 19530)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as e:
            raise MilvusUnavailableError(
                f"Cannot reach Milvus at {uri} ({e.__class__.__name__}: {e}). {START_SERVER_HINT}."
            ) from e
        return
    if not uri.endswith(".db"):
        raise ConfigurationError(
            f"Milvus Lite needs a path ending in '.db', got {uri!r} "
            "(e.g. ./rag_pack_data/milvus.db), or give a server address http://host:19530."
        )
    path = Path(uri)
    if path.exists() and not path.is_dir():
        raise ConfigurationError(
            f"{uri!r} exists but is not a Milvus Lite database directory. Choose another path."
        )
    path.parent.mkdir(parents=True, exist_ok=True)


# Milvus Lite's gRPC server (in-process for a ``*.db`` path, or ``milvus-lite server``) keeps
# gRPC's default ping policy (an idle client may ping once per 5 minutes), while pymilvus pings
# every 10 s: after a few idle seconds the server answers with a "too_many_pings" GOAWAY, which
# gRPC prints to stderr. A loopback connection needs no keepalive pings at all.
_LOOPBACK_GRPC_OPTIONS = {
    "grpc.keepalive_time_ms": 2**31 - 1,
    "grpc.keepalive_permit_without_calls": 0,
}
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def client_kwargs(uri: str) -> dict[str, Any]:
    """Extra ``MilvusClient`` keyword arguments for ``uri`` (gRPC options for local servers).

    Every client of one address must get the same options: pymilvus shares one gRPC channel per
    address and token, made with the options of the first client.

    Example:
        >>> client_kwargs("http://milvus.internal:19530")
        {}
        >>> sorted(client_kwargs("./rag_pack_data/milvus.db")["grpc_options"])
        ['grpc.keepalive_permit_without_calls', 'grpc.keepalive_time_ms']
    """
    if is_remote_uri(uri) and urlparse(uri).hostname not in _LOOPBACK_HOSTS:
        return {}
    return {"grpc_options": dict(_LOOPBACK_GRPC_OPTIONS)}


class _DemoteToDebug(logging.Filter):
    """Turns a known, harmless log record of another library into a DEBUG record."""

    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        if self.fragment in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = record.exc_text = None
        return record.levelno >= logging.getLogger(record.name).getEffectiveLevel()


@functools.lru_cache(maxsize=1)
def _quiet_lite_server_logs() -> None:
    """Milvus Lite answers the RPCs it lacks (pymilvus' ``AllocTimestamp`` while an index is
    created) with UNIMPLEMENTED, and gRPC's server logs each as an ERROR with a traceback. The
    client copes, so these records go to DEBUG (``rag-pack -v`` or your own DEBUG logging)."""
    logging.getLogger("grpc._server").addFilter(_DemoteToDebug("Method not implemented"))
    # the same missing RPC makes query iterators fall back to a client-side timestamp, which is
    # right for Lite (one process owns the data)
    logging.getLogger("pymilvus.orm.iterator").addFilter(_DemoteToDebug("failed to get mvccTs"))
    # a locked database: open_client says who holds it, in one line
    logging.getLogger("milvus_lite.server_manager").addFilter(
        _DemoteToDebug("Failed to start MilvusLite server")
    )


def open_client(uri: str | None = None, *, token: str | None = None) -> Any:
    """Open a ``pymilvus.MilvusClient`` on ``uri`` with clear errors."""
    uri = uri or default_milvus_uri()
    check_uri(uri)
    client_class = recovering_client_class()
    if not is_remote_uri(uri):
        _quiet_lite_server_logs()
    # two threads opening one Lite path at once would lock each other out
    with LITE_OPEN_LOCK if not is_remote_uri(uri) else contextlib.nullcontext():
        try:
            client = client_class(uri=uri, token=default_token(token), **client_kwargs(uri))
        except Exception as e:  # pymilvus raises MilvusException / RuntimeError / OSError
            raise _open_error(uri, e) from e
    client.rag_pack_uri = uri
    return client


def _open_error(uri: str, e: Exception) -> Exception:
    if not is_remote_uri(uri):
        problem = lite_lock_problem(uri)
        if problem is not None:
            return MilvusUnavailableError(problem)
    text = " ".join(str(e).split()) or type(e).__name__
    return MilvusUnavailableError(f"Could not open Milvus at {uri}: {text}. {START_SERVER_HINT}.")


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
    **store_kwargs: Any,
) -> Any:
    """Open (or create) a ``MilvusVectorStore`` ready to search.

    Args:
        uri: Milvus Lite path (``*.db``) or server address; default :func:`default_milvus_uri`.
        collection_name: Default :func:`default_collection`.
        dim: Embedding dimension of a new collection (384 for the bundled MiniLM).
        token: Server token, if the server needs one.
        overwrite: Drop an existing collection of that name first.
        enable_bm25: Add Milvus' built-in BM25 function on the text field (sparse
            ``sparse_embedding`` field), so dense, BM25 and hybrid search share one collection.
        must_exist: Raise :class:`CollectionNotFoundError` instead of creating a new collection.
        similarity_metric: ``COSINE`` (default, right for MiniLM), ``IP`` or ``L2``.
        bm25_analyzer: A new collection's BM25 analysis: ``auto`` (default: each chunk in its
            own language), a language (``chinese``, ``german``, ...), ``english``, ``standard``
            or a callable (:mod:`~llama_index_rag_pack.documents.bm25_analysis`); an existing one
            keeps its own. The store's ``bm25_analysis`` says which is in use.
        tenant_field: A new collection's tenant field, a VARCHAR partition key
            (:mod:`~llama_index_rag_pack.milvus.tenants`); an existing one keeps its own, and
            the store's ``tenant_field`` says which (``None``: no tenants).
        **store_kwargs: Passed on to ``MilvusVectorStore`` (index_config, search_config, ...).
            Async methods run the sync client in a worker thread (usable from any event loop);
            ``use_async_client=True`` restores pymilvus' own async client instead.

    Raises:
        MilvusUnavailableError: Milvus cannot be reached or opened.
        CollectionNotFoundError: ``must_exist`` and the collection is missing.
        ConfigurationError: an existing collection has another dimension than ``dim``, or
            another tenant field than ``tenant_field``.
    """
    from llama_index.vector_stores.milvus import MilvusVectorStore

    uri = uri or default_milvus_uri()
    token = default_token(token)
    collection_name = collection_name or default_collection()
    if similarity_metric.upper() not in ("COSINE", "IP", "L2"):
        raise ConfigurationError(
            f"similarity_metric must be one of COSINE, IP, L2; got {similarity_metric!r}."
        )
    if must_exist and is_lite_path(uri) and not Path(uri).is_dir():
        # nothing to reopen: fail before Milvus Lite creates an empty database there
        raise CollectionNotFoundError(_no_collection(collection_name, uri))
    client = open_client(uri, token=token)
    exists = client.has_collection(collection_name)
    if must_exist and not exists:
        raise CollectionNotFoundError(_no_collection(collection_name, uri))
    if exists and not overwrite:
        _check_dim(client, collection_name, dim)
        enable_bm25 = enable_bm25 and has_bm25(client, collection_name)
    new = not exists or overwrite
    tenant_field = resolve_tenant_field(client, collection_name, tenant_field, new=new)
    analysis = store_analysis(client, collection_name, bm25_analyzer, new=new, bm25=enable_bm25)
    kwargs: dict[str, Any] = dict(
        uri=uri,
        token=token or "",
        collection_name=collection_name,
        dim=dim,
        overwrite=overwrite,
        similarity_metric=similarity_metric.upper(),
    )
    if analysis is not None:
        kwargs.update(bm25_store_kwargs(analysis, new=new))
    kwargs.update(client_kwargs(uri))
    kwargs.update(store_kwargs)
    kwargs.setdefault("use_async_client", False)
    check_async_client(analysis, kwargs["use_async_client"])
    store_class = loop_safe_store_class() if not kwargs["use_async_client"] else MilvusVectorStore
    if tenant_field and new:
        store_class = tenant_store_class(tenant_field, store_class)
    store = _make_store(store_class, kwargs, client, new and "index_management" not in kwargs)
    if isinstance(store, loop_safe_store_class()):
        store.configure(bm25_analysis=analysis, tenant_field=tenant_field)
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


def _make_store(store_class: type, kwargs: dict[str, Any], client: Any, own_indexes: bool) -> Any:
    """The store on ``client``; with ``own_indexes`` (a new collection, no index management
    asked for) its indexes are made without pymilvus' 0.5 s wait per index."""
    from llama_index.vector_stores.milvus import IndexManagement

    if own_indexes:
        kwargs["index_management"] = IndexManagement.NO_VALIDATION
    try:
        with LITE_OPEN_LOCK:
            store = store_class(**kwargs)
    except Exception as e:
        raise _open_error(kwargs["uri"], e) from e
    store._milvusclient = client  # the same connection, with recovery from server restarts
    if own_indexes:
        store.index_management = IndexManagement.CREATE_IF_NOT_EXISTS
        create_store_indexes(store)
    return store


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
    """True when the collection has a BM25 function (built by ``enable_bm25=True``)."""
    info = client.describe_collection(collection_name)
    return any(function_type_name(fn.get("type")) == "BM25" for fn in info.get("functions", []))


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
