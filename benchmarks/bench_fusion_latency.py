"""FusionRetriever latency vs core QueryFusionRetriever, on the same parts.

Setup: 4 queries (the original + 3 written by the LLM) x 2 retrievers. The LLM is a ScriptedLLM
that takes ``--llm-delay`` seconds per call; each retriever takes ``--search-delay`` seconds per
search (``time.sleep`` in sync calls, ``asyncio.sleep`` in async ones) and returns 10 nodes.
Both implementations get the same LLM reply, the same retrievers and reciprocal-rank fusion.

Run:  python benchmarks/bench_fusion_latency.py [--repeats 3] [--llm-delay 0.2]
      [--search-delay 0.2] [--out benchmarks/results]

Writes ``fusion_latency.json`` and ``fusion_latency.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import time
from collections.abc import Callable

from _results import add_out_argument, md_table, write_results
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.fusion.rag_fusion import FusionRetriever
from llama_index_rag_pack.testing import ScriptedLLM

REPLY = (
    "Here are 3 search queries:\n"
    "1. milvus keyword search\n2. BM25 sparse vectors in Milvus\n"
    "3. hybrid dense and sparse search\n"
)
QUERY = "How does Milvus run keyword search?"


class LatencyRetriever(BaseRetriever):
    """Returns 10 nodes chosen from a pool of 40 by a hash of the query, after a delay."""

    def __init__(self, name: str, delay: float) -> None:
        self.name, self.delay = name, delay
        self.pool = [TextNode(id_=f"{name}-{i}", text=f"chunk {i} of {name}") for i in range(40)]
        super().__init__()

    def _nodes(self, query: str) -> list[NodeWithScore]:
        seed = int(hashlib.sha1(f"{self.name}:{query}".encode()).hexdigest(), 16)
        picks = [(seed >> (4 * i)) % 40 for i in range(10)]
        return [
            NodeWithScore(node=self.pool[p], score=1.0 - r / 10)
            for r, p in enumerate(dict.fromkeys(picks))
        ]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        time.sleep(self.delay)
        return self._nodes(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        await asyncio.sleep(self.delay)
        return self._nodes(query_bundle.query_str)


class SyncOnlyLatencyRetriever(LatencyRetriever):
    """The same, but with only a blocking ``_retrieve`` (like many third-party retrievers)."""

    _aretrieve = BaseRetriever._aretrieve


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--llm-delay", type=float, default=0.2)
    ap.add_argument("--search-delay", type=float, default=0.2)
    add_out_argument(ap)
    args = ap.parse_args()

    def parts(cls=LatencyRetriever):
        llm = ScriptedLLM(default_reply=REPLY, delay=args.llm_delay)
        retrievers = [cls("dense", args.search_delay), cls("bm25", args.search_delay)]
        return llm, retrievers

    def ours(max_concurrency: int = 16, cls=LatencyRetriever) -> FusionRetriever:
        llm, rs = parts(cls)
        return FusionRetriever(
            rs,
            llm=llm,
            num_queries=4,
            mode="reciprocal_rank",
            similarity_top_k=10,
            max_concurrency=max_concurrency,
        )

    def core(use_async: bool, cls=LatencyRetriever) -> QueryFusionRetriever:
        llm, rs = parts(cls)
        return QueryFusionRetriever(
            rs,
            llm=llm,
            num_queries=4,
            mode="reciprocal_rerank",
            similarity_top_k=10,
            use_async=use_async,
        )

    def in_running_loop(retriever) -> Callable[[], object]:
        """A sync retrieve() called from async code (a notebook cell, a web handler)."""

        async def call():
            return retriever.retrieve(QUERY)

        return lambda: asyncio.run(call())

    rows: list[tuple[str, str, float]] = []
    r = ours()
    rows.append(
        (
            "FusionRetriever (ours)",
            "aretrieve: gather under a semaphore",
            timed(lambda: asyncio.run(r.aretrieve(QUERY)), args.repeats),
        )
    )
    rows.append(
        (
            "FusionRetriever (ours)",
            "retrieve: thread pool",
            timed(lambda: r.retrieve(QUERY), args.repeats),
        )
    )
    r1 = ours(max_concurrency=1)
    rows.append(
        (
            "FusionRetriever (ours)",
            "retrieve, max_concurrency=1 (sequential)",
            timed(lambda: r1.retrieve(QUERY), args.repeats),
        )
    )
    rows.append(
        (
            "FusionRetriever (ours)",
            "aretrieve, max_concurrency=1 (sequential)",
            timed(lambda: asyncio.run(r1.aretrieve(QUERY)), args.repeats),
        )
    )
    c_async = core(use_async=True)
    rows.append(
        (
            "core QueryFusionRetriever",
            "aretrieve",
            timed(lambda: asyncio.run(c_async.aretrieve(QUERY)), args.repeats),
        )
    )
    rows.append(
        (
            "core QueryFusionRetriever",
            "retrieve, use_async=True",
            timed(lambda: c_async.retrieve(QUERY), args.repeats),
        )
    )
    c_sync = core(use_async=False)
    rows.append(
        (
            "core QueryFusionRetriever",
            "retrieve, use_async=False",
            timed(lambda: c_sync.retrieve(QUERY), args.repeats),
        )
    )

    rows.append(("", "", float("nan")))
    so, cso = ours(cls=SyncOnlyLatencyRetriever), core(True, cls=SyncOnlyLatencyRetriever)
    rows.append(
        (
            "FusionRetriever (ours)",
            "aretrieve, sync-only retrievers",
            timed(lambda: asyncio.run(so.aretrieve(QUERY)), args.repeats),
        )
    )
    rows.append(
        (
            "core QueryFusionRetriever",
            "aretrieve, sync-only retrievers",
            timed(lambda: asyncio.run(cso.aretrieve(QUERY)), args.repeats),
        )
    )
    rows.append(
        (
            "FusionRetriever (ours)",
            "retrieve inside a running event loop",
            timed(in_running_loop(ours()), args.repeats),
        )
    )
    try:
        t = timed(in_running_loop(core(True)), args.repeats)
        rows.append(
            ("core QueryFusionRetriever", "retrieve inside a running loop, use_async=True", t)
        )
    except Exception as e:  # core's run_async_tasks cannot nest event loops
        rows.append(
            (
                "core QueryFusionRetriever",
                f"retrieve inside a running loop: {type(e).__name__}",
                float("inf"),
            )
        )
    rows.append(
        (
            "core QueryFusionRetriever",
            "retrieve inside a running loop, use_async=False",
            timed(in_running_loop(core(False)), args.repeats),
        )
    )

    best = rows[0][2]
    sequential = args.llm_delay + 8 * args.search_delay
    concurrent = args.llm_delay + args.search_delay
    setup = (
        f"4 queries x 2 retrievers; LLM {args.llm_delay:.2f} s/call, "
        f"search {args.search_delay:.2f} s; median of {args.repeats}; "
        f"fully sequential floor = {sequential:.2f} s, fully concurrent floor = {concurrent:.2f} s"
    )
    table = md_table(
        ["implementation", "call", "latency s", "x ours async"],
        [(impl, call, f"{t:.3f}", f"{t / best:.2f}") for impl, call, t in rows if impl],
        align="llrr",
    )
    print(setup)
    print(table)
    write_results(
        "fusion_latency",
        {
            "llm_delay_s": args.llm_delay,
            "search_delay_s": args.search_delay,
            "repeats": args.repeats,
            "sequential_floor_s": sequential,
            "concurrent_floor_s": concurrent,
            "rows": [
                {"implementation": impl, "call": call, "seconds": t, "x_ours_async": t / best}
                for impl, call, t in rows
                if impl
            ],
        },
        [("FusionRetriever vs core QueryFusionRetriever", table)],
        out=args.out,
        description=setup + ".",
    )


if __name__ == "__main__":
    main()
