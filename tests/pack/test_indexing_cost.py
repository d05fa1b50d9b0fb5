"""What indexing does once per chunk stays once per chunk, however many batches core's index
writes it in; documents are written in slices, each document whole."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.embeddings import MockEmbedding

from llama_index_rag_pack.documents.language_analysis import LanguageAnalyzer
from llama_index_rag_pack.pack import indexing
from llama_index_rag_pack.pack.rag_pack import RagPack

pytestmark = pytest.mark.slow


def _docs(count: int) -> list[Document]:
    return [
        Document(text=f"Document number {i} talks about rivers and mountains.", id_=f"d{i}")
        for i in range(count)
    ]


def test_each_chunk_is_analysed_for_bm25_once_across_insert_batches(
    milvus_uri: str, monkeypatch: Any
) -> None:
    calls: list[str] = []
    original = LanguageAnalyzer.analyse_document

    def counted(self: Any, text: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(text)
        return original(self, text, *args, **kwargs)

    monkeypatch.setattr(LanguageAnalyzer, "analyse_document", counted)
    # core's VectorStoreIndex writes 2,048 nodes per batch: three batches here
    pack = RagPack(
        _docs(4500), uri=milvus_uri, collection_name="batches", embed_model=MockEmbedding(8)
    )
    assert pack.count() == 4500
    assert len(calls) == 4500
    assert len(set(calls)) == 4500
    hits = pack.retriever(mode="bm25", similarity_top_k=3).retrieve("document number 4321")
    assert "4321" in hits[0].node.get_content()


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdefg"), st.integers(min_value=1, max_value=50)),
        max_size=30,
    ),
    st.integers(min_value=1, max_value=120),
)
def test_slices_keep_order_and_every_id_whole(docs: list[tuple[str, int]], limit: int) -> None:
    documents = [Document(text="x" * n, id_=doc_id) for doc_id, n in docs]
    slices = list(indexing.document_slices(documents, max_chars=limit))
    flat = [d for part in slices for d in part]
    assert sorted(map(id, flat)) == sorted(map(id, documents))  # each document once
    for doc_id in {d for d, _ in docs}:  # one id: one slice, in the order given
        holding = [i for i, part in enumerate(slices) if any(d.doc_id == doc_id for d in part)]
        assert len(holding) == 1
        mine = [d for d in documents if d.doc_id == doc_id]
        assert [d for d in slices[holding[0]] if d.doc_id == doc_id] == mine
    for part in slices:  # over the limit only when one id alone is
        if sum(len(d.text) for d in part) > limit:
            assert len({d.doc_id for d in part}) == 1
    assert all(slices)


class _FailsOn(MockEmbedding):
    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        if any("BOOM" in t for t in texts):
            raise RuntimeError("embedding server went away")
        return super()._get_text_embeddings(texts)


def test_a_failure_in_a_later_slice_leaves_each_document_old_or_new(
    milvus_uri: str, monkeypatch: Any
) -> None:
    monkeypatch.setattr(indexing, "SLICE_CHARS", 300)
    first = [Document(text=f"{n} version one. " * 12, id_=n) for n in ("a", "b", "c", "d")]
    pack = RagPack(first, uri=milvus_uri, collection_name="slices", embed_model=_FailsOn(8))
    second = [Document(text=f"{n} version two. " * 12, id_=n) for n in ("a", "b")]
    second += [Document(text="c version two BOOM. " * 12, id_="c")]
    second += [Document(text="d version two. " * 12, id_="d")]
    with pytest.raises(RuntimeError, match="went away"):
        pack.insert(second)
    texts = {
        hit.node.ref_doc_id: hit.node.get_content()
        for hit in pack.retriever(mode="bm25", similarity_top_k=20).retrieve("version")
    }
    assert "version two" in texts["a"] and "version two" in texts["b"]  # slice 1: written
    assert "version one" in texts["c"] and "version one" in texts["d"]  # slice 2: untouched
    assert pack.count() == 4
