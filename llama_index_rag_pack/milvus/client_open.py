"""Opening a Milvus client: the uri checked first, one-line errors, gRPC options for loopback
servers, and Milvus Lite's harmless log noise turned down."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from llama_index_rag_pack.core import lite_install
from llama_index_rag_pack.core.errors import ConfigurationError, MilvusUnavailableError
from llama_index_rag_pack.milvus.lite import LITE_OPEN_LOCK, lite_lock_problem
from llama_index_rag_pack.milvus.lite_engine.fast_paths import tune_lite
from llama_index_rag_pack.milvus.recovery import recovering_client_class
from llama_index_rag_pack.models.settings import default_milvus_uri

logger = logging.getLogger(__name__)

__all__ = [
    "REMOTE_SCHEMES",
    "START_SERVER_HINT",
    "check_uri",
    "check_varchar_rows_by_value",
    "client_kwargs",
    "default_token",
    "is_remote_uri",
    "open_client",
    "open_error",
]

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
        ConfigurationError: a local path that Milvus Lite cannot use, or any local path
            without Milvus Lite installed.
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
    if not lite_install.lite_installed():
        raise ConfigurationError(lite_install.lite_missing_message(uri))
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
    # the same missing RPC (and Milvus 2.3's lack of it) makes query iterators fall back to a
    # client-side timestamp: right for Lite (one process owns the data), and for the pack's
    # reads of rows it wrote and flushed
    logging.getLogger("pymilvus.orm.iterator").addFilter(_DemoteToDebug("failed to get mvccTs"))
    # a locked database: open_client says who holds it, in one line
    logging.getLogger("milvus_lite.server_manager").addFilter(
        _DemoteToDebug("Failed to start MilvusLite server")
    )


@functools.lru_cache(maxsize=1)
def check_varchar_rows_by_value() -> bool:
    """pymilvus (2.6) checks each VARCHAR value of a row insert with its column check, so it
    walks the string one character at a time: a Python call or two per character (about 40%
    of the client's time in a 20,000-document insert), and it never catches a string over the
    field's ``max_length`` (each character is shorter). Its row path is given the check it
    means: the same column check, on a list of the one value (a ``str`` no longer than
    ``max_length``). Nothing changes where pymilvus' row path is not this one; whether it was
    changed is returned."""
    try:
        from pymilvus.client import entity_helper as helper
        from pymilvus.client.types import DataType
    except ImportError:  # pragma: no cover - pymilvus is a dependency
        return False
    table = getattr(helper, "_ROW_SCALAR_NORMALIZERS", None)
    column_check = getattr(helper, "convert_to_str_array", None)
    if not isinstance(table, dict) or not callable(column_check):
        return False
    changed = False
    for name in ("VARCHAR", "GEOMETRY"):
        dtype = getattr(DataType, name, None)
        given = table.get(dtype)
        if getattr(given, "__name__", "") != "<lambda>" or given.__module__ != helper.__name__:
            continue  # not pymilvus' own per-character check: left alone

        def by_value(value: Any, field_info: Any) -> Any:
            return column_check([value], field_info, helper.CHECK_STR_ARRAY)[0]

        table[dtype] = by_value
        changed = True
    return changed


def open_client(uri: str | None = None, *, token: str | None = None) -> Any:
    """Open a ``pymilvus.MilvusClient`` on ``uri`` with clear errors."""
    uri = uri or default_milvus_uri()
    check_uri(uri)
    client_class = recovering_client_class()
    _quiet_lite_server_logs()
    check_varchar_rows_by_value()
    tune_lite()
    # two threads opening one Lite path at once would lock each other out
    with LITE_OPEN_LOCK if not is_remote_uri(uri) else contextlib.nullcontext():
        try:
            client = client_class(uri=uri, token=default_token(token), **client_kwargs(uri))
        except Exception as e:  # pymilvus raises MilvusException / RuntimeError / OSError
            raise open_error(uri, e) from e
    client.rag_pack_uri = uri
    return client


def open_error(uri: str, e: Exception) -> Exception:
    if not is_remote_uri(uri):
        problem = lite_lock_problem(uri)
        if problem is not None:
            return MilvusUnavailableError(problem)
    text = " ".join(str(e).split()) or type(e).__name__
    return MilvusUnavailableError(f"Could not open Milvus at {uri}: {text}. {START_SERVER_HINT}.")
