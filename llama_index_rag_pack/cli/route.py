"""CLI for routing: ``rag-pack ask --route`` and ``rag-pack route``.

Sources come from ``--routes FILE`` (JSON, see
:func:`~llama_index_rag_pack.pack.sources.load_sources`) or, without one, from every collection of
the Milvus database, described from a sample of its chunks.
"""

from __future__ import annotations

import argparse
from typing import Any

from llama_index_rag_pack.cli import checks
from llama_index_rag_pack.cli import output as _cli

__all__ = ["answer_routed", "no_route_message", "open_routed_pack", "register"]


def open_routed_pack(args: argparse.Namespace, **overrides: Any) -> Any:
    """Open a :class:`RoutedRagPack` over the sources of ``--routes`` or of every collection."""
    from llama_index_rag_pack.models.settings import default_milvus_uri
    from llama_index_rag_pack.pack.routed import RoutedRagPack
    from llama_index_rag_pack.pack.sources import discover_sources, load_sources

    uri = args.uri or default_milvus_uri()
    options: dict[str, Any] = {"llm": args.llm, "embed_model": args.embed_model}
    if getattr(args, "routes", None):
        sources, from_file = load_sources(args.routes)
        options.update(from_file)
    else:
        sources = discover_sources(uri, token=args.token)
    for key in ("selector", "fallback", "threshold", "top_k_routes"):
        value = getattr(args, f"route_{key}", None)
        if value is not None:
            options[key] = value
    options.update(overrides)
    pack = RoutedRagPack.open_sources(sources, uri=uri, token=args.token, **options)
    if getattr(args, "router", None):
        pack.load_router(args.router)
    return pack


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


def no_route_message(pack: Any, selection: Any) -> str:
    """One line for a question no route fits: the closest route and its score (semantic), or the
    LLM's reply (logical), and what to do."""
    if selection.scores:
        name, score = max(selection.scores.items(), key=lambda kv: kv[1])
        limit = (getattr(pack.selector, "thresholds", None) or {}).get(name)
        below = f" < threshold {limit:.3f}" if limit is not None else ""
        closest = f"the closest route is {name!r} with score {score:.3f}{below}"
    else:
        closest = "the LLM chose none of the routes"
    return (
        f"No route fits this question: {closest}. Pass --route-fallback NAME to answer from a "
        "default source anyway, or lower --route-threshold."
    )


class _SelectionShown:
    """The routed pack, answering from the routes of a selection already shown to the user
    (``make_query_engine`` gives the same cited engine as every other mode)."""

    def __init__(self, pack: Any, selection: Any) -> None:
        self._pack = pack
        self._selection = selection

    def make_query_engine(self, mode: Any = None, **kwargs: Any) -> Any:
        return self._pack.make_selected_query_engine(self._selection, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pack, name)


def answer_routed(session: Any, question: str) -> bool:
    """Choose the source(s), say which and why, then answer from them with the cited engine
    (same ``--format`` and reference list as every mode). False when no route fits (and no
    ``--route-fallback`` is set): then a one-line message is printed instead of an answer."""
    pack = session.pack
    selection = pack.retriever("route").select(question)
    _print_selection(selection)
    if not selection.names:
        _cli.out(no_route_message(pack, selection))
        return False
    _cli.out()
    _cli.answer(
        _SelectionShown(pack, selection), question, mode="route", **session.answer_options()
    )
    return True


def cmd_route(args: argparse.Namespace) -> int:
    """``rag-pack route``: only the routing decision, with every route's score (no LLM for
    semantic)."""
    for i, question in enumerate(args.questions, 1):
        checks.check_question(question, i if len(args.questions) > 1 else None)
    checks.check_input(args, routed=True)
    labelled = _labelled_queries(args.fit) if args.fit else None
    pack = open_routed_pack(args)
    if labelled is not None:
        report = pack.selector.fit_thresholds(labelled)
        _cli.out(
            f"fitted thresholds on {report.n_examples} queries: accuracy "
            f"{report.accuracy_before:.3f} -> {report.accuracy_after:.3f}"
        )
        for name, value in report.thresholds.items():
            _cli.out(f"  {name:<20} {value:.3f}")
    if args.save_router:
        _cli.out(f"router saved to {pack.save_router(args.save_router)}")
    retriever = pack.retriever("route")
    for question in args.questions:
        _cli.out(f"Q: {question}")
        _print_selection(retriever.select(question))
    return 0


def _labelled_queries(path: str) -> list[dict[str, Any]]:
    """``--fit FILE``: one JSON object per line with ``query`` and ``route`` (a name, a list of
    names, or null for a question no route should take); read before any model loads."""
    from llama_index_rag_pack.core.errors import ConfigurationError
    from llama_index_rag_pack.core.json_files import parse_json, read_text_file

    missing = f"--fit {path}: cannot read it (no such file)."
    lines = read_text_file(path, what="the --fit labelled queries", missing=missing).split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = parse_json(line, where=f"--fit {path}:{number}", hint="one JSON object per line")
        if isinstance(row, dict) and set(row) == {"_meta"}:
            continue  # a description line
        if not isinstance(row, dict) or "query" not in row or "route" not in row:
            raise ConfigurationError(f'--fit {path}:{number}: needs "query" and "route".')
        rows.append(row)
    if not rows:
        raise ConfigurationError(f"--fit {path}: no labelled query in it.")
    return rows


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
    p.add_argument(
        "--router",
        default=None,
        metavar="FILE",
        help="route with a router saved by `rag-pack route --save-router` (routes, thresholds, "
        "route vectors: nothing is embedded again)",
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
    p.add_argument(
        "--fit",
        metavar="FILE",
        default=None,
        help="fit the semantic thresholds on labelled queries (JSONL: query, route) first",
    )
    p.add_argument(
        "--save-router",
        metavar="FILE",
        default=None,
        help="save the router (routes, thresholds, route vectors) to FILE; --router FILE loads it",
    )
    p.set_defaults(func=cmd_route)
