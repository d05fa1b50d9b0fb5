"""FusionRetriever over real Milvus Lite retrievers (dense + BM25) with scripted LLM replies."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.fusion.rag_fusion import FusionRetriever
from llama_index_rag_pack.fusion.rank_fusion import (
    fuse,
    reciprocal_rank_fusion,
    relative_score_fusion,
)
from llama_index_rag_pack.milvus.connection import flush, open_vector_store
from llama_index_rag_pack.testing import ScriptedLLM

CORPUS = {
    "milvus": (
        "Milvus is an open-source vector database built for similarity search over embeddings."
    ),
    "bm25": "Okapi BM25 is a ranking function that search engines use to score keyword matches.",
    "tfidf": "TF-IDF weighs a term by its frequency in a document and its rarity in the corpus.",
    "cat": "The cat sat on the warm mat and purred quietly all afternoon.",
    "hybrid": "Hybrid search combines dense semantic vectors with sparse keyword vectors.",
    "paris": "Paris is the capital and largest city of France, on the river Seine.",
    "rrf": "Reciprocal rank fusion merges ranked lists by summing one over k plus the rank.",
    "volcano": "A volcano erupts when magma rises through the crust of the Earth.",
}
QUESTION = "How do search engines score keyword matches?"
# The queries the variants reply below makes (the question first, echoed variant dropped).
FUSED_QUERIES = [
    QUESTION,
    "keyword relevance scoring in search engines",
    "term frequency ranking function",
    "combining keyword and vector search",
]
VARIANTS_REPLY = (
    "Here are 3 alternative search queries:\n\n"
    '1. "keyword relevance scoring in search engines"\n'
    "2. **term frequency ranking function**\n"
    "3. How do search engines score keyword matches?\n"  # the original echoed back
    "4. combining keyword and vector search\n"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory, embed_model):
    vs = open_vector_store(str(tmp_path_factory.mktemp("fusion") / "f.db"), "fusion_docs", dim=384)
    nodes = [TextNode(id_=k, text=t, metadata={"topic": k}) for k, t in CORPUS.items()]
    VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=vs),
        embed_model=embed_model,
    )
    flush(vs)
    return vs


@pytest.fixture(scope="module")
def dense(store, embed_model):
    return MilvusHybridRetriever(
        store, embed_model=embed_model, search_type="dense", similarity_top_k=5
    )


@pytest.fixture(scope="module")
def bm25(store):
    return MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=5)


class Delayed(BaseRetriever):
    """Wraps a real retriever, counting searches in flight.

    With a ``gate`` (shared by several retrievers) each search waits until ``gate.target``
    searches are in flight at once; ``delay`` adds latency after that.
    """

    def __init__(self, inner: BaseRetriever, delay: float = 0.0, gate=None) -> None:
        self.inner, self.delay, self.gate = inner, delay, gate
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        super().__init__()

    def _enter(self):
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.gate is not None:
            self.gate.enter()

    def _exit(self):
        if self.gate is not None:
            self.gate.exit()
        with self.lock:
            self.in_flight -= 1

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self._enter()
        try:
            if self.gate is not None:
                self.gate.hold()
            time.sleep(self.delay)
            return self.inner.retrieve(query_bundle)
        finally:
            self._exit()

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self._enter()
        try:
            if self.gate is not None:
                await self.gate.ahold()
            await asyncio.sleep(self.delay)
            return await self.inner.aretrieve(query_bundle)
        finally:
            self._exit()


def ids(nodes):
    return [n.node.node_id for n in nodes]


@pytest.mark.slow
def test_fusion_searches_every_query_with_every_retriever(dense, bm25, scripted_llm):
    llm = scripted_llm([VARIANTS_REPLY])
    fusion = FusionRetriever(
        {"dense": dense, "bm25": bm25}, llm=llm, num_queries=4, similarity_top_k=4
    )
    nodes = fusion.retrieve(QUESTION)
    assert llm.call_count == 1 and "Write 3 different search queries" in llm.prompts[0]
    queries = [
        QUESTION,
        "keyword relevance scoring in search engines",
        "term frequency ranking function",
        "combining keyword and vector search",
    ]
    # the reference: RRF over exactly these 4 x 2 searches
    lists = [r.retrieve(q) for q in queries for r in (dense, bm25)]
    expected = reciprocal_rank_fusion(lists, top_n=4)
    assert ids(nodes) == ids(expected)
    assert [n.score for n in nodes] == pytest.approx([n.score for n in expected])
    assert ids(nodes)[0] == "bm25"
    top = nodes[0].node.metadata
    assert set(top["fusion_queries"]) <= set(queries) and QUESTION in top["fusion_queries"]
    assert set(top["fusion_retrievers"]) == {"dense", "bm25"}
    assert {"query", "retriever", "rank", "score"} == set(top["fusion_hits"][0])
    # provenance stays out of what the LLM and the embedder see
    assert "fusion_hits" not in nodes[0].node.get_content(MetadataMode.LLM)
    assert "fusion_queries" not in nodes[0].node.get_content(MetadataMode.EMBED)


@pytest.mark.slow
async def test_async_path_is_async_and_matches_sync(dense, bm25, scripted_llm):
    sync_llm = scripted_llm([VARIANTS_REPLY])
    async_llm = scripted_llm([VARIANTS_REPLY], forbid_sync=True)
    kwargs = dict(num_queries=4, similarity_top_k=5, mode="relative_score", weights=[0.6, 0.4])
    sync_nodes = FusionRetriever({"dense": dense, "bm25": bm25}, llm=sync_llm, **kwargs).retrieve(
        QUESTION
    )
    async_nodes = await FusionRetriever(
        {"dense": dense, "bm25": bm25}, llm=async_llm, **kwargs
    ).aretrieve(QUESTION)
    assert ids(sync_nodes) == ids(async_nodes)
    assert [n.score for n in sync_nodes] == pytest.approx([n.score for n in async_nodes])
    assert async_llm.call_count == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["reciprocal_rank", "relative_score", "dist_based_score", "union"])
def test_every_mode_returns_fused_unique_nodes(dense, bm25, scripted_llm, mode):
    fusion = FusionRetriever(
        [dense, bm25], llm=scripted_llm([VARIANTS_REPLY]), mode=mode, similarity_top_k=6
    )
    nodes = fusion.retrieve(QUESTION)
    queries = nodes[0].node.metadata["fusion_queries"]
    found = {i for q in FUSED_QUERIES for r in (dense, bm25) for i in ids(r.retrieve(q))}
    assert set(queries) <= set(FUSED_QUERIES)
    # every node once, as many as the searches found up to the cut, best first
    assert len(nodes) == len(set(ids(nodes))) == min(6, len(found)) >= 5
    assert set(ids(nodes)) <= found
    assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)
    assert nodes[0].node.metadata["fusion_retrievers"]
    assert set(fusion.retriever_names) == {"MilvusHybridRetriever_0", "MilvusHybridRetriever_1"}


@pytest.mark.slow
def test_weights_are_honoured(dense, bm25, scripted_llm):
    # weight 0 on BM25: the fused ranking is the dense-only ranking
    fusion = FusionRetriever(
        {"dense": dense, "bm25": bm25},
        llm=scripted_llm([]),
        num_queries=1,
        weights=[1.0, 0.0],
        similarity_top_k=5,
    )
    assert ids(fusion.retrieve("XQ rare keyword ranking")) == ids(
        dense.retrieve("XQ rare keyword ranking")
    )
    fusion = FusionRetriever(
        {"dense": dense, "bm25": bm25},
        llm=scripted_llm([]),
        num_queries=1,
        mode="relative_score",
        weights=[0.2, 0.8],
        similarity_top_k=5,
    )
    q = "ranking function keyword"
    expected = relative_score_fusion(
        [dense.retrieve(q), bm25.retrieve(q)], weights=[0.2, 0.8], top_n=5
    )
    assert ids(fusion.retrieve(q)) == ids(expected)


class Fixed(BaseRetriever):
    """Returns the same ranked ``(node id, score)`` list for every query (sync and async)."""

    def __init__(self, ranking: list[tuple[str, float]]) -> None:
        self.ranking = ranking
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=i, text=i), score=s) for i, s in self.ranking]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._retrieve(query_bundle)


@pytest.mark.parametrize("mode", ["reciprocal_rank", "relative_score", "dist_based_score", "union"])
async def test_weights_decide_between_retrievers_that_disagree(scripted_llm, mode):
    # two retrievers with opposite rankings and mirrored scores: unweighted, "x" and "y" tie;
    # whichever retriever weighs more must put its own favourite first, in sync and async
    first = Fixed([("x", 0.9), ("m", 0.5), ("y", 0.1)])
    second = Fixed([("y", 0.9), ("m", 0.5), ("x", 0.1)])
    variant = "1. another wording of the question"
    for weights, winner in (([3.0, 1.0], "x"), ([1.0, 3.0], "y")):
        fusion = FusionRetriever(
            {"first": first, "second": second},
            llm=scripted_llm(lambda prompt: variant),
            num_queries=2,  # the original and one variant: 2 queries x 2 retrievers
            mode=mode,
            weights=weights,
            similarity_top_k=3,
        )
        # the reference: the pure fusion of the four result lists, each with its retriever's weight
        lists = [first.retrieve(QUESTION), second.retrieve(QUESTION)] * 2
        expected = fuse(lists, mode, weights=weights * 2, top_n=3)
        assert ids(expected)[0] == winner
        sync_nodes = fusion.retrieve(QUESTION)
        async_nodes = await fusion.aretrieve(QUESTION)
        for nodes in (sync_nodes, async_nodes):
            assert ids(nodes)[0] == winner, (weights, ids(nodes))
            assert ids(nodes) == ids(expected)
            assert [n.score for n in nodes] == pytest.approx([n.score for n in expected])


@pytest.mark.slow
async def test_searches_run_concurrently(dense, bm25, scripted_llm, concurrency_gate):
    # every search waits until all 4 x 2 are in flight: reached only if they run concurrently
    gate = concurrency_gate(8)
    d, b = Delayed(dense, gate=gate), Delayed(bm25, gate=gate)
    fusion = FusionRetriever([d, b], llm=scripted_llm([VARIANTS_REPLY] * 2), num_queries=4)
    assert await fusion.aretrieve(QUESTION)
    assert not gate.timed_out and gate.max_in_flight == 8
    assert d.max_in_flight == 4 and b.max_in_flight == 4  # 4 queries on each retriever at once
    # sync path: threads (one per search)
    gate = d.gate = b.gate = concurrency_gate(8)
    d.max_in_flight = b.max_in_flight = 0
    assert fusion.retrieve(QUESTION)
    assert not gate.timed_out and d.max_in_flight == 4 and b.max_in_flight == 4


class SyncOnly(BaseRetriever):
    """A retriever with only a blocking ``_retrieve`` (like many third-party ones).

    Each search blocks its thread until ``release`` is set (at most ``timeout`` seconds) and
    records whether it was released or gave up.
    """

    def __init__(self, inner: BaseRetriever, timeout: float = 20.0) -> None:
        self.inner, self.timeout = inner, timeout
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.released: list[bool] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.released.append(self.release.wait(self.timeout))
            return self.inner.retrieve(query_bundle)
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.mark.slow
async def test_sync_only_retrievers_do_not_block_the_event_loop(dense, scripted_llm):
    slow = SyncOnly(dense)
    fusion = FusionRetriever(
        [slow], llm=scripted_llm([VARIANTS_REPLY], forbid_sync=True), num_queries=4
    )

    async def releaser():
        # runs on the event loop: it can only see the 4 blocked searches, and let them go, if
        # they block worker threads and not the loop
        while slow.max_in_flight < 4:
            await asyncio.sleep(0.001)
        slow.release.set()

    task = asyncio.create_task(releaser())
    try:
        nodes = await fusion.aretrieve(QUESTION)
    finally:
        task.cancel()
    assert slow.released == [True] * 4, "the loop kept running while the searches blocked"
    assert slow.max_in_flight == 4 and nodes


@pytest.mark.slow
async def test_max_concurrency_is_a_real_limit(dense, bm25, scripted_llm):
    d, b = Delayed(dense, 0.05), Delayed(bm25, 0.05)
    fusion = FusionRetriever(
        [d, b], llm=scripted_llm([VARIANTS_REPLY] * 2), num_queries=4, max_concurrency=1
    )
    await fusion.aretrieve(QUESTION)
    fusion.retrieve(QUESTION)
    assert d.max_in_flight == b.max_in_flight == 1


async def test_default_max_concurrency_is_16(concurrency_gate):
    # 20 searches: 16 are let in at once (they wait until 16 are in flight), the rest after them
    gate = concurrency_gate(16)
    fusion = FusionRetriever(
        [Delayed(Fixed([(f"n{i}", 0.5)]), gate=gate) for i in range(20)], num_queries=1
    )
    assert len(await fusion.aretrieve(QUESTION)) == 10
    assert not gate.timed_out and gate.max_in_flight == 16


def test_sync_path_runs_two_searches_at_once(concurrency_gate):
    gate = concurrency_gate(2)
    fusion = FusionRetriever(
        [Delayed(Fixed([("a", 0.9)]), gate=gate), Delayed(Fixed([("b", 0.5)]), gate=gate)],
        num_queries=1,
        max_concurrency=2,
    )
    assert ids(fusion.retrieve(QUESTION)) == ["a", "b"]
    assert not gate.timed_out and gate.max_in_flight == 2


class GatedSyncOnly(BaseRetriever):
    """Only a blocking ``_retrieve`` returning one node, held at a shared concurrency gate."""

    def __init__(self, node_id: str, gate) -> None:
        self.node_id, self.gate = node_id, gate
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.gate.enter()
        try:
            self.gate.hold()
            return [NodeWithScore(node=TextNode(id_=self.node_id, text=self.node_id), score=1.0)]
        finally:
            self.gate.exit()


async def test_sync_only_retrievers_get_max_concurrency_threads(concurrency_gate):
    # more blocking searches than any default thread pool has workers (at most 32): all 40 are in
    # flight at once only in a pool of max_concurrency threads
    gate = concurrency_gate(40)
    fusion = FusionRetriever(
        [GatedSyncOnly(f"n{i}", gate) for i in range(40)],
        num_queries=1,
        max_concurrency=40,
        similarity_top_k=40,
    )
    assert len(await fusion.aretrieve(QUESTION)) == 40
    assert not gate.timed_out and gate.max_in_flight == 40


async def test_cancelling_does_not_wait_for_blocked_searches():
    slow = SyncOnly(Fixed([("a", 1.0)]), timeout=5.0)
    task = asyncio.create_task(FusionRetriever([slow], num_queries=1).aretrieve(QUESTION))
    try:
        deadline = time.monotonic() + 20
        while slow.in_flight < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        assert slow.in_flight == 1, "the search never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the cancelled query gave the event loop back while its search was still blocked
        assert slow.in_flight == 1 and slow.released == []
    finally:
        slow.release.set()


@pytest.mark.slow
def test_unusable_llm_reply_falls_back_to_original_query(dense, bm25, scripted_llm, caplog):
    caplog.set_level(logging.WARNING)
    fusion = FusionRetriever(
        [dense, bm25], llm=scripted_llm(["Sure! Here are the queries:\n\n"]), similarity_top_k=3
    )
    nodes = fusion.retrieve(QUESTION)
    assert "nothing usable" in caplog.text
    assert all(n.node.metadata["fusion_queries"] == [QUESTION] for n in nodes)
    assert ids(nodes) == ids(
        reciprocal_rank_fusion([dense.retrieve(QUESTION), bm25.retrieve(QUESTION)], top_n=3)
    )


@pytest.mark.slow
async def test_llm_error_falls_back_or_raises(dense, scripted_llm, caplog):
    caplog.set_level(logging.WARNING)
    fusion = FusionRetriever([dense], llm=scripted_llm([ConnectionError("server down")]))
    nodes = await fusion.aretrieve(QUESTION)
    assert nodes and "ConnectionError" in caplog.text
    strict = FusionRetriever(
        [dense], llm=scripted_llm([ConnectionError("server down")] * 2), raise_on_failure=True
    )
    with pytest.raises(ConnectionError):
        await strict.aretrieve(QUESTION)
    with pytest.raises(ConnectionError):
        strict.retrieve(QUESTION)


@pytest.mark.slow
def test_num_queries_one_makes_no_llm_call(dense, bm25):
    llm = ScriptedLLM(replies=[])  # any call would raise ScriptExhaustedError
    nodes = FusionRetriever([dense, bm25], llm=llm, num_queries=1, similarity_top_k=3).retrieve(
        QUESTION
    )
    assert len(nodes) == 3 and llm.call_count == 0


async def test_num_queries_one_never_resolves_an_llm(monkeypatch):
    monkeypatch.setenv("RAG_PACK_LLM", "none")  # resolving the default LLM would raise
    fusion = FusionRetriever([Fixed([("a", 1.0)])], num_queries=1)
    assert ids(fusion.retrieve(QUESTION)) == ["a"]
    assert ids(await fusion.aretrieve(QUESTION)) == ["a"]


def test_documented_defaults(scripted_llm):
    llm = scripted_llm(lambda prompt: "1. first variant\n2. second variant\n3. third\n4. fourth")
    fusion = FusionRetriever([Fixed([(f"n{i}", 1 - i / 100) for i in range(15)])], llm=llm)
    nodes = fusion.retrieve(QUESTION)
    # num_queries=4: the original and 3 variants; similarity_top_k=10
    assert "Write 3 different search queries" in llm.prompts[0]
    assert nodes[0].node.metadata["fusion_queries"] == [
        QUESTION,
        "first variant",
        "second variant",
        "third",
    ]
    assert len(nodes) == 10


def test_rrf_constant_k_is_honoured():
    first, second = Fixed([("x", 0.9), ("y", 0.1)]), Fixed([("y", 0.9), ("z", 0.1)])
    nodes = FusionRetriever([first, second], num_queries=1, k=1).retrieve(QUESTION)
    expected = reciprocal_rank_fusion([first.retrieve(QUESTION), second.retrieve(QUESTION)], k=1)
    assert ids(nodes) == ids(expected)
    assert [n.score for n in nodes] == pytest.approx([n.score for n in expected])


def test_similarity_top_k_one_returns_the_best_node():
    fusion = FusionRetriever([Fixed([("a", 0.9), ("b", 0.5)])], num_queries=1, similarity_top_k=1)
    assert ids(fusion.retrieve(QUESTION)) == ["a"]


class Listed(BaseRetriever):
    """Returns the same ``NodeWithScore`` list for every query, repeats included: like upstream
    retrievers that override the public ``retrieve`` (so core's de-duplication by id is skipped).
    """

    def __init__(self, hits: list[NodeWithScore]) -> None:
        self.hits = hits
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return list(self.hits)

    def retrieve(self, str_or_query_bundle: str | QueryBundle) -> list[NodeWithScore]:
        return list(self.hits)


def test_fusion_hits_record_each_search_once_at_its_list_position():
    def hit(node_id: str, score: float) -> NodeWithScore:
        return NodeWithScore(node=TextNode(id_=node_id, text=node_id), score=score)

    retrievers = {
        "first": Listed([hit("a", 0.9), hit("a", 0.8), hit("b", 0.5)]),  # "a" listed twice
        "second": Listed([hit("c", 0.7), hit("b", 0.6)]),
    }
    nodes = FusionRetriever(retrievers, num_queries=1).retrieve(QUESTION)
    assert sorted(ids(nodes)) == ["a", "b", "c"]
    for n in nodes:
        node_id, hits = n.node.node_id, n.node.metadata["fusion_hits"]
        # one hit per search that found the node
        found_by = [name for name, r in retrievers.items() if node_id in ids(r.retrieve(QUESTION))]
        assert [h["retriever"] for h in hits] == found_by
        for h in hits:
            results = retrievers[h["retriever"]].retrieve(h["query"])
            # rank: the 1-based position of its first (best) listing in that retriever's results
            assert h["rank"] == ids(results).index(node_id) + 1
            assert h["score"] == results[h["rank"] - 1].score


async def test_prompt_given_as_a_string(scripted_llm):
    llm = scripted_llm(lambda prompt: "1. a query about cats")
    fusion = FusionRetriever(
        [Fixed([("a", 1.0)])],
        llm=llm,
        num_queries=2,
        query_gen_prompt="Give {num_queries} rewrites of: {query}",
    )
    fusion.retrieve("cats")
    await fusion.aretrieve("cats")
    assert llm.prompts == ["Give 1 rewrites of: cats"] * 2


def test_callback_manager_receives_the_retrieve_events():
    handler = LlamaDebugHandler()
    fusion = FusionRetriever(
        [Fixed([("a", 1.0)])], num_queries=1, callback_manager=CallbackManager([handler])
    )
    fusion.retrieve(QUESTION)
    assert handler.get_event_pairs(CBEventType.RETRIEVE)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"similarity_top_k": 2.5}, "similarity_top_k"),
        ({"similarity_top_k": True}, "similarity_top_k"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": 2.5}, "max_concurrency"),
        ({"max_concurrency": True}, "max_concurrency"),
        ({"include_original": False, "num_queries": 1}, "num_queries >= 2"),
        ({"k": -1}, "k must be"),
    ],
)
def test_bad_settings_are_rejected_when_constructed(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        FusionRetriever([Fixed([("a", 1.0)])], llm=ScriptedLLM(replies=[]), **kwargs)


@pytest.mark.slow
def test_generated_only_without_original(dense, scripted_llm):
    llm = scripted_llm(["1. volcano magma eruption\n2. lava and the crust"])
    fusion = FusionRetriever(
        [dense], llm=llm, num_queries=2, include_original=False, similarity_top_k=2
    )
    nodes = fusion.retrieve("tell me something")
    assert ids(nodes)[0] == "volcano"
    assert QUESTION not in nodes[0].node.metadata["fusion_queries"]
    assert nodes[0].node.metadata["fusion_queries"] == [
        "volcano magma eruption",
        "lava and the crust",
    ]


@pytest.mark.slow
def test_prompt_is_overridable(dense, scripted_llm):
    llm = scripted_llm(["a query about cats"])
    fusion = FusionRetriever([dense], llm=llm, num_queries=2)
    fusion.update_prompts(
        {
            "query_gen_prompt": fusion.get_prompts()["query_gen_prompt"].__class__(
                "Give {num_queries} rewrites of: {query}"
            )
        }
    )
    fusion.retrieve("cats")
    assert llm.prompts == ["Give 1 rewrites of: cats"]


@pytest.mark.slow
def test_bad_input(dense, bm25, scripted_llm):
    llm = scripted_llm([])
    with pytest.raises(
        ConfigurationError,
        match="valid values: reciprocal_rank, relative_score, dist_based_score, union",
    ):
        FusionRetriever([dense], llm=llm, mode="borda")
    with pytest.raises(ConfigurationError, match="weights has 3 values for 2 retrievers"):
        FusionRetriever([dense, bm25], llm=llm, weights=[1, 2, 3])
    with pytest.raises(ConfigurationError, match=">= 0"):
        FusionRetriever([dense, bm25], llm=llm, weights=[1, -2])
    with pytest.raises(ConfigurationError, match="at least one retriever"):
        FusionRetriever([], llm=llm)
    with pytest.raises(ConfigurationError, match="num_queries must be an integer >= 1, got 0"):
        FusionRetriever([dense], llm=llm, num_queries=0)
    with pytest.raises(ConfigurationError, match="similarity_top_k must be an integer >= 1"):
        FusionRetriever([dense], llm=llm, similarity_top_k=0)
    with pytest.raises(ConfigurationError, match="BaseRetriever"):
        FusionRetriever(["not a retriever"], llm=llm)
    with pytest.raises(ConfigurationError, match="empty"):
        FusionRetriever([dense], llm=llm).retrieve(" ")
    with pytest.raises(ConfigurationError, match="empty"):
        asyncio.run(FusionRetriever([dense], llm=llm).aretrieve(""))


class Plain(BaseRetriever):
    """Only ``_retrieve``: FusionRetriever's async path runs its searches in worker threads."""

    def __init__(self, inner: BaseRetriever) -> None:
        self.inner = inner
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.inner.retrieve(query_bundle)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["sync", "async", "async_sync_only"])
def test_every_span_of_a_query_descends_from_its_root(dense, bm25, scripted_llm, path):
    # Searches run in worker threads; without the caller's context their instrumentation spans
    # would have no parent, and observability tools would show them as unrelated work.
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

    retrievers = {"dense": dense, "bm25": bm25}
    if path == "async_sync_only":
        retrievers = {name: Plain(r) for name, r in retrievers.items()}
    fusion = FusionRetriever(
        retrievers, llm=scripted_llm([VARIANTS_REPLY]), num_queries=4, similarity_top_k=4
    )
    root = get_dispatcher()
    handler = SimpleSpanHandler()
    root.add_span_handler(handler)
    try:
        if path == "sync":
            nodes = fusion.retrieve(QUESTION)
        else:
            nodes = asyncio.run(fusion.aretrieve(QUESTION))
    finally:
        root.span_handlers.remove(handler)
    assert nodes
    spans = handler.completed_spans + handler.dropped_spans
    by_id = {s.id_: s for s in spans}
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 1 and roots[0].id_.startswith("FusionRetriever."), [s.id_ for s in roots]
    searches = [s for s in spans if s.id_.startswith("MilvusHybridRetriever.")]
    assert len(searches) >= 8, "4 queries x 2 retrievers, each a span"
    for span in spans:
        chain, seen = span, set()
        while chain.parent_id is not None and chain.id_ not in seen:
            seen.add(chain.id_)
            assert chain.parent_id in by_id, f"{span.id_} has a parent outside this query"
            chain = by_id[chain.parent_id]
        assert chain is roots[0]
