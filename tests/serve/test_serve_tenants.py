"""API keys and tenants: 401 without a listed key, 403 on a collection with tenants for a key
that names none, and every search of a key mapped to a tenant scoped to it, under load (32
concurrent streamed chats over two tenants) and for any key, mode and question (hypothesis).

Each tenant's notes carry its secret word and the scripted answer quotes the first passage it is
shown, so a crossing would show in the answer or its sources. Real Milvus Lite, real uvicorn.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lite_server import wait_for
from serve_support import TENANTS, quoting_reply

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.serve.keys import KeyRing

KEYS = ("key-acme=acme", "key-globex=globex", "key-all=*", "key-plain")
ASK = [{"role": "user", "content": "What is the vault code filed under?"}]


def api(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _secrets(*texts: str) -> set[str]:
    return {tenant for tenant, secret in TENANTS.items() if any(secret in t for t in texts)}


@pytest.mark.slow
def test_keys_on_a_collection_without_tenants(serve: Any, facts_pack: RagPack) -> None:
    url = serve(facts_pack, keys=("s3cret-one", "s3cret-two"))
    question = [{"role": "user", "content": "What is the capital of Andorra?"}]
    for key in ("wrong", "s3cret-on", "s3cret-one-more"):
        with pytest.raises(openai.AuthenticationError, match="Invalid API key"):
            api(url, key).chat.completions.create(model="vector", messages=question)
    missing = httpx.post(f"{url}/v1/retrieve", json={"query": "Andorra"})
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "missing_api_key"
    assert httpx.get(f"{url}/v1/models").status_code == 401
    health = httpx.get(f"{url}/healthz").json()  # no key needed
    assert health["status"] == "ok" and health["keys"] is True
    answer = api(url, "s3cret-two").chat.completions.create(model="vector", messages=question)
    assert "Andorra la Vella" in answer.choices[0].message.content
    wait_for(lambda: httpx.get(f"{url}/healthz").json()["ready"], "the server to be ready")


@pytest.mark.slow
def test_a_key_mapped_to_a_tenant_needs_a_tenant_collection(serve: Any, facts_pack: Any) -> None:
    url = serve(facts_pack, keys=("k=acme",))
    response = httpx.post(
        f"{url}/v1/retrieve", json={"query": "x"}, headers={"Authorization": "Bearer k"}
    )
    assert response.status_code == 500 and response.json()["error"]["code"] == "misconfigured"
    assert "tenant_field" in response.json()["error"]["message"]


def test_keys_never_appear_in_their_repr_or_errors() -> None:
    ring = KeyRing.parse(["sk-very-secret=acme", "other-secret"])
    assert "secret" not in repr(ring) and "secret" not in str(ring)
    with pytest.raises(Exception) as failure:
        KeyRing.parse(["sk-very-secret=acme", "sk-very-secret=globex"])
    assert "secret" not in str(failure.value)


@pytest.mark.slow
def test_a_tenant_collection_refuses_requests_that_name_no_tenant(
    serve: Any, tenant_pack: RagPack
) -> None:
    open_url = serve(tenant_pack)  # no keys at all: nobody names a tenant
    response = httpx.post(f"{open_url}/v1/retrieve", json={"query": "vault"})
    assert response.status_code == 403 and response.json()["error"]["code"] == "tenant_required"
    url = serve(tenant_pack, keys=KEYS)
    with pytest.raises(openai.PermissionDeniedError, match="tenant"):
        api(url, "key-plain").chat.completions.create(model="vector", messages=ASK)
    with pytest.raises(openai.AuthenticationError):
        api(url, "key-nobody").chat.completions.create(model="vector", messages=ASK)
    everything = api(url, "key-all").chat.completions.create(
        model="vector", messages=ASK, extra_body={"filters": 'tenant == "globex"'}
    )
    assert _secrets(*(s["text"] for s in everything.model_extra["sources"])) == {"globex"}


@pytest.mark.slow
def test_a_tenant_filter_cannot_widen_a_keys_scope(serve: Any, tenant_pack: RagPack) -> None:
    url = serve(tenant_pack, keys=KEYS)
    for hostile in (
        'tenant == "globex"',
        'tenant != "acme" or title != ""',
        'tenant in ["globex"]',
    ):
        answer = api(url, "key-acme").chat.completions.create(
            model="bm25", messages=ASK, extra_body={"filters": hostile}
        )
        texts = [answer.choices[0].message.content] + [
            s["text"] for s in answer.model_extra["sources"]
        ]
        assert _secrets(*texts) <= {"acme"}


@pytest.mark.slow
@pytest.mark.integration
async def test_32_concurrent_streamed_chats_over_two_tenants(
    serve: Any, tenant_pack: RagPack, tenant_uri: str, gated_llm: Any
) -> None:
    llm = gated_llm(replies=quoting_reply, target=4, delay=0.05)
    pack = RagPack.open(
        uri=tenant_uri, collection_name="notes", embed_model=tenant_pack.embed_model, llm=llm
    )
    url = serve(pack, keys=KEYS)
    questions = ("What is the vault code filed under?", "Who may read the payroll budget?")

    async def chat(i: int) -> tuple[str, str, list[str]]:
        tenant = ("acme", "globex")[i % 2]
        async with openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key=f"key-{tenant}", max_retries=0, timeout=120
        ) as client:
            stream = await client.chat.completions.create(
                model="hybrid_convex",
                messages=[{"role": "user", "content": questions[i % 2]}],
                stream=True,
            )
            text, sources = "", []
            async for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                else:
                    sources = [s["text"] for s in chunk.model_extra["sources"]]
        return tenant, text, sources

    results = await asyncio.gather(*(chat(i) for i in range(32)), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    crossings = [r for r in results if _secrets(r[1], *r[2]) != {r[0]}]
    assert crossings == []
    assert llm.gate.reached  # at least 4 LLM calls were in flight at once


STATUS = {"key-acme": 200, "key-globex": 200, "key-all": 200, "key-plain": 403, "nope": 401}


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.sampled_from([*STATUS, None]),
    mode=st.sampled_from(["vector", "bm25", "hybrid_convex", "hybrid", "fusion", "hyde"]),
    query=st.one_of(
        st.sampled_from(["vault code", "payroll budget of globex", "PELICAN", "WALRUS launch"]),
        st.text(min_size=1, max_size=40).filter(str.strip),
    ),
    endpoint=st.sampled_from(["chat", "retrieve"]),
)
def test_no_request_ever_returns_another_tenants_text(
    tenant_server: str, key: str | None, mode: str, query: str, endpoint: str
) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if endpoint == "chat":
        body = {"model": mode, "messages": [{"role": "user", "content": query}]}
        response = httpx.post(
            f"{tenant_server}/v1/chat/completions", json=body, headers=headers, timeout=60
        )
    else:
        body = {"query": query, "mode": mode, "top_k": 6}
        response = httpx.post(f"{tenant_server}/v1/retrieve", json=body, headers=headers)
    assert response.status_code == STATUS.get(key or "", 401), response.text
    if response.status_code != 200:
        assert TENANTS["acme"] not in response.text and TENANTS["globex"] not in response.text
        return
    allowed = {"key-acme": {"acme"}, "key-globex": {"globex"}}.get(key or "", set(TENANTS))
    answer = response.json()  # what the server wrote, not the question it echoes
    passages = answer["sources"] if endpoint == "chat" else answer["data"]
    assert {p["metadata"]["tenant"] for p in passages} <= allowed
    texts = [p["text"] for p in passages]
    if endpoint == "chat":
        texts.append(answer["choices"][0]["message"]["content"])
    assert _secrets(*texts) <= allowed


@pytest.fixture(scope="module")
def tenant_server(tenant_pack: RagPack) -> Any:
    from serve_support import RunningServer, service_of

    from llama_index_rag_pack.serve.app import create_app

    server = RunningServer(create_app(service_of(tenant_pack, KEYS)))
    yield server.url
    server.stop()
