"""Ask for JSON replies that match a schema, from LLMs that can constrain their decoding.

:class:`~llama_index_rag_pack.models.local_llm.LocalGGUFLLM` (llama.cpp) turns a JSON schema
into a grammar, so every token it samples keeps the reply valid: even the bundled 135M model then
answers with JSON that parses. Two ways to ask:

* per call, on that LLM: ``llm.complete(prompt, json_schema=schema)`` (also ``chat``, the
  streaming and async methods);
* around any code that calls an LLM (``predict``, ``apredict``, a retriever, ...):
  ``with json_output(schema): ...``. The request holds for the calls made inside the block, in
  this thread or task only. LLMs that cannot constrain decoding (OpenAI, scripted LLMs, ...)
  ignore it, so the pack's tolerant parsers still read their replies.

Example:
    >>> from llama_index_rag_pack.testing import ScriptedLLM
    >>> schema = {"type": "object", "properties": {"score": {"enum": [0, 1, 2]}}}
    >>> with json_output(schema):
    ...     requested_json_schema() == schema
    True
    >>> requested_json_schema() is None
    True
    >>> with json_output(schema):  # an LLM without constrained decoding: unchanged
    ...     ScriptedLLM(replies=["Score: 2"]).complete("Judge this.").text
    'Score: 2'
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["json_output", "requested_json_schema", "supports_json_schema"]

_SCHEMA: ContextVar[dict[str, Any] | None] = ContextVar("rag_pack_json_schema", default=None)


@contextmanager
def json_output(schema: dict[str, Any] | None) -> Iterator[None]:
    """Within the block, LLM calls that support it reply with JSON matching ``schema``
    (``None``: no constraint)."""
    if schema is not None and not isinstance(schema, dict):
        raise TypeError(f"schema must be a JSON schema dict or None, got {type(schema).__name__}")
    token = _SCHEMA.set(schema)
    try:
        yield
    finally:
        _SCHEMA.reset(token)


def requested_json_schema() -> dict[str, Any] | None:
    """The schema of the innermost :func:`json_output` block around this call, or ``None``."""
    return _SCHEMA.get()


def supports_json_schema(llm: Any) -> bool:
    """Whether ``llm`` constrains its replies to a JSON schema (``json_schema=`` keyword and
    :func:`json_output`)."""
    return bool(getattr(llm, "supports_json_schema", False))
