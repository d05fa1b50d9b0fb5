"""The BM25 side's analysis: the pure function (property tests), and what it does on real Milvus
Lite and on a ``milvus-lite server`` (stems match, original text shown, old collections still
answer and upgrade, Lite and the server rank alike)."""

from __future__ import annotations

import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import Document

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.bm25_analysis import (
    ENGLISH_STOP_WORDS,
    MAX_ANALYSED_BYTES,
    analyze_for_bm25,
    document_headings,
    english_terms,
    resolve_analyzer,
    word_tokens,
)
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.milvus.bm25.bm25_fields import BM25_TEXT_FIELD, stored_bm25_analysis
from llama_index_rag_pack.milvus.bm25.bm25_upgrade import upgrade_bm25_analysis
from llama_index_rag_pack.milvus.connection import count_entities, flush, open_vector_store
from llama_index_rag_pack.pack.rag_pack import RagPack

# ------------------------------------------------------------------ the pure function
ascii_words = st.lists(
    st.one_of(
        st.sampled_from(sorted(ENGLISH_STOP_WORDS)),
        st.text(alphabet=string.ascii_letters + string.digits, min_size=1),
    ),
    max_size=30,
)
separators = st.sampled_from([" ", "  ", ", ", ". ", "\n", "-", "'", "_", "/", "(", ") "])


@st.composite
def texts(draw: st.DrawFn) -> str:
    words = draw(ascii_words)
    return "".join(w + draw(separators) for w in words)


@pytest.mark.slow
@given(texts())
def test_the_standard_tokenizer_reads_back_exactly_the_analysed_terms(text):
    analysed = analyze_for_bm25(text, english_terms)
    assert word_tokens(analysed) == analysed.split() == english_terms(text)


@pytest.mark.slow
@given(texts(), texts())
def test_analysis_is_word_local_so_texts_concatenate(a, b):
    assert english_terms(f"{a} {b}") == english_terms(a) + english_terms(b)


@pytest.mark.slow
@given(texts())
def test_case_and_punctuation_do_not_change_the_terms(text):
    assert english_terms(text.upper()) == english_terms(text.lower())
    assert english_terms(text) == english_terms(" ".join(word_tokens(text)))


@pytest.mark.slow
@given(texts())
def test_stop_words_never_reach_the_stemmer_and_terms_are_lower_case(text):
    words = word_tokens(text)
    terms = english_terms(text)
    assert len(terms) == sum(w not in ENGLISH_STOP_WORDS for w in words)
    assert all(t == t.lower() and t for t in terms)


@pytest.mark.slow
@given(st.lists(st.text(min_size=1, max_size=20), max_size=20))
@settings(max_examples=50)
def test_a_custom_analyzer_sees_its_terms_split_into_words(terms):
    analysed = analyze_for_bm25("ignored", lambda _text: terms)
    assert analysed.split() == [w for t in terms for w in word_tokens(t)]


def test_the_stemmer_is_snowball_english():
    expected = {  # Porter2 (Snowball English) reference stems
        "running": "run",
        "runs": "run",
        "generously": "generous",
        "connection": "connect",
        "connected": "connect",
        "caresses": "caress",
        "ponies": "poni",
        "agreed": "agre",
        "hopping": "hop",
        "fishing": "fish",
        "cats": "cat",
        "relational": "relat",
    }
    assert english_terms(" ".join(expected)) == list(expected.values())


def test_long_text_is_cut_below_the_varchar_limit_at_a_term_boundary():
    analysed = analyze_for_bm25("elephant " * 20_000, english_terms)
    assert len(analysed.encode()) <= MAX_ANALYSED_BYTES
    assert set(analysed.split()) == {"eleph"}


def test_headings_and_analyzer_names():
    assert document_headings({"title": "Apollo 11", "header_path": "/Crew/Landing/"}) == [
        "Apollo 11",
        "Crew",
        "Landing",
    ]
    assert resolve_analyzer(None).name == "auto"
    assert resolve_analyzer("english").name == "english"
    assert not resolve_analyzer("standard").client_side
    assert resolve_analyzer(str.split).name.startswith("custom:")
    with pytest.raises(ConfigurationError, match="english"):
        resolve_analyzer("klingon")
    with pytest.raises(ConfigurationError, match="callable"):
        resolve_analyzer(42)


