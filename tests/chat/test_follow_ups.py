"""Follow-ups that survive a small model: a condensed question that loses the conversation's
subject (or the follow-up's own words) is set aside, and the follow-up joined to the last question
that named its subject is searched instead; sync, async and streaming alike.

Real Milvus Lite and the bundled embedding model. The LLM is scripted to condense the way the
bundled 135M model does (a fluent question about something else, or the last answer restated),
then the bundled model itself holds a three-turn conversation through ``rag-pack chat``.
"""

from __future__ import annotations

import io
import re
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.chat.follow_ups import (
    joined_question,
    lost_subject,
    needs_context,
    searched_question,
)
from llama_index_rag_pack.cli import main
from llama_index_rag_pack.evaluation.labelled import load_corpus
from llama_index_rag_pack.testing import ScriptedLLM

LAST_TURN = ["What is Milvus?", "Milvus is an open-source vector database built for search."]


# --------------------------------------------------------------------------- the check
@pytest.mark.parametrize(
    ("condensed", "message", "lost"),
    [
        ("When was the Acme Corporation founded?", "When was its database first released?", True),
        ("When was Milvus first released?", "When was its database first released?", False),
        ("When was it first released?", "When was it first released?", True),  # unchanged
        ("Milvus is a vector database.", "Who maintains it?", True),  # the answer again
        ("Who maintains Milvus?", "Who maintains it?", False),
        ("What is RAPTOR?", "What is RAPTOR?", False),  # a new subject, no reference
        ("What about Weaviate?", "And Weaviate?", True),  # a fragment that carried nothing over
        ("Is Weaviate a vector database too?", "And Weaviate?", False),
    ],
)
def test_lost_subject(condensed: str, message: str, lost: bool) -> None:
    assert lost_subject(condensed, message, LAST_TURN) is lost


def test_references_and_fragments_need_the_conversation() -> None:
    for message in ("Where does it live?", "What about their prices?", "and the population?",
                    "它是什么时候发布的？", "それはいつ作られましたか？"):  # fmt: skip
        assert needs_context(message), message
    for message in ("What is Milvus?", "Who founded Zilliz?", "Is there a free tier?"):
        assert not needs_context(message), message


def test_the_search_joins_the_follow_up_to_the_question_that_named_the_subject() -> None:
    question, extra = searched_question(
        "Who is the president of France?", "Who maintains it?", LAST_TURN, "What is Milvus?"
    )
    assert question == joined_question("What is Milvus?", "Who maintains it?")
    assert extra == {"condensed_reply": "Who is the president of France?", "follow_up": "joined"}
    assert searched_question("Who maintains Milvus?", "Who maintains it?", LAST_TURN, None) == (
        "Who maintains Milvus?",
        {},
    )


SUBJECTS = st.sampled_from(["Milvus", "Andorra", "aikido", "the aardvark", "Apollo 11"])
ASKS = st.sampled_from(["founded", "capital", "population", "eat", "released", "height"])


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(subject=SUBJECTS, ask=ASKS, other=SUBJECTS)
def test_a_condensation_that_names_the_subject_and_keeps_the_ask_is_kept(
    subject: str, ask: str, other: str
) -> None:
    last_turn = [f"Tell me about {subject}.", f"{subject} is well known."]
    message = f"What is its {ask}?"
    assert not lost_subject(f"What is the {ask} of {subject}?", message, last_turn)
    if set(other.lower().split()) - set(subject.lower().split()) - {"the"}:
        assert lost_subject(f"What is the {ask} of {other}?", message, last_turn)
    assert lost_subject(f"{subject} is well known.", message, last_turn)  # the ask dropped
    assert not lost_subject("anything at all", f"What is the {ask} of {other}?", last_turn)


