"""``filters=`` and ``tenant=`` for a pack: compiled once, against the pack's collection, into
the one Milvus expression every mode's builder receives.

``pack.retriever(mode, filters=..., tenant=...)`` resolves both here before the mode's builder
runs: core's ``MetadataFilters`` or an expression string, ``and`` the tenant's scope on a
collection with tenants (:mod:`~llama_index_rag_pack.milvus.tenants`). Builders get one
expression string (so retrievers are cached by it); the RAPTOR builders also get the tenant, whose
tree they open. A mode whose builder takes no ``filters`` argument is refused with a one-line
error rather than searched unscoped.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.milvus_filter import and_expressions
from llama_index_rag_pack.milvus.tenants import ANY_TENANT, tenant_expression
from llama_index_rag_pack.pack.pack_view import PackView

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_rag_pack.milvus.metadata_filters import Filters

__all__ = ["base_scope", "check_builder_filters", "pack_filter_expression", "scoped_kwargs"]


def base_scope(pack: PackView, filters: str | None) -> dict[str, Any]:
    """The arguments a mode passes when it asks ``pack`` for its base retriever: its own
    ``filters`` (already the compiled expression, tenant scope included), and on a pack with
    tenants ``tenant="*"`` so the scope is not asked for twice; on a pack that reranks,
    ``rerank=False``: the mode's own retriever reranks what the base finds, once."""
    scope: dict[str, Any] = {}
    if filters:
        scope["filters"] = filters
    if getattr(pack, "tenant_field", None) is not None:
        scope["tenant"] = ANY_TENANT
    if getattr(getattr(pack, "reranking", None), "default", None) is not None:
        scope["rerank"] = False
    return scope


def scoped_kwargs(pack: PackView, spec: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of ``pack.retriever(spec.name, **kwargs)`` with ``filters`` and ``tenant``
    resolved: one compiled ``filters`` expression (left out when there is none), and ``tenant``
    kept only for the modes that read a per-tenant tree.

    Raises:
        ConfigurationError: bad filters, a missing or unexpected tenant, or a mode whose
            builder takes no ``filters``.
    """
    kwargs = dict(kwargs)
    tenant = kwargs.pop("tenant", None)
    if spec.needs_sources:  # each routed source scopes the search with its own collection
        if tenant is not None:
            kwargs["tenant"] = tenant
        return kwargs
    tenant_field = getattr(pack, "tenant_field", None)
    scope = tenant_expression(tenant_field, tenant)
    expr = and_expressions([pack_filter_expression(pack, kwargs.pop("filters", None)), scope])
    if expr:
        check_builder_filters(spec.name, spec.build)
        kwargs["filters"] = expr
    if spec.needs_tree and tenant_field is not None:
        kwargs["tenant"] = tenant
    return kwargs


def pack_filter_expression(pack: PackView, filters: Filters) -> str:
    """``filters`` as a Milvus expression on ``pack``'s collection (``""`` for none).

    Every search and ``pack.delete`` compiles its filters here, so an expression string is
    always checked first (:func:`~llama_index_rag_pack.milvus.milvus_expr.expression_fields`): a
    malformed one, ``'true) or (true'`` among them, is a one-line :class:`ConfigurationError`
    and never reaches the ``and`` with a tenant's scope.
    """
    # LlamaIndex loads only when a filter is compiled (``rag-pack --help`` reads the modes)
    from llama_index_rag_pack.milvus.metadata_filters import filter_expression

    if filters is None or isinstance(filters, str):
        return filter_expression(filters)
    return filter_expression(filters, schema_fields=pack.schema_fields())


def check_builder_filters(mode: str, build: Any) -> None:
    """Raise :class:`ConfigurationError` when ``build`` takes no ``filters`` argument."""
    params = inspect.signature(build).parameters
    takes = "filters" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    if not takes:
        raise ConfigurationError(
            f"Mode {mode!r} takes no filters: its builder has no filters= argument."
        )
