"""Indexing cost against corpus size: ``RagPack(documents)`` beside the stock LlamaIndex recipes
(``VectorStoreIndex`` over ``MilvusVectorStore``, Milvus Lite: dense, and hybrid with Milvus' own
``BM25BuiltInFunction``, the peer of the pack's default mode) on the same chunks, at 2k to 100k
synthetic documents (about 180 words each, one chunk each) with a cheap hashed 384-d embedding,
so the model is out of the picture (``profile_indexing.py`` has the bundled model's 8-article
point).

Each side runs in a fresh process pinned to ``--cores`` CPUs. Measured: index time, peak RSS
(Milvus Lite runs inside the process, so its memory counts), and the median query time of 20
questions per mode after one warm-up question: the pack's default mode (``hybrid_convex``),
``vector`` and ``bm25`` as a new process meets them (the in-memory copies fall due on the
fourth question and are read in a background thread meanwhile; the slowest question shows a
question that waits), the default mode again once the copies are held, the default mode again
with the in-memory copies off (``RAG_PACK_MEMORY_COPIES=off``: every search in Lite), whether
its top 10 equal the copies' (up to ties) for every question, and the stock recipes' dense and
hybrid retrievers.

Run:  python benchmarks/bench_indexing_scale.py [--sizes 2000,20000,60000,100000] [--cores 2]
Writes ``indexing_scale.json``, ``indexing_scale.md`` and ``indexing_scale.png`` (log-log).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, resolve_out, write_results
from profile_indexing import WORDS, corpus, rss_mb, stock_retriever, stock_store

os.environ.setdefault("HF_HUB_OFFLINE", "1")
QUESTIONS = 20
PACK_MODES = ("hybrid_convex", "vector", "bm25")


def questions() -> list[str]:
    rng = random.Random(1)
    return [" ".join(rng.sample(WORDS, 3)) for _ in range(QUESTIONS + 1)]


def timed_queries(retrieve: Any) -> tuple[float, float, float, list[Any]]:
    """First question's seconds, the median and the slowest of the others (a question that
    waits for a copy to be read into memory shows there), and every answer."""
    asked = questions()
    start = time.perf_counter()
    answers = [retrieve(asked[0])]
    first = time.perf_counter() - start
    times = []
    for q in asked[1:]:
        start = time.perf_counter()
        answers.append(retrieve(q))
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), max(times), answers


def same_top(a: list[Any], b: list[Any]) -> bool:
    """The same hits with the same scores, in the same order up to ties of equal scores."""

    def groups(hits: list[Any]) -> list[frozenset[str]]:
        out: list[tuple[float, set[str]]] = []
        for h in hits:
            if out and abs(h.score - out[-1][0]) <= 1e-5 * max(1.0, abs(h.score)):
                out[-1][1].add(h.node.node_id)
            else:
                out.append((h.score, {h.node.node_id}))
        return [frozenset(ids) for _, ids in out]

    ga, gb = groups(a), groups(b)
    # the last group may be cut at the limit: only its size must match
    return ga[:-1] == gb[:-1] and (len(ga[-1]) == len(gb[-1]) if ga else not gb)


class ChildPeak(threading.Thread):
    """The largest resident set of this process's child processes (the BM25 analysis helper),
    and the largest sum of this process's and its children's, polled every 0.2 s.
    ``RUSAGE_CHILDREN``'s ``ru_maxrss`` is no use here: it counts the parent's pages a child
    shares between its fork and its exec."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_mb = 0.0
        self.together_mb = 0.0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            children = 0.0
            for task in Path("/proc/self/task").iterdir():
                try:
                    pids = (task / "children").read_text().split()
                except OSError:
                    continue
                for pid in pids:
                    try:
                        status = Path(f"/proc/{pid}/status").read_text()
                    except OSError:
                        continue
                    for line in status.splitlines():
                        if line.startswith("VmRSS:"):
                            children += int(line.split()[1]) / 1024
            self.peak_mb = max(self.peak_mb, children)
            self.together_mb = max(self.together_mb, rss_mb()[0] + children)

    def stop(self) -> float:
        self._stop_event.set()
        self.join()
        return self.peak_mb


