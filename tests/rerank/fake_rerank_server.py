"""A fake rerank server on 127.0.0.1 for the rerank tests: ``http.server`` in a thread, speaking
the request and response bodies of the real APIs, and failing on demand.

* ``/tei/rerank``: Text Embeddings Inference. The body must be exactly ``query``, ``texts`` and
  optional ``truncate``/``raw_scores``/``return_text`` (else 422 as TEI's JSON extractor
  answers); the answer is a list ``[{"index", "score"}]`` sorted by score.
* ``/v1/rerank`` and ``/rerank``: Cohere's API as vLLM, Jina and Infinity serve it: ``query``,
  ``documents`` and optional ``model``/``top_n``/``return_documents`` (else 400 with vLLM's
  error body); an unknown ``model`` is a 404; the answer is ``{"id", "results": [{"index",
  "relevance_score"}], "usage"}`` sorted by score, cut to ``top_n``.
* ``/fail/500``, ``/fail/slow``, ``/fail/huge``, ``/fail/malformed``, ``/fail/out_of_range``,
  ``/fail/duplicate``, ``/fail/partial``: the failures their names say.

Scores come from :func:`fake_score`, unrelated to any first-stage order. Every request is
recorded (path, body, headers) in ``server.requests``. Each test module makes the fixture
``rerank_server`` (one server per module, its records cleared before each test) from
:func:`serve_module` and :func:`cleared`: a ``conftest.py`` here would clash with
``tests/serve``'s under ``--doctest-modules``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "BAAI/bge-reranker-base"
TEI_KEYS = {"query", "texts", "truncate", "raw_scores", "return_text"}
COHERE_KEYS = {"model", "query", "documents", "top_n", "return_documents"}


def fake_score(query: str, text: str) -> float:
    """A deterministic relevance score: the query's words the text holds, then a tie-break
    from the text's characters."""
    words = {w.strip("?.,").lower() for w in query.split()}
    hits = sum(1 for w in text.lower().replace(".", " ").split() if w in words)
    return hits + (sum(map(ord, text)) % 97) / 1000


class FakeRerankServer:
    """The server; ``url`` is its base address, ``stop()`` ends it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.slow_seconds = 3.0
        handler = type("Handler", (_Handler,), {"owner": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: FakeRerankServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.owner.requests.append(
            {"path": self.path, "body": body, "headers": dict(self.headers.items())}
        )
        if self.path.startswith("/fail/"):
            return self._fail(self.path[len("/fail/") :], body)
        if self.path == "/tei/rerank":
            return self._tei(body)
        if self.path in ("/v1/rerank", "/rerank"):
            return self._cohere(body)
        self._send(404, b'{"detail": "Not Found"}')

    def _tei(self, body: Any) -> None:
        if not isinstance(body, dict) or not {"query", "texts"} <= set(body) <= TEI_KEYS:
            return self._send(
                422,
                b'{"error": "Failed to deserialize the JSON body into the target type: '
                b'missing field `texts`", "error_type": "Validation"}',
            )
        ranks = [
            {"index": i, "score": fake_score(body["query"], t)} for i, t in enumerate(body["texts"])
        ]
        ranks.sort(key=lambda r: -r["score"])
        self._json(200, ranks)

    def _cohere(self, body: Any) -> None:
        if not isinstance(body, dict) or not {"query", "documents"} <= set(body) <= COHERE_KEYS:
            return self._json(
                400,
                {"error": {"message": "1 validation error: documents Field required", "code": 400}},
            )
        if body.get("model", MODEL) != MODEL:
            message = f"The model `{body['model']}` does not exist."
            return self._json(404, {"error": {"message": message, "type": "NotFoundError"}})
        docs = body["documents"]
        query = body["query"]
        results = [
            {"index": i, "relevance_score": fake_score(query, d)} for i, d in enumerate(docs)
        ]
        results.sort(key=lambda r: -r["relevance_score"])
        top_n = body.get("top_n") or len(docs)
        answer = {"id": "rerank-1", "results": results[:top_n], "usage": {"total_tokens": 1}}
        self._json(200, answer)

    def _fail(self, kind: str, body: Any) -> None:
        count = len((body or {}).get("texts") or (body or {}).get("documents") or [])
        if kind == "500":
            return self._json(500, {"error": {"message": "CUDA out of memory", "code": 500}})
        if kind == "slow":
            time.sleep(self.owner.slow_seconds)
            return self._json(200, [{"index": i, "score": 0.0} for i in range(count)])
        if kind == "huge":
            return self._send(200, b"[" + b" " * 3_000_000 + b"]")
        if kind == "malformed":
            return self._send(200, b'[{"index": 0, "score": ')
        if kind == "out_of_range":
            return self._json(200, [{"index": i + 1, "score": 1.0} for i in range(count)])
        if kind == "duplicate":
            return self._json(200, [{"index": 0, "score": 1.0} for _ in range(count)])
        if kind == "partial":
            return self._json(200, {"results": [{"index": 0, "relevance_score": 1.0}]})
        self._send(404, b'{"detail": "Not Found"}')

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data).encode())

    def _send(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(payload)


def serve_module() -> Iterator[FakeRerankServer]:
    """The module fixture ``rerank_server_module``: one server for a test module."""
    server = FakeRerankServer()
    yield server
    server.stop()


def cleared(rerank_server_module: FakeRerankServer) -> FakeRerankServer:
    """The fixture ``rerank_server``: the module's server, its records cleared."""
    rerank_server_module.requests.clear()
    return rerank_server_module
