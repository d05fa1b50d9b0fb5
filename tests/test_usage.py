"""Token usage: what an answer spent, added up over every LLM call made for it.

The meter's own rules first (reported figures read from every LLM family's reply, nested calls
counted once, meters inside meters, async tasks, thread pools, failures), then the pack's
OpenAI-compatible LLM against a fake server that reports ``usage`` as OpenAI does: every mode,
the judge, text-to-SQL, the prompt router and the chat engine, sync and async, streamed or not,
must give in ``response.metadata["usage"]`` exactly what the server reported for that answer.
"""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fake_openai_llm import FakeOpenAIServer, fake_openai_server, pack_llm
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.llms import ChatMessage, CompletionResponse
from llama_index.core.llms.mock import MockLLM

from llama_index_rag_pack.core.usage import (
    TokenUsage,
    in_this_context,
    metered,
    metered_stream,
    reported_usage,
)
from llama_index_rag_pack.testing import ScriptedLLM

# ---------------------------------------------------------------------- the meter's rules


def test_reported_usage_reads_each_llm_familys_reply() -> None:
    openai_like = SimpleNamespace(usage=SimpleNamespace(prompt_tokens=30, completion_tokens=4))
    assert reported_usage(CompletionResponse(text="x", raw=openai_like)) == (30, 4)
    kwargs = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    assert reported_usage(CompletionResponse(text="x", additional_kwargs=kwargs)) == (7, 2)
    anthropic = {"usage": {"input_tokens": 11, "output_tokens": 5}}
    assert reported_usage(CompletionResponse(text="x", raw=anthropic)) == (11, 5)
    ollama = {"prompt_eval_count": 13, "eval_count": 6, "done": True}
    assert reported_usage(CompletionResponse(text="x", raw=ollama)) == (13, 6)
    # a server that sends usage: null, or nothing at all
    assert reported_usage(CompletionResponse(text="x", raw={"usage": None})) is None
    assert reported_usage(CompletionResponse(text="x")) is None


@given(
    st.dictionaries(
        st.sampled_from(["prompt_tokens", "completion_tokens", "input_tokens", "usage", "x"]),
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3), st.floats()),
    )
)
def test_reported_usage_never_raises_and_takes_only_counts(raw: dict[str, Any]) -> None:
    found = reported_usage(CompletionResponse(text="", raw=raw, additional_kwargs=raw))
    if found is not None:
        assert all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in found)


def test_a_call_nested_in_another_counts_once() -> None:
    llm = MockLLM(max_tokens=5)  # core's CustomLLM: its chat calls its own complete
    with metered() as meter:
        llm.chat([ChatMessage(role="user", content="one two three")])
    assert meter.usage == TokenUsage(3, 5, 1, counted=True)


def test_a_meter_inside_another_adds_to_both_and_streams_count_when_read() -> None:
    llm = ScriptedLLM(default_reply="four words of reply")
    with metered() as outer:
        with metered() as inner:
            llm.complete("a b")
        stream = llm.stream_complete("c")
    assert inner.usage.llm_calls == 1
    assert outer.usage.llm_calls == 1  # the stream's call ends when it is read
    pieces = list(metered_stream(stream, outer))
    assert "".join(p.delta for p in pieces) == "four words of reply"
    assert outer.usage.llm_calls == 2 and outer.usage.completion_tokens == 8


async def test_async_tasks_add_to_the_meter_that_started_them() -> None:
    llm = ScriptedLLM(default_reply="yes")
    with metered() as meter:
        await asyncio.gather(llm.acomplete("a"), llm.achat([ChatMessage(role="user", content="b")]))
        async for _ in await llm.astream_chat([ChatMessage(role="user", content="c")]):
            pass
    assert meter.usage.llm_calls == 3


def test_threads_see_the_meter_only_through_in_this_context() -> None:
    llm = ScriptedLLM(default_reply="ok")
    with metered() as meter, ThreadPoolExecutor(2) as pool:
        list(pool.map(llm.complete, ["a", "b"]))
        assert meter.usage.llm_calls == 0
        for future in [pool.submit(in_this_context(llm.complete), p) for p in "cd"]:
            future.result()
    assert meter.usage.llm_calls == 2


def test_a_failed_call_does_not_stop_the_next_from_counting() -> None:
    llm = ScriptedLLM(replies=[RuntimeError("503 from the server"), "fine"])
    with metered() as meter:
        with pytest.raises(RuntimeError):
            llm.complete("first")
        llm.complete("second")
    assert meter.usage.llm_calls == 1


