"""``RagPack(rerank=...)`` end to end: real Milvus Lite and the bundled embedding model, a fake
rerank server, the scripted LLM. Every mode reranks ``4 x top_k`` candidates down to ``top_k``
(once, also where a mode searches through a base mode), sync and async alike; the chat engine's
sources are the reranked ones; ``rerank=False`` and ``rerank_fallback="keep"``; a local
cross-encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_rerank_server import FakeRerankServer, cleared, fake_score, serve_module
from llama_index.core import Document

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.errors import ConfigurationError, RerankError
from llama_index_rag_pack.rerank.reranker_base import RERANK_SCORE_KEY
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

rerank_server_module = pytest.fixture(scope="module")(serve_module)
rerank_server = pytest.fixture()(cleared)

ANIMALS = [
    "The aardvark eats ants and termites at night.",
    "The anteater eats ants with its long tongue.",
    "The pangolin eats ants and is covered in scales.",
    "The armadillo eats insects and digs burrows.",
    "The aardwolf eats termites, not meat.",
    "The numbat eats termites in western Australia.",
    "The echidna eats ants and lays eggs.",
    "The sloth eats leaves and moves slowly.",
    "The koala eats eucalyptus leaves.",
    "The panda eats bamboo for most of the day.",
    "Milvus is a vector database.",
    "The abacus is a calculating tool.",
]
QUESTION = "Which animal eats termites at night?"


def _reply(prompt: str) -> str:
    if "Standalone question:" in prompt:
        return QUESTION
    if "hypothetical" in prompt.lower() or "passage" in prompt.lower():
        return "The aardvark eats termites at night."
    return "The aardvark eats termites [1](id=1)."


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> str:
    uri = str(tmp_path_factory.mktemp("rerank") / "animals.db")
    docs = [Document(text=t, id_=f"d{i}") for i, t in enumerate(ANIMALS)]
    RagPack(docs, uri=uri, embed_model=embed_model, llm=ScriptedLLM(replies=[]))
    return uri


def _open(uri: str, embed_model: Any, **kwargs: Any) -> RagPack:
    return RagPack.open(
        uri=uri,
        embed_model=embed_model,
        llm=ScriptedLLM(replies=_reply),
        similarity_top_k=2,
        **kwargs,
    )


def _best(texts: list[str], k: int = 2) -> list[str]:
    return sorted(texts, key=lambda t: -fake_score(QUESTION, t))[:k]


@pytest.mark.parametrize("mode", ["vector", "bm25", "hybrid", "hybrid_convex", "hyde", "rewrite"])
async def test_every_mode_reranks_its_candidates_once(
    uri: str, embed_model: Any, rerank_server: FakeRerankServer, mode: str
) -> None:
    pack = _open(uri, embed_model, rerank=f"tei+{rerank_server.url}/tei/rerank")
    plain = pack.retriever(mode, rerank=False, similarity_top_k=8).retrieve(QUESTION)
    rerank_server.requests.clear()
    nodes = pack.retriever(mode).retrieve(QUESTION)
    [request] = rerank_server.requests  # one rerank, of the mode's 8 candidates
    assert request["body"]["query"] == QUESTION
    candidates = request["body"]["texts"]
    assert len(candidates) == 8 and set(candidates) == {n.node.text for n in plain}
    assert [n.node.text for n in nodes] == _best(candidates)
    assert [n.score for n in nodes] == [n.node.metadata[RERANK_SCORE_KEY] for n in nodes]
    anodes = await pack.retriever(mode).aretrieve(QUESTION)
    assert [(n.node.text, n.score) for n in anodes] == [(n.node.text, n.score) for n in nodes]


def test_the_answer_and_the_chat_engine_cite_reranked_chunks(
    uri: str, embed_model: Any, rerank_server: FakeRerankServer
) -> None:
    pack = _open(uri, embed_model, rerank=f"{rerank_server.url}/v1/rerank", rerank_top_n=6)
    assert pack.describe()["rerank"] == (
        f"rerank endpoint {rerank_server.url}/v1/rerank (API found from the answers), 6 candidates"
    )
    response = pack.run(QUESTION, mode="vector", answer_style="generative")
    assert len(rerank_server.requests[-1]["body"]["documents"]) == 6
    assert all(RERANK_SCORE_KEY in n.node.metadata for n in response.source_nodes)
    rerank_server.requests.clear()
    chat = pack.make_chat_engine("hybrid_convex", answer_style="generative")
    reply = chat.chat(QUESTION)
    assert "aardvark" in str(reply)
    [request] = rerank_server.requests
    best = _best(request["body"]["documents"])
    assert {n.node.text for n in reply.source_nodes} <= set(best)
    assert all(RERANK_SCORE_KEY in n.node.metadata for n in reply.source_nodes)


async def test_fallback_keep_returns_the_first_stage(
    uri: str, embed_model: Any, rerank_server: FakeRerankServer
) -> None:
    url = f"tei+{rerank_server.url}/fail/500"
    keep = _open(uri, embed_model, rerank=url, rerank_fallback="keep")
    plain = [n.node.text for n in keep.retriever("vector", rerank=False).retrieve(QUESTION)]
    assert [n.node.text for n in keep.retriever("vector").retrieve(QUESTION)] == plain
    assert [n.node.text for n in await keep.retriever("vector").aretrieve(QUESTION)] == plain
    strict = _open(uri, embed_model, rerank=url)
    with pytest.raises(RerankError, match="answered HTTP 500: CUDA out of memory"):
        strict.retriever("vector").retrieve(QUESTION)


def test_a_call_names_its_own_reranker_and_bad_settings_fail_at_once(
    uri: str, embed_model: Any, rerank_server: FakeRerankServer
) -> None:
    pack = _open(uri, embed_model)
    assert "rerank" not in pack.describe()
    nodes = pack.retriever("bm25", rerank=f"{rerank_server.url}/tei/rerank").retrieve(QUESTION)
    assert len(rerank_server.requests[-1]["body"]["texts"]) == 8 and len(nodes) == 2
    with pytest.raises(ConfigurationError, match=r"rerank_top_n \(1\) must be >= similarity_top_k"):
        _open(uri, embed_model, rerank=rerank_server.url, rerank_top_n=1).retriever("vector")
    with pytest.raises(ConfigurationError, match="neither an http"):
        _open(uri, embed_model, rerank="localhost:8080")
    with pytest.raises(ConfigurationError, match="fallback must be one of raise, keep"):
        _open(uri, embed_model, rerank=rerank_server.url, rerank_fallback="skip")


def test_a_local_cross_encoder_reranks_offline(uri: str, embed_model: Any, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    from llama_index_rag_pack.models.settings import bundled_embed_model_path

    # a cross-encoder made from the bundled MiniLM (its scoring head is new): nothing downloads
    CrossEncoder(str(bundled_embed_model_path()), num_labels=1, local_files_only=True).save(
        str(tmp_path / "ce")
    )
    pack = _open(uri, embed_model, rerank=f"local:{tmp_path / 'ce'}")
    assert pack.describe()["rerank"].startswith(f"local cross-encoder {tmp_path / 'ce'}")
    nodes = pack.retriever("vector").retrieve(QUESTION)
    candidates = pack.retriever("vector", rerank=False, similarity_top_k=8).retrieve(QUESTION)
    model = CrossEncoder(str(tmp_path / "ce"), local_files_only=True)
    texts = [n.node.text for n in candidates]
    scores = model.predict([(QUESTION, t) for t in texts])
    expected = [t for _, t in sorted(zip(scores, texts, strict=True), key=lambda p: -p[0])][:2]
    assert [n.node.text for n in nodes] == expected
