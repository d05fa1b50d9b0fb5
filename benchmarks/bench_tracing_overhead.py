"""What the pack's instrumentation spans cost a question when no tracing handler is registered,
and what the usage meter (``with metered():``) costs.

For a few modes on a small Milvus Lite collection (bundled embedding model, scripted LLM):

* the spans of one question: all of them, and the ones the pack adds (counted by a handler);
* one span's enter and exit with no handler registered (a no-op method with and without
  ``@dispatcher.span``, many calls);
* ``added (estimated)``: the pack's spans per question times that cost;
* ``A/B``: the median time of a question with the pack's spans and with them unwrapped (the
  same methods, the decorator taken off), interleaved rounds: noisy at this scale on a shared
  machine, the estimate is the figure to read;
* ``metered``: the median time of a question inside ``with metered():`` minus without.

Usage: ``python benchmarks/bench_tracing_overhead.py [--questions 30] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODES = ("hybrid_convex", "bm25", "fusion", "hyde")
TOPICS = ("search engines", "bread baking", "the solar system", "databases", "rivers", "music")


def _documents() -> list[Any]:
    from llama_index.core import Document

    docs = []
    for t, topic in enumerate(TOPICS):
        for i in range(12):
            text = (
                f"Fact {i} about {topic}: item {i} of {topic} is described here with words "
                f"like ranking, yeast, orbit, index, delta and melody number {t * 12 + i}."
            )
            docs.append(Document(id_=f"{t}-{i}", text=text, metadata={"topic": topic}))
    return docs


def _reply(prompt: str) -> str:
    if "search queries" in prompt.lower():
        return "1. ranking in search engines\n2. how yeast works\n3. planets orbit"
    return "Passage: search engines rank keyword matches with BM25 [1](id=1)."


def _pack_spans() -> list[tuple[type, str]]:
    """The (class, method) pairs the pack wraps in a span of its own."""
    from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
    from llama_index_rag_pack.fusion.hyde import HyDERetriever
    from llama_index_rag_pack.fusion.memory_fusion import MemoryFusionMixin
    from llama_index_rag_pack.fusion.rag_fusion import FusionRetriever
    from llama_index_rag_pack.fusion.rewrite import RewriteRetriever

    return [
        (MilvusHybridRetriever, "dense_search"),
        (MilvusHybridRetriever, "bm25_search"),
        (MilvusHybridRetriever, "hybrid_search"),
        *[(MemoryFusionMixin, m) for m in ("bm25_search", "dense_search", "sentence_search")],
        (MemoryFusionMixin, "fuse_scores"),
        (MemoryFusionMixin, "read_chunks"),
        *[(FusionRetriever, m) for m in ("generate_queries", "agenerate_queries")],
        *[(FusionRetriever, m) for m in ("search_variant", "asearch_variant", "fuse_ranks")],
        *[(HyDERetriever, m) for m in ("write_passages", "awrite_passages")],
        *[(RewriteRetriever, m) for m in ("rewrite", "arewrite")],
    ]


def _unwrapped() -> Callable[[], None]:
    """Takes the pack's span decorators off; returns the call that puts them back."""
    saved = [(cls, name, cls.__dict__[name]) for cls, name in _pack_spans()]
    for cls, name, wrapped in saved:
        setattr(cls, name, wrapped.__wrapped__)

    def restore() -> None:
        for cls, name, wrapped in saved:
            setattr(cls, name, wrapped)

    return restore


def span_cost_us(calls: int = 20000) -> float:
    """One span's enter and exit with no handler, in µs (decorated no-op minus plain no-op)."""
    from llama_index.core.instrumentation import get_dispatcher

    dispatcher = get_dispatcher("llama_index_rag_pack.fusion.bench")

    class Step:
        @dispatcher.span
        def spanned(self, query: str, limit: int = 3) -> str:
            return query

        def plain(self, query: str, limit: int = 3) -> str:
            return query

    step = Step()
    best = {}
    for name in ("spanned", "plain"):
        fn = getattr(step, name)
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(calls):
                fn("q")
            runs.append((time.perf_counter() - t) / calls)
        best[name] = min(runs)
    return 1e6 * (best["spanned"] - best["plain"])


