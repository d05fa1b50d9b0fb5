"""Text UTF-8 cannot encode (lone surrogates), in a question or in an LLM reply: searched and
embedded with U+FFFD in their place, never an error of a tokenizer, gRPC or Milvus. Real Milvus
Lite and the real embedding model; the LLM replies are scripted."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.models.local_embedding import LocalEmbedding
from llama_index_rag_pack.testing import ScriptedLLM

SURROGATE = chr(0xD800)
REPLY = {"text": ""}


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RagPack:
    docs = [
        Document(text="Milvus is an open-source vector database. It stores embeddings."),
        Document(text="Bananas are yellow fruit that grow in bunches on large plants."),
    ]
    return RagPack(
        docs,
        uri=str(tmp_path_factory.mktemp("unencodable") / "p.db"),
        llm=ScriptedLLM(replies=lambda prompt: REPLY["text"]),
        embed_model=embed_model,
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["vector", "bm25", "hybrid_convex", "fusion", "hyde", "rewrite"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_reply_or_question_with_a_lone_surrogate_is_searched(
    pack: RagPack, mode: str, use_async: bool
) -> None:
    REPLY["text"] = f"1. vector database {SURROGATE} search\n2. Milvus {SURROGATE}"
    retriever = pack.retriever(mode)
    question = f"What is the Milvus {SURROGATE} vector database?"
    if use_async:
        import asyncio

        nodes = asyncio.run(retriever.aretrieve(question))
    else:
        nodes = retriever.retrieve(question)
    assert nodes and "Milvus" in nodes[0].node.get_content()


def test_the_embedding_of_a_lone_surrogate_is_that_of_the_replacement_character(
    embed_model: Any,
) -> None:
    assert isinstance(embed_model, LocalEmbedding)
    with_surrogate = embed_model.get_text_embedding_batch([f"vector {SURROGATE} search", "plain"])
    replaced = embed_model.get_text_embedding_batch(["vector \ufffd search", "plain"])
    assert with_surrogate == replaced
    assert embed_model.get_query_embedding(SURROGATE) == embed_model.get_query_embedding("\ufffd")
