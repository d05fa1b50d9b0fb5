"""BM25 vectors computed by the pack (a Milvus with sparse vectors and no BM25 function, as 2.4)
against Milvus' BM25 function, on Lite and on a ``milvus-lite server``; and the statistics kept
beside the collection through inserts, upserts and deletes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import TextNode

from llama_index_rag_pack.core.errors import ConfigurationError, RagPackError
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.milvus.bm25.client_bm25 import (
    EMPTY_VECTOR,
    ClientBM25,
    stats_collection_name,
    term_id,
)
from llama_index_rag_pack.milvus.connection import flush, has_bm25, open_vector_store

DIM = 8


def wiki_nodes_and_questions() -> tuple[list, list[str]]:
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.labelled import load_corpus, load_labelled_set

    dev = load_labelled_set("wiki_qa_para", split="dev")
    wanted = sorted({i.removeprefix("wiki:") for ex in dev.examples for i in ex.relevant_ids})
    docs = load_corpus("wikipedia", titles=wanted[:12])
    doc_ids = {d.doc_id for d in docs}
    questions = [ex.question for ex in dev.examples if set(ex.relevant_ids) <= doc_ids]
    nodes = split_documents(docs)
    # only the BM25 side differs between the two: any fixed dense vectors do
    vectors = np.random.default_rng(0).normal(size=(len(nodes), 384))
    for node, vector in zip(nodes, vectors, strict=True):
        node.embedding = (vector / np.linalg.norm(vector)).tolist()
    return nodes, questions


@pytest.fixture(scope="module")
def wiki() -> tuple[list, list[str]]:
    nodes, questions = wiki_nodes_and_questions()
    assert len(questions) >= 10
    return nodes, questions


def rankings(store, questions, search_type, embed_model=None):
    retriever = MilvusHybridRetriever(
        store, search_type=search_type, similarity_top_k=10, embed_model=embed_model
    )
    return [[n.node.node_id for n in retriever.retrieve(q)] for q in questions]


def stores_of(uri: str, nodes: list) -> dict:
    """The corpus stored twice at ``uri``: BM25 vectors by Milvus' function and by the pack."""
    stores = {}
    for vectors in ("function", "client"):
        store = open_vector_store(
            uri, f"wiki_{vectors}", dim=384, overwrite=True, bm25_vectors=vectors
        )
        assert store.bm25_vectors == vectors and has_bm25(store.client, store.collection_name)
        store.add([n.model_copy() for n in nodes])
        flush(store)
        stores[vectors] = store
    return stores


@pytest.fixture(scope="module")
def lite_stores(tmp_path_factory: pytest.TempPathFactory, wiki) -> dict:
    """Both stores on Lite, shared by the sparse and the hybrid comparisons (read only)."""
    return stores_of(str(tmp_path_factory.mktemp("bm25") / "bm25.db"), wiki[0])


@pytest.mark.slow
@pytest.mark.parametrize("where", ["lite", "server"])
def test_pack_vectors_rank_as_the_bm25_function_on_the_wiki_corpus(wiki, where, request):
    nodes, questions = wiki
    if where == "lite":
        stores = request.getfixturevalue("lite_stores")
    else:
        stores = stores_of(request.getfixturevalue("milvus_server"), nodes)
    found = {vectors: rankings(store, questions, "sparse") for vectors, store in stores.items()}
    assert all(len(r) == 10 for r in found["function"])
    assert found["client"] == found["function"]
    client = stores["client"].client
    assert client.has_collection(stats_collection_name("wiki_client"))
    assert not client.has_collection(stats_collection_name("wiki_function"))


@pytest.mark.slow
def test_hybrid_modes_agree_too(lite_stores, wiki, embed_model):
    questions = wiki[1][:12]
    found = {
        vectors: rankings(store, questions, "hybrid", embed_model)
        for vectors, store in lite_stores.items()
    }
    assert found["client"] == found["function"]


