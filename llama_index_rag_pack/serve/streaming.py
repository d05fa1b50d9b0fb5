"""Work that stops when its client leaves: a request's answer is cancelled as soon as the
connection closes (the local LLM stops at its next token), and a streamed answer is an ASGI
response that sends its status only once its first event is ready, so a failure before the
first token is still a plain HTTP error (400, 503) rather than a broken stream."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from llama_index_rag_pack.serve.api_errors import ApiError, api_error_from

__all__ = ["ClientGone", "EventStream", "error_response", "until_disconnected"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


def error_response(error: ApiError) -> JSONResponse:
    """``error`` as an OpenAI-style JSON response."""
    return JSONResponse(error.body(), status_code=error.status)


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnected(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """``await work()``, cancelled when the client disconnects first (the request's body must
    have been read: the next message is then the disconnect).

    Raises:
        ClientGone: the client left; the work was cancelled.
    """
    outcome: list[tuple[bool, Any]] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            await _wait_for_disconnect(receive)
            group.cancel_scope.cancel()

        async def run() -> None:
            try:
                outcome.append((True, await work()))
            except Exception as e:  # raised below, outside the task group
                outcome.append((False, e))
            group.cancel_scope.cancel()

        group.start_soon(watch)
        group.start_soon(run)
    if not outcome:
        logger.info("client disconnected: its request was cancelled")
        raise ClientGone()
    done, value = outcome[0]
    if not done:
        raise value
    return value


def _event(data: Any) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class EventStream(Response):
    """Server-sent events from ``events`` (each a JSON object), ending with ``data: [DONE]``.

    The status is sent with the first event: an error before it is answered as a JSON error
    with its own status; an error after it is sent as a last ``{"error": ...}`` event (which the
    ``openai`` client raises). When the client disconnects, ``events`` is cancelled at once,
    whatever it is waiting for.
    """

    def __init__(self, events: AsyncIterator[dict[str, Any]]) -> None:
        super().__init__(status_code=200)
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                await _wait_for_disconnect(receive)
                logger.info("client disconnected: its stream was cancelled")
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                await self._stream(send)
            except OSError:  # the client is gone: nobody to tell
                logger.info("client disconnected while its stream was sent")
            finally:
                group.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self.events.aclose()  # type: ignore[attr-defined]

    async def _stream(self, send: Send) -> None:
        started = False
        events = self.events.__aiter__()
        while True:
            try:
                event = await events.__anext__()
            except StopAsyncIteration:
                break
            except Exception as e:  # an error answer, never a dead connection without one
                await _fail(send, api_error_from(e), started)
                return
            if not started:
                await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                started = True
            await send({"type": "http.response.body", "body": _event(event), "more_body": True})
        if not started:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def _fail(send: Send, error: ApiError, started: bool) -> None:
    if not started:
        await error_response(error)({"type": "http"}, _no_receive, send)
        return
    await send({"type": "http.response.body", "body": _event(error.body()), "more_body": False})


async def _no_receive() -> dict[str, Any]:  # a JSONResponse never reads
    return {"type": "http.disconnect"}
