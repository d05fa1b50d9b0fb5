"""The sentence index: splitting chunks into sentences, storing their vectors in Milvus Lite,
and hybrid search scoring a chunk by its best sentence (sync and async)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.sentences import (
    chunk_sentences,
    context_header,
    embed_sentence_units,
    punkt_sentences,
    sentence_units,
)
from llama_index_rag_pack.fusion.convex_fusion import convex_fusion
from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever
from llama_index_rag_pack.fusion.sentence_retriever import MilvusSentenceRetriever
from llama_index_rag_pack.milvus.sentence_index import (
    MilvusSentenceIndex,
    sentence_collection_name,
)

# Each chunk is one document, so every chunk holds several unrelated sentences and only one
# of them answers the question: the chunk's own vector is diluted, its best sentence is not.
DOCS = [
    Document(
        id_="tennis",
        text=(
            "Tennis is played on grass, clay and hard courts around the world. "
            "The sport's governing body publishes the rules every year. "
            "In 1999 Andre Agassi came back from two sets down to beat Andrei Medvedev "
            "in the French Open final at Roland Garros."
        ),
        metadata={"title": "Tennis"},
    ),
    Document(
        id_="chem",
        text=(
            "Chemistry studies matter and its changes. Acids donate protons to bases. "
            "A Lewis acid accepts a pair of electrons from another species."
        ),
        metadata={"title": "Chemistry"},
    ),
    Document(
        id_="cook",
        text=(
            "Bread is baked from flour, water and yeast. Dough rises while the yeast ferments. "
            "Ovens for bread run hotter than ovens for cakes."
        ),
        metadata={"file_name": "baking_notes.txt"},
    ),
]
QUESTION = "Who did Agassi beat after trailing by two sets in Paris?"


# ----------------------------------------------------------------------------- splitting
def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["alpha", "beta", "Dr.", "x", "cat", "1999", "e.g."]), min_size=1)
        .map(" ".join)
        .map(lambda s: s + "."),
        min_size=1,
        max_size=8,
    )
)
def test_sentences_keep_every_word_in_order(sentences):
    text = " ".join(sentences)
    out = chunk_sentences(text, min_words=3)
    assert _words(" ".join(out)) == _words(text)
    assert all(s == " ".join(s.split()) and s for s in out)
    # fragments are joined: only a lone sentence may stay shorter than min_words
    assert len(out) == 1 or all(len(s.split()) >= 3 for s in out[:-1])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([*"ab Z.?!\"')\n\t,:;", "Dr.", "e.g.", "..."]), max_size=30).map(
        "".join
    )
)
def test_sentences_are_split_as_punkt_splits_them_without_loading_it_for_one(text):
    """``punkt_sentences`` answers texts without a break candidate itself (no NLTK load) with
    what punkt answers: whitespace, sentence ends before the last, quotes and brackets."""
    from llama_index.core.node_parser.text.utils import split_by_sentence_tokenizer

    assert punkt_sentences(text) == split_by_sentence_tokenizer()(text)


def test_one_sentence_is_split_without_nltk():
    """A chunk of one sentence costs no NLTK import (about 100 MB with scikit-learn)."""
    code = (
        "import sys\n"
        "from llama_index_rag_pack.documents.sentences import chunk_sentences\n"
        "assert chunk_sentences('One sentence about the river, and no other one.') == "
        "['One sentence about the river, and no other one.']\n"
        "assert 'nltk' not in sys.modules, 'nltk loaded'\n"
        "assert len(chunk_sentences('First one here. Second one there.')) == 2\n"
        "assert 'nltk' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_blank_text_has_no_sentences():
    assert chunk_sentences("   \n ") == []


def test_context_header_prefers_title_then_file_name():
    assert context_header(TextNode(text="x", metadata={"title": "Albedo"})) == "Albedo"
    assert context_header(TextNode(text="x", metadata={"file_name": "my_notes.md"})) == "my notes"
    assert context_header(TextNode(text="x")) == ""


def test_sentence_units_are_headed_and_ids_stable():
    node = TextNode(id_="c1", text="First sentence is here. Second sentence is here.")
    node.metadata["title"] = "T"
    a, b = sentence_units([node]), sentence_units([node])
    assert [u.id for u in a] == [u.id for u in b]
    assert len({u.id for u in a}) == 2
    assert [u.text for u in a] == ["T: First sentence is here.", "T: Second sentence is here."]
    assert {u.chunk_id for u in a} == {"c1"}


class _CountingEmbedding:
    """Records the texts of each sentence batch; a text's vector is its length and its hash."""

    def __init__(self, with_sentence_pass: bool) -> None:
        self.calls: list[list[str]] = []
        if with_sentence_pass:
            self.embed_sentences = self.get_text_embedding_batch

    def get_text_embedding_batch(self, texts, show_progress=False):
        self.calls.append(list(texts))
        return [[float(len(t)), float(hash(t) % 997)] for t in texts]


