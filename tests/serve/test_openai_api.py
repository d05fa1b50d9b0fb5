"""``rag-pack serve http`` through the official ``openai`` SDK (sync and async, streamed and not)
and plain HTTP: models, cited chat completions with their sources, conversations, search.

Real Milvus Lite, the real embedding model, real uvicorn on 127.0.0.1; the LLM is scripted.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from llama_index_rag_pack import RagPack

pytestmark = pytest.mark.slow


@pytest.fixture()
def url(serve: Any, facts_pack: RagPack) -> str:
    return serve(facts_pack)


def client(url: str, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, **kwargs)


def aclient(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


ASK = [{"role": "user", "content": "What is the capital of Andorra?"}]


def _cited_source(sources: list[dict[str, Any]]) -> dict[str, Any]:
    cited = [s for s in sources if s["cited"]]
    assert len(cited) == 1 and cited[0]["number"] == 1
    return cited[0]


def test_models_lists_the_servable_modes_default_first(url: str, facts_pack: RagPack) -> None:
    ids = [m.id for m in client(url).models.list()]
    assert ids[0] == facts_pack.default_mode
    assert {"vector", "bm25", "hybrid_convex"} <= set(ids)
    assert "route" not in ids  # needs a routed pack's sources
    assert "raptor" not in ids  # no tree was built beside this collection
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    assert client(url).models.retrieve("bm25").id == "bm25"
    with pytest.raises(openai.NotFoundError):
        client(url).models.retrieve("gpt-4o")


def test_a_chat_completion_cites_and_carries_its_sources(url: str) -> None:
    completion = client(url).chat.completions.create(model="hybrid_convex", messages=ASK)
    content = completion.choices[0].message.content
    assert completion.model == "hybrid_convex" and completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == "stop"
    assert "Andorra la Vella" in content and "[1]" in content
    sources = completion.model_extra["sources"]
    source = _cited_source(sources)
    assert "Andorra la Vella" in source["text"]
    assert source["metadata"]["title"] == "Andorra"
    assert source["metadata"]["url"].endswith("/Andorra")
    assert source["id"] and isinstance(source["score"], float)
    assert any(not s["cited"] and s["number"] is None for s in sources)  # shown, not cited
    # where the supporting sentence stands in the passage's text
    spans = [e for e in source["evidence"] if e["start"] is not None]
    assert spans and all("Andorra la Vella" in source["text"][e["start"] : e["end"]] for e in spans)
    assert spans[0]["sentence"] == "The capital of Andorra is Andorra la Vella."  # the answer's


def test_a_streamed_answer_equals_the_whole_one_and_ends_with_its_sources(url: str) -> None:
    whole = client(url).chat.completions.create(model="vector", messages=ASK)
    chunks = list(client(url).chat.completions.create(model="vector", messages=ASK, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    last = chunks[-1]
    assert last.choices == [] and last.model_extra["sources"] == whole.model_extra["sources"]
    assert len({c.id for c in chunks}) == 1


async def test_the_async_client_streamed_and_not(url: str) -> None:
    async with aclient(url) as api:
        whole = await api.chat.completions.create(model="bm25", messages=ASK)
        stream = await api.chat.completions.create(model="bm25", messages=ASK, stream=True)
        text, sources = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            else:
                sources = chunk.model_extra["sources"]
    assert text == whole.choices[0].message.content and "Andorra la Vella" in text
    assert sources == whole.model_extra["sources"]


def test_earlier_messages_are_the_conversation(url: str) -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Tell me about Andorra."},
        {"role": "assistant", "content": "Andorra is a small country in the Pyrenees."},
        {"role": "user", "content": [{"type": "text", "text": "What is its capital?"}]},
    ]
    completion = client(url).chat.completions.create(model="hybrid_convex", messages=messages)
    assert completion.model_extra["condensed_question"] == "What is Andorra's capital?"
    assert "Andorra la Vella" in completion.choices[0].message.content
    assert "Andorra la Vella" in _cited_source(completion.model_extra["sources"])["text"]


def test_filters_narrow_the_search(url: str) -> None:
    completion = client(url).chat.completions.create(
        model="vector", messages=ASK, extra_body={"filters": 'title == "Aikido"'}
    )
    sources = completion.model_extra["sources"]
    assert sources and {s["metadata"]["title"] for s in sources} == {"Aikido"}
    assert "could not find" in completion.choices[0].message.content


def test_retrieve_returns_ranked_passages(url: str) -> None:
    body = {"query": "What does the aardvark eat?", "mode": "vector", "top_k": 2}
    answer = httpx.post(f"{url}/v1/retrieve", json=body).json()
    assert answer["model"] == "vector" and len(answer["data"]) == 2
    first = answer["data"][0]
    assert "termites" in first["text"] and first["metadata"]["title"] == "Aardvark"
    assert [p["position"] for p in answer["data"]] == [1, 2]
    assert answer["data"][0]["score"] >= answer["data"][1]["score"]
    narrowed = httpx.post(
        f"{url}/v1/retrieve", json={**body, "filters": 'title in ["Abacus", "Aikido"]'}
    ).json()
    assert {p["metadata"]["title"] for p in narrowed["data"]} <= {"Abacus", "Aikido"}
    default = httpx.post(f"{url}/v1/retrieve", json={"query": "aardvark"}).json()
    assert default["model"] == client(url).models.list().data[0].id


def test_the_citation_style_can_be_asked_for(url: str) -> None:
    completion = client(url).chat.completions.create(
        model="vector", messages=ASK, extra_body={"citation_style": "text"}
    )
    content = completion.choices[0].message.content
    assert "[1]" in content and "Sources:" in content and "<sup>" not in content


async def test_the_bundled_local_llm_writes_the_answers(
    serve: Any, facts_pack: RagPack, facts_uri: str, local_llm: Any
) -> None:
    from serve_support import service_of

    pack = RagPack.open(
        uri=facts_uri, collection_name="facts", embed_model=facts_pack.embed_model, llm=local_llm
    )
    url = serve(service_of(pack, answer_style="generative"))
    question = [{"role": "user", "content": "What does the aardvark eat?"}]
    whole = client(url, timeout=120).chat.completions.create(model="vector", messages=question)
    assert whole.choices[0].message.content.strip()
    assert any("termites" in s["text"] for s in whole.model_extra["sources"])
    async with aclient(url) as api:
        stream = await api.chat.completions.create(model="vector", messages=question, stream=True)
        deltas = [c.choices[0].delta.content async for c in stream if c.choices]
    assert len([d for d in deltas if d]) > 1  # streamed token by token, as the model wrote it


def test_usage_is_what_the_llm_reported_for_every_call_of_the_answer(
    serve: Any, facts_pack: RagPack, facts_uri: str
) -> None:
    """Behind an LLM that reports ``usage`` (a fake OpenAI-compatible server): the answer's
    ``usage`` adds up the condensing call and the answer, streamed (``include_usage``) or not."""
    from fake_openai_llm import fake_openai_server, pack_llm
    from serve_support import service_of

    follow_up = [
        {"role": "user", "content": "What is Milvus?"},
        {"role": "assistant", "content": "A vector database [1]."},
        {"role": "user", "content": "When was it released?"},
    ]
    with fake_openai_server() as fake:
        pack = RagPack.open(
            uri=facts_uri,
            collection_name="facts",
            embed_model=facts_pack.embed_model,
            llm=pack_llm(fake),
        )
        url = serve(service_of(pack, answer_style="generative"))
        whole = client(url).chat.completions.create(model="vector", messages=follow_up)
        spent = fake.spent()
        assert spent["llm_calls"] == 2  # the condensed question, the answer
        usage = whole.usage
        assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
            spent["prompt_tokens"],
            spent["completion_tokens"],
            spent["total_tokens"],
        )
        assert usage.model_extra == {"llm_calls": 2, "counted": False}
        fake.clear()
        chunks = list(
            client(url).chat.completions.create(
                model="vector",
                messages=follow_up,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert all(c.usage is None for c in chunks[:-1])
        assert chunks[-1].choices == []
        assert chunks[-1].usage.model_dump(exclude_none=True) == {**fake.spent(), "counted": False}
        plain = list(
            client(url).chat.completions.create(model="vector", messages=follow_up, stream=True)
        )
        assert all(c.usage is None for c in plain)


def test_llama_index_openai_like_llm_reads_the_server(url: str) -> None:
    """LlamaIndex's own OpenAI-compatible LLM class, pointed at the server, gets the cited
    answer, streamed and not (the sources chunk with no choices is skipped as a usage chunk)."""
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(
        api_base=f"{url}/v1", api_key="unused", model="hybrid_convex", is_chat_model=True
    )
    message = [ChatMessage(role="user", content="What is the capital of Andorra?")]
    whole = llm.chat(message).message.content
    streamed = "".join(r.delta or "" for r in llm.stream_chat(message))
    assert "Andorra la Vella" in whole and streamed == whole


def test_chinese_and_japanese_questions_through_the_server(
    serve: Any, tmp_path: Any, embed_model: Any
) -> None:
    """Questions and documents beyond English: found by BM25 in their own language, and their
    text intact through JSON and the event stream."""
    from llama_index.core import Document
    from serve_support import quoting_reply

    from llama_index_rag_pack.testing import ScriptedLLM

    texts = {
        "长城": "长城是中国古代的军事防御工程，全长两万一千多公里。",
        "ツチブタ": "ツチブタはアフリカに住む哺乳類で、アリやシロアリを食べます。",
        "Abacus": "The abacus is a calculating tool used since ancient times.",
    }
    docs = [Document(text=text, metadata={"title": title}) for title, text in texts.items()]
    pack = RagPack(
        docs,
        uri=str(tmp_path / "cjk.db"),
        collection_name="cjk",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=quoting_reply),
        similarity_top_k=2,
    )
    url = serve(pack)
    for question, title in (("长城有多长？", "长城"), ("ツチブタは何を食べますか？", "ツチブタ")):
        found = httpx.post(f"{url}/v1/retrieve", json={"query": question, "mode": "bm25"}).json()
        assert found["data"][0]["metadata"]["title"] == title
        chunks = list(
            client(url).chat.completions.create(
                model="bm25", messages=[{"role": "user", "content": question}], stream=True
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        source = chunks[-1].model_extra["sources"][0]
        assert source["metadata"]["title"] == title and source["text"] == texts[title]
        assert source["text"][:6] in text  # the answer quotes the passage, characters intact
