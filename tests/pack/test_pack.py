"""RagPack: the pack contract, indexing, answering (sync, async, streaming), bad input."""

from __future__ import annotations

import logging

import pytest
from llama_index.core import Document
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
)
from llama_index_rag_pack.pack._compat import BaseLlamaPack

DOCS = [
    Document(
        id_="aardvark",
        text="The aardvark is a nocturnal mammal of Africa. It eats ants and termites.",
        metadata={"title": "Aardvark"},
    ),
    Document(
        id_="apollo",
        text="Apollo 11 landed Neil Armstrong and Buzz Aldrin on the Moon in July 1969.",
        metadata={"title": "Apollo 11"},
    ),
    Document(
        id_="abacus",
        text="The abacus is a calculating tool used since ancient times in Sumer and China.",
        metadata={"title": "Abacus"},
    ),
]


@pytest.fixture()
def pack(milvus_uri, embed_model, scripted_llm):
    llm = scripted_llm(default_reply="Neil Armstrong and Buzz Aldrin walked on the Moon [1](id=1).")
    return RagPack(
        DOCS,
        uri=milvus_uri,
        collection_name="pack",
        llm=llm,
        embed_model=embed_model,
        similarity_top_k=2,
    )


@pytest.fixture(scope="module")
def shared_pack(tmp_path_factory, embed_model):
    """One pack for the tests that only read it (built once per module, not once per test)."""
    from llama_index_rag_pack.testing import ScriptedLLM

    return RagPack(
        DOCS,
        uri=str(tmp_path_factory.mktemp("shared") / "milvus.db"),
        collection_name="pack",
        llm=ScriptedLLM(default_reply="Neil Armstrong and Buzz Aldrin walked [1](id=1)."),
        embed_model=embed_model,
        similarity_top_k=2,
    )


@pytest.mark.slow
def test_pack_contract(shared_pack) -> None:
    pack = shared_pack
    assert isinstance(pack, BaseLlamaPack)
    modules = pack.get_modules()
    assert {"llm", "embed_model", "vector_store", "index", "retriever", "query_engine"} <= set(
        modules
    )
    assert isinstance(modules["retriever"], BaseRetriever)
    assert isinstance(modules["query_engine"], BaseQueryEngine)
    assert modules["vector_store"] is pack.vector_store


@pytest.mark.slow
def test_run_answers_from_retrieved_context_with_citations(pack) -> None:
    response = pack.run("Who walked on the Moon?")
    assert "Armstrong" in str(response)
    assert [n.node.ref_doc_id for n in response.source_nodes] == ["apollo"]  # only the cited chunk
    assert "[1](id=1)" not in str(response)  # the marker was rewritten
    prompt = pack.llm.prompts[-1]
    assert "Apollo 11 landed Neil Armstrong" in prompt
    assert "Who walked on the Moon?" in prompt


@pytest.mark.slow
async def test_arun_never_calls_sync_llm_methods(milvus_uri, embed_model, scripted_llm) -> None:
    llm = scripted_llm(default_reply="It eats ants and termites [1](id=1).", forbid_sync=True)
    pack = RagPack(DOCS, uri=milvus_uri, collection_name="apack", llm=llm, embed_model=embed_model)
    cited = await pack.arun("What does the aardvark eat?")
    assert str(cited).startswith("It eats ants and termites")
    assert [n.node.ref_doc_id for n in cited.source_nodes] == ["aardvark"]
    plain = await pack.arun("What does the aardvark eat?", citations=False)
    assert str(plain) == "It eats ants and termites [1](id=1)."
    assert plain.source_nodes[0].node.ref_doc_id == "aardvark"


@pytest.mark.slow
def test_streaming_engine_streams_tokens(pack) -> None:
    engine = pack.make_query_engine(streaming=True, citations=False)
    response = engine.query("Who walked on the Moon?")
    deltas = list(response.response_gen)
    assert len(deltas) > 3
    assert "".join(deltas) == "Neil Armstrong and Buzz Aldrin walked on the Moon [1](id=1)."


@pytest.mark.slow
def test_reindexing_a_document_replaces_its_chunks(pack) -> None:
    before = pack.count()
    pack.insert([Document(id_="apollo", text="Apollo 11 returned to Earth on July 24, 1969.")])
    assert pack.count() == before
    hits = pack.retriever().retrieve("Apollo 11")
    texts = [h.node.get_content() for h in hits if h.node.ref_doc_id == "apollo"]
    assert texts == ["Apollo 11 returned to Earth on July 24, 1969."]


@pytest.mark.slow
def test_reopen_in_same_process_without_documents(pack, milvus_uri, embed_model) -> None:
    reopened = RagPack.open(
        uri=milvus_uri, collection_name="pack", embed_model=embed_model, llm="none"
    )
    assert reopened.count() == 3
    assert reopened.retriever().retrieve("calculating tool")[0].node.ref_doc_id == "abacus"


def test_reopening_a_missing_collection_says_to_index_first(milvus_uri, embed_model) -> None:
    with pytest.raises(CollectionNotFoundError, match="Index documents first"):
        RagPack.open(uri=milvus_uri, collection_name="never_indexed", embed_model=embed_model)


@pytest.mark.slow
def test_blank_documents_are_skipped_with_a_warning(milvus_uri, embed_model, caplog) -> None:
    docs = [Document(id_="blank", text="   \n"), DOCS[0]]
    with caplog.at_level(logging.WARNING):
        pack = RagPack(
            docs, uri=milvus_uri, collection_name="blank", embed_model=embed_model, llm="none"
        )
    assert pack.count() == 1
    assert "Skipping blank document" in caplog.text


