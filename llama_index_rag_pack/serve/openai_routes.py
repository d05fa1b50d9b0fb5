"""The HTTP endpoints: ``/healthz``, and the OpenAI-compatible ``/v1/models``,
``/v1/chat/completions`` (streamed or not) and ``/v1/retrieve``.

A chat completion answers the last user message through the pack's cited chat engine, the
earlier user and assistant messages being the conversation; ``model`` picks the retrieval mode.
Its answer carries the pack's numbered citations, and the response a ``sources`` field (also the
last event of a stream): every passage the LLM was shown, cited or not. ``usage`` counts the
tokens of every LLM call made for the answer (condensing, HyDE, query variants, judge calls and
the answer itself); a stream asked with ``stream_options: {"include_usage": true}`` carries it
on its last chunk, as OpenAI's API does.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llama_index_rag_pack.serve.api_errors import ApiError, api_error_from
from llama_index_rag_pack.serve.keys import AccessDenied, bearer_token
from llama_index_rag_pack.serve.passages import answer_sources, passage_json, usage_json
from llama_index_rag_pack.serve.request_bodies import ChatBody, read_json, search_args
from llama_index_rag_pack.serve.service import ChatRequest, PackService
from llama_index_rag_pack.serve.streaming import (
    ClientGone,
    EventStream,
    error_response,
    until_disconnected,
)

__all__ = ["Endpoints", "access_error"]

Handler = Callable[[Request], Awaitable[Response]]


def access_error(denied: AccessDenied) -> JSONResponse:
    """A refused key as an OpenAI-style 401 or 403."""
    kind = "authentication_error" if denied.status == 401 else "permission_error"
    response = error_response(ApiError(denied.status, denied.message, type=kind, code=denied.code))
    if denied.status == 401:
        response.headers["www-authenticate"] = "Bearer"
    return response


def _guarded(handler: Handler) -> Handler:
    """``handler`` whose every failure is an OpenAI-style error response."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except ClientGone:
            return Response(status_code=499)  # nobody reads it
        except AccessDenied as e:
            return access_error(e)
        except Exception as e:
            return error_response(api_error_from(e))

    return run


class Endpoints:
    """The endpoints over one :class:`PackService`."""

    def __init__(self, service: PackService, *, max_body_bytes: int) -> None:
        self.service = service
        self.max_body_bytes = max_body_bytes
        self.created = int(time.time())
        self.healthz = self._healthz
        self.models = _guarded(self._models)
        self.model = _guarded(self._model)
        self.retrieve = _guarded(self._retrieve)
        self.chat_completions = _guarded(self._chat_completions)

    def _token(self, request: Request) -> str | None:
        """The request's API key, checked against the keys (401s come before anything else)."""
        token = bearer_token(request.headers.get("authorization"))
        if self.service.keys.tenants:
            self.service.keys.tenant_of(token, has_tenants=False)
        return token

    async def _body(self, request: Request) -> dict[str, Any]:
        return await read_json(request.stream(), self.max_body_bytes)

    async def _healthz(self, request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "ready": self.service.ready, "keys": bool(self.service.keys.tenants)}
        )

    async def _models(self, request: Request) -> Response:
        self._token(request)
        modes = await self.service.modes()
        return JSONResponse({"object": "list", "data": [self._model_json(m) for m in modes]})

    async def _model(self, request: Request) -> Response:
        self._token(request)
        mode = await self.service.check_mode(request.path_params["model"])
        return JSONResponse(self._model_json(mode))

    def _model_json(self, mode: str) -> dict[str, Any]:
        return {"id": mode, "object": "model", "created": self.created, "owned_by": "rag-pack"}

    async def _retrieve(self, request: Request) -> Response:
        token = self._token(request)
        args = search_args(await self._body(request))
        await self.service.pack()
        tenant = self.service.tenant_for(token)
        mode = await self.service.check_mode(args["mode"])
        nodes = await until_disconnected(
            request.receive,
            lambda: self.service.retrieve(
                args["query"],
                mode=mode,
                top_k=args["top_k"],
                filters=args["filters"],
                tenant=tenant,
            ),
        )
        data = [passage_json(item, position) for position, item in enumerate(nodes, 1)]
        return JSONResponse({"object": "list", "model": mode, "query": args["query"], "data": data})

    async def _chat_completions(self, request: Request) -> Response:
        token = self._token(request)
        body = ChatBody(await self._body(request))
        await self.service.pack()
        chat = ChatRequest(
            question=body.question,
            history=body.history,
            mode=await self.service.check_mode(body.model),
            filters=body.filters,
            tenant=self.service.tenant_for(token),
            citation_style=body.citation_style,
        )
        reply = _Reply(chat.mode, include_usage=body.stream and body.include_usage)
        if body.stream:
            return EventStream(self._events(chat, reply))
        response = await until_disconnected(request.receive, lambda: self.service.chat(chat))
        return JSONResponse(reply.completion(response))

    async def _events(self, chat: ChatRequest, reply: _Reply) -> AsyncIterator[dict[str, Any]]:
        async with self.service.slot():
            engine = await self.service.chat_engine(chat)
            response = await engine.astream_chat(chat.question, chat_history=list(chat.history))
            deltas = response.async_response_gen()
            first = await anext(deltas, "")  # a failure here is still a plain 503
            yield reply.chunk({"role": "assistant", "content": first})
            async for delta in deltas:
                yield reply.chunk({"content": delta})
            yield reply.chunk({}, finish_reason="stop")
            yield reply.sources(response)


class _Reply:
    """The OpenAI objects of one chat completion (one id and creation time)."""

    def __init__(self, mode: str, *, include_usage: bool = False) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.mode = mode
        self.include_usage = include_usage

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.mode}

    def completion(self, response: Any) -> dict[str, Any]:
        message = {"role": "assistant", "content": str(response.response or "")}
        return {
            **self._head("chat.completion"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            ],
            "usage": usage_json(response),
            "sources": answer_sources(response),
            "condensed_question": (response.metadata or {}).get("condensed_question"),
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        if self.include_usage:  # as OpenAI: null on every chunk but the last
            out["usage"] = None
        return out

    def sources(self, response: Any) -> dict[str, Any]:
        """The stream's last chunk: no choices, the sources (and ``usage`` when asked)."""
        out = {
            **self._head("chat.completion.chunk"),
            "choices": [],
            "sources": answer_sources(response),
            "condensed_question": (response.metadata or {}).get("condensed_question"),
        }
        if self.include_usage:
            out["usage"] = usage_json(response)
        return out
