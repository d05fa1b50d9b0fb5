"""``OpenAICompatibleEmbedding``: embeddings from OpenAI or any OpenAI-compatible endpoint.

Chosen with ``embed_model="openai:MODEL"`` (or ``RAG_PACK_EMBED_MODEL`` / ``--embed-model``), e.g.
``openai:text-embedding-3-small`` on OpenAI, or a multilingual model on a compatible server:
``openai:text-embedding-v3`` on DashScope (with
``OPENAI_BASE_URL=https://dashscope.aliyuncs.com/compatible-mode/v1``), ``openai:bge-m3`` on a
local vLLM / Ollama / text-embeddings-inference server.

It is core's ``OpenAILikeEmbedding`` (any model name, any base URL) with three changes:

* a failed request raises :class:`~llama_index_rag_pack.core.errors.EmbeddingError` (a
  ``RagPackError``) saying what to fix, never a raw ``openai`` / ``httpx`` exception, from every
  sync and async embedding method, so indexing, queries and the CLI fail with one clear line;
* one layer of retries, the ``openai`` SDK's own (``max_retries``, exponential backoff from 0.5 s,
  ``Retry-After`` honoured), not also LlamaIndex's retry loop around it (which multiplies the
  attempts): with the defaults (2 retries, 60 s timeout) an unreachable endpoint fails in about
  two seconds;
* vectors are asked for as floats (``encoding_format="float"``): the SDK's default, base64, is
  not understood by several compatible servers and gateways.

The async methods open one client per event loop (an ``httpx`` connection belongs to the loop
that opened it), so answers may run under several ``asyncio.run`` calls in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import openai
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.embeddings.openai_like import OpenAILikeEmbedding

from llama_index_rag_pack.core.errors import ConfigurationError, EmbeddingError, check_count

__all__ = [
    "DEFAULT_API_BASE",
    "OPENAI_PREFIX",
    "OpenAICompatibleEmbedding",
    "describe_endpoint",
    "public_url",
    "openai_embedding",
]

logger = logging.getLogger(__name__)

OPENAI_PREFIX = "openai:"
DEFAULT_API_BASE = "https://api.openai.com/v1"
#: Texts per request: DashScope's text-embedding-v3 takes at most 10, OpenAI up to 2048.
DEFAULT_BATCH_SIZE = 10
MAX_BATCH_SIZE = 2048
DEFAULT_MAX_RETRIES = 2
DEFAULT_TIMEOUT = 60.0
#: The key sent to a server that needs none (the ``openai`` SDK refuses an empty one).
NO_KEY = "none"
API_BASE_VARS = ("RAG_PACK_EMBED_API_BASE", "OPENAI_BASE_URL", "OPENAI_API_BASE")
API_KEY_VARS = ("RAG_PACK_EMBED_API_KEY", "OPENAI_API_KEY")
MAX_DETAIL = 200


class OpenAICompatibleEmbedding(OpenAILikeEmbedding):
    """An OpenAI-compatible embedding endpoint whose failures are :class:`EmbeddingError`.

    Args:
        model_name: The model the endpoint serves, e.g. ``text-embedding-v3``.
        **kwargs: ``OpenAILikeEmbedding``'s (``api_base``, ``api_key``, ``embed_batch_size``,
            ``dimensions``, ``max_retries``, ``timeout``, ...).

    Example:
        >>> model = OpenAICompatibleEmbedding(
        ...     "bge-m3", api_base="http://127.0.0.1:8000/v1", api_key="none"
        ... )
        >>> model.description
        'bge-m3 (OpenAI-compatible, http://127.0.0.1:8000/v1)'
    """

    api_key: str = Field(description="The endpoint's API key (left out of repr).", repr=False)
    _aclient_loop: Any = PrivateAttr(default=None)

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        extra = {"encoding_format": "float", **(kwargs.pop("additional_kwargs", None) or {})}
        kwargs.setdefault("max_retries", DEFAULT_MAX_RETRIES)
        kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
        kwargs.setdefault("embed_batch_size", DEFAULT_BATCH_SIZE)
        super().__init__(model_name=model_name, additional_kwargs=extra, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "OpenAICompatibleEmbedding"

    @property
    def description(self) -> str:
        """``MODEL (OpenAI-compatible, BASE_URL[, N-d])``: never the key."""
        return describe_endpoint(self)

    # ------------------------------------------------------------------ clients
    def _create_retry_decorator(self) -> Callable[[Any], Any]:
        """No retry loop around the SDK's own retries (see the module docstring)."""
        return _unchanged

    def _get_aclient(self) -> openai.AsyncOpenAI:
        """The async client of the running event loop (a new one on another loop)."""
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is None or self._aclient_loop() is not loop:
            kwargs = self._get_credential_kwargs(is_async=True)
            if kwargs.get("http_client") is None:
                # the SDK's defaults, without its wrapper's __del__, which would try to close
                # the connections of a finished loop on this one (and log the failure)
                kwargs["http_client"] = openai.DefaultAsyncHttpxClient()
            self._aclient = openai.AsyncOpenAI(**kwargs)
            self._aclient_loop = weakref.ref(loop)
        return self._aclient

    # ------------------------------------------------------------------ BaseEmbedding
    def _get_query_embedding(self, query: str) -> list[float]:
        with self._errors():
            return super()._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        with self._errors():
            return super()._get_text_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        with self._errors():
            return self._checked(texts, super()._get_text_embeddings(texts))

    async def _aget_query_embedding(self, query: str) -> list[float]:
        with self._errors():
            return await super()._aget_query_embedding(query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        with self._errors():
            return await super()._aget_text_embedding(text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        with self._errors():
            return self._checked(texts, await super()._aget_text_embeddings(texts))

    # ------------------------------------------------------------------ errors
    def _checked(self, texts: list[str], vectors: list[list[float]]) -> list[list[float]]:
        if len(vectors) != len(texts):
            raise EmbeddingError(
                f"The embedding endpoint {public_url(self.api_base)} returned {len(vectors)} "
                f"vectors for {len(texts)} texts: check that it is an OpenAI-compatible "
                "/embeddings API."
            )
        return vectors

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Map the ``openai`` SDK's (and ``httpx``'s) exceptions to :class:`EmbeddingError`."""
        try:
            yield
        except (openai.OpenAIError, httpx.HTTPError) as e:
            raise EmbeddingError(self._message(e)) from e

    def _message(self, e: Exception) -> str:
        where = f"the embedding endpoint {public_url(self.api_base)} (model {self.model_name!r})"
        retried = f"after {self.max_retries} retries" if self.max_retries else "(no retries)"
        if isinstance(e, openai.APITimeoutError):
            return (
                f"No answer from {where} within {self.timeout:g} s {retried}: check that the "
                "server is up, or raise RAG_PACK_EMBED_TIMEOUT."
            )
        if isinstance(e, openai.APIConnectionError | httpx.HTTPError):
            return (
                f"Could not reach {where} {retried} ({_detail(e)}): check RAG_PACK_EMBED_API_BASE "
                "(or OPENAI_BASE_URL) and that the server is running."
            )
        if isinstance(e, openai.APIStatusError):
            return f"{where[0].upper()}{where[1:]} {_status_hint(e, self.embed_batch_size)}"
        return f"Embedding with {where} failed ({_detail(e)})."


def describe_endpoint(model: Any) -> str:
    """``MODEL (OpenAI-compatible, BASE_URL[, N-d])`` for any OpenAI-style embedding object:
    never the key, nor credentials or a query string in the URL.

    Example:
        >>> from types import SimpleNamespace
        >>> describe_endpoint(SimpleNamespace(
        ...     model_name="text-embedding-v3", api_base="https://u:secret@host/v1?key=k"
        ... ))
        'text-embedding-v3 (OpenAI-compatible, https://host/v1)'
    """
    dims = getattr(model, "dimensions", None)
    url = public_url(str(model.api_base))
    return f"{model.model_name} (OpenAI-compatible, {url}{f', {dims}-d' if dims else ''})"


def public_url(url: str) -> str:
    """``url`` without user, password, query or fragment (where keys may hide), for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")


def _unchanged(fn: Any) -> Any:
    return fn


def _detail(e: Exception) -> str:
    """The exception's text on one line, cut to :data:`MAX_DETAIL` characters: for an HTTP error,
    the server's own message when its reply has one."""
    body = getattr(e, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    text = " ".join(str(message or getattr(e, "message", None) or e).split()) or type(e).__name__
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _status_hint(e: openai.APIStatusError, batch_size: int) -> str:
    """What an HTTP error status means for the user, and what to change."""
    status, detail = e.status_code, _detail(e)
    if status in (401, 403):
        return (
            f"refused the API key (HTTP {status}: {detail}): set RAG_PACK_EMBED_API_KEY (or "
            "OPENAI_API_KEY) to a key valid there."
        )
    if status == 404:
        return (
            f"has no such model or route (HTTP 404: {detail}): check the name after 'openai:' "
            "and the base URL (usually ending in /v1)."
        )
    if status in (400, 413, 422):
        return (
            f"refused the request (HTTP {status}: {detail}): if it takes fewer texts per request, "
            f"set RAG_PACK_EMBED_BATCH_SIZE below {batch_size}; also check the model name and "
            "RAG_PACK_EMBED_DIMENSIONS."
        )
    if status == 429:
        return f"is rate limiting (HTTP 429: {detail}): wait and retry, or raise the quota."
    return f"failed (HTTP {status}: {detail}): try again later, or check the server's logs."


# --------------------------------------------------------------------------- from a spec string


def openai_embedding(
    spec: str,
    *,
    api_base: str | None = None,
    dimensions: int | None = None,
    batch_size: int | None = None,
) -> OpenAICompatibleEmbedding:
    """The model of an ``openai:MODEL`` spec, configured from the arguments and environment.

    Checked before any request: a bad value is a :class:`ConfigurationError` naming the fix.

    Args:
        spec: ``openai:MODEL``.
        api_base: Base URL; default ``RAG_PACK_EMBED_API_BASE``, ``OPENAI_BASE_URL``,
            ``OPENAI_API_BASE``, else OpenAI's.
        dimensions: Output dimension for models that take one; default
            ``RAG_PACK_EMBED_DIMENSIONS``, else not sent.
        batch_size: Texts per request; default ``RAG_PACK_EMBED_BATCH_SIZE``, else 10.

    Raises:
        ConfigurationError: no model after ``openai:``, a base URL that is not http(s), a
            number setting that is not a positive number, or OpenAI's endpoint without a key.
    """
    model = spec[len(OPENAI_PREFIX) :].strip()
    if not model:
        raise ConfigurationError(
            f"Embedding model {spec!r} names no model: write openai:MODEL, e.g. openai:"
            "text-embedding-3-small (in embed_model=, RAG_PACK_EMBED_MODEL or --embed-model)."
        )
    base = _api_base(api_base)
    key = next((os.environ[v] for v in API_KEY_VARS if os.environ.get(v)), None)
    if key is None and base == DEFAULT_API_BASE:
        raise ConfigurationError(
            f"Embedding model {spec!r} on OpenAI needs a key: set RAG_PACK_EMBED_API_KEY or "
            "OPENAI_API_KEY, or RAG_PACK_EMBED_API_BASE to an OpenAI-compatible server's URL."
        )
    dimensions = check_count("dimensions", dimensions, none_ok=True)
    batch_size = check_count("batch_size", batch_size, none_ok=True)
    batch = batch_size or _env_number("RAG_PACK_EMBED_BATCH_SIZE", int) or DEFAULT_BATCH_SIZE
    if batch > MAX_BATCH_SIZE:
        raise ConfigurationError(
            f"Embedding batch size {batch} is over the OpenAI API's {MAX_BATCH_SIZE} texts per "
            "request: lower RAG_PACK_EMBED_BATCH_SIZE (or batch_size=)."
        )
    retries = _env_number("RAG_PACK_EMBED_MAX_RETRIES", int, minimum=0)
    return OpenAICompatibleEmbedding(
        model,
        api_base=base,
        api_key=key or NO_KEY,
        dimensions=dimensions or _env_number("RAG_PACK_EMBED_DIMENSIONS", int),
        embed_batch_size=batch,
        max_retries=DEFAULT_MAX_RETRIES if retries is None else retries,
        timeout=_env_number("RAG_PACK_EMBED_TIMEOUT", float, minimum=0.1) or DEFAULT_TIMEOUT,
    )


def _api_base(explicit: str | None) -> str:
    """The first base URL set (argument, then :data:`API_BASE_VARS`), else OpenAI's."""
    source, value = "api_base", explicit
    if not value:
        source, value = next(
            ((v, os.environ[v]) for v in API_BASE_VARS if os.environ.get(v)),
            ("default", DEFAULT_API_BASE),
        )
    value = value.strip().rstrip("/")
    if not value.lower().startswith(("http://", "https://")):
        raise ConfigurationError(
            f"{source}={value!r} is not an http(s) URL: give the endpoint's base URL, e.g. "
            "http://127.0.0.1:8000/v1 or https://dashscope.aliyuncs.com/compatible-mode/v1."
        )
    return value


def _env_number(var: str, cast: type, minimum: float = 1) -> Any:
    """``var`` read as ``cast`` (``None`` when unset), or ConfigurationError when it is not a
    number >= ``minimum``."""
    text = os.environ.get(var, "").strip()
    if not text:
        return None
    try:
        value = cast(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        kind = "a whole number" if cast is int else "a number"
        raise ConfigurationError(f"{var} must be {kind} >= {minimum:g}, got {text!r}.")
    return value
