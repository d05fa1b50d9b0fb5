"""A Milvus client that survives a server restart and reports a lost server in one line.

When a Milvus server goes away, pymilvus raises ``MilvusException(code=2, "Fail connecting to
server ...")`` at once, and reconnects by itself within about a second once the server is back.
A restarted Milvus Lite server has every collection *released*, though, so the first search
after a restart fails with code 101 ("call load() before search"). :func:`recovering_client_class`
adds both: a lost connection becomes a :class:`MilvusUnavailableError` that says what to do, and a
released collection is loaded and the call retried once.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from llama_index_rag_pack.core.errors import MilvusUnavailableError

logger = logging.getLogger(__name__)

#: pymilvus error codes: the server cannot be reached / the collection is not loaded.
CONNECTION_FAILED = 2
COLLECTION_NOT_LOADED = 101

_READS = ("search", "hybrid_search", "query", "get", "query_iterator", "search_iterator")
_OTHERS = ("insert", "upsert", "delete", "flush", "has_collection", "describe_collection")


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


def _collection_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    name = kwargs.get("collection_name", args[0] if args else None)
    return name if isinstance(name, str) else None


def _recovering(base: type, method_name: str) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(base, method_name).__get__(self)
        try:
            return method(*args, **kwargs)
        except Exception as e:
            name = _collection_of(args, kwargs)
            if name is not None and method_name in _READS and _is_not_loaded(e):
                logger.info("Collection %r was released (server restarted?): loading it", name)
                try:
                    self.load_collection(name)
                    return method(*args, **kwargs)
                except Exception as again:
                    if is_connection_error(again):
                        raise lost_connection_error(self.rag_pack_uri, again) from again
                    raise
            if is_connection_error(e):
                raise lost_connection_error(self.rag_pack_uri, e) from e
            raise

    call.__name__ = method_name
    return call


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
    namespace["rag_pack_uri"] = "Milvus"
    return type("RecoveringMilvusClient", (MilvusClient,), namespace)


__all__ = ["is_connection_error", "lost_connection_error", "recovering_client_class"]
