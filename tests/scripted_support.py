"""Scripted LLMs of the test fixtures (``tests/conftest.py``), kept apart so that loading the
conftest does not import LlamaIndex (the xdist controller loads it before starting workers).

Concurrency is proved with gates, never with timings: a gated call waits until ``target`` calls
are in flight at once. Code that runs the calls concurrently reaches the target at once, however
slow the machine; code that runs them one by one never does, and the test fails after a timeout.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr

from llama_index_rag_pack.testing import ScriptedLLM, SyncCallError

GATE_TIMEOUT = 20.0


class ConcurrencyGate:
    """Counts calls in flight; ``hold``/``ahold`` wait until ``target`` were in flight at once.

    The wait ends for good once the target was reached (later calls pass at once) or after
    ``timeout`` seconds (then ``reached`` is False and the test's assertion on ``max_in_flight``
    fails): a serial implementation makes a test fail, never hang.
    """

    def __init__(self, target: int, timeout: float = GATE_TIMEOUT) -> None:
        self.target, self.timeout = target, timeout
        self.in_flight = self.max_in_flight = 0
        self.timed_out = False
        self._cond = threading.Condition()

    @property
    def reached(self) -> bool:
        return self.max_in_flight >= self.target

    def enter(self) -> None:
        with self._cond:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._cond.notify_all()

    def exit(self) -> None:
        with self._cond:
            self.in_flight -= 1

    def hold(self) -> None:
        """Block this thread until the target is reached (or the gate gave up)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.reached or self.timed_out, self.timeout):
                self.timed_out = True
                self._cond.notify_all()

    async def ahold(self) -> None:
        """Suspend this task (never blocking the loop) until the target is reached."""
        deadline = time.monotonic() + self.timeout
        while not (self.reached or self.timed_out):
            if time.monotonic() > deadline:
                self.timed_out = True
                break
            await asyncio.sleep(0.001)


class GatedLLM(ScriptedLLM):
    """A ScriptedLLM whose calls wait at a :class:`ConcurrencyGate` before replying.

    ``max_concurrency`` then reaches ``gate.target`` exactly when the code under test really has
    that many calls in flight, whatever the machine's speed. ``delay`` still applies afterwards.
    """

    _gate: Any = PrivateAttr(default=None)

    def __init__(self, *args: Any, gate: ConcurrencyGate, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gate = gate

    @property
    def gate(self) -> ConcurrencyGate:
        return self._gate

    def _sync_reply(self, prompt: str, method: str) -> Any:
        if self.forbid_sync:
            raise SyncCallError(f"ScriptedLLM.{method} called, but this LLM forbids sync calls")
        self._enter()
        self._gate.enter()
        try:
            self._gate.hold()
            if self.delay:
                time.sleep(self.delay)
            return self._next_reply(prompt)
        finally:
            self._gate.exit()
            self._exit()

    async def _async_reply(self, prompt: str) -> Any:
        self._enter()
        self._gate.enter()
        try:
            await self._gate.ahold()
            if self.delay:
                await asyncio.sleep(self.delay)
            return self._next_reply(prompt)
        finally:
            self._gate.exit()
            self._exit()


class JsonHeldLLM(ScriptedLLM):
    """Stands in for an LLM that constrains its decoding to a JSON schema (the local llama.cpp
    model); records, per call, the schema requested around it (``json_output``)."""

    supports_json_schema: bool = True
    schemas: list = []

    def _next_reply(self, prompt: str) -> Any:
        from llama_index_rag_pack.models.json_output import requested_json_schema

        self.schemas.append(requested_json_schema())
        return super()._next_reply(prompt)
