"""``RoutedRagPack``: one pack over several named sources (Milvus collections), routing between
them.

Each :class:`~llama_index_rag_pack.pack.sources.RouteSource` is a collection with a name, a
description and optionally example questions. ``RagPack.retriever("route")``
(``RetrievalMode.ROUTE``) is a
:class:`~llama_index_rag_pack.routing.router.FusionRouterRetriever` over the sources' own
retrievers, choosing with a :class:`SemanticSelector` (default, no LLM call) or a
:class:`LogicalSelector` (the pack's LLM decides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_selector import BaseSelector
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import Document, NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.core.query_bases import PackRetriever
from llama_index_rag_pack.pack.modes import RetrievalMode
from llama_index_rag_pack.pack.pack_base import RagPackBase
from llama_index_rag_pack.pack.sources import RouteSource, checked_sources, coerce_source
from llama_index_rag_pack.routing.logical_selector import LogicalSelector
from llama_index_rag_pack.routing.router import FusionRouterRetriever
from llama_index_rag_pack.routing.routes import Route, RouteSelection
from llama_index_rag_pack.routing.semantic_selector import (
    DEFAULT_SEMANTIC_THRESHOLD,
    SemanticSelector,
)

__all__ = ["RoutedRagPack"]

SELECTOR_CHOICES = ("semantic", "logical")
PER_SOURCE_ARGUMENTS = ("vector_store", "collection_name", "documents", "input_dir")
"""RagPack arguments that a RoutedRagPack takes per source, never for the whole pack."""


class RoutedRagPack(RagPackBase):
    """A pack over several named sources that routes every question (:class:`RagPack`'s API:
    both share :class:`~llama_index_rag_pack.pack.pack_base.RagPackBase`).

    The first source is also the pack's own collection (other modes such as ``"vector"`` use it);
    ``mode="route"`` — the default of :meth:`run`, :meth:`arun`, :attr:`query_engine` and
    :meth:`make_chat_engine` here —
    picks source(s) per question, fusing several with reciprocal rank fusion.

    Args:
        sources: :class:`RouteSource` objects or dicts (``name``, ``description``, ``utterances``,
            ``collection``, ``documents``, ``input_dir``, ``threshold``, ``mode``).
        selector: ``"semantic"`` (default, no LLM call), ``"logical"`` (the pack's LLM), or any
            LlamaIndex ``BaseSelector``.
        fallback: RouteSource used when no route fits (default: none, the answer then has no
            context).
        top_k_routes: Most sources searched per question.
        threshold: Default semantic threshold.
        **kwargs: Passed to :class:`RagPack` (``uri``, ``embed_model``, ``llm``,
            ``similarity_top_k``, ...).

    Example:
        >>> pack = RoutedRagPack(  # doctest: +SKIP
        ...     [RouteSource("physics", "Physics articles", documents=physics_docs),
        ...      RouteSource("history", "History articles", documents=history_docs)],
        ...     uri="./routed.db",
        ... )
        >>> response = pack.run("Who crossed the Rubicon?")  # doctest: +SKIP
        >>> response.source_nodes[0].metadata["route"]  # doctest: +SKIP
        'history'
    """

    def __init__(
        self,
        sources: Sequence[RouteSource | Mapping[str, Any]],
        *,
        selector: str | BaseSelector = "semantic",
        fallback: str | None = None,
        top_k_routes: int = 1,
        threshold: float = DEFAULT_SEMANTIC_THRESHOLD,
        **kwargs: Any,
    ) -> None:
        srcs = checked_sources(sources)
        _check_routing_options(srcs, kwargs, selector, fallback, top_k_routes)
        self.sources: dict[str, RouteSource] = {s.name: s for s in srcs}
        self.fallback = fallback
        self.top_k_routes = top_k_routes
        self.route_threshold = threshold
        self._selector_spec = selector
        self._selector: BaseSelector | None = (
            selector if isinstance(selector, BaseSelector) else None
        )
        first = srcs[0]
        super().__init__(
            documents=first.documents,
            input_dir=first.input_dir,
            collection_name=first.collection,
            **kwargs,
        )
        self.source_packs: dict[str, RagPackBase] = {first.name: self}
        shared = {k: v for k, v in kwargs.items() if k not in ("embed_model", "uri")}
        for src in srcs[1:]:
            self.source_packs[src.name] = RagPackBase(
                documents=src.documents,
                input_dir=src.input_dir,
                collection_name=src.collection,
                uri=self.uri,
                embed_model=self.embed_model,
                **shared,
            )

    @classmethod
    def open_sources(
        cls, sources: Sequence[RouteSource | Mapping[str, Any]], **kwargs: Any
    ) -> RoutedRagPack:
        """Reopen existing collections (documents are never indexed)."""
        cleaned = []
        for s in sources:
            src = coerce_source(s)
            if src.documents is not None or src.input_dir is not None:
                raise ConfigurationError(
                    f"open_sources reopens collections; source {src.name!r} has documents."
                )
            cleaned.append(src)
        return cls(cleaned, **kwargs)

    @property
    def routes(self) -> list[Route]:
        """The sources as routes."""
        return [s.route() for s in self.sources.values()]

    @property
    def selector(self) -> BaseSelector:
        """The selector, built on first use (a logical one resolves the LLM then)."""
        if self._selector is None:
            if self._selector_spec == "logical":
                self._selector = LogicalSelector(
                    self.llm, fallback=self.fallback, max_outputs=self.top_k_routes
                )
            else:
                self._selector = SemanticSelector(
                    self.routes,
                    embed_model=self.embed_model,
                    threshold=self.route_threshold,
                    top_k=self.top_k_routes,
                    fallback=self.fallback,
                )
        return self._selector

    def save_router(self, path: str | Path) -> Path:
        """Save the semantic selector (routes, thresholds fitted or given, route vectors) to
        ``path``; :meth:`load_router` or ``rag-pack ... --router FILE`` read it back."""
        selector = self.selector
        if not isinstance(selector, SemanticSelector):
            raise ConfigurationError(
                f"Only a semantic router can be saved; this pack routes with "
                f"{type(selector).__name__}."
            )
        return selector.save(path)

    def load_router(self, path: str | Path, *, reembed: bool = False) -> SemanticSelector:
        """Route with the selector saved in ``path`` (its routes are not embedded again).

        Raises:
            ConfigurationError: an unreadable file, another embedding model (without
                ``reembed``), or routes that are not this pack's sources.
        """
        selector = SemanticSelector.load(path, embed_model=self.embed_model, reembed=reembed)
        saved, ours = sorted(r.name for r in selector.routes), sorted(self.sources)
        if saved != ours:
            raise ConfigurationError(
                f"{path} routes to {saved}, but this pack's sources are {ours}."
            )
        self._selector = selector
        self.forget_engines()
        return selector

    def insert_into(self, source: str, documents: Sequence[Document]) -> int:
        """Index ``documents`` into the named source's collection."""
        if source not in self.source_packs:
            raise ConfigurationError(
                f"Unknown source {source!r}; sources: {list(self.source_packs)}."
            )
        n = self.source_packs[source].insert(documents)
        self.forget_engines()
        return n

    def count_by_source(self) -> dict[str, int]:
        """Chunks stored per source."""
        return {name: pack.count() for name, pack in self.source_packs.items()}

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info["vector_store"] = (
            f"{len(self.sources)} Milvus collections "
            + ", ".join(f"{n}={s.collection!r}" for n, s in self.sources.items())
            + (f" at {self.uri}" if self.uri else "")
        )
        info["router"] = (
            type(self.selector).__name__ if self._selector is not None else str(self._selector_spec)
        )
        return info

    def get_modules(self) -> dict[str, Any]:
        modules = super().get_modules()
        modules["selector"] = self.selector
        modules["router_retriever"] = self.retriever(RetrievalMode.ROUTE)
        modules["source_packs"] = dict(self.source_packs)
        modules["query_engine"] = self.make_query_engine(RetrievalMode.ROUTE)
        return modules

    @property
    def query_engine(self) -> Any:
        return self.make_query_engine(RetrievalMode.ROUTE)

    def make_chat_engine(self, mode: Any = None, **options: Any) -> Any:
        """A :class:`~llama_index_rag_pack.CitedChatEngine` that routes every condensed
        question (``mode`` default ``"route"``); ``options`` as for :class:`RagPack`."""
        return super().make_chat_engine(RetrievalMode.ROUTE if mode is None else mode, **options)

    def make_selected_query_engine(
        self,
        selection: RouteSelection,
        *,
        filters: Any = None,
        tenant: str | None = None,
        **options: Any,
    ) -> BaseQueryEngine:
        """Like ``make_query_engine("route", ...)``, but answering from the routes of a
        ``selection`` already made (e.g. shown to the user first, as ``rag-pack ask --route``
        does), so the question is not routed a second time. Not cached. ``options`` are
        ``make_query_engine``'s (``streaming``, ``citations``, ``citation_style``,
        ``citation_mode``), given to the same engine factory (:meth:`engine_for`).

        Example:
            >>> router = pack.retriever("route")  # doctest: +SKIP
            >>> selection = router.select("Why does bread dough rise?")  # doctest: +SKIP
            >>> pack.make_selected_query_engine(selection).query(  # doctest: +SKIP
            ...     "Why does bread dough rise?")
        """
        scope = {k: v for k, v in (("filters", filters), ("tenant", tenant)) if v is not None}
        retriever = _SelectedRoutesRetriever(
            self.retriever(RetrievalMode.ROUTE, **scope),
            selection,
            callback_manager=self.callback_manager,
        )
        return self.engine_for(retriever, **options)

    def run(
        self, query: str, *, mode: str | RetrievalMode = RetrievalMode.ROUTE, **kwargs: Any
    ) -> Any:
        return super().run(query, mode=mode, **kwargs)

    async def arun(
        self, query: str, *, mode: str | RetrievalMode = RetrievalMode.ROUTE, **kwargs: Any
    ) -> Any:
        return await super().arun(query, mode=mode, **kwargs)


class _SelectedRoutesRetriever(PackRetriever):
    """Retrieves from the routes of a fixed :class:`RouteSelection` of a router (sync and async).

    Args:
        router: The pack's route retriever.
        selection: The routing decision to reuse for every query.
        callback_manager: LlamaIndex callbacks.
    """

    def __init__(
        self,
        router: FusionRouterRetriever,
        selection: RouteSelection,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        super().__init__(callback_manager=callback_manager)
        self._router = router
        self._selection = selection

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        return self._router.retrieve_selected(query_bundle, self._selection)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        return await self._router.aretrieve_selected(query_bundle, self._selection)


def _check_routing_options(
    sources: Sequence[RouteSource],
    pack_kwargs: Mapping[str, Any],
    selector: Any,
    fallback: str | None,
    top_k_routes: Any,
) -> None:
    """Raise :class:`ConfigurationError` for a routing option that cannot work with ``sources``."""
    for bad in PER_SOURCE_ARGUMENTS:
        if bad in pack_kwargs:
            raise ConfigurationError(
                f"RoutedRagPack takes {bad!r} per source (RouteSource(...)), not for the pack."
            )
    names = [s.name for s in sources]
    if fallback is not None and fallback not in names:
        raise ConfigurationError(f"Fallback source {fallback!r} is not among the sources {names}.")
    if isinstance(selector, str) and selector not in SELECTOR_CHOICES:
        raise ConfigurationError(
            f"Unknown selector {selector!r}; valid: {', '.join(SELECTOR_CHOICES)} "
            "or a BaseSelector."
        )
    if not isinstance(selector, (str, BaseSelector)):
        raise ConfigurationError(
            f"selector must be a name or a BaseSelector, got {type(selector).__name__}."
        )
    check_count("top_k_routes", top_k_routes)
