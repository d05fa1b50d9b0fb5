"""CLI for routing: ``rag-pack ask --route`` and ``rag-pack route``.

Sources come from ``--routes FILE`` (JSON, see
:func:`~llama_index_rag_pack.pack.sources.load_sources`) or, without one, from every collection of
the Milvus database, described from a sample of its chunks.
"""

from __future__ import annotations

import argparse
from typing import Any

from llama_index_rag_pack.cli import output as _cli

__all__ = ["ask_routed", "open_routed_pack", "register"]


def open_routed_pack(args: argparse.Namespace, **overrides: Any) -> Any:
    """Open a :class:`RoutedRagPack` over the sources of ``--routes`` or of every collection."""
    from llama_index_rag_pack.components.settings import default_milvus_uri
    from llama_index_rag_pack.pack.routed import RoutedRagPack
    from llama_index_rag_pack.pack.sources import discover_sources, load_sources

    uri = args.uri or default_milvus_uri()
    options: dict[str, Any] = {}
    if getattr(args, "routes", None):
        sources, options = load_sources(args.routes)
    else:
        sources = discover_sources(uri, token=args.token)
    for key in ("selector", "fallback", "threshold", "top_k_routes"):
        value = getattr(args, f"route_{key}", None)
        if value is not None:
            options[key] = value
    options.update(overrides)
    return RoutedRagPack.open_sources(
        sources, uri=uri, token=args.token, llm=args.llm, embed_model=args.embed_model, **options
    )


def _print_selection(selection: Any) -> None:
    if selection.names:
        tag = " (fallback)" if selection.fallback else ""
        _cli.out(f"  route     : {', '.join(selection.names)}{tag}")
        for name, reason in zip(selection.names, selection.reasons, strict=False):
            _cli.out(f"  why       : {name}: {' '.join(reason.split())[:200]}")
    else:
        _cli.out("  route     : none")
        _cli.out(f"  why       : {selection.reply}")
    if selection.scores:
        ranked = sorted(selection.scores.items(), key=lambda kv: -kv[1])
        _cli.out("  scores    : " + ", ".join(f"{n} {s:.3f}" for n, s in ranked))


def ask_routed(args: argparse.Namespace) -> int:
    """``rag-pack ask --route``: choose the source(s), say which and why, then answer from them."""
    from llama_index.core import get_response_synthesizer

    pack = open_routed_pack(args, similarity_top_k=args.top_k)
    llm = pack.llm
    if hasattr(llm, "load"):
        llm.load()
    _cli.print_models(pack)
    retriever = pack.retriever("route")
    selection = retriever.select(args.question)
    _print_selection(selection)
    _cli.out()
    nodes = retriever.retrieve_selected(args.question, selection)
    stream = not args.no_stream
    synthesizer = get_response_synthesizer(
        llm=llm, streaming=stream, callback_manager=pack.callback_manager
    )
    response = synthesizer.synthesize(args.question, nodes)
    if stream and hasattr(response, "response_gen"):
        for delta in response.response_gen:
            _cli.out(delta, end="", flush=True)
        _cli.out()
    else:
        _cli.out(str(response))
    _cli.print_sources(response.source_nodes)
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    """``rag-pack route``: only the routing decision, with every route's score (no LLM for
    semantic)."""
    pack = open_routed_pack(args)
    retriever = pack.retriever("route")
    for question in args.questions:
        _cli.out(f"Q: {question}")
        _print_selection(retriever.select(question))
    return 0


def add_route_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--routes",
        default=None,
        metavar="FILE",
        help="JSON file listing the sources (name, collection, description, utterances); "
        "default: every collection of the database",
    )
    p.add_argument(
        "--route-selector",
        choices=("semantic", "logical"),
        default=None,
        help="semantic (embeddings, default) or logical (the LLM picks)",
    )
    p.add_argument("--route-fallback", default=None, help="source used when no route fits")
    p.add_argument(
        "--route-threshold",
        type=float,
        default=None,
        help="semantic cosine threshold (default 0.2)",
    )
    p.add_argument(
        "--route-top-k",
        dest="route_top_k_routes",
        type=int,
        default=None,
        help="most sources searched per question (default 1)",
    )


def register(subparsers: Any) -> None:
    """Add ``rag-pack route``."""
    p = subparsers.add_parser("route", help="show which source(s) questions are routed to, and why")
    p.add_argument("questions", nargs="+", help="one or more questions")
    add_route_options(p)
    p.set_defaults(func=cmd_route)