def row_check() -> str:
    """How this process's pymilvus checks a VARCHAR value of a row insert: ``per character``
    (pymilvus as installed) or ``per value`` (after the pack opened a client:
    ``milvus.client_open.check_varchar_rows_by_value``)."""
    from pymilvus import DataType
    from pymilvus.client import entity_helper

    check = getattr(entity_helper, "_ROW_SCALAR_NORMALIZERS", {}).get(DataType.VARCHAR)
    return "per character" if getattr(check, "__name__", "") == "<lambda>" else "per value"


def run_pack(n: int, uri: str) -> dict[str, Any]:
    from llama_index_rag_pack.milvus.vector_memory import forget_vectors, wait_for_copies
    from llama_index_rag_pack.pack.rag_pack import RagPack

    docs, embed = corpus(f"synthetic:{n}")
    helper = ChildPeak()
    helper.start()
    start = time.perf_counter()
    pack = RagPack(docs, uri=uri, collection_name="scale", embed_model=embed, llm="none")
    index_s = time.perf_counter() - start
    del docs
    # the BM25 analysis helper process ends when the insert ends: the peak of the two is the
    # pack's own high-water mark or the largest sum of both sampled while the helper ran;
    # ``*_upper_mb`` counts the helper as if it peaked at the pack's own peak
    helper_mb = helper.stop()
    together = helper.together_mb
    result: dict[str, Any] = {
        "chunks": pack.count(),
        "index_s": index_s,
        "index_peak_mb": max(rss_mb()[1], together),
        "index_peak_upper_mb": rss_mb()[1] + helper_mb,
        "helper_peak_mb": helper_mb,
        "row_check": row_check(),
    }
    answers = {}
    start = time.perf_counter()
    for mode in PACK_MODES:  # the copies fall due on the fourth question, read meanwhile
        retriever = pack.retriever(mode, similarity_top_k=10)
        first, p50, worst, answers[mode] = timed_queries(retriever.retrieve)
        result[mode] = {"first_s": first, "p50_s": p50, "max_s": worst}
    asked_s = time.perf_counter() - start
    wait_for_copies()
    result["copies_after_s"] = time.perf_counter() - start  # from the modes' first question
    result["copies_read_by_then"] = result["copies_after_s"] <= asked_s + 0.01
    retriever = pack.retriever("hybrid_convex", similarity_top_k=10)
    first, p50, worst, answers["hybrid_convex"] = timed_queries(retriever.retrieve)
    result["hybrid_convex_held"] = {"first_s": first, "p50_s": p50, "max_s": worst}
    result["peak_mb"] = max(rss_mb()[1], together)
    result["peak_upper_mb"] = rss_mb()[1] + helper_mb
    os.environ["RAG_PACK_MEMORY_COPIES"] = "off"
    pack.forget_engines()
    store = pack.vector_store
    for name in (store.collection_name, f"{store.collection_name}__sentences"):
        forget_vectors(store.client, name)
    retriever = pack.retriever("hybrid_convex", similarity_top_k=10)
    first, p50, worst, off = timed_queries(retriever.retrieve)
    result["hybrid_convex_copies_off"] = {"first_s": first, "p50_s": p50, "max_s": worst}
    result["same_top10_copies_off"] = sum(
        same_top(a, b) for a, b in zip(answers["hybrid_convex"], off, strict=True)
    )
    result["questions"] = len(off)
    return result


def run_stock(n: int, uri: str, hybrid: bool = False) -> dict[str, Any]:
    """The stock recipe: dense, or ``hybrid`` (Milvus' own BM25 function, hybrid search)."""
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_rag_pack.documents.chunking import split_documents

    docs, embed = corpus(f"synthetic:{n}")
    start = time.perf_counter()
    nodes = split_documents(docs)
    store = stock_store(uri, hybrid)
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed
    )
    store.client.flush("stock")
    index_s = time.perf_counter() - start
    del docs, nodes
    result: dict[str, Any] = {
        "index_s": index_s,
        "index_peak_mb": rss_mb()[1],
        "row_check": row_check(),  # pymilvus as installed: nothing of the pack's changes it
    }
    mode = "hybrid" if hybrid else "vector"
    first, p50, worst, _ = timed_queries(stock_retriever(index, hybrid, top_k=10).retrieve)
    result[mode] = {"first_s": first, "p50_s": p50, "max_s": worst}
    result["peak_mb"] = rss_mb()[1]
    return result


