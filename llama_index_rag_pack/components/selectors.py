"""Route selectors: :class:`LogicalSelector` (an LLM decides) and :class:`SemanticSelector`
(embeddings).

Both are LlamaIndex ``BaseSelector`` subclasses, so core ``RouterQueryEngine`` and
``RouterRetriever`` accept them, and both return a :class:`RouteSelection` (a core
``MultiSelection`` that also carries route names, scores and whether the fallback was used).
Neither ever turns an unusable answer into a wrong route: it goes to the configured fallback
route, to "no route", or raises :class:`RoutingError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.base.base_selector import BaseSelector, MultiSelection, SingleSelection
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.core import similarity
from llama_index_rag_pack.core.errors import ConfigurationError, RagPackError
from llama_index_rag_pack.core.llm_output import ParsedRouteReply, parse_route_reply

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ROUTE_SELECT_PROMPT",
    "DEFAULT_SEMANTIC_THRESHOLD",
    "Aggregation",
    "LogicalSelector",
    "Route",
    "RouteSelection",
    "RoutingError",
    "SemanticSelector",
    "ThresholdReport",
]

DEFAULT_SEMANTIC_THRESHOLD = 0.2
"""Cosine score a route must reach when no threshold was given or fitted.

A starting point on the all-MiniLM-L6-v2 scale (thresholds fitted on the routing benchmark land at
0.16-0.21 for routes with example utterances); calibrate with ``fit_thresholds`` for your routes.
"""

DEFAULT_ROUTE_SELECT_PROMPT_TMPL = (
    "You route questions to the data source that can answer them. The sources, numbered:\n"
    "---------------------\n"
    "{context_list}\n"
    "---------------------\n"
    "Question: {query_str}\n\n"
    "Pick at most {max_outputs} source(s) from the list that best answer the question. Reply with "
    'JSON only, for example {{"routes": ["{example_name}"], "reason": "one short sentence"}}. '
    'If no source fits, reply {{"routes": [], "reason": "..."}}.\n'
    "Answer:"
)
DEFAULT_ROUTE_SELECT_PROMPT = PromptTemplate(DEFAULT_ROUTE_SELECT_PROMPT_TMPL)
"""Text prompt of :class:`LogicalSelector` for models without function calling."""

SELECT_TOOL_NAME = "select_routes"
SELECT_TOOL_DESCRIPTION = (
    "Choose the data source(s) best suited to answer the user's question. `routes`: names from the "
    "list (an empty list if none fits); `reason`: one short sentence."
)


class RoutingError(RagPackError, ValueError):
    """No usable route could be chosen and no fallback route was configured."""


class Aggregation(str, Enum):
    """How a route's several texts (description, utterances) combine into one score."""

    MAX = "max"
    MEAN = "mean"

    @classmethod
    def parse(cls, value: str | Aggregation) -> Aggregation:
        try:
            return cls(getattr(value, "value", value))
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ConfigurationError(
                f"Unknown aggregation {value!r}; valid values: {valid}."
            ) from None


@dataclass(frozen=True)
class Route:
    """A named destination: a data source, a retriever or a prompt.

    Args:
        name: Unique name (what a selection reports and what an LLM is asked to answer with).
        description: What the route holds / is for.
        utterances: Example questions that belong to the route (semantic routing).
        threshold: Cosine score the route must reach (semantic routing); ``None`` = the selector's.

    Example:
        >>> Route("physics", "Questions about physics", utterances=("What is a black hole?",))
        Route(name='physics', description='Questions about physics', utterances=('What is a black hole?',), threshold=None)
    """  # noqa: E501  (doctest output: the dataclass repr is one line)

    name: str
    description: str = ""
    utterances: tuple[str, ...] = field(default_factory=tuple)
    threshold: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError(f"A route needs a non-empty name, got {self.name!r}.")
        if isinstance(self.utterances, str):
            raise ConfigurationError(
                f"Route {self.name!r}: utterances must be a list of strings, not one string."
            )
        object.__setattr__(self, "utterances", tuple(u for u in self.utterances if u and u.strip()))
        if not self.description.strip() and not self.utterances:
            raise ConfigurationError(
                f"Route {self.name!r} has neither a description nor utterances: give at least one."
            )
        if self.threshold is not None and not -1.0 <= float(self.threshold) <= 1.0:
            raise ConfigurationError(
                f"Route {self.name!r}: threshold must be a cosine score in [-1, 1], "
                f"got {self.threshold!r}."
            )

    def texts(self, use_description: bool = True) -> list[str]:
        """The texts embedded for this route."""
        texts = list(self.utterances)
        if self.description.strip() and (use_description or not texts):
            texts.insert(0, self.description)
        return texts

    @classmethod
    def coerce(cls, value: Route | Mapping[str, Any] | ToolMetadata) -> Route:
        if isinstance(value, Route):
            return value
        if isinstance(value, ToolMetadata):
            return cls(name=value.name or "", description=value.description)
        if isinstance(value, Mapping):
            unknown = set(value) - {"name", "description", "utterances", "threshold"}
            if unknown:
                raise ConfigurationError(
                    f"Unknown route field(s) {sorted(unknown)}; "
                    "use name, description, utterances, threshold."
                )
            return cls(
                name=value.get("name", ""),
                description=value.get("description") or "",
                utterances=tuple(value.get("utterances") or ()),
                threshold=value.get("threshold"),
            )
        raise ConfigurationError(
            f"Cannot make a route from {type(value).__name__}: give a Route or a dict."
        )