# ---------------------------------------------------------------------- the formula
words = st.lists(st.sampled_from("abcdefgh"), min_size=0, max_size=12).map(" ".join)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(words, min_size=1, max_size=8), words)
def test_pack_vectors_score_as_the_in_memory_bm25_of_lite(texts, query):
    """Σ q(t)·w(t, D) over the pack's vectors equals the Lite formula (``MemoryBM25``) for
    every document, when the statistics are the corpus'."""
    from llama_index_rag_pack.milvus.bm25.bm25_memory import MemoryBM25
    from llama_index_rag_pack.milvus.bm25.client_bm25 import bm25_idf

    keys = [f"d{i}" for i in range(len(texts))]
    expected = dict(MemoryBM25(keys, texts).search(query, len(keys)))
    lengths = [len(t.split()) for t in texts]
    avgdl = sum(lengths) / len(texts)
    df = Counter(term for t in texts for term in set(t.split()))
    bm25 = ClientBM25(client=None, collection_name="unused")
    q = {  # what query_vector sends: terms no chunk holds are left out
        term_id(t): c * bm25_idf(len(texts), df[t])
        for t, c in Counter(query.split()).items()
        if df[t] > 0
    }
    for key, text in zip(keys, texts, strict=True):
        d = bm25.document_vector(text, avgdl)
        score = sum(v * d.get(k, 0.0) for k, v in q.items())
        assert math.isclose(score, expected.get(key, 0.0), rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------- the statistics
def node(i: int, text: str, doc: str) -> TextNode:
    n = TextNode(id_=f"n{i}", text=text, embedding=[float(i + 1)] + [0.0] * (DIM - 1))
    n.relationships = {}
    n.metadata = {"doc": doc}
    return n


def stats_as_stored(client, name):
    bm25 = ClientBM25(client, name)
    rows = client.query(bm25.stats_name, filter="id >= 0", output_fields=["id", "df"])
    return bm25.totals(), {int(r["id"]): int(r["df"]) for r in rows}


def stats_recomputed(client, name):
    rows = client.query(name, filter="", output_fields=["bm25_text"], limit=16384)
    texts = [r["bm25_text"].split() for r in rows]
    df = Counter(term_id(t) for terms in texts for t in set(terms))
    return (len(texts), sum(len(t) for t in texts)), dict(df)


@pytest.mark.slow
def test_statistics_follow_inserts_upserts_and_deletes(tmp_path):
    store = open_vector_store(str(tmp_path / "stats.db"), "stats", dim=DIM, bm25_vectors="client")
    client, name = store.client, store.collection_name
    texts = ["Aardvarks eat ants.", "Ants build nests.", "Termites eat wood.", "the of and"]
    store.add([node(i, t, f"doc{i % 2}") for i, t in enumerate(texts)])
    assert stats_as_stored(client, name) == stats_recomputed(client, name)
    assert stats_as_stored(client, name)[0][0] == 4

    store.upsert_mode = True  # the same ids again, other words
    store.add([node(1, "Bees build hives from wax.", "doc1")])
    assert stats_as_stored(client, name) == stats_recomputed(client, name)

    client.delete(name, filter='doc == "doc0"')
    assert stats_as_stored(client, name) == stats_recomputed(client, name)
    client.delete(name, ids=["n1"])
    assert stats_as_stored(client, name) == stats_recomputed(client, name)
    assert stats_as_stored(client, name)[0] == (1, 0)  # only the stop-word chunk is left

    retriever = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=5)
    assert retriever.retrieve("aardvarks") == []  # a term no chunk holds any more
    client.drop_collection(name)
    assert not client.has_collection(stats_collection_name(name))


@pytest.mark.slow
def test_a_chunk_of_stop_words_is_stored_and_never_found(tmp_path):
    store = open_vector_store(str(tmp_path / "stop.db"), "stop", dim=DIM, bm25_vectors="client")
    store.add([node(0, "the of and", "d"), node(1, "Aardvarks eat ants.", "d")])
    flush(store)
    rows = store.client.query("stop", filter='id == "n0"', output_fields=["sparse_embedding"])
    assert rows[0]["sparse_embedding"] == pytest.approx(EMPTY_VECTOR)
    retriever = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=5)
    assert [n.node.node_id for n in retriever.retrieve("aardvarks and ants")] == ["n1"]