@pytest.mark.parametrize("with_sentence_pass", [True, False])
def test_a_sentence_repeated_across_chunks_is_embedded_once(with_sentence_pass):
    """The chunk overlap repeats a sentence in two chunks: one vector for both, each unit
    still gets its own (the model's ``embed_sentences`` when it has one)."""
    shared = "The overlap sentence is shared by both chunks."
    first = TextNode(id_="c1", text=f"Only the first chunk says this. {shared}")
    second = TextNode(id_="c2", text=f"{shared} Only the second chunk says that.")
    units = sentence_units([first, second])
    model = _CountingEmbedding(with_sentence_pass)
    vectors = embed_sentence_units(units, model)
    assert len(model.calls) == 1 and len(model.calls[0]) == 3 == len(set(model.calls[0]))
    assert len(vectors) == len(units) == 4
    asked = model.calls[0]
    expected = dict(zip(asked, model.get_text_embedding_batch(asked), strict=True))
    assert all(
        vector.tolist() == pytest.approx(expected[unit.text])
        for unit, vector in zip(units, vectors, strict=True)
    )
    assert len(embed_sentence_units([], model)) == 0


# ----------------------------------------------------------------------------- Milvus
@pytest.fixture(scope="module")
def pack(tmp_path_factory, embed_model):
    """One pack for the tests that only read it (built once per module)."""
    uri = str(tmp_path_factory.mktemp("sentences") / "s.db")
    return RagPack(DOCS, uri=uri, collection_name="docs", embed_model=embed_model)


@pytest.fixture()
def fresh_pack(tmp_path, embed_model):
    """A pack of its own, for the tests that write to it."""
    return RagPack(
        DOCS, uri=str(tmp_path / "s.db"), collection_name="docs", embed_model=embed_model
    )


@pytest.mark.slow
def test_every_sentence_of_every_chunk_is_stored(pack):
    units = sentence_units(
        [n.node for n in pack.retriever("vector", similarity_top_k=10).retrieve("bread tennis")]
    )
    assert pack.sentence_index.collection_name == sentence_collection_name("docs")
    assert pack.sentence_index.count() == len(units) == 9


@pytest.mark.slow
def test_sentence_search_returns_chunks_by_their_best_sentence(pack):
    retriever = MilvusSentenceRetriever(pack.vector_store, embed_model=pack.embed_model)
    nodes = retriever.retrieve(QUESTION)
    assert nodes[0].node.ref_doc_id == "tennis"
    assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)
    assert len({n.node.node_id for n in nodes}) == len(nodes)
    assert nodes[0].node.metadata["retrieval_search_type"] == "sentence"
    # the chunk itself comes back, not the sentence
    assert "Tennis is played" in nodes[0].node.get_content()


@pytest.mark.slow
def test_sentence_search_applies_the_filter_to_chunks(pack):
    retriever = MilvusSentenceRetriever(
        pack.vector_store, embed_model=pack.embed_model, filter='doc_id != "tennis"'
    )
    assert all(n.node.ref_doc_id != "tennis" for n in retriever.retrieve(QUESTION))


