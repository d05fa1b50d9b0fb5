"""Indexing cost against corpus size: ``RagPack(documents)`` beside the stock LlamaIndex recipes
(``VectorStoreIndex`` over ``MilvusVectorStore``, Milvus Lite: dense, and hybrid with Milvus' own
``BM25BuiltInFunction``, the peer of the pack's default mode) on the same chunks, at 2k to 100k
synthetic documents (about 180 words each, one chunk each) with a cheap hashed 384-d embedding,
so the model is out of the picture (``profile_indexing.py`` has the bundled model's 8-article
point).

Each side runs in a fresh process pinned to ``--cores`` CPUs. Measured: index time, the peak
resident set of the whole process tree (Milvus Lite runs inside the process, the pack's BM25
analysis helper is its child; sampled from the parent every 0.2 s) while indexing and up to the
end of the questions, the resident set of a new process that opened the built collection and
asked one question, and the median query time of 20
questions per mode after one warm-up question: the pack's default mode (``hybrid_convex``),
``vector`` and ``bm25`` as a new process meets them (the in-memory copies fall due on the
fourth question and are read in a background thread meanwhile; the slowest question shows a
question that waits), the default mode again once the copies are held, the default mode again
with the in-memory copies off (``RAG_PACK_MEMORY_COPIES=off``: every search in Lite), whether
its top 10 equal the copies' (up to ties) for every question, and the stock recipes' dense and
hybrid retrievers.

``--shape wide`` swaps the documents for 120-240 words drawn Zipf-like from a 20,000-word
vocabulary, in sentences, at chunk size 512 (a shape the pack was not tuned on).

Run:  python benchmarks/bench_indexing_scale.py [--sizes 2000,20000,100000] [--shape bench|wide]
      [--cores 2] [--alone]
Writes ``indexing_scale.json``, ``.md`` and ``.png`` (log-log); ``indexing_scale_wide.*`` for
``--shape wide``.
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
from profile_indexing import WORDS, corpus, hashed_embedding, rss_mb, stock_retriever, stock_store

os.environ.setdefault("HF_HUB_OFFLINE", "1")
QUESTIONS = 20
PACK_MODES = ("hybrid_convex", "vector", "bm25")
#: Document shapes: ``bench``, about 180 words from a 41-word vocabulary, one sentence and one
#: chunk each, chunk size 256 (the default); ``wide``, about 180 words drawn Zipf-like from a
#: 20,000-word vocabulary in sentences of 6 to 30 words, chunk size 512.
SHAPES = ("bench", "wide")
WIDE_VOCABULARY = 20_000
WIDE_CHUNK_SIZE = 512


def wide_words() -> list[str]:
    """20,000 distinct pronounceable words, the same in every run."""
    rng = random.Random(7)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    words: dict[str, None] = {}
    while len(words) < WIDE_VOCABULARY:
        words["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))] = None
    return list(words)


def wide_corpus(count: int) -> list[Any]:
    """``count`` documents of 120-240 words, Zipf-like over :func:`wide_words`, in sentences."""
    from itertools import accumulate

    from llama_index.core import Document

    words = wide_words()
    weights = list(accumulate(1.0 / (rank + 10) for rank in range(len(words))))
    rng = random.Random(0)
    docs = []
    for i in range(count):
        sentences, left = [], rng.randint(120, 240)
        while left > 0:
            n = min(left, rng.randint(6, 30))
            drawn = rng.choices(words, cum_weights=weights, k=n)
            sentences.append(" ".join(drawn).capitalize() + ".")
            left -= n
        docs.append(
            Document(text=" ".join(sentences), id_=f"doc-{i}", metadata={"title": f"doc {i}"})
        )
    return docs


def shape_corpus(shape: str, n: int) -> tuple[list[Any], Any, int | None]:
    """The documents, the embedding and the chunk size (``None``: the default) of a shape."""
    if shape == "wide":
        os.environ["PYTHONHASHSEED"] = "0"
        return wide_corpus(n), hashed_embedding(), WIDE_CHUNK_SIZE
    docs, embed = corpus(f"synthetic:{n}")
    return docs, embed, None


def questions(shape: str = "bench") -> list[str]:
    rng = random.Random(1)
    vocabulary = WORDS if shape == "bench" else wide_words()[:2000]
    return [" ".join(rng.sample(vocabulary, 3)) for _ in range(QUESTIONS + 1)]


def timed_queries(retrieve: Any, shape: str) -> tuple[float, float, float, list[Any]]:
    """First question's seconds, the median and the slowest of the others (a question that
    waits for a copy to be read into memory shows there), and every answer."""
    asked = questions(shape)
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


class TreePeak(threading.Thread):
    """The largest resident set of a process and all its descendants together (Milvus Lite runs
    in the process; the BM25 analysis helper is a child), sampled from outside every 0.2 s.
    ``peak_mb`` is read at any time; ``mark()`` keeps the peak so far under a name."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        import psutil

        self.root = psutil.Process(pid)
        self.peak_mb = 0.0
        self.marks: dict[str, float] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        import psutil

        total = 0
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        self.peak_mb = max(self.peak_mb, total / 2**20)

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            self.sample()

    def mark(self, name: str) -> None:
        self.sample()
        self.marks[name] = self.peak_mb

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def row_check() -> str:
    """How this process's pymilvus checks a VARCHAR value of a row insert: ``per character``
    (pymilvus as installed) or ``per value`` (after the pack opened a client:
    ``milvus.client_open.check_varchar_rows_by_value``)."""
    from pymilvus import DataType
    from pymilvus.client import entity_helper

    check = getattr(entity_helper, "_ROW_SCALAR_NORMALIZERS", {}).get(DataType.VARCHAR)
    return "per character" if getattr(check, "__name__", "") == "<lambda>" else "per value"


