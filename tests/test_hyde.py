"""HyDERetriever over real Milvus Lite with the real MiniLM; passages come from a scripted LLM."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_rag_pack.errors import ConfigurationError
from llama_index_rag_pack.fusion import MilvusHybridRetriever
from llama_index_rag_pack.milvus import flush, open_vector_store
from llama_index_rag_pack.transforms import HyDERetriever
from llama_index_rag_pack.transforms.hyde import clean_passage, mean_embedding

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