@pytest.mark.slow
def test_hybrid_with_sentences_sync_matches_async(pack, assert_same_ranking):
    retriever = pack.retriever("hybrid_convex", sentence_weight=0.5, similarity_top_k=3)
    assert retriever.sentences is not None
    sync = retriever.retrieve(QUESTION)
    async_ = asyncio.run(retriever.aretrieve(QUESTION))
    assert_same_ranking(sync, async_)
    assert sync[0].node.ref_doc_id == "tennis"
    assert all(0.0 <= n.score <= 1.0 for n in sync)


@pytest.mark.slow
def test_sentence_weight_zero_is_the_two_list_fusion(pack, assert_same_ranking):
    off = pack.retriever("hybrid_convex", sentence_weight=0.0, alpha=0.6)
    assert off.sentences is None
    expected = convex_fusion(
        off.dense.retrieve(QUESTION), off.sparse.retrieve(QUESTION), alpha=0.6, top_n=4
    )
    assert_same_ranking(off.retrieve(QUESTION), expected)


@pytest.mark.slow
def test_sentence_weight_one_ranks_by_best_sentence(pack):
    only = pack.retriever("hybrid_convex", sentence_weight=1.0, similarity_top_k=3)
    by_sentence = MilvusSentenceRetriever(
        pack.vector_store, embed_model=pack.embed_model, similarity_top_k=3
    )
    assert [n.node.node_id for n in only.retrieve(QUESTION)] == [
        n.node.node_id for n in by_sentence.retrieve(QUESTION)
    ]


@pytest.mark.slow
def test_reindexing_a_document_replaces_its_sentences(fresh_pack):
    before = fresh_pack.sentence_index.count()
    fresh_pack.insert([Document(id_="tennis", text="Chess is a board game for two players.")])
    assert fresh_pack.sentence_index.count() == before - 3 + 1
    nodes = MilvusSentenceRetriever(
        fresh_pack.vector_store, embed_model=fresh_pack.embed_model
    ).retrieve("a game on a board")
    assert nodes[0].node.get_content().startswith("Chess")


@pytest.mark.slow
def test_reopened_pack_uses_the_stored_sentences(fresh_pack, embed_model):
    reopened = RagPack.open(uri=fresh_pack.uri, collection_name="docs", embed_model=embed_model)
    retriever = reopened.retriever("hybrid_convex", sentence_weight=0.5)
    assert retriever.sentences is not None
    assert retriever.retrieve(QUESTION)[0].node.ref_doc_id == "tennis"


@pytest.mark.slow
def test_overwrite_drops_the_old_sentences(fresh_pack, embed_model):
    again = RagPack(
        DOCS[:1],
        uri=fresh_pack.uri,
        collection_name="docs",
        embed_model=embed_model,
        overwrite=True,
    )
    assert again.sentence_index.count() == 3


@pytest.mark.slow
def test_without_sentence_index_hybrid_uses_two_lists(tmp_path, embed_model, caplog):
    pack = RagPack(
        DOCS,
        uri=str(tmp_path / "n.db"),
        collection_name="docs",
        embed_model=embed_model,
        sentence_index=False,
    )
    assert pack.sentence_index is None
    assert not MilvusSentenceIndex(pack.vector_store.client, "docs").exists()
    with caplog.at_level("INFO", logger="llama_index_rag_pack.fusion.score_fusion"):
        retriever = pack.retriever("hybrid_convex", sentence_weight=0.5)
    assert retriever.sentences is None
    assert "no sentence index" in caplog.text
    assert retriever.retrieve(QUESTION)
    with pytest.raises(ConfigurationError, match="sentence_index=True"):
        MilvusSentenceRetriever(pack.vector_store, embed_model=embed_model)


@pytest.mark.slow
@pytest.mark.parametrize("weight", [-0.1, 1.5, "0.5", True])
def test_bad_sentence_weight_is_rejected(pack, weight):
    with pytest.raises(ConfigurationError, match="sentence_weight"):
        pack.retriever("hybrid_convex", sentence_weight=weight)


