"""CitedChatEngine: a three-turn conversation over shipped Wikipedia articles, pronoun follow-ups
condensed from the history, answers cited; sync, async and streaming agree; memory and errors.

Real Milvus Lite, the real embedding model; the LLM is scripted, and it reads its prompt the way
a model would: the condense reply resolves the pronoun from the conversation it is shown (with a
chatty preamble), the answer cites the context document that holds the fact.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document, Settings
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.schema import QueryBundle

from llama_index_rag_pack import CitedChatEngine, CitedQueryEngine, RagPack
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.labelled import load_corpus
from llama_index_rag_pack.testing import ScriptedLLM

# longest first: a name inside another ("Andorra" in "Andorra la Vella") loses the tie
ENTITIES = ("Andorra la Vella", "Morihei Ueshiba", "Andorra", "aikido")
# what the answer to a question mentions, and the fact the cited document must hold
FACTS = {
    "capital": ("The capital of Andorra is Andorra la Vella", "Andorra la Vella"),
    "high": ("Andorra la Vella lies at an elevation of 1,023 metres", "1,023"),
    "developed": ("Aikido was developed by Morihei Ueshiba", "Ueshiba"),
    "about": ("Andorra is a small landlocked country in the Pyrenees", "Andorra"),
}
TURNS = ("Tell me about Andorra.", "What is its capital?", "And how high is it?")


def _condense(prompt: str) -> str:
    """Resolve the last message's pronoun to the entity the conversation named last."""
    history = prompt.split("Conversation:", 1)[1].split("Last message:", 1)[0]
    message = prompt.split("Last message:", 1)[1].split("\n", 1)[0].strip()
    last = max(ENTITIES, key=lambda e: (history.rfind(e), len(e)))
    question = re.sub(r"^And\s+", "", message)
    question = re.sub(r"\bits\b", f"{last}'s", question)
    question = re.sub(r"\bit\b", last, question)
    return f'Sure! Here is the standalone question:\n"{question}"'


def _answer(prompt: str) -> str:
    question = prompt.rsplit("Question:", 1)[-1] if "Question:" in prompt else prompt[-300:]
    key = next((k for k in FACTS if k in question.lower()), "about")
    sentence, fact = FACTS[key]
    docs = re.findall(r"<document id=(\d+)[^>]*>\n(.*?)\n</document>", prompt, re.S)
    cited = next((i for i, text in docs if fact in text), None)
    return f"{sentence} [1](id={cited})." if cited else "I could not find that in the documents."


def reply(prompt: str) -> str:
    return _condense(prompt) if "Standalone question:" in prompt else _answer(prompt)


def llm() -> ScriptedLLM:
    return ScriptedLLM(replies=reply)


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RagPack:
    # the articles' openings hold the facts the conversation asks about
    docs = [
        Document(text=d.text[:5000], metadata=d.metadata, id_=d.doc_id)
        for d in load_corpus("wikipedia", titles=["Andorra", "Aikido"])
    ]
    uri = str(tmp_path_factory.mktemp("chat") / "chat.db")
    return RagPack(
        docs,
        uri=uri,
        collection_name="chat",
        embed_model=embed_model,
        llm=llm(),
        show_progress=False,
    )


def _turn_record(response: Any) -> tuple[str, str, list[str]]:
    return (
        response.metadata["condensed_question"],
        response.answer,
        [n.node.node_id for n in response.source_nodes],
    )


def _check_conversation(records: list[tuple[str, str, list[str]]]) -> None:
    condensed = [r[0] for r in records]
    assert condensed[0] == TURNS[0]  # first turn: nothing to condense
    assert condensed[1] == "What is Andorra's capital?"
    assert condensed[2] == "how high is Andorra la Vella?"  # named in the previous *answer*
    for (_, answer, cited), (sentence, _) in zip(
        records, (FACTS["about"], FACTS["capital"], FACTS["high"]), strict=True
    ):
        assert answer.startswith(sentence) and "[1]" in answer  # numbered per answer
        assert len(cited) == 1, answer


def _cited_titles(response: Any) -> set[str]:
    return {n.node.metadata.get("title") for n in response.source_nodes}


@pytest.mark.slow
def test_a_three_turn_conversation_resolves_follow_ups_and_cites_the_right_article(
    pack: RagPack,
) -> None:
    engine = pack.make_chat_engine()
    assert isinstance(engine, BaseChatEngine)
    records = []
    for message in TURNS:
        response = engine.chat(message)
        assert _cited_titles(response) == {"Andorra"}, response.response
        records.append(_turn_record(response))
        if message != TURNS[0]:  # found by the condensed question, not by "its capital"
            assert "Andorra la Vella" in response.source_nodes[0].node.get_content()
    _check_conversation(records)
    assert response.context_nodes and response.attribution is not None  # as a CitedResponse
    history = engine.chat_history
    assert [m.role for m in history] == [MessageRole.USER, MessageRole.ASSISTANT] * 3
    # the answers without their citations: no numbers, links or references to condense again
    assert history[3].content == "The capital of Andorra is Andorra la Vella."
    assert "[1]" in records[1][1] and "wikipedia.org" in records[1][1]


