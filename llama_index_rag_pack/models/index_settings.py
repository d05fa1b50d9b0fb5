"""One embedding model, one chunking per collection: what a collection was made with is recorded
in its properties (``rag_pack.embedding``, ``rag_pack.chunking``), and an insert made otherwise
is refused in one line before anything is embedded (vectors of two models are never mixed
silently). A pack left at the default chunking takes the collection's.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "CHUNKING_PROPERTY",
    "EMBEDDING_PROPERTY",
    "adopt_recorded_chunking",
    "check_index_settings",
    "embedding_identity",
    "index_settings",
    "record_index_settings",
]


def _collection_dim(info: dict[str, Any], field: str = "embedding") -> int | None:
    for f in info.get("fields", []):
        if f.get("name") == field:
            dim = (f.get("params") or {}).get("dim")
            return int(dim) if dim is not None else None
    return None


#: Collection properties that record how its rows were made; an insert made otherwise is refused.
EMBEDDING_PROPERTY = "rag_pack.embedding"
CHUNKING_PROPERTY = "rag_pack.chunking"


def embedding_identity(model: Any) -> str:
    """What makes an embedding model's vectors: its class and name (with its precision), not
    where it runs: an endpoint's model name without its URL, a local directory's name without
    its path."""
    from llama_index_rag_pack.models.settings import describe_embed_model

    name = getattr(model, "model_name", None)
    if isinstance(getattr(model, "api_base", None), str) and name:
        described = str(name)
    else:
        described = describe_embed_model(model)
        if isinstance(name, str) and os.path.isabs(name) and name in described:
            described = described.replace(name, os.path.basename(name.rstrip("/\\")))
    return f"{type(model).__name__}:{described}"


def index_settings(pack: Any) -> dict[str, str]:
    """How ``pack`` makes rows: its embedding model (class, name, dimension) and chunking."""
    store = pack.vector_store
    dim = _collection_dim(store.client.describe_collection(store.collection_name))
    return {
        EMBEDDING_PROPERTY: embedding_identity(pack.embed_model) + (f" ({dim}-d)" if dim else ""),
        CHUNKING_PROPERTY: f"{pack.chunk_size}/{pack.chunk_overlap} tokens",
    }


def adopt_recorded_chunking(pack: Any, default: tuple[int, int]) -> None:
    """A pack left at the ``default`` chunking (size, overlap) takes the one its collection was
    indexed with (so ``RagPack.open(...)`` and ``rag-pack index`` without ``--chunk-size`` add
    rows like the stored ones); a chunking chosen otherwise is checked by
    :func:`check_index_settings`."""
    if (pack.chunk_size, pack.chunk_overlap) != tuple(default):
        return
    store = pack.vector_store
    props = store.client.describe_collection(store.collection_name).get("properties") or {}
    recorded = str(props.get(CHUNKING_PROPERTY) or "").removesuffix(" tokens").split("/")
    if len(recorded) == 2 and all(part.isdigit() for part in recorded):
        pack.chunk_size, pack.chunk_overlap = int(recorded[0]), int(recorded[1])


def check_index_settings(pack: Any) -> dict[str, str]:
    """Refuse to write rows into a collection made with another embedding model or chunking:
    vectors of two models are never mixed. Returns the settings this pack records on the
    collection where none are recorded yet.

    Raises:
        ConfigurationError: one line naming what differs and ``--overwrite``.
    """
    store = pack.vector_store
    name = store.collection_name
    props = store.client.describe_collection(name).get("properties") or {}
    wanted = index_settings(pack)
    for key, what in ((EMBEDDING_PROPERTY, "embedding model"), (CHUNKING_PROPERTY, "chunking")):
        have = props.get(key)
        if have and have != wanted[key]:
            raise ConfigurationError(
                f"Collection {name!r} was indexed with the {what} {have}, this pack uses "
                f"{wanted[key]}: vectors and chunks of two settings are never mixed in one "
                "collection. Use the same settings, rebuild it (`rag-pack index --overwrite`, "
                "overwrite=True), or index into another collection."
            )
    return {k: v for k, v in wanted.items() if not props.get(k)}


def record_index_settings(pack: Any, missing: dict[str, str]) -> None:
    """Record ``missing`` settings on the pack's collection (a server that keeps no collection
    properties is left as it is)."""
    if not missing:
        return
    store = pack.vector_store
    try:
        store.client.alter_collection_properties(store.collection_name, properties=missing)
    except Exception as e:  # a server without collection properties, or no right to alter
        logger.warning("Could not record the index settings of %s: %s", store.collection_name, e)
