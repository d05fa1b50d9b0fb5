"""The tokens an answer or a build spent: every LLM call made inside a :func:`metered` block.

A :class:`UsageMeter` adds up the LLM calls that end while it is active: condensing a follow-up,
HyDE's passages, RAG-Fusion's variants, the answer, the judge's verdicts, RAPTOR's summaries,
sync or async, streamed or not. It listens to LlamaIndex's instrumentation (the end events of
``chat`` / ``complete`` and their streams), so it counts any LlamaIndex LLM, not only the pack's.

The figures are what the LLM reported: ``usage`` of an OpenAI-compatible reply (the final
chunk of a stream asked with ``stream_options={"include_usage": true}``), llama.cpp's counts,
Anthropic's ``input_tokens`` / ``output_tokens``, Ollama's ``prompt_eval_count`` /
``eval_count``. Where an LLM reports nothing, the call is counted with ``Settings.tokenizer``
(the prompt's and the reply's text) and the total says so (``counted=True``).

A call nested in another (core's ``CustomLLM.chat`` calls its own ``complete``) counts once; a
meter opened inside another adds to both; a meter follows the question into the asyncio tasks
it starts, and into threads given :func:`in_this_context`.

Example:
    >>> from llama_index_rag_pack.testing import ScriptedLLM
    >>> llm = ScriptedLLM(replies=["Paris."])
    >>> with metered() as meter:
    ...     _ = llm.complete("Which city is the capital of France?")
    >>> meter.usage.llm_calls, meter.usage.total_tokens > 0
    (1, True)
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

__all__ = [
    "TokenUsage",
    "UsageMeter",
    "in_this_context",
    "metered",
    "metered_astream",
    "metered_stream",
    "report_usage",
    "reported_usage",
    "set_usage",
]

_T = TypeVar("_T")
_STREAMS = (StreamingResponse, AsyncStreamingResponse)


@dataclass(frozen=True)
class TokenUsage:
    """Tokens of some LLM calls, as OpenAI's ``usage`` names them.

    Attributes:
        prompt_tokens: Tokens sent (prompts, with their context passages).
        completion_tokens: Tokens generated.
        llm_calls: LLM calls made.
        counted: True when the LLM did not report some of these figures and they were counted
            with the tokenizer.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    counted: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.llm_calls + other.llm_calls,
            self.counted or other.counted,
        )

    def as_dict(self) -> dict[str, Any]:
        """OpenAI's three figures, the number of calls and whether they were counted.

        Example:
            >>> TokenUsage(120, 30, 2).as_dict()
            {'prompt_tokens': 120, 'completion_tokens': 30, 'total_tokens': 150, 'llm_calls': 2, 'counted': False}
        """  # noqa: E501  (doctest output)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "llm_calls": self.llm_calls,
            "counted": self.counted,
        }


_METER: contextvars.ContextVar[UsageMeter | None] = contextvars.ContextVar(
    "rag_pack_usage_meter", default=None
)


class UsageMeter:
    """The running total of the LLM calls that ended while this meter was active (thread-safe:
    concurrent calls add under a lock). A meter made inside another adds to it as well."""

    def __init__(self, parent: UsageMeter | None = None) -> None:
        self.parent = parent
        self._usage = TokenUsage()
        self._lock = threading.Lock()

    @property
    def usage(self) -> TokenUsage:
        """What was spent so far."""
        return self._usage

    def add(self, usage: TokenUsage) -> None:
        """Adds ``usage`` here and to the meters around this one."""
        with self._lock:
            self._usage = self._usage + usage
        if self.parent is not None:
            self.parent.add(usage)

    @contextmanager
    def active(self) -> Iterator[UsageMeter]:
        """This meter counts the calls that end inside the block (again, e.g. while a stream
        it started is read)."""
        _install()
        token = _METER.set(self)
        try:
            yield self
        finally:
            _METER.reset(token)


@contextmanager
def metered() -> Iterator[UsageMeter]:
    """A new meter, active inside the block (and adding to the one around it, if any)."""
    with UsageMeter(parent=_METER.get()).active() as meter:
        yield meter


def in_this_context(fn: Callable[..., _T]) -> Callable[..., _T]:
    """``fn`` run in a copy of the caller's context (its meter, its tracing span), for a thread
    pool: ``pool.submit(in_this_context(fn), *args)``. One copy per call."""
    context = contextvars.copy_context()
    return lambda *args, **kwargs: context.run(fn, *args, **kwargs)


def metered_stream(
    items: Iterator[_T], meter: UsageMeter, on_end: Callable[[TokenUsage], None] | None = None
) -> Iterator[_T]:
    """``items`` read with ``meter`` active (the LLM call behind a stream ends when its last
    piece is read, after the answering method returned); ``on_end(meter.usage)`` then."""
    while True:
        with meter.active():
            try:
                item = next(items)
            except StopIteration:
                break
        yield item
    if on_end is not None:
        on_end(meter.usage)


