"""``SemanticSelector``: route by cosine similarity between the query and route texts; no LLM.

A LlamaIndex ``BaseSelector``, so core ``RouterQueryEngine`` and ``RouterRetriever`` accept it; it
returns a :class:`~llama_index_rag_pack.components.routes.RouteSelection`. A query that reaches no
route's threshold goes to the configured fallback route or to "no route", never to a guess.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.base.base_selector import BaseSelector, SingleSelection
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.components.route_embeddings import RouteEmbeddings
from llama_index_rag_pack.components.routes import (
    Route,
    RouteSelection,
    check_unique_names,
    fallback_index,
    route_names,
)
from llama_index_rag_pack.components.settings import resolve_embed_model
from llama_index_rag_pack.core import similarity
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.similarity import Aggregation
from llama_index_rag_pack.core.threshold_calibration import (
    RobustThresholdFit,
    ThresholdFitMethod,
    ThresholdObjective,
    fit_thresholds_robust,
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


@dataclass(frozen=True)
class ThresholdReport:
    """What :meth:`SemanticSelector.fit_thresholds` did; ``fit`` (robust method only) holds the
    shrinkage, the cross-validated objective per shrinkage and whether the default was kept."""

    thresholds: dict[str, float]
    accuracy_before: float
    accuracy_after: float
    n_examples: int
    method: str = "exact"
    fit: RobustThresholdFit | None = None


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
            :func:`~llama_index_rag_pack.components.settings.resolve_embed_model`).
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
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigurationError(f"top_k must be an integer >= 1, got {top_k!r}.")
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
        *,
        threshold: float = DEFAULT_SEMANTIC_THRESHOLD,
        top_k: int = 1,
        aggregation: str | Aggregation = Aggregation.MAX,
        fallback: str | None = None,
        use_descriptions: bool = True,
    ) -> SemanticSelector:
        """Build like core's ``EmbeddingSingleSelector.from_defaults``.

        ``embed_model=None`` uses LlamaIndex's ``Settings.embed_model`` when one was set,
        otherwise the pack's default (see
        :func:`~llama_index_rag_pack.components.settings.resolve_embed_model`).

        Example:
            >>> from llama_index.core.embeddings import MockEmbedding
            >>> SemanticSelector.from_defaults(MockEmbedding(embed_dim=8)).top_k
            1
        """
        return cls(
            routes,
            embed_model=embed_model,
            threshold=threshold,
            top_k=top_k,
            aggregation=aggregation,
            fallback=fallback,
            use_descriptions=use_descriptions,
        )

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

    def _configured(self) -> list[Route]:
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
        routes = list(routes) if routes is not None else self._configured()
        self._embeddings.ensure(routes)
        values = self._embeddings.scores(query_embedding, routes, self.aggregation)
        return dict(zip([r.name for r in routes], values.tolist(), strict=True))

    def _decide(self, query_embedding: Sequence[float], routes: Sequence[Route]) -> RouteSelection:
        names = [r.name for r in routes]
        fallback = fallback_index(self.fallback, names)
        scores = self._embeddings.scores(query_embedding, routes, self.aggregation)
        thresholds = np.asarray([self._threshold_for(r) for r in routes])
        chosen = similarity.decide(scores, thresholds, self.top_k)
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
            for r in self._configured()
        ]

    def route(self, query: str | QueryBundle) -> RouteSelection:
        """Select among the configured routes."""
        return self.select(self._choices(), query)

    async def aroute(self, query: str | QueryBundle) -> RouteSelection:
        """Async :meth:`route`."""
        return await self.aselect(self._choices(), query)

    # ------------------------------------------------------------------ calibration
    def fit_thresholds(
        self,
        labelled_queries: Iterable[similarity.LabelledQuery],
        *,
        max_passes: int = 10,
        method: str | ThresholdFitMethod = ThresholdFitMethod.ROBUST,
        objective: str | ThresholdObjective = ThresholdObjective.BALANCED,
        shrinkage: float | None = None,
        n_folds: int = 5,
        random_state: int = 0,
    ) -> ThresholdReport:
        """Calibrate per-route thresholds on labelled queries.

        ``method="robust"`` (default) fits thresholds under ``objective`` in the middle of the
        widest plateau and pulls them toward the default (``threshold``, or a route's own) by a
        shrinkage chosen by ``n_folds``-fold cross-validation; when cross-validation says the fit
        does not beat the default, the default is kept (``report.fit.kept_default``); see
        :func:`~llama_index_rag_pack.core.threshold_calibration.fit_thresholds_robust`.
        ``method="exact"`` maximises accuracy on the given queries (overfits small sets).

        Args:
            labelled_queries: ``(query, route)`` pairs or dicts with ``query`` and ``route``; the
                route is a name, a list of acceptable names (ambiguous queries) or ``None`` for a
                query that belongs to no route (out of scope — these teach the thresholds to say
                no).
            max_passes: Coordinate-ascent passes per fit.
            method: ``"robust"`` or ``"exact"``.
            objective: Robust only: ``"balanced"`` (mean of in-scope and out-of-scope accuracy)
                or ``"accuracy"``.
            shrinkage: Robust only: ``None`` chooses it by cross-validation; a number in
                ``[0, 1]`` (0 = full fit, 1 = keep the default) is used as given.
            n_folds: Robust only: cross-validation folds.
            random_state: Robust only: seed of the fold assignment.

        Returns:
            The thresholds now in force for routes without their own, the accuracy on the given
            queries before and after, and (robust) the shrinkage and cross-validated scores.

        Raises:
            ConfigurationError: no examples, a label that names no configured route, or an
                unknown method or objective.
        """
        method = ThresholdFitMethod.parse(method)
        routes = self._configured()
        names = [r.name for r in routes]
        queries, labels = similarity.parse_route_labels(labelled_queries, names)
        self._embeddings.ensure(routes)
        vectors = self._embeddings.embed_queries(queries)
        matrix = np.vstack([self._embeddings.scores(v, routes, self.aggregation) for v in vectors])
        start = np.asarray([self._threshold_for(r) for r in routes])
        own = {i: float(start[i]) for i, r in enumerate(routes) if r.threshold is not None}
        robust = None
        if method is ThresholdFitMethod.EXACT:
            fitted = similarity.fit_thresholds_around(matrix, labels, own, max_passes=max_passes)
        else:
            robust = fit_thresholds_robust(
                matrix,
                labels,
                self.threshold,
                objective=objective,
                shrinkage=shrinkage,
                n_folds=n_folds,
                random_state=random_state,
                fixed=own,
                max_passes=max_passes,
            )
            fitted = robust.thresholds
        before = similarity.routing_accuracy(matrix, labels, start)
        after = similarity.routing_accuracy(matrix, labels, fitted)
        self._fitted = {n: float(fitted[i]) for i, n in enumerate(names) if i not in own}
        how = f"{method.value}; {robust.reason}" if robust else method.value
        logger.info("Fitted routing thresholds (%s) on %d queries", how, len(queries))
        logger.info("Routing accuracy on them %.3f -> %.3f", before, after)
        return ThresholdReport(
            thresholds=self.thresholds,
            accuracy_before=before,
            accuracy_after=after,
            n_examples=len(queries),
            method=method.value,
            fit=robust,
        )
