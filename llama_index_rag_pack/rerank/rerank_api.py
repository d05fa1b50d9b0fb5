"""The two ``/rerank`` APIs that reranking servers speak: what an address names, the body sent
and the scores read back.

* ``tei``: Hugging Face Text Embeddings Inference. ``POST /rerank`` with
  ``{"query": q, "texts": [...], "truncate": true}``; the answer is a JSON list
  ``[{"index": i, "score": s}, ...]``.
* ``cohere``: Cohere's rerank API, which vLLM (``/rerank``, ``/v1/rerank``), Jina and Infinity
  also serve. ``POST`` with ``{"model": m, "query": q, "documents": [...], "top_n": n,
  "return_documents": false}`` (``model`` only when the address names one); the answer is
  ``{"results": [{"index": i, "relevance_score": s}, ...], ...}``.

An address is ``[API+]http(s)://HOST:PORT[/PATH][#MODEL]``: without ``API+`` the API is found
from the server's answers (the shape of the first body it accepts, which is then kept); without
``PATH`` it is ``/rerank``. Every failure is one
:class:`~llama_index_rag_pack.core.errors.RerankError` line naming the address.

Example:
    >>> endpoint = parse_endpoint("cohere+http://127.0.0.1:8000/v1/rerank#BAAI/bge-reranker-base")
    >>> endpoint.url, endpoint.api, endpoint.model
    ('http://127.0.0.1:8000/v1/rerank', 'cohere', 'BAAI/bge-reranker-base')
    >>> request_body("tei", "capital?", ["Paris", "Rome"], None)
    {'query': 'capital?', 'texts': ['Paris', 'Rome'], 'truncate': True}
    >>> read_scores(b'[{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}]', 2, "here")
    ('tei', [0.1, 0.9])
"""  # noqa: E501  (doctest lines)

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from llama_index_rag_pack.core.errors import ConfigurationError, RerankError

__all__ = [
    "API_PREFIXES",
    "COHERE",
    "TEI",
    "RerankEndpoint",
    "apis_to_try",
    "error_message",
    "parse_endpoint",
    "read_scores",
    "request_body",
]

TEI = "tei"
COHERE = "cohere"
#: The ``API+`` prefixes an address may start with, and the API each names.
API_PREFIXES = {"tei": TEI, "cohere": COHERE, "jina": COHERE, "vllm": COHERE, "infinity": COHERE}
DEFAULT_PATH = "/rerank"
#: Statuses with which a server refuses a body of the other API (a missing field).
WRONG_SHAPE_STATUSES = frozenset({400, 422})


@dataclass(frozen=True)
class RerankEndpoint:
    """Where a rerank request goes: the full URL, the API (``None``: found from the answers)
    and the model to name (Cohere-style APIs only)."""

    url: str
    api: str | None = None
    model: str | None = None

    def describe(self) -> str:
        """One line for ``pack.describe()`` and the CLI."""
        api = self.api or "API found from the answers"
        return f"{self.url} ({api}{', model ' + self.model if self.model else ''})"


def parse_endpoint(spec: str) -> RerankEndpoint:
    """The endpoint an address names (``[API+]http(s)://HOST:PORT[/PATH][#MODEL]``).

    Raises:
        ConfigurationError: not an http(s) URL with a host, or an unknown ``API+`` prefix.
    """
    text = spec.strip()
    api = None
    head, sep, rest = text.partition("+")
    if sep and "://" in rest and "://" not in head:
        if head.lower() not in API_PREFIXES:
            raise ConfigurationError(
                f"Unknown rerank API {head!r} in {spec!r}: use one of "
                f"{', '.join(sorted(API_PREFIXES))}, or no prefix to find it from the answers."
            )
        api, text = API_PREFIXES[head.lower()], rest
    try:
        parts = urlsplit(text)
        parts.hostname  # noqa: B018  (raises on a malformed IPv6 host)
    except ValueError as e:
        raise ConfigurationError(f"rerank={spec!r} is not a valid URL ({e}).") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"rerank={spec!r} is neither an http(s) URL of a rerank endpoint "
            "(http://HOST:PORT[/PATH][#MODEL]) nor local:DIR (a cross-encoder's directory)."
        )
    try:
        parts.port  # noqa: B018  (raises on a port out of range)
    except ValueError as e:
        raise ConfigurationError(f"rerank={spec!r}: {e}.") from None
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    return RerankEndpoint(url=url, api=api, model=parts.fragment or None)


