"""The ScriptedLLM test double behaves like a real LlamaIndex LLM."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.bridge.pydantic import BaseModel

from llama_index_rag_pack.testing import (
    ScriptedLLM,
    ScriptExhaustedError,
    SyncCallError,
    ToolCallReply,
    split_tokens,
)


def test_replies_in_order_then_exhausted() -> None:
    llm = ScriptedLLM(replies=["one", "two"])
    assert [llm.complete("a").text, llm.complete("b").text] == ["one", "two"]
    with pytest.raises(ScriptExhaustedError, match="call #3"):
        llm.complete("c")
    assert llm.prompts == ["a", "b", "c"]


def test_callable_replies_and_exceptions() -> None:
    llm = ScriptedLLM(replies=lambda p: RuntimeError("rate limited") if "fail" in p else p.upper())
    assert llm.complete("ok").text == "OK"
    with pytest.raises(RuntimeError, match="rate limited"):
        llm.complete("please fail")


async def test_forbid_sync_and_concurrency_tracking() -> None:
    llm = ScriptedLLM(default_reply="x", delay=0.05, forbid_sync=True)
    with pytest.raises(SyncCallError):
        llm.complete("sync")
    await asyncio.gather(*(llm.acomplete(str(i)) for i in range(5)))
    assert llm.max_concurrency == 5


def test_streaming_splits_like_a_model() -> None:
    llm = ScriptedLLM(replies=["Hello [1](id=2) world"])
    deltas = [r.delta for r in llm.stream_complete("q")]
    assert deltas == split_tokens("Hello [1](id=2) world") == ["Hello", " [1](id=2)", " world"]


class Route(BaseModel):
    index: int
    reason: str


def test_function_calling_structured_predict() -> None:
    from llama_index.core.prompts import PromptTemplate

    llm = ScriptedLLM(
        replies=[ToolCallReply("Route", {"index": 2, "reason": "about physics"})],
        function_calling=True,
    )
    assert llm.metadata.is_function_calling_model
    out = llm.structured_predict(Route, PromptTemplate("Pick a route for {q}"), q="black holes")
    assert out == Route(index=2, reason="about physics")