@pytest.mark.slow
def test_in_memory_search_matches_the_milvus_search(pack):
    query = pack.embed_model.get_query_embedding(QUESTION)
    client = pack.vector_store.client
    in_milvus = MilvusSentenceIndex(client, "docs").search(query, 20)
    in_memory = MilvusSentenceIndex(client, "docs", in_memory=True).search(query, 20)
    assert [c for c, _ in in_memory] == [c for c, _ in in_milvus]
    assert [s for _, s in in_memory] == pytest.approx([s for _, s in in_milvus], abs=1e-5)


@pytest.mark.slow
def test_in_memory_copy_follows_the_packs_writes(fresh_pack):
    retriever = fresh_pack.retriever("hybrid_convex", sentence_weight=1.0)
    assert retriever.sentences.sentences.in_memory  # a Lite file
    assert retriever.retrieve("a game played on a board")[0].node.ref_doc_id != "chess"
    fresh_pack.insert([Document(id_="chess", text="Chess is a board game for two players.")])
    fresh = fresh_pack.retriever("hybrid_convex", sentence_weight=1.0)
    assert fresh.retrieve("a game played on a board")[0].node.ref_doc_id == "chess"


@pytest.mark.slow
def test_default_mode_is_hybrid_convex_with_sentences(pack):
    assert pack.default_mode == "hybrid_convex"
    retriever = pack.retriever()
    assert isinstance(retriever, MilvusScoreFusionRetriever)
    assert retriever.sentences is not None
    assert retriever.retrieve(QUESTION)[0].node.ref_doc_id == "tennis"


@pytest.mark.slow
def test_default_mode_without_bm25_is_vector(tmp_path, embed_model):
    pack = RagPack(
        DOCS,
        uri=str(tmp_path / "d.db"),
        collection_name="docs",
        embed_model=embed_model,
        enable_bm25=False,
    )
    assert pack.default_mode == "vector"
    assert pack.retriever().retrieve(QUESTION)[0].node.ref_doc_id == "tennis"


class _ShortestFirst(BaseNodePostprocessor):
    """A second stage standing in for a cross-encoder: shortest chunk first, keeps 2."""

    seen: list[int] = []

    def _postprocess_nodes(self, nodes, query_bundle=None):
        self.seen.append(len(nodes))
        ranked = sorted(nodes, key=lambda n: (len(n.node.get_content()), n.node.node_id))
        return [NodeWithScore(node=n.node, score=1.0 / (1 + i)) for i, n in enumerate(ranked)][:2]


@pytest.mark.slow
def test_reranker_hook_sees_pre_top_k_fused_nodes_sync_and_async(pack):
    reranker = _ShortestFirst()
    retriever = pack.retriever("hybrid_convex", reranker=reranker, pre_top_k=3, similarity_top_k=2)
    sync = retriever.retrieve(QUESTION)
    async_ = asyncio.run(retriever.aretrieve(QUESTION))
    assert reranker.seen == [3, 3]
    lengths = [len(n.node.get_content()) for n in sync]
    assert lengths == sorted(lengths) and len(sync) == 2
    assert [n.node.node_id for n in sync] == [n.node.node_id for n in async_]
    with pytest.raises(ConfigurationError, match="pre_top_k only applies"):
        pack.retriever("hybrid_convex", pre_top_k=5)


@pytest.mark.slow
def test_searches_in_turn_rank_like_searches_at_once(pack, assert_same_ranking):
    lite = pack.retriever("hybrid_convex", sentence_weight=0.4)
    assert not lite.concurrent_searches  # a Lite file: one process answers every request
    at_once = MilvusScoreFusionRetriever(
        pack.vector_store, embed_model=pack.embed_model, similarity_top_k=4
    )
    assert at_once.concurrent_searches and at_once.sentences is not None
    assert_same_ranking(lite.retrieve(QUESTION), at_once.retrieve(QUESTION))
    assert_same_ranking(
        asyncio.run(lite.aretrieve(QUESTION)), asyncio.run(at_once.aretrieve(QUESTION))
    )
