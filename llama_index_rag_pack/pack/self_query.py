"""The ``self_query`` mode of a pack: the LLM writes the search query and a validated Milvus
metadata filter, searched with one of the pack's base modes (vector, BM25 or hybrid).

Fields come from :func:`configure_self_query` (what ``rag-pack ask --self-query-fields FILE``
calls), from the builder's ``fields=`` argument, or else are inferred from the collection.

Example:
    >>> from llama_index_rag_pack.pack.modes import base_modes
    >>> base_modes()  # what base= accepts
    ['vector', 'bm25', 'hybrid', 'hybrid_weighted', 'hybrid_convex']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.metadata_fields import FieldSpec, field_specs
from llama_index_rag_pack.pack.filters import base_scope
from llama_index_rag_pack.pack.mode_registry import base_modes
from llama_index_rag_pack.pack.pack_view import PackView

__all__ = ["SelfQueryConfig", "configure_self_query", "self_query_retriever"]


@dataclass(frozen=True)
class SelfQueryConfig:
    """What ``configure_self_query`` set on a pack (``pack.self_query_config``)."""

    fields: tuple[FieldSpec, ...] | None = None
    description: str | None = None
    base: str | None = None


def _check_base(base: str | None) -> None:
    if base is not None and base not in base_modes():
        raise ConfigurationError(
            f"Self-query cannot filter mode {base!r}; use one of {', '.join(base_modes())}."
        )


def configure_self_query(
    pack: PackView,
    fields: Iterable[FieldSpec | Mapping[str, Any]] | None = None,
    *,
    description: str | None = None,
    base: str | None = None,
) -> None:
    """Set the fields (``None``: infer them), the documents' description and the base retriever
    that ``pack.retriever("self_query")`` uses; a self-query retriever built before is rebuilt.

    Raises:
        ConfigurationError: bad field declarations or a base mode that takes no filter.
    """
    _check_base(base)
    specs = None if fields is None else field_specs(fields)
    pack.self_query_config = SelfQueryConfig(specs, description, base)
    pack.forget_engines("self_query")


def _default_base(pack: PackView) -> str:
    mode = getattr(pack, "default_mode", "vector")
    return mode if mode in base_modes() else "vector"


def self_query_retriever(
    pack: PackView,
    similarity_top_k: int | None = None,
    fields: Iterable[FieldSpec | Mapping[str, Any]] | None = None,
    base: str | None = None,
    description: str | None = None,
    fallback_without_filter: bool = True,
    filters: Any = None,
) -> Any:
    """A :class:`~llama_index_rag_pack.SelfQueryRetriever` over the pack's ``base`` retriever
    (default: the pack's default mode when it can be filtered, else ``vector``)."""
    from llama_index_rag_pack.self_query.self_query_retriever import SelfQueryRetriever

    config = pack.self_query_config or SelfQueryConfig()
    base = base or config.base or _default_base(pack)
    _check_base(base)
    # the caller's filters sit in the base retriever: the LLM's condition is and-ed with them,
    # and the "matched nothing" retry drops only the LLM's condition
    inner = pack.retriever(base, similarity_top_k=similarity_top_k, **base_scope(pack, filters))
    return SelfQueryRetriever(
        inner,
        llm=pack.llm,
        fields=fields if fields is not None else config.fields,
        description=description or config.description or "text chunks with metadata",
        fallback_without_filter=fallback_without_filter,
        callback_manager=pack.callback_manager,
    )