@pytest.mark.parametrize("docs", [[], [Document(text=""), Document(text=" ")]])
def test_empty_corpus_is_a_clear_error(docs, milvus_uri, embed_model) -> None:
    with pytest.raises(EmptyCorpusError):
        RagPack(docs, uri=milvus_uri, collection_name="empty", embed_model=embed_model)


@pytest.mark.slow
def test_huge_document_is_chunked_and_fully_stored(milvus_uri, embed_model) -> None:
    sentences = [f"Fact number {i} says that item {i} weighs {i * 3} grams." for i in range(1300)]
    huge = Document(id_="huge", text=" ".join(sentences))  # ~70k characters: > one Milvus VARCHAR
    assert len(huge.text.encode()) > 65_535
    pack = RagPack(  # chunking and storage are under test: no sentence index of 3,000 sentences
        [huge],
        uri=milvus_uri,
        collection_name="huge",
        embed_model=embed_model,
        llm="none",
        sentence_index=False,
    )
    assert pack.count() > 40
    store = pack.vector_store
    rows = store.client.query(
        store.collection_name, filter="", output_fields=["text"], limit=10_000
    )
    stored = "\n".join(row["text"] for row in rows)
    assert all(f"item {i} weighs {i * 3} grams" in stored for i in range(1300))  # nothing lost
    hit = pack.retriever(similarity_top_k=5).retrieve("Fact number 1218 says that item 1218 weighs")
    assert any("item 1218 weighs 3654 grams" in h.node.get_content() for h in hit)


def test_bad_arguments(milvus_uri, embed_model) -> None:
    with pytest.raises(ConfigurationError, match="similarity_top_k must be > 0, got 0"):
        RagPack(DOCS, uri=milvus_uri, similarity_top_k=0, embed_model=embed_model)
    with pytest.raises(ConfigurationError, match="not both"):
        RagPack(DOCS, input_dir=".", uri=milvus_uri, embed_model=embed_model)


@pytest.mark.slow
def test_empty_query_and_unknown_mode(shared_pack) -> None:
    pack = shared_pack
    with pytest.raises(ConfigurationError, match="empty"):
        pack.run("   ")
    with pytest.raises(ConfigurationError, match="valid modes: vector"):
        pack.retriever("telepathy")


@pytest.mark.slow
def test_from_directory_reads_files(tmp_path, embed_model) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Milvus\nMilvus is an open-source vector database.")
    (tmp_path / "docs" / "b.txt").write_text("LlamaIndex connects LLMs to your data.")
    pack = RagPack.from_directory(
        tmp_path / "docs", uri=str(tmp_path / "m.db"), embed_model=embed_model, llm="none"
    )
    assert pack.count() == 2
    top = pack.retriever(similarity_top_k=1).retrieve("vector database")[0]
    assert top.node.metadata["file_name"] == "a.md"


@pytest.mark.slow
def test_async_answers_work_across_event_loops(milvus_uri, embed_model, scripted_llm) -> None:
    """pymilvus' async client binds to its first loop; the pack's store must not."""
    import asyncio

    llm = scripted_llm(default_reply="It is a calculating tool [1](id=1).", forbid_sync=True)
    pack = RagPack(DOCS, uri=milvus_uri, collection_name="loops", llm=llm, embed_model=embed_model)
    for _ in range(2):  # two separate event loops, like two asyncio.run() calls in a script
        response = asyncio.run(pack.arun("What is an abacus?"))
        assert [n.node.ref_doc_id for n in response.source_nodes] == ["abacus"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode", ["vector", "bm25", "hybrid", "hybrid_weighted", "fusion", "hyde", "rewrite"]
)
@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
async def test_every_mode_rejects_an_empty_query_the_same_way(shared_pack, mode, query) -> None:
    pack = shared_pack
    retriever = pack.retriever(mode)
    calls = pack.llm.call_count
    with pytest.raises(ConfigurationError, match="The query is empty"):
        retriever.retrieve(query)
    with pytest.raises(ConfigurationError, match="The query is empty"):
        await retriever.aretrieve(query)
    assert pack.llm.call_count == calls, "no LLM call for an empty query"


@pytest.mark.slow
def test_the_engine_cache_keeps_the_recently_used_ones(shared_pack) -> None:
    """A server asked with ever new filters keeps a bounded number of retrievers and engines."""
    from llama_index_rag_pack.pack.engines import MAX_CACHED_ENGINES

    first = shared_pack.retriever("vector", filters='doc_id == "first"')
    assert shared_pack.retriever("vector", filters='doc_id == "first"') is first
    engine = shared_pack.make_query_engine("vector", filters='doc_id == "first"')
    for i in range(MAX_CACHED_ENGINES + 10):
        shared_pack.retriever("vector", filters=f'doc_id == "other {i}"')
        shared_pack.make_query_engine("vector", filters=f'doc_id == "other {i}"')
    assert shared_pack.retriever("vector", filters='doc_id == "first"') is not first  # rebuilt
    assert shared_pack.make_query_engine("vector", filters='doc_id == "first"') is not engine
    last = f'doc_id == "other {MAX_CACHED_ENGINES + 9}"'
    recent = shared_pack.retriever("vector", filters=last)
    assert shared_pack.retriever("vector", filters=last) is recent
