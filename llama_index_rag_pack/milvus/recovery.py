"""A Milvus client that survives a server restart and reports a lost server in one line.

When a Milvus server goes away, pymilvus raises ``MilvusException(code=2, "Fail connecting to
server ...")`` at once, and reconnects by itself within about a second once the server is back.
A restarted Milvus Lite server has every collection *released*, though, so the first search
after a restart fails with code 101 ("call load() before search"). :func:`recovering_client_class`
adds what is missing: a lost connection becomes a :class:`MilvusUnavailableError` that says what
to do; a call made while the server answers again but the channel has not reconnected yet waits
for it (up to :data:`RECONNECT_WAIT_S`); a released collection is loaded and the call retried.
"""

from __future__ import annotations

import functools
import logging
import socket
from typing import Any
from urllib.parse import urlparse

from llama_index_rag_pack.core.errors import MilvusOperationError, MilvusUnavailableError
from llama_index_rag_pack.milvus.bm25 import client_writes
from llama_index_rag_pack.milvus.lite_engine.fast_paths import release_arrow_memory

logger = logging.getLogger(__name__)

#: pymilvus error codes: the server cannot be reached / the collection is not loaded.
CONNECTION_FAILED = 2
COLLECTION_NOT_LOADED = 101

#: How long a call waits for pymilvus to reconnect to a server that answers again.
RECONNECT_WAIT_S = 10.0

_READS = ("search", "hybrid_search", "query", "get", "query_iterator", "search_iterator")
_OTHERS = (
    "insert",
    "upsert",
    "delete",
    "flush",
    "has_collection",
    "describe_collection",
    "create_collection",
    "drop_collection",
    "rename_collection",
    "load_collection",
    "release_collection",
    "list_collections",
    "create_index",
    "describe_index",
    "list_indexes",
    "drop_index",
    "alter_collection_properties",
    "get_server_version",
    "get_collection_stats",
    "get_load_state",
    "compact",
)


def is_connection_error(e: BaseException) -> bool:
    """True when ``e`` says the Milvus server could not be reached."""
    code = getattr(e, "code", None)
    text = str(e)
    return (
        code == CONNECTION_FAILED
        or "Fail connecting to server" in text
        or "StatusCode.UNAVAILABLE" in text
    )


def _is_not_loaded(e: BaseException) -> bool:
    text = str(e).lower()
    return getattr(e, "code", None) == COLLECTION_NOT_LOADED or "call load()" in text


def lost_connection_error(uri: str, e: BaseException) -> MilvusUnavailableError:
    """The one-line error for a Milvus server that went away while in use."""
    return MilvusUnavailableError(
        f"Lost the connection to Milvus at {uri} ({type(e).__name__}: "
        f"{getattr(e, 'message', None) or e}). Check that the server is running (or start it "
        "again); the next request reconnects by itself."
    )


def is_milvus_error(e: BaseException) -> bool:
    """True for an exception of pymilvus or gRPC (what a Milvus call raises when the server
    refuses or fails it)."""
    module = type(e).__module__ or ""
    return module.startswith(("pymilvus", "grpc"))


def operation_error(uri: str, call: str, collection: str | None, e: BaseException) -> Exception:
    """The one-line :class:`MilvusOperationError` of a refused or failed Milvus call."""
    reason = " ".join(str(getattr(e, "message", None) or e).split()) or type(e).__name__
    where = f" on collection {collection!r}" if collection else ""
    return MilvusOperationError(
        f"Milvus at {uri} refused {call}{where}: {reason}. Check that this server's version "
        "serves what the collection needs (`rag-pack -v` shows its capabilities; the version "
        "matrix is in docs/milvus.md) and the server's log."
    )


def _collection_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    name = kwargs.get("collection_name", args[0] if args else None)
    return name if isinstance(name, str) else None


def _server_answers(uri: str) -> bool:
    """True when something accepts connections at the server address ``uri`` (a server that is
    back while pymilvus' channel still waits to reconnect)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https", "tcp", "grpc") or not parsed.hostname:
        return False
    port = parsed.port or (443 if parsed.scheme == "https" else 19530)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=0.5):
            return True
    except OSError:
        return False


def _with_reload(client: Any, method: Any, name: str, args: Any, kwargs: Any) -> Any:
    """``method(*args, **kwargs)``; a read of a released collection loads it and tries again."""
    try:
        return method(*args, **kwargs)
    except Exception as e:
        collection = _collection_of(args, kwargs)
        if collection is None or name not in _READS or not _is_not_loaded(e):
            raise
        logger.info("Collection %r was released (server restarted?): loading it", collection)
        client.load_collection(collection)
        return method(*args, **kwargs)


#: The calls after whose first one per collection Arrow's freed memory is handed back: Milvus
#: Lite reads the collection's files (and builds its indexes) then.
_FIRST_READS = ("load_collection", "search", "hybrid_search", "query")


def _after_first_read(client: Any, collection: str | None) -> None:
    """Hand back what Lite's first read of ``collection`` through ``client`` freed (once)."""
    seen = client.__dict__.setdefault("rag_pack_read_collections", set())
    if collection not in seen:
        seen.add(collection)
        release_arrow_memory()


