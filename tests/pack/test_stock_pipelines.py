"""The components inside LlamaIndex's own pipelines, as a LlamaIndex user wires them: a stock
in-memory ``VectorStoreIndex``, ``Settings.llm`` and ``Settings.embed_model`` set, no RagPack and
no Milvus. ``llm=None`` and ``embed_model=None`` must mean "what Settings holds", as in core."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.query_engine import RetrieverQueryEngine, RouterQueryEngine
from llama_index.core.tools import QueryEngineTool

from llama_index_rag_pack import (
    CitationPostprocessor,
    CitedQueryEngine,
    FusionRetriever,
    HyDERetriever,
    RewriteRetriever,
    Route,
    SemanticSelector,
)
from llama_index_rag_pack.testing import ScriptedLLM

DOCS = [
    Document(id_="moon", text="The Moon orbits the Earth every 27 days and drives the tides."),
    Document(id_="bread", text="Bread dough rises because yeast ferments sugar into gas."),
    Document(id_="bm25", text="Okapi BM25 is a ranking function search engines use."),
    Document(id_="paris", text="Paris is the capital and largest city of France."),
]
QUESTION = "Why does bread dough rise?"


def reply(prompt: str) -> str:
    lowered = prompt.lower()
    if "search queries" in lowered:
        return "1. yeast dough rising\n2. why bread rises"
    if "passage" in lowered:
        return "Passage: dough rises when yeast ferments sugar and releases carbon dioxide."
    if "search query" in lowered or "rewrite" in lowered:
        return "yeast fermentation bread dough"
    if "standalone question" in lowered or "chat history" in lowered:
        return QUESTION
    return "Yeast ferments sugar into gas, so the dough rises [1](id=1)."


@pytest.fixture()
def settings_embed(embed_model: Any) -> Any:
    """The bundled model as another object than the pack's own default, so a test can tell
    which one a component picked."""
    copy = embed_model.model_copy()
    assert copy is not embed_model
    return copy


@pytest.fixture()
def llm(settings_embed: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLM]:
    """Settings.llm and Settings.embed_model set the way a user does (restored afterwards)."""
    scripted = ScriptedLLM(replies=reply)
    monkeypatch.setattr(Settings, "_llm", scripted)
    monkeypatch.setattr(Settings, "_embed_model", settings_embed)
    yield scripted


@pytest.fixture()
def index(llm: ScriptedLLM) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(DOCS)


def _doc_ids(nodes: list[Any]) -> list[str]:
    return [n.node.ref_doc_id for n in nodes]


def test_fusion_over_a_stock_retriever_uses_settings_llm(index, llm) -> None:
    fusion = FusionRetriever([index.as_retriever(similarity_top_k=2)], num_queries=3)
    assert fusion.llm is llm
    nodes = fusion.retrieve(QUESTION)
    assert _doc_ids(nodes)[0] == "bread"
    assert llm.call_count == 1
    assert _doc_ids(asyncio.run(fusion.aretrieve(QUESTION)))[0] == "bread"


def test_hyde_and_rewrite_over_a_stock_retriever_use_settings_models(
    index, llm, settings_embed
) -> None:
    hyde = HyDERetriever(index.as_retriever(similarity_top_k=2))
    assert hyde.llm is llm and hyde.embed_model is settings_embed
    assert _doc_ids(hyde.retrieve(QUESTION))[0] == "bread"
    rewrite = RewriteRetriever(index.as_retriever(similarity_top_k=2))
    assert rewrite.llm is llm
    assert _doc_ids(asyncio.run(rewrite.aretrieve(QUESTION)))[0] == "bread"


def test_fusion_inside_core_query_and_chat_engines(index, llm) -> None:
    fusion = FusionRetriever([index.as_retriever(similarity_top_k=2)], num_queries=2)
    engine = RetrieverQueryEngine.from_args(fusion)
    response = engine.query(QUESTION)
    assert "dough rises" in str(response)
    assert _doc_ids(response.source_nodes)[0] == "bread"
    chat = CondensePlusContextChatEngine.from_defaults(fusion)
    answer = chat.chat(QUESTION)
    assert "dough rises" in str(answer)
    assert _doc_ids(answer.source_nodes)[0] == "bread"


def test_citation_postprocessor_in_a_stock_query_engine(index, llm) -> None:
    engine = index.as_query_engine(
        similarity_top_k=2,
        node_postprocessors=[CitationPostprocessor(granularity="sentence", chunk_size=32)],
    )
    response = engine.query(QUESTION)
    assert response.source_nodes
    # each source is a piece cut from a retrieved node, linked back to it
    for source in response.source_nodes:
        assert source.node.get_content() in " ".join(d.text for d in DOCS)
    asynchronous = asyncio.run(engine.aquery(QUESTION))
    assert [s.node.get_content() for s in asynchronous.source_nodes] == [
        s.node.get_content() for s in response.source_nodes
    ]


def test_cited_query_engine_with_settings_llm(index, llm) -> None:
    engine = CitedQueryEngine(index.as_retriever(similarity_top_k=2))
    response = engine.query(QUESTION)
    assert "[1]" in str(response)
    assert _doc_ids(response.source_nodes) == ["bread"]
    asynchronous = asyncio.run(engine.aquery(QUESTION))
    assert _doc_ids(asynchronous.source_nodes) == ["bread"]


def test_semantic_selector_inside_core_router_query_engine(index, llm, settings_embed) -> None:
    baking = QueryEngineTool.from_defaults(
        index.as_query_engine(similarity_top_k=1),
        name="baking",
        description="Baking and cooking: bread, dough, yeast",
    )
    space = QueryEngineTool.from_defaults(
        index.as_query_engine(similarity_top_k=1),
        name="space",
        description="Astronomy: the Moon, planets and tides",
    )
    selector = SemanticSelector(
        [
            Route("baking", "Baking and cooking: bread, dough, yeast"),
            Route("space", "Astronomy: the Moon, planets and tides"),
        ],
    )
    assert selector.embed_model is settings_embed
    router = RouterQueryEngine(selector=selector, query_engine_tools=[baking, space])
    response = router.query(QUESTION)
    assert response.metadata["selector_result"].selections[0].index == 0
    assert "dough rises" in str(response)
    asynchronous = asyncio.run(router.aquery("How often does the Moon orbit the Earth?"))
    assert asynchronous.metadata["selector_result"].selections[0].index == 1
