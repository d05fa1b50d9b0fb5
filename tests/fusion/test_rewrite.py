"""RewriteRetriever (rewrite-retrieve-read) over real Milvus Lite with scripted LLM rewrites."""

from __future__ import annotations

import asyncio
import logging

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.fusion.rag_fusion import FusionRetriever
from llama_index_rag_pack.fusion.rewrite import (
    MAX_REWRITE_READ,
    RewriteRetriever,
    parse_rewrite,
)
from llama_index_rag_pack.milvus.connection import flush, open_vector_store

CORPUS = {
    "philosophers": "Socrates, Plato and Aristotle are key figures of ancient Greek philosophy.",
    "toothpaste": "Brush your teeth twice a day with a fluoride toothpaste.",
    "cooker": "Never leave food on a hot cooker unattended; it can burn or catch fire.",
    "news": "Morning news bulletins summarise the headlines of the day.",
    "paris": "Paris is the capital and largest city of France, on the river Seine.",
}
NOISY = (
    "Today I woke up and brushed my teeth, then I sat down to read the news. But then I "
    "forgot the food on the cooker. Who are some key figures in the ancient greek history "
    "of philosophy?"
)


@pytest.fixture(scope="module")
def dense(tmp_path_factory, embed_model):
    vs = open_vector_store(
        str(tmp_path_factory.mktemp("rewrite") / "r.db"), "rewrite_docs", dim=384
    )
    nodes = [TextNode(id_=k, text=t) for k, t in CORPUS.items()]
    VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=vs),
        embed_model=embed_model,
    )
    flush(vs)
    return MilvusHybridRetriever(
        vs, embed_model=embed_model, search_type="dense", similarity_top_k=2
    )


def test_rewrite_focuses_a_noisy_query(dense, scripted_llm):
    llm = scripted_llm(
        ['Sure! A better search query would be:\n"key figures ancient Greek philosophy"**']
    )
    rrr = RewriteRetriever(dense, llm=llm)
    nodes = rrr.retrieve(NOISY)
    assert nodes[0].node.node_id == "philosophers"
    meta = nodes[0].node.metadata
    assert meta["rewritten_query"] == "key figures ancient Greek philosophy"
    assert meta["original_query"] == NOISY
    assert "rewritten_query" not in nodes[0].node.get_content(MetadataMode.LLM)
    assert NOISY in llm.prompts[0]
    # the focused query matches the relevant chunk more closely than the noisy one did
    noisy = {n.node.node_id: n.score for n in dense.retrieve(NOISY)}
    assert nodes[0].score > noisy.get("philosophers", 0.0)


async def test_async_path_never_calls_sync(dense, scripted_llm):
    llm = scripted_llm(["Search query: ancient greek philosophers"], forbid_sync=True)
    nodes = await RewriteRetriever(dense, llm=llm).aretrieve(NOISY)
    assert NOISY in llm.prompts[0]
    assert nodes[0].node.node_id == "philosophers"
    assert nodes[0].node.metadata["rewritten_query"] == "ancient greek philosophers"
    assert nodes[0].node.metadata["original_query"] == NOISY
    sync_nodes = RewriteRetriever(
        dense, llm=scripted_llm(["Search query: ancient greek philosophers"])
    ).retrieve(NOISY)
    assert [n.node.node_id for n in sync_nodes] == [n.node.node_id for n in nodes]


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   \n",
        "Here is a better query:",
        " ".join(["capital"] * 70),  # a ramble over 500 characters is no search query
        ConnectionError("down"),
    ],
)
def test_unusable_rewrite_falls_back_to_the_original(dense, scripted_llm, caplog, reply):
    caplog.set_level(logging.WARNING)
    rrr = RewriteRetriever(dense, llm=scripted_llm([reply, reply]))
    for nodes in (
        rrr.retrieve("capital of France"),
        asyncio.run(rrr.aretrieve("capital of France")),
    ):
        assert nodes[0].node.node_id == "paris"
        assert nodes[0].node.metadata["rewritten_query"] == "capital of France"
    assert "original query" in caplog.text


def test_raise_on_failure(dense, scripted_llm):
    strict = RewriteRetriever(
        dense, llm=scripted_llm([ConnectionError("down")] * 2), raise_on_failure=True
    )
    with pytest.raises(ConnectionError):
        strict.retrieve(NOISY)
    with pytest.raises(ConnectionError):
        asyncio.run(strict.aretrieve(NOISY))


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("ancient greek philosophers", "ancient greek philosophers"),
        ('"ancient greek philosophers"**', "ancient greek philosophers"),
        ("**ancient greek philosophers**", "ancient greek philosophers"),
        (
            "Rewritten query: ancient greek philosophers\n\n"
            "This query removes the unrelated details.",
            "ancient greek philosophers",
        ),
        ("1. ancient greek philosophers", "ancient greek philosophers"),
        (
            '"key figures ancient greek philosophy"** This query drops the unrelated details.',
            "key figures ancient greek philosophy",
        ),
        ("", None),
        ("Sure, here you go:", None),
    ],
)
def test_parse_rewrite(reply, expected):
    assert parse_rewrite(reply) == expected


def test_parse_rewrite_reads_only_the_head_of_a_reply():
    preamble, query = "Here is the query:\n", "greek philosophers"
    fits = preamble * ((MAX_REWRITE_READ - len(query) - 1) // len(preamble))
    assert parse_rewrite(fits + query + "\n") == query
    crosses = preamble * (MAX_REWRITE_READ // len(preamble))  # the query line crosses the bound
    assert len(crosses) < MAX_REWRITE_READ < len(crosses) + len(query)
    assert parse_rewrite(crosses + query) is None  # neither read nor cut


def test_parse_rewrite_max_chars_is_inclusive():
    query = "ancient greek philosophers"
    assert parse_rewrite(query, max_chars=len(query)) == query
    assert parse_rewrite(query, max_chars=len(query) - 1) is None


def test_wrapped_retriever_prompts_are_reachable(dense, scripted_llm):
    fusion = FusionRetriever([dense], llm=scripted_llm([]), num_queries=2)
    rrr = RewriteRetriever(fusion, llm=scripted_llm([]))
    assert "retriever:query_gen_prompt" in rrr.get_prompts()
    rrr.update_prompts({"retriever:query_gen_prompt": PromptTemplate("{num_queries}: {query}")})
    assert fusion.query_gen_prompt.template == "{num_queries}: {query}"


def test_callback_manager_receives_the_retrieve_events(dense, scripted_llm):
    handler = LlamaDebugHandler()
    rrr = RewriteRetriever(
        dense, llm=scripted_llm(["paris"]), callback_manager=CallbackManager([handler])
    )
    rrr.retrieve("where is the seine")
    assert handler.get_event_pairs(CBEventType.RETRIEVE)


def test_prompt_override_and_bad_input(dense, scripted_llm):
    llm = scripted_llm(["paris"])
    rrr = RewriteRetriever(dense, llm=llm, rewrite_prompt="Rewrite: {query}")
    rrr.retrieve("where is the seine")
    assert llm.prompts == ["Rewrite: where is the seine"]
    assert "rewrite_prompt" in rrr.get_prompts()
    with pytest.raises(ConfigurationError, match="empty"):
        rrr.retrieve("")
    with pytest.raises(ConfigurationError, match="BaseRetriever"):
        RewriteRetriever("retriever", llm=llm)
