"""The ASGI application of ``rag-pack serve http``: the OpenAI-compatible endpoints, the MCP
server at ``/mcp``, and the web page at ``/``, over one :class:`PackService`.

Run it with uvicorn (``rag-pack serve http`` does), or mount it in your own ASGI server::

    from llama_index_rag_pack.serve import PackService, create_app
    app = create_app(PackService(lambda: RagPack.open(uri="./rag_pack_data/milvus.db")))
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from llama_index_rag_pack.serve.api_errors import ApiError
from llama_index_rag_pack.serve.keys import AccessDenied, bearer_token
from llama_index_rag_pack.serve.openai_routes import Endpoints, access_error
from llama_index_rag_pack.serve.request_bodies import DEFAULT_MAX_BODY_BYTES
from llama_index_rag_pack.serve.service import PackService
from llama_index_rag_pack.serve.streaming import error_response

__all__ = ["LOOPBACK_HOSTS", "STATIC_DIR", "create_app", "is_loopback"]

logger = logging.getLogger(__name__)

#: The web page's files (no build step, nothing loaded from elsewhere).
STATIC_DIR = Path(__file__).parent / "static"


class _KeyGuard:
    """An ASGI app that lets only requests with a valid key through to ``app`` (when keys are
    set); the tenant is checked per tool call."""

    def __init__(self, app: ASGIApp, service: PackService) -> None:
        self.app, self.service = app, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.service.keys.tenants:
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            try:
                self.service.keys.tenant_of(
                    bearer_token(headers.get("authorization")), has_tenants=False
                )
            except AccessDenied as e:
                await access_error(e)(scope, receive, send)
                return
        await self.app(scope, receive, send)


#: The page runs only its own files: no inline script, no other origin, not framed.
PAGE_HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
#: Host headers accepted on a loopback address (a page elsewhere cannot rebind a name to it).
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]


async def _page(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's loopback."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    message = {404: "No such endpoint.", 405: "Method not allowed here."}.get(status, "Error.")
    return error_response(ApiError(status, f"{message} ({request.method} {request.url.path})"))


def _mcp_route(service: PackService, host: str, max_body_bytes: int) -> tuple[Route, Any]:
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

    from llama_index_rag_pack.serve.mcp_tools import build_mcp_server

    server = build_mcp_server(service)
    server.streamable_http_app(  # makes the session manager, for this host
        streamable_http_path="/mcp",
        stateless_http=True,
        max_request_body_size=max_body_bytes,
        host=host,
    )
    handler = _KeyGuard(StreamableHTTPASGIApp(server.session_manager), service)
    return Route("/mcp", endpoint=handler), server


def create_app(
    service: PackService,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    mcp: bool = True,
    host: str = "127.0.0.1",
    warm: bool = True,
) -> Starlette:
    """The server's ASGI app.

    Args:
        service: The pack it serves.
        max_body_bytes: The largest request body read (a larger one is a 413).
        mcp: Serve the MCP tools at ``/mcp`` (streamable HTTP).
        host: The host it is bound to: on loopback, requests whose ``Host`` is not a loopback
            name are refused with 400, and ``/mcp`` refuses an ``Origin`` that is not loopback
            (DNS rebinding).
        warm: Open the pack and load the models in a background thread at start (``/healthz``
            answers at once, ``ready`` turns true when done).
    """
    endpoints = Endpoints(service, max_body_bytes=max_body_bytes)
    routes: list[Route | Mount] = [
        Route("/", _page),
        Route("/healthz", endpoints.healthz),
        Route("/v1/models", endpoints.models),
        Route("/v1/models/{model}", endpoints.model),
        Route("/v1/chat/completions", endpoints.chat_completions, methods=["POST"]),
        Route("/v1/retrieve", endpoints.retrieve, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR)),
    ]
    mcp_server = None
    if mcp:
        route, mcp_server = _mcp_route(service, host, max_body_bytes)
        routes.append(route)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if mcp_server is not None:
                await stack.enter_async_context(mcp_server.session_manager.run())
            if warm:
                threading.Thread(target=service.warm, name="rag-pack-warm", daemon=True).start()
            yield

    # on loopback, only loopback names: DNS rebinding cannot turn a web page into a client
    middleware = (
        [Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)]
        if is_loopback(host)
        else []
    )
    return Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={404: _http_error, 405: _http_error},
    )
