"""Request bodies of ``rag-pack serve``, read and checked before any model is touched: JSON
within the size limit, OpenAI chat messages, search arguments. Each problem is one
:class:`~llama_index_rag_pack.serve.api_errors.ApiError` naming the field."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_index_rag_pack.serve.api_errors import ApiError
from llama_index_rag_pack.serve.service import CITATION_STYLES, MAX_TOP_K

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ChatBody", "read_json", "search_args"]

#: The largest request body read, in bytes (``--max-body-bytes``).
DEFAULT_MAX_BODY_BYTES = 1_000_000
_ROLES = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
_IGNORED_ROLES = {"system", "developer", "tool", "function"}


async def read_json(chunks: AsyncIterator[bytes], limit: int) -> dict[str, Any]:
    """The JSON object of a request body read from ``chunks``, at most ``limit`` bytes.

    Raises:
        ApiError: 413 over the limit (reading stops there), 400 for a body that is not a UTF-8
            JSON object.
    """
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise ApiError(
                413,
                f"The request body is over the limit of {limit:,} bytes.",
                code="request_too_large",
            )
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ApiError(400, f"The body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The body must be a JSON object.", code="invalid_json")
    return data


def _text(content: Any, index: int) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts):
            return "\n".join(parts)
    raise ApiError(
        400,
        f"messages[{index}].content must be a string or a list of text parts.",
        param=f"messages[{index}].content",
        code="invalid_value",
    )


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None or isinstance(value, str):
        return value or None
    raise ApiError(400, f"{name} must be a string.", param=name, code="invalid_type")


class ChatBody:
    """A checked chat completions body: ``question`` (the last user message), ``history`` (the
    earlier user and assistant turns), ``model``, ``filters``, ``stream``, ``include_usage``
    (``stream_options.include_usage``: a stream ends with a chunk carrying ``usage``; read only
    when streaming, as OpenAI's API does), ``citation_style``.

    Raises:
        ApiError: 400 naming the field that cannot work.
    """

    def __init__(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(
                400, "messages must be a non-empty list.", param="messages", code="invalid_value"
            )
        turns: list[ChatMessage] = []
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ApiError(
                    400,
                    f"messages[{index}] must be an object with a role.",
                    param=f"messages[{index}]",
                    code="invalid_value",
                )
            role, text = message["role"], _text(message.get("content"), index)
            if role in _ROLES:
                turns.append(ChatMessage(role=_ROLES[role], content=text))
            elif role not in _IGNORED_ROLES:
                raise ApiError(
                    400,
                    f"messages[{index}].role {role!r} is not one of user, assistant, system.",
                    param=f"messages[{index}].role",
                    code="invalid_value",
                )
        if not turns or turns[-1].role != MessageRole.USER or not (turns[-1].content or "").strip():
            raise ApiError(
                400,
                "The last user or assistant message must be a user message with text.",
                param="messages",
                code="invalid_value",
            )
        self.question = str(turns[-1].content)
        self.history = turns[:-1]
        self.model = _optional_str(body, "model")
        self.filters = _optional_str(body, "filters")
        self.stream = body.get("stream", False)
        if not isinstance(self.stream, bool):
            raise ApiError(
                400, "stream must be true or false.", param="stream", code="invalid_type"
            )
        self.include_usage = _include_usage(body.get("stream_options"))
        self.citation_style = _optional_str(body, "citation_style") or "markdown"
        if self.citation_style not in CITATION_STYLES:
            raise ApiError(
                400,
                f"citation_style must be one of {', '.join(CITATION_STYLES)}.",
                param="citation_style",
                code="invalid_value",
            )


def _include_usage(options: Any) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise ApiError(
            400,
            "stream_options must be an object.",
            param="stream_options",
            code="invalid_type",
        )
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise ApiError(
            400,
            "stream_options.include_usage must be true or false.",
            param="stream_options.include_usage",
            code="invalid_type",
        )
    return include


def search_args(body: dict[str, Any]) -> dict[str, Any]:
    """``query``, ``mode``, ``top_k`` and ``filters`` of a search body (``mode`` ``None`` for
    the default; ``model`` is read as ``mode`` too)."""
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ApiError(
            400, "query must be a non-empty string.", param="query", code="invalid_value"
        )
    top_k = body.get("top_k", 5)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ApiError(
            400,
            f"top_k must be an integer from 1 to {MAX_TOP_K}.",
            param="top_k",
            code="invalid_value",
        )
    mode = _optional_str(body, "mode") or _optional_str(body, "model")
    return {"query": query, "mode": mode, "top_k": top_k, "filters": _optional_str(body, "filters")}