def test_calls_outside_any_meter_are_not_counted() -> None:
    llm = ScriptedLLM(default_reply="ok")
    llm.complete("before")
    with metered() as meter:
        pass
    llm.complete("after")
    assert meter.usage == TokenUsage()


# ---------------------------------------------------------------------- against a fake server
@pytest.fixture(scope="module")
def server() -> Any:
    with fake_openai_server() as running:
        yield running


@pytest.fixture(scope="module")
def llm(server: FakeOpenAIServer) -> Any:
    return pack_llm(server)


@pytest.fixture()
def fake(server: FakeOpenAIServer) -> Any:
    server.clear()
    server.report_stream_usage = True
    yield server


def _expected(server: FakeOpenAIServer) -> dict[str, Any]:
    spent = server.spent()
    assert spent["llm_calls"] >= 1
    return {**spent, "counted": False}


def test_the_pack_llm_reports_the_servers_usage_streamed_or_not(llm: Any, fake: Any) -> None:
    with metered() as meter:
        llm.complete("What is Milvus?")
        for _ in llm.stream_chat([ChatMessage(role="user", content="And Zilliz?")]):
            pass
    assert meter.usage.as_dict() == _expected(fake)
    assert all("stream_options" not in b for b in fake.bodies if not b.get("stream"))


def test_a_server_that_ignores_stream_options_is_counted_and_says_so(llm: Any, fake: Any) -> None:
    fake.report_stream_usage = False
    with metered() as meter:
        for _ in llm.stream_chat([ChatMessage(role="user", content="What is Milvus?")]):
            pass
    assert meter.usage.llm_calls == 1 and meter.usage.counted
    assert meter.usage.completion_tokens > 0


def test_a_call_the_llm_did_not_report_is_counted_with_its_own_tokenizer(fake: Any) -> None:
    from llama_index.llms.openai_like import OpenAILike

    from llama_index_rag_pack.models.openai_llm import stream_with_usage

    class Characters:  # a tokenizer: one token per character
        def encode(self, text: str) -> list[str]:
            return list(text)

    llm = OpenAILike(
        model="fake-gpt",
        api_base=fake.url,
        api_key="unused",
        is_chat_model=True,
        tokenizer=Characters(),
        additional_kwargs=stream_with_usage(),
    )
    fake.report_stream_usage = False
    with metered() as meter:
        reply = "".join(
            r.delta or ""
            for r in llm.stream_chat([ChatMessage(role="user", content="What is Milvus?")])
        )
    assert meter.usage == TokenUsage(len("What is Milvus?"), len(reply), 1, counted=True)


DOCS = [
    Document(
        text="Milvus is an open-source vector database. Zilliz created it and released it in "
        "2019. It stores embeddings and searches them by similarity.",
        metadata={"title": "Milvus", "year": 2019},
    ),
    Document(
        text="Milvus 1.0 came out in 2021 with long-term support. Milvus 2.0 rebuilt it as a "
        "cloud-native database that separates storage and compute.",
        metadata={"title": "Milvus releases", "year": 2021},
    ),
    Document(
        text="LlamaIndex is a framework for building LLM applications over your data, with "
        "retrievers, query engines and chat engines.",
        metadata={"title": "LlamaIndex", "year": 2022},
    ),
]
QUESTION = "Who created Milvus and when was it released?"


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any, llm: Any) -> Any:
    from llama_index_rag_pack import RagPack

    return RagPack(
        DOCS,
        uri=str(tmp_path_factory.mktemp("usage") / "usage.db"),
        collection_name="usage",
        overwrite=True,
        embed_model=embed_model,
        llm=llm,
        similarity_top_k=3,
    )


def _modes(pack: Any) -> list[str]:
    from llama_index_rag_pack.pack.modes import mode_names

    # raptor modes need a tree, route a pack over several sources: the same engine answers
    return [m for m in mode_names() if not m.startswith("raptor") and m != "route"]


@pytest.mark.slow
def test_every_mode_reports_what_the_server_counted(pack: Any, fake: Any) -> None:
    asked_llm = set()
    for mode in _modes(pack):
        fake.clear()
        response = pack.run(QUESTION, mode=mode, answer_style="generative")
        assert response.metadata["usage"] == _expected(fake), mode
        if fake.spent()["llm_calls"] > 1:
            asked_llm.add(mode)
    assert {"hyde", "fusion", "rewrite", "self_query"} <= asked_llm


