"""Sentence vectors pooled from one pass per chunk (``sentence_vectors="pooled"``): the chunk
vectors are the model's own, each sentence's vector reads that sentence, sentences past the
model's length are embedded on their own, and a pack indexed this way answers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.schema import TextNode

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.sentences import chunk_sentences, sentence_units
from llama_index_rag_pack.pack import indexing
from llama_index_rag_pack.pack.rag_pack import RagPack

CHUNKS = [
    "The aardvark is a nocturnal mammal of Africa. It feeds almost only on ants and termites. "
    "Its burrows shelter other animals.",
    "Apollo 11 landed on the Moon in July 1969. Neil Armstrong and Buzz Aldrin walked on it "
    "while Michael Collins stayed in orbit.",
    "Albert Einstein was born in Ulm in 1879. He developed the theory of relativity.",
]


@pytest.fixture(scope="module")
def pooler(embed_model: Any) -> Any:
    found = embed_model.token_pooler()
    assert found is not None, "the bundled model runs on ONNX Runtime and can pool"
    return found


@pytest.mark.slow
def test_chunk_vectors_are_the_models_own(pooler: Any, embed_model: Any) -> None:
    texts = [*CHUNKS, "A long passage about rivers. " * 120]  # truncated alike
    vectors, _ = pooler.pool(texts, [[] for _ in texts])
    expected = np.asarray(embed_model.get_text_embedding_batch(texts))
    assert np.all(np.sum(vectors * expected, axis=1) > 0.9999)


@pytest.mark.slow
def test_each_sentence_vector_reads_its_own_sentence(pooler: Any, embed_model: Any) -> None:
    sentences = [chunk_sentences(c) for c in CHUNKS]
    _, pooled = pooler.pool(CHUNKS, sentences)
    flat = [
        (s, v)
        for per, vs in zip(sentences, pooled, strict=True)
        for s, v in zip(per, vs, strict=True)
    ]
    assert all(v is not None and abs(np.linalg.norm(v) - 1) < 1e-5 for _, v in flat)
    pooled_matrix = np.stack([v for _, v in flat])
    alone = np.asarray(embed_model.get_text_embedding_batch([s for s, _ in flat]))
    # each sentence on its own is nearest to its own pooled vector, of all the sentences
    assert list(np.argmax(alone @ pooled_matrix.T, axis=1)) == list(range(len(flat)))


@pytest.mark.slow
def test_a_sentence_past_the_models_length_is_not_pooled(pooler: Any) -> None:
    long = "Rivers carry water to the sea. " * 80 + "The last sentence names Budapest."
    sentences = chunk_sentences(long)
    _, pooled = pooler.pool([long], [sentences])
    assert pooled[0][0] is not None
    assert pooled[0][-1] is None  # past 256 word pieces: the caller embeds it on its own


def nodes() -> list[TextNode]:
    out = []
    for i, text in enumerate([*CHUNKS, "Rivers carry water to the sea. " * 80 + "Budapest."]):
        out.append(TextNode(id_=f"c{i}", text=text, metadata={"title": f"doc {i}"}))
    return out


@pytest.mark.slow
def test_pooled_indexing_gives_every_sentence_a_vector(embed_model: Any, tmp_path: Any) -> None:
    from llama_index_rag_pack.milvus.connection import open_vector_store
    from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex

    store = open_vector_store(str(tmp_path / "s.db"), "s", dim=384)
    index = MilvusSentenceIndex(store.client, "s")
    pooled_nodes, separate_nodes = nodes(), nodes()
    units, vectors = indexing.embed_for_index(pooled_nodes, index, embed_model, "pooled")
    units_apart, vectors_apart = indexing.embed_for_index(
        separate_nodes, index, embed_model, "separate"
    )
    assert [u.id for u in units] == [u.id for u in units_apart]
    assert len(vectors) == len(units) and all(len(v) == 384 for v in vectors)
    for a, b in zip(pooled_nodes, separate_nodes, strict=True):  # the chunks' own vectors
        assert float(np.dot(a.embedding, b.embedding)) > 0.9999
    # the unreached last sentence of the long chunk got its separate vector
    assert float(np.dot(vectors[-1], vectors_apart[-1])) > 0.9999
    assert float(np.dot(vectors[0], vectors_apart[0])) < 0.9999  # pooled, not separate


def test_a_model_that_cannot_pool_embeds_sentences_apart(tmp_path: Any) -> None:
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_rag_pack.milvus.connection import open_vector_store
    from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex

    store = open_vector_store(str(tmp_path / "m.db"), "m", dim=8)
    index = MilvusSentenceIndex(store.client, "m")
    chunks = nodes()[:2]
    units, vectors = indexing.embed_for_index(chunks, index, MockEmbedding(embed_dim=8), "pooled")
    assert len(units) == len(sentence_units(chunks)) == len(vectors)
    assert all(len(c.embedding) == 8 for c in chunks)


@pytest.mark.slow
def test_a_pack_indexed_with_pooled_sentences_answers(embed_model: Any, tmp_path: Any) -> None:
    docs = [
        Document(text=t, id_=f"d{i}", metadata={"title": f"doc {i}"}) for i, t in enumerate(CHUNKS)
    ]
    pack = RagPack(
        docs, uri=str(tmp_path / "p.db"), embed_model=embed_model, sentence_vectors="pooled"
    )
    assert pack.sentence_vectors == "pooled"
    assert pack.retriever().retrieve("Who stayed in lunar orbit?")[0].node.ref_doc_id == "d1"
    assert pack.vector_store.client.has_collection(
        pack.vector_store.collection_name + "__sentences"
    )


def test_an_unknown_choice_is_refused_before_anything_loads(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="sentence_vectors must be one of"):
        RagPack([Document(text="x")], uri=str(tmp_path / "x.db"), sentence_vectors="mean")
    assert not (tmp_path / "x.db").exists()


def test_token_exports_are_named_and_pruned_apart_from_the_pooled_ones(embed_model: Any) -> None:
    from llama_index_rag_pack.models.onnx_encoder import onnx_export_path
    from llama_index_rag_pack.models.token_pooling import token_export_path

    pooled = onnx_export_path(embed_model.model_name)
    tokens = token_export_path(embed_model.model_name)
    model = pooled.stem.rsplit("-", 1)[0]
    assert tokens.parent == pooled.parent and tokens != pooled
    assert not tokens.match(f"{model}-*.onnx")  # not one of the pooled exports' group
    assert tokens.stem.rsplit("-", 1)[1] == pooled.stem.rsplit("-", 1)[1]  # same model files
