"""A RAPTOR build's spending limits: at most ``max_llm_calls`` summary requests, and no request
started once ``max_tokens`` tokens are spent.

A :class:`SpendGate` is asked before every summary request (each retry is a request too). It
refuses a request that would be one more than ``max_llm_calls``, and any request once the calls
that already ended spent ``max_tokens`` tokens (prompt and completion, as the pack's usage meter
counts them). A refused request is not an error: the summary is simply not written, the build
stores what was written and stops after the group in hand, and the next build resumes from there.

The call limit is exact. The token limit is checked when a request starts, against the calls
that have ended: with ``max_concurrency`` requests in flight, those already started finish and
can take the total past ``max_tokens`` by up to their own tokens.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError, RagPackError, check_count

__all__ = [
    "BudgetReachedError",
    "SpendGate",
    "Spent",
    "check_budget",
    "check_prices",
    "current_gate",
]


class BudgetReachedError(RagPackError):
    """A summary request was not started: the build's call or token budget is spent (caught
    inside the build, which then stops cleanly)."""


@dataclass(frozen=True)
class Spent:
    """What the LLM calls of an operation spent so far.

    Attributes:
        llm_calls: Calls that ended.
        prompt_tokens: Tokens sent.
        completion_tokens: Tokens generated.
        counted: Some figures were counted with the tokenizer (the LLM reported none).
    """

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    counted: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __sub__(self, other: Spent) -> Spent:
        return Spent(
            self.llm_calls - other.llm_calls,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.counted,
        )


def check_budget(max_llm_calls: Any, max_tokens: Any) -> None:
    """Raise :class:`ConfigurationError` when a budget is given and is not an integer >= 1.

    Example:
        >>> check_budget(10, None)
        >>> check_budget(0, None)
        Traceback (most recent call last):
        ...
        llama_index_rag_pack.core.errors.ConfigurationError: max_llm_calls must be an integer >= 1 or None, got 0.
    """  # noqa: E501  (doctest output)
    check_count("max_llm_calls", max_llm_calls, minimum=1, none_ok=True)
    check_count("max_tokens", max_tokens, minimum=1, none_ok=True)


def check_prices(price_in: Any, price_out: Any) -> None:
    """Raise :class:`ConfigurationError` when a price (USD per million tokens) is given and is
    not a finite number >= 0."""
    for name, value in (("price_in", price_in), ("price_out", price_out)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigurationError(
                f"{name} must be a number of USD per million tokens, got {value!r}."
            )
        if not math.isfinite(value) or value < 0:
            raise ConfigurationError(f"{name} must be >= 0 USD per million tokens, got {value!r}.")


_GATE: contextvars.ContextVar[SpendGate | None] = contextvars.ContextVar(
    "rag_pack_raptor_gate", default=None
)


def current_gate() -> SpendGate | None:
    """The gate of the operation running in this context (``None`` outside one)."""
    return _GATE.get()


@dataclass
class SpendGate:
    """Admits summary requests while the budget lasts (thread-safe).

    Attributes:
        max_llm_calls: Requests that may start (``None``: no limit).
        max_tokens: No request starts once the ended calls spent this many tokens (``None``: no
            limit).
        spent: Reads what the operation's calls spent so far (its usage meter).
        started: Requests admitted.
        refused: Requests refused (the budget is reached once one was).

    Example:
        >>> gate = SpendGate(max_llm_calls=2)
        >>> [gate.admit() for _ in range(3)], gate.reached
        ([True, True, False], True)
    """

    max_llm_calls: int | None = None
    max_tokens: int | None = None
    spent: Callable[[], Spent] = Spent
    started: int = 0
    refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def reached(self) -> bool:
        """Whether a request was refused."""
        return self.refused > 0

    def admit(self) -> bool:
        """Whether one more request may start (counted as started when it may)."""
        with self._lock:
            over_calls = self.max_llm_calls is not None and self.started >= self.max_llm_calls
            over_tokens = (
                self.max_tokens is not None and self.spent().total_tokens >= self.max_tokens
            )
            if over_calls or over_tokens:
                self.refused += 1
                return False
            self.started += 1
            return True

    @contextmanager
    def active(self) -> Iterator[SpendGate]:
        """This gate is :func:`current_gate` inside the block (and in the threads and tasks
        that copy its context)."""
        token = _GATE.set(self)
        try:
            yield self
        finally:
            _GATE.reset(token)
