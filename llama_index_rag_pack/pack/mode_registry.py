"""The retrieval-mode registry: one table from mode name to :class:`ModeSpec`.

:mod:`llama_index_rag_pack.pack.modes` registers the built-in modes in it (importing the
package root or ``pack.modes`` does); :func:`register_mode` adds yours, and every entry point
(``pack.retriever(mode)``, ``--mode``, ``rag-pack eval``, the query-side modes' ``base=``) reads
it. This module imports nothing of the pack, so every pack module may read the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from llama_index_rag_pack.core.errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever

Builder = Callable[..., "BaseRetriever"]

__all__ = [
    "Builder",
    "ModeSpec",
    "add_built_in",
    "base_modes",
    "get_mode",
    "listed_modes",
    "mode_aliases",
    "mode_names",
    "register_mode",
    "unregister_mode",
]


@dataclass(frozen=True)
class ModeSpec:
    """One retrieval mode.

    Args:
        name: What ``pack.retriever(name)`` and ``--mode name`` accept.
        build: ``build(pack, **kwargs) -> BaseRetriever``.
        description: One line for ``--help`` and evaluation tables.
        needs_llm: The retriever calls the LLM per query.
        needs_tree: The retriever reads a RAPTOR tree built beside the collection
            (``pack.build_raptor_tree()`` builds it).
        needs_sources: Only a pack over several sources (``RoutedRagPack``) has it.
        base: The mode can serve the query-side modes (``hyde``, ``rewrite``, ``self_query``)
            as their search: one search per query, no LLM of its own, and (for self-query) a
            retriever that takes a Milvus filter.
        embeds_query: The mode searches with the query's embedding (``QueryBundle.embedding``),
            so HyDE's hypothetical-answer embedding reaches it (BM25 alone does not).
        aliases: Other names ``rag-pack eval --strategies`` accepts for it (``dense``).
        listed: ``get_modules()`` lists its retriever as ``<name>_retriever``.
    """

    name: str
    build: Builder
    description: str = ""
    needs_llm: bool = False
    needs_tree: bool = False
    needs_sources: bool = False
    base: bool = False
    embeds_query: bool = True
    aliases: tuple[str, ...] = ()
    listed: bool = False


_MODES: dict[str, ModeSpec] = {}
_BUILT_IN: set[str] = set()


def register_mode(
    name: str,
    build: Builder,
    *,
    description: str = "",
    needs_llm: bool = False,
    needs_tree: bool = False,
    needs_sources: bool = False,
    base: bool = False,
    embeds_query: bool = True,
    aliases: tuple[str, ...] = (),
    listed: bool = False,
    replace: bool = False,
) -> ModeSpec:
    """Add a retrieval mode that every entry point then offers.

    Raises:
        ConfigurationError: ``name`` is taken (pass ``replace=True`` to swap the builder) or not
            an identifier.
    """
    if not name.isidentifier():
        raise ConfigurationError(f"Mode name {name!r} must be an identifier, like 'my_mode'.")
    if name in _MODES and not replace:
        raise ConfigurationError(
            f"Retrieval mode {name!r} is already registered; pass replace=True to swap it."
        )
    spec = ModeSpec(
        name,
        build,
        description,
        needs_llm,
        needs_tree,
        needs_sources,
        base,
        embeds_query,
        tuple(aliases),
        listed,
    )
    _MODES[name] = spec
    return spec


def unregister_mode(name: str) -> None:
    """Remove a mode added with :func:`register_mode` (built-in modes stay)."""
    if name in _BUILT_IN:
        raise ConfigurationError(f"{name!r} is a built-in mode and cannot be removed.")
    _MODES.pop(name, None)


def mode_names() -> list[str]:
    """Every registered mode, built-in ones first."""
    return list(_MODES)


def mode_aliases() -> dict[str, str]:
    """Every alias a registered mode declares, with the mode it names."""
    return {alias: name for name, spec in _MODES.items() for alias in spec.aliases}


def listed_modes() -> list[str]:
    """The modes whose retriever ``get_modules()`` lists."""
    return [name for name, spec in _MODES.items() if spec.listed]


def base_modes(*, embeds_query: bool = False) -> list[str]:
    """The modes that can serve ``hyde``/``rewrite``/``self_query`` as their search (with
    ``embeds_query=True``, only those that search with the query's embedding, for HyDE)."""
    return [
        name
        for name, spec in _MODES.items()
        if spec.base and (spec.embeds_query or not embeds_query)
    ]


def get_mode(mode: str | Enum) -> ModeSpec:
    """The spec of ``mode`` (a name or a :class:`RetrievalMode`).

    Raises:
        ConfigurationError: unknown mode; the message lists the valid ones.
    """
    name = mode.value if isinstance(mode, Enum) else mode
    try:
        return _MODES[name]
    except (KeyError, TypeError):
        raise ConfigurationError(
            f"Unknown retrieval mode {mode!r}; valid modes: {', '.join(_MODES)}."
        ) from None


def add_built_in(spec: ModeSpec) -> None:
    """Register one of the package's own modes (which :func:`unregister_mode` keeps)."""
    _MODES[spec.name] = spec
    _BUILT_IN.add(spec.name)