class RouteSelection(MultiSelection):
    """A core ``MultiSelection`` (``.inds``, ``.reasons``) plus what routing knows beyond it.

    Attributes:
        names: Names of the selected routes, best first (same order as ``selections``).
        scores: Semantic score of every route (empty for an LLM decision).
        fallback: True when the fallback route was used because nothing else fit.
        reply: The LLM's raw reply (logical routing).
    """

    names: list[str] = []
    scores: dict[str, float] = {}
    fallback: bool = False
    reply: str | None = None

    @property
    def route(self) -> str | None:
        """The best route's name, or None when no route was selected."""
        return self.names[0] if self.names else None

    def explain(self) -> str:
        """One line saying what was chosen and why (for logs and the CLI)."""
        if not self.selections:
            return "no route: " + (self.reply or "nothing matched")
        parts = [
            f"{name} ({sel.reason})" for name, sel in zip(self.names, self.selections, strict=False)
        ]
        return ("fallback → " if self.fallback else "") + "; ".join(parts)


def route_names(choices: Sequence[ToolMetadata]) -> list[str]:
    """Names of ``choices`` (``choice_<n>`` for unnamed ones), checked for emptiness and
    duplicates."""
    if not choices:
        raise ConfigurationError("No routes to choose from: give at least one route (choice).")
    names = [c.name or f"choice_{i + 1}" for i, c in enumerate(choices)]
    _check_unique(names)
    return names


def _check_unique(names: Sequence[str]) -> None:
    seen: set[str] = set()
    dupes = sorted({n for n in names if n in seen or seen.add(n)})
    if dupes:
        raise ConfigurationError(f"Duplicate route names {dupes}: every route needs its own name.")


def _fallback_index(fallback: str | None, names: Sequence[str]) -> int | None:
    if fallback is None:
        return None
    if fallback not in names:
        raise ConfigurationError(
            f"Fallback route {fallback!r} is not among the routes {list(names)}: "
            "add it or change fallback."
        )
    return list(names).index(fallback)


# =========================================================================== semantic


