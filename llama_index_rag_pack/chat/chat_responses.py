"""The responses of a :class:`~llama_index_rag_pack.chat.cited_chat_engine.CitedChatEngine`
turn (whole or streamed), and what the conversation remembers of each answer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse

from llama_index_rag_pack.citations.references import render_references

__all__ = [
    "CitedChatResponse",
    "CitedStreamingChatResponse",
    "chat_response",
    "finish_stream",
    "history_text",
    "streaming_chat_response",
    "text_delta",
    "turn_messages",
]

_SPACE_BEFORE_PUNCTUATION = re.compile(r"[ \t]+([.,;:!?])")


@dataclass
class CitedChatResponse(AgentChatResponse):
    """A chat turn's answer: ``response`` is the answer with its reference list, ``answer`` the
    answer alone, ``source_nodes`` the cited chunks, ``citations`` the structured list,
    ``context_nodes`` every chunk the LLM was shown, ``attribution`` the per-sentence support;
    ``metadata`` is the cited response's, plus ``condensed_question``."""

    answer: str = ""
    citations: list[Any] = field(default_factory=list)
    context_nodes: list[Any] = field(default_factory=list)
    attribution: Any = None


@dataclass
class CitedStreamingChatResponse(StreamingAgentChatResponse):
    """A streamed chat turn. ``metadata["condensed_question"]`` is set at once; ``source_nodes``,
    ``citations``, ``answer`` and the rest of ``metadata`` when the stream ends."""

    answer: str = ""
    citations: list[Any] = field(default_factory=list)
    context_nodes: list[Any] = field(default_factory=list)
    attribution: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


def turn_messages(message: str, response: Any) -> list[ChatMessage]:
    return [
        ChatMessage(role=MessageRole.USER, content=message),
        ChatMessage(role=MessageRole.ASSISTANT, content=history_text(response)),
    ]


def history_text(response: Any) -> str:
    """What the conversation remembers of a cited answer: its text with the citations removed
    (no numbers, links or reference list to repeat in later condense prompts)."""
    marked = (response.metadata or {}).get("marked_answer", response.answer)
    plain = render_references(marked, response.context_nodes, style="empty")
    return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", plain).strip()


def chat_response(response: Any, question: str, extra: dict[str, str]) -> CitedChatResponse:
    return CitedChatResponse(
        response=str(response.response or ""),
        source_nodes=list(response.source_nodes),
        metadata={**(response.metadata or {}), "condensed_question": question, **extra},
        answer=response.answer,
        citations=list(response.citations),
        context_nodes=list(response.context_nodes),
        attribution=response.attribution,
    )


def streaming_chat_response(
    streamed: Any, question: str, extra: dict[str, str]
) -> CitedStreamingChatResponse:
    """The chat response around a cited streaming response; tokens are read by the caller
    (``response_gen`` / ``async_response_gen``), the memory is written when they end."""
    metadata = streamed.metadata if streamed.metadata is not None else {}
    metadata["condensed_question"] = question
    metadata.update(extra)
    return CitedStreamingChatResponse(
        source_nodes=streamed.source_nodes,
        metadata=metadata,
        is_writing_to_memory=False,
    )


def text_delta(text: str, delta: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta)


def finish_stream(chat: CitedStreamingChatResponse, streamed: Any) -> None:
    """Copy what the cited stream filled in when it ended."""
    chat.source_nodes[:] = streamed.source_nodes
    chat.metadata.update(streamed.metadata or {})
    chat.answer = streamed.answer
    chat.citations[:] = streamed.citations
    chat.context_nodes[:] = streamed.context_nodes
    chat.attribution = streamed.attribution
