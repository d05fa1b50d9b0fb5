"""``FusionRouterRetriever``: route a query to one or several retrievers and fuse their results.

Core ``RouterRetriever`` merges the results of several selected retrievers by node id, in
whatever order they come (the last retriever's copy wins; scores from different retrievers are
compared as if they were on one scale). Here several routes are fused with weighted reciprocal
rank fusion, searched concurrently in the async path, and every returned node says which route(s)
it came from and why (``route``, ``routes``, ``route_reason`` in its metadata, hidden from the LLM
and the embedder).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.async_utils import run_jobs
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.base_selector import BaseSelector, MultiSelection
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools import RetrieverTool
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.node_tags import annotate_node
from llama_index_rag_pack.core.query_bases import PackRetriever
from llama_index_rag_pack.routing.routes import RouteSelection, route_names

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

__all__ = ["ROUTE_METADATA_KEYS", "FusionRouterRetriever"]

ROUTE_METADATA_KEYS = ("route", "routes", "route_reason")
"""Node metadata keys this retriever sets (excluded from LLM and embedding text)."""


class FusionRouterRetriever(PackRetriever):
    """Select route(s) with any ``BaseSelector`` and retrieve from them; several are rank-fused.

    Args:
        retriever_tools: One ``RetrieverTool`` per route; its ``metadata.name`` is the route name
            and its description is what selectors see.
        selector: Any LlamaIndex selector (``SemanticSelector``, ``LogicalSelector``, core ones).
        fusion_k: The ``k`` of reciprocal rank fusion.
        route_weights: Optional weight per route name in the fusion (default 1 each).
        top_n: Keep the best ``top_n`` fused nodes (default: all).
        max_concurrency: Most retrievers searched at once in the async path.
        callback_manager: Passed to ``BaseRetriever``.

    Example:
        >>> router = FusionRouterRetriever.from_retrievers(  # doctest: +SKIP
        ...     {"physics": physics_index.as_retriever(), "math": math_index.as_retriever()},
        ...     descriptions={"physics": "Physics papers", "math": "Mathematics papers"},
        ...     selector=SemanticSelector(top_k=2),
        ... )
        >>> for n in router.retrieve("What is the energy of a photon?"):  # doctest: +SKIP
        ...     print(n.metadata["route"], n.score)
    """

    def __init__(
        self,
        retriever_tools: Sequence[RetrieverTool],
        *,
        selector: BaseSelector,
        fusion_k: float = 60.0,
        route_weights: Mapping[str, float] | None = None,
        top_n: int | None = None,
        max_concurrency: int = 4,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(selector, BaseSelector):
            raise ConfigurationError(
                f"selector must be a LlamaIndex BaseSelector, got {type(selector).__name__}."
            )
        self._metadatas: list[ToolMetadata] = [t.metadata for t in retriever_tools]
        self._names = route_names(self._metadatas)  # raises on no routes / duplicate names
        self._retrievers: list[BaseRetriever] = [t.retriever for t in retriever_tools]
        if fusion_k < 0:
            raise ConfigurationError(f"fusion_k must be >= 0, got {fusion_k}.")
        if top_n is not None and top_n < 1:
            raise ConfigurationError(f"top_n must be >= 1 or None, got {top_n}.")
        if max_concurrency < 1:
            raise ConfigurationError(f"max_concurrency must be >= 1, got {max_concurrency}.")
        weights = dict(route_weights or {})
        unknown = sorted(set(weights) - set(self._names))
        if unknown:
            raise ConfigurationError(
                f"route_weights names unknown route(s) {unknown}; routes: {self._names}."
            )
        self._selector = selector
        self._weights = weights
        self.fusion_k = float(fusion_k)
        self.top_n = top_n
        self.max_concurrency = max_concurrency
        super().__init__(callback_manager=callback_manager or CallbackManager([]), verbose=verbose)

    @classmethod
    def from_retrievers(
        cls,
        retrievers: Mapping[str, BaseRetriever],
        *,
        descriptions: Mapping[str, str],
        selector: BaseSelector,
        **kwargs: Any,
    ) -> FusionRouterRetriever:
        """Build from ``{name: retriever}`` and ``{name: description}``."""
        missing = sorted(set(retrievers) - set(descriptions))
        if missing:
            raise ConfigurationError(
                f"No description for route(s) {missing}: describe every route."
            )
        tools = [
            RetrieverTool(
                retriever=r, metadata=ToolMetadata(name=name, description=descriptions[name])
            )
            for name, r in retrievers.items()
        ]
        return cls(tools, selector=selector, **kwargs)

    @property
    def route_names(self) -> list[str]:
        return list(self._names)

    @property
    def selector(self) -> BaseSelector:
        return self._selector

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"selector": self._selector}

    # ------------------------------------------------------------------ selection
    def _as_route_selection(self, result: MultiSelection) -> RouteSelection:
        for i in result.inds:
            if not 0 <= i < len(self._names):
                raise ConfigurationError(
                    f"The selector returned route index {i}, "
                    f"but there are {len(self._names)} routes."
                )
        if isinstance(result, RouteSelection):
            return result
        return RouteSelection(
            selections=list(result.selections), names=[self._names[i] for i in result.inds]
        )

    @dispatcher.span
    def select(self, query: str | QueryBundle) -> RouteSelection:
        """Only the routing decision (no retrieval)."""
        return self._as_route_selection(self._selector.select(self._metadatas, query))

    @dispatcher.span
    async def aselect(self, query: str | QueryBundle) -> RouteSelection:
        """Async :meth:`select`."""
        return self._as_route_selection(await self._selector.aselect(self._metadatas, query))

    # ------------------------------------------------------------------ retrieval
    def retrieve_selected(
        self, query: str | QueryBundle, selection: RouteSelection
    ) -> list[NodeWithScore]:
        """Retrieve from the routes of an existing ``selection`` (e.g. one already shown to a
        user)."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        lists = [self._retrievers[i].retrieve(bundle) for i in selection.inds]
        return self.fuse_routes(selection, lists)

    async def aretrieve_selected(
        self, query: str | QueryBundle, selection: RouteSelection
    ) -> list[NodeWithScore]:
        """Async :meth:`retrieve_selected`: the selected retrievers are searched concurrently."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        searches = [self._retrievers[i].aretrieve(bundle) for i in selection.inds]
        lists = await run_jobs(searches, workers=self.max_concurrency)
        return self.fuse_routes(selection, list(lists))

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        selection = self.select(query_bundle)
        self._log(selection)
        return self.retrieve_selected(query_bundle, selection)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        selection = await self.aselect(query_bundle)
        self._log(selection)
        return await self.aretrieve_selected(query_bundle, selection)

    def _log(self, selection: RouteSelection) -> None:
        logger.info("Routing: %s", selection.explain())

    @dispatcher.span
    def fuse_routes(
        self, selection: RouteSelection, lists: list[list[NodeWithScore]]
    ) -> list[NodeWithScore]:
        """The selected routes' results fused by reciprocal rank (one route: its own order),
        each node tagged with the routes that found it."""
        names = [self._names[i] for i in selection.inds]
        reasons = dict(zip(names, selection.reasons, strict=True))
        if not lists:
            return []
        if len(lists) == 1:
            fused = [n.model_copy() for n in lists[0]]
            if self.top_n is not None:
                fused = fused[: self.top_n]
        else:
            from llama_index_rag_pack.fusion.rank_fusion import reciprocal_rank_fusion

            weights = [self._weights.get(n, 1.0) for n in names]
            fused = reciprocal_rank_fusion(
                lists, k=self.fusion_k, weights=weights, top_n=self.top_n
            )
        found_in: dict[str, list[str]] = {}
        for name, results in zip(names, lists, strict=True):
            for n in results:
                routes = found_in.setdefault(n.node.node_id, [])
                if name not in routes:
                    routes.append(name)
        out = []
        for item in fused:
            routes = found_in.get(item.node.node_id, names[:1])
            extra = {
                "route": routes[0],
                "routes": list(routes),
                "route_reason": reasons.get(routes[0], ""),
            }
            out.append(annotate_node(NodeWithScore(node=item.node, score=item.score), extra))
        return out
