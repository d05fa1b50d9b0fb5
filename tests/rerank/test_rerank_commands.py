"""``--rerank`` on the commands, with a fake rerank server on 127.0.0.1: ``rag-pack ask``
reranks and says so, ``rag-pack eval``'s reranked twins score like any strategy, and
``rag-pack serve``'s OpenAI-compatible API answers from reranked passages (the official
``openai`` client). Real Milvus Lite and embedding model; the LLM is scripted."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_rerank_server import FakeRerankServer, cleared, fake_score, serve_module
from llama_index.core import Document

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.evaluation.harness import EvalHarness
from llama_index_rag_pack.evaluation.labelled import LabelledExample, LabelledSet
from llama_index_rag_pack.evaluation.strategies import reranked_strategies, resolve_strategies
from llama_index_rag_pack.pack.rag_pack import RagPack
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

rerank_server_module = pytest.fixture(scope="module")(serve_module)
rerank_server = pytest.fixture()(cleared)

DOCS = {
    "aardvark": "The aardvark eats ants and termites at night.",
    "anteater": "The anteater eats ants with its long tongue.",
    "koala": "The koala eats eucalyptus leaves.",
    "panda": "The panda eats bamboo for most of the day.",
    "milvus": "Milvus is a vector database.",
    "abacus": "The abacus is a calculating tool.",
}
QUESTION = "Which animal eats termites at night?"


def _documents() -> list[Document]:
    return [Document(id_=k, text=v, metadata={"title": k}) for k, v in DOCS.items()]


def _answer(prompt: str) -> str:
    if "Standalone question:" in prompt:
        return QUESTION
    return "The aardvark eats termites [1](id=1)."


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> str:
    uri = str(tmp_path_factory.mktemp("rerank-cli") / "animals.db")
    RagPack(_documents(), uri=uri, embed_model=embed_model, llm=ScriptedLLM(replies=[]))
    return uri


@pytest.fixture()
def scripted_models(monkeypatch: pytest.MonkeyPatch, embed_model: Any) -> None:
    llm = ScriptedLLM(replies=_answer)
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings._load_local_embedding", lambda *a: embed_model
    )


def test_ask_rerank_url(
    uri: str, scripted_models: None, rerank_server: FakeRerankServer, capsys: Any
) -> None:
    url = f"{rerank_server.url}/tei/rerank"
    argv = ["--uri", uri, "ask", QUESTION, "--mode", "vector", "--top-k", "2", "--no-stream"]
    code = main([*argv, "--rerank", url, "--answer-style", "generative"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"rerank    : rerank endpoint {url} (API found from the answers), 4 x top_k" in out
    assert "aardvark eats termites" in out
    [request] = rerank_server.requests
    assert request["body"]["query"] == QUESTION and len(request["body"]["texts"]) == 6
    # a failing endpoint: one error line, or the first-stage order with --rerank-fallback keep
    dead = f"{rerank_server.url}/fail/500"
    assert main([*argv, "--rerank", f"tei+{dead}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: The rerank endpoint {dead} answered HTTP 500: CUDA out of memory"
    )
    assert main([*argv, "--rerank", f"tei+{dead}", "--rerank-fallback", "keep"]) == 0


def test_eval_scores_the_reranked_twins_like_any_strategy(
    tmp_path: Path, embed_model: Any, rerank_server: FakeRerankServer
) -> None:
    examples = [
        LabelledExample(
            id="q1", question=QUESTION, answers=("aardvark",), relevant_ids=("aardvark",)
        ),
        LabelledExample(
            id="q2",
            question="Which animal eats bamboo?",
            answers=("panda",),
            relevant_ids=("panda",),
        ),
    ]
    harness = EvalHarness(
        LabelledSet("tiny", examples, corpus="custom"),
        documents=_documents(),
        embed_model=embed_model,
        llm="none",
        cache_dir=tmp_path,
        top_k=2,
        ks=(1, 2),
    )
    url = f"{rerank_server.url}/v1/rerank"
    strategies = reranked_strategies(resolve_strategies("vector,bm25"), url)
    report = harness.run(strategies)
    rows = {row.strategy.name: row for row in report.rows}
    assert list(rows) == ["vector", "vector+rerank", "bm25", "bm25+rerank"]
    assert all(row.status == "ok" for row in rows.values())
    assert len(rerank_server.requests) == 4  # two questions, two reranked strategies
    assert "vector+rerank" in report.to_markdown()


class _Uvicorn:
    """uvicorn serving an app on 127.0.0.1 in a thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def test_serve_answers_from_reranked_passages_through_the_openai_client(
    uri: str, embed_model: Any, rerank_server: FakeRerankServer
) -> None:
    openai = pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from llama_index_rag_pack.serve.app import create_app
    from llama_index_rag_pack.serve.service import PackService

    pack = RagPack.open(
        uri=uri,
        embed_model=embed_model,
        llm=ScriptedLLM(replies=_answer),
        similarity_top_k=2,
        rerank=f"{rerank_server.url}/v1/rerank",
    )
    server = _Uvicorn(create_app(PackService(lambda: pack, answer_style="generative")))
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        rerank_server.requests.clear()
        completion = client.chat.completions.create(
            model="vector", messages=[{"role": "user", "content": QUESTION}]
        )
        sources = completion.model_extra["sources"]
        [request] = rerank_server.requests
        best = sorted(request["body"]["documents"], key=lambda t: -fake_score(QUESTION, t))[:2]
        assert [s["text"] for s in sources] == best
        assert [s["score"] for s in sources] == [fake_score(QUESTION, t) for t in best]
        assert "aardvark" in completion.choices[0].message.content
        found = httpx.post(
            f"{server.url}/v1/retrieve", json={"query": QUESTION, "mode": "bm25", "top_k": 2}
        ).json()
        texts = rerank_server.requests[-1]["body"]["documents"]
        assert [p["text"] for p in found["data"]] == sorted(
            texts, key=lambda t: -fake_score(QUESTION, t)
        )[:2]
    finally:
        server.stop()


def test_ask_route_with_rerank_is_refused_in_one_line(
    uri: str, scripted_models: None, rerank_server: FakeRerankServer, capsys: Any
) -> None:
    code = main(["--uri", uri, "ask", QUESTION, "--route", "--rerank", rerank_server.url])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: --rerank does not apply to --route answers yet."
    )
    assert rerank_server.requests == []
