"""Bad requests, lost clients and lost backends: each gets a 4xx JSON error, a clean
cancellation or a 503, ``/healthz`` stays 200, and the next good request is answered.

Real uvicorn on 127.0.0.1 and real Milvus (Lite, and a ``milvus-lite server`` killed and started
again); the LLMs are scripted: one that fails like an unreachable OpenAI server, one that streams
slowly and records whether it was stopped.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from lite_server import LiteServer, wait_for
from llama_index.core.bridge.pydantic import PrivateAttr
from serve_support import RunningServer, service_of

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.serve.app import create_app
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

ASK = {"model": "vector", "messages": [{"role": "user", "content": "What is the capital?"}]}


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["message"] and error["type"]
    return error


@pytest.fixture(scope="module")
def url(facts_pack: RagPack) -> Iterator[str]:
    """One server for the tests that send only requests it refuses or reads (none changes it):
    starting and stopping uvicorn costs about 0.2 s a test."""
    server = RunningServer(create_app(service_of(facts_pack)))
    yield server.url
    server.stop()


BAD_BODIES = [
    ("not json", b"{'messages': oops"),
    ("not an object", b"[1, 2, 3]"),
    ("not utf-8", b'{"messages": "\xff\xfe"}'),
    ("deeply nested", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
]


@pytest.mark.parametrize("body", [b for _, b in BAD_BODIES], ids=[n for n, _ in BAD_BODIES])
def test_a_body_that_is_not_a_json_object_is_a_400(url: str, body: bytes) -> None:
    response = httpx.post(f"{url}/v1/chat/completions", content=body)
    assert _error(response, 400)["code"] == "invalid_json"


BAD_CHATS = [
    ("no messages", {"model": "vector"}),
    ("empty messages", {"messages": []}),
    ("messages not a list", {"messages": "hello"}),
    ("a message without role", {"messages": [{"content": "hi"}]}),
    ("an unknown role", {"messages": [{"role": "wizard", "content": "hi"}]}),
    ("last is the assistant", {"messages": [{"role": "assistant", "content": "hi"}]}),
    ("blank question", {"messages": [{"role": "user", "content": "  \n "}]}),
    ("only a system prompt", {"messages": [{"role": "system", "content": "be nice"}]}),
    ("content an object", {"messages": [{"role": "user", "content": {"a": 1}}]}),
    ("an image part", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
    ("stream not a bool", {**ASK, "stream": "yes"}),
    ("stream_options not an object", {**ASK, "stream": True, "stream_options": "usage"}),
    (
        "include_usage not a bool",
        {**ASK, "stream": True, "stream_options": {"include_usage": "true"}},
    ),
    ("filters not a string", {**ASK, "filters": {"title": "x"}}),
    ("unknown citation style", {**ASK, "citation_style": "latex"}),
]


@pytest.mark.parametrize("body", [b for _, b in BAD_CHATS], ids=[n for n, _ in BAD_CHATS])
def test_a_bad_chat_request_is_a_400_naming_the_field(url: str, body: dict[str, Any]) -> None:
    error = _error(httpx.post(f"{url}/v1/chat/completions", json=body), 400)
    assert error["type"] == "invalid_request_error" and error["param"]


HOSTILE_FILTERS = [
    "true) or (true",
    'title == "a" ; drop collection facts',
    "(" * 300 + 'title == "a"' + ")" * 300,
    'title == "unterminated',
    "__import__('os').system('id')",
    "title in 5",  # well-formed for a loose parser, refused by Milvus: a 400 too, not a 503
    "title like 5",
    "",  # empty: no filter at all, answered
]


@pytest.mark.parametrize("hostile", HOSTILE_FILTERS)
@pytest.mark.parametrize("path", ["chat", "retrieve"])
def test_a_hostile_filter_is_refused_with_one_line(url: str, hostile: str, path: str) -> None:
    if path == "chat":
        response = httpx.post(f"{url}/v1/chat/completions", json={**ASK, "filters": hostile})
    else:
        body = {"query": "capital", "filters": hostile}
        response = httpx.post(f"{url}/v1/retrieve", json=body)
    if not hostile:
        assert response.status_code == 200
        return
    error = _error(response, 400)
    assert "\n" not in error["message"] and "Traceback" not in error["message"]


def test_unknown_models_paths_and_methods(url: str) -> None:
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="gpt-4o"):
        api.chat.completions.create(model="gpt-4o", messages=ASK["messages"])
    error = _error(httpx.post(f"{url}/v1/chat/completions", json={**ASK, "model": "route"}), 404)
    assert error["code"] == "model_not_found" and "vector" in error["message"]
    _error(httpx.post(f"{url}/v1/retrieve", json={"query": "x", "mode": "nope"}), 404)
    _error(httpx.get(f"{url}/v1/chat/completions"), 405)
    _error(httpx.get(f"{url}/v1/embeddings"), 404)
    for top_k in (0, 51, "3", True, 2.5):
        _error(httpx.post(f"{url}/v1/retrieve", json={"query": "x", "top_k": top_k}), 400)
    _error(httpx.post(f"{url}/v1/retrieve", json={"query": ""}), 400)


def test_a_body_over_the_limit_is_a_413_and_the_server_goes_on(serve: Any, facts_pack: Any) -> None:
    url = serve(facts_pack, max_body_bytes=1_000_000)
    huge = {**ASK, "messages": [{"role": "user", "content": "a" * 2_000_000}]}
    assert _error(httpx.post(f"{url}/v1/chat/completions", json=huge), 413)["code"] == (
        "request_too_large"
    )

    def chunks() -> Any:  # no Content-Length: the limit is counted as the body arrives
        yield b'{"query": "'
        for _ in range(300):
            yield b"b" * 10_000
        yield b'"}'

    _error(httpx.post(f"{url}/v1/retrieve", content=chunks()), 413)
    assert httpx.get(f"{url}/healthz").status_code == 200
    assert httpx.post(f"{url}/v1/chat/completions", json=ASK).status_code == 200


class SlowStreamLLM(ScriptedLLM):
    """Streams its reply a token every 50 ms and records how far it got."""

    _sent: list[str] = PrivateAttr(default_factory=list)
    _closed: threading.Event = PrivateAttr(default_factory=threading.Event)
    _finished: bool = PrivateAttr(default=False)
    _cancelled: threading.Event = PrivateAttr(default_factory=threading.Event)

    async def _asplit(self, text: str) -> AsyncIterator[str]:
        try:
            for delta in self._split(text):
                await asyncio.sleep(0.05)
                self._sent.append(delta)
                yield delta
            self._finished = True
        finally:
            self._closed.set()

    async def _async_reply(self, prompt: str) -> Any:
        try:
            return await super()._async_reply(prompt)
        except asyncio.CancelledError:
            self._cancelled.set()
            raise


LONG_ANSWER = "The capital of Andorra is Andorra la Vella [1](id=1). " + "It is high. " * 200


def reopened(facts_pack: RagPack, facts_uri: str, llm: Any) -> RagPack:
    """The facts collection reopened with another LLM."""
    return RagPack.open(
        uri=facts_uri, collection_name="facts", embed_model=facts_pack.embed_model, llm=llm
    )


def test_a_client_leaving_mid_stream_stops_the_llm(
    serve: Any, facts_pack: RagPack, facts_uri: str
) -> None:
    llm = SlowStreamLLM(replies=lambda prompt: LONG_ANSWER)
    url = serve(reopened(facts_pack, facts_uri, llm))
    body = {**ASK, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        assert next(line for line in r.iter_lines() if '"content"' in line)
    # the connection is closed here, the answer not read to its end
    wait_for(llm._closed.is_set, "the LLM's stream to be stopped", timeout=30)
    assert not llm._finished and len(llm._sent) < len(LONG_ANSWER.split()) // 2
    assert httpx.get(f"{url}/healthz").status_code == 200


def test_a_client_leaving_before_the_answer_cancels_it(
    serve: Any, facts_pack: RagPack, facts_uri: str
) -> None:
    llm = SlowStreamLLM(replies=lambda prompt: LONG_ANSWER, delay=60)
    url = serve(reopened(facts_pack, facts_uri, llm))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/chat/completions", json=ASK, timeout=1.5)
    wait_for(llm._cancelled.is_set, "the LLM call to be cancelled", timeout=30)
    assert httpx.get(f"{url}/healthz").status_code == 200


class Outage:
    """A scripted LLM's replies that fail as an unreachable OpenAI server does while ``down``."""

    def __init__(self) -> None:
        self.down = True

    def __call__(self, prompt: str) -> Any:
        if self.down:
            request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
            return openai.APIConnectionError(request=request)
        return "The capital of Andorra is Andorra la Vella [1](id=1)."