# ------------------------------------------------------------------ on Milvus Lite
DOCS = {
    "jog": ("Morning exercise", "The athlete runs along the river every morning before work."),
    "cat": ("Cats", "A cat sleeps most of the day in sunny places."),
    "sail": ("Sailing", "Sailors trim the sails when the wind changes direction."),
    "bake": ("Bread", "Bakers knead the dough and let it rise overnight."),
}


def documents() -> list[Document]:
    return [
        Document(id_=key, text=text, metadata={"title": title})
        for key, (title, text) in DOCS.items()
    ]


def top_doc(pack: RagPack, query: str, mode: str = "bm25") -> str | None:
    nodes = pack.retriever(mode, similarity_top_k=1).retrieve(query)
    return nodes[0].node.ref_doc_id if nodes else None


@pytest.fixture(scope="module")
def english_pack(tmp_path_factory, embed_model):
    uri = str(tmp_path_factory.mktemp("bm25en") / "en.db")
    return RagPack(documents(), uri=uri, collection_name="en", embed_model=embed_model)


@pytest.mark.slow
def test_a_query_finds_other_forms_of_its_words_on_lite(english_pack, embed_model, tmp_path):
    assert english_pack.vector_store.bm25_analysis.name == "auto"  # the default
    assert top_doc(english_pack, "running") == "jog"
    assert top_doc(english_pack, "sailing winds") == "sail"
    assert top_doc(english_pack, "kneading") == "bake"
    # the title is in what BM25 reads, though not in the chunk's text
    assert top_doc(english_pack, "exercises") == "jog"
    standard = RagPack(
        documents(),
        uri=str(tmp_path / "std.db"),
        collection_name="std",
        embed_model=embed_model,
        bm25_analyzer="standard",
    )
    assert top_doc(standard, "running") is None  # only "runs" is indexed there


@pytest.mark.slow
def test_display_text_is_the_original_and_metadata_stays_clean(english_pack):
    for mode in ("bm25", "hybrid", "hybrid_convex"):
        nodes = english_pack.retriever(mode, similarity_top_k=1).retrieve("running")
        node = nodes[0].node
        assert node.text == DOCS["jog"][1]
        assert BM25_TEXT_FIELD not in node.metadata
    client = english_pack.vector_store.client
    row = client.query("en", filter='doc_id == "jog"', output_fields=["text", BM25_TEXT_FIELD])[0]
    assert row["text"] == DOCS["jog"][1]
    assert row[BM25_TEXT_FIELD] == "morn exercis athlet run along river everi morn befor work"


@pytest.mark.slow
def test_a_query_of_stop_words_only_finds_nothing_by_bm25_and_hybrid_still_answers(english_pack):
    assert english_pack.retriever("bm25").retrieve("the and of") == []
    assert len(english_pack.retriever("hybrid", similarity_top_k=2).retrieve("the and of")) == 2


