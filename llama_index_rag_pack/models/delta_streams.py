"""``DeltaStreamingLLM``: the four streaming methods of a LlamaIndex LLM, written once over the
text deltas a subclass produces.

A streamed reply, completion or chat, is the running text of its deltas: each response carries
the text so far and the new ``delta``. A hook may end with a ``dict``, the call's token usage
(``prompt_tokens``, ``completion_tokens``, ``total_tokens``): it becomes a last response with an
empty ``delta`` and the usage in ``additional_kwargs``, as OpenAI's final usage chunk does.
The local llama.cpp model (:class:`~llama_index_rag_pack.models.local_llm.LocalGGUFLLM`) and
the scripted test model (:class:`~llama_index_rag_pack.testing.ScriptedLLM`) differ only in
where the deltas come from.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.llm import LLM

__all__ = ["DeltaStreamingLLM"]


class DeltaStreamingLLM(LLM):
    """An LLM whose ``stream_complete``, ``astream_complete``, ``stream_chat`` and
    ``astream_chat`` turn the deltas of four hooks into responses.

    A subclass (listed before core's ``CustomLLM`` or ``FunctionCallingLLM`` in its bases)
    implements the hooks. What a hook does before it returns (send the request, check the
    arguments) happens when the streaming method is called; the deltas are read as the caller
    iterates.
    """

    def _completion_deltas(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> Iterator[str]:
        """The text deltas of the completion of ``prompt``."""
        raise NotImplementedError

    async def _acompletion_deltas(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> AsyncIterator[str]:
        """Async :meth:`_completion_deltas`."""
        raise NotImplementedError

    def _chat_deltas(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> Iterator[str]:
        """The text deltas of the assistant's reply to ``messages``."""
        raise NotImplementedError

    async def _achat_deltas(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> AsyncIterator[str]:
        """Async :meth:`_chat_deltas`."""
        raise NotImplementedError

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        deltas = self._completion_deltas(prompt, formatted, kwargs)

        def gen() -> CompletionResponseGen:
            text = ""
            for delta in deltas:
                if isinstance(delta, dict):  # the call's token usage, reported at the end
                    yield CompletionResponse(text=text, delta="", additional_kwargs=delta)
                    continue
                text += delta
                yield CompletionResponse(text=text, delta=delta)

        return gen()

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        deltas = await self._acompletion_deltas(prompt, formatted, kwargs)

        async def gen() -> CompletionResponseAsyncGen:
            text = ""
            async for delta in deltas:
                if isinstance(delta, dict):
                    yield CompletionResponse(text=text, delta="", additional_kwargs=delta)
                    continue
                text += delta
                yield CompletionResponse(text=text, delta=delta)

        return gen()

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        deltas = self._chat_deltas(messages, kwargs)

        def gen() -> ChatResponseGen:
            text = ""
            for delta in deltas:
                if isinstance(delta, dict):
                    yield _chat_response(text, "", delta)
                    continue
                text += delta
                yield _chat_response(text, delta)

        return gen()

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        deltas = await self._achat_deltas(messages, kwargs)

        async def gen() -> ChatResponseAsyncGen:
            text = ""
            async for delta in deltas:
                if isinstance(delta, dict):
                    yield _chat_response(text, "", delta)
                    continue
                text += delta
                yield _chat_response(text, delta)

        return gen()


def _chat_response(text: str, delta: str, usage: dict[str, int] | None = None) -> ChatResponse:
    message = ChatMessage(role=MessageRole.ASSISTANT, content=text)
    return ChatResponse(message=message, delta=delta, additional_kwargs=usage or {})
