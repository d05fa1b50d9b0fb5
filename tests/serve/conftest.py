"""Fixtures of the ``rag-pack serve`` tests: real packs on Milvus Lite with the real embedding
model, served by a real uvicorn on 127.0.0.1 in a thread of the test process, so the tests can
script the LLM and still call over HTTP with the official ``openai`` and ``mcp`` clients.

* ``facts_pack`` (module): five short articles, a scripted LLM that answers the way a model does
  (a condensed question with a preamble; an answer citing the passage that holds the fact).
* ``tenant_pack`` (module): a collection with tenants ``acme`` and ``globex``, each note marked
  with its tenant's secret word; the scripted answer quotes the first passage it is shown.
* ``serve(pack_or_service, **create_app_kwargs)``: starts a server, returns its base URL.
* ``indexed_articles`` (session): the articles indexed by ``rag-pack index`` in its own process
  (collection ``facts``); ``copy_of_indexed(tmp_path)`` gives a test its own copy to serve from
  another process (a Lite database has one process at a time).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
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


@pytest.fixture(scope="session")
def indexed_articles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The articles as files, indexed by ``rag-pack index`` in its own process, once per worker
    (the HTTP and the MCP stdio commands serve it; ``copy_of_indexed``)."""
    folder = tmp_path_factory.mktemp("articles")
    for doc in documents():
        (folder / f"{doc.metadata['title']}.txt").write_text(doc.text, encoding="utf-8")
    uri = tmp_path_factory.mktemp("indexed") / "articles.db"
    rag_pack = shutil.which("rag-pack") or str(Path(sys.executable).parent / "rag-pack")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAG_PACK_LLM"))}
    done = subprocess.run(
        [rag_pack, "--uri", str(uri), "--collection", "facts", "index", str(folder)],
        env={**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return uri


@pytest.fixture()
def copy_of_indexed(indexed_articles: Path) -> Callable[[Path], str]:
    """``copy_of_indexed(directory) -> uri``: a copy of ``indexed_articles`` of the caller's own."""

    def copy(directory: Path) -> str:
        target = directory / indexed_articles.name
        shutil.copytree(indexed_articles, target)
        return str(target)

    return copy
