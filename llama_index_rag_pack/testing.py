"""Test helpers: a scripted LLM whose replies look like real model output.

``ScriptedLLM`` is a real LlamaIndex ``FunctionCallingLLM``: it works wherever an LLM is accepted
(query engines, selectors, structured prediction), answers from a script, and records every
prompt it was sent. Use it in your own tests and benchmarks, as this project does.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

from llama_index_rag_pack.models.delta_streams import DeltaStreamingLLM

__all__ = ["ScriptedLLM", "ToolCallReply", "ScriptExhaustedError", "SyncCallError", "split_tokens"]

_TOKEN_RE = re.compile(r"\s*\S+|\s+")


def split_tokens(text: str) -> list[str]:
    """Split text the way a streaming model emits it: words with their leading whitespace."""
    return _TOKEN_RE.findall(text)


@dataclass
class ToolCallReply:
    """A scripted function call: the model "calls" ``name`` with ``arguments``."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    text: str = ""


Reply = str | ToolCallReply | BaseException
ReplyFn = Callable[[str], Reply]


class ScriptExhaustedError(AssertionError):
    """The script ran out of replies (the code made more LLM calls than the test expected)."""


class SyncCallError(RuntimeError):
    """A sync method was called on an LLM built with ``forbid_sync=True``."""


class ScriptedLLM(DeltaStreamingLLM, FunctionCallingLLM):
    """An LLM that replies from a script.

    Args:
        replies: A list consumed in order, or a function ``prompt -> reply``. A reply is a string,
            a :class:`ToolCallReply` (function calling), or an exception instance to raise.
        default_reply: Used once a list is used up (otherwise :class:`ScriptExhaustedError`).
        delay: Seconds each call takes (``time.sleep`` in sync, ``asyncio.sleep`` in async calls).
        forbid_sync: Sync methods raise :class:`SyncCallError`: proves an async path is async.
        function_calling: Report ``is_function_calling_model`` in the metadata.
        stream_splitter: How streaming splits a reply into deltas (default: word by word).

    Example:
        >>> llm = ScriptedLLM(replies=["1. first query\\n2. second query"])
        >>> llm.complete("Generate queries").text
        '1. first query\\n2. second query'
        >>> llm.prompts
        ['Generate queries']
    """

    replies: Any = Field(default_factory=list, description="List of replies or prompt -> reply.")
    default_reply: Any = Field(default=None, description="Reply once the list is used up.")
    delay: float = Field(default=0.0, ge=0.0)
    forbid_sync: bool = Field(default=False)
    function_calling: bool = Field(default=False)
    context_window: int = Field(default=8192)
    model_name: str = Field(default="scripted-llm")
    stream_splitter: Any = Field(default=None)

    _lock: Any = PrivateAttr(default_factory=threading.Lock)
    _position: int = PrivateAttr(default=0)
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _in_flight: int = PrivateAttr(default=0)
    _max_in_flight: int = PrivateAttr(default=0)

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=512,
            is_chat_model=True,
            is_function_calling_model=self.function_calling,
            model_name=self.model_name,
        )

    # ------------------------------------------------------------------ bookkeeping
    @property
    def prompts(self) -> list[str]:
        """Every prompt received, in call order (chat messages are joined by newlines)."""
        return list(self._prompts)

    @property
    def call_count(self) -> int:
        return len(self._prompts)

    @property
    def max_concurrency(self) -> int:
        """The most calls that were in flight at the same time."""
        return self._max_in_flight

    def reset(self) -> None:
        with self._lock:
            self._position = 0
            self._prompts.clear()
            self._max_in_flight = 0

    def _next_reply(self, prompt: str) -> Reply:
        with self._lock:
            self._prompts.append(prompt)
            if callable(self.replies):
                reply_fn: ReplyFn | None = self.replies
            else:
                reply_fn = None
                if self._position < len(self.replies):
                    reply = self.replies[self._position]
                    self._position += 1
                elif self.default_reply is not None:
                    reply = self.default_reply
                else:
                    raise ScriptExhaustedError(
                        f"ScriptedLLM has no reply left for call #{len(self._prompts)}; prompt "
                        f"starts with {prompt[:120]!r}"
                    )
        if reply_fn is not None:
            reply = reply_fn(prompt)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _exit(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _sync_reply(self, prompt: str, method: str) -> Reply:
        if self.forbid_sync:
            raise SyncCallError(f"ScriptedLLM.{method} called, but this LLM forbids sync calls")
        self._enter()
        try:
            if self.delay:
                time.sleep(self.delay)
            return self._next_reply(prompt)
        finally:
            self._exit()

    async def _async_reply(self, prompt: str) -> Reply:
        self._enter()
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            return self._next_reply(prompt)
        finally:
            self._exit()

    def _split(self, text: str) -> Iterator[str]:
        """The stream deltas of ``text``, split when the caller starts reading."""
        if text:
            yield from (self.stream_splitter or split_tokens)(text)

    async def _asplit(self, text: str) -> AsyncIterator[str]:
        for delta in self._split(text):
            yield delta

    @staticmethod
    def _join(messages: Sequence[ChatMessage]) -> str:
        return "\n".join(m.content or "" for m in messages)

    @staticmethod
    def _text(reply: Reply) -> str:
        return reply.text if isinstance(reply, ToolCallReply) else str(reply)

    def _chat_response(self, reply: Reply) -> ChatResponse:
        kwargs: dict[str, Any] = {}
        if isinstance(reply, ToolCallReply):
            kwargs["tool_calls"] = [
                ToolSelection(
                    tool_id=f"call_{i}", tool_name=reply.name, tool_kwargs=reply.arguments
                )
                for i in range(1)
            ]
        return ChatResponse(
            message=ChatMessage(
                role=MessageRole.ASSISTANT, content=self._text(reply), additional_kwargs=kwargs
            )
        )

    # ------------------------------------------------------------------ completion API
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._text(self._sync_reply(prompt, "complete")))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        return CompletionResponse(text=self._text(await self._async_reply(prompt)))

    # ------------------------------------------------------------------ chat API
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._chat_response(self._sync_reply(self._join(messages), "chat"))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._chat_response(await self._async_reply(self._join(messages)))

    # ------------------------------------------------------------------ streaming
    def _completion_deltas(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> Iterator[str]:
        return self._split(self._text(self._sync_reply(prompt, "stream_complete")))

    async def _acompletion_deltas(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> AsyncIterator[str]:
        return self._asplit(self._text(await self._async_reply(prompt)))

    def _chat_deltas(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> Iterator[str]:
        return self._split(self._text(self._sync_reply(self._join(messages), "stream_chat")))

    async def _achat_deltas(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> AsyncIterator[str]:
        return self._asplit(self._text(await self._async_reply(self._join(messages))))

    # ------------------------------------------------------------------ function calling
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        if user_msg is not None:
            messages.append(user_msg)
        return {"messages": messages, "tools": list(tools), **kwargs}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = response.message.additional_kwargs.get("tool_calls", [])
        if not calls and error_on_no_tool_call:
            raise ValueError(f"Expected at least one tool call, got: {response.message.content!r}")
        return list(calls)