@pytest.mark.slow
async def test_the_plain_engine_without_citations_reports_usage_too(pack: Any, fake: Any) -> None:
    response = pack.run(QUESTION, mode="hyde", citations=False)
    assert response.metadata["usage"] == _expected(fake)
    fake.clear()
    streamed = pack.make_query_engine("hyde", streaming=True, citations=False).query(QUESTION)
    assert "Milvus" in "".join(streamed.response_gen)
    assert streamed.metadata["usage"] == _expected(fake)
    fake.clear()
    response = await pack.arun(QUESTION, mode="hyde", citations=False)
    assert response.metadata["usage"] == _expected(fake)


@pytest.mark.slow
async def test_every_mode_async_and_streamed(pack: Any, fake: Any) -> None:
    for mode in ("vector", "hybrid", "hyde", "fusion", "rewrite", "self_query"):
        fake.clear()
        response = await pack.arun(QUESTION, mode=mode, answer_style="generative")
        assert response.metadata["usage"] == _expected(fake), mode
        fake.clear()
        streamed = pack.make_query_engine(mode, streaming=True, answer_style="generative")
        response = streamed.query(QUESTION)
        assert "usage" not in response.metadata  # known when the stream ends
        text = "".join(response.response_gen)
        assert "Milvus" in text
        assert response.metadata["usage"] == _expected(fake), mode
        fake.clear()
        response = await streamed.aquery(QUESTION)
        text = "".join([t async for t in response.async_response_gen()])
        assert response.metadata["usage"] == _expected(fake), mode


@pytest.mark.slow
async def test_the_chat_engine_counts_the_condensing_call_too(pack: Any, fake: Any) -> None:
    engine = pack.make_chat_engine("hybrid", answer_style="generative")
    fake.clear()
    first = engine.chat("Who created Milvus?")
    assert first.metadata["usage"] == _expected(fake)
    fake.clear()
    follow_up = engine.chat("When was it released?")  # condensed: one more call
    assert fake.spent()["llm_calls"] == 2
    assert follow_up.metadata["usage"] == _expected(fake)
    fake.clear()
    streamed = engine.stream_chat("And who builds it now?")
    "".join(streamed.response_gen)
    assert streamed.metadata["usage"] == _expected(fake)
    fake.clear()
    done = await engine.achat("What does it store?")
    assert done.metadata["usage"] == _expected(fake)
    fake.clear()
    astreamed = await engine.astream_chat("How does it search them?")
    async for _ in astreamed.async_response_gen():
        pass
    assert astreamed.metadata["usage"] == _expected(fake)


@pytest.mark.slow
async def test_the_judge_engine_counts_its_verdicts(pack: Any, fake: Any) -> None:
    engine = pack.make_judge_query_engine("hybrid", max_depth=1)
    fake.clear()
    response = engine.query(QUESTION)
    verdicts = sum("You judge whether" in str(b.get("messages")) for b in fake.bodies)
    assert verdicts >= 1
    assert response.metadata["usage"] == _expected(fake)
    fake.clear()
    response = await engine.aquery(QUESTION)
    assert response.metadata["usage"] == _expected(fake)


async def test_text_to_sql_counts_the_query_and_the_answer(
    tmp_path: Path, llm: Any, fake: Any
) -> None:
    from llama_index_rag_pack import SQLQueryEngine

    path = tmp_path / "releases.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE releases (name TEXT, year INTEGER)")
        db.executemany("INSERT INTO releases VALUES (?, ?)", [("Milvus 1.0", 2021)])
    engine = SQLQueryEngine(path, ["releases"], llm=llm)
    response = engine.query("When did Milvus 1.0 come out?")
    assert fake.spent()["llm_calls"] == 2  # the SQL, then the answer
    assert response.metadata["usage"] == _expected(fake)
    fake.clear()
    response = await engine.aquery("When did Milvus 1.0 come out?")
    assert response.metadata["usage"] == _expected(fake)


def test_the_prompt_router_counts_its_answer(embed_model: Any, llm: Any, fake: Any) -> None:
    from llama_index_rag_pack import PromptRouter

    router = PromptRouter(
        {"db": "You know databases well. {query}", "poem": "Write a poem about {query}"},
        llm=llm,
        embed_model=embed_model,
    )
    response = router.query("What is Milvus?")
    assert response.metadata["usage"] == _expected(fake)
