"""The local GGUF LLM (real SmolLM2-135M on CPU)."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.llms import ChatMessage

from llama_index_rag_pack.components.local_llm import LocalGGUFLLM
from llama_index_rag_pack.core.errors import ConfigurationError


def test_missing_model_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match="GGUF model not found"):
        LocalGGUFLLM(model_path=str(tmp_path / "missing.gguf"))


@pytest.mark.slow
def test_complete_and_stream_agree(local_llm) -> None:
    prompt = "What is the capital of France? Answer in one sentence."
    text = local_llm.complete(prompt).text
    assert "Paris" in text
    deltas = [r.delta for r in local_llm.stream_complete(prompt)]
    assert "".join(deltas) == text  # greedy decoding: same tokens
    assert len(deltas) > 1


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
    task.cancel()
    assert response.message.content.strip()
    assert "".join(chunks).strip()
    assert ticks > 10  # the loop kept running while the model generated