def apis_to_try(endpoint: RerankEndpoint) -> tuple[str, ...]:
    """The APIs to try, in order: the one named; else Cohere's first on a versioned path
    (``/v1/rerank``, ``/v2/rerank``), TEI's first on any other."""
    if endpoint.api is not None:
        return (endpoint.api,)
    path = urlsplit(endpoint.url).path.rstrip("/")
    versioned = path.split("/")[-2:-1] in (["v1"], ["v2"])
    return (COHERE, TEI) if versioned else (TEI, COHERE)


def request_body(api: str, query: str, texts: Sequence[str], model: str | None) -> dict[str, Any]:
    """The JSON body of one rerank request in ``api``'s shape."""
    if api == TEI:
        return {"query": query, "texts": list(texts), "truncate": True}
    body: dict[str, Any] = {"model": model} if model else {}
    body.update(
        {"query": query, "documents": list(texts), "top_n": len(texts), "return_documents": False}
    )
    return body


def read_scores(payload: bytes, count: int, where: str) -> tuple[str, list[float]]:
    """The API whose answer ``payload`` is, and one score per document sent (``count``), in the
    order sent.

    Raises:
        RerankError: not JSON, neither answer shape, an index that is not one of the documents
            sent (or given twice), a score that is not a finite number, or documents left
            unscored.
    """
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as e:
        raise RerankError(f"The rerank endpoint {where} answered malformed JSON ({e}).") from None
    if isinstance(data, list):
        api, items, key = TEI, data, "score"
    elif isinstance(data, dict) and isinstance(data.get("results"), list):
        api, items, key = COHERE, data["results"], "relevance_score"
    else:
        raise RerankError(
            f"The rerank endpoint {where} answered neither a list of {{index, score}} (TEI) nor "
            '{"results": [{index, relevance_score}]} (Cohere, Jina, vLLM).'
        )
    scores: list[float | None] = [None] * count
    for item in items:
        index, score = _entry(item, key, count, where)
        if scores[index] is not None:
            raise RerankError(f"The rerank endpoint {where} scored document {index} twice.")
        scores[index] = score
    missing = [i for i, s in enumerate(scores) if s is None]
    if missing:
        raise RerankError(
            f"The rerank endpoint {where} scored {count - len(missing)} of the {count} "
            f"documents sent (none for index {missing[0]})."
        )
    return api, [float(s) for s in scores if s is not None]


def _entry(item: Any, key: str, count: int, where: str) -> tuple[int, float]:
    """``(index, score)`` of one result, checked."""
    index = item.get("index") if isinstance(item, dict) else None
    score = item.get(key) if isinstance(item, dict) else None
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise RerankError(
            f"The rerank endpoint {where} answered index {index!r}, not one of the {count} "
            f"documents sent (0 to {count - 1})."
        )
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise RerankError(
            f"The rerank endpoint {where} answered {key} {score!r} for document {index}: "
            "not a finite number."
        )
    return index, float(score)


def error_message(payload: bytes, limit: int = 300) -> str:
    """The server's own message in an error body (OpenAI/vLLM ``{"error": {"message"}}``, TEI
    ``{"error": ...}``, FastAPI ``{"detail": ...}``, or the text), on one line."""
    text = payload.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        found = data.get("error", data.get("message", data.get("detail", text)))
        if isinstance(found, dict):
            found = found.get("message", found)
        text = found if isinstance(found, str) else json.dumps(found)
    line = " ".join(text.split()) or "(no message)"
    return line if len(line) <= limit else line[: limit - 1] + "…"
