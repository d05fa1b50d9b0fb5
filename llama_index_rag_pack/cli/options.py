"""The options ``rag-pack ask``, ``chat`` and ``demo`` share: retrieval, output, routing and
scope (``--filter``, ``--tenant``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = [
    "add_answer_options",
    "add_citation_options",
    "add_rerank_options",
    "add_retrieval_options",
    "positive_int",
]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def add_rerank_options(p: argparse.ArgumentParser) -> None:
    """``--rerank`` and its settings (docs/rerank.md)."""
    p.add_argument(
        "--rerank",
        metavar="URL|local:DIR",
        default=None,
        help="rerank every retrieval: a /rerank endpoint (TEI, vLLM, Infinity, Jina, Cohere: "
        "http://HOST:PORT[/PATH][#MODEL], tei+ or cohere+ picks the API) or local:DIR, a saved "
        "cross-encoder; the key comes from $RAG_PACK_RERANK_API_KEY (docs/rerank.md)",
    )
    p.add_argument(
        "--rerank-top-n",
        type=positive_int,
        default=None,
        metavar="N",
        help="candidates the reranker sees (default 4 x --top-k)",
    )
    p.add_argument(
        "--rerank-batch-size",
        type=positive_int,
        default=32,
        metavar="N",
        help="documents per rerank request (default 32)",
    )
    p.add_argument(
        "--rerank-timeout",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="seconds a rerank request may take to connect and per read (default 30)",
    )
    p.add_argument(
        "--rerank-fallback",
        default="raise",
        choices=["raise", "keep"],
        help="when reranking fails: raise (one error line, default) or keep the first-stage "
        "order with a warning",
    )


def add_citation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        default="text",
        choices=["text", "markdown", "html"],
        help="how citations and the reference list are written (default text)",
    )
    p.add_argument(
        "--no-citations",
        action="store_true",
        help="plain answer without citations; list the retrieved chunks instead",
    )
    add_answer_style_option(p)


def add_answer_style_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--answer-style",
        default="auto",
        choices=["auto", "extractive", "generative"],
        help="extractive: the passages' own sentences under a short answer line, cited; "
        "generative: the LLM writes the answer; auto (default): extractive with a local model "
        "below 1B weights (the bundled one), generative with any other",
    )


def add_route_options_lazily(p: argparse.ArgumentParser) -> None:
    from llama_index_rag_pack.cli.route import add_route_options

    add_route_options(p)


def add_retrieval_options(p: argparse.ArgumentParser, modes: Sequence[str], top_k: int) -> None:
    """``--mode`` and ``--top-k`` (default ``top_k``)."""
    p.add_argument(
        "--mode",
        default=None,
        choices=modes,
        help="retrieval strategy (default: hybrid_convex; vector on a collection without BM25)",
    )
    p.add_argument(
        "--top-k", type=positive_int, default=top_k, help=f"chunks retrieved (default {top_k})"
    )


def add_answer_options(p: argparse.ArgumentParser, modes: Sequence[str]) -> None:
    """The options of ``ask`` and ``chat``: retrieval, output, routing."""
    add_retrieval_options(p, modes, top_k=4)
    add_rerank_options(p)
    p.add_argument("--no-stream", action="store_true", help="print the answer at the end")
    p.add_argument(
        "--self-query-fields",
        metavar="FILE",
        default=None,
        help="JSON list of metadata fields for --mode self_query (default: inferred)",
    )
    add_citation_options(p)
    p.add_argument(
        "--show-sources",
        action="store_true",
        help="print each cited passage with the sentence supporting the answer highlighted",
    )
    p.add_argument(
        "--show-usage",
        action="store_true",
        help="print the LLM tokens each answer spent (every call: condensing, HyDE, query "
        "variants, judge, the answer), and the session's total",
    )
    p.add_argument(
        "--route",
        action="store_true",
        help="route the question between collections and show which was chosen and why",
    )
    add_route_options_lazily(p)
    p.add_argument(
        "--filter",
        metavar="EXPR",
        default=None,
        help="Milvus expression on the chunks' metadata, e.g. 'year > 2010 and topic == \"news\"' "
        "(checked before anything loads; see docs/filters.md)",
    )
    p.add_argument(
        "--tenant",
        default=None,
        help="the tenant to answer for, on a collection with tenants ('*': every tenant)",
    )
