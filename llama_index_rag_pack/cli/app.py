"""``rag-pack``: index documents, ask questions, run the offline demo.

Errors that a user can fix (bad paths, empty corpora, unreachable Milvus, no LLM) are printed as
one ``error:`` line with the fix, exit status 2; no traceback unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.cli.options import (
    add_answer_options,
    add_citation_options,
    add_retrieval_options,
)
from llama_index_rag_pack.cli.output import (
    answer,
    configure_logging,
    err,
    out,
    pack_kwargs,
    print_models,
    step,
)
from llama_index_rag_pack.core.errors import RagPackError

DEMO_TITLES = (
    "Apollo 11",
    "Albert Einstein",
    "Aardvark",
    "Abacus",
    "Alchemy",
    "Andre Agassi",
    "Animal Farm",
    "Atlantic Ocean",
)
DEMO_QUESTIONS = (
    "Who were the astronauts of Apollo 11?",
    "What does the aardvark eat?",
    "Where was Albert Einstein born?",
)


# --------------------------------------------------------------------------- commands
def cmd_index(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.cli.index import cmd_index as run

    return run(args)


def cmd_ask(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.cli.ask import cmd_ask as run

    return run(args)


def cmd_chat(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.cli.ask import cmd_chat as run

    return run(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
    from llama_index_rag_pack.models.answer_style import resolve_answer_style
    from llama_index_rag_pack.pack.rag_pack import RagPack

    timings: dict[str, float] = {}
    titles = args.titles or list(DEMO_TITLES)
    kwargs = _demo_pack_kwargs(args, titles)
    out("rag-pack demo: Wikipedia articles shipped offline in the gensim wheel\n")
    pack = _open_demo(args, kwargs, timings)
    if pack is None:  # the articles are read only to index them
        with step(f"loading {len(titles)} Wikipedia articles", timings):
            documents = load_wikipedia_documents(titles)
            out(f"  {sum(len(d.text) for d in documents):,} characters")
        with step("chunking, embedding and indexing into Milvus", timings):
            pack = RagPack(
                documents,
                overwrite=True,
                similarity_top_k=args.top_k,
                show_progress=True,
                **kwargs,
            )
    out(
        f"  {pack.count()} chunks in collection {pack.vector_store.collection_name!r} "
        f"at {kwargs['uri']}"
    )
    llm = pack.llm
    if args.no_citations or resolve_answer_style(args.answer_style, llm) == "generative":
        with step("loading the LLM", timings):  # extractive answers never call it
            if hasattr(llm, "load"):
                llm.load()
    print_models(pack, args.answer_style, citations=not args.no_citations)
    for question in args.questions or DEMO_QUESTIONS:
        out(f"\nQ: {question}")
        start = time.perf_counter()
        out("A: ", end="")
        answer(
            pack,
            question,
            mode=args.mode,
            stream=True,
            fmt=args.format,
            citations=not args.no_citations,
            show_sources=True,
            answer_style=args.answer_style,
        )
        timings[f"answer: {question}"] = time.perf_counter() - start
    out("\nTimings:")
    for name, seconds in timings.items():
        out(f"  {seconds:7.1f} s  {name}")
    return 0


def _demo_pack_kwargs(args: argparse.Namespace, titles: list[str]) -> dict[str, Any]:
    """RagPack arguments of the demo: its own database, one collection per set of articles (so
    another ``--titles`` never reuses a different index)."""
    kwargs = pack_kwargs(args)
    kwargs["uri"] = args.uri or os.path.join(
        os.environ.get("RAG_PACK_DATA_DIR", "rag_pack_data"), "demo.db"
    )
    suffix = (
        ""
        if titles == list(DEMO_TITLES)
        else "_" + hashlib.sha1("\n".join(titles).encode()).hexdigest()[:8]
    )
    kwargs["collection_name"] = args.collection or f"demo_wikipedia{suffix}"
    return kwargs


def _open_demo(args: argparse.Namespace, kwargs: dict[str, Any], timings: dict[str, float]) -> Any:
    """The demo's existing index when it holds chunks (and no ``--rebuild``), else ``None``."""
    from llama_index_rag_pack.pack.rag_pack import RagPack

    if args.rebuild:
        return None
    with step("loading the embedding model and opening Milvus", timings):
        try:
            pack = RagPack.open(similarity_top_k=args.top_k, **kwargs)
        except RagPackError:
            return None
        if pack.count() == 0:
            return None
    out("  reusing the existing index (pass --rebuild to index again)")
    return pack


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rag-pack",
        description=(
            "Advanced RAG over Milvus: index documents, ask questions, run the offline demo."
        ),
    )
    _add_global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    modes = _mode_names()
    _add_index_command(sub)
    _add_ask_command(sub, modes)
    _add_chat_command(sub, modes)
    _add_demo_command(sub, modes)
    _register_subcommands(sub)
    return parser


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    """Where the data lives and which models answer (before the subcommand)."""
    parser.add_argument(
        "--uri",
        default=None,
        help="Milvus Lite path (*.db) or server http://host:19530 "
        "(default: $RAG_PACK_MILVUS_URI or ./rag_pack_data/milvus.db)",
    )
    parser.add_argument("--collection", default=None, help="collection name (default: rag_pack)")
    parser.add_argument("--token", default=None, help="Milvus server token")
    parser.add_argument(
        "--llm", default=None, help="auto (default), openai, local, or a .gguf path"
    )
    parser.add_argument(
        "--embed-model",
        default=None,
        help="local sentence-transformers model directory, a Hub model name already in "
        "LlamaIndex's cache (never downloaded), or openai:MODEL for an OpenAI-compatible "
        "embeddings endpoint ($RAG_PACK_EMBED_API_BASE or $OPENAI_BASE_URL, "
        "$RAG_PACK_EMBED_API_KEY or $OPENAI_API_KEY); the bundled default is English-only",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log details and show tracebacks"
    )


