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

from llama_index_rag_pack.milvus.lite import is_lite_path

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


#: Capabilities found by probing, by address and version (a version string is read each time).
_PROBED: dict[tuple[str, str], MilvusCapabilities] = {}
_LOCK = threading.Lock()


def forget_capabilities(uri: str | None = None) -> None:
    """Probe again on the next connection (to ``uri``; every address without one)."""
    with _LOCK:
        for key in [k for k in _PROBED if uri is None or k[0] == uri]:
            del _PROBED[key]


def detect_capabilities(client: Any, uri: str | None = None) -> MilvusCapabilities:
    """The capabilities of the Milvus behind ``client`` (at ``uri``, the client's
    ``rag_pack_uri`` by default): from its version, read on every call (one cheap request, so
    a server upgraded in place is seen), or by a probe cached per address and version.

    Raises:
        MilvusUnavailableError: the server cannot be reached (from the pack's client).
    """
    key = uri or getattr(client, "rag_pack_uri", None) or ""
    version = str(client.get_server_version() or "")
    if key and is_lite_path(key):
        return MilvusCapabilities("Milvus Lite", version or "milvus_lite", True, True)
    found = capabilities_from_version(version)
    if found is not None:
        return found
    with _LOCK:
        known = _PROBED.get((key, version))
    if known is not None:
        return known
    found, conclusive = _probe(client, version)
    logger.info("Milvus at %s reports %r: probed, %s", key, version, found.describe())
    if conclusive:
        with _LOCK:
            _PROBED[(key, version)] = found
    return found


def _accepts(client: Any, *, bm25: bool) -> bool | None:
    """Whether the server creates a throw-away collection with a sparse field (and a BM25
    function): ``None`` when it fails for another reason than refusing it."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    from llama_index_rag_pack.core.errors import MilvusOperationError

    name = f"rag_pack_probe_{uuid.uuid4().hex[:12]}"
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("text", DataType.VARCHAR, max_length=64, enable_analyzer=bm25)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    if bm25:
        schema.add_function(
            Function(
                name="bm25",
                function_type=FunctionType.BM25,
                input_field_names=["text"],
                output_field_names=["sparse"],
            )
        )
    params = client.prepare_index_params()
    params.add_index(
        "sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25" if bm25 else "IP"
    )
    try:
        client.create_collection(name, schema=schema, index_params=params)
        return True
    except MilvusOperationError as e:  # the server answered: it refuses this schema
        logger.debug("Milvus probe: %s refused (%s)", "BM25 function" if bm25 else "sparse", e)
        return False
    except Exception as e:  # noqa: BLE001 - a lost server is raised by the caller's next call
        logger.debug("Milvus probe inconclusive: %s", e)
        return None
    finally:
        try:
            if client.has_collection(name):
                client.drop_collection(name)
        except Exception as e:  # noqa: BLE001 - a probe collection left behind is harmless
            logger.debug("Could not drop the probe collection %s: %s", name, e)


def _probe(client: Any, version: str) -> tuple[MilvusCapabilities, bool]:
    """What the server accepts, and whether that was conclusive (an inconclusive probe assumes
    everything: a step the server cannot do then fails with its own error)."""
    sparse = _accepts(client, bm25=False)
    bm25 = _accepts(client, bm25=True) if sparse else False
    conclusive = sparse is not None and bm25 is not None
    sparse_ok = sparse is not False
    bm25_ok = sparse_ok and bm25 is not False
    caps = MilvusCapabilities(
        "Milvus server",
        version or "unknown",
        sparse_ok,
        bm25_ok,
        hybrid_search=sparse_ok,
        probed=True,
    )
    return caps, conclusive
