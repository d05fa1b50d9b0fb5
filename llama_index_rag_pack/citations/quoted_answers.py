"""The ``quotes`` citation mode: the LLM justifies its answer with verbatim quotes.

The LLM returns ``{answer, citations: [{source_id, quote}]}`` through function calling (the
:class:`QuotedAnswer` tool) when the model supports it, else as JSON after a prompt. Every quote
is verified against its source (exact → whitespace-normalised → fuzzy,
:func:`~llama_index_rag_pack.citations.quotes.verify_quote`); only verified quotes cite a document,
the others are flagged and logged.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.llms import LLM
from llama_index.core.program.function_program import get_function_tool
from llama_index.core.schema import MetadataMode, NodeWithScore

from llama_index_rag_pack.citations.annotations import attach_markers
from llama_index_rag_pack.citations.quotes import QuoteCheck, parse_quoted_answer, verify_quote
from llama_index_rag_pack.core.llm_output import strip_code_fences

logger = logging.getLogger(__name__)

__all__ = [
    "Quote",
    "QuotedAnswer",
    "arequest_quotes",
    "mark_verified_quotes",
    "request_quotes",
    "uses_tools",
]


class Quote(BaseModel):
    """A verbatim quote that justifies the answer."""

    source_id: int = Field(description="The id of the document the quote is copied from.")
    quote: str = Field(description="The exact words copied from that document.")


class QuotedAnswer(BaseModel):
    """Answer the question from the documents and quote the words that justify the answer."""

    answer: str = Field(description="The answer to the question, based only on the documents.")
    citations: list[Quote] = Field(
        description="Verbatim quotes from the documents that justify the answer."
    )


def uses_tools(llm: LLM) -> bool:
    """Whether ``llm`` gets the :class:`QuotedAnswer` tool (else a JSON prompt)."""
    return bool(getattr(llm.metadata, "is_function_calling_model", False)) and hasattr(
        llm, "chat_with_tools"
    )


def request_quotes(llm: LLM, prompt: str) -> tuple[Any, str]:
    """Ask a function-calling ``llm`` for a :class:`QuotedAnswer`.

    Returns:
        ``(data, raw)``: the tool's arguments (or the reply text when the model did not call the
        tool) and the same as text.
    """
    reply = llm.chat_with_tools(
        [get_function_tool(QuotedAnswer)], user_msg=prompt, tool_required=True
    )
    return _tool_arguments(llm, reply)


async def arequest_quotes(llm: LLM, prompt: str) -> tuple[Any, str]:
    """Async :func:`request_quotes`."""
    reply = await llm.achat_with_tools(
        [get_function_tool(QuotedAnswer)], user_msg=prompt, tool_required=True
    )
    return _tool_arguments(llm, reply)


def _tool_arguments(llm: LLM, chat_response: Any) -> tuple[Any, str]:
    calls = llm.get_tool_calls_from_response(chat_response, error_on_no_tool_call=False)
    content = chat_response.message.content or ""
    if calls:
        data = calls[0].tool_kwargs
        return data, content if isinstance(data, str) else str(data)
    logger.warning(
        "Quotes mode: the LLM answered without calling the tool; parsing its text instead"
    )
    return content, content


def mark_verified_quotes(
    data: Any, raw: str, nodes: list[NodeWithScore], *, fuzzy_threshold: float
) -> tuple[str, list[QuoteCheck]]:
    """The answer with a ``[k](id=M)`` marker per verified source, and the verdict on each quote.

    Args:
        data: The LLM's reply: tool arguments (dict) or text with JSON in it.
        raw: The reply as text (returned, fences removed, when no answer can be read from it).
        nodes: The context chunks, in prompt order (``source_id`` 1 is the first).
        fuzzy_threshold: Minimum similarity for a fuzzy quote match.
    """
    parsed = parse_quoted_answer(data)
    if parsed is None:
        logger.warning(
            "Quotes mode: could not read an answer with quotes from the LLM output (%r...); "
            "returning its text without citations",
            raw[:80],
        )
        return strip_code_fences(raw), []
    answer, pairs = parsed
    texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
    checks = [verify_quote(q, texts, sid, fuzzy_threshold=fuzzy_threshold) for sid, q in pairs]
    ids: list[int] = []
    for check in checks:
        if not check.verified:
            logger.warning(
                "Quote not found in any source (flagged, not cited): %r", check.quote[:100]
            )
            continue
        if check.misattributed:
            logger.info(
                "Quote attributed to id=%s found in id=%s", check.claimed_id, check.source_id
            )
        if check.source_id not in ids:
            ids.append(check.source_id)  # type: ignore[arg-type]
    return attach_markers(answer, ids), checks
