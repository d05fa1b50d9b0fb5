"""``rag-pack serve http`` and ``rag-pack serve mcp``: the collection behind an OpenAI-compatible
API with a web page and MCP at ``/mcp``, or behind MCP over stdio (see ``docs/serve.md``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import threading
from typing import Any

from llama_index_rag_pack.cli import output as _cli
from llama_index_rag_pack.cli.options import add_answer_style_option, add_rerank_options
from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["register"]

logger = logging.getLogger(__name__)


def _service(args: argparse.Namespace) -> Any:
    """The served pack, opened lazily (``--max-concurrent`` answers at once)."""
    try:
        from llama_index_rag_pack.serve.keys import KeyRing
        from llama_index_rag_pack.serve.service import PackService
    except ImportError as e:  # starlette, uvicorn or mcp missing
        raise ConfigurationError(
            f"rag-pack serve needs the serve extra ({e.name} is missing): "
            "pip install 'llama-index-rag-pack[serve]'."
        ) from None

    kwargs = _cli.pack_kwargs(args)
    _serve_threads()

    def open_pack() -> Any:
        from llama_index_rag_pack.pack.rag_pack import RagPack

        return RagPack.open(**kwargs)

    keys = KeyRing.gather(
        getattr(args, "api_keys", None) or (), files=getattr(args, "api_key_files", None) or ()
    )
    return PackService(
        open_pack,
        keys=keys,
        answer_style=args.answer_style,
        max_concurrent=args.max_concurrent,
    )


def _serve_threads() -> None:
    """A server is its machine's main work: unless ``RAG_PACK_LLM_THREADS`` says otherwise, the
    local LLM gets every core this process may use, not the cores that happen to be free at the
    moment it loads (a moment of load at start would halve it for the server's whole life)."""
    from llama_index_rag_pack.models.local_llm_engine import usable_cores

    cores = usable_cores()
    os.environ.setdefault("RAG_PACK_LLM_THREADS", str(cores))


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (one line of error when it cannot be)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, OverflowError) as e:
        raise ConfigurationError(f"Cannot listen on {host}:{port}: {e}.") from None
    return sock


def cmd_serve_http(args: argparse.Namespace) -> int:
    service = _service(args)
    import uvicorn

    from llama_index_rag_pack.serve.app import create_app, is_loopback

    if args.max_body_bytes < 1024:
        raise ConfigurationError("--max-body-bytes must be at least 1024.")
    sock = _listen(args.host, args.port)
    app = create_app(
        service, max_body_bytes=args.max_body_bytes, mcp=not args.no_mcp, host=args.host
    )
    if not is_loopback(args.host):
        _cli.err(
            f"warning: listening on {args.host}, beyond this machine: anyone who can reach it "
            "can ask" + ("" if service.keys.tenants else ", and no --api-key is set") + "."
        )
    host, port = sock.getsockname()[:2]
    base = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    _cli.out(
        f"rag-pack serve: {base}/ (page), {base}/v1 (OpenAI API)"
        + ("" if args.no_mcp else f", {base}/mcp (MCP)")
        + f"; {len(service.keys.tenants)} API keys",
        flush=True,
    )
    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=5, access_log=args.verbose
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down gracefully, then passed Ctrl-C on
        _cli.err("rag-pack serve: stopped")
    return 0


def cmd_serve_mcp(args: argparse.Namespace) -> int:
    service = _service(args)
    import anyio

    from llama_index_rag_pack.serve.mcp_tools import build_mcp_server

    server = build_mcp_server(service, stdio_tenant=args.tenant)
    threading.Thread(target=service.warm, name="rag-pack-warm", daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):  # the client closed the session
        anyio.run(server.run_stdio_async)
    return 0


def _add_common(p: argparse.ArgumentParser) -> None:
    add_answer_style_option(p)
    add_rerank_options(p)
    p.add_argument(
        "--max-concurrent",
        type=int,
        default=8,
        metavar="N",
        help="answers and searches run at once; later requests wait (default 8)",
    )


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the collection: an OpenAI-compatible API, MCP and a web page",
        description="Serve the collection (--uri, --collection) over HTTP (`serve http`: "
        "OpenAI-compatible /v1/chat/completions and /v1/retrieve, MCP at /mcp, a web page at /) "
        "or over MCP stdio (`serve mcp`). See docs/serve.md.",
    )
    modes = p.add_subparsers(dest="transport", required=True)
    http = modes.add_parser("http", help="HTTP: the OpenAI API, MCP at /mcp and the web page")
    http.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    http.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    http.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        metavar="KEY[=TENANT]",
        help="accept this key (repeatable); =TENANT scopes its searches to a tenant, =* to all. "
        "Keys also come from --api-key-file and $RAG_PACK_API_KEYS. With none, anyone may ask",
    )
    http.add_argument(
        "--api-key-file",
        dest="api_key_files",
        action="append",
        metavar="PATH",
        help="a file of KEY[=TENANT] lines (# comments), repeatable",
    )
    http.add_argument(
        "--max-body-bytes",
        type=int,
        default=1_000_000,
        metavar="N",
        help="largest request body read, in bytes (default 1000000; larger: 413)",
    )
    http.add_argument("--no-mcp", action="store_true", help="do not serve MCP at /mcp")
    _add_common(http)
    http.set_defaults(func=cmd_serve_http)
    mcp = modes.add_parser("mcp", help="MCP over stdio (tools search and ask)")
    mcp.add_argument(
        "--tenant", default=None, help="the tenant searched, on a collection with tenants (* all)"
    )
    _add_common(mcp)
    mcp.set_defaults(func=cmd_serve_mcp, api_keys=None, api_key_files=None)
