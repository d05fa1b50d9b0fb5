"""Fixtures of the ``rag-pack serve`` tests: real packs on Milvus Lite with the real embedding
model, served by a real uvicorn on 127.0.0.1 in a thread of the test process, so the tests can
script the LLM and still call over HTTP with the official ``openai`` and ``mcp`` clients.

* ``facts_pack`` (module): five short articles, a scripted LLM that answers the way a model does
  (a condensed question with a preamble; an answer citing the passage that holds the fact).
* ``tenant_pack`` (module): a collection with tenants ``acme`` and ``globex``, each note marked
  with its tenant's secret word; the scripted answer quotes the first passage it is shown.
* ``serve(pack_or_service, **create_app_kwargs)``: starts a server, returns its base URL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from serve_support import (
    RunningServer,
    documents,
    facts_reply,
    quoting_reply,
    service_of,
    tenant_documents,
)

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.serve.app import create_app
from llama_index_rag_pack.serve.service import PackService
from llama_index_rag_pack.testing import ScriptedLLM


@pytest.fixture(scope="module")
def facts_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where ``facts_pack`` stores its collection ``facts`` (reopen it with another LLM)."""
    return str(tmp_path_factory.mktemp("serve") / "facts.db")


@pytest.fixture(scope="module")
def facts_pack(facts_uri: str, embed_model: Any) -> RagPack:
    return RagPack(
        documents(),
        uri=facts_uri,
        collection_name="facts",
        overwrite=True,
        embed_model=embed_model,
        llm=ScriptedLLM(replies=facts_reply),
        similarity_top_k=3,
    )


@pytest.fixture(scope="module")
def tenant_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where ``tenant_pack`` stores its collection ``notes``."""
    return str(tmp_path_factory.mktemp("serve") / "tenants.db")


@pytest.fixture(scope="module")
def tenant_pack(tenant_uri: str, embed_model: Any) -> RagPack:
    return RagPack(
        tenant_documents(),
        uri=tenant_uri,
        collection_name="notes",
        overwrite=True,
        tenant_field="tenant",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=quoting_reply),
        similarity_top_k=3,
    )


@pytest.fixture()
def serve() -> Iterator[Callable[..., str]]:
    """``serve(pack_or_service, keys=(), **create_app_kwargs) -> base URL``."""
    servers: list[RunningServer] = []

    def start(target: Any, keys: Any = (), **kwargs: Any) -> str:
        service = target if isinstance(target, PackService) else service_of(target, keys)
        servers.append(RunningServer(create_app(service, **kwargs)))
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()