def test_a_failed_llm_call_is_a_503_and_the_next_request_works(
    serve: Any, facts_pack: RagPack, facts_uri: str
) -> None:
    outage = Outage()
    url = serve(reopened(facts_pack, facts_uri, ScriptedLLM(replies=outage)))
    error = _error(httpx.post(f"{url}/v1/chat/completions", json=ASK), 503)
    assert error["code"] == "backend_unavailable" and "APIConnectionError" in error["message"]
    streamed = httpx.post(f"{url}/v1/chat/completions", json={**ASK, "stream": True})
    _error(streamed, 503)  # before the first token: a plain error, not a broken stream
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        api.chat.completions.create(model="vector", messages=ASK["messages"])
    assert httpx.get(f"{url}/healthz").status_code == 200
    outage.down = False
    answer = api.chat.completions.create(model="vector", messages=ASK["messages"])
    assert "Andorra la Vella" in answer.choices[0].message.content


@pytest.mark.integration
def test_a_lost_milvus_server_is_a_503_until_it_is_back(
    serve: Any, tmp_path: Path, embed_model: Any
) -> None:
    from serve_support import documents, facts_reply

    server = LiteServer(tmp_path / "milvus-data")
    server.start()
    try:
        pack = RagPack(
            documents(),
            uri=server.uri,
            collection_name="facts",
            embed_model=embed_model,
            llm=ScriptedLLM(replies=facts_reply),
        )
        url = serve(pack)
        question = {**ASK, "messages": [{"role": "user", "content": "Where is Andorra?"}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=question).status_code == 200
        server.kill()
        for path, body in (("chat/completions", question), ("retrieve", {"query": "Andorra"})):
            error = _error(httpx.post(f"{url}/v1/{path}", json=body, timeout=60), 503)
            assert "Milvus" in error["message"]
        assert httpx.get(f"{url}/healthz").status_code == 200
        server.start()

        def answered() -> bool:
            response = httpx.post(f"{url}/v1/chat/completions", json=question, timeout=60)
            assert response.status_code in (200, 503), response.text
            return response.status_code == 200

        wait_for(answered, "the server to answer again")
    finally:
        server.kill()


def test_on_loopback_only_loopback_host_names_are_answered(url: str) -> None:
    port = url.rsplit(":", 1)[1]
    rebound = httpx.get(f"{url}/healthz", headers={"Host": f"attacker.example:{port}"})
    assert rebound.status_code == 400  # a rebound DNS name never reaches the API
    body = {"messages": [{"role": "user", "content": "x"}]}
    refused = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Host": "evil.example"})
    assert refused.status_code == 400
    assert httpx.get(f"http://localhost:{port}/healthz").status_code == 200
    page = httpx.get(f"{url}/")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert '<script src="/static/app.js">' in page.text and "cdn" not in page.text.lower()


class BreaksMidStream(ScriptedLLM):
    """Streams three tokens, then loses its server."""

    async def _asplit(self, text: str) -> AsyncIterator[str]:
        for delta in list(self._split(text))[:3]:
            yield delta
        request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
        raise openai.APIConnectionError(request=request)


def test_a_failure_after_the_first_token_ends_the_stream_with_an_error(
    serve: Any, facts_pack: RagPack, facts_uri: str
) -> None:
    llm = BreaksMidStream(replies=lambda prompt: LONG_ANSWER)
    url = serve(reopened(facts_pack, facts_uri, llm))
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    received = []
    with pytest.raises(openai.APIError, match="unavailable"):
        for chunk in api.chat.completions.create(
            model="vector", messages=ASK["messages"], stream=True
        ):
            received.append(chunk)
    assert received and received[0].choices[0].delta.content  # the status came with a token
    assert httpx.get(f"{url}/healthz").status_code == 200
