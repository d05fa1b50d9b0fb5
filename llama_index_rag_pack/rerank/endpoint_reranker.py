"""A reranker on a server: Text Embeddings Inference, vLLM, Infinity, Jina or Cohere, through
their ``/rerank`` APIs (:mod:`~llama_index_rag_pack.rerank.rerank_api`), with httpx's sync and
async clients.

Documents go in batches of ``batch_size`` per request (the async path sends a query's batches
concurrently); each request has ``timeout`` seconds to connect and for every read, and its answer
at most ``max_response_bytes``. An API key comes from the environment variable ``api_key_env``
(``RAG_PACK_RERANK_API_KEY`` by default) and is sent as ``Authorization: Bearer``. No httpx error
escapes: each failure is one :class:`~llama_index_rag_pack.core.errors.RerankError` line.

Example:
    >>> reranker = EndpointReranker(endpoint="http://127.0.0.1:8080#BAAI/bge-reranker-base")
    >>> reranker.describe()
    'rerank endpoint http://127.0.0.1:8080/rerank (API found from the answers, model BAAI/bge-reranker-base)'
"""  # noqa: E501  (doctest output is one line)

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import httpx
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_rag_pack.core.errors import RerankError
from llama_index_rag_pack.rerank.rerank_api import (
    WRONG_SHAPE_STATUSES,
    RerankEndpoint,
    apis_to_try,
    error_message,
    parse_endpoint,
    read_scores,
    request_body,
)
from llama_index_rag_pack.rerank.reranker_base import PackReranker

__all__ = ["API_KEY_ENV", "EndpointReranker"]

#: Where the API key comes from by default.
API_KEY_ENV = "RAG_PACK_RERANK_API_KEY"


class EndpointReranker(PackReranker):
    """Reranks with a ``/rerank`` endpoint.

    Args:
        endpoint: ``[API+]http(s)://HOST:PORT[/PATH][#MODEL]``: ``API`` is ``tei`` or
            ``cohere`` (also ``vllm``, ``jina``, ``infinity``), else found from the answers.
        timeout: Seconds to connect, and for each read of the answer.
        api_key_env: The environment variable holding the API key (unset or empty: none sent).
        max_response_bytes: The largest answer read.
        top_n, batch_size, fallback: As :class:`~llama_index_rag_pack.rerank.PackReranker`.
    """

    endpoint: str = Field(description="the rerank endpoint's address")
    timeout: float = Field(default=30.0, gt=0, description="seconds to connect and per read")
    api_key_env: str = Field(default=API_KEY_ENV, description="environment variable of the key")
    max_response_bytes: int = Field(default=4_000_000, gt=0, description="largest answer read")
    _target: RerankEndpoint = PrivateAttr()
    _api: str | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self._target = parse_endpoint(self.endpoint)
        self._api = self._target.api

    @classmethod
    def class_name(cls) -> str:
        return "EndpointReranker"

    def describe(self) -> str:
        return f"rerank endpoint {self._target.describe()}"

    @property
    def api(self) -> str | None:
        """The API in use: named in the address, or found from the first answer."""
        return self._api

    # ------------------------------------------------------------------ scoring
    def _score(self, query: str, texts: Sequence[str]) -> list[float]:
        scores: list[float] = []
        with httpx.Client(timeout=self.timeout) as client:
            for batch in self._batches(texts):
                scores.extend(self._scored_batch(client, query, batch))
        return scores

    async def _ascore(self, query: str, texts: Sequence[str]) -> list[float]:
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            if self._api is None:  # the first batch finds the API the others then use
                first, *rest = self._batches(texts)
                found = [await self._ascored_batch(client, query, first)]
            else:
                rest, found = self._batches(texts), []
            found += await asyncio.gather(*(self._ascored_batch(client, query, b) for b in rest))
        return [s for batch in found for s in batch]

    def _batches(self, texts: Sequence[str]) -> list[list[str]]:
        size = self.batch_size
        return [list(texts[i : i + size]) for i in range(0, len(texts), size)]

    def _scored_batch(self, client: httpx.Client, query: str, batch: list[str]) -> list[float]:
        apis = (self._api,) if self._api else apis_to_try(self._target)
        for attempt, api in enumerate(apis):
            try:
                with client.stream("POST", **self._request(api, query, batch)) as response:
                    payload = b""
                    for chunk in response.iter_bytes():
                        payload = self._grown(payload, chunk)
            except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as e:
                raise self._transport_error(e) from None
            if response.status_code in WRONG_SHAPE_STATUSES and attempt + 1 < len(apis):
                continue  # the other API's body may be the one this server reads
            return self._scores(response.status_code, payload, len(batch))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ascored_batch(
        self, client: httpx.AsyncClient, query: str, batch: list[str]
    ) -> list[float]:
        apis = (self._api,) if self._api else apis_to_try(self._target)
        for attempt, api in enumerate(apis):
            try:
                async with client.stream("POST", **self._request(api, query, batch)) as response:
                    payload = b""
                    async for chunk in response.aiter_bytes():
                        payload = self._grown(payload, chunk)
            except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as e:
                raise self._transport_error(e) from None
            if response.status_code in WRONG_SHAPE_STATUSES and attempt + 1 < len(apis):
                continue
            return self._scores(response.status_code, payload, len(batch))
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ shared parts
    def _request(self, api: str, query: str, batch: list[str]) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        key = os.environ.get(self.api_key_env, "").strip()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = request_body(api, query, batch, self._target.model)
        return {"url": self._target.url, "json": body, "headers": headers}

    def _grown(self, payload: bytes, chunk: bytes) -> bytes:
        if len(payload) + len(chunk) > self.max_response_bytes:
            raise RerankError(
                f"The rerank endpoint {self._target.url} answered more than "
                f"{self.max_response_bytes} bytes; raise max_response_bytes if that is expected."
            )
        return payload + chunk

    def _scores(self, status: int, payload: bytes, count: int) -> list[float]:
        url = self._target.url
        if status >= 400:
            raise RerankError(
                f"The rerank endpoint {url} answered HTTP {status}: {error_message(payload)}"
            )
        api, scores = read_scores(payload, count, url)
        self._api = self._api or api
        return scores

    def _transport_error(self, error: Exception) -> RerankError:
        url = self._target.url
        if isinstance(error, UnicodeError):  # a key or text that cannot be sent as it is
            return RerankError(
                f"The rerank request to {url} cannot be encoded ({type(error).__name__}): check "
                f"${self.api_key_env} holds only ASCII characters."
            )
        if isinstance(error, httpx.TimeoutException):
            return RerankError(
                f"The rerank endpoint {url} did not answer within {self.timeout:g} s "
                "(rerank timeout)."
            )
        if isinstance(error, httpx.ConnectError):
            return RerankError(f"Cannot reach the rerank endpoint {url}: {error or 'refused'}.")
        return RerankError(f"The rerank request to {url} failed: {type(error).__name__}: {error}.")
