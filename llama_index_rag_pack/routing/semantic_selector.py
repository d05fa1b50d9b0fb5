"""``SemanticSelector``: route by cosine similarity between the query and route texts; no LLM.

A LlamaIndex ``BaseSelector``, so core ``RouterQueryEngine`` and ``RouterRetriever`` accept it; it
returns a :class:`~llama_index_rag_pack.routing.routes.RouteSelection`. A query that reaches no
route's threshold goes to the configured fallback route or to "no route", never to a guess.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.base.base_selector import BaseSelector, SingleSelection
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.models.settings import resolve_embed_model
from llama_index_rag_pack.routing import route_scores
from llama_index_rag_pack.routing.route_embeddings import RouteEmbeddings
from llama_index_rag_pack.routing.route_scores import Aggregation
from llama_index_rag_pack.routing.routes import (
    Route,
    RouteSelection,
    ThresholdReport,
    check_unique_names,
    fallback_index,
    route_names,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_SEMANTIC_THRESHOLD", "SemanticSelector", "ThresholdReport"]

DEFAULT_SEMANTIC_THRESHOLD = 0.2
"""Cosine score a route must reach when no threshold was given or fitted.

A starting point on the all-MiniLM-L6-v2 scale: on the routing benchmark (routes with example
utterances) the robust ``fit_thresholds`` keeps it, as cross-validation finds nothing better;
calibrate with ``fit_thresholds`` for your routes.
"""


class SemanticSelector(BaseSelector):
    """Pick routes by cosine similarity between the query and route texts; no LLM call.

    Every route's description and example utterances are embedded once and cached by text (a
    route whose texts change is re-embedded, nothing else is). Per query: one query embedding,
    one matrix-vector product. A route is a candidate when its score (``max`` or ``mean`` over its
    texts) reaches its threshold; the best ``top_k`` candidates are selected. When none reaches
    its threshold the ``fallback`` route is selected, or nothing ("none": an empty selection).

    Routes come from ``routes=`` and/or from the choices core routers pass to ``select``: a
    choice whose name matches a configured route uses that route's texts and threshold, any other
    choice is routed on its description.

    Args:
        routes: Configured routes (``Route`` objects or dicts with
            name/description/utterances/threshold).
        embed_model: LlamaIndex embedding model (default: resolved by
            :func:`~llama_index_rag_pack.models.settings.resolve_embed_model`).
        threshold: Default cosine threshold for routes without their own.
        top_k: Most routes selected per query (1 = single routing).
        aggregation: ``"max"`` or ``"mean"`` over a route's texts.
        fallback: Route name selected when no route reaches its threshold.
        use_descriptions: Embed descriptions beside utterances (descriptions are always used for
            routes without utterances).

    Example:
        >>> selector = SemanticSelector(
        ...     [Route("physics", "Physics questions", ("What is a black hole?",)),
        ...      Route("math", "Mathematics questions", ("Prove that sqrt(2) is irrational",))],
        ...     threshold=0.2,
        ... )  # doctest: +SKIP
        >>> selector.route("How fast does light travel?").names  # doctest: +SKIP
        ['physics']
    """

    def __init__(
        self,
        routes: Iterable[Route | Mapping[str, Any]] | None = None,
        *,
        embed_model: BaseEmbedding | str | None = None,
        threshold: float = DEFAULT_SEMANTIC_THRESHOLD,
        top_k: int = 1,
        aggregation: str | Aggregation = Aggregation.MAX,
        fallback: str | None = None,
        use_descriptions: bool = True,
    ) -> None:
        if not -1.0 <= float(threshold) <= 1.0:
            raise ConfigurationError(
                f"threshold must be a cosine score in [-1, 1], got {threshold!r}."
            )
        check_count("top_k", top_k)
        self._routes: dict[str, Route] = {}
        if routes is not None:
            coerced = [Route.coerce(r) for r in routes]
            if not coerced:
                raise ConfigurationError(
                    "routes is empty: give at least one route, or routes=None."
                )
            check_unique_names([r.name for r in coerced])
            self._routes = {r.name: r for r in coerced}
        if fallback is not None and self._routes and fallback not in self._routes:
            raise ConfigurationError(
                f"Fallback route {fallback!r} is not among the routes {list(self._routes)}."
            )
        self.embed_model = resolve_embed_model(embed_model)
        self.threshold = float(threshold)
        self.top_k = top_k
        self.aggregation = Aggregation.parse(aggregation)
        self.fallback = fallback
        self._fitted: dict[str, float] = {}
        self._embeddings = RouteEmbeddings(self.embed_model, use_descriptions=use_descriptions)

    @classmethod
    def from_defaults(
        cls,
        embed_model: BaseEmbedding | None = None,
        routes: Iterable[Route | Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> SemanticSelector:
        """Build like core's ``EmbeddingSingleSelector.from_defaults``; ``options`` are the
        constructor's (``threshold``, ``top_k``, ``aggregation``, ``fallback``,
        ``use_descriptions``).

        ``embed_model=None`` uses LlamaIndex's ``Settings.embed_model`` when one was set,
        otherwise the pack's default (see
        :func:`~llama_index_rag_pack.models.settings.resolve_embed_model`).

        Example:
            >>> from llama_index.core.embeddings import MockEmbedding
            >>> SemanticSelector.from_defaults(MockEmbedding(embed_dim=8)).top_k
            1
        """
        return cls(routes, embed_model=embed_model, **options)

    # ------------------------------------------------------------------ configuration
    @property
    def routes(self) -> list[Route]:
        """The configured routes."""
        return list(self._routes.values())

    def set_routes(self, routes: Iterable[Route | Mapping[str, Any]]) -> None:
        """Replace the configured routes (texts already embedded stay cached)."""
        coerced = [Route.coerce(r) for r in routes]
        if not coerced:
            raise ConfigurationError("No routes given: give at least one route.")
        check_unique_names([r.name for r in coerced])
        self._routes = {r.name: r for r in coerced}
        self._fitted = {k: v for k, v in self._fitted.items() if k in self._routes}

    @property
    def use_descriptions(self) -> bool:
        """Whether descriptions are embedded beside utterances."""
        return self._embeddings.use_descriptions

    @use_descriptions.setter
    def use_descriptions(self, value: bool) -> None:
        self._embeddings.use_descriptions = value

    @property
    def text_embedding_count(self) -> int:
        """How many route texts were embedded so far (the cache makes this stop growing)."""
        return self._embeddings.text_embedding_count

    @property
    def thresholds(self) -> dict[str, float]:
        """Threshold in force per configured route (own > fitted > default)."""
        return {name: self._threshold_for(route) for name, route in self._routes.items()}

    def _threshold_for(self, route: Route) -> float:
        if route.threshold is not None:
            return float(route.threshold)
        return self._fitted.get(route.name, self.threshold)

    @property
    def fitted_thresholds(self) -> dict[str, float]:
        """The thresholds :meth:`fit_thresholds` found (routes without their own)."""
        return dict(self._fitted)

    def route_vectors(self) -> dict[str, np.ndarray]:
        """The unit vector of every configured route text (embedding the missing ones)."""
        self._embeddings.ensure(self.routes)
        return self._embeddings.vectors(self.routes)

    def restore(self, vectors: Mapping[str, Any], fitted: Mapping[str, float]) -> None:
        """Take saved route-text vectors and fitted thresholds (:meth:`load`)."""
        self._embeddings.restore(vectors)
        self.set_fitted(fitted)

    def save(self, path: str | Path) -> Path:
        """Write the routes, thresholds, settings and route vectors to ``path`` (JSON)."""
        from llama_index_rag_pack.routing.router_store import save_selector

        return save_selector(self, path)

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> SemanticSelector:
        """A selector saved by :meth:`save`, its routes not embedded again; ``embed_model=``,
        ``reembed=`` (:func:`~llama_index_rag_pack.routing.router_store.read_router`)."""
        from llama_index_rag_pack.routing.router_store import read_router

        saved = read_router(path, **kwargs)
        selector = cls(saved.routes, embed_model=saved.embed_model, **saved.settings)
        if saved.vectors is not None:
            selector.restore(saved.vectors, saved.fitted)
        return selector

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        """No prompts: routing is done by embeddings."""

    # ------------------------------------------------------------------ decisions
    def _routes_for(self, choices: Sequence[ToolMetadata]) -> list[Route]:
        routes = []
        for name, choice in zip(route_names(choices), choices, strict=True):
            if name in self._routes:
                routes.append(self._routes[name])
            elif choice.description and choice.description.strip():
                routes.append(Route(name=name, description=choice.description))
            else:
                raise ConfigurationError(
                    f"Choice {name!r} has no description and is not a configured route: "
                    "describe it."
                )
        return routes

    def configured_routes(self) -> list[Route]:
        """The configured routes; ``ConfigurationError`` when there are none."""
        if not self._routes:
            raise ConfigurationError(
                "This SemanticSelector has no routes of its own: pass routes=[...] to route() or "
                "fit_thresholds(), or use it through select(choices, query)."
            )
        return self.routes

    def scores(
        self, query_embedding: Sequence[float], routes: Sequence[Route] | None = None
    ) -> dict[str, float]:
        """Score of every route for an already embedded query."""
        routes = list(routes) if routes is not None else self.configured_routes()
        self._embeddings.ensure(routes)
        values = self._embeddings.scores(query_embedding, routes, self.aggregation)
        return dict(zip([r.name for r in routes], values.tolist(), strict=True))

    def _decide(self, query_embedding: Sequence[float], routes: Sequence[Route]) -> RouteSelection:
        names = [r.name for r in routes]
        fallback = fallback_index(self.fallback, names)
        scores = self._embeddings.scores(query_embedding, routes, self.aggregation)
        thresholds = np.asarray([self._threshold_for(r) for r in routes])
        chosen = route_scores.decide(scores, thresholds, self.top_k)
        score_map = {n: round(float(s), 4) for n, s in zip(names, scores, strict=True)}
        how = f"{self.aggregation.value} cosine"
        if chosen:
            sels = [
                SingleSelection(
                    index=i, reason=f"{how} {scores[i]:.3f} >= threshold {thresholds[i]:.3f}"
                )
                for i in chosen
            ]
            return RouteSelection(
                selections=sels, names=[names[i] for i in chosen], scores=score_map
            )
        best = int(np.argmax(scores))
        below = f"best {names[best]!r} {how} {scores[best]:.3f} < threshold {thresholds[best]:.3f}"
        if fallback is not None:
            reason = f"no route reached its threshold ({below}); fallback route"
            return RouteSelection(
                selections=[SingleSelection(index=fallback, reason=reason)],
                names=[names[fallback]],
                scores=score_map,
                fallback=True,
            )
        return RouteSelection(
            selections=[],
            names=[],
            scores=score_map,
            reply=f"no route reached its threshold ({below})",
        )

    def _select(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> RouteSelection:
        routes = self._routes_for(choices)
        self._embeddings.ensure(routes)
        embedding = query.embedding or self.embed_model.get_query_embedding(query.query_str)
        return self._decide(embedding, routes)

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> RouteSelection:
        routes = self._routes_for(choices)
        await self._embeddings.aensure(routes)
        embedding = query.embedding or await self.embed_model.aget_query_embedding(query.query_str)
        return self._decide(embedding, routes)

    def _choices(self) -> list[ToolMetadata]:
        return [
            ToolMetadata(name=r.name, description=r.description or r.utterances[0])
            for r in self.configured_routes()
        ]

    def route(self, query: str | QueryBundle) -> RouteSelection:
        """Select among the configured routes."""
        return self.select(self._choices(), query)

    async def aroute(self, query: str | QueryBundle) -> RouteSelection:
        """Async :meth:`route`."""
        return await self.aselect(self._choices(), query)

    # ------------------------------------------------------------------ calibration
    def fit_thresholds(
        self, labelled_queries: Iterable[route_scores.LabelledQuery], **options: Any
    ) -> ThresholdReport:
        """Calibrate per-route thresholds on labelled queries; ``options``: ``method``
        (``"robust"`` default, ``"exact"``), ``objective``, ``shrinkage``, ``n_folds``,
        ``random_state``, ``max_passes``; see
        :func:`~llama_index_rag_pack.routing.route_calibration.fit_selector_thresholds`.

        Raises:
            ConfigurationError: no examples, a label that names no configured route, or an
                unknown method or objective.
        """
        from llama_index_rag_pack.routing.route_calibration import fit_selector_thresholds

        return fit_selector_thresholds(self, labelled_queries, **options)

    def route_scores(self, queries: Sequence[str]) -> tuple[list[Route], np.ndarray]:
        """The configured routes and each query's score for each (one row per query)."""
        routes = self.configured_routes()
        self._embeddings.ensure(routes)
        vectors = self._embeddings.embed_queries(queries)
        matrix = np.vstack([self._embeddings.scores(v, routes, self.aggregation) for v in vectors])
        return routes, matrix

    def threshold_for(self, route: Route) -> float:
        """The threshold in force for ``route`` (own > fitted > default)."""
        return self._threshold_for(route)

    def set_fitted(self, fitted: Mapping[str, float]) -> None:
        """Thresholds found by a fit, for the configured routes without their own."""
        self._fitted = {k: float(v) for k, v in fitted.items() if k in self._routes}