def _recovering(base: type, name: str) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        import tenacity

        method = getattr(base, name).__get__(self)
        # the server is back but pymilvus' channel has not reconnected yet (about 1 s): wait
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(
                lambda e: is_connection_error(e) and _server_answers(self.rag_pack_uri)
            ),
            wait=tenacity.wait_fixed(0.25),
            stop=tenacity.stop_after_delay(RECONNECT_WAIT_S),
            reraise=True,
        )
        try:
            result = retrying(_with_reload, self, method, name, args, kwargs)
        except Exception as e:
            if is_connection_error(e):
                raise lost_connection_error(self.rag_pack_uri, e) from e
            if is_milvus_error(e):
                collection = _collection_of(args, kwargs)
                raise operation_error(self.rag_pack_uri, name, collection, e) from e
            raise
        if name == "query_iterator":
            return _MappedIterator(result, self.rag_pack_uri, _collection_of(args, kwargs))
        if name in _FIRST_READS:
            _after_first_read(self, _collection_of(args, kwargs))
        return result

    call.__name__ = name
    return call


class _MappedIterator:
    """A query iterator whose ``next()`` reports a failure as the client's calls do."""

    def __init__(self, inner: Any, uri: str, collection: str | None) -> None:
        self._inner, self._uri, self._collection = inner, uri, collection

    def next(self) -> Any:
        try:
            return self._inner.next()
        except Exception as e:
            if is_connection_error(e):
                raise lost_connection_error(self._uri, e) from e
            if is_milvus_error(e):
                raise operation_error(self._uri, "query_iterator", self._collection, e) from e
            raise

    def close(self) -> None:
        try:
            self._inner.close()
        except Exception as e:  # closing a finished iterator on a lost server: nothing to do
            logger.debug("Closing a Milvus query iterator failed: %s", e)


def _bm25_writes(namespace: dict[str, Any]) -> None:
    """Writes to a collection whose BM25 vectors the pack computes weigh the rows and keep the
    statistics (:mod:`~llama_index_rag_pack.milvus.bm25.client_bm25`)."""
    insert, upsert, delete = namespace["insert"], namespace["upsert"], namespace["delete"]
    drop, create = namespace["drop_collection"], namespace["create_collection"]

    def do_insert(self: Any, collection_name: str, data: Any, **kwargs: Any) -> Any:
        write = insert.__get__(self)
        return client_writes.weighed_write(
            write, self, collection_name, data, replace=False, **kwargs
        )

    def do_upsert(self: Any, collection_name: str, data: Any, **kwargs: Any) -> Any:
        write = upsert.__get__(self)
        return client_writes.weighed_write(
            write, self, collection_name, data, replace=True, **kwargs
        )

    def do_delete(self: Any, collection_name: str, *args: Any, **kwargs: Any) -> Any:
        if args:  # pymilvus' positional order: ids, timeout, filter
            kwargs.update(zip(("ids", "timeout", "filter"), args, strict=False))
        return client_writes.counted_delete(delete.__get__(self), self, collection_name, **kwargs)

    def do_drop(self: Any, collection_name: str, *args: Any, **kwargs: Any) -> Any:
        bm25 = client_writes.collection_client_bm25(self, collection_name)
        result = drop(self, collection_name, *args, **kwargs)
        client_writes.forget_collection(self, collection_name)
        if bm25 is not None:
            bm25.drop()
        return result

    def do_create(self: Any, collection_name: str, *args: Any, **kwargs: Any) -> Any:
        client_writes.forget_collection(self, collection_name)
        return create(self, collection_name, *args, **kwargs)

    for name, fn in (
        ("insert", do_insert),
        ("upsert", do_upsert),
        ("delete", do_delete),
        ("drop_collection", do_drop),
        ("create_collection", do_create),
    ):
        fn.__name__ = name
        namespace[name] = fn


_HANDLED = ("Fail connecting to server", "call load()", "Connection recovery failed")


class _HandledRpcErrors(logging.Filter):
    """pymilvus logs every failed RPC as an ERROR with a traceback; the ones this client handles
    (a lost server, reported in one line; a released collection, loaded) go to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if any(fragment in text for fragment in _HANDLED):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.msg, record.args = text.split("\nTraceback", 1)[0], None
            record.exc_info = record.exc_text = None
        return record.levelno >= logging.getLogger(record.name).getEffectiveLevel()


@functools.lru_cache(maxsize=1)
def recovering_client_class() -> type:
    """``MilvusClient`` whose reads reload a released collection and retry once, and turn a lost
    server into :class:`MilvusUnavailableError`."""
    from pymilvus import MilvusClient

    for name in ("pymilvus.decorators", "pymilvus.client.connection_manager"):
        logging.getLogger(name).addFilter(_HandledRpcErrors())
    namespace: dict[str, Any] = {
        name: _recovering(MilvusClient, name) for name in (*_READS, *_OTHERS)
    }
    _bm25_writes(namespace)
    namespace["rag_pack_uri"] = "Milvus"
    return type("RecoveringMilvusClient", (MilvusClient,), namespace)


__all__ = ["is_connection_error", "lost_connection_error", "recovering_client_class"]
