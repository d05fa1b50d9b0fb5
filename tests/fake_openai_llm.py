"""A fake OpenAI-compatible LLM server on 127.0.0.1 for the usage tests: ``http.server`` in a
thread, speaking the request and response bodies of ``/v1/chat/completions`` and
``/v1/completions``, ``usage`` included.

* A reply is :func:`model_reply` of the prompt: what a model answers to each of the pack's
  prompts (query variants, a HyDE passage, a rewrite, a condensed question, a self-query plan, a
  judge's verdict, SQL, a cited answer), as text a real model writes.
* ``usage`` is the server's own count, unlike any tokenizer the pack has: ``prompt_tokens`` is
  the prompt's words plus 3 per message, ``completion_tokens`` the reply's words plus 1.
* A stream (``"stream": true``) sends the reply word by word, then a chunk with the finish
  reason, then, when asked with ``stream_options: {"include_usage": true}``, a last chunk with
  no choices and the ``usage`` (each earlier chunk then says ``"usage": null``), as OpenAI does.
  ``report_stream_usage = False`` plays a server that ignores ``stream_options``.
* Every call is recorded in ``calls`` as ``(prompt_tokens, completion_tokens)``: the figures
  the pack must add up.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-gpt"


def model_reply(prompt: str) -> str:
    """What a model replies to each of the pack's prompts."""
    if "search queries for a document search engine" in prompt:
        return "Milvus vector database origin\nWho develops the Milvus database"
    if "Rewrite the user's message below as one short search query" in prompt:
        return "Milvus vector database creator"
    if "Write a short passage" in prompt:
        return "Milvus is an open-source vector database created by Zilliz and released in 2019."
    if "Standalone question:" in prompt:
        return "When was Milvus first released?"
    if "a search query and a metadata filter" in prompt:
        return '{"query": "Milvus vector database", "filter": []}'
    if "You judge whether a passage helps" in prompt:
        return '{"score": 2}'
    if "SELECT statement" in prompt:
        return "```sql\nSELECT name, year FROM releases ORDER BY year\n```"
    if "from the query result" in prompt:
        return "Milvus 1.0 came out in 2021 [1](id=2)."
    return (
        "Milvus is a vector database built by Zilliz [1](id=1). It was released in 2019 [2](id=2)."
    )


def _prompt_of(body: dict[str, Any]) -> tuple[str, int]:
    if "messages" in body:
        messages = body["messages"]
        text = "\n".join(str(m.get("content") or "") for m in messages)
        return text, len(messages)
    return str(body.get("prompt") or ""), 1


class FakeOpenAIServer:
    """The server; ``url`` is its ``/v1`` base, ``stop()`` ends it."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.bodies: list[dict[str, Any]] = []
        self.report_stream_usage = True
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"owner": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def clear(self) -> None:
        with self.lock:
            self.calls.clear()
            self.bodies.clear()

    def spent(self) -> dict[str, int]:
        """What the recorded calls reported, summed: the ``usage`` the pack must give."""
        with self.lock:
            prompt = sum(p for p, _ in self.calls)
            completion = sum(c for _, c in self.calls)
            return {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "llm_calls": len(self.calls),
            }

    def answer(self, body: dict[str, Any]) -> tuple[str, dict[str, int]]:
        prompt, messages = _prompt_of(body)
        reply = model_reply(prompt)
        usage = {
            "prompt_tokens": len(prompt.split()) + 3 * messages,
            "completion_tokens": len(reply.split()) + 1,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        with self.lock:
            self.calls.append((usage["prompt_tokens"], usage["completion_tokens"]))
            self.bodies.append(body)
        return reply, usage


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAIServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send_json(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        chat = self.path.endswith("/chat/completions")
        if not chat and not self.path.endswith("/completions"):
            self._send_json(404, {"error": {"message": "Not found", "type": "invalid_request"}})
            return
        reply, usage = self.owner.answer(body)
        head = {"id": f"cmpl-{len(self.owner.calls)}", "created": int(time.time()), "model": MODEL}
        if body.get("stream"):
            self._stream(body, head, reply, usage, chat)
            return
        if chat:
            message = {"role": "assistant", "content": reply}
            choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": reply, "finish_reason": "stop", "logprobs": None}
            kind = "text_completion"
        self._send_json(200, {**head, "object": kind, "choices": [choice], "usage": usage})

    def _stream(
        self, body: dict[str, Any], head: dict[str, Any], reply: str, usage: Any, chat: bool
    ) -> None:
        asked = bool((body.get("stream_options") or {}).get("include_usage"))
        with_usage = asked and self.owner.report_stream_usage
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()

        def choice(piece: str | None, finish: str | None = None) -> dict[str, Any]:
            if not chat:
                return {"index": 0, "text": piece or "", "finish_reason": finish}
            delta = {"content": piece} if piece is not None else {}
            return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}

        def send(data: Any) -> None:
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())

        extra = {"usage": None} if with_usage else {}
        words = reply.split(" ")
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            send({**head, "object": kind, "choices": [choice(piece)], **extra})
        send({**head, "object": kind, "choices": [choice(None, "stop")], **extra})
        if with_usage:
            send({**head, "object": kind, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def pack_llm(server: FakeOpenAIServer) -> Any:
    """The LLM the pack builds for an OpenAI-compatible server (``RAG_PACK_LLM_API_BASE``),
    pointed at ``server``; a new HTTP client per call, as tests run several event loops."""
    import pytest

    from llama_index_rag_pack.models.settings import resolve_llm

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAG_PACK_LLM_API_BASE", server.url)
        mp.setenv("RAG_PACK_LLM_MODEL", MODEL)
        mp.setenv("RAG_PACK_LLM_MAX_RETRIES", "0")
        llm = resolve_llm("openai")
    llm.reuse_client = False
    return llm


@contextlib.contextmanager
def fake_openai_server() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer()
    try:
        yield server
    finally:
        server.stop()
