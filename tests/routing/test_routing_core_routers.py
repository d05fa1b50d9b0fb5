"""Our selectors built the LlamaIndex way (``from_defaults``), inside core's ``RouterQueryEngine``
and ``RouterRetriever`` over stock in-memory ``VectorStoreIndex``es (no Milvus), sync and async."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.retrievers import RouterRetriever
from llama_index.core.schema import TextNode
from llama_index.core.tools import QueryEngineTool, RetrieverTool
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.routing.logical_selector import LogicalSelector
from llama_index_rag_pack.routing.routes import RouteSelection
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector
from llama_index_rag_pack.testing import ScriptedLLM

DOCS = {
    "space": [
        "The Moon orbits the Earth every 27 days and causes the ocean tides.",
        "Jupiter is the largest planet in the Solar System, a gas giant with a great red spot.",
        "Black holes form when massive stars collapse; not even light escapes them.",
    ],
    "food": [
        "Bread dough rises because yeast ferments sugar and releases carbon dioxide.",
        "Caramelising onions takes about forty minutes over low heat.",
        "A soft boiled egg needs about six minutes in boiling water.",
    ],
}
DESCRIPTIONS = {
    "space": "Astronomy: planets, stars, the Moon, light and black holes",
    "food": "Cooking: recipes, bread, rice, eggs and onions",
}
QUESTION = "How long do onions take to caramelise?"
FOOD_REPLY = '{"routes": ["food"], "reason": "It is about cooking onions."}'


@pytest.fixture(scope="module")
def indexes(embed_model: Any) -> dict[str, VectorStoreIndex]:
    return {
        name: VectorStoreIndex(
            [TextNode(text=t, id_=f"{name}-{i}") for i, t in enumerate(texts)],
            embed_model=embed_model,
        )
        for name, texts in DOCS.items()
    }


def _query_engine_tools(
    indexes: dict[str, VectorStoreIndex], *, forbid_sync: bool = False
) -> list[QueryEngineTool]:
    """One stock query engine per index; each answers with its own name."""
    return [
        QueryEngineTool(
            query_engine=index.as_query_engine(
                llm=ScriptedLLM(default_reply=f"From the {name} index.", forbid_sync=forbid_sync),
                similarity_top_k=2,
            ),
            metadata=ToolMetadata(name=name, description=DESCRIPTIONS[name]),
        )
        for name, index in indexes.items()
    ]


def _retriever_tools(indexes: dict[str, VectorStoreIndex]) -> list[RetrieverTool]:
    return [
        RetrieverTool(
            retriever=index.as_retriever(similarity_top_k=2),
            metadata=ToolMetadata(name=name, description=DESCRIPTIONS[name]),
        )
        for name, index in indexes.items()
    ]


def _assert_answered_from_food(response: Any) -> None:
    assert str(response) == "From the food index."
    assert [n.node.node_id.split("-")[0] for n in response.source_nodes] == ["food", "food"]
    selection = response.metadata["selector_result"]
    assert isinstance(selection, RouteSelection) and selection.names == ["food"]


# =========================================================================== SemanticSelector
def test_semantic_from_defaults_in_core_router_query_engine(
    indexes: dict[str, VectorStoreIndex], embed_model: Any
) -> None:
    engine = RouterQueryEngine(
        selector=SemanticSelector.from_defaults(embed_model=embed_model, threshold=0.1),
        query_engine_tools=_query_engine_tools(indexes),
        llm=ScriptedLLM(replies=[]),
    )
    _assert_answered_from_food(engine.query(QUESTION))


async def test_semantic_from_defaults_in_core_router_query_engine_async(
    indexes: dict[str, VectorStoreIndex], embed_model: Any
) -> None:
    engine = RouterQueryEngine(
        selector=SemanticSelector.from_defaults(embed_model=embed_model, threshold=0.1),
        query_engine_tools=_query_engine_tools(indexes, forbid_sync=True),
        llm=ScriptedLLM(replies=[], forbid_sync=True),
    )
    _assert_answered_from_food(await engine.aquery(QUESTION))


def test_semantic_from_defaults_in_core_router_retriever(
    indexes: dict[str, VectorStoreIndex], embed_model: Any
) -> None:
    router = RouterRetriever(
        selector=SemanticSelector.from_defaults(embed_model, top_k=2, threshold=-1.0),
        retriever_tools=_retriever_tools(indexes),
        llm=ScriptedLLM(replies=[]),
    )
    nodes = router.retrieve("Which planet is the largest?")
    assert {n.node.node_id.split("-")[0] for n in nodes} == {"space", "food"}  # both routes
    assert any("Jupiter" in n.node.get_content() for n in nodes)


async def test_semantic_from_defaults_in_core_router_retriever_async(
    indexes: dict[str, VectorStoreIndex], embed_model: Any
) -> None:
    selector = SemanticSelector.from_defaults(embed_model, threshold=0.1)
    router = RouterRetriever(
        selector=selector, retriever_tools=_retriever_tools(indexes), llm=ScriptedLLM(replies=[])
    )
    nodes = await router.aretrieve("Which planet is the largest?")
    assert [n.node.node_id.split("-")[0] for n in nodes] == ["space", "space"]
    assert "Jupiter" in nodes[0].node.get_content()
    assert selector.text_embedding_count == len(DESCRIPTIONS)  # route texts embedded once


def test_semantic_from_defaults_without_an_embed_model_uses_the_pack_default(
    embed_model: Any,
) -> None:
    assert getattr(Settings, "_embed_model", None) is None, "a test leaked Settings.embed_model"
    assert SemanticSelector.from_defaults().embed_model is embed_model  # the bundled MiniLM


def test_semantic_from_defaults_follows_llama_index_settings_embed_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configured = MockEmbedding(embed_dim=384)
    monkeypatch.setattr(Settings, "_embed_model", configured)
    assert SemanticSelector.from_defaults().embed_model is configured


# =========================================================================== LogicalSelector
def test_logical_from_defaults_follows_settings_llm_in_core_router_retriever(
    indexes: dict[str, VectorStoreIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = ScriptedLLM(replies=[FOOD_REPLY])
    monkeypatch.setattr(Settings, "_llm", configured)
    selector = LogicalSelector.from_defaults()  # llm=None: Settings.llm, as in core
    assert selector.llm is configured
    router = RouterRetriever(selector=selector, retriever_tools=_retriever_tools(indexes))
    nodes = router.retrieve(QUESTION)
    assert [n.node.node_id.split("-")[0] for n in nodes] == ["food", "food"]
    assert "Caramelising onions" in nodes[0].node.get_content()
    assert configured.call_count == 1 and QUESTION in configured.prompts[0]


async def test_logical_from_defaults_in_core_router_retriever_async(
    indexes: dict[str, VectorStoreIndex],
) -> None:
    llm = ScriptedLLM(replies=[FOOD_REPLY], forbid_sync=True)
    router = RouterRetriever(
        selector=LogicalSelector.from_defaults(llm),
        retriever_tools=_retriever_tools(indexes),
        llm=ScriptedLLM(replies=[], forbid_sync=True),
    )
    nodes = await router.aretrieve(QUESTION)
    assert [n.node.node_id.split("-")[0] for n in nodes] == ["food", "food"]
    assert llm.call_count == 1


def test_logical_from_defaults_in_core_router_query_engine(
    indexes: dict[str, VectorStoreIndex],
) -> None:
    llm = ScriptedLLM(replies=["The best source is food."])
    engine = RouterQueryEngine(
        selector=LogicalSelector.from_defaults(llm=llm, fallback="space"),
        query_engine_tools=_query_engine_tools(indexes),
        llm=ScriptedLLM(replies=[]),
    )
    _assert_answered_from_food(engine.query(QUESTION))


async def test_logical_from_defaults_in_core_router_query_engine_async(
    indexes: dict[str, VectorStoreIndex],
) -> None:
    prompt = "Sources:\n{context_list}\nQuestion: {query_str}\nPick {max_outputs}: {example_name}"
    llm = ScriptedLLM(replies=[FOOD_REPLY], forbid_sync=True)
    engine = RouterQueryEngine(
        selector=LogicalSelector.from_defaults(llm, prompt_template_str=prompt),
        query_engine_tools=_query_engine_tools(indexes, forbid_sync=True),
        llm=ScriptedLLM(replies=[], forbid_sync=True),
    )
    _assert_answered_from_food(await engine.aquery(QUESTION))
    assert llm.prompts[0].startswith("Sources:\n1. space: Astronomy")
