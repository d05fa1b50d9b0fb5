"""The fusion / hybrid / HyDE / rewrite modes through RagPack, and once with the real local LLM."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import Document

from llama_index_rag_pack import RagPack, RetrievalMode
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.fusion.hyde import HyDERetriever
from llama_index_rag_pack.fusion.rag_fusion import FusionRetriever
from llama_index_rag_pack.fusion.rewrite import RewriteRetriever

pytestmark = pytest.mark.slow

DOCS = [
    Document(
        id_="bm25",
        text="Okapi BM25 is a ranking function search engines use to score keyword matches.",
    ),
    Document(id_="milvus", text="Milvus is an open-source vector database for similarity search."),
    Document(id_="paris", text="Paris is the capital and largest city of France."),
    Document(
        id_="volcano", text="A volcano erupts when magma rises through the crust of the Earth."
    ),
    Document(id_="part", text="Spare part QZ-881 replaces the worn gasket of the pump."),
]
MODES = ["bm25", "hybrid", "hybrid_weighted", "fusion", "hyde", "rewrite"]


def reply(prompt: str) -> str:
    if "search queries" in prompt:
        return '1. keyword ranking function\n2. "how search engines score matches"\n3. BM25 scoring'
    if "passage" in prompt.lower():
        return "Passage: Search engines rank keyword matches with BM25, a ranking function."
    return "Search query: BM25 ranking function"


@pytest.fixture(scope="module")
def pack(tmp_path_factory, embed_model):
    from llama_index_rag_pack.testing import ScriptedLLM

    return RagPack(
        DOCS,
        uri=str(tmp_path_factory.mktemp("pack") / "p.db"),
        collection_name="fusion_pack",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=reply),
        similarity_top_k=3,
    )


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_retrieves_through_the_pack(pack, mode):
    retriever = pack.retriever(mode)
    q = "Which ranking function do search engines use for keyword matches?"
    nodes = retriever.retrieve(q)
    assert nodes and nodes[0].node.ref_doc_id == "bm25"
    assert len(nodes) <= 3
    async_nodes = asyncio.run(retriever.aretrieve(q))
    assert [n.node.node_id for n in async_nodes] == [n.node.node_id for n in nodes]
    assert pack.retriever(mode) is retriever  # cached


def test_sequence_arguments_are_accepted_and_cached_by_value(pack):
    # lists are unhashable: the retriever cache must not choke on them
    weighted = pack.retriever("fusion", weights=[1.0, 0.5])
    assert weighted.weights == [1.0, 0.5]
    assert pack.retriever("fusion", weights=(1.0, 0.5)) is weighted
    assert pack.retriever("fusion", weights=[0.5, 1.0]) is not weighted
    hybrid = pack.retriever("hybrid_weighted", weights=[0.4, 0.6])
    assert hybrid.weights == [0.4, 0.6]


def test_pack_modes_build_the_right_classes(pack):
    assert isinstance(pack.retriever("bm25"), MilvusHybridRetriever)
    assert pack.retriever("bm25").search_type.value == "sparse"
    assert pack.retriever("hybrid").ranker.value == "rrf"
    assert pack.retriever("hybrid_weighted").weights == [0.7, 0.3]
    fusion = pack.retriever("fusion")
    assert isinstance(fusion, FusionRetriever) and fusion.retriever_names == ["dense", "bm25"]
    assert isinstance(pack.retriever("hyde"), HyDERetriever)
    assert isinstance(pack.retriever("rewrite"), RewriteRetriever)
    assert (
        pack.retriever("fusion", num_queries=2, fusion_mode="relative_score").mode.value
        == "relative_score"
    )
    assert (
        pack.retriever("bm25", similarity_top_k=1).retrieve("QZ-881 gasket")[0].node.ref_doc_id
        == "part"
    )


@pytest.mark.parametrize("mode", ["hyde", "rewrite"])
def test_query_side_modes_search_through_the_default_mode(pack, mode):
    from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever

    assert pack.default_mode == "hybrid_convex"
    assert isinstance(pack.retriever(mode).retriever, MilvusScoreFusionRetriever)
    dense = pack.retriever(mode, base="vector").retriever
    assert dense is pack.retriever("vector") and dense is not pack.retriever(mode).retriever
    with pytest.raises(ConfigurationError, match="base='rag'.*use one of"):
        pack.retriever(mode, base="rag")


def test_hyde_cannot_search_with_bm25_alone(pack):
    with pytest.raises(ConfigurationError, match="base='bm25' cannot serve mode 'hyde'"):
        pack.retriever("hyde", base="bm25")
    assert pack.retriever("rewrite", base="bm25").retriever is pack.retriever("bm25")


def test_hyde_over_the_default_sends_the_passage_embedding_and_the_question_words(pack):
    from llama_index.core.schema import QueryBundle

    q = "Which ranking function do search engines use for keyword matches?"
    hyde = pack.retriever("hyde")
    passage = "Search engines rank keyword matches with BM25, a ranking function."
    expected = hyde.retriever.retrieve(
        QueryBundle(query_str=q, embedding=pack.embed_model.get_text_embedding(passage))
    )
    for got in (hyde.retrieve(q), asyncio.run(hyde.aretrieve(q))):
        assert [n.node.node_id for n in got] == [n.node.node_id for n in expected]
        assert [n.score for n in got] == pytest.approx([n.score for n in expected], abs=1e-5)


def test_rewrite_over_the_default_searches_the_rewritten_query(pack):
    rewrite = pack.retriever("rewrite")
    expected = pack.retriever("hybrid_convex").retrieve("BM25 ranking function")
    for got in (rewrite.retrieve("what do engines use?"), asyncio.run(rewrite.aretrieve("x y z"))):
        assert [n.node.node_id for n in got] == [n.node.node_id for n in expected]


def test_get_modules_lists_the_new_retrievers(pack):
    modules = pack.get_modules()
    for mode in ("bm25", "hybrid", "fusion", "hyde", "rewrite"):
        assert modules[f"{mode}_retriever"] is pack.retriever(mode)


def test_unknown_mode_lists_the_valid_ones(pack):
    with pytest.raises(ConfigurationError) as info:
        pack.retriever("rag_fusion")
    for mode in MODES:
        assert mode in str(info.value)
    assert {m.value for m in RetrievalMode} >= set(MODES)


def test_collection_without_bm25(tmp_path, embed_model):
    from llama_index_rag_pack.testing import ScriptedLLM

    pack = RagPack(
        DOCS[:3],
        uri=str(tmp_path / "d.db"),
        collection_name="dense_only",
        enable_bm25=False,
        embed_model=embed_model,
        llm=ScriptedLLM(replies=reply),
    )
    with pytest.raises(ConfigurationError, match="enable_bm25=True"):
        pack.retriever("hybrid")
    fusion = pack.retriever("fusion", num_queries=1)
    assert fusion.retriever_names == ["dense"]
    assert fusion.retrieve("vector database")[0].node.ref_doc_id == "milvus"
    assert "hybrid_retriever" not in pack.get_modules()
    # query-side modes fall back to dense search on the pack's default, vector
    assert pack.retriever("hyde").retriever is pack.retriever("vector")
    assert pack.retriever("rewrite").retriever is pack.retriever("vector")


def test_fusion_hyde_rewrite_with_the_real_local_llm(pack, local_llm, caplog):
    """The bundled SmolLM2-135M writes the variants / passage / rewrite; whatever it says, the
    retrievers parse it or fall back, and still answer from the collection."""
    q = "Which ranking function do search engines use for keyword matches?"
    dense = MilvusHybridRetriever(
        vector_store=pack.vector_store,
        embed_model=pack.embed_model,
        search_type="dense",
        similarity_top_k=3,
    )
    fusion = FusionRetriever(
        {"dense": dense, "bm25": pack.retriever("bm25")},
        llm=local_llm,
        num_queries=3,
        similarity_top_k=3,
    )
    nodes = fusion.retrieve(q)
    assert nodes and q in nodes[0].node.metadata["fusion_queries"]
    assert all(
        isinstance(x, str) and x.strip() and "\n" not in x
        for x in nodes[0].node.metadata["fusion_queries"]
    )
    hyde_nodes = asyncio.run(
        HyDERetriever(dense, llm=local_llm, embed_model=pack.embed_model).aretrieve(q)
    )
    assert len(hyde_nodes) == 3
    rewrite_nodes = RewriteRetriever(dense, llm=local_llm).retrieve(q)
    assert rewrite_nodes and rewrite_nodes[0].node.metadata["rewritten_query"].strip()


@pytest.fixture
def check_counter(monkeypatch):
    """Counts ``check_query`` calls, wherever a module of the package imported it from."""
    import sys

    from llama_index_rag_pack.core import errors

    original, calls = errors.check_query, []

    def counting(query):
        calls.append(getattr(query, "query_str", query))
        return original(query)

    for name, module in list(sys.modules.items()):
        if (
            name.startswith("llama_index_rag_pack")
            and getattr(module, "check_query", None) is original
        ):
            monkeypatch.setattr(module, "check_query", counting)
    return calls


@pytest.mark.parametrize("path", ["sync", "async"])
@pytest.mark.parametrize("mode", ["fusion", "hyde", "rewrite", "hybrid_convex"])
def test_a_question_through_pack_run_is_checked_once(pack, check_counter, mode, path):
    question = "Which ranking function do search engines use for keyword matches?"
    pack.make_query_engine(mode)  # built before counting: only the question's path is counted
    if path == "sync":
        response = pack.run(question, mode=mode)
    else:
        response = asyncio.run(pack.arun(question, mode=mode))
    assert str(response)
    # fusion asks the LLM for variants and searches each one with dense and BM25: still once
    assert check_counter == [question]
    with pytest.raises(ConfigurationError, match="empty"):
        pack.run("   ", mode=mode)
    assert len(check_counter) == 2


def test_an_inner_retriever_called_directly_still_checks(pack, check_counter):
    with pytest.raises(ConfigurationError, match="empty"):
        pack.retriever("bm25").retrieve(" ")
    assert check_counter == [" "]


def test_a_registered_mode_reaches_get_modules_and_evaluation_through_the_registry(pack):
    from llama_index_rag_pack.evaluation.strategies import resolve_strategies
    from llama_index_rag_pack.pack.mode_registry import register_mode, unregister_mode

    def build(pack, similarity_top_k=None, filters=None):
        return pack.retriever("bm25", similarity_top_k=2, filters=filters)

    register_mode("bm25_top2", build, aliases=("keywords2",), listed=True)
    try:
        assert "bm25_top2_retriever" in pack.get_modules()
        assert [s.name for s in resolve_strategies("keywords2")] == ["bm25_top2"]
        assert [s.name for s in resolve_strategies("dense")] == ["vector"]  # a built-in alias
    finally:
        unregister_mode("bm25_top2")
        pack.forget_engines("bm25_top2")
    assert "bm25_top2_retriever" not in pack.get_modules()