async def metered_astream(
    items: AsyncIterator[_T],
    meter: UsageMeter,
    on_end: Callable[[TokenUsage], None] | None = None,
) -> AsyncIterator[_T]:
    """Async :func:`metered_stream`."""
    while True:
        with meter.active():
            try:
                item = await items.__anext__()
            except StopAsyncIteration:
                break
        yield item
    if on_end is not None:
        on_end(meter.usage)


def set_usage(response: Any, usage: TokenUsage) -> None:
    """``response.metadata["usage"] = usage.as_dict()`` (a ``metadata`` of ``None`` becomes a
    dict)."""
    if getattr(response, "metadata", None) is None:
        response.metadata = {}
    response.metadata["usage"] = usage.as_dict()


def report_usage(response: _T, meter: UsageMeter) -> _T:
    """``response`` with ``metadata["usage"]`` (:meth:`TokenUsage.as_dict`) set to what
    ``meter`` counted; for a streaming response (sync or async ``response_gen``), set when its
    stream ends, once the answer's own call is counted.

    Example:
        >>> from llama_index.core.base.response.schema import Response
        >>> with metered() as meter:
        ...     meter.add(TokenUsage(40, 8, 1))
        >>> report_usage(Response("Paris."), meter).metadata["usage"]["total_tokens"]
        48
    """

    done = partial(set_usage, response)
    stream = response.response_gen if isinstance(response, _STREAMS) else None
    if hasattr(stream, "__anext__"):
        response.response_gen = metered_astream(stream, meter, done)  # type: ignore[attr-defined]
    elif hasattr(stream, "__next__"):
        response.response_gen = metered_stream(stream, meter, done)  # type: ignore[attr-defined]
    else:
        done(meter.usage)
    return response


# ---------------------------------------------------------------------- what an LLM reported
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


def _tokens(text: str) -> int:
    from llama_index.core import Settings

    return len(Settings.tokenizer(text)) if text else 0


def _call_usage(event: Any) -> TokenUsage:
    """One ended call's usage: reported, else counted from its prompt and reply."""
    response = event.response
    found = reported_usage(response)
    if found is not None:
        return TokenUsage(found[0], found[1], 1)
    if isinstance(event, LLMChatEndEvent):
        prompt = "\n".join(str(m.content or "") for m in event.messages)
        reply = str(getattr(getattr(response, "message", None), "content", "") or "")
    else:
        prompt, reply = str(event.prompt or ""), str(getattr(response, "text", "") or "")
    return TokenUsage(_tokens(prompt), _tokens(reply), 1, counted=True)


# ---------------------------------------------------------------------- instrumentation
class _CallSpans(BaseSpanHandler[Any]):
    """Which span each open span was opened in, while a meter is active: a call whose span
    lies inside another open LLM call's span is that call's own inner call."""

    parents: dict[str, str | None] = {}
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
        if _METER.get() is not None:
            if len(self.parents) > 100_000:  # streams never read to their end
                self.parents.clear()
            self.parents[id_] = parent_id

    def _leave(self, id_: str) -> None:
        if id_ in self.open_calls:
            self.exited.add(id_)  # a stream: its call ends when it is read
        else:
            self.parents.pop(id_, None)

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
            if len(self.open_calls) > 100_000:  # streams never read to their end
                self.open_calls.clear()
                self.exited.clear()
            self.open_calls.add(span_id)

    def end(self, span_id: str | None) -> bool:
        """Closes the call of ``span_id``; True when it is an outermost call."""
        if not span_id:
            return True
        self.open_calls.discard(span_id)
        parent, outermost, seen = self.parents.get(span_id), True, 0
        while parent is not None and seen < 1000:
            if parent in self.open_calls:
                outermost = False
                break
            parent, seen = self.parents.get(parent), seen + 1
        if span_id in self.exited:
            self.exited.discard(span_id)
            self.parents.pop(span_id, None)
        return outermost


class _UsageEvents(BaseEventHandler):
    """Adds each outermost LLM call that ends under an active meter to it."""

    @classmethod
    def class_name(cls) -> str:
        return "RagPackUsageEvents"

    def handle(self, event: Any, **kwargs: Any) -> None:
        meter = _METER.get()
        if meter is None:
            return
        if isinstance(event, LLMChatStartEvent | LLMCompletionStartEvent):
            _SPANS.start(event.span_id)
        elif isinstance(event, LLMChatEndEvent | LLMCompletionEndEvent) and _SPANS.end(
            event.span_id
        ):
            meter.add(_call_usage(event))


_SPANS = _CallSpans()
_INSTALLED = threading.Lock()
_installed = False


def _install() -> None:
    """Registers the handlers on LlamaIndex's root dispatcher, once per process."""
    global _installed
    if _installed:
        return
    with _INSTALLED:
        if not _installed:
            root = get_dispatcher()
            root.add_span_handler(_SPANS)
            root.add_event_handler(_UsageEvents())
            _installed = True
