"""What the pack's instrumentation spans cost a question when no tracing handler is registered,
and what the usage meter (``with metered():``) costs.

For a few modes on a small Milvus Lite collection (bundled embedding model, scripted LLM):

* the spans of one question: all of them, and the ones the pack adds (counted by a handler);
* one span's enter and exit (a no-op method with and without ``@dispatcher.span``, many calls):
  with no handler, with the usage meter's handlers registered, inside an open meter; and one
  ``with metered():`` block;
* ``added (estimated)``: the pack's spans per question times a span's cost, plus what the
  meter's handlers add to every span of the question and the engine's meter block;
* ``A/B``: whole questions with the pack's spans and with them unwrapped (the same methods, the
  decorator taken off), alternated question by question: the median paired difference.

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
        (FusionRetriever, "fuse_ranks"),
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


def _per_call_us(fn: Callable[[], Any], calls: int) -> float:
    """Best of 5 loops of ``calls`` calls, in µs per call."""
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t) / calls)
    return 1e6 * min(runs)


def unit_costs(calls: int = 20000) -> dict[str, float]:
    """In µs: one span's enter and exit (a decorated no-op minus a plain one) as a new process
    has LlamaIndex's root dispatcher (``span_bare``), once the usage meter's handlers are on it
    (they are added by the first answer: ``span_handlers_on``), and inside an open meter
    (``span_in_meter``); one ``with metered():`` block (``meter_block``)."""
    from llama_index.core.instrumentation import get_dispatcher

    from llama_index_rag_pack.core.usage import metered

    dispatcher = get_dispatcher("llama_index_rag_pack.fusion.bench")

    class Step:  # the signature of a pack step such as fuse_scores
        @dispatcher.span
        def spanned(self, weights: Any, dense: Any, sparse: Any, extra: Any = None) -> Any:
            return dense

        def plain(self, weights: Any, dense: Any, sparse: Any, extra: Any = None) -> Any:
            return dense

    step = Step()

    def span_cost() -> float:
        spanned = _per_call_us(lambda: step.spanned(1, 2, 3), calls)
        return spanned - _per_call_us(lambda: step.plain(1, 2, 3), calls)

    costs = {"span_bare": span_cost()}
    with metered():  # registers the meter's handlers, for the rest of the process
        pass
    costs["span_handlers_on"] = span_cost()
    with metered():
        costs["span_in_meter"] = span_cost()

    def block() -> None:
        with metered():
            pass

    costs["meter_block"] = _per_call_us(block, calls)
    return costs


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


def _timed(question: Callable[[], Any]) -> float:
    t = time.perf_counter()
    question()
    return time.perf_counter() - t


def measure_mode(pack: Any, mode: str, questions: int, rounds: int, costs: dict) -> dict:
    """One mode's whole questions (``pack.run``: retrieval and the scripted answer, metered by
    the engine): spans counted, the estimate, and an A/B of the pack's spans on and off,
    alternated question by question (the median of the paired differences)."""
    asked = [f"question {i} about {TOPICS[i % len(TOPICS)]} ranking" for i in range(questions)]
    state = {"i": 0}

    def question() -> Any:
        state["i"] += 1
        text = asked[state["i"] % questions]
        if mode == "fusion":  # the async path: variants searched concurrently
            return asyncio.run(pack.arun(text, mode=mode, answer_style="generative"))
        return pack.run(text, mode=mode, answer_style="generative")

    for _ in range(5):
        question()
    total, ours = count_spans(question)
    on, pairs = [], []
    for n in range(rounds * questions):
        first = _timed(question) if n % 2 == 0 else None  # which side goes first alternates
        restore = _unwrapped()
        try:
            without = _timed(question)
        finally:
            restore()
        with_spans = first if first is not None else _timed(question)
        on.append(with_spans)
        pairs.append(with_spans - without)
    in_meter, handlers_on = costs["span_in_meter"], costs["span_handlers_on"]
    estimate = ours * in_meter + total * (in_meter - costs["span_bare"]) + costs["meter_block"]
    quartiles = statistics.quantiles(pairs, n=4)
    return {
        "mode": mode,
        "spans_per_question": total,
        "pack_spans_per_question": ours,
        "added_us_estimated": estimate,
        "pack_spans_us": ours * in_meter,
        "meter_us": total * (in_meter - costs["span_bare"]) + costs["meter_block"],
        "span_handlers_on_us": handlers_on,
        "question_ms": 1000 * statistics.median(on),
        "added_us_ab": 1e6 * statistics.median(pairs),
        "added_us_ab_iqr": [1e6 * quartiles[0], 1e6 * quartiles[2]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    add_out_argument(parser)
    args = parser.parse_args(argv)

    from llama_index_rag_pack import RagPack
    from llama_index_rag_pack.testing import ScriptedLLM

    costs = unit_costs()
    uri = str(Path(tempfile.mkdtemp(prefix="bench-tracing-")) / "milvus.db")
    pack = RagPack(
        _documents(), uri=uri, collection_name="tracing", llm=ScriptedLLM(replies=_reply)
    )
    rows = [measure_mode(pack, m, args.questions, args.rounds, costs) for m in MODES]
    table = md_table(
        [
            "mode",
            "spans / question",
            "pack's spans",
            "pack's spans (µs)",
            "usage meter (µs)",
            "added, estimated (µs)",
            "added, A/B (µs, quartiles)",
            "question (ms)",
        ],
        [
            [
                r["mode"],
                r["spans_per_question"],
                r["pack_spans_per_question"],
                f"{r['pack_spans_us']:.0f}",
                f"{r['meter_us']:.0f}",
                f"**{r['added_us_estimated']:.0f}**",
                f"{r['added_us_ab']:.0f} ({r['added_us_ab_iqr'][0]:.0f} to "
                f"{r['added_us_ab_iqr'][1]:.0f})",
                f"{r['question_ms']:.2f}",
            ]
            for r in rows
        ],
        align="lrrrrrrr",
    )
    write_results(
        "tracing_overhead",
        {"unit_costs_us": costs, "modes": rows, "questions": args.questions},
        [("Tracing off: what the pack's spans and its usage meter add to a question", table)],
        out=args.out,
        description=(
            f"A span's enter and exit with no tracing handler: {costs['span_bare']:.1f} µs "
            f"({costs['span_handlers_on']:.1f} µs once the usage meter's handlers are "
            f"registered, {costs['span_in_meter']:.1f} µs inside an open meter); one "
            f"`with metered():` block: {costs['meter_block']:.1f} µs. Whole questions "
            f"(`pack.run`, scripted LLM), {args.questions * args.rounds} per mode; fusion on "
            "its async path."
        ),
        notes=[
            "`pack's spans` is the spans the pack adds to a question times a span's cost inside "
            "a meter; `usage meter` is what the meter's handlers add to every span of the "
            "question (the pack's and LlamaIndex's own) plus the engine's `metered()` block; "
            "`added, estimated` is their sum: the figure the target (at most 1 ms a question "
            "with tracing off) is read on.",
            "`added, A/B` times the same questions with the pack's span decorators on and "
            "taken off, alternated question by question (which side goes first alternates "
            "too): the median of the paired differences and its quartiles. It checks the "
            "estimate's order of magnitude; on a shared 2-CPU machine the spread between two "
            "questions is larger than what is measured.",
        ],
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