@pytest.mark.slow
async def test_sync_async_and_streaming_agree(pack: RagPack) -> None:
    def sync_run() -> list[Any]:
        engine = pack.make_chat_engine()
        return [_turn_record(engine.chat(m)) for m in TURNS]

    async def async_run() -> list[Any]:
        engine = pack.make_chat_engine()
        return [_turn_record(await engine.achat(m)) for m in TURNS]

    def stream_run() -> list[Any]:
        engine = pack.make_chat_engine()
        out = []
        for message in TURNS:
            response = engine.stream_chat(message)
            text = "".join(response.response_gen)
            assert text.startswith(response.answer) and "Andorra" in text
            out.append(_turn_record(response))
        assert len(engine.chat_history) == 6
        return out

    async def astream_run() -> list[Any]:
        engine = pack.make_chat_engine()
        out = []
        for message in TURNS:
            response = await engine.astream_chat(message)
            text = "".join([t async for t in response.async_response_gen()])
            assert text.startswith(response.answer)
            out.append(_turn_record(response))
        assert len(engine.chat_history) == 6
        return out

    expected = sync_run()
    assert await async_run() == expected
    assert stream_run() == expected
    assert await astream_run() == expected


@pytest.mark.slow
def test_reset_forgets_the_conversation(pack: RagPack) -> None:
    scripted = llm()
    engine = CitedChatEngine.from_defaults(pack.retriever("hybrid_convex"), scripted)
    engine.chat(TURNS[0])
    engine.chat(TURNS[1])
    calls = scripted.call_count
    engine.reset()
    assert engine.chat_history == []
    response = engine.chat(TURNS[1])  # nothing to resolve "its" against: searched as it stands
    assert response.metadata["condensed_question"] == TURNS[1]
    assert scripted.call_count == calls + 1  # the answer only, no condense call


@pytest.mark.slow
def test_the_history_given_per_call_and_the_token_limit(pack: RagPack) -> None:
    scripted = llm()
    engine = CitedChatEngine.from_defaults(pack.retriever("bm25"), scripted, token_limit=40)
    history = [
        ChatMessage(role=MessageRole.USER, content="Who developed aikido?"),
        ChatMessage(role=MessageRole.ASSISTANT, content="Aikido was developed by Morihei Ueshiba."),
    ]
    response = engine.chat("Tell me about Andorra and its capital.", chat_history=history)
    assert "Morihei Ueshiba" in scripted.prompts[0]  # the given history was condensed with
    for message in ("What is its capital?",) * 4:
        engine.chat(message)
    condense_prompt = scripted.prompts[-2]
    assert "Standalone question:" in condense_prompt
    assert "Who developed aikido?" not in condense_prompt  # older turns fall out of the limit
    assert len(engine.chat_history) == 12 and response.source_nodes


def test_the_default_token_limit_leaves_room_in_the_context_window() -> None:
    small = ScriptedLLM(replies=reply, context_window=2048)
    assert CitedChatEngine.default_token_limit(small) == 2048 - 512 - 512
    assert CitedChatEngine.default_token_limit(ScriptedLLM(context_window=600)) == 256


@pytest.mark.slow
def test_settings_llm_is_used_like_core_chat_engines(pack: RagPack) -> None:
    scripted = llm()
    previous = Settings._llm
    Settings.llm = scripted
    try:
        engine = CitedChatEngine.from_defaults(pack.retriever("bm25"))
        engine.chat(TURNS[0])
    finally:
        Settings._llm = previous
    assert scripted.call_count == 1


@pytest.mark.slow
def test_an_unusable_condense_reply_searches_the_message_as_it_stands(pack: RagPack) -> None:
    replies = iter(["", "Andorra is a small landlocked country in the Pyrenees."])
    engine = CitedChatEngine.from_defaults(
        pack.retriever("bm25"),
        ScriptedLLM(replies=lambda p: next(replies) if "Standalone" in p else _answer(p)),
        chat_history=[ChatMessage(role=MessageRole.USER, content="Hello")],
    )
    assert engine.chat("What is the capital of Andorra?").metadata["condensed_question"] == (
        "What is the capital of Andorra?"
    )


@pytest.mark.slow
def test_bad_input_is_one_clear_error(pack: RagPack, tmp_path: Path) -> None:
    engine = pack.make_chat_engine()
    for bad in ("", "   "):
        with pytest.raises(ConfigurationError):
            engine.chat(bad)
    assert engine.chat_history == []  # nothing stored
    with pytest.raises(ConfigurationError, match="needs a CitedQueryEngine"):
        CitedChatEngine(pack.make_query_engine(citations=False))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="token_limit"):
        CitedChatEngine.from_defaults(pack.retriever("bm25"), llm(), token_limit=0)
    assert isinstance(pack.make_chat_engine("bm25").query_engine, CitedQueryEngine)


@pytest.mark.slow
def test_filters_scope_every_turn(pack: RagPack) -> None:
    engine = pack.make_chat_engine("bm25", filters='title == "Aikido"')
    response = engine.chat("Who developed aikido?")
    assert _cited_titles(response) == {"Aikido"}
    context = engine.query_engine.retrieve(QueryBundle("Andorra capital Ueshiba"))
    assert context and {n.node.metadata["title"] for n in context} == {"Aikido"}


@pytest.mark.slow
def test_callback_handlers_see_each_turns_retrieval(pack: RagPack) -> None:
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler

    handler = LlamaDebugHandler()
    engine = CitedChatEngine.from_defaults(
        pack.retriever("bm25"), llm(), callback_manager=CallbackManager([handler])
    )
    engine.chat(TURNS[0])
    engine.chat(TURNS[1])
    retrievals = handler.get_event_pairs(CBEventType.RETRIEVE)
    assert [pair[0].payload["query_str"] for pair in retrievals] == [
        TURNS[0],
        "What is Andorra's capital?",  # what was searched: the condensed question
    ]