def test_client_vectors_need_an_analysis_of_the_pack(tmp_path):
    with pytest.raises(ConfigurationError, match="bm25_analyzer='auto'"):
        open_vector_store(
            str(tmp_path / "std.db"),
            "std",
            dim=DIM,
            bm25_vectors="client",
            bm25_analyzer="standard",
        )
    with pytest.raises(ConfigurationError, match="bm25_vectors must be one of"):
        open_vector_store(str(tmp_path / "std.db"), "std", dim=DIM, bm25_vectors="server")
    client = open_vector_store(str(tmp_path / "std.db"), "ok", dim=DIM).client
    assert not client.has_collection("std"), "a refused collection is never created"


@pytest.mark.slow
def test_reindex_rewrites_the_pack_vectors_with_current_statistics(tmp_path):
    from llama_index_rag_pack.milvus.bm25.bm25_upgrade import upgrade_bm25_analysis

    uri = str(tmp_path / "re.db")
    store = open_vector_store(uri, "re", dim=DIM, bm25_vectors="client")
    store.add([node(0, "Aardvarks eat ants.", "a")])
    store.add([node(1, "Ants build nests of sand and ants carry leaves.", "b")])  # later: old avgdl
    before = stats_as_stored(store.client, "re")
    assert upgrade_bm25_analysis(uri, "re") == 2
    client = store.client
    assert stats_as_stored(client, "re") == before == stats_recomputed(client, "re")
    assert not client.has_collection(stats_collection_name("re__bm25_upgrade"))
    reopened = open_vector_store(uri, "re", dim=DIM, must_exist=True)
    assert reopened.bm25_vectors == "client"
    bm25 = ClientBM25(client, "re")
    docs, length = bm25.totals()
    rows = client.query("re", filter="", output_fields=["id", "bm25_text", "sparse_embedding"])
    for row in rows:  # every vector now uses the collection's average length
        expected = bm25.document_vector(row["bm25_text"], length / docs)
        assert row["sparse_embedding"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
def test_a_failed_write_takes_back_what_it_counted(tmp_path, monkeypatch):
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    store = open_vector_store(str(tmp_path / "undo.db"), "undo", dim=DIM, bm25_vectors="client")
    client, name = store.client, store.collection_name
    store.add([node(0, "Aardvarks eat ants.", "a"), node(1, "Ants build nests.", "a")])
    before = stats_as_stored(client, name)
    real = MilvusClient.insert
    calls = []

    def second_batch_fails(self, collection_name, data, **kwargs):
        calls.append(len(data))
        if len(calls) == 2:
            raise MilvusException(code=1100, message="injected: the second batch fails")
        return real(self, collection_name, data, **kwargs)

    monkeypatch.setattr(MilvusClient, "insert", second_batch_fails)
    store.batch_size = 1
    with pytest.raises(RagPackError, match="second batch"):
        store.add([node(2, "Termites eat wood.", "b"), node(3, "Bees make honey.", "b")])
    monkeypatch.undo()
    # the first batch is stored and counted, the second neither
    assert stats_as_stored(client, name) == stats_recomputed(client, name) != before
    store.upsert_mode = True
    store.add([node(0, "Aardvarks dig burrows.", "a")])
    assert stats_as_stored(client, name) == stats_recomputed(client, name)
    client.delete(name, pks=["n1"])  # pymilvus' other spelling of ids
    assert stats_as_stored(client, name) == stats_recomputed(client, name)
    assert stats_as_stored(client, name)[0][0] == 2


@pytest.mark.slow
def test_a_query_of_unknown_words_finds_nothing_without_asking_milvus(tmp_path, monkeypatch):
    from pymilvus import MilvusClient

    store = open_vector_store(str(tmp_path / "none.db"), "none", dim=DIM, bm25_vectors="client")
    store.add([node(0, "Aardvarks eat ants.", "a")])
    flush(store)
    retriever = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=5)
    searched = []
    real = MilvusClient.search
    monkeypatch.setattr(
        MilvusClient, "search", lambda self, *a, **k: searched.append(1) or real(self, *a, **k)
    )
    assert retriever.retrieve("zebras") == []
    assert searched == []
    bm25 = ClientBM25(store.client, "none")
    assert bm25.query_vector("zebra") == {}
