"""What the ``rag-pack`` commands print: steps with timings, model lines, answers, sources."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from llama_index_rag_pack.cli.evidence import print_evidence


def out(text: str = "", **kwargs: Any) -> None:
    print(text, **kwargs)  # noqa: T201 - the CLI prints


def err(text: str) -> None:
    print(text, file=sys.stderr)  # noqa: T201


@contextmanager
def step(name: str, timings: dict[str, float] | None = None) -> Iterator[None]:
    out(f"→ {name} ...", flush=True)
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    if timings is not None:
        timings[name] = elapsed
    out(f"  done in {elapsed:.1f} s", flush=True)


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger("llama_index_rag_pack").setLevel(logging.INFO if verbose else logging.WARNING)
    for noisy in (
        "milvus_lite",
        "pymilvus",
        "grpc",
        "httpx",
        "sentence_transformers",
        "transformers",
    ):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pack_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "uri": args.uri,
        "collection_name": args.collection,
        "token": args.token,
        "llm": args.llm,
        "embed_model": args.embed_model,
        **rerank_kwargs(args),
    }


def rerank_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``RagPack``'s rerank arguments from the command line (none without ``--rerank``)."""
    rerank = getattr(args, "rerank", None)
    if not rerank:
        return {}
    return {
        "rerank": rerank,
        "rerank_top_n": args.rerank_top_n,
        "rerank_fallback": args.rerank_fallback,
        "rerank_options": {"batch_size": args.rerank_batch_size, "timeout": args.rerank_timeout},
    }


def print_models(pack: Any, answer_style: str | None = None, citations: bool = True) -> None:
    """The models and store in use; with ``answer_style``, which style answers."""
    info = pack.describe()
    out(f"  embedding : {info['embedding']}")
    out(f"  store     : {info['vector_store']}")
    if info.get("milvus"):
        out(f"  milvus    : {info['milvus']}")
    if info.get("bm25"):
        out(f"  bm25      : {info['bm25']}")
    out(f"  llm       : {info['llm']}")
    if info.get("rerank"):
        out(f"  rerank    : {info['rerank']}")
    if answer_style is not None:
        from llama_index_rag_pack.models.answer_style import describe_answer_style

        style = describe_answer_style(answer_style, pack.llm) if citations else None
        out(f"  answers   : {style or 'generative (--no-citations)'}")


def source_label(node: Any) -> str:
    meta = node.metadata or {}
    return str(
        meta.get("title")
        or meta.get("file_name")
        or meta.get("file_path")
        or meta.get("url")
        or node.node_id
    )


def print_sources(source_nodes: Sequence[Any]) -> None:
    if not source_nodes:
        return
    out("\nSources:")
    for i, nws in enumerate(source_nodes, 1):
        score = f"{nws.score:.3f}" if nws.score is not None else "  -  "
        snippet = " ".join(nws.node.get_content().split())[:110]
        out(f"  [{i}] {score}  {source_label(nws.node)} — {snippet}…")


def answer(
    pack: Any,
    question: str,
    *,
    mode: str | None,
    stream: bool,
    fmt: str = "text",
    citations: bool = True,
    show_sources: bool = False,
    scope: dict[str, Any] | None = None,
    answer_style: str = "auto",
) -> None:
    """Print the answer (streamed as it comes); with citations, the rewritten answer and its
    reference list in the ``fmt`` style (text, markdown, html); with ``show_sources``, each cited
    passage with the sentence supporting the answer highlighted; ``scope``: the ``filters`` and
    ``tenant`` of ``--filter`` / ``--tenant``; ``answer_style``: ``--answer-style``."""
    scope = scope or {}
    if citations:
        engine = pack.make_query_engine(
            mode, streaming=stream, citation_style=fmt, answer_style=answer_style, **scope
        )
    else:
        engine = pack.make_query_engine(mode, streaming=stream, citations=False, **scope)
    response = engine.query(question)
    if stream and hasattr(response, "response_gen"):
        for i, delta in enumerate(response.response_gen):
            if i == 0 and delta.startswith("- "):
                out()  # an answer that opens with a list (quotes) starts on its own line
            out(delta, end="", flush=True)
        out()
    else:
        text = str(response)
        out(("\n" if text.startswith("- ") else "") + text)
    context = getattr(response, "context_nodes", None)
    if context is None:  # plain engine: list what was retrieved
        print_sources(response.source_nodes)
        return
    if show_sources:
        print_evidence(response)
    if not response.source_nodes and context:
        out("\n(the answer cites no source; retrieved chunks:)")
        print_sources(context)