@dataclass(frozen=True)
class ThresholdReport:
    """What :meth:`SemanticSelector.fit_thresholds` did."""

    thresholds: dict[str, float]
    accuracy_before: float
    accuracy_after: float
    n_examples: int


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
        embed_model: LlamaIndex embedding model (default: the bundled all-MiniLM-L6-v2).
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
        from llama_index_rag_pack.components.settings import resolve_embed_model

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
            _check_unique([r.name for r in coerced])
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
        self.use_descriptions = use_descriptions
        self._fitted: dict[str, float] = {}
        self._vectors: dict[str, np.ndarray] = {}  # text -> unit vector
        self._matrix_key: tuple[Any, ...] | None = None
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None
        self.text_embedding_count = 0
        """How many route texts were embedded so far (the cache makes this stop growing)."""

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
        _check_unique([r.name for r in coerced])
        self._routes = {r.name: r for r in coerced}
        self._fitted = {k: v for k, v in self._fitted.items() if k in self._routes}

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

    # ------------------------------------------------------------------ embedding cache
    def _missing(self, routes: Sequence[Route]) -> list[str]:
        texts = {t for r in routes for t in r.texts(self.use_descriptions)}
        return sorted(t for t in texts if t not in self._vectors)

    def _store(self, texts: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        if texts:
            unit = similarity.normalize_rows(np.asarray(vectors, dtype=np.float32))
            self._vectors.update(zip(texts, unit, strict=True))
            self.text_embedding_count += len(texts)
            logger.debug("Embedded %d route texts", len(texts))

    def _ensure_embedded(self, routes: Sequence[Route]) -> None:
        missing = self._missing(routes)
        if missing:
            self._store(missing, self.embed_model.get_text_embedding_batch(missing))

    async def _aensure_embedded(self, routes: Sequence[Route]) -> None:
        missing = self._missing(routes)
        if missing:
            self._store(missing, await self.embed_model.aget_text_embedding_batch(missing))

    def _route_matrix(self, routes: Sequence[Route]) -> tuple[np.ndarray, np.ndarray]:
        key = tuple((r.name, tuple(r.texts(self.use_descriptions))) for r in routes)
        if key != self._matrix_key or self._matrix is None:
            rows, ids = [], []
            for i, r in enumerate(routes):
                for t in r.texts(self.use_descriptions):
                    rows.append(self._vectors[t])
                    ids.append(i)
            self._matrix = (np.vstack(rows), np.asarray(ids))
            self._matrix_key = key
        return self._matrix

    # ------------------------------------------------------------------ decisions
    def _routes_for(self, choices: Sequence[ToolMetadata]) -> list[Route]:
        names = route_names(choices)
        routes = []
        for name, choice in zip(names, choices, strict=True):
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
        """Score of every route for an already embedded query (routes must be embedded)."""
        routes = list(routes) if routes is not None else self._configured()
        self._ensure_embedded(routes)
        return dict(
            zip(
                [r.name for r in routes],
                self._score_vector(query_embedding, routes).tolist(),
                strict=True,
            )
        )

    def _score_vector(
        self, query_embedding: Sequence[float], routes: Sequence[Route]
    ) -> np.ndarray:
        matrix, ids = self._route_matrix(routes)
        sims = similarity.cosine_similarities(np.asarray(query_embedding), matrix)
        return similarity.aggregate_route_scores(sims, ids, len(routes), self.aggregation.value)

    def _decide(self, query_embedding: Sequence[float], routes: Sequence[Route]) -> RouteSelection:
        names = [r.name for r in routes]
        fallback = _fallback_index(self.fallback, names)
        scores = self._score_vector(query_embedding, routes)
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
        self._ensure_embedded(routes)
        embedding = query.embedding or self.embed_model.get_query_embedding(query.query_str)
        return self._decide(embedding, routes)

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> RouteSelection:
        routes = self._routes_for(choices)
        await self._aensure_embedded(routes)
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
        labelled_queries: Iterable[tuple[str, str | Sequence[str] | None] | Mapping[str, Any]],
        *,
        max_passes: int = 10,
    ) -> ThresholdReport:
        """Calibrate per-route thresholds on labelled queries (maximising top-1 accuracy).

        Args:
            labelled_queries: ``(query, route)`` pairs or dicts with ``query`` and ``route``; the
                route is a name, a list of acceptable names (ambiguous queries) or ``None`` for a
                query that belongs to no route (out of scope — these teach the thresholds to say
                no).
            max_passes: Coordinate-ascent passes (see :func:`similarity.fit_thresholds`).

        Returns:
            The fitted thresholds (now in force for routes without their own) and the accuracy on
            the given queries before and after.

        Raises:
            ConfigurationError: no examples, or a label that names no configured route.
        """
        routes = self._configured()
        names = [r.name for r in routes]
        queries, labels = [], []
        for item in labelled_queries:
            if isinstance(item, Mapping):
                query, label = item.get("query"), item.get("route", item.get("routes"))
            else:
                query, label = item
            if not isinstance(query, str) or not query.strip():
                raise ConfigurationError(f"Every labelled query needs query text, got {query!r}.")
            acceptable = [] if label is None else [label] if isinstance(label, str) else list(label)
            unknown = [a for a in acceptable if a not in names]
            if unknown:
                raise ConfigurationError(
                    f"Label(s) {unknown} for {query!r} name no route; routes: {names}."
                )
            queries.append(query)
            labels.append(frozenset(names.index(a) for a in acceptable))
        if not queries:
            raise ConfigurationError("fit_thresholds needs at least one labelled query.")
        self._ensure_embedded(routes)
        q = (
            self.embed_model.get_text_embedding_batch(queries)
            if _symmetric(self.embed_model)
            else [self.embed_model.get_query_embedding(x) for x in queries]
        )
        matrix = np.vstack([self._score_vector(v, routes) for v in q])
        own = {i for i, r in enumerate(routes) if r.threshold is not None}
        start = np.asarray([self._threshold_for(r) for r in routes])
        fit = similarity.fit_thresholds(matrix, labels, max_passes=max_passes)
        fitted = fit.thresholds.copy()
        for i in own:  # explicit per-route thresholds win; refit the others around them
            fitted[i] = start[i]
        if own:
            fit = similarity.fit_thresholds(matrix, labels, initial=fitted, max_passes=max_passes)
            fitted = fit.thresholds
            for i in own:
                fitted[i] = start[i]
        before = similarity.routing_accuracy(matrix, labels, start)
        after = similarity.routing_accuracy(matrix, labels, fitted)
        self._fitted = {
            n: float(t) for i, (n, t) in enumerate(zip(names, fitted, strict=True)) if i not in own
        }
        logger.info(
            "Fitted routing thresholds on %d queries: accuracy %.3f -> %.3f",
            len(queries),
            before,
            after,
        )
        return ThresholdReport(
            thresholds=self.thresholds,
            accuracy_before=before,
            accuracy_after=after,
            n_examples=len(queries),
        )