SIDES = ("stock", "stock_hybrid", "pack", "pack_alone")
#: The pack without its BM25 analysis helper process (``RAG_PACK_INDEX_WORKER=off``), run at
#: sizes up to this one: the helper's share of the time, in the same run.
ALONE_UP_TO = 20_000


def child(side: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "scale.db")
        if side == "pack_alone":
            os.environ["RAG_PACK_INDEX_WORKER"] = "off"
            result = run_pack(n, uri)
        elif side == "pack":
            result = run_pack(n, uri)
        else:
            result = run_stock(n, uri, hybrid=side == "stock_hybrid")
    print("RESULT " + json.dumps(result), flush=True)


def plot(rows: list[dict[str, Any]], out: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ns = [r["n"] for r in rows]
    series = (
        ("index seconds", lambda s: s["index_s"]),
        ("peak RSS (MB)", lambda s: s["peak_mb"]),
        ("query p50 (ms)", None),
    )
    for ax, (label, get) in zip(axes, series, strict=True):
        if get is None:
            ax.plot(
                ns,
                [
                    1000 * r["pack"].get("hybrid_convex_held", r["pack"]["hybrid_convex"])["p50_s"]
                    for r in rows
                ],  # fmt: skip
                "o-",
                label="pack default (copies)",
            )
            ax.plot(
                ns,
                [1000 * r["pack"]["hybrid_convex_copies_off"]["p50_s"] for r in rows],
                "s--",
                label="pack default (copies off)",
            )
            ax.plot(ns, [1000 * r["stock"]["vector"]["p50_s"] for r in rows], "^:",
                    label="stock dense")  # fmt: skip
            ax.plot(ns, [1000 * r["stock_hybrid"]["hybrid"]["p50_s"] for r in rows], "s-.",
                    label="stock hybrid")  # fmt: skip
        else:
            ax.plot(ns, [get(r["pack"]) for r in rows], "o-", label="pack")
            ax.plot(ns, [get(r["stock_hybrid"]) for r in rows], "s-.", label="stock hybrid")
            ax.plot(ns, [get(r["stock"]) for r in rows], "^:", label="stock dense")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("documents (one chunk each)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("Indexing and query cost against corpus size (hashed 384-d embedding, Lite)")
    path = resolve_out(out) / "indexing_scale.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return f"Plot: `{path.name}` (index time, peak RSS and query p50 against size, log-log)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,20000,60000,100000")
    parser.add_argument("--cores", type=int, default=2, help="pin to this many CPUs (0: all)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    add_out_argument(parser)
    args = parser.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        row: dict[str, Any] = {"n": n}
        for side in SIDES:
            if side == "pack_alone" and n > ALONE_UP_TO:
                continue
            out = subprocess.run(
                [sys.executable, __file__, "--child", side, str(n), "--cores", str(args.cores)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            row[side] = json.loads(out.split("RESULT ", 1)[1])
            print(n, side, f"{row[side]['index_s']:.1f} s", f"{row[side]['peak_mb']:.0f} MB",
                  flush=True)  # fmt: skip
        rows.append(row)
    cost = []
    queries = []
    for r in rows:
        p, s, h = r["pack"], r["stock"], r["stock_hybrid"]
        alone = r.get("pack_alone")
        cost.append(
            [f"{r['n']:,}", f"{p['index_s']:.1f}",
             f"{alone['index_s']:.1f} ({alone['index_s'] / h['index_s']:.2f}x)" if alone else "",
             f"{s['index_s']:.1f}", f"{h['index_s']:.1f}",
             f"**{p['index_s'] / h['index_s']:.2f}x**", f"{p['peak_mb']:.0f}",
             f"{p['peak_upper_mb']:.0f}" if "peak_upper_mb" in p else "",
             f"{p['helper_peak_mb']:.0f}", f"{s['peak_mb']:.0f}", f"{h['peak_mb']:.0f}",
             f"**{p['peak_mb'] / h['peak_mb']:.2f}x**"]
        )  # fmt: skip
        held = p.get("hybrid_convex_held", p["hybrid_convex"])
        queries.append(
            [f"{r['n']:,}", f"{1000 * held['p50_s']:.1f}"]
            + [f"{1000 * p[m]['p50_s']:.1f}" for m in PACK_MODES]
            + [f"{p['copies_after_s']:.1f}" if "copies_after_s" in p else "",
               f"{1000 * p['hybrid_convex_copies_off']['p50_s']:.1f}",
               f"{p['same_top10_copies_off']}/{p['questions']}",
               f"{1000 * s['vector']['p50_s']:.1f}",
               f"{1000 * h['hybrid']['p50_s']:.1f}",
               f"{p['hybrid_convex']['first_s']:.2f}",
               f"{p['hybrid_convex'].get('max_s', float('nan')):.2f}",
               f"{h['hybrid'].get('max_s', float('nan')):.2f}"]
        )  # fmt: skip
    note = plot(rows, args.out)
    write_results(
        "indexing_scale",
        {"rows": rows},
        [
            (
                "Index time and peak memory",
                md_table(
                    [
                        "documents",
                        "pack s",
                        "pack without helper s (/ hybrid)",
                        "stock dense s",
                        "stock hybrid s",
                        "pack / hybrid time",
                        "pack peak MB (with helper)",
                        "the same, helper at its peak throughout",
                        "helper peak MB",
                        "stock dense peak MB",
                        "stock hybrid peak MB",
                        "pack / hybrid memory",
                    ],
                    cost,
                    "rrrrrrrrrrrr",
                ),
            ),
            (
                "Query p50 (ms, 20 questions after one warm-up, top 10); the slowest of them (s)",
                md_table(
                    [
                        "documents",
                        "pack default, copies held",
                        "pack default, first 21",
                        "pack vector",
                        "pack bm25",
                        "copies held after s",
                        "pack default, copies off",
                        "same top 10 with copies off",
                        "stock dense",
                        "stock hybrid",
                        "pack first question s",
                        "pack default slowest s",
                        "stock hybrid slowest s",
                    ],
                    queries,
                    "rrrrrrrrrrrrr",
                ),
            ),
        ],  # fmt: skip
        out=args.out,
        description=(
            "Synthetic documents of about 180 words (one chunk each) with a hashed 384-d "
            "embedding; `RagPack(documents)` (sentence index on, BM25 on: the defaults) beside "
            "the stock `VectorStoreIndex` over `MilvusVectorStore` on Milvus Lite, dense and "
            "hybrid (`enable_sparse=True` with Milvus' own `BM25BuiltInFunction`, queried with "
            "`vector_store_query_mode='hybrid'`), on the same chunks, each in a fresh process "
            f"pinned to {args.cores} cores. The pack's questions: 21 per mode as a new process "
            "meets them (its copies fall due on the fourth question of the default mode and "
            "are read in a background thread while Lite answers; `copies held after s`, from "
            "the first question, includes the wait for them after the 63 questions when they "
            "took longer), then the default's 21 again from the copies. Peak RSS (after "
            "indexing, the questions and the copies) "
            "includes Milvus Lite (it runs in the process); the pack's is its own high-water "
            "mark or the largest sum of its and its BM25 analysis helper's resident sets, "
            "sampled every 0.2 s while the helper runs, whichever is larger (beside it, the "
            "upper bound that adds the helper's peak to the pack's own). `pack without "
            f"helper`: `RAG_PACK_INDEX_WORKER=off`, up to {ALONE_UP_TO:,} documents. The "
            "stock sides run pymilvus as installed, whose row inserts check each VARCHAR value "
            "one character at a time; the pack's client checks each value once (the same "
            "check, `milvus.client_open.check_varchar_rows_by_value`); the json records each "
            f"side's `row_check`. {note}"
        ),
    )
    print("wrote indexing_scale.json, indexing_scale.md and indexing_scale.png")


if __name__ == "__main__":
    main()
