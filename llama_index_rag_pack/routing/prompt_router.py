"""``PromptRouter``: answer with the prompt template most similar to the query (semantic routing).

The seed's example: a physics professor prompt and a mathematician prompt are embedded; each
question is embedded, compared by cosine, and answered with the closest prompt. Here the
templates are embedded once, the choice is a :class:`SemanticSelector` decision (thresholds and a
fallback template are available), and the router is a LlamaIndex query engine whose templates are
its prompts (``get_prompts`` / ``update_prompts``).
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Mapping
from typing import TYPE_CHECKING

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE, Response
from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.usage import metered, report_usage
from llama_index_rag_pack.routing.routes import Route, RouteSelection
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

__all__ = ["QUERY_VARIABLES", "PromptRouter"]

QUERY_VARIABLES = ("query", "query_str", "question")
"""Template variable names that receive the user's question (exactly one per template)."""


class PromptRouter(BaseQueryEngine):
    """A query engine that picks the prompt template closest to the query and answers with it.

    Each template is routed on its ``descriptions`` entry when given, otherwise on the template text
    itself (as in the seed). No LLM call is spent on routing.

    Args:
        templates: ``{name: template}``; each template has one
            ``{query}``/``{query_str}``/``{question}``.
        llm: LLM that answers (default:
            :func:`~llama_index_rag_pack.models.settings.resolve_llm`).
        embed_model: Embedding model for routing (default: the bundled MiniLM).
        descriptions: Optional ``{name: what the template is for}`` used for routing instead of
            the text.
        utterances: Optional ``{name: [example questions]}``.
        threshold: Minimum cosine score; ``-1`` (default) always picks the closest template.
        fallback: Template used when no template reaches the threshold (else a clear error).
        selector: A ready :class:`SemanticSelector` to use instead (its routes are replaced).
        callback_manager: Passed to ``BaseQueryEngine``.

    Example:
        >>> router = PromptRouter(  # doctest: +SKIP
        ...     {"physics": "You are a very smart physics professor. ... "
        ...                 "Here is a question: {query}",
        ...      "math": "You are a very good mathematician. ... Here is a question: {query}"},
        ... )
        >>> response = router.query("What's a black hole")  # doctest: +SKIP
        >>> response.metadata["prompt"]  # doctest: +SKIP
        'physics'
    """

    def __init__(
        self,
        templates: Mapping[str, str | BasePromptTemplate],
        *,
        llm: LLM | str | None = None,
        embed_model: BaseEmbedding | str | None = None,
        descriptions: Mapping[str, str] | None = None,
        utterances: Mapping[str, list[str]] | None = None,
        threshold: float = -1.0,
        fallback: str | None = None,
        selector: SemanticSelector | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        from llama_index_rag_pack.models.settings import resolve_llm

        if not templates:
            raise ConfigurationError(
                "PromptRouter needs at least one template: templates={name: text}."
            )
        self._templates: dict[str, BasePromptTemplate] = {}
        self._descriptions = dict(descriptions or {})
        self._utterances = {k: list(v) for k, v in (utterances or {}).items()}
        for extra in (self._descriptions, self._utterances):
            unknown = sorted(set(extra) - set(templates))
            if unknown:
                raise ConfigurationError(
                    f"descriptions/utterances name unknown template(s) {unknown}."
                )
        for name, template in templates.items():
            self._templates[name] = _check_template(name, template)
        if fallback is not None and fallback not in self._templates:
            raise ConfigurationError(
                f"Fallback template {fallback!r} is not among {list(self._templates)}."
            )
        self._llm_spec = llm
        self._llm: LLM | None = None if llm is None or isinstance(llm, str) else llm
        self._resolve_llm = resolve_llm
        self._selector = selector or SemanticSelector(
            embed_model=embed_model, threshold=threshold, fallback=fallback, top_k=1
        )
        if selector is not None:
            self._selector.fallback = fallback if fallback is not None else selector.fallback
        self._selector.set_routes(self._routes())
        super().__init__(callback_manager=callback_manager or CallbackManager([]))

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            self._llm = self._resolve_llm(self._llm_spec)
        return self._llm

    @property
    def templates(self) -> dict[str, BasePromptTemplate]:
        return dict(self._templates)

    def _routes(self) -> list[Route]:
        return [
            Route(
                name=name,
                description=self._descriptions.get(name) or _routing_text(template),
                utterances=tuple(self._utterances.get(name, ())),
            )
            for name, template in self._templates.items()
        ]

    # ------------------------------------------------------------------ prompts
    def _get_prompts(self) -> PromptDictType:
        return dict(self._templates)

    def _update_prompts(self, prompts: PromptDictType) -> None:
        for name, template in prompts.items():
            if name not in self._templates:
                raise ConfigurationError(
                    f"Unknown template {name!r}; templates: {list(self._templates)}."
                )
            self._templates[name] = _check_template(name, template)
        self._selector.set_routes(self._routes())  # only changed texts are embedded again

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # ------------------------------------------------------------------ routing and answering
    def select(self, query: str | QueryBundle) -> RouteSelection:
        """Which template a query goes to, and why."""
        selection = self._selector.route(query)
        return self._checked(selection, query)

    async def aselect(self, query: str | QueryBundle) -> RouteSelection:
        """Async :meth:`select`."""
        return self._checked(await self._selector.aroute(query), query)

    def _checked(self, selection: RouteSelection, query: str | QueryBundle) -> RouteSelection:
        if not selection.names:
            text = query if isinstance(query, str) else query.query_str
            raise ConfigurationError(
                f"No prompt template is close enough to {text[:80]!r} ({selection.reply}). "
                "Lower the threshold or configure fallback=<template name>."
            )
        return selection

    def _prompt_for(self, name: str, query_str: str) -> str:
        template = self._templates[name]
        var = _query_variable(template)
        return template.format(**{var: query_str})

    def _response(self, text: str, selection: RouteSelection) -> Response:
        return Response(
            response=text,
            source_nodes=[],
            metadata={
                "prompt": selection.route,
                "reason": selection.reasons[0],
                "scores": selection.scores,
                "fallback": selection.fallback,
            },
        )

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with metered() as meter:
            selection = self.select(query_bundle)
            logger.info("Prompt routing: %s", selection.explain())
            prompt = self._prompt_for(selection.route, query_bundle.query_str)
            text = self.llm.complete(prompt).text
        return report_usage(self._response(text, selection), meter)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with metered() as meter:
            selection = await self.aselect(query_bundle)
            logger.info("Prompt routing: %s", selection.explain())
            prompt = self._prompt_for(selection.route, query_bundle.query_str)
            text = (await self.llm.acomplete(prompt)).text
        return report_usage(self._response(text, selection), meter)


def _template_vars(template: BasePromptTemplate) -> list[str]:
    return list(getattr(template, "template_vars", []) or [])


def _query_variable(template: BasePromptTemplate) -> str:
    found = [v for v in _template_vars(template) if v in QUERY_VARIABLES]
    return found[0]


def _check_template(name: str, template: str | BasePromptTemplate) -> BasePromptTemplate:
    if isinstance(template, str):
        template = PromptTemplate(template)
    if not isinstance(template, BasePromptTemplate):
        raise ConfigurationError(
            f"Template {name!r} must be a string or PromptTemplate, got {type(template).__name__}."
        )
    variables = _template_vars(template)
    found = [v for v in variables if v in QUERY_VARIABLES]
    if len(found) != 1:
        raise ConfigurationError(
            f"Template {name!r} must contain exactly one of "
            "{query}, {query_str} or {question} "
            f"for the question; it has variables {variables}."
        )
    partial = set(getattr(template, "kwargs", {}) or {})
    others = [v for v in variables if v not in QUERY_VARIABLES and v not in partial]
    if others:
        raise ConfigurationError(
            f"Template {name!r} has variables {others} that PromptRouter cannot fill: use "
            "partial_format(...) on a PromptTemplate first."
        )
    return template


def _routing_text(template: BasePromptTemplate) -> str:
    """The template text without its placeholders (what the seed embeds)."""
    text = getattr(template, "template", None) or template.get_template()
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(text) if f}
    except ValueError:
        names = set(QUERY_VARIABLES)
    for var in names:
        text = text.replace("{" + var + "}", " ")
    return re.sub(r"\s+", " ", text).strip()