def _symmetric(embed_model: Any) -> bool:
    """True when query and text embeddings are the same function (no query instruction)."""
    return type(embed_model).__name__ == "HuggingFaceEmbedding" and not getattr(
        embed_model, "query_instruction", None
    )


# =========================================================================== logical


class LogicalSelector(BaseSelector):
    """An LLM picks the route(s) from their names and descriptions.

    With a function-calling model (``llm.metadata.is_function_calling_model``) the choice comes as a
    ``select_routes(routes, reason)`` tool call; otherwise from a text prompt whose reply is parsed
    tolerantly (JSON, a route name in any case or inside prose, a 0- or 1-based number; see
    :mod:`~llama_index_rag_pack.core.llm_output`). The reason the model gave is kept in the result.

    A reply that names no valid route (unknown name, out-of-range number, invalid JSON, two routes
    in prose when one was asked for) is never mapped to a guess: it goes to ``fallback`` with a
    warning, or raises :class:`RoutingError` when there is no fallback or ``raise_on_failure``.
    A reply that explicitly says no route fits selects ``fallback`` or nothing.

    Args:
        llm: Any LlamaIndex LLM (default: resolved by
            :func:`~llama_index_rag_pack.components.settings.resolve_llm`).
        max_outputs: Most routes selected per query.
        fallback: Route name used when the reply is unusable or says "none".
        raise_on_failure: Raise on an unusable reply even when a fallback exists.
        prompt: Text prompt (``{context_list}``, ``{query_str}``, ``{max_outputs}``,
            ``{example_name}``).
        use_function_calling: Force (True) or forbid (False) tool calls; None = if the model
            supports them.

    Example:
        >>> from llama_index_rag_pack.testing import ScriptedLLM
        >>> selector = LogicalSelector(
        ...     ScriptedLLM(replies=['{"routes": ["python_docs"], "reason": "Python code"}'])
        ... )
        >>> result = selector.select(
        ...     [ToolMetadata(name="python_docs", description="Python docs"),
        ...      ToolMetadata(name="js_docs", description="JavaScript docs")],
        ...     "Why does my list comprehension fail?")
        >>> result.names, result.reasons
        (['python_docs'], ['Python code'])
    """

    def __init__(
        self,
        llm: LLM | str | None = None,
        *,
        max_outputs: int = 1,
        fallback: str | None = None,
        raise_on_failure: bool = False,
        prompt: str | BasePromptTemplate | None = None,
        use_function_calling: bool | None = None,
    ) -> None:
        from llama_index_rag_pack.components.settings import resolve_llm

        if not isinstance(max_outputs, int) or max_outputs < 1:
            raise ConfigurationError(f"max_outputs must be an integer >= 1, got {max_outputs!r}.")
        self.llm = resolve_llm(llm)
        self.max_outputs = max_outputs
        self.fallback = fallback
        self.raise_on_failure = raise_on_failure
        self.use_function_calling = use_function_calling
        self._prompt = _as_template(prompt) if prompt is not None else DEFAULT_ROUTE_SELECT_PROMPT

    def _get_prompts(self) -> PromptDictType:
        return {"select_prompt": self._prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "select_prompt" in prompts:
            self._prompt = _as_template(prompts["select_prompt"])

    @property
    def _function_calling(self) -> bool:
        if self.use_function_calling is not None:
            return self.use_function_calling
        return bool(getattr(self.llm.metadata, "is_function_calling_model", False))

    def _format(
        self, choices: Sequence[ToolMetadata], names: Sequence[str], query: QueryBundle
    ) -> str:
        context = "\n".join(
            f"{i}. {name}: {' '.join((c.description or '').split())}"
            for i, (name, c) in enumerate(zip(names, choices, strict=True), 1)
        )
        return self._prompt.format(
            context_list=context,
            query_str=query.query_str,
            max_outputs=self.max_outputs,
            example_name=names[0],
        )

    def _tool(self, names: Sequence[str]) -> Any:
        from llama_index.core.tools import FunctionTool

        def select_routes(routes: list[str], reason: str = "") -> str:
            """Placeholder body: the selector reads the call's arguments, it never runs this."""
            return ", ".join(routes)

        description = f"{SELECT_TOOL_DESCRIPTION} Valid names: {', '.join(names)}."
        return FunctionTool.from_defaults(
            fn=select_routes, name=SELECT_TOOL_NAME, description=description
        )

    def _parse_tool_response(
        self, response: Any, names: Sequence[str]
    ) -> tuple[ParsedRouteReply, str]:
        import json

        calls = self.llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
        text = response.message.content or ""
        if not calls:
            return parse_route_reply(text, names, max_outputs=self.max_outputs), text
        args = calls[0].tool_kwargs
        payload = json.dumps(args if isinstance(args, dict) else {"routes": args}, default=str)
        reply = f"{calls[0].tool_name}({payload})"
        return parse_route_reply(payload, names, max_outputs=self.max_outputs), reply

    def _finish(self, parsed: ParsedRouteReply, names: Sequence[str], reply: str) -> RouteSelection:
        fallback = _fallback_index(self.fallback, names)
        if parsed.status == "ok" and parsed.indices:
            return RouteSelection(
                selections=[SingleSelection(index=i, reason=parsed.reason) for i in parsed.indices],
                names=[names[i] for i in parsed.indices],
                reply=reply,
            )
        if parsed.status == "none" and not self.raise_on_failure:
            if fallback is None:
                return RouteSelection(selections=[], names=[], reply=reply)
            reason = f"the model chose no route ({parsed.reason}); fallback route"
            return RouteSelection(
                selections=[SingleSelection(index=fallback, reason=reason)],
                names=[names[fallback]],
                fallback=True,
                reply=reply,
            )
        problem = parsed.problem or "the model chose no route"
        message = (
            f"The LLM's routing reply named no valid route ({problem}); reply: {reply[:300]!r}."
        )
        if fallback is None or self.raise_on_failure:
            raise RoutingError(
                message + " Configure fallback=<route name> to route such replies somewhere safe, "
                "or use a stronger LLM / SemanticSelector."
            )
        logger.warning("%s Using fallback route %r.", message, names[fallback])
        return RouteSelection(
            selections=[
                SingleSelection(
                    index=fallback, reason=f"unusable reply ({problem}); fallback route"
                )
            ],
            names=[names[fallback]],
            fallback=True,
            reply=reply,
        )

    def _select(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> RouteSelection:
        names = route_names(choices)
        _fallback_index(self.fallback, names)
        prompt = self._format(choices, names, query)
        if self._function_calling:
            response = self.llm.chat_with_tools(
                [self._tool(names)], user_msg=prompt, allow_parallel_tool_calls=False
            )
            parsed, reply = self._parse_tool_response(response, names)
            return self._finish(parsed, names, reply)
        reply = self.llm.complete(prompt).text
        return self._finish(
            parse_route_reply(reply, names, max_outputs=self.max_outputs), names, reply
        )

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> RouteSelection:
        names = route_names(choices)
        _fallback_index(self.fallback, names)
        prompt = self._format(choices, names, query)
        if self._function_calling:
            response = await self.llm.achat_with_tools(
                [self._tool(names)], user_msg=prompt, allow_parallel_tool_calls=False
            )
            parsed, reply = self._parse_tool_response(response, names)
            return self._finish(parsed, names, reply)
        reply = (await self.llm.acomplete(prompt)).text
        return self._finish(
            parse_route_reply(reply, names, max_outputs=self.max_outputs), names, reply
        )


def _as_template(prompt: str | BasePromptTemplate) -> BasePromptTemplate:
    if isinstance(prompt, BasePromptTemplate):
        return prompt
    if isinstance(prompt, str):
        return PromptTemplate(prompt)
    raise ConfigurationError(
        f"prompt must be a string or a PromptTemplate, got {type(prompt).__name__}."
    )
