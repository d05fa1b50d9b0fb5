"""One question-answering session of ``rag-pack ask`` / ``rag-pack chat``: the input is checked,
then each model is loaded once (a progress line on stderr says what loads and how long it took),
and every question of the session is answered with the same pack.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llama_index_rag_pack.cli import checks
from llama_index_rag_pack.cli import output as _cli

if TYPE_CHECKING:
    from llama_index_rag_pack.core.usage import TokenUsage

__all__ = ["Session", "open_session", "progress", "usage_line"]


def usage_line(usage: TokenUsage) -> str:
    """``--show-usage``'s words for ``usage``.

    Example:
        >>> from llama_index_rag_pack.core.usage import TokenUsage
        >>> usage_line(TokenUsage(1200, 85, 2))
        '1,200 prompt + 85 completion = 1,285 tokens in 2 LLM calls'
        >>> usage_line(TokenUsage(30, 5, 1, counted=True))
        '30 prompt + 5 completion = 35 tokens in 1 LLM call (counted with the tokenizer where the LLM reported none)'
    """  # noqa: E501  (doctest output)
    calls = "call" if usage.llm_calls == 1 else "calls"
    line = (
        f"{usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} completion = "
        f"{usage.total_tokens:,} tokens in {usage.llm_calls} LLM {calls}"
    )
    if usage.counted:
        line += " (counted with the tokenizer where the LLM reported none)"
    return line


@contextmanager
def progress(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Print ``name ...`` on stderr, then the seconds it took on the same line."""
    sys.stderr.write(f"{name} ...")
    sys.stderr.flush()
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        sys.stderr.write(" failed\n")
        raise
    elapsed = time.perf_counter() - start
    timings[name] = timings.get(name, 0.0) + elapsed
    sys.stderr.write(f" {elapsed:.1f} s\n")
    sys.stderr.flush()


@dataclass
class Session:
    """The loaded pack, whether questions are routed, and where the time went."""

    args: argparse.Namespace
    pack: Any
    routed: bool
    timings: dict[str, float] = field(default_factory=dict)
    scope: dict[str, Any] = field(default_factory=dict)
    answered: int = 0
    usage: TokenUsage | None = None  # the answers' LLM tokens so far (None: no answer yet)

    def time_answer(self, question: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, printing and answering ``question``: its time is kept, and with
        ``--show-usage`` the LLM tokens it spent (streamed answers included) are printed."""
        from llama_index_rag_pack.core.usage import metered

        start = time.perf_counter()
        try:
            with metered() as meter:
                return fn()
        finally:
            self.answered += 1
            label = " ".join(question.split())
            label = label if len(label) <= 60 else label[:57] + "..."
            self.timings[f"answer {self.answered}: {label}"] = time.perf_counter() - start
            self.usage = meter.usage if self.usage is None else self.usage + meter.usage
            if getattr(self.args, "show_usage", False):
                _cli.err(f"(usage: {usage_line(meter.usage)})")

    def answer_options(self) -> dict[str, Any]:
        """How every answer of the session is printed and scoped (``output.answer``'s options,
        from the command line once)."""
        args = self.args
        return {
            "stream": not args.no_stream,
            "fmt": args.format,
            "citations": not args.no_citations,
            "show_sources": getattr(args, "show_sources", False),
            "scope": self.scope,
            "answer_style": getattr(args, "answer_style", "auto"),
        }

    def print_timings(self) -> None:
        """The session's timings on stderr: each model load once, then each answer."""
        _cli.err("\nTimings:")
        for name, seconds in self.timings.items():
            _cli.err(f"  {seconds:7.1f} s  {name}")
        if getattr(self.args, "show_usage", False) and self.usage is not None:
            _cli.err(f"Usage, all answers: {usage_line(self.usage)}")


def open_session(args: argparse.Namespace) -> Session:
    """Check the input, then load the embedding model, open Milvus and load the LLM, each once."""
    routed = checks.wants_routing(args)
    uri = checks.check_input(args, routed)
    fields = _self_query_fields(args)
    from llama_index_rag_pack.cli.scope import query_scope

    scope = query_scope(args, uri, routed)  # --filter and --tenant, before any model loads
    # one progress line per model: no download/weight bars in between (set before HF imports)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from llama_index_rag_pack.models import settings
    from llama_index_rag_pack.pack import pack_base

    timings: dict[str, float] = {}
    # RagPack's own resolver; a wrong --llm fails here, before any model loads
    llm = pack_base.resolve_llm(args.llm)
    with progress("loading embedding model", timings):
        embed_model = settings.resolve_embed_model(args.embed_model)
    with progress(f"opening Milvus at {uri}", timings):
        pack = _open_pack(args, uri, routed, llm, embed_model)
    if _answers_need_llm(args, routed, llm):  # else it loads if and when it is first used
        with progress(f"loading LLM ({settings.describe_llm(llm)})", timings):
            if hasattr(llm, "load"):
                llm.load()
    if fields is not None:
        from llama_index_rag_pack.pack.self_query import configure_self_query

        configure_self_query(pack, fields)
    style = getattr(args, "answer_style", None)  # commands that answer questions have it
    _cli.print_models(pack, style, citations=not getattr(args, "no_citations", False))
    return Session(args=args, pack=pack, routed=routed, timings=timings, scope=scope)


def _answers_need_llm(args: argparse.Namespace, routed: bool, llm: Any) -> bool:
    """Whether the session's answers call the LLM: not when ``rag-pack ask`` answers
    extractively (the passages' own sentences) without routing or self-query."""
    from llama_index_rag_pack.models.answer_style import resolve_answer_style

    if args.func.__name__ != "cmd_ask" or routed or args.no_citations:  # ask has them all
        return True
    if args.mode is not None and args.mode != "hybrid_convex":
        return True  # a mode may ask the LLM (HyDE, rewrites, self-query, ...)
    return resolve_answer_style(args.answer_style, llm) != "extractive"


def _self_query_fields(args: argparse.Namespace) -> Any:
    """The fields of ``--self-query-fields FILE``, read before any model loads (``None``: infer
    them from the collection)."""
    path = getattr(args, "self_query_fields", None)
    if path is None:
        return None
    from llama_index_rag_pack.pack.commands import load_field_file

    return load_field_file(path)


def _open_pack(args: argparse.Namespace, uri: str, routed: bool, llm: Any, embed_model: Any) -> Any:
    models = {"llm": llm, "embed_model": embed_model}
    if routed:
        from llama_index_rag_pack.cli.route import open_routed_pack

        if _cli.rerank_kwargs(args):
            from llama_index_rag_pack.core.errors import ConfigurationError

            raise ConfigurationError("--rerank does not apply to --route answers yet.")

        return open_routed_pack(args, similarity_top_k=args.top_k, **models)
    from llama_index_rag_pack.pack.rag_pack import RagPack

    kwargs = {**_cli.pack_kwargs(args), **models, "uri": uri}
    return RagPack.open(similarity_top_k=args.top_k, **kwargs)
