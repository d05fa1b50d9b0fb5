"""The OpenAI LLM and the LLM of an OpenAI-compatible server (vLLM, Ollama, llama.cpp server,
LM Studio), as :func:`~llama_index_rag_pack.models.settings.resolve_llm` builds them from the
environment: ``RAG_PACK_LLM_API_BASE`` (or ``OPENAI_API_BASE`` / ``OPENAI_BASE_URL``) with
``RAG_PACK_LLM_MODEL``, else ``OPENAI_API_KEY``. Both ask every stream for its token usage.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from llama_index_rag_pack.core.errors import LLMNotConfiguredError

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.llms import LLM

__all__ = ["DEFAULT_OPENAI_MODEL", "api_base_from_env", "openai_from_env", "stream_with_usage"]

logger = logging.getLogger(__name__)

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"


def stream_with_usage() -> dict[str, Any]:
    """What the pack's OpenAI and OpenAI-compatible LLMs add to every request: a stream ends
    with a chunk carrying the call's token usage (``stream_options``; LlamaIndex drops it from
    requests that do not stream), so a streamed answer's ``usage`` is the server's own count."""
    return {"stream_options": {"include_usage": True}}


def api_base_from_env() -> str | None:
    """The OpenAI-compatible server's base URL the environment gives, if any."""
    for var in ("RAG_PACK_LLM_API_BASE", "OPENAI_API_BASE", "OPENAI_BASE_URL"):
        value = os.environ.get(var)
        if value:
            return value
    return None


def openai_from_env(required: bool) -> LLM | None:
    """The LLM the environment names (``None`` when it names none and ``required`` is false).

    Raises:
        LLMNotConfiguredError: ``required`` and neither a server nor a key is set.
    """
    api_base = api_base_from_env()
    api_key = os.environ.get("OPENAI_API_KEY")
    model = os.environ.get("RAG_PACK_LLM_MODEL")
    if api_base:
        from llama_index.llms.openai_like import OpenAILike

        llm = OpenAILike(
            model=model or DEFAULT_OPENAI_MODEL,
            api_base=api_base,
            api_key=api_key or "not-needed",
            is_chat_model=True,
            context_window=int(os.environ.get("RAG_PACK_LLM_CONTEXT_WINDOW", "8192")),
            max_retries=int(os.environ.get("RAG_PACK_LLM_MAX_RETRIES", "2")),
            additional_kwargs=stream_with_usage(),
        )
        logger.info("LLM: %s via OpenAI-compatible server %s", llm.model, api_base)
        return llm
    if api_key:
        from llama_index.llms.openai import OpenAI

        llm = OpenAI(
            model=model or DEFAULT_OPENAI_MODEL,
            api_key=api_key,
            additional_kwargs=stream_with_usage(),
        )
        logger.info("LLM: OpenAI %s", llm.model)
        return llm
    if required:
        raise LLMNotConfiguredError(
            "RAG_PACK_LLM=openai but neither OPENAI_API_KEY nor RAG_PACK_LLM_API_BASE is set. "
            "Set OPENAI_API_KEY for OpenAI, or RAG_PACK_LLM_API_BASE=http://127.0.0.1:8000/v1 "
            "(plus RAG_PACK_LLM_MODEL) for an OpenAI-compatible server."
        )
    return None
