"""SelfQueryRetriever on real Milvus Lite with the real MiniLM; only the LLM replies are scripted.

Filtered dense, BM25, hybrid (Milvus RRF) and hybrid_convex searches; the retry without a filter
that matches nothing; sync and async (the async path never calls the sync LLM); fields inferred
from the collection; the ``self_query`` pack mode and ``rag-pack ask --mode self_query``.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack import (
    ConfigurationError,
    MilvusHybridRetriever,
    RagPack,
    SelfQueryRetriever,
    configure_self_query,
    infer_field_specs,
)
from llama_index_rag_pack.cli.app import main
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

RAVEN = 'It\'s "Raven" \\ Night'
BOOKS = {
    "memory-2012": ("mystery", 2012, "A detective wakes without her memory and solves a murder."),
    "memory-1995": ("mystery", 1995, "An old detective slowly loses his memory chasing a forger."),
    "mars-2015": ("sci-fi", 2015, "Colonists on Mars rebuild their memory archives."),
    "garden-2018": ("romance", 2018, "Two gardeners fall in love restoring a walled garden."),
    "ship-2005": ("sci-fi", 2005, "A generation ship forgets where it is going and why."),
    "raven-1999": ("poetry", 1999, "A raven taps at the chamber door at midnight."),
}
FIELDS = [
    {
        "name": "genre",
        "type": "string",
        "description": "the genre",
        "allowed": ["mystery", "sci-fi", "romance", "poetry"],
    },
    {"name": "year", "type": "int", "description": "published", "minimum": 1900, "maximum": 2030},
    {"name": "title", "type": "string", "description": "the title"},
]
MEMORY_AFTER_2010 = (
    'Sure! Here is the query:\n```json\n{"query": "memory", "filter": [{"field": "genre", '
    '"op": "eq", "value": "mystery"}, {"field": "year", "op": "gt", "value": "2010"},]}\n```'
)
EXPR = '(genre == "mystery") and (year > 2010)'
INJECTION = [
    {"field": "title", "op": "==", "value": '" or year > 0 or title == "'},
    {"field": "genre) or (year > 0", "op": "==", "value": "x"},
    {"field": "genre", "op": ") or (", "value": "mystery"},
]
REPLIES = {
    "mystery novels after 2010 about memory": MEMORY_AFTER_2010,
    "romance before 2000 about memory": (
        '{"query": "memory", "filter": {"genre": "romance", "year": {"$lt": 2000}}}'
    ),
    "the raven book": json.dumps(
        {"query": "raven", "filter": [{"field": "title", "op": "==", "value": RAVEN}]}
    ),
    "injection": json.dumps({"query": "memory", "filter": INJECTION}),
}


def reply(prompt: str) -> str:
    m = re.search(r"Question: (.*)\n", prompt)
    if m and m.group(1) in REPLIES:
        return REPLIES[m.group(1)]
    return "The detective lost her memory [1](id=1)."


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RagPack:
    docs = [
        Document(
            id_=key,
            text=text,
            metadata={"genre": genre, "year": year, "title": RAVEN if key == "raven-1999" else key},
        )
        for key, (genre, year, text) in BOOKS.items()
    ]
    uri = str(Path(tmp_path_factory.mktemp("selfquery")) / "m.db")
    return RagPack(
        docs,
        uri=uri,
        collection_name="books",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=reply),
        similarity_top_k=3,
    )


def doc_ids(nodes: list[Any]) -> list[str]:
    return [n.node.ref_doc_id for n in nodes]


def self_query(pack: RagPack, base: str, **kwargs: Any) -> SelfQueryRetriever:
    return pack.retriever("self_query", base=base, fields=tuple(map(_frozen, FIELDS)), **kwargs)


def _frozen(d: dict[str, Any]) -> Any:
    from llama_index_rag_pack import FieldSpec

    return FieldSpec(**{**d, "allowed": tuple(d.get("allowed", ()))})


@pytest.mark.parametrize("base", ["vector", "bm25", "hybrid", "hybrid_convex"])
def test_the_filter_restricts_every_search_type(pack: RagPack, base: str) -> None:
    unfiltered = pack.retriever("vector").retrieve("memory")
    assert {"memory-1995", "mars-2015"} & set(doc_ids(unfiltered)), "the filter must matter"
    retriever = self_query(pack, base)
    nodes = retriever.retrieve("mystery novels after 2010 about memory")
    assert doc_ids(nodes) == ["memory-2012"]
    meta = nodes[0].node.metadata
    assert (meta["self_query_filter"], meta["self_query_query"]) == (EXPR, "memory")
    assert meta["self_query_filter_dropped"] is False
    assert "self_query_filter" in nodes[0].node.excluded_llm_metadata_keys
    again = asyncio.run(retriever.aretrieve("mystery novels after 2010 about memory"))
    assert doc_ids(again) == doc_ids(nodes)
    assert [n.score for n in again] == pytest.approx([n.score for n in nodes])


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_filter_that_matches_nothing_is_retried_without_it(pack: RagPack, path: str) -> None:
    retriever = self_query(pack, "vector")
    question = "romance before 2000 about memory"
    run = retriever.retrieve if path == "sync" else lambda q: asyncio.run(retriever.aretrieve(q))
    nodes = run(question)
    assert nodes and "memory-2012" in doc_ids(nodes)
    for n in nodes:
        assert n.node.metadata["self_query_filter"] == '(genre == "romance") and (year < 2000)'
        assert n.node.metadata["self_query_filter_dropped"] is True
    strict = self_query(pack, "vector", fallback_without_filter=False)
    assert strict.retrieve(question) == []


def test_quotes_and_backslashes_in_a_value_match_the_stored_value(pack: RagPack) -> None:
    nodes = self_query(pack, "bm25").retrieve("the raven book")
    assert doc_ids(nodes) == ["raven-1999"]
    assert nodes[0].node.metadata["self_query_filter_dropped"] is False


def test_an_injection_attempt_stays_a_literal(pack: RagPack, caplog) -> None:
    nodes = self_query(pack, "vector").retrieve("injection")
    meta = nodes[0].node.metadata
    # only the title condition was valid; as an escaped literal it matches no title
    assert meta["self_query_filter"] == '(title == "\\" or year > 0 or title == \\"")'
    assert meta["self_query_filter_dropped"] is True
    assert "unknown field" in caplog.text and "unknown operator" in caplog.text


def test_the_async_path_never_calls_the_sync_llm(pack: RagPack) -> None:
    llm = ScriptedLLM(replies=reply, forbid_sync=True)
    base = MilvusHybridRetriever(
        pack.vector_store, embed_model=pack.embed_model, search_type="dense"
    )
    retriever = SelfQueryRetriever(base, llm=llm, fields=FIELDS)
    nodes = asyncio.run(retriever.aretrieve("mystery novels after 2010 about memory"))
    assert doc_ids(nodes) == ["memory-2012"] and llm.call_count == 1


def test_fields_are_inferred_from_the_collection(pack: RagPack) -> None:
    specs = {s.name: s for s in infer_field_specs(pack.vector_store.client, "books")}
    assert {"genre", "year", "title"} <= set(specs)
    assert not {"doc_id", "_node_content", "document_id", "ref_doc_id"} & set(specs)
    assert specs["year"].type == "int"
    assert specs["genre"].allowed == ("mystery", "poetry", "romance", "sci-fi")
    base = MilvusHybridRetriever(
        pack.vector_store, embed_model=pack.embed_model, search_type="dense"
    )
    llm = ScriptedLLM(replies=reply)
    nodes = SelfQueryRetriever(base, llm=llm).retrieve("mystery novels after 2010 about memory")
    assert doc_ids(nodes) == ["memory-2012"]
    assert "- genre (string)" in llm.prompts[0] and '"mystery"' in llm.prompts[0]


def test_a_retriever_without_milvus_filters_is_refused(pack: RagPack) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    in_memory = VectorStoreIndex([TextNode(text="a note")], embed_model=pack.embed_model)
    with pytest.raises(ConfigurationError, match="takes no Milvus filter"):
        SelfQueryRetriever(in_memory.as_retriever(), llm=ScriptedLLM(), fields=FIELDS)
    with pytest.raises(ConfigurationError, match="cannot filter mode 'fusion'"):
        pack.retriever("self_query", base="fusion")


def test_the_pack_mode_answers_with_configured_fields(pack: RagPack) -> None:
    configure_self_query(pack, FIELDS, description="book blurbs", base="hybrid")
    retriever = pack.retriever("self_query")
    assert isinstance(retriever, SelfQueryRetriever) and retriever.description == "book blurbs"
    engine = pack.make_query_engine("self_query", citations=False)
    response = engine.query("mystery novels after 2010 about memory")
    assert "memory" in str(response)
    assert doc_ids(response.source_nodes) == ["memory-2012"]


def test_rag_pack_ask_self_query_reads_fields_from_a_file(
    pack: RagPack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(
        "llama_index_rag_pack.pack.pack_base.resolve_llm",
        lambda spec=None: ScriptedLLM(replies=reply),
    )
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings._load_local_embedding",
        lambda *a: pack.embed_model,
    )
    fields = tmp_path / "fields.json"
    fields.write_text(json.dumps(FIELDS))
    argv = ["--uri", pack.uri, "--collection", "books", "ask", "--mode", "self_query"]
    code = main([*argv, "--self-query-fields", str(fields), "--no-stream", "--no-citations",
                 "mystery novels after 2010 about memory"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "memory-2012" in out and "memory-1995" not in out
    fields.write_text('[{"name": "year", "type": "date"}]')
    code = main([*argv, "--self-query-fields", str(fields), "q?"])
    out, err = capsys.readouterr()
    assert code == 2 and "unknown type 'date'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("path", ["sync", "async"])
def test_an_llm_held_to_json_gets_the_schema_of_the_declared_fields(
    pack: RagPack, path: str, json_held_llm: Any
) -> None:
    llm = json_held_llm(reply)
    retriever = SelfQueryRetriever(
        pack.retriever("hybrid"), llm=llm, fields=tuple(map(_frozen, FIELDS))
    )
    question = "mystery novels after 2010 about memory"
    sq = retriever.parse(question) if path == "sync" else asyncio.run(retriever.aparse(question))
    assert sq.expression  # the reply was read
    (schema,) = llm.schemas
    allowed = schema["properties"]["filter"]["items"]["properties"]["field"]["enum"]
    assert sorted(allowed) == sorted(f["name"] for f in FIELDS)


@pytest.mark.parametrize("kind", ["dense", "hybrid_convex", "vector"])
@pytest.mark.parametrize("path", ["sync", "async"])
def test_inferred_fields_are_sampled_under_the_retrievers_filter(
    pack: RagPack, kind: str, path: str
) -> None:
    """The prompt lists only values of rows the retriever may return (e.g. one tenant's)."""
    from llama_index_rag_pack import MilvusScoreFusionRetriever

    scope = 'genre == "sci-fi"'
    if kind == "dense":
        base: Any = MilvusHybridRetriever(
            pack.vector_store, embed_model=pack.embed_model, search_type="dense", filters=scope
        )
    elif kind == "hybrid_convex":
        base = MilvusScoreFusionRetriever(
            pack.vector_store, embed_model=pack.embed_model, filters=scope
        )
    else:
        base = pack.retriever("vector", filters=scope)
    llm = ScriptedLLM(replies='{"query": "memory", "filter": []}')
    retriever = SelfQueryRetriever(base, llm=llm)
    question = "books about memory"
    run = retriever.retrieve if path == "sync" else lambda q: asyncio.run(retriever.aretrieve(q))
    nodes = run(question)
    assert set(doc_ids(nodes)) <= {"mars-2015", "ship-2005"} and nodes
    genre = next(f for f in retriever.fields if f.name == "genre")
    assert genre.allowed == ("sci-fi",)
    (prompt,) = llm.prompts
    for other in ("mystery", "romance", "poetry", "memory-2012", "garden-2018", "Raven"):
        assert other not in prompt, other
    assert "mars-2015" in prompt or "ship-2005" in prompt


def test_a_filter_no_row_passes_infers_no_field_and_asks_no_llm(pack: RagPack) -> None:
    base = MilvusHybridRetriever(
        pack.vector_store,
        embed_model=pack.embed_model,
        search_type="dense",
        filters='genre == "none"',
    )
    llm = ScriptedLLM(replies=lambda prompt: pytest.fail(f"asked the LLM: {prompt[:80]}"))
    assert infer_field_specs(pack.vector_store.client, "books", scope='genre == "none"') == ()
    retriever = SelfQueryRetriever(base, llm=llm)
    assert retriever.fields == () and retriever.retrieve("memory") == []
    assert asyncio.run(retriever.aretrieve("memory")) == []
    with pytest.raises(ConfigurationError, match="at least one field"):
        SelfQueryRetriever(base, llm=llm, fields=[])