def phase(name: str) -> None:
    """Tell the parent (sampling this process tree) that a phase ended."""
    print(f"PHASE {name}", flush=True)


def run_pack(n: int, uri: str, shape: str) -> dict[str, Any]:
    from llama_index_rag_pack.milvus.vector_memory import forget_vectors, wait_for_copies
    from llama_index_rag_pack.pack.rag_pack import RagPack

    docs, embed, chunk_size = shape_corpus(shape, n)
    sizes = {"chunk_size": chunk_size} if chunk_size else {}
    start = time.perf_counter()
    pack = RagPack(docs, uri=uri, collection_name="scale", embed_model=embed, llm="none", **sizes)
    index_s = time.perf_counter() - start
    del docs
    phase("indexed")
    result: dict[str, Any] = {
        "chunks": pack.count(),
        "index_s": index_s,
        "own_index_peak_mb": rss_mb()[1],
        "row_check": row_check(),
    }
    answers = {}
    start = time.perf_counter()
    for mode in PACK_MODES:  # the copies fall due on the fourth question, read meanwhile
        retriever = pack.retriever(mode, similarity_top_k=10)
        first, p50, worst, answers[mode] = timed_queries(retriever.retrieve, shape)
        result[mode] = {"first_s": first, "p50_s": p50, "max_s": worst}
    asked_s = time.perf_counter() - start
    wait_for_copies()
    result["copies_after_s"] = time.perf_counter() - start  # from the modes' first question
    result["copies_read_by_then"] = result["copies_after_s"] <= asked_s + 0.01
    retriever = pack.retriever("hybrid_convex", similarity_top_k=10)
    first, p50, worst, answers["hybrid_convex"] = timed_queries(retriever.retrieve, shape)
    result["hybrid_convex_held"] = {"first_s": first, "p50_s": p50, "max_s": worst}
    phase("asked")
    os.environ["RAG_PACK_MEMORY_COPIES"] = "off"
    pack.forget_engines()
    store = pack.vector_store
    for name in (store.collection_name, f"{store.collection_name}__sentences"):
        forget_vectors(store.client, name)
    retriever = pack.retriever("hybrid_convex", similarity_top_k=10)
    first, p50, worst, off = timed_queries(retriever.retrieve, shape)
    result["hybrid_convex_copies_off"] = {"first_s": first, "p50_s": p50, "max_s": worst}
    result["same_top10_copies_off"] = sum(
        same_top(a, b) for a, b in zip(answers["hybrid_convex"], off, strict=True)
    )
    result["questions"] = len(off)
    return result


