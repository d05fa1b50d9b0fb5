"""The tokens an answer or a build spent: every LLM call made inside a :func:`metered` block.

A :class:`UsageMeter` adds up the LLM calls that end while it is active: condensing a follow-up,
HyDE's passages, RAG-Fusion's variants, the answer, the judge's verdicts, RAPTOR's summaries,
sync or async, streamed or not. It listens to LlamaIndex's instrumentation (the end events of
``chat`` / ``complete`` and their streams), so it counts any LlamaIndex LLM, not only the pack's.

The figures are what the LLM reported: ``usage`` of an OpenAI-compatible reply (the final
chunk of a stream asked with ``stream_options={"include_usage": true}``), llama.cpp's counts,
Anthropic's ``input_tokens`` / ``output_tokens``, Ollama's ``prompt_eval_count`` /
``eval_count``. Where an LLM reports nothing, the prompt's and the reply's text are counted with
the LLM's own tokenizer where it holds one, else with ``Settings.tokenizer``, and the total says
so (``counted=True``).

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
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse

from llama_index_rag_pack.core.usage_events import install_handlers, reported_usage

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

    def add_call(self, prompt_tokens: int, completion_tokens: int, counted: bool) -> None:
        """Adds one LLM call (what the instrumentation handlers report)."""
        self.add(TokenUsage(prompt_tokens, completion_tokens, 1, counted))

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
        install_handlers(_METER.get)
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
    pool: ``pool.submit(in_this_context(fn), *args)``, wrapped once per task submitted (one
    context cannot run in two threads at once)."""
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