def _add_index_command(sub: Any) -> None:
    p = sub.add_parser(
        "index", help="index files or directories (txt, md, pdf, html, docx, pptx, xlsx, csv, epub)"
    )
    p.add_argument("paths", nargs="*", help="files or directories")
    p.add_argument("--overwrite", action="store_true", help="drop the collection first")
    p.add_argument(
        "--sync",
        action="store_true",
        help="also delete what is stored for files under the paths that are gone (chunks, "
        "sentences, BM25 statistics and RAPTOR leaves), and report what was added, changed, "
        "removed and left unchanged",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="with --sync: keep watching the paths and sync again after every change "
        "(polling, see --watch-every; Ctrl-C stops)",
    )
    p.add_argument(
        "--watch-every",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between two looks at the files with --watch (default 2)",
    )
    p.add_argument(
        "--reindex",
        action="store_true",
        help="re-analyse the stored collection's BM25 side with the per-language auto "
        "analysis (or --bm25-analyzer), keeping its chunks and vectors (no paths). A collection "
        "keeps the analysis it was indexed with until then: one indexed with the English "
        "analysis (before auto) gets nothing from BM25 for a Chinese or Japanese question",
    )
    p.add_argument(
        "--bm25-analyzer",
        default=None,
        metavar="NAME",
        help="BM25 analysis of a new collection (or of --reindex): auto (default: each chunk "
        "in its own language), chinese, japanese, german, french, spanish, russian, ... "
        "(any Snowball language), unicode, english, standard",
    )
    p.add_argument(
        "--no-sentence-index",
        action="store_true",
        help="do not embed each sentence as well (indexing twice as fast; hybrid search then "
        "fuses dense and BM25 only)",
    )
    for flag, what, default in (
        ("--chunk-size", "chunk size", 256),
        ("--chunk-overlap", "chunk overlap", 32),
    ):
        p.add_argument(
            flag, type=int, default=default, help=f"{what} in tokens (default {default})"
        )
    p.add_argument("--no-recursive", action="store_true", help="do not descend into subdirectories")
    _add_ocr_option(p)
    p.set_defaults(func=cmd_index)


def _add_ocr_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ocr",
        choices=("auto", "off", "force"),
        default="auto",
        help="scanned PDF pages and images: auto (default) reads by OCR the pages without a "
        "usable text layer, force every page, off none (needs the [ocr] extra or Tesseract)",
    )


def _add_ask_command(sub: Any, modes: Sequence[str]) -> None:
    p = sub.add_parser(
        "ask",
        help="answer one or more questions from the indexed collection (models load once)",
    )
    p.add_argument(
        "questions",
        nargs="+",
        metavar="question",
        help="one or more questions; - reads one question per line from stdin",
    )
    add_answer_options(p, modes)
    p.set_defaults(func=cmd_ask)


def _add_chat_command(sub: Any, modes: Sequence[str]) -> None:
    p = sub.add_parser(
        "chat",
        help="a conversation with citations over one index (reads stdin until exit or EOF)",
        description="Load the models once, then answer each line of stdin as a turn of one "
        "conversation: follow-ups ('and when was it founded?') are condensed with the history "
        "into a standalone question, and every answer cites its sources. Commands: /reset, "
        "/sources, /history, /help. `exit`, `quit` or end of input (Ctrl-D) ends the session. "
        "Works with piped input. With --route or --no-citations each line is answered on its own.",
    )
    add_answer_options(p, modes)
    p.set_defaults(func=cmd_chat)


def _add_demo_command(sub: Any, modes: Sequence[str]) -> None:
    p = sub.add_parser(
        "demo", help="index shipped Wikipedia articles and answer questions, offline"
    )
    p.add_argument("--titles", nargs="+", default=None, help="article titles to index")
    p.add_argument(
        "--question",
        dest="questions",
        action="append",
        default=None,
        help="a question (repeatable)",
    )
    add_retrieval_options(p, modes, top_k=3)
    add_citation_options(p)
    p.add_argument(
        "--rebuild", action="store_true", help="index again even if the demo index exists"
    )
    p.set_defaults(func=cmd_demo)


# Modules that add their own subcommands: each has ``register(subparsers)``.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "llama_index_rag_pack.cli.route",
    "llama_index_rag_pack.cli.evaluate",
    "llama_index_rag_pack.cli.raptor",
    "llama_index_rag_pack.cli.judge",
    "llama_index_rag_pack.cli.sql",
    "llama_index_rag_pack.cli.serve",
)


def _register_subcommands(sub: Any) -> None:
    import importlib

    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)


def _mode_names() -> list[str]:
    from llama_index_rag_pack.pack.modes import mode_names

    return mode_names()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except RagPackError as e:
        if args.verbose:
            logging.getLogger(__name__).exception("failed")
        err(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        err("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