def run_stock(n: int, uri: str, shape: str, hybrid: bool = False) -> dict[str, Any]:
    """The stock recipe: dense, or ``hybrid`` (Milvus' own BM25 function, hybrid search)."""
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_rag_pack.documents.chunking import split_documents

    docs, embed, chunk_size = shape_corpus(shape, n)
    sizes = {"chunk_size": chunk_size} if chunk_size else {}
    start = time.perf_counter()
    nodes = split_documents(docs, **sizes)
    store = stock_store(uri, hybrid)
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed
    )
    store.client.flush("stock")
    index_s = time.perf_counter() - start
    del docs, nodes
    phase("indexed")
    result: dict[str, Any] = {
        "chunks": store.client.get_collection_stats("stock")["row_count"],
        "index_s": index_s,
        "own_index_peak_mb": rss_mb()[1],
        "row_check": row_check(),  # pymilvus as installed: nothing of the pack's changes it
    }
    mode = "hybrid" if hybrid else "vector"
    retrieve = stock_retriever(index, hybrid, top_k=10).retrieve
    first, p50, worst, _ = timed_queries(retrieve, shape)
    result[mode] = {"first_s": first, "p50_s": p50, "max_s": worst}
    phase("asked")
    return result


def run_opened(uri: str, shape: str, side: str) -> dict[str, Any]:
    """A new process that opens the collection the ``pack`` or ``stock_hybrid`` side built and
    asks one question (the default mode; the stock recipe's hybrid search)."""
    _, embed, _ = shape_corpus(shape, 0)
    question = questions(shape)[0]
    start = time.perf_counter()
    if side == "pack_open":
        from llama_index_rag_pack.pack.rag_pack import RagPack

        pack = RagPack.open(uri=uri, collection_name="scale", embed_model=embed, llm="none")
        retriever = pack.retriever("hybrid_convex", similarity_top_k=10)
    else:
        from llama_index.core import VectorStoreIndex
        from llama_index.vector_stores.milvus import MilvusVectorStore
        from llama_index.vector_stores.milvus.utils import BM25BuiltInFunction

        store = MilvusVectorStore(
            uri=uri,
            collection_name="stock",
            overwrite=False,
            enable_sparse=True,
            sparse_embedding_function=BM25BuiltInFunction(),
        )
        store.client.load_collection("stock")  # Lite keeps a reopened collection released
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
        retriever = stock_retriever(index, hybrid=True, top_k=10)
    opened_s = time.perf_counter() - start
    hits = retriever.retrieve(question)
    return {
        "opened_s": opened_s,
        "answered_s": time.perf_counter() - start,
        "hits": len(hits),
        "rss_mb": rss_mb()[0],
        "own_peak_mb": rss_mb()[1],
    }


#: Sides, each in a fresh process: the two that open a built collection run after its builder.
SIDES = ("stock", "stock_hybrid", "pack", "pack_alone", "stock_hybrid_open", "pack_open")
#: The pack without its BM25 analysis helper process (``RAG_PACK_INDEX_WORKER=off``), run at
#: sizes up to this one with ``--alone``: the helper's share of the time, in the same run.
ALONE_UP_TO = 20_000


def child(side: str, n: int, uri: str, shape: str) -> None:
    if side in ("pack_open", "stock_hybrid_open"):
        result = run_opened(uri, shape, side)
    elif side == "pack_alone":
        os.environ["RAG_PACK_INDEX_WORKER"] = "off"
        result = run_pack(n, uri, shape)
    elif side == "pack":
        result = run_pack(n, uri, shape)
    else:
        result = run_stock(n, uri, shape, hybrid=side == "stock_hybrid")
    print("RESULT " + json.dumps(result), flush=True)


