"""Errors of ``rag-pack serve`` as OpenAI-style JSON bodies.

Every refused request gets ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status
(the caller can fix it) or 503 (Milvus, the embedding or rerank endpoint or the LLM failed: the next
request works once it is back). Nothing else escapes a handler: an unexpected exception is a 500
with a generic message, logged with its traceback.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import logging
from typing import Any

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmbeddingError,
    LLMNotConfiguredError,
    MilvusOperationError,
    MilvusUnavailableError,
    RerankError,
)

__all__ = ["ApiError", "api_error_from"]

logger = logging.getLogger(__name__)

#: Failures of what the server leans on: a 503, and the server goes on.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    MilvusUnavailableError,
    MilvusOperationError,
    CollectionNotFoundError,
    EmbeddingError,
    RerankError,
    LLMNotConfiguredError,
    ConnectionError,
    TimeoutError,
    OSError,
)


class ApiError(Exception):
    """A refused request: HTTP ``status`` and the OpenAI-style error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # noqa: A002 - OpenAI's field name
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def _one_line(error: BaseException, limit: int = 500) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def api_error_from(error: BaseException) -> ApiError:
    """The API error for an exception raised while answering.

    * :class:`ApiError`: itself;
    * a :class:`ConfigurationError` (a filter that fails the check, a bad argument): 400;
    * Milvus, the embedding endpoint or an LLM that cannot be reached or fails (the pack's
      errors for them, connection errors, and the ``openai`` client's errors): 503;
    * anything else: 500, logged with its traceback, its text not shown.

    Example:
        >>> api_error_from(ConfigurationError("bad filter")).status
        400
        >>> api_error_from(MilvusUnavailableError("down")).status
        503
    """
    if isinstance(error, ApiError):
        return error
    if isinstance(error, ConfigurationError):
        return ApiError(400, _one_line(error), code="invalid_value")
    if isinstance(error, _UNAVAILABLE) or _is_llm_failure(error):
        logger.warning("a backend failed: %s", _one_line(error))
        return ApiError(
            503,
            f"A backend is unavailable ({type(error).__name__}): {_one_line(error)} "
            "Try again once it is back.",
            type="service_unavailable",
            code="backend_unavailable",
        )
    logger.error("request failed", exc_info=error)
    return ApiError(
        500, "The server failed to answer; see its log.", type="server_error", code="internal"
    )


def _is_llm_failure(error: BaseException) -> bool:
    """An LLM call that failed: the ``openai`` client's errors, or the local LLM's."""
    for cls in type(error).__mro__:
        module = getattr(cls, "__module__", "")
        if cls.__name__ == "LocalLLMError" or module.startswith(("openai", "httpx")):
            return True
    return False
