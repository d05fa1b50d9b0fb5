"""FusionRouterRetriever over real Milvus Lite collections; PromptRouter; core router interop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.retrievers import RouterRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.tools import RetrieverTool
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.rank_fusion import reciprocal_rank_fusion
from llama_index_rag_pack.milvus.connection import flush, open_vector_store
from llama_index_rag_pack.routing.logical_selector import LogicalSelector
from llama_index_rag_pack.routing.prompt_router import PromptRouter
from llama_index_rag_pack.routing.router import FusionRouterRetriever
from llama_index_rag_pack.routing.routes import Route
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector
from llama_index_rag_pack.testing import ScriptedLLM

# MilvusVectorStore binds its async client to the event loop of its first async call: the async
# tests of this module share one loop because they share the module's collections.
SHARED_LOOP = pytest.mark.asyncio(loop_scope="module")

DOCS = {
    "space": [
        "The Moon orbits the Earth every 27 days and causes the ocean tides.",
        "Jupiter is the largest planet in the Solar System, a gas giant with a great red spot.",
        "A light year is the distance light travels in one year, about 9.46 trillion kilometres.",
        "Black holes form when massive stars collapse; not even light escapes them.",
    ],
    "food": [
        "Bread dough rises because yeast ferments sugar and releases carbon dioxide.",
        "Risotto is made by slowly adding hot stock to arborio rice while stirring.",
        "Caramelising onions takes about forty minutes over low heat.",
        "A soft boiled egg needs about six minutes in boiling water.",
    ],
}
DESCRIPTIONS = {
    "space": "Astronomy: planets, stars, the Moon, light and black holes",
    "food": "Cooking: recipes, bread, rice, eggs and onions",
}


@pytest.fixture(scope="module")
def retrievers(
    tmp_path_factory: pytest.TempPathFactory, embed_model: Any
) -> dict[str, BaseRetriever]:
    uri = str(Path(tmp_path_factory.mktemp("routing")) / "milvus.db")
    out = {}
    for name, texts in DOCS.items():
        store = open_vector_store(uri, name, dim=384)
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
        index.insert_nodes(
            [
                TextNode(text=t, id_=f"{name}-{i}", metadata={"title": f"{name} {i}"})
                for i, t in enumerate(texts)
            ]
        )
        flush(store)
        out[name] = index.as_retriever(similarity_top_k=3)
    return out


def _router(
    retrievers: dict[str, BaseRetriever], selector: Any, **kwargs: Any
) -> FusionRouterRetriever:
    return FusionRouterRetriever.from_retrievers(
        retrievers, descriptions=DESCRIPTIONS, selector=selector, **kwargs
    )


@pytest.mark.slow
def test_single_route_returns_that_collection_with_route_metadata(
    retrievers: Any, embed_model: Any
) -> None:
    router = _router(retrievers, SemanticSelector(embed_model=embed_model, threshold=0.1))
    nodes = router.retrieve("How far does light travel in a year?")
    assert nodes and all(n.node.node_id.startswith("space") for n in nodes)
    assert "light year" in nodes[0].node.get_content()
    meta = nodes[0].node.metadata
    assert (
        meta["route"] == "space"
        and meta["routes"] == ["space"]
        and "cosine" in meta["route_reason"]
    )
    # the routing metadata never reaches the LLM or the embedder; the title still does
    llm_text = nodes[0].node.get_content(MetadataMode.LLM)
    assert "route_reason" not in llm_text and "cosine" not in llm_text and "title" in llm_text
    assert "route" not in nodes[0].node.get_content(MetadataMode.EMBED)
    # scores of a single route are that retriever's own
    direct = retrievers["space"].retrieve("How far does light travel in a year?")
    assert [n.score for n in nodes] == pytest.approx([n.score for n in direct])


@pytest.mark.slow
def test_several_routes_are_rank_fused(retrievers: Any, embed_model: Any) -> None:
    selector = SemanticSelector(embed_model=embed_model, threshold=-1.0, top_k=2)
    router = _router(retrievers, selector, route_weights={"space": 2.0})
    query = "How long should I boil an egg?"
    selection = router.select(query)
    nodes = router.retrieve_selected(query, selection)
    lists = [retrievers[n].retrieve(query) for n in selection.names]
    weights = [2.0 if n == "space" else 1.0 for n in selection.names]
    expected = reciprocal_rank_fusion(lists, k=60, weights=weights)
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in expected]
    assert [n.score for n in nodes] == pytest.approx([n.score for n in expected])
    assert {n.metadata["route"] for n in nodes} == {"space", "food"}
    for n in nodes:
        assert n.metadata["route"] == n.node.node_id.split("-")[0]
    # the full retrieve() path gives the same result
    assert [n.node.node_id for n in router.retrieve(query)] == [n.node.node_id for n in nodes]


@pytest.mark.slow
@SHARED_LOOP
async def test_async_routes_with_a_logical_selector_and_never_calls_sync(retrievers: Any) -> None:
    llm = ScriptedLLM(
        replies=['{"routes": ["food"], "reason": "a cooking question"}'], forbid_sync=True
    )
    router = _router(retrievers, LogicalSelector(llm))
    nodes = await router.aretrieve("How do I make risotto?")
    assert nodes and all(n.node.node_id.startswith("food") for n in nodes)
    assert nodes[0].node.metadata["route_reason"] == "a cooking question"
    assert llm.call_count == 1


class GatedRetriever(BaseRetriever):
    """Wraps a real retriever; each search waits at a gate until the gate's target number of
    searches are in flight at once (or the gate gives up, and the test fails)."""

    def __init__(self, inner: BaseRetriever, gate: Any) -> None:
        self.inner, self.gate = inner, gate
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.gate.enter()
        try:
            self.gate.hold()
            return self.inner.retrieve(query_bundle)
        finally:
            self.gate.exit()

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.gate.enter()
        try:
            await self.gate.ahold()
            return await self.inner.aretrieve(query_bundle)
        finally:
            self.gate.exit()


@pytest.mark.slow
@SHARED_LOOP
async def test_async_searches_selected_routes_concurrently(
    retrievers: Any, concurrency_gate: Any
) -> None:
    gate = concurrency_gate(2)
    gated = {k: GatedRetriever(v, gate) for k, v in retrievers.items()}
    llm = ScriptedLLM(replies=['{"routes": ["space", "food"]}'], forbid_sync=True)
    router = _router(gated, LogicalSelector(llm, max_outputs=2))
    nodes = await router.aretrieve("moon and bread")
    assert {n.metadata["route"] for n in nodes} == {"space", "food"}
    assert gate.reached and not gate.timed_out, "the two selected routes were searched in turn"


@pytest.mark.slow
def test_no_route_retrieves_nothing(retrievers: Any, embed_model: Any) -> None:
    router = _router(retrievers, SemanticSelector(embed_model=embed_model, threshold=0.6))
    selection = router.select("Who wrote the Odyssey?")
    assert selection.names == []
    assert router.retrieve("Who wrote the Odyssey?") == []


@pytest.mark.slow
def test_core_selectors_results_are_accepted(retrievers: Any, embed_model: Any) -> None:
    from llama_index.core.selectors import EmbeddingSingleSelector

    router = _router(retrievers, EmbeddingSingleSelector.from_defaults(embed_model=embed_model))
    nodes = router.retrieve("Which planet is the largest?")
    assert nodes[0].metadata["route"] == "space" and "Jupiter" in nodes[0].node.get_content()


@pytest.mark.slow
def test_our_selectors_work_inside_core_router_retriever(retrievers: Any, embed_model: Any) -> None:
    tools = [
        RetrieverTool(retriever=r, metadata=ToolMetadata(name=n, description=DESCRIPTIONS[n]))
        for n, r in retrievers.items()
    ]
    core = RouterRetriever(
        selector=SemanticSelector(embed_model=embed_model, threshold=0.1),
        retriever_tools=tools,
        llm=ScriptedLLM(replies=[]),
    )
    assert all(
        n.node.node_id.startswith("food") for n in core.retrieve("How do I caramelise onions?")
    )
    core = RouterRetriever(
        selector=LogicalSelector(ScriptedLLM(replies=["2"])),
        retriever_tools=tools,
        llm=ScriptedLLM(replies=[]),
    )
    assert all(n.node.node_id.startswith("food") for n in core.retrieve("anything"))


@pytest.mark.slow
def test_router_bad_configuration(retrievers: Any, embed_model: Any) -> None:
    selector = SemanticSelector(embed_model=embed_model)
    with pytest.raises(ConfigurationError, match="No routes to choose from"):
        FusionRouterRetriever([], selector=selector)
    tool = RetrieverTool(
        retriever=retrievers["food"], metadata=ToolMetadata(name="x", description="d")
    )
    with pytest.raises(ConfigurationError, match=r"Duplicate route names \['x'\]"):
        FusionRouterRetriever([tool, tool], selector=selector)
    with pytest.raises(ConfigurationError, match=r"unknown route\(s\) \['moon'\]"):
        _router(retrievers, selector, route_weights={"moon": 2})
    with pytest.raises(ConfigurationError, match=r"No description for route\(s\) \['extra'\]"):
        FusionRouterRetriever.from_retrievers(
            {**retrievers, "extra": retrievers["food"]},
            descriptions=DESCRIPTIONS,
            selector=selector,
        )
    with pytest.raises(ConfigurationError, match="BaseSelector"):
        _router(retrievers, "semantic")
    with pytest.raises(ConfigurationError, match="top_n must be >= 1"):
        _router(retrievers, selector, top_n=0)


# =========================================================================== PromptRouter
PHYSICS = (
    "You are a very smart physics professor. You are great at answering questions about physics "
    "in a concise and easy-to-understand manner. When you don't know the answer to a question, "
    "you admit that you don't know.\n\nHere is a question:\n{query}"
)
MATH = (
    "You are a very good mathematician. You are great at answering math questions. You are so "
    "good because you are able to break down hard problems into their component parts, answer "
    "the component parts, and then put them together to answer the broader question.\n\n"
    "Here is a question:\n{query}"
)


def test_prompt_router_answers_with_the_closest_template(embed_model: Any) -> None:
    llm = ScriptedLLM(
        replies=[
            "A black hole is a region where gravity is so strong that light cannot escape.",
            "Break it down: 12 * 12 = 144.",
        ]
    )
    router = PromptRouter({"physics": PHYSICS, "math": MATH}, llm=llm, embed_model=embed_model)
    response = router.query("What's a black hole")
    assert response.metadata["prompt"] == "physics"
    assert llm.prompts[0].startswith("You are a very smart physics professor")
    assert llm.prompts[0].endswith("Here is a question:\nWhat's a black hole")
    assert str(response).startswith("A black hole")
    response = router.query("What is the square of twelve? Break the problem into parts.")
    assert response.metadata["prompt"] == "math" and "mathematician" in llm.prompts[1]


async def test_prompt_router_async_never_calls_sync(embed_model: Any) -> None:
    llm = ScriptedLLM(replies=["Use the quadratic formula."], forbid_sync=True)
    router = PromptRouter(
        {"physics": PHYSICS, "math": MATH},
        llm=llm,
        embed_model=embed_model,
        descriptions={"math": "Mathematics: equations, algebra, proofs"},
    )
    response = await router.aquery("How do I solve x^2 - 5x + 6 = 0?")
    assert response.metadata["prompt"] == "math" and llm.call_count == 1


@pytest.mark.slow
def test_prompt_router_prompts_are_updatable_and_thresholds_fall_back(embed_model: Any) -> None:
    llm = ScriptedLLM(default_reply="ok")
    router = PromptRouter(
        {"physics": PHYSICS, "math": MATH},
        llm=llm,
        embed_model=embed_model,
        threshold=0.5,
        fallback="math",
    )
    assert set(router.get_prompts()) == {"physics", "math"}
    result = router.select("Recommend a pizza topping")
    assert result.names == ["math"] and result.fallback
    router.update_prompts({"physics": "Physics tutor. Answer briefly: {question}"})
    router.query("What is inertia? Physics tutor please")
    assert llm.prompts[-1] in (
        "Physics tutor. Answer briefly: What is inertia? Physics tutor please",
        MATH.replace("{query}", "What is inertia? Physics tutor please"),
    )
    strict = PromptRouter({"physics": PHYSICS}, llm=llm, embed_model=embed_model, threshold=0.9)
    with pytest.raises(ConfigurationError, match="No prompt template is close enough.*fallback"):
        strict.query("Recommend a pizza topping")


@pytest.mark.parametrize(
    ("templates", "kwargs", "match"),
    [
        ({}, {}, "at least one template"),
        ({"a": "No placeholder here"}, {}, "exactly one of"),
        ({"a": "{query} and {query_str}"}, {}, "exactly one of"),
        ({"a": "{query} in {language}"}, {}, r"variables \['language'\]"),
        ({"a": "{query}"}, {"fallback": "b"}, "Fallback template 'b'"),
        ({"a": "{query}"}, {"descriptions": {"b": "x"}}, r"unknown template\(s\) \['b'\]"),
    ],
)
def test_prompt_router_bad_templates(
    embed_model: Any, templates: Any, kwargs: Any, match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        PromptRouter(templates, llm=ScriptedLLM(replies=[]), embed_model=embed_model, **kwargs)


def test_route_objects_from_dicts() -> None:
    assert Route.coerce({"name": "a", "utterances": ["hi"]}) == Route("a", "", ("hi",))
