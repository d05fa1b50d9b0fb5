"""What the Milvus behind a connection can do, detected once per address.

The pack meets four kinds of Milvus:

================  ===============  =================  ==========================================
backend           sparse vectors   BM25 function      the pack's BM25
================  ===============  =================  ==========================================
Milvus Lite       yes              yes                Milvus' BM25 function over the analysed text
Milvus 2.5+       yes              yes                Milvus' BM25 function over the analysed text
Milvus 2.4        yes              no                 sparse vectors computed by the pack
                                                      (:mod:`~llama_index_rag_pack.milvus.bm25.client_bm25`)
Milvus 2.3        no               no                 none: dense modes only
================  ===============  =================  ==========================================

The version comes from ``get_server_version()`` (``v2.4.13``, ``2.5.4``, ``milvus_lite-3.2.2``).
A version that names no release (a managed service's own string) is probed: a throw-away
collection with a sparse field and a BM25 function is created and dropped, and what the server
refuses says what it lacks.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from dataclasses import asdict, dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "MilvusCapabilities",
    "capabilities_from_version",
    "detect_capabilities",
    "forget_capabilities",
    "parse_version",
]

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of a Milvus server version string, ``None`` for Milvus Lite or
    a string that names no release.

    Example:
        >>> parse_version("v2.3.5-lite"), parse_version("2.5.4"), parse_version("milvus_lite-3.2.2")
        ((2, 3, 5), (2, 5, 4), None)
    """
    if not text or "milvus_lite" in text.lower():
        return None
    match = _VERSION.search(text)
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True)
class MilvusCapabilities:
    """What one Milvus can serve.

    Attributes:
        backend: ``Milvus Lite`` or ``Milvus server``.
        version: The version the server reports (``v2.3.5``; ``milvus_lite-3.2.2``).
        sparse_vectors: ``SPARSE_FLOAT_VECTOR`` fields and their index (2.4+).
        bm25_function: Milvus' built-in BM25 function (2.5+, Lite).
        partition_key: Partition-key fields, which keep tenants apart (2.2.9+).
        hybrid_search: Several ANN requests fused by Milvus (2.4+).
        probed: The version named no release and the server was probed.
    """

    backend: str
    version: str
    sparse_vectors: bool
    bm25_function: bool
    partition_key: bool = True
    hybrid_search: bool = True
    probed: bool = False

    @property
    def bm25(self) -> str | None:
        """How the pack's BM25 works here: ``function`` (Milvus' BM25 function), ``client``
        (sparse vectors the pack computes) or ``None`` (dense modes only)."""
        if self.bm25_function:
            return "function"
        return "client" if self.sparse_vectors else None

    def describe(self) -> str:
        """One line: backend, version and what BM25 is.

        Example:
            >>> MilvusCapabilities("Milvus server", "v2.3.5", False, False).describe()
            'Milvus server v2.3.5: no sparse vectors (dense modes only)'
        """
        bm25 = {
            "function": "BM25 by Milvus' BM25 function",
            "client": "sparse vectors, no BM25 function (BM25 vectors computed by the pack)",
            None: "no sparse vectors (dense modes only)",
        }[self.bm25]
        return f"{self.backend} {self.version}: {bm25}"

    def as_dict(self) -> dict[str, Any]:
        """The capabilities as plain values (for ``describe()`` and JSON)."""
        return {**asdict(self), "bm25": self.bm25}


def capabilities_from_version(version: str) -> MilvusCapabilities | None:
    """The capabilities a version string implies (``None``: the version names no release).

    Example:
        >>> capabilities_from_version("v2.4.13").bm25
        'client'
        >>> capabilities_from_version("milvus_lite-3.2.2").bm25
        'function'
    """
    if "milvus_lite" in (version or "").lower():
        return MilvusCapabilities("Milvus Lite", version, True, True)
    parsed = parse_version(version)
    if parsed is None or parsed[0] != 2:
        return None
    minor = parsed[1]
    return MilvusCapabilities(
        "Milvus server",
        version,
        sparse_vectors=minor >= 4,
        bm25_function=minor >= 5,
        partition_key=parsed >= (2, 2, 9),
        hybrid_search=minor >= 4,
    )


_CACHE: dict[str, MilvusCapabilities] = {}
_LOCK = threading.Lock()


def forget_capabilities(uri: str | None = None) -> None:
    """Detect again on the next connection (to ``uri``; every address without one): a server
    upgraded in place."""
    with _LOCK:
        if uri is None:
            _CACHE.clear()
        else:
            _CACHE.pop(uri, None)


def detect_capabilities(client: Any, uri: str | None = None) -> MilvusCapabilities:
    """The capabilities of the Milvus behind ``client``, detected once per ``uri`` (the
    client's ``rag_pack_uri`` by default).

    Raises:
        MilvusUnavailableError: the server cannot be reached (from the pack's client).
    """
    key = uri or getattr(client, "rag_pack_uri", None) or str(id(client))
    with _LOCK:
        known = _CACHE.get(key)
    if known is not None:
        return known
    version = str(client.get_server_version() or "")
    found = capabilities_from_version(version)
    if found is None:
        found = _probe(client, version)
    logger.debug("Milvus at %s: %s", key, found.describe())
    with _LOCK:
        _CACHE[key] = found
    return found


def _probe(client: Any, version: str) -> MilvusCapabilities:
    """Create and drop a throw-away collection with a sparse field and a BM25 function; what
    the server refuses says what it lacks."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    name = f"rag_pack_probe_{uuid.uuid4().hex[:12]}"
    sparse = bm25 = False
    try:
        schema = MilvusClient.create_schema(auto_id=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("text", DataType.VARCHAR, max_length=64, enable_analyzer=True)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        params = client.prepare_index_params()
        params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        try:
            client.create_collection(name, schema=schema, index_params=params)
            sparse = True
        except Exception as e:
            logger.debug("Milvus probe: no sparse vectors (%s)", e)
        finally:
            if client.has_collection(name):
                client.drop_collection(name)
        if sparse:
            schema.add_function(
                Function(
                    name="bm25",
                    function_type=FunctionType.BM25,
                    input_field_names=["text"],
                    output_field_names=["sparse"],
                )
            )
            params = client.prepare_index_params()
            params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
            try:
                client.create_collection(name, schema=schema, index_params=params)
                bm25 = True
            except Exception as e:
                logger.debug("Milvus probe: no BM25 function (%s)", e)
            finally:
                if client.has_collection(name):
                    client.drop_collection(name)
    except Exception as e:  # the probe itself failed: assume the oldest the pack serves
        logger.debug("Milvus probe failed: %s", e)
    return MilvusCapabilities(
        "Milvus server", version or "unknown", sparse, bm25, hybrid_search=sparse, probed=True
    )