def count_spans(question: Callable[[], Any]) -> tuple[int, int]:
    """All spans of one question, and those the pack adds."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

    added = {f"{name}" for _, name in _pack_spans()}
    root = get_dispatcher()
    handler = SimpleSpanHandler()
    root.add_span_handler(handler)
    try:
        question()
    finally:
        root.span_handlers.remove(handler)
    spans = handler.completed_spans + handler.dropped_spans
    ours = [s for s in spans if s.id_.partition("-")[0].rpartition(".")[2] in added]
    return len(spans), len(ours)


def _median_ms(question: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        question()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def measure_mode(pack: Any, mode: str, questions: int, rounds: int, per_span: float) -> dict:
    retriever = pack.retriever(mode)
    asked = [f"question {i} about {TOPICS[i % len(TOPICS)]} ranking" for i in range(questions)]
    state = {"i": 0}

    def question() -> Any:
        state["i"] += 1
        if mode == "fusion":  # the async path: variants searched concurrently
            return asyncio.run(retriever.aretrieve(asked[state["i"] % questions]))
        return retriever.retrieve(asked[state["i"] % questions])

    for _ in range(5):
        question()
    total, ours = count_spans(question)
    on, off = [], []
    for _ in range(rounds):
        on.append(_median_ms(question, questions))
        restore = _unwrapped()
        try:
            off.append(_median_ms(question, questions))
        finally:
            restore()
    return {
        "mode": mode,
        "spans_per_question": total,
        "pack_spans_per_question": ours,
        "added_us_estimated": ours * per_span,
        "question_ms": statistics.median(on),
        "question_ms_without_pack_spans": statistics.median(off),
        "added_us_ab": 1000 * (statistics.median(on) - statistics.median(off)),
    }


def measure_meter(pack: Any, row: dict, questions: int, rounds: int) -> None:
    """Adds ``metered_us`` to ``row``: a question inside ``with metered():`` against one before
    any meter was opened (the meter's handler stays on the root dispatcher once added)."""
    from llama_index_rag_pack.core.usage import metered

    retriever = pack.retriever(row["mode"])

    def question() -> Any:
        with metered():
            if row["mode"] == "fusion":
                return asyncio.run(retriever.aretrieve("question about ranking"))
            return retriever.retrieve("question about ranking")

    meter = [_median_ms(question, questions) for _ in range(rounds)]
    row["metered_us"] = 1000 * (statistics.median(meter) - row["question_ms"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    add_out_argument(parser)
    args = parser.parse_args(argv)

    from llama_index_rag_pack import RagPack
    from llama_index_rag_pack.testing import ScriptedLLM

    per_span = span_cost_us()
    uri = str(Path(tempfile.mkdtemp(prefix="bench-tracing-")) / "milvus.db")
    pack = RagPack(
        _documents(), uri=uri, collection_name="tracing", llm=ScriptedLLM(replies=_reply)
    )
    rows = [measure_mode(pack, m, args.questions, args.rounds, per_span) for m in MODES]
    for row in rows:  # last: the meter's handler stays registered once a meter was opened
        measure_meter(pack, row, args.questions, args.rounds)
    table = md_table(
        [
            "mode",
            "spans / question",
            "pack's spans",
            "added, estimated (µs)",
            "question (ms)",
            "without pack spans (ms)",
            "added, A/B (µs)",
            "metered() (µs)",
        ],
        [
            [
                r["mode"],
                r["spans_per_question"],
                r["pack_spans_per_question"],
                f"{r['added_us_estimated']:.0f}",
                f"{r['question_ms']:.2f}",
                f"{r['question_ms_without_pack_spans']:.2f}",
                f"{r['added_us_ab']:.0f}",
                f"{r['metered_us']:.0f}",
            ]
            for r in rows
        ],
        align="lrrrrrrr",
    )
    write_results(
        "tracing_overhead",
        {"span_enter_exit_us": per_span, "modes": rows, "questions": args.questions},
        [("Tracing off: the cost of the pack's spans per question", table)],
        out=args.out,
        description=(
            f"One span's enter and exit with no handler registered: {per_span:.1f} µs. "
            f"{args.questions} questions per round, {args.rounds} rounds, medians; "
            "fusion on its async path."
        ),
        notes=[
            "`added, estimated` is the pack's spans per question times one span's cost with no "
            "handler; `added, A/B` compares the same questions with the pack's span decorators "
            "taken off, and moves by more than the spans cost from round to round on a shared "
            "machine (it can come out negative).",
            "`metered()` is a question inside `with metered():` minus one outside it (the meter "
            "adds one span handler to LlamaIndex's root dispatcher, for the rest of the process).",
        ],
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
