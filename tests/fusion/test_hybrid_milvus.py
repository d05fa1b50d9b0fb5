"""MilvusHybridRetriever on real Milvus Lite (and once on a Milvus server) with the real MiniLM."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.postprocessor import LLMRerank
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.core.errors import CollectionNotFoundError, ConfigurationError
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.milvus.connection import flush, open_vector_store

CORPUS = {
    "milvus": (
        "Milvus is an open-source vector database built for similarity search over embeddings."
    ),
    "bm25": "Okapi BM25 is a ranking function that search engines use to score keyword matches "
    "by term frequency and inverse document frequency.",
    "cat": "The cat sat on the warm mat and purred quietly all afternoon.",
    "hybrid": "Hybrid search combines dense semantic vectors with sparse keyword vectors.",
    "paris": "Paris is the capital and largest city of France, on the river Seine.",
    "zebra": "Zebra stripes may confuse biting flies such as horseflies.",
    "rrf": "Reciprocal rank fusion merges ranked lists by summing one over k plus the rank.",
    "volcano": "A volcano erupts when magma rises through the crust of the Earth.",
    "tea": "Green tea is made from unoxidised leaves of Camellia sinensis.",
    "xq27": "The part number XQ27-B fits the left hinge of the cabinet door.",
}


def make_nodes() -> list[TextNode]:
    return [
        TextNode(id_=key, text=text, metadata={"topic": key, "length": len(text)})
        for key, text in CORPUS.items()
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory, embed_model):
    vs = open_vector_store(str(tmp_path_factory.mktemp("hybrid") / "h.db"), "hybrid_docs", dim=384)
    VectorStoreIndex(
        make_nodes(),
        storage_context=StorageContext.from_defaults(vector_store=vs),
        embed_model=embed_model,
    )
    flush(vs)
    return vs


def ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in nodes]


@pytest.mark.slow
def test_dense_search_rebuilds_nodes_with_metadata(store, embed_model):
    r = MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=3
    )
    nodes = r.retrieve("Which database stores embeddings for similarity search?")
    assert ids(nodes)[0] == "milvus"
    top = nodes[0].node
    assert top.text == CORPUS["milvus"]
    assert top.metadata["topic"] == "milvus" and top.metadata["length"] == len(CORPUS["milvus"])
    assert top.metadata["retrieval_search_type"] == "dense"
    assert "retrieval_search_type" in top.excluded_llm_metadata_keys
    assert 0.0 < nodes[0].score <= 1.0  # cosine similarity
    assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)


def test_sparse_bm25_finds_rare_keyword_with_positive_scores(store):
    # An exact part number is where BM25 beats dense embeddings.
    r = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=5)
    nodes = r.retrieve("XQ27")
    assert ids(nodes)[0] == "xq27"
    assert all(n.score > 0 for n in nodes)  # Lite returns negative distances; we flip them
    nodes = r.retrieve("term frequency inverse document frequency ranking")
    assert ids(nodes)[0] == "bm25"
    assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)
    assert r.embed_model is None  # BM25-only search never loads an embedding model


def test_hybrid_rrf_scores_match_rrf_of_both_lists(store, embed_model):
    q = "keyword ranking function of search engines"
    k = 10
    dense = MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=k
    )
    sparse = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=k)
    hybrid = MilvusHybridRetriever(
        store,
        embed_model=embed_model,
        search_type="hybrid",
        ranker="rrf",
        rrf_k=60,
        similarity_top_k=k,
    )
    expected: dict[str, float] = {}
    for lst in (dense.retrieve(q), sparse.retrieve(q)):
        for rank, n in enumerate(lst, start=1):
            expected[n.node.node_id] = expected.get(n.node.node_id, 0.0) + 1 / (60 + rank)
    got = hybrid.retrieve(q)
    assert ids(got)[0] == "bm25"
    for n in got:
        assert n.score == pytest.approx(expected[n.node.node_id], rel=1e-4)


def test_weighted_ranker_follows_the_weights(store, embed_model):
    q = "XQ27 cabinet hinge"
    dense_only = MilvusHybridRetriever(
        store, embed_model=embed_model, ranker="weighted", weights=[1.0, 0.0], similarity_top_k=3
    )
    sparse_only = MilvusHybridRetriever(
        store, embed_model=embed_model, ranker="weighted", weights=[0.0, 1.0], similarity_top_k=3
    )
    dense = MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=3
    )
    assert ids(dense_only.retrieve(q)) == ids(dense.retrieve(q))
    assert ids(sparse_only.retrieve(q))[0] == "xq27"
    mixed = MilvusHybridRetriever(
        store, embed_model=embed_model, ranker="weighted", weights=[0.5, 0.5], similarity_top_k=3
    ).retrieve(q)
    assert all(0.0 <= n.score <= 1.0 for n in mixed)


def test_filter_expression_restricts_results(store, embed_model):
    r = MilvusHybridRetriever(
        store, embed_model=embed_model, filter='topic in ["cat", "tea"]', similarity_top_k=5
    )
    nodes = r.retrieve("vector database for embeddings")
    assert set(ids(nodes)) <= {"cat", "tea"} and nodes


def test_top_k_larger_than_corpus_and_sync_equals_async(store, embed_model, assert_same_ranking):
    for search_type in ("dense", "sparse", "hybrid"):
        r = MilvusHybridRetriever(
            store, embed_model=embed_model, search_type=search_type, similarity_top_k=50
        )
        q = "search engines rank vectors and keywords"
        sync_nodes = r.retrieve(q)
        async_nodes = asyncio.run(r.aretrieve(q))
        # same nodes and scores; BM25 ties (equal term statistics) may come in either order
        assert_same_ranking(sync_nodes, async_nodes)
        assert len(sync_nodes) <= len(CORPUS)
        if search_type != "sparse":
            assert len(sync_nodes) == len(CORPUS)


def test_precomputed_query_embedding_is_used(store, embed_model):
    r = MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=1
    )
    emb = embed_model.get_text_embedding(CORPUS["volcano"])
    nodes = r.retrieve(QueryBundle("Which database stores embeddings?", embedding=emb))
    assert ids(nodes) == ["volcano"]


class _ReverseByLength(BaseNodePostprocessor):
    """A second stage that scores by text length (records the candidates it was given)."""

    _seen: list = PrivateAttr(default_factory=list)

    def _postprocess_nodes(self, nodes, query_bundle=None):
        self._seen.append(len(nodes))
        return sorted(
            (NodeWithScore(node=n.node, score=float(len(n.node.text))) for n in nodes),
            key=lambda n: -n.score,
        )


def test_second_stage_reranker_gets_pre_top_k_and_keeps_top_k(store, embed_model):
    rr = _ReverseByLength()
    r = MilvusHybridRetriever(
        store, embed_model=embed_model, reranker=rr, pre_top_k=8, similarity_top_k=2
    )
    nodes = r.retrieve("vector search and keyword search")
    assert rr._seen == [8]
    assert len(nodes) == 2
    assert nodes[0].score >= nodes[1].score and nodes[0].score == len(nodes[0].node.text)


def test_second_stage_llm_reranker_with_realistic_reply(store, embed_model, scripted_llm):
    # LLMRerank numbers candidates from 1; the model answers in its usual
    # "Doc: n, Relevance: r" form.
    llm = scripted_llm(["Doc: 3, Relevance: 9\nDoc: 1, Relevance: 4\nDoc: 12, Relevance: 10\n"])
    r = MilvusHybridRetriever(
        store,
        embed_model=embed_model,
        search_type="dense",
        reranker=LLMRerank(llm=llm, top_n=5, choice_batch_size=10),
        pre_top_k=4,
        similarity_top_k=2,
    )
    dense = MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=4
    )
    q = "How do search engines rank documents?"
    candidates = ids(dense.retrieve(q))
    nodes = r.retrieve(q)
    assert ids(nodes) == [candidates[2], candidates[0]]  # the hallucinated Doc 12 is ignored
    assert [n.score for n in nodes] == [9.0, 4.0]


def test_concurrent_async_searches_on_one_client(store, embed_model):
    r = MilvusHybridRetriever(store, embed_model=embed_model, similarity_top_k=3)
    queries = ["cats", "volcano magma", "green tea leaves", "capital of France"] * 2

    async def main():
        return await asyncio.gather(*(r.aretrieve(q) for q in queries))

    results = asyncio.run(main())
    assert [ids(x)[0] for x in results] == ["cat", "volcano", "tea", "paris"] * 2


# ----------------------------------------------------------------------------- bad input
def test_bad_configuration_errors(store, embed_model, milvus_uri):
    with pytest.raises(ConfigurationError, match="valid values: dense, sparse, hybrid"):
        MilvusHybridRetriever(store, search_type="keyword")
    with pytest.raises(ConfigurationError, match="valid values: rrf, weighted"):
        MilvusHybridRetriever(store, ranker="borda")
    with pytest.raises(ConfigurationError, match="2 values, got 3"):
        MilvusHybridRetriever(store, ranker="weighted", weights=[0.2, 0.3, 0.5])
    with pytest.raises(ConfigurationError, match=r"\[0, 1\]"):
        MilvusHybridRetriever(store, ranker="weighted", weights=[2.0, 0.5])
    with pytest.raises(ConfigurationError, match="ranker='weighted'"):
        MilvusHybridRetriever(store, weights=[0.5, 0.5])
    with pytest.raises(ConfigurationError, match="similarity_top_k must be an integer >= 1, got 0"):
        MilvusHybridRetriever(store, similarity_top_k=0)
    with pytest.raises(ConfigurationError, match="pre_top_k"):
        MilvusHybridRetriever(store, reranker=_ReverseByLength(), pre_top_k=2, similarity_top_k=5)
    with pytest.raises(ConfigurationError, match="vector_store="):
        MilvusHybridRetriever()
    with pytest.raises(CollectionNotFoundError, match="no_such_collection"):
        MilvusHybridRetriever(client=store.client, collection_name="no_such_collection")
    with pytest.raises(ConfigurationError, match="empty"):
        MilvusHybridRetriever(store, embed_model=embed_model).retrieve("   ")


def test_sparse_on_collection_without_bm25_says_how_to_fix(milvus_uri, embed_model):
    vs = open_vector_store(milvus_uri, "dense_only", dim=384, enable_bm25=False)
    VectorStoreIndex(
        make_nodes()[:3],
        storage_context=StorageContext.from_defaults(vector_store=vs),
        embed_model=embed_model,
    )
    flush(vs)
    with pytest.raises(ConfigurationError, match="enable_bm25=True"):
        MilvusHybridRetriever(vs, search_type="hybrid", embed_model=embed_model)
    dense = MilvusHybridRetriever(
        vs, search_type="dense", embed_model=embed_model, similarity_top_k=1
    )
    assert ids(dense.retrieve("vector database")) == ["milvus"]


@pytest.mark.slow
@pytest.mark.integration
def test_hybrid_on_a_milvus_server(milvus_server, embed_model):
    vs = open_vector_store(milvus_server, "hybrid_server", dim=384, overwrite=True)
    VectorStoreIndex(
        make_nodes(),
        storage_context=StorageContext.from_defaults(vector_store=vs),
        embed_model=embed_model,
    )
    flush(vs)
    for search_type, query, expected in [
        ("dense", "Which database stores embeddings?", "milvus"),
        ("sparse", "XQ27", "xq27"),
        ("hybrid", "term frequency ranking function", "bm25"),
    ]:
        r = MilvusHybridRetriever(
            vs, embed_model=embed_model, search_type=search_type, similarity_top_k=3
        )
        nodes = r.retrieve(query)
        assert ids(nodes)[0] == expected, search_type
        assert ids(asyncio.run(r.aretrieve(query))) == ids(nodes)
    weighted = MilvusHybridRetriever(
        vs, embed_model=embed_model, ranker="weighted", weights=[0.3, 0.7]
    )
    assert ids(weighted.retrieve("XQ27 hinge"))[0] == "xq27"
    convex = fusion_retriever(vs, embed_model, alpha=0.3, similarity_top_k=3)
    assert ids(convex.retrieve("XQ27 hinge"))[0] == "xq27"
    assert ids(asyncio.run(convex.aretrieve("XQ27 hinge"))) == ids(convex.retrieve("XQ27 hinge"))


# ----------------------------------------------------------------------------- candidate pools
def test_each_side_of_a_hybrid_search_fetches_the_candidate_pool(store, embed_model, monkeypatch):
    sent = []
    real = store.client.hybrid_search

    def spy(*args, **kwargs):
        sent.append(([r.limit for r in kwargs["reqs"]], kwargs["limit"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(store.client, "hybrid_search", spy)
    r = MilvusHybridRetriever(store, embed_model=embed_model, similarity_top_k=2, candidate_pool=7)
    assert len(r.retrieve("search engines rank keyword matches")) == 2
    assert sent == [([7, 7], 7)]
    wide = MilvusHybridRetriever(
        store, embed_model=embed_model, similarity_top_k=9, candidate_pool=3
    )
    wide.retrieve("search engines rank keyword matches")
    assert sent[-1] == ([9, 9], 9), "never fewer candidates than nodes wanted"
    with pytest.raises(ConfigurationError, match="candidate_pool must be a positive integer"):
        MilvusHybridRetriever(store, candidate_pool=0)


def test_equal_scores_come_back_ordered_by_node_id(store, embed_model):
    # RRF gives a node ranked r by dense only and one ranked r by BM25 only the same score
    r = MilvusHybridRetriever(store, embed_model=embed_model, similarity_top_k=10, rrf_k=60)
    for q in ("search engines rank vectors and keywords", "tea volcano cat"):
        nodes = r.retrieve(q)
        keys = [(-n.score, n.node.node_id) for n in nodes]
        assert keys == sorted(keys)


# ----------------------------------------------------------------------------- score fusion
def fusion_retriever(store, embed_model, **kwargs):
    from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever

    return MilvusScoreFusionRetriever(store, embed_model=embed_model, **kwargs)


def test_score_fusion_is_the_convex_combination_of_both_candidate_lists(store, embed_model):
    from llama_index_rag_pack.fusion.convex_fusion import convex_fusion

    q = "keyword ranking function of search engines"
    dense = MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=50
    ).retrieve(q)
    sparse = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=50).retrieve(q)
    for alpha, norm in ((0.3, "min_max"), (0.7, "dist_based")):
        r = fusion_retriever(
            store, embed_model, alpha=alpha, normalization=norm, similarity_top_k=4
        )
        got = r.retrieve(q)
        expected = convex_fusion(dense, sparse, alpha=alpha, normalization=norm, top_n=4)
        assert [(n.node.node_id, pytest.approx(n.score)) for n in got] == [
            (n.node.node_id, n.score) for n in expected
        ]
        assert all(n.node.metadata["retrieval_search_type"] == "hybrid" for n in got)
        assert all(0.0 <= n.score <= 1.0 for n in got)


def test_score_fusion_alpha_picks_a_side(store, embed_model):
    dense = MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=3
    )
    sparse = MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=1)
    q = "XQ27 cabinet hinge vector database"
    assert ids(fusion_retriever(store, embed_model, alpha=1.0, similarity_top_k=3).retrieve(q)) == (
        ids(dense.retrieve(q))
    )
    assert ids(fusion_retriever(store, embed_model, alpha=0.0, similarity_top_k=1).retrieve(q)) == (
        ids(sparse.retrieve(q))
    )


def test_score_fusion_sync_equals_async_and_respects_filter_and_top_k(store, embed_model):
    r = fusion_retriever(
        store, embed_model, similarity_top_k=3, candidate_pool=5, filter='topic != "cat"'
    )
    assert r.dense.similarity_top_k == 5 == r.sparse.similarity_top_k
    q = "the cat sat on a vector database"
    nodes = r.retrieve(q)
    assert len(nodes) == 3 and "cat" not in ids(nodes)
    assert [(n.node.node_id, n.score) for n in asyncio.run(r.aretrieve(q))] == [
        (n.node.node_id, n.score) for n in nodes
    ]


def test_score_fusion_bad_configuration(store, embed_model, milvus_uri):
    with pytest.raises(ConfigurationError, match=r"alpha .*\[0, 1\]"):
        fusion_retriever(store, embed_model, alpha=-0.1)
    with pytest.raises(ConfigurationError, match="valid values: min_max, dist_based"):
        fusion_retriever(store, embed_model, normalization="zscore")
    with pytest.raises(ConfigurationError, match="candidate_pool"):
        fusion_retriever(store, embed_model, candidate_pool=0)
    with pytest.raises(ConfigurationError, match="similarity_top_k must be an integer >= 1"):
        fusion_retriever(store, embed_model, similarity_top_k=0)
    with pytest.raises(ConfigurationError, match="empty"):
        fusion_retriever(store, embed_model).retrieve("  ")
    vs = open_vector_store(milvus_uri, "no_bm25", dim=384, enable_bm25=False)
    with pytest.raises(ConfigurationError, match="enable_bm25=True"):
        fusion_retriever(vs, embed_model)