def run_side(side: str, n: int, uri: str, shape: str, cores: int) -> dict[str, Any]:
    """One side in a fresh process, its whole process tree sampled from here: ``index_peak_mb``
    up to the end of indexing, ``peak_mb`` up to the end of the questions with the copies held
    (the pack's questions with the copies off come after), ``open_peak_mb`` for an opening
    side."""
    command = [sys.executable, __file__, "--child", side, str(n), uri, "--shape", shape]
    proc = subprocess.Popen([*command, "--cores", str(cores)], stdout=subprocess.PIPE, text=True)
    tree = TreePeak(proc.pid)
    tree.start()
    result: dict[str, Any] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("PHASE "):
            tree.mark(line.split()[1])
        elif line.startswith("RESULT "):
            tree.mark("done")
            result = json.loads(line[len("RESULT ") :])
    tree.stop()
    if proc.wait() != 0 or not result:
        raise SystemExit(f"{side} at {n} failed (exit {proc.returncode})")
    if side.endswith("_open"):
        result["open_peak_mb"] = tree.marks["done"]
    else:
        result["index_peak_mb"] = tree.marks["indexed"]
        result["peak_mb"] = tree.marks["asked"]
    return result


def plot(rows: list[dict[str, Any]], out: str, name: str) -> str:
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
    path = resolve_out(out) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return f"Plot: `{path.name}` (index time, peak RSS and query p50 against size, log-log)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,20000,100000")
    parser.add_argument("--shape", default="bench", choices=SHAPES)
    parser.add_argument("--cores", type=int, default=2, help="pin to this many CPUs (0: all)")
    parser.add_argument(
        "--alone", action="store_true", help="also the pack without its helper, up to 20,000"
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    add_out_argument(parser)
    args = parser.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2], args.shape)
        return
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        row: dict[str, Any] = {"n": n}
        with tempfile.TemporaryDirectory() as tmp:
            for side in SIDES:
                if side == "pack_alone" and (not args.alone or n > ALONE_UP_TO):
                    continue
                db = "pack" if side.startswith("pack") else side.removesuffix("_open")
                uri = str(Path(tmp) / f"{db}.db")
                row[side] = run_side(side, n, uri, args.shape, args.cores)
                shown = {k: round(v, 1) for k, v in row[side].items() if k.endswith(("_mb", "_s"))}
                print(n, side, shown, flush=True)
        rows.append(row)
    name = "indexing_scale" if args.shape == "bench" else f"indexing_scale_{args.shape}"
    note = plot(rows, args.out, name)
    write_results(name, {"shape": args.shape, "rows": rows}, tables(rows), out=args.out,
                  description=describe(args.shape, args.cores, note))  # fmt: skip
    print(f"wrote {name}.json, {name}.md and {name}.png")


def peaks(side: dict[str, Any]) -> dict[str, Any]:
    """``side`` with its peaks as reported: the tree's sample or the process's own high-water
    mark (``VmHWM``, which catches a spike shorter than the sampling), whichever is larger."""
    own = side.get("own_index_peak_mb", 0.0)
    index_peak = max(side["index_peak_mb"], own)
    return {**side, "index_peak_mb": index_peak, "peak_mb": max(side["peak_mb"], index_peak)}


