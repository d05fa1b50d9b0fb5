"""HyDERetriever over real Milvus Lite with the real MiniLM; passages come from a scripted LLM."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.fusion.hyde import HyDERetriever, clean_passage, mean_embedding
from llama_index_rag_pack.milvus.connection import flush, open_vector_store

CORPUS = {
    "photosynthesis": "Photosynthesis converts light energy, water and carbon dioxide into glucose "
    "and oxygen inside the chloroplasts of plant cells.",
    "volcano": "A volcano erupts when magma rises through the crust of the Earth.",
    "tea": "Green tea is made from unoxidised leaves of Camellia sinensis.",
    "paris": "Paris is the capital and largest city of France, on the river Seine.",
    "bm25": "Okapi BM25 is a ranking function that search engines use to score keyword matches.",
}
# A vague question whose wording shares little with the answer passage.
QUESTION = "Why are leaves green and what do they do with sunlight?"
PASSAGE = (
    'Sure! Here is a passage:\n"Plants capture sunlight in chloroplasts and, through '
    'photosynthesis, turn water and carbon dioxide into glucose, releasing oxygen."'
)


@pytest.fixture(scope="module")
def dense(tmp_path_factory, embed_model):
    vs = open_vector_store(str(tmp_path_factory.mktemp("hyde") / "h.db"), "hyde_docs", dim=384)
    nodes = [TextNode(id_=k, text=t) for k, t in CORPUS.items()]
    VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=vs),
        embed_model=embed_model,
    )
    flush(vs)
    return MilvusHybridRetriever(
        vs, embed_model=embed_model, search_type="dense", similarity_top_k=3
    )


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


class Spy(BaseRetriever):
    """Wraps a real retriever and records the QueryBundle it receives."""

    def __init__(self, inner):
        self.inner, self.bundles = inner, []
        super().__init__()

    def _retrieve(self, query_bundle):
        self.bundles.append(query_bundle)
        return self.inner.retrieve(query_bundle)

    async def _aretrieve(self, query_bundle):
        self.bundles.append(query_bundle)
        return await self.inner.aretrieve(query_bundle)


class Recording(BaseEmbedding):
    """The real embedding model, recording which texts it embedded as queries and which as
    documents."""

    _inner: Any = PrivateAttr()
    _queries: list[str] = PrivateAttr()
    _texts: list[str] = PrivateAttr()

    def __init__(self, inner: BaseEmbedding) -> None:
        super().__init__(model_name="recording")
        self._inner, self._queries, self._texts = inner, [], []

    @property
    def queries(self) -> list[str]:
        return self._queries

    @property
    def texts(self) -> list[str]:
        return self._texts

    def _get_query_embedding(self, query: str) -> list[float]:
        self._queries.append(query)
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self._queries.append(query)
        return await self._inner.aget_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self._texts.append(text)
        return self._inner.get_text_embedding(text)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        self._texts.append(text)
        return await self._inner.aget_text_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._texts.extend(texts)
        return self._inner.get_text_embedding_batch(texts)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._texts.extend(texts)
        return await self._inner.aget_text_embedding_batch(texts)


def run_hyde(hyde: HyDERetriever, query: str, use_async: bool) -> list[Any]:
    return asyncio.run(hyde.aretrieve(query)) if use_async else hyde.retrieve(query)


# The question's own embedding finds Paris; the scripted passage is about volcanoes.
PARIS_QUESTION = "What is the capital city of France?"
VOLCANO_PASSAGE = (
    'Sure! Here is a passage:\n"Volcanoes erupt when molten magma rises up through the '
    'crust of the Earth."'
)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_the_passage_not_the_question_decides_the_search(
    dense, embed_model, scripted_llm, use_async
):
    assert dense.retrieve(PARIS_QUESTION)[0].node.node_id == "paris"
    recording = Recording(embed_model)
    llm = scripted_llm([VOLCANO_PASSAGE], forbid_sync=use_async)
    hyde = HyDERetriever(dense, llm=llm, embed_model=recording)
    nodes = run_hyde(hyde, PARIS_QUESTION, use_async)
    passage = clean_passage(VOLCANO_PASSAGE)
    assert nodes[0].node.node_id == "volcano", [n.node.node_id for n in nodes]
    assert nodes[0].score == pytest.approx(
        cosine(
            embed_model.get_text_embedding(passage),
            embed_model.get_text_embedding(CORPUS["volcano"]),
        ),
        abs=1e-3,
    )
    # the passage is embedded as a document; the question is not embedded at all
    assert recording.texts == [passage]
    assert recording.queries == []


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_passages_are_embedded_as_documents_and_the_question_as_a_query(
    dense, embed_model, scripted_llm, use_async
):
    passages = ["Volcanoes erupt when magma rises.", "Lava flows from an erupting volcano."]
    recording = Recording(embed_model)
    spy = Spy(dense)
    hyde = HyDERetriever(
        spy,
        llm=scripted_llm(passages, forbid_sync=use_async),
        embed_model=recording,
        num_hypotheses=2,
        include_query=True,
    )
    run_hyde(hyde, PARIS_QUESTION, use_async)
    assert sorted(recording.texts) == sorted(passages)
    assert recording.queries == [PARIS_QUESTION]
    bundle = spy.bundles[-1]
    assert bundle.query_str == PARIS_QUESTION
    vectors = [embed_model.get_text_embedding(p) for p in passages]
    vectors.append(embed_model.get_query_embedding(PARIS_QUESTION))
    assert bundle.embedding == pytest.approx(mean_embedding(vectors), abs=1e-5)


def test_searches_with_the_passage_embedded_as_a_document(dense, embed_model, scripted_llm):
    llm = scripted_llm([PASSAGE])
    hyde = HyDERetriever(dense, llm=llm, embed_model=embed_model)
    nodes = hyde.retrieve(QUESTION)
    assert nodes[0].node.node_id == "photosynthesis"
    cleaned = clean_passage(PASSAGE)
    assert nodes[0].node.metadata["hyde_passages"] == [cleaned]
    assert "hyde_passages" in nodes[0].node.excluded_llm_metadata_keys
    # the score is the similarity between the passage embedding and the chunk
    expected = cosine(
        embed_model.get_text_embedding(cleaned),
        embed_model.get_text_embedding(CORPUS["photosynthesis"]),
    )
    assert nodes[0].score == pytest.approx(expected, abs=1e-3)
    assert QUESTION in llm.prompts[0]


async def test_several_hypotheses_are_averaged_concurrently(dense, embed_model, gated_llm):
    passages = [
        "Chloroplasts use sunlight to make glucose.",
        "Leaves are green because of chlorophyll.",
        "Plants release oxygen during photosynthesis.",
    ]
    # each call waits until 3 are in flight: reached only if the passages are written at once
    llm = gated_llm(passages, target=3, forbid_sync=True)
    spy = Spy(dense)
    hyde = HyDERetriever(
        spy, llm=llm, embed_model=embed_model, num_hypotheses=3, include_query=True
    )
    nodes = await hyde.aretrieve(QUESTION)
    assert llm.max_concurrency == 3 and not llm.gate.timed_out  # written at the same time
    assert nodes[0].node.node_id == "photosynthesis"
    bundle = spy.bundles[-1]
    assert bundle.query_str == QUESTION  # BM25 / rerankers still see the question
    vectors = [embed_model.get_text_embedding(p) for p in passages]
    vectors.append(embed_model.get_query_embedding(QUESTION))
    assert bundle.embedding == pytest.approx(mean_embedding(vectors), abs=1e-5)


def test_sync_equals_async(dense, embed_model, scripted_llm):
    import asyncio

    sync_nodes = HyDERetriever(
        dense, llm=scripted_llm([PASSAGE]), embed_model=embed_model
    ).retrieve(QUESTION)
    async_nodes = asyncio.run(
        HyDERetriever(dense, llm=scripted_llm([PASSAGE]), embed_model=embed_model).aretrieve(
            QUESTION
        )
    )
    assert [n.node.node_id for n in sync_nodes] == [n.node.node_id for n in async_nodes]
    assert [n.score for n in sync_nodes] == pytest.approx([n.score for n in async_nodes], abs=1e-5)


async def test_failures_fall_back_to_the_query_embedding(dense, embed_model, scripted_llm, caplog):
    caplog.set_level(logging.WARNING)
    llm = scripted_llm(["   ", TimeoutError("slow model")], forbid_sync=True)
    hyde = HyDERetriever(dense, llm=llm, embed_model=embed_model, num_hypotheses=2)
    nodes = await hyde.aretrieve(QUESTION)
    plain = dense.retrieve(QUESTION)
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in plain]
    assert nodes[0].node.metadata["hyde_passages"] == []
    assert "TimeoutError" in caplog.text and "query embedding" in caplog.text
    strict = HyDERetriever(
        dense, llm=scripted_llm([TimeoutError("x")]), embed_model=embed_model, raise_on_failure=True
    )
    with pytest.raises(TimeoutError):
        strict.retrieve(QUESTION)


def test_one_bad_passage_of_two_is_skipped(dense, embed_model, scripted_llm):
    hyde = HyDERetriever(
        dense,
        llm=scripted_llm([ValueError("bad"), PASSAGE]),
        embed_model=embed_model,
        num_hypotheses=2,
    )
    nodes = hyde.retrieve(QUESTION)
    assert nodes[0].node.metadata["hyde_passages"] == [clean_passage(PASSAGE)]


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Passage: The Seine flows through Paris.", "The Seine flows through Paris."),
        (
            "Certainly! Here's a short passage that answers the question:\n\nThe Seine flows.",
            "The Seine flows.",
        ),
        ("```\nThe Seine flows.\n```", "The Seine flows."),
        ("\u201cThe Seine flows.\u201d", "The Seine flows."),
        ("Okapi BM25 ranks documents.", "Okapi BM25 ranks documents."),
    ],
)
def test_clean_passage(raw, clean):
    assert clean_passage(raw) == clean


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.floats(-10, 10), min_size=4, max_size=4), min_size=1, max_size=6))
def test_property_mean_embedding(vectors):
    raw = mean_embedding(vectors, normalize=False)
    for i in range(4):
        assert raw[i] == pytest.approx(sum(v[i] for v in vectors) / len(vectors), abs=1e-9)
    unit = mean_embedding(vectors)
    norm = math.sqrt(sum(x * x for x in unit))
    assert norm == pytest.approx(1.0) or norm == 0.0


def test_bad_input(dense, embed_model, scripted_llm):
    with pytest.raises(ConfigurationError, match="num_hypotheses must be an integer >= 1, got 0"):
        HyDERetriever(dense, llm=scripted_llm([]), embed_model=embed_model, num_hypotheses=0)
    with pytest.raises(ConfigurationError, match="BaseRetriever"):
        HyDERetriever(object(), llm=scripted_llm([]), embed_model=embed_model)
    with pytest.raises(ConfigurationError, match="empty"):
        HyDERetriever(dense, llm=scripted_llm([]), embed_model=embed_model).retrieve(
            QueryBundle("")
        )
    with pytest.raises(ConfigurationError, match="different sizes"):
        mean_embedding([[1.0, 2.0], [1.0]])


@pytest.mark.parametrize("path", ["sync", "async"])
def test_the_llm_is_asked_with_the_hyde_prompt_holding_the_question(
    dense, embed_model, scripted_llm, path
):
    import asyncio

    llm = scripted_llm([PASSAGE])
    hyde = HyDERetriever(dense, llm=llm, embed_model=embed_model)
    if path == "sync":
        hyde.retrieve(QUESTION)
    else:
        asyncio.run(hyde.aretrieve(QUESTION))
    expected = hyde.hyde_prompt.format(query=QUESTION)
    assert llm.prompts == [expected] and QUESTION in expected


def test_one_llm_call_at_a_time_is_a_valid_limit(dense, embed_model, scripted_llm):
    import asyncio

    llm = scripted_llm(["Passage one about leaves.", "Passage two about sunlight."])
    hyde = HyDERetriever(
        dense, llm=llm, embed_model=embed_model, num_hypotheses=2, max_concurrency=1
    )
    assert asyncio.run(hyde.aretrieve(QUESTION))
    assert llm.max_concurrency == 1