# --------------------------------------------------------------------------- the chat engine
def small_model_condense(prompt: str) -> str:
    """Condense like a 135M model: a fluent question about something the conversation never
    named; answers cite the first document."""
    if "Standalone question:" in prompt:
        return "What is the capital of France?"
    return "It is in the documents [1](id=1)."


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RagPack:
    docs = [
        Document(text=d.text[:5000], metadata=d.metadata, id_=d.doc_id)
        for d in load_corpus("wikipedia", titles=["Andorra", "Aikido"])
    ]
    return RagPack(
        docs,
        uri=str(tmp_path_factory.mktemp("follow") / "f.db"),
        collection_name="follow",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=small_model_condense),
    )


def _titles(response: Any) -> set[str]:
    return {n.node.metadata.get("title") for n in response.source_nodes}


@pytest.mark.slow
async def test_a_lost_subject_is_searched_joined_sync_async_and_streaming(pack) -> None:
    turns = ("Tell me about Andorra.", "What is its capital?", "And how high is it?")
    searched: dict[str, list[str]] = {}
    for way in ("sync", "async", "stream", "astream"):
        chat = pack.make_chat_engine()
        for turn in turns:
            if way == "sync":
                response = chat.chat(turn)
            elif way == "async":
                response = await chat.achat(turn)
            elif way == "stream":
                response = chat.stream_chat(turn)
                list(response.response_gen)
            else:
                response = await chat.astream_chat(turn)
                [d async for d in response.async_response_gen()]
            searched.setdefault(way, []).append(response.metadata["condensed_question"])
            if turn != turns[0]:
                assert response.metadata["follow_up"] == "joined"
                assert response.metadata["condensed_reply"] == "What is the capital of France?"
            assert _titles(response) <= {"Andorra"}, (way, turn)
    expected = [
        "Tell me about Andorra.",
        "Tell me about Andorra. What is its capital?",
        "Tell me about Andorra. And how high is it?",  # joined to the subject, not the last join
    ]
    assert all(found == expected for found in searched.values()), searched


@pytest.mark.slow
def test_a_new_subject_is_searched_as_condensed(pack) -> None:
    chat = pack.make_chat_engine()
    chat.chat("Tell me about Andorra.")
    response = chat.chat("Who developed aikido?")  # no reference: the condensation stands
    assert response.metadata["condensed_question"] == "What is the capital of France?"
    assert "follow_up" not in response.metadata


@pytest.mark.slow
def test_reset_and_a_given_history_forget_the_subject(pack) -> None:
    chat = pack.make_chat_engine()
    chat.chat("Tell me about Andorra.")
    chat.reset()
    assert chat.chat("What is its capital?").metadata["condensed_question"] == (
        "What is its capital?"  # a first turn again: nothing to condense
    )


# --------------------------------------------------------------------------- the bundled model
@pytest.fixture(scope="module")
def wiki_uri(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> str:
    uri = str(tmp_path_factory.mktemp("wiki") / "wiki.db")
    RagPack(
        load_corpus("wikipedia", titles=["Aardvark", "Apollo 11"]),
        uri=uri,
        embed_model=embed_model,
        llm=ScriptedLLM(replies=[]),
    )
    return uri


@pytest.mark.slow
def test_rag_pack_chat_keeps_the_subject_with_the_bundled_model(
    wiki_uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    turns = ["What does the aardvark eat?", "Where does it live?", "How does it dig its burrows?"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(turns) + "\n"))
    code = main(["--uri", wiki_uri, "chat", "--no-stream", "--format", "text"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "answers   : extractive (auto: 135M weights, below 1B)" in out
    answers = re.split(r"^Q: .*$", out, flags=re.M)[1:]
    assert len(answers) == 3
    facts = ("ants and termites", "Africa", "burrow")
    for answer, fact in zip(answers, facts, strict=True):
        body, _, sources = answer.partition("Sources:")
        assert fact in body, (fact, answer)
        assert "Aardvark" in sources and "Apollo" not in sources, answer
    for searched in re.findall(r"^\(searched: (.*)\)$", err, flags=re.M):
        assert "aardvark" in searched.lower(), searched
