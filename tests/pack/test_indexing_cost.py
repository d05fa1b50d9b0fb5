"""What indexing does once per chunk stays once per chunk, however many batches core's index
writes it in."""

from __future__ import annotations

from typing import Any

from llama_index.core import Document
from llama_index.core.embeddings import MockEmbedding

from llama_index_rag_pack.documents.language_analysis import LanguageAnalyzer
from llama_index_rag_pack.pack.rag_pack import RagPack


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
