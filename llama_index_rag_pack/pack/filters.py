"""``filters=`` for a pack: core's ``MetadataFilters`` or a Milvus expression, compiled once
against the pack's collection.

``pack.retriever(mode, filters=...)`` compiles the filters here before the mode's builder runs,
so every builder receives the same Milvus expression string (and retrievers are cached by it).
A mode whose builder takes no ``filters`` argument is refused with a one-line error rather than
searched unfiltered.
"""

from __future__ import annotations

import inspect
from typing import Any

from llama_index_rag_pack.components.metadata_filters import Filters, filter_expression
from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["check_builder_filters", "pack_filter_expression"]


def pack_filter_expression(pack: Any, filters: Filters) -> str:
    """``filters`` as a Milvus expression on ``pack``'s collection (``""`` for none)."""
    if filters is None or isinstance(filters, str):
        return filter_expression(filters)
    store = pack.vector_store
    info = store.client.describe_collection(store.collection_name)
    schema = {str(f.get("name")) for f in info.get("fields", [])}
    return filter_expression(filters, schema_fields=schema)


def check_builder_filters(mode: str, build: Any) -> None:
    """Raise :class:`ConfigurationError` when ``build`` takes no ``filters`` argument."""
    params = inspect.signature(build).parameters
    takes = "filters" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    if not takes:
        raise ConfigurationError(
            f"Mode {mode!r} takes no filters: its builder has no filters= argument."
        )