def tables(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    cost, queries = [], []
    for r in rows:
        p, s, h = (peaks(r[side]) for side in ("pack", "stock", "stock_hybrid"))
        alone = r.get("pack_alone")
        po, ho = r["pack_open"], r["stock_hybrid_open"]
        cost.append(
            [f"{r['n']:,}", f"{p['chunks']:,}", f"{p['index_s']:.1f}", f"{h['index_s']:.1f}",
             f"**{p['index_s'] / h['index_s']:.2f}x**",
             f"{alone['index_s']:.1f} ({alone['index_s'] / h['index_s']:.2f}x)" if alone else "",
             f"{s['index_s']:.1f}",
             f"{p['index_peak_mb']:.0f}", f"{h['index_peak_mb']:.0f}",
             f"**{p['index_peak_mb'] / h['index_peak_mb']:.2f}x**",
             f"{p['peak_mb']:.0f}", f"{h['peak_mb']:.0f}",
             f"**{p['peak_mb'] / h['peak_mb']:.2f}x**", f"{s['peak_mb']:.0f}",
             f"{po['rss_mb']:.0f}", f"{ho['rss_mb']:.0f}",
             f"**{po['rss_mb'] / ho['rss_mb']:.2f}x**",
             f"{po['answered_s']:.2f}", f"{ho['answered_s']:.2f}"]
        )  # fmt: skip
        held = p.get("hybrid_convex_held", p["hybrid_convex"])
        queries.append(
            [f"{r['n']:,}", f"{1000 * held['p50_s']:.1f}"]
            + [f"{1000 * p[m]['p50_s']:.1f}" for m in PACK_MODES]
            + [f"{p['copies_after_s']:.1f}",
               f"{1000 * p['hybrid_convex_copies_off']['p50_s']:.1f}",
               f"{p['same_top10_copies_off']}/{p['questions']}",
               f"{1000 * s['vector']['p50_s']:.1f}",
               f"{1000 * h['hybrid']['p50_s']:.1f}",
               f"{p['hybrid_convex']['first_s']:.2f}",
               f"{p['hybrid_convex']['max_s']:.2f}",
               f"{h['hybrid']['max_s']:.2f}"]
        )  # fmt: skip
    cost_head = [
        "documents", "pack chunks", "pack s", "stock hybrid s", "pack / hybrid time",
        "pack without helper s (/ hybrid)", "stock dense s",
        "pack indexing peak MB", "stock hybrid indexing peak MB", "pack / hybrid indexing peak",
        "pack peak with questions MB", "stock hybrid peak with questions MB",
        "pack / hybrid peak with questions", "stock dense peak MB",
        "pack opened + 1 question MB", "stock hybrid opened + 1 question MB",
        "pack / hybrid opened",
        "pack open + 1 question s", "stock hybrid open + 1 question s",
    ]  # fmt: skip
    query_head = [
        "documents", "pack default, copies held", "pack default, first 21", "pack vector",
        "pack bm25", "copies held after s", "pack default, copies off",
        "same top 10 with copies off", "stock dense", "stock hybrid", "pack first question s",
        "pack default slowest s", "stock hybrid slowest s",
    ]  # fmt: skip
    return [
        ("Index time and peak memory (whole process tree)",
         md_table(cost_head, cost, "r" * len(cost_head))),
        ("Query p50 (ms, 20 questions after one warm-up, top 10); the slowest of them (s)",
         md_table(query_head, queries, "r" * len(query_head))),
    ]  # fmt: skip


def describe(shape: str, cores: int, note: str) -> str:
    documents = (
        "Synthetic documents of about 180 words from a 41-word vocabulary (one sentence, one "
        "chunk each, chunk size 256)"
        if shape == "bench"
        else "Synthetic documents of 120-240 words drawn Zipf-like from a 20,000-word "
        "vocabulary in sentences of 6-30 words (chunk size 512)"
    )
    return (
        f"{documents} with a hashed 384-d embedding; `RagPack(documents)` (sentence index on, "
        "BM25 on: the defaults) beside the stock `VectorStoreIndex` over `MilvusVectorStore` on "
        "Milvus Lite, dense and hybrid (`enable_sparse=True` with Milvus' own "
        "`BM25BuiltInFunction`, queried with `vector_store_query_mode='hybrid'`), on the same "
        f"chunks, each in a fresh process pinned to {cores} cores. Memory is the resident set "
        "of the whole process tree (Milvus Lite runs in the process; the pack's BM25 analysis "
        "helper is a child), sampled from the parent every 0.2 s, or the indexing process's "
        "own high-water mark when larger (a spike shorter than the sampling): the indexing "
        "peak up to the end of the insert and its flush, the peak with questions up to the end "
        "of the questions with the in-memory copies held (the pack: 21 per mode as a new process "
        "meets them, its copies read in a background thread from the fourth, then the "
        "default's 21 again from the copies; the stock hybrid recipe: 21). `opened + 1 "
        "question`: the resident set of a new process that opened the built collection and "
        f"asked one question of the default mode (the stock recipe's hybrid search). {note}"
    )


if __name__ == "__main__":
    main()
