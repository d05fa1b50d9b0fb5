"""RoutedRagPack / RagPack.from_sources over real Milvus Lite collections, and the routing CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack import RagPack, RetrievalMode
from llama_index_rag_pack.chat.cited_chat_engine import CitedChatEngine
from llama_index_rag_pack.cli import main
from llama_index_rag_pack.core.errors import CollectionNotFoundError, ConfigurationError
from llama_index_rag_pack.pack.routed import RoutedRagPack
from llama_index_rag_pack.pack.sources import RouteSource, discover_sources, load_sources
from llama_index_rag_pack.routing.logical_selector import LogicalSelector
from llama_index_rag_pack.routing.router import FusionRouterRetriever
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector
from llama_index_rag_pack.testing import ScriptedLLM

SPACE = [
    Document(
        text="The Moon orbits the Earth every 27 days and its gravity causes the ocean tides.",
        metadata={"title": "Moon"},
    ),
    Document(
        text=(
            "Jupiter is the largest planet in the Solar System, a gas giant with a great red spot."
        ),
        metadata={"title": "Jupiter"},
    ),
]
FOOD = [
    Document(
        text="Bread dough rises because yeast ferments sugar and releases carbon dioxide.",
        metadata={"title": "Bread"},
    ),
    Document(
        text="Caramelising onions takes about forty minutes over low heat with a little butter.",
        metadata={"title": "Onions"},
    ),
]


def _sources(with_docs: bool = True) -> list[RouteSource]:
    return [
        RouteSource(
            "space",
            "Astronomy: planets, stars, the Moon",
            ("Which planet is the biggest?",),
            documents=SPACE if with_docs else None,
        ),
        RouteSource(
            "food",
            "Cooking: recipes, bread, onions",
            ("How do I bake bread?",),
            collection_name="food_docs",
            documents=FOOD if with_docs else None,
        ),
    ]


@pytest.fixture()
def pack(milvus_uri: str, embed_model: Any) -> RoutedRagPack:
    return RoutedRagPack(
        _sources(),
        uri=milvus_uri,
        embed_model=embed_model,
        llm=ScriptedLLM(default_reply="From the context: it depends [1](id=1)."),
        threshold=0.2,
    )


@pytest.mark.slow
def test_routed_pack_answers_from_the_chosen_source(pack: RoutedRagPack) -> None:
    assert pack.count_by_source() == {"space": 2, "food": 2}
    assert isinstance(pack.selector, SemanticSelector)
    response = pack.run("How long do onions take to caramelise?")
    retriever = pack.retriever(RetrievalMode.ROUTE)
    nodes = retriever.retrieve("How long do onions take to caramelise?")
    assert nodes and {n.metadata["route"] for n in nodes} == {"food"}
    assert "Onions" in {n.metadata["title"] for n in nodes}
    # the answer was written from the food source's chunks, by the pack's LLM
    assert response.source_nodes
    assert {n.node.metadata["route"] for n in response.source_nodes} == {"food"}
    assert "it depends" in str(response)
    llm = pack.get_modules()["llm"]
    assert llm.call_count >= 1 and "Caramelising onions" in llm.prompts[-1]
    assert (
        "vector_store" in pack.describe() and "food='food_docs'" in pack.describe()["vector_store"]
    )
    modules = pack.get_modules()
    assert {"selector", "router_retriever", "source_packs", "query_engine"} <= set(modules)


@pytest.mark.slow
async def test_routed_pack_async(pack: RoutedRagPack) -> None:
    nodes = await pack.retriever("route").aretrieve("What causes the ocean tides?")
    assert nodes and all(n.metadata["route"] == "space" for n in nodes)


@pytest.mark.slow
def test_chat_on_a_routed_pack_routes_every_condensed_question(pack: RoutedRagPack) -> None:
    def condense(prompt: str) -> str:  # "it" is the bread of the first turn
        return prompt.split("Last message:")[1].split("\n")[0].replace(" it ", " bread ")

    engine = pack.make_chat_engine().query_engine  # answers with the pack's scripted LLM
    assert isinstance(engine.retriever, FusionRouterRetriever)
    chat = CitedChatEngine.from_query_engine(engine, llm=ScriptedLLM(replies=condense))
    chat.chat("How do I bake bread?")
    follow_up = chat.chat("Why does it rise?")
    assert follow_up.metadata["condensed_question"] == "Why does bread rise?"
    assert {n.node.metadata["route"] for n in follow_up.source_nodes} == {"food"}


@pytest.mark.slow
def test_reopen_and_route_with_a_logical_selector(milvus_uri: str, embed_model: Any) -> None:
    RoutedRagPack(_sources(), uri=milvus_uri, embed_model=embed_model)
    llm = ScriptedLLM(
        replies=['The question is about food, so: {"routes": ["food"], "reason": "bread"}']
    )
    pack = RagPack.from_sources(
        [
            s.__class__(s.name, s.description, s.utterances, s.collection_name)
            for s in _sources(False)
        ],
        uri=milvus_uri,
        embed_model=embed_model,
        llm=llm,
        selector="logical",
        fallback="space",
    )
    assert isinstance(pack, RoutedRagPack) and isinstance(pack.selector, LogicalSelector)
    nodes = pack.retriever("route").retrieve("Why does dough rise?")
    assert nodes[0].metadata["route"] == "food" and nodes[0].metadata["route_reason"] == "bread"
    assert "1. space: Astronomy" in llm.prompts[0]


@pytest.mark.slow
def test_two_routes_fused(milvus_uri: str, embed_model: Any) -> None:
    pack = RoutedRagPack(
        _sources(),
        uri=milvus_uri,
        embed_model=embed_model,
        threshold=-1.0,
        top_k_routes=2,
        similarity_top_k=3,
    )
    nodes = pack.retriever("route").retrieve("bread on the moon")
    assert {n.metadata["route"] for n in nodes} == {"space", "food"}
    assert len(nodes) == 3  # fused, then cut to similarity_top_k


@pytest.mark.slow
def test_route_mode_on_a_plain_pack_says_how_to_fix(milvus_uri: str, embed_model: Any) -> None:
    plain = RagPack(SPACE, uri=milvus_uri, embed_model=embed_model)
    with pytest.raises(ConfigurationError, match="RoutedRagPack"):
        plain.retriever("route")


@pytest.mark.parametrize(
    ("sources", "kwargs", "match"),
    [
        ([], {}, "at least one source"),
        ([RouteSource("a", "x"), RouteSource("a", "y")], {}, r"Duplicate source names \['a'\]"),
        (
            [RouteSource("a", "x"), RouteSource("b", "y", collection_name="a")],
            {},
            "share a collection",
        ),
        ([RouteSource("a", "x")], {"fallback": "zzz"}, "Fallback source 'zzz'"),
        ([RouteSource("a", "x")], {"selector": "magic"}, "valid: semantic, logical"),
        ([RouteSource("a", "x")], {"top_k_routes": 0}, "top_k_routes must be"),
        ([RouteSource("a", "x")], {"collection_name": "c"}, "per source"),
        (
            [{"name": "a", "description": "x", "colour": "red"}],
            {},
            r"Unknown source field\(s\) \['colour'\]",
        ),
    ],
)
def test_bad_sources(milvus_uri: str, sources: Any, kwargs: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RoutedRagPack(sources, uri=milvus_uri, **kwargs)


def test_source_validation_and_missing_collection(milvus_uri: str, embed_model: Any) -> None:
    with pytest.raises(ConfigurationError, match="recursively"):
        RouteSource("a", "x", mode="route")
    with pytest.raises(ConfigurationError, match="valid modes"):
        RouteSource("a", "x", mode="telepathy")
    with pytest.raises(CollectionNotFoundError):
        RoutedRagPack.open_sources(
            [RouteSource("nothing_here", "x")], uri=milvus_uri, embed_model=embed_model
        )


@pytest.mark.slow
def test_discover_and_load_sources(pack: RoutedRagPack, tmp_path: Path) -> None:
    found = {s.name: s for s in discover_sources(pack.uri)}
    assert set(found) == {"space", "food_docs"}
    assert "Moon" in found["space"].description and "Jupiter" in found["space"].description
    assert found["food_docs"].utterances
    path = tmp_path / "routes.json"
    path.write_text(
        json.dumps(
            {
                "fallback": "space",
                "sources": [
                    {"name": "space", "description": "Astronomy"},
                    {
                        "name": "food",
                        "collection": "food_docs",
                        "description": "Cooking",
                        "utterances": ["How to bake?"],
                    },
                ],
            }
        )
    )
    sources, options = load_sources(path)
    assert [s.collection for s in sources] == ["space", "food_docs"] and options == {
        "fallback": "space"
    }
    path.write_text("{not json")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        load_sources(path)
    with pytest.raises(ConfigurationError, match="not found"):
        load_sources(tmp_path / "missing.json")


@pytest.mark.slow
def test_cli_route_and_ask_route(
    pack: RoutedRagPack, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    uri = pack.uri
    del pack  # one process may hold the database; the CLI reopens it in this process
    assert (
        main(
            [
                "--uri",
                uri,
                "route",
                "How do I bake bread?",
                "Who won the 1998 world cup?",
                "--route-threshold",
                "0.3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Q: How do I bake bread?\n  route     : food_docs" in out
    assert "route     : none" in out and "no route reached its threshold" in out
    assert "scores    :" in out

    llm = ScriptedLLM(default_reply="Yeast ferments sugar [1](id=1).")
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    routes = tmp_path / "routes.json"
    routes.write_text(
        json.dumps(
            [
                {"name": "astronomy", "collection": "space", "description": "Astronomy"},
                {"name": "cooking", "collection": "food_docs", "description": "Cooking, baking"},
            ]
        )
    )
    assert (
        main(
            [
                "--uri",
                uri,
                "ask",
                "Why does bread dough rise?",
                "--routes",
                str(routes),
                "--no-stream",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "route     : cooking" in out and "why       : cooking:" in out
    assert "Yeast ferments sugar" in out
    assert "Bread" in out  # the source list


def test_cli_route_errors_are_one_line(tmp_path: Path, capsys: Any) -> None:
    code = main(
        [
            "--uri",
            str(tmp_path / "m.db"),
            "ask",
            "q",
            "--route",
            "--routes",
            str(tmp_path / "none.json"),
        ]
    )
    assert code == 2
    assert "error: Routes file" in capsys.readouterr().err


@pytest.mark.slow
def test_a_selected_route_answer_gets_attributed_citations(
    milvus_uri: str, embed_model: Any
) -> None:
    """``ask --route`` answers through ``make_selected_query_engine``: a sentence the LLM left
    uncited is attributed to its supporting chunk, as in every other mode."""
    pack = RoutedRagPack(
        _sources(),
        uri=milvus_uri,
        embed_model=embed_model,
        llm=ScriptedLLM(default_reply="Caramelising onions takes about forty minutes."),
        threshold=0.2,
    )
    question = "How long do onions take to caramelise?"
    selection = pack.retriever("route").select(question)
    assert selection.names == ["food"]
    response = pack.make_selected_query_engine(selection, citation_style="text").query(question)
    assert response.source_nodes, "the uncited sentence was attributed to a chunk"
    assert {n.node.metadata["title"] for n in response.source_nodes} == {"Onions"}


@pytest.mark.slow
def test_insert_into_one_source_is_routed_to_at_once(pack: RoutedRagPack) -> None:
    question = "How long does sourdough need to proof?"
    before = pack.retriever("route").retrieve(question)
    assert all(n.metadata.get("title") != "Sourdough" for n in before)
    added = pack.insert_into(
        "food",
        [
            Document(
                text="Sourdough needs to proof for four to six hours at room temperature.",
                metadata={"title": "Sourdough"},
            )
        ],
    )
    assert added >= 1
    assert pack.count_by_source() == {"space": 2, "food": 2 + added}
    after = pack.retriever("route").retrieve(question)  # a new retriever sees the new chunk
    assert "Sourdough" in {n.metadata["title"] for n in after}
    assert {n.metadata["route"] for n in after} == {"food"}
    with pytest.raises(ConfigurationError, match="Unknown source 'sport'; sources: "):
        pack.insert_into("sport", [Document(text="Offside rule.")])
    assert pack.count_by_source() == {"space": 2, "food": 2 + added}  # nothing lost or added