def old_format_collection(uri: str, name: str, embed_model) -> None:
    """A collection as the pack wrote it before the English analysis: BM25 reads ``text``,
    nothing recorded."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.milvus import MilvusVectorStore
    from llama_index.vector_stores.milvus.utils import BM25BuiltInFunction

    from llama_index_rag_pack.documents.chunking import split_documents

    store = MilvusVectorStore(
        uri=uri,
        collection_name=name,
        dim=384,
        similarity_metric="COSINE",
        enable_sparse=True,
        sparse_embedding_function=BM25BuiltInFunction(),
    )
    VectorStoreIndex(
        split_documents(documents()),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
    )
    flush(store)
    store.client.close()


@pytest.mark.slow
def test_an_old_collection_still_answers_and_reindex_upgrades_it(tmp_path, embed_model):
    uri = str(tmp_path / "old.db")
    old_format_collection(uri, "old", embed_model)
    pack = RagPack.open(uri=uri, collection_name="old", embed_model=embed_model)
    assert pack.vector_store.bm25_analysis.name == "standard"
    assert top_doc(pack, "runs") == "jog"  # its own (standard) analysis
    assert top_doc(pack, "running") is None
    assert top_doc(pack, "athlete running", mode="hybrid_convex") == "jog"
    ids_before = sorted(
        r["id"] for r in pack.vector_store.client.query("old", filter="", output_fields=["id"])
    )
    pack.vector_store.client.close()

    assert upgrade_bm25_analysis(uri, "old") == len(DOCS)
    pack = RagPack.open(uri=uri, collection_name="old", embed_model=embed_model)
    client = pack.vector_store.client
    assert stored_bm25_analysis(client, "old") == "auto"
    assert count_entities(pack.vector_store) == len(DOCS)
    assert sorted(r["id"] for r in client.query("old", filter="", output_fields=["id"])) == (
        ids_before
    )
    assert top_doc(pack, "running") == "jog"
    assert top_doc(pack, "running", mode="vector") == "jog"  # vectors kept
    assert upgrade_bm25_analysis(uri, "old") == 0  # already auto


@pytest.mark.slow
def test_a_custom_analyzer_is_recorded_and_needed_to_search(tmp_path, embed_model):
    def first_four_letters(text: str) -> list[str]:
        return [w[:4] for w in word_tokens(text)]

    uri = str(tmp_path / "custom.db")
    pack = RagPack(
        documents(),
        uri=uri,
        collection_name="custom",
        embed_model=embed_model,
        bm25_analyzer=first_four_letters,
    )
    assert top_doc(pack, "sailboats") == "sail"
    client = pack.vector_store.client
    assert stored_bm25_analysis(client, "custom").endswith("first_four_letters")
    with pytest.raises(ConfigurationError, match="same callable"):
        MilvusHybridRetriever(client=client, collection_name="custom", search_type="sparse")
    retriever = MilvusHybridRetriever(
        client=client,
        collection_name="custom",
        search_type="sparse",
        bm25_analyzer=first_four_letters,
    )
    assert retriever.retrieve("sailboats")[0].node.ref_doc_id == "sail"


# ------------------------------------------------------------------ Lite and a server agree
@pytest.mark.slow
def test_lite_and_a_milvus_lite_server_rank_dev_questions_alike(tmp_path, milvus_server):
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.labelled import load_corpus, load_labelled_set

    dev = load_labelled_set("wiki_qa_para", split="dev")
    wanted = sorted({i.removeprefix("wiki:") for ex in dev.examples for i in ex.relevant_ids})
    docs = load_corpus("wikipedia", titles=wanted[:12])
    doc_ids = {d.doc_id for d in docs}
    questions = [ex.question for ex in dev.examples if set(ex.relevant_ids) <= doc_ids]
    assert len(questions) >= 10
    nodes = split_documents(docs)
    # only the BM25 side is compared: any dense vectors do (real ones cost 20 s to embed)
    vectors = np.random.default_rng(0).normal(size=(len(nodes), 384))
    rankings = {}
    for node, vector in zip(nodes, vectors, strict=True):
        node.embedding = (vector / np.linalg.norm(vector)).tolist()
    for where, uri in (("lite", str(tmp_path / "agree.db")), ("server", milvus_server)):
        store = open_vector_store(uri, "agree", dim=384, overwrite=True)
        store.add(nodes)
        flush(store)
        retriever = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=10)
        rankings[where] = [[n.node.node_id for n in retriever.retrieve(q)] for q in questions]
    assert all(len(r) == 10 for r in rankings["lite"])
    assert rankings["lite"] == rankings["server"]


@pytest.mark.slow
def test_rag_pack_index_reindex_upgrades_an_old_collection(tmp_path, embed_model, capsys):
    from llama_index_rag_pack.cli import main

    uri = str(tmp_path / "cli_old.db")
    old_format_collection(uri, "docs", embed_model)
    assert main(["--uri", uri, "--collection", "docs", "index", "--reindex"]) == 0
    assert f"{len(DOCS)} chunks re-indexed with the auto BM25 analysis" in (capsys.readouterr().out)
    assert main(["--uri", uri, "--collection", "docs", "index", "--reindex"]) == 0
    assert "already uses the auto BM25 analysis" in capsys.readouterr().out
    assert main(["--uri", uri, "--collection", "docs", "index"]) == 2
    assert "--reindex" in capsys.readouterr().err
