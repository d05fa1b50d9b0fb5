"""``LogicalSelector``: an LLM picks the route(s) from their names and descriptions.

A LlamaIndex ``BaseSelector``, so core ``RouterQueryEngine`` and ``RouterRetriever`` accept it; it
returns a :class:`~llama_index_rag_pack.routing.routes.RouteSelection`. An unusable reply is
never turned into a wrong route: it goes to the configured fallback route, to "no route", or
raises :class:`~llama_index_rag_pack.routing.routes.RoutingError`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_selector import BaseSelector, SingleSelection
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.models.json_output import json_output
from llama_index_rag_pack.models.settings import resolve_llm
from llama_index_rag_pack.routing.route_replies import ParsedRouteReply, parse_route_reply
from llama_index_rag_pack.routing.routes import (
    RouteSelection,
    RoutingError,
    fallback_index,
    route_names,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_ROUTE_SELECT_PROMPT", "LogicalSelector", "route_reply_schema"]

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


def route_reply_schema(names: Sequence[str], max_outputs: int) -> dict[str, Any]:
    """The JSON schema of a routing reply: ``routes`` (at most ``max_outputs`` of ``names``) and a
    short ``reason``. LLMs that constrain decoding (the local llama.cpp model) are held to it, so
    their reply always names valid routes; other LLMs' replies are parsed tolerantly.

    Example:
        >>> route_reply_schema(["math", "physics"], 1)["properties"]["routes"]["items"]
        {'enum': ['math', 'physics']}
    """
    return {
        "type": "object",
        "properties": {
            "routes": {"type": "array", "items": {"enum": list(names)}, "maxItems": max_outputs},
            "reason": {"type": "string", "maxLength": 120},
        },
        "required": ["routes", "reason"],
        "additionalProperties": False,
    }


SELECT_TOOL_NAME = "select_routes"
SELECT_TOOL_DESCRIPTION = (
    "Choose the data source(s) best suited to answer the user's question. `routes`: names from the "
    "list (an empty list if none fits); `reason`: one short sentence."
)


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
            :func:`~llama_index_rag_pack.models.settings.resolve_llm`).
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
        check_count("max_outputs", max_outputs)
        self.llm = resolve_llm(llm)
        self.max_outputs = max_outputs
        self.fallback = fallback
        self.raise_on_failure = raise_on_failure
        self.use_function_calling = use_function_calling
        self._prompt = _as_template(prompt) if prompt is not None else DEFAULT_ROUTE_SELECT_PROMPT

    @classmethod
    def from_defaults(
        cls,
        llm: LLM | None = None,
        prompt_template_str: str | None = None,
        *,
        max_outputs: int = 1,
        fallback: str | None = None,
        raise_on_failure: bool = False,
        use_function_calling: bool | None = None,
    ) -> LogicalSelector:
        """Build like core's ``LLMSingleSelector.from_defaults`` / ``LLMMultiSelector``'s.

        ``llm=None`` uses LlamaIndex's ``Settings.llm`` when one was set, otherwise the pack's
        default (see :func:`~llama_index_rag_pack.models.settings.resolve_llm`).
        ``prompt_template_str=None`` uses :data:`DEFAULT_ROUTE_SELECT_PROMPT`.

        Example:
            >>> from llama_index_rag_pack.testing import ScriptedLLM
            >>> LogicalSelector.from_defaults(ScriptedLLM(replies=[]), max_outputs=2).max_outputs
            2
        """
        return cls(
            llm,
            max_outputs=max_outputs,
            fallback=fallback,
            raise_on_failure=raise_on_failure,
            prompt=prompt_template_str,
            use_function_calling=use_function_calling,
        )

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

    def _tool(self, names: Sequence[str]) -> FunctionTool:
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
        calls = self.llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
        text = response.message.content or ""
        if not calls:
            return parse_route_reply(text, names, max_outputs=self.max_outputs), text
        args = calls[0].tool_kwargs
        payload = json.dumps(args if isinstance(args, dict) else {"routes": args}, default=str)
        reply = f"{calls[0].tool_name}({payload})"
        return parse_route_reply(payload, names, max_outputs=self.max_outputs), reply

    def _finish(self, parsed: ParsedRouteReply, names: Sequence[str], reply: str) -> RouteSelection:
        fallback = fallback_index(self.fallback, names)
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
        fallback_index(self.fallback, names)
        prompt = self._format(choices, names, query)
        if self._function_calling:
            response = self.llm.chat_with_tools(
                [self._tool(names)], user_msg=prompt, allow_parallel_tool_calls=False
            )
            parsed, reply = self._parse_tool_response(response, names)
            return self._finish(parsed, names, reply)
        with json_output(route_reply_schema(names, self.max_outputs)):
            reply = self.llm.complete(prompt).text
        return self._finish(
            parse_route_reply(reply, names, max_outputs=self.max_outputs), names, reply
        )

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> RouteSelection:
        names = route_names(choices)
        fallback_index(self.fallback, names)
        prompt = self._format(choices, names, query)
        if self._function_calling:
            response = await self.llm.achat_with_tools(
                [self._tool(names)], user_msg=prompt, allow_parallel_tool_calls=False
            )
            parsed, reply = self._parse_tool_response(response, names)
            return self._finish(parsed, names, reply)
        with json_output(route_reply_schema(names, self.max_outputs)):
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
