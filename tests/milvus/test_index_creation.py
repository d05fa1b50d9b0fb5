"""New collections get their indexes without pymilvus' fixed half-second waits
(milvus/index_creation.py): the same indexes ``MilvusVectorStore`` would make, built, loaded
and searchable, on Milvus Lite and on a ``milvus-lite`` server."""

from __future__ import annotations

import pytest
from llama_index.core import Document
from llama_index.vector_stores.milvus import IndexManagement, MilvusVectorStore
from pymilvus.client import grpc_handler

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.milvus.connection import open_vector_store
from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex


def no_fixed_waits(monkeypatch):
    """pymilvus' index wait sleeps 0.5 s before each look: fail if it is ever reached."""

    def refuse(*args, **kwargs):
        raise AssertionError("pymilvus' fixed wait for an index was used")

    monkeypatch.setattr(grpc_handler.GrpcHandler, "wait_for_creating_index", refuse)


@pytest.fixture(name="no_fixed_waits")
def no_fixed_waits_fixture(monkeypatch):
    no_fixed_waits(monkeypatch)


def _indexes(client, name):
    out = {}
    for index in client.list_indexes(name):
        info = client.describe_index(name, index_name=index)
        out[info["field_name"]] = (info["index_type"], info["metric_type"], info["state"])
    return out


@pytest.mark.slow
def test_a_new_store_has_the_indexes_milvus_vector_store_makes(tmp_path, monkeypatch):
    # what MilvusVectorStore itself creates with the pack's settings (waiting the fixed way)
    template = open_vector_store(str(tmp_path / "t.db"), "docs", dim=8)
    reference = MilvusVectorStore(
        uri=str(tmp_path / "b.db"),
        collection_name="docs",
        dim=8,
        similarity_metric="COSINE",
        enable_sparse=True,
        sparse_embedding_function=template.sparse_embedding_function,
        scalar_field_names=template.scalar_field_names,
        scalar_field_types=template.scalar_field_types,
    )
    no_fixed_waits(monkeypatch)
    store = open_vector_store(str(tmp_path / "a.db"), "docs", dim=8)
    ours = _indexes(store.client, "docs")
    assert set(ours) == {"embedding", "sparse_embedding"}
    assert all(state == "Finished" for *_, state in ours.values())
    assert ours == _indexes(reference.client, "docs")
    assert str(store.client.get_load_state("docs")["state"]) == "Loaded"
    assert store.index_management is IndexManagement.CREATE_IF_NOT_EXISTS


@pytest.mark.slow
def test_a_new_pack_indexes_and_answers_without_fixed_waits(tmp_path, embed_model, no_fixed_waits):
    pack = RagPack(
        [Document(id_="a", text="Glaciers carve valleys. They move slowly downhill.")],
        uri=str(tmp_path / "p.db"),
        collection_name="docs",
        embed_model=embed_model,
    )
    sentences = MilvusSentenceIndex(pack.vector_store.client, "docs")
    assert sentences.count() == 2
    assert _indexes(pack.vector_store.client, sentences.collection_name) == {
        "embedding": ("FLAT", "COSINE", "Finished")
    }
    for mode in ("hybrid_convex", "bm25", "vector"):
        assert pack.retriever(mode).retrieve("glacier valleys")[0].node.ref_doc_id == "a"


def test_an_existing_collection_is_reopened_as_it_is(tmp_path, no_fixed_waits):
    first = open_vector_store(str(tmp_path / "a.db"), "docs", dim=8)
    before = _indexes(first.client, "docs")
    again = open_vector_store(str(tmp_path / "a.db"), "docs", dim=8)
    assert _indexes(again.client, "docs") == before


def test_the_callers_index_management_is_kept(tmp_path):
    store = open_vector_store(
        str(tmp_path / "a.db"), "docs", dim=8, index_management=IndexManagement.NO_VALIDATION
    )
    assert store.index_management is IndexManagement.NO_VALIDATION
    assert _indexes(store.client, "docs") == {}  # no indexes asked for, none made


@pytest.mark.slow
def test_a_server_collection_gets_its_indexes_the_same_way(milvus_server, no_fixed_waits):
    store = open_vector_store(milvus_server, "served", dim=8, overwrite=True)
    assert set(_indexes(store.client, "served")) == {"embedding", "sparse_embedding"}
    assert str(store.client.get_load_state("served")["state"]) == "Loaded"
