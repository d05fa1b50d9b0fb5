"""Which retrieval strategies ``rag-pack eval`` can compare, and what each one needs.

A :class:`Strategy` is a named way to get a retriever from a :class:`~llama_index_rag_pack.RagPack`:
a :class:`~llama_index_rag_pack.RetrievalMode` plus keyword arguments for
``RagPack.retriever(mode, **kwargs)``. Every mode of ``RetrievalMode`` is a strategy of the same
name; :func:`register_strategy` adds variants (``hybrid`` with another ranker, ``fusion`` with
more queries, ...). Requirements (an LLM, a RAPTOR tree) are declared per mode so ``all`` can
skip, with a note, what cannot run here.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.pack.mode_registry import mode_aliases
from llama_index_rag_pack.pack.modes import get_mode
from llama_index_rag_pack.pack.modes import mode_names as registered_modes

logger = logging.getLogger(__name__)

# Mode requirements come from the registry (llama_index_rag_pack.pack.modes): ``needs_llm``
# (the retriever calls an LLM per query, so its numbers depend on the LLM in use) and
# ``needs_tree`` (a RAPTOR tree must be built over the corpus first).


@dataclass(frozen=True)
class Strategy:
    """A named retrieval configuration to evaluate.

    Args:
        name: Name in tables and on the command line.
        mode: A ``RetrievalMode`` value.
        kwargs: Keyword arguments for ``RagPack.retriever(mode, **kwargs)``.
        needs_llm: The retriever calls an LLM per query.
        needs_tree: The retriever needs a RAPTOR tree over the corpus.
        description: One line for the table.

    Example:
        >>> s = Strategy("hybrid_k20", "hybrid", {"rrf_k": 20}, description="hybrid, RRF k=20")
        >>> s.config_key()[:8] == Strategy("hybrid_k20", "hybrid", {"rrf_k": 20}).config_key()[:8]
        True
    """

    name: str
    mode: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    needs_llm: bool = False
    needs_tree: bool = False
    description: str = ""

    def config_key(self) -> str:
        """Hash of what defines this strategy (mode and arguments; not its description)."""
        blob = json.dumps(
            {"mode": self.mode, "kwargs": dict(self.kwargs)}, sort_keys=True, default=repr
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_REGISTRY: dict[str, Strategy] = {}


def register_strategy(
    name: str,
    mode: str,
    *,
    needs_llm: bool | None = None,
    needs_tree: bool | None = None,
    description: str = "",
    **kwargs: Any,
) -> Strategy:
    """Add (or replace) a named strategy, e.g. a mode with non-default arguments.

    Raises:
        ConfigurationError: ``mode`` is not a ``RetrievalMode`` value.
    """
    modes = mode_names()
    if mode not in modes:
        raise ConfigurationError(
            f"Unknown retrieval mode {mode!r} for strategy {name!r}; "
            f"valid modes: {', '.join(modes)}."
        )
    strategy = Strategy(
        name=name,
        mode=mode,
        kwargs=dict(kwargs),
        needs_llm=get_mode(mode).needs_llm if needs_llm is None else needs_llm,
        needs_tree=get_mode(mode).needs_tree if needs_tree is None else needs_tree,
        description=description,
    )
    _REGISTRY[name] = strategy
    return strategy


def mode_names() -> list[str]:
    """Every retrieval mode registered now (built-in ones and those added with
    ``register_mode``)."""
    return registered_modes()


def available_strategies() -> dict[str, Strategy]:
    """One strategy per ``RetrievalMode`` member, then the registered variants."""
    out = {}
    for m in mode_names():
        spec = get_mode(m)
        out[m] = Strategy(
            name=m,
            mode=m,
            needs_llm=spec.needs_llm,
            needs_tree=spec.needs_tree,
            description=spec.description,
        )
    out.update(_REGISTRY)
    return out


def resolve_strategies(spec: str | Iterable[str]) -> list[Strategy]:
    """Strategies named by ``spec``: ``"all"`` or a comma-separated list (aliases: dense, sparse).

    Raises:
        ConfigurationError: an unknown name (the message lists the valid ones) or an empty list.
    """
    known = available_strategies()
    names = [
        s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()
    ]
    if not names:
        raise ConfigurationError(f"No strategies named; use 'all' or some of: {', '.join(known)}.")
    if names == ["all"]:
        return list(known.values())
    out: list[Strategy] = []
    for raw in names:
        aliases = mode_aliases()
        name = raw if raw in known else aliases.get(raw, raw)
        if name not in known:
            raise ConfigurationError(
                f"Unknown strategy {raw!r}; valid: all, {', '.join(known)} (aliases: "
                f"{', '.join(f'{a}={b}' for a, b in aliases.items())})."
            )
        if known[name] not in out:
            out.append(known[name])
    return out


def reranked_strategies(strategies: Iterable[Strategy], rerank: str) -> list[Strategy]:
    """Each strategy followed by its twin ``NAME+rerank``: the same retriever, its candidates
    reranked by ``rerank`` (a rerank endpoint's URL or ``local:DIR``; docs/rerank.md), so the
    table shows what the second stage adds to each.

    Example:
        >>> twins = reranked_strategies([Strategy("bm25", "bm25")], "http://127.0.0.1:8080")
        >>> [(s.name, dict(s.kwargs)) for s in twins]
        [('bm25', {}), ('bm25+rerank', {'rerank': 'http://127.0.0.1:8080'})]
    """
    out: list[Strategy] = []
    for strategy in strategies:
        out.append(strategy)
        out.append(
            Strategy(
                name=f"{strategy.name}+rerank",
                mode=strategy.mode,
                kwargs={**dict(strategy.kwargs), "rerank": rerank},
                needs_llm=strategy.needs_llm,
                needs_tree=strategy.needs_tree,
                description=f"{strategy.description or strategy.mode}, reranked",
            )
        )
    return out


def code_fingerprint(*objects: Any) -> str:
    """Hash of the source code behind ``objects`` (classes, functions, or instances' classes).

    For a class, every class of its MRO defined in this package counts, so editing a base class
    invalidates cached results too. Objects whose source cannot be read contribute their name.
    """
    h = hashlib.sha256()
    seen: set[Any] = set()
    for obj in objects:
        targets: list[Any]
        if inspect.isclass(obj):
            targets = [
                c for c in obj.__mro__ if c.__module__.startswith("llama_index_rag_pack")
            ] or [obj]
        elif inspect.isfunction(obj) or inspect.ismethod(obj):
            targets = [obj]
        elif obj is None:
            continue
        else:
            cls = type(obj)
            targets = [
                c for c in cls.__mro__ if c.__module__.startswith("llama_index_rag_pack")
            ] or [cls]
        for target in targets:
            if target in seen:
                continue
            seen.add(target)
            try:
                h.update(inspect.getsource(target).encode())
            except (OSError, TypeError):
                h.update(
                    (
                        f"{getattr(target, '__module__', '')}."
                        f"{getattr(target, '__qualname__', target)}"
                    ).encode()
                )
    return h.hexdigest()[:16]


def retriever_builder(mode: str) -> Callable[..., Any]:
    """The registered builder of ``mode`` (its code is part of the cache key)."""
    return get_mode(mode).build


__all__ = [
    "Strategy",
    "available_strategies",
    "code_fingerprint",
    "mode_names",
    "register_strategy",
    "reranked_strategies",
    "resolve_strategies",
    "retriever_builder",
]
