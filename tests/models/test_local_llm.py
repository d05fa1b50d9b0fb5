"""The local GGUF LLM: the real SmolLM2-135M on CPU, run by llama.cpp (xllamacpp)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.prompts import PromptTemplate

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models.gguf_file import read_gguf_info
from llama_index_rag_pack.models.json_output import json_output, supports_json_schema
from llama_index_rag_pack.models.local_llm import LocalGGUFLLM, LocalLLMError, loaded_models
from llama_index_rag_pack.models.settings import bundled_gguf_path, describe_llm

VERDICT = {
    "type": "object",
    "properties": {"score": {"type": "integer", "enum": [0, 1, 2]}},
    "required": ["score"],
    "additionalProperties": False,
}


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and "Traceback" not in text
    return text


# --------------------------------------------------------------------------- files


def test_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="GGUF model not found") as info:
        LocalGGUFLLM(model_path=str(tmp_path / "missing.gguf"))
    _one_line(info.value)


@pytest.mark.parametrize(
    "content", [b"", b"not a model at all", b"GGUF", b"GGUF\x03\x00\x00\x00" + b"\xff" * 20]
)
def test_a_file_that_is_not_gguf_fails_on_construction(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(ConfigurationError, match="Not a valid GGUF model file") as info:
        LocalGGUFLLM(model_path=str(bad))
    _one_line(info.value)


@pytest.mark.slow
def test_a_truncated_model_fails_on_load_with_one_line(tmp_path: Path) -> None:
    """The header is intact (construction succeeds) but the tensors are cut off: llama.cpp
    refuses the file, and the error names it in one line."""
    cut = tmp_path / "cut.gguf"
    with open(bundled_gguf_path(), "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(8_000_000))
    llm = LocalGGUFLLM(model_path=str(cut), parallel=1)
    assert llm.metadata.context_window == 8192
    with pytest.raises(ConfigurationError, match="could not load") as info:
        llm.complete("hello")
    assert str(cut) in _one_line(info.value)
    assert str(cut.resolve()) not in loaded_models()


@pytest.mark.slow
def test_metadata_comes_from_the_gguf_file(tmp_path: Path) -> None:
    info = read_gguf_info(bundled_gguf_path())
    assert info.architecture == "llama" and info.context_length == 8192
    assert "im_start" in (info.chat_template or "")  # SmolLM2's ChatML template
    llm = LocalGGUFLLM(model_path=bundled_gguf_path())
    assert llm.metadata.context_window == 8192 and llm.metadata.is_chat_model
    assert LocalGGUFLLM(model_path=bundled_gguf_path(), max_context_window=2048).context_window == (
        2048
    )
    assert LocalGGUFLLM(model_path=bundled_gguf_path(), context_window=1024).context_window == 1024
    assert supports_json_schema(llm)
    assert "llama.cpp" in describe_llm(llm)
    three = LocalGGUFLLM(model_path=bundled_gguf_path(), n_threads=3)
    assert three.threads == 3 and describe_llm(three).endswith("4 slots, 3 threads)")


def test_the_default_thread_count_is_chosen_once_per_process(monkeypatch) -> None:
    from llama_index_rag_pack.models import local_llm_engine as engine

    monkeypatch.delenv("RAG_PACK_LLM_THREADS", raising=False)
    monkeypatch.setattr(engine, "_DEFAULT_THREADS", None)
    loads = iter([0.1, 5.0])  # quiet at the first model, busy later: the choice stays
    monkeypatch.setattr(engine, "_load_average", lambda: next(loads))
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert engine.default_threads() == 2 and engine.default_threads() == 2
    monkeypatch.setenv("RAG_PACK_LLM_THREADS", "1")
    assert engine.default_threads() == 1
    monkeypatch.setenv("RAG_PACK_LLM_THREADS", "many")
    with pytest.raises(ConfigurationError, match="RAG_PACK_LLM_THREADS must be a positive"):
        engine.default_threads()


@pytest.mark.slow
def test_construction_does_not_load_and_instances_share_one_model() -> None:
    a = LocalGGUFLLM(model_path=bundled_gguf_path(), parallel=3, max_new_tokens=4)
    before = list(loaded_models())
    assert not a.is_loaded
    a.complete("Hi")
    assert a.is_loaded
    b = LocalGGUFLLM(model_path=bundled_gguf_path(), parallel=3, max_new_tokens=4)
    assert b.is_loaded  # same file and settings: already loaded, never twice
    b.complete("Hi")
    assert len(loaded_models()) == len(before) + 1


# --------------------------------------------------------------------------- generation


@pytest.mark.slow
def test_complete_and_stream_agree(local_llm) -> None:
    prompt = "What is the capital of France? Answer in one sentence."
    text = local_llm.complete(prompt).text
    assert "Paris" in text
    assert local_llm.complete(prompt).text == text  # greedy: deterministic
    deltas = [r.delta for r in local_llm.stream_complete(prompt)]
    assert "".join(deltas) == text  # greedy decoding: same tokens
    assert len(deltas) > 1
    chat = local_llm.chat([ChatMessage(role="user", content=prompt)]).message.content
    assert chat == text  # complete() is one user turn in the model's own chat template
    streamed = list(local_llm.stream_chat([ChatMessage(role="user", content=prompt)]))
    assert streamed[-1].message.content == text


@pytest.mark.slow
def test_the_same_prompt_gets_the_same_reply_whatever_was_asked_before(local_llm) -> None:
    # a prompt sharing a prefix with the last one reused its cached part: another floating-point
    # path, and "The answer is: Michael Collins." became "... Collins" for the same question
    context = (
        "Context:\nApollo 11 was the spaceflight that first landed humans on the Moon. Commander "
        "Neil Armstrong and lunar module pilot Buzz Aldrin landed the Apollo Lunar Module Eagle "
        "on July 20, 1969. Michael Collins flew the command module Columbia alone in lunar orbit "
        "while they were on the Moon's surface.\nThe aardvark is a medium-sized, burrowing, "
        "nocturnal mammal native to Africa. It feeds almost exclusively on ants and termites.\n"
        "Answer the question from the context.\nQuestion: "
    )
    prompt = context + "Who were the astronauts of Apollo 11?\nAnswer:"
    first = [local_llm.complete(prompt, max_tokens=24).text]  # a change shows in the first words
    for other in ("What does the aardvark eat?", "Where did Eagle land?"):
        local_llm.complete(context + other + "\nAnswer:", max_tokens=24)  # the same long prefix
        first.append(local_llm.complete(prompt, max_tokens=24).text)
    assert len(set(first)) == 1, first


@pytest.mark.slow
def test_a_formatted_prompt_is_sent_without_the_chat_template(local_llm) -> None:
    text = local_llm.complete("The capital of France is", formatted=True, max_tokens=4).text
    assert "Paris" in text
    assert not text.lstrip().startswith("<|im_start|>")


@pytest.mark.slow
def test_a_stream_left_early_stops_and_the_model_keeps_serving(local_llm) -> None:
    question = "What is the capital of France? Answer in one sentence."
    before = local_llm.complete(question).text
    stream = local_llm.stream_complete("Write a long story about a dragon.", max_tokens=200)
    first = next(stream)
    stream.close()
    assert first.delta
    assert local_llm.complete(question).text == before


@pytest.mark.slow
async def test_async_generation_does_not_block_the_event_loop(local_llm) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    response = await local_llm.achat([ChatMessage(role="user", content="Say hello in French.")])
    chunks = [r.delta async for r in await local_llm.astream_complete("Count from one to five.")]
    chat_chunks = [
        r.delta
        async for r in await local_llm.astream_chat([ChatMessage(role="user", content="Hi!")])
    ]
    task.cancel()
    assert response.message.content.strip()
    assert "".join(chunks).strip() and "".join(chat_chunks).strip()
    assert ticks > 10  # the loop kept running while the model generated
    prompt = "What is the capital of France? Answer in one sentence."
    assert (await local_llm.acomplete(prompt)).text == local_llm.complete(prompt).text


@pytest.mark.slow
async def test_concurrent_requests_decode_together(local_llm) -> None:
    """Parallel slots: every one of 4 streamed requests gets tokens before any of them ends.
    A model serving one request at a time would finish the first before the others start."""
    events: list[tuple[int, str]] = []

    async def one(i: int) -> None:
        prompt = f"Write three sentences about the number {i + 1}."
        async for _ in await local_llm.astream_complete(prompt, max_tokens=48):
            events.append((i, "token"))
        events.append((i, "end"))

    await asyncio.gather(*(one(i) for i in range(4)))
    first_end = next(n for n, (_, kind) in enumerate(events) if kind == "end")
    assert {i for i, kind in events[:first_end] if kind == "token"} == {0, 1, 2, 3}


@pytest.mark.slow
def test_concurrent_sync_callers_from_threads_get_their_own_replies(local_llm) -> None:
    from concurrent.futures import ThreadPoolExecutor

    prompts = [f"What is {n} plus {n}? Answer with the number." for n in (1, 2, 3, 4)]
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda p: local_llm.complete(p, max_tokens=24).text, prompts))
    assert all(r.strip() for r in replies) and len(set(replies)) > 1


# --------------------------------------------------------------------------- JSON


@pytest.mark.slow
def test_json_schema_constrains_the_reply(local_llm) -> None:
    prompt = "Does this passage answer the question? Passage: cats purr. Question: do cats purr?"
    reply = local_llm.complete(prompt, json_schema=VERDICT).text
    assert json.loads(reply)["score"] in (0, 1, 2)
    streamed = "".join(r.delta for r in local_llm.stream_complete(prompt, json_schema=VERDICT))
    assert streamed == reply


@pytest.mark.slow
async def test_json_output_block_constrains_predict_sync_and_async(local_llm) -> None:
    template = PromptTemplate("Rate how well '{text}' describes a cat, as JSON.")
    with json_output(VERDICT):
        sync = local_llm.predict(template, text="a small furry pet")
        asyn = await local_llm.apredict(template, text="a small furry pet")
    assert json.loads(sync)["score"] in (0, 1, 2) and json.loads(asyn) == json.loads(sync)
    free = local_llm.predict(template, text="a small furry pet")  # outside the block: free text
    with pytest.raises(json.JSONDecodeError):
        json.loads(free)


@pytest.mark.slow
def test_grammar_constrains_the_reply(local_llm) -> None:
    reply = local_llm.complete("Is the sky blue?", grammar='root ::= "yes" | "no"').text
    assert reply in ("yes", "no")


# --------------------------------------------------------------------------- request errors


@pytest.mark.slow
async def test_a_prompt_longer_than_the_context_is_a_one_line_error(local_llm) -> None:
    long_prompt = "word " * 9000
    with pytest.raises(LocalLLMError, match="context size") as info:
        local_llm.complete(long_prompt)
    _one_line(info.value)
    with pytest.raises(LocalLLMError, match="context size"):
        await local_llm.acomplete(long_prompt)
    with pytest.raises(LocalLLMError, match="context size"):
        list(local_llm.stream_complete(long_prompt))
    with pytest.raises(LocalLLMError, match="context size"):
        [r async for r in await local_llm.astream_complete(long_prompt)]


@pytest.mark.slow
def test_an_invalid_schema_is_a_one_line_error(local_llm) -> None:
    with pytest.raises(LocalLLMError, match="rejected") as info:
        local_llm.complete("Hi", json_schema={"type": "no-such-type"})
    _one_line(info.value)
    with pytest.raises(ConfigurationError, match="not both"):
        local_llm.complete("Hi", json_schema=VERDICT, grammar='root ::= "a"')


@pytest.mark.slow
def test_copied_model_file_loads_under_its_own_path(tmp_path: Path) -> None:
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(bundled_gguf_path(), copy)
    llm = LocalGGUFLLM(model_path=str(copy), parallel=1, max_new_tokens=8)
    assert llm.complete("Say hello.").text.strip()
    assert str(copy.resolve()) in loaded_models()


def test_free_text_is_penalised_for_repeating_and_held_replies_are_not() -> None:
    from llama_index_rag_pack.models.local_llm_engine import request_body

    defaults = {"max_tokens": 64, "temperature": 0.0, "repeat_penalty": 1.1}
    assert request_body({}, **defaults)["repeat_penalty"] == 1.1
    assert request_body({}, **defaults)["cache_prompt"] is False  # replies never depend on history
    assert request_body({"repeat_penalty": 1.0}, **defaults)["repeat_penalty"] == 1.0
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert "repeat_penalty" not in request_body({"json_schema": schema}, **defaults)
    assert "repeat_penalty" not in request_body({"grammar": 'root ::= "x"'}, **defaults)
    with json_output(schema):
        assert "repeat_penalty" not in request_body({}, **defaults)
    with pytest.raises(ConfigurationError, match="not both"):
        request_body({"json_schema": schema, "grammar": "root ::= x"}, **defaults)


@pytest.mark.slow
def test_a_looping_answer_stops_repeating(local_llm) -> None:
    # without the penalty this reply says 2 of its 9 sentences twice
    text = local_llm.complete("What does the aardvark eat?", max_tokens=200).text
    sentences = [s.strip() for s in text.split(".") if s.strip()]
    assert len(sentences) == len(set(sentences)), text  # no sentence said twice


SURROGATE_PROMPT = "What is " + chr(0xDCFF) + " Milvus?"  # a byte not UTF-8, decoded by Python


@pytest.mark.slow
async def test_a_prompt_with_a_lone_surrogate_is_answered_sync_async_and_streamed(local_llm):
    assert local_llm.complete(SURROGATE_PROMPT, max_tokens=4).text
    assert (await local_llm.acomplete(SURROGATE_PROMPT, max_tokens=4)).text
    chunks: list[str] = []

    def consume() -> None:
        chunks.extend(
            r.delta or "" for r in local_llm.stream_complete(SURROGATE_PROMPT, max_tokens=4)
        )

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive() and "".join(chunks)


@pytest.mark.slow
def test_a_request_the_engine_refuses_ends_the_stream_with_one_error(local_llm, monkeypatch):
    server = local_llm._server()

    def refuse(*args, **kwargs):
        raise TypeError("str is not valid UTF-8")

    monkeypatch.setattr(type(server), "handle_chat_completions", refuse, raising=False)
    with pytest.raises(LocalLLMError, match="rejected the request"):
        local_llm.complete("Hello", max_tokens=4)
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            list(local_llm.stream_complete("Hello", max_tokens=4))
        except BaseException as e:  # noqa: BLE001 - what escapes is the point
            failure.append(e)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "the stream waited for ever"
    assert len(failure) == 1 and isinstance(failure[0], LocalLLMError)


@pytest.mark.slow
async def test_every_call_reports_llama_cpps_token_counts(local_llm) -> None:
    """Sync, async and streamed calls carry the counts llama.cpp gives (a stream in its last
    response, with an empty delta): a usage meter adds them as reported, not counted."""
    from llama_index.core.llms import ChatMessage

    from llama_index_rag_pack.core.usage import metered

    prompt = "Name one colour."
    with metered() as meter:
        whole = local_llm.complete(prompt, max_tokens=8)
        streamed = list(local_llm.stream_complete(prompt, max_tokens=8))
        chat = await local_llm.achat([ChatMessage(role="user", content=prompt)], max_tokens=8)
        stream = await local_llm.astream_chat(
            [ChatMessage(role="user", content=prompt)], max_tokens=8
        )
        last = [r async for r in stream][-1]
    reported = [whole.additional_kwargs, streamed[-1].additional_kwargs, chat.additional_kwargs]
    reported.append(last.additional_kwargs)
    assert streamed[-1].delta == "" and last.delta == ""
    assert "".join(r.delta for r in streamed) == whole.text  # the usage response adds no text
    assert all(r["prompt_tokens"] == reported[0]["prompt_tokens"] > 3 for r in reported)
    assert all(0 < r["completion_tokens"] <= 8 for r in reported)
    assert meter.usage.llm_calls == 4 and not meter.usage.counted
    assert meter.usage.prompt_tokens == sum(r["prompt_tokens"] for r in reported)
    assert meter.usage.completion_tokens == sum(r["completion_tokens"] for r in reported)
