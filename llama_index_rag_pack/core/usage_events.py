"""How the usage meter hears of LLM calls: LlamaIndex's instrumentation events and spans.

:func:`install_handlers` registers, once per process, an event handler and a span handler on
LlamaIndex's root dispatcher. While a meter is active, each ``chat`` / ``complete`` call (or its
stream) that ends adds its tokens to it: what the LLM reported (:func:`reported_usage`), else the
prompt's and the reply's text counted with the LLM's own tokenizer where it holds one
(``OpenAILike(tokenizer=...)``), otherwise with ``Settings.tokenizer``, and marked counted. The
span handler remembers which span each span was opened in, and which LLM opened it, while a meter
is active: a call whose span lies inside another open call's span (core's ``CustomLLM.chat``
calls its own ``complete``) is that call's own, and is not counted again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

__all__ = ["install_handlers", "reported_usage"]

#: Entries kept at most for calls whose end never comes (streams never read to their end).
_MAX_OPEN = 100_000


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _pair(usage: Any, prompt_key: str, completion_key: str) -> tuple[int, int] | None:
    get = usage.get if isinstance(usage, Mapping) else lambda k: getattr(usage, k, None)
    prompt, completion = _int(get(prompt_key)), _int(get(completion_key))
    return (prompt, completion) if prompt is not None and completion is not None else None


def reported_usage(response: Any) -> tuple[int, int] | None:
    """The ``(prompt, completion)`` tokens a LlamaIndex response says its call took, or
    ``None`` when the LLM reported none.

    Example:
        >>> from llama_index.core.llms import CompletionResponse
        >>> reported_usage(CompletionResponse(text="Hi", raw={"usage": {
        ...     "prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}))
        (12, 3)
        >>> reported_usage(CompletionResponse(text="Hi")) is None
        True
    """
    found = _pair(
        getattr(response, "additional_kwargs", None) or {}, "prompt_tokens", "completion_tokens"
    )
    if found is not None:
        return found
    raw = getattr(response, "raw", None)
    if raw is None:
        return None
    usage = raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
    for keys in (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens")):
        if usage is not None and (found := _pair(usage, *keys)) is not None:
            return found
    return _pair(raw, "prompt_eval_count", "eval_count")  # Ollama


def _tokenizer(llm: Any) -> Callable[[str], Any]:
    """The LLM's own tokenizer where it holds a loaded one, else ``Settings.tokenizer``."""
    own = getattr(llm, "tokenizer", None)
    if own is not None and callable(getattr(own, "encode", None)):
        return own.encode
    from llama_index.core import Settings

    return Settings.tokenizer


def call_usage(event: Any, llm: Any = None) -> tuple[int, int, bool]:
    """One ended call's ``(prompt, completion, counted)`` tokens: reported, else counted from
    its prompt and reply with ``llm``'s tokenizer."""
    response = event.response
    found = reported_usage(response)
    if found is not None:
        return found[0], found[1], False
    if isinstance(event, LLMChatEndEvent):
        prompt = "\n".join(str(m.content or "") for m in event.messages)
        reply = str(getattr(getattr(response, "message", None), "content", "") or "")
    else:
        prompt, reply = str(event.prompt or ""), str(getattr(response, "text", "") or "")
    encode = _tokenizer(llm)
    return len(encode(prompt)) if prompt else 0, len(encode(reply)) if reply else 0, True


class _CallSpans(BaseSpanHandler[Any]):
    """Which span each open span was opened in, while a meter is active: a call whose span
    lies inside another open LLM call's span is that call's own inner call."""

    current: Any = None  # () -> the active meter or None
    parents: dict[str, str | None] = {}
    llms: dict[str, Any] = {}
    open_calls: set[str] = set()
    exited: set[str] = set()

    @classmethod
    def class_name(cls) -> str:
        return "RagPackCallSpans"

    def span_enter(
        self,
        id_: str,
        bound_args: Any,
        instance: Any = None,
        parent_id: str | None = None,
        tags: Any = None,
        **kwargs: Any,
    ) -> None:
        if self.current is not None and self.current() is not None:
            if len(self.parents) > _MAX_OPEN:
                self.parents.clear()
                self.llms.clear()
            self.parents[id_] = parent_id
            if isinstance(instance, BaseLLM):
                self.llms[id_] = instance

    def _leave(self, id_: str) -> None:
        if id_ in self.open_calls:
            self.exited.add(id_)  # a stream: its call ends when it is read
        else:
            self.parents.pop(id_, None)
            self.llms.pop(id_, None)

    def span_exit(
        self, id_: str, bound_args: Any, instance: Any = None, result: Any = None, **kwargs: Any
    ) -> None:
        self._leave(id_)

    def span_drop(
        self,
        id_: str,
        bound_args: Any,
        instance: Any = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> None:
        self.open_calls.discard(id_)
        self._leave(id_)

    def new_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_exit_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_drop_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def start(self, span_id: str | None) -> None:
        if span_id:
            if len(self.open_calls) > _MAX_OPEN:
                self.open_calls.clear()
                self.exited.clear()
            self.open_calls.add(span_id)

    def end(self, span_id: str | None) -> tuple[bool, Any]:
        """Closes the call of ``span_id``: whether it is an outermost call, and its LLM."""
        if not span_id:
            return True, None
        self.open_calls.discard(span_id)
        llm = self.llms.get(span_id)
        parent, outermost, seen = self.parents.get(span_id), True, 0
        while parent is not None and seen < 1000:
            if parent in self.open_calls:
                outermost = False
                break
            parent, seen = self.parents.get(parent), seen + 1
        if span_id in self.exited:
            self.exited.discard(span_id)
            self.parents.pop(span_id, None)
            self.llms.pop(span_id, None)
        return outermost, llm


class _UsageEvents(BaseEventHandler):
    """Adds each outermost LLM call that ends under an active meter to it."""

    @classmethod
    def class_name(cls) -> str:
        return "RagPackUsageEvents"

    def handle(self, event: Any, **kwargs: Any) -> None:
        meter = _SPANS.current() if _SPANS.current is not None else None
        if meter is None:
            return
        if isinstance(event, LLMChatStartEvent | LLMCompletionStartEvent):
            _SPANS.start(event.span_id)
        elif isinstance(event, LLMChatEndEvent | LLMCompletionEndEvent):
            outermost, llm = _SPANS.end(event.span_id)
            if outermost:
                meter.add_call(*call_usage(event, llm))


_SPANS = _CallSpans()
_INSTALLED = threading.Lock()
_installed = False


def install_handlers(current: Callable[[], Any]) -> None:
    """Registers the handlers on LlamaIndex's root dispatcher, once per process; ``current()``
    gives the active meter (an object with ``add_call(prompt, completion, counted)``) or
    ``None``."""
    global _installed
    if _installed:
        return
    with _INSTALLED:
        if not _installed:
            _SPANS.current = current
            root = get_dispatcher()
            root.add_span_handler(_SPANS)
            root.add_event_handler(_UsageEvents())
            _installed = True
