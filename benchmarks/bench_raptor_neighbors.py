"""The neighbour graph behind RAPTOR's global UMAP reduction: exact searches against HNSW.

UMAP needs every row's ``k`` nearest neighbours (``k = min(sqrt(n - 1), 50)`` for the global
reduction). An exact search costs ``n**2 * d``; at 100k rows it was a third of a clustering's
time. This script times, on the same vectors:

* scikit-learn's blocked brute force (what ``exact_neighbors`` used before),
* faiss's exact flat index (``exact_neighbors``, the default at every size),
* faiss's HNSW graph (``approximate_neighbors``, with ``exact_neighbors_up_to``), threaded and
  on one thread (the seeded, reproducible build),

and reports each one's recall of the exact neighbours (the share of the true ``k`` nearest found).
Then, end to end at ``--umap-sizes``: the seeded global UMAP reduction (``reduce_embeddings``) on
the exact graph and on the HNSW graph, since a faster search only pays if UMAP is not slower on
the graph it gets.
Data: the synthetic 60-topic vectors of ``bench_raptor_clustering.py`` at each ``--sizes``, and real
text: the shipped Wikipedia articles cut into 32-token pieces, embedded with the bundled model.

    python benchmarks/bench_raptor_neighbors.py [--sizes 10000 30000 100000] [--text-articles 103]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np
from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
K_CAP = 50


def sklearn_neighbors(x: np.ndarray, k: int) -> np.ndarray:
    from sklearn.neighbors import NearestNeighbors

    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    search = NearestNeighbors(n_neighbors=k, metric="euclidean", algorithm="brute").fit(unit)
    return search.kneighbors(unit)[1]


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    k = exact.shape[1]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found, exact, strict=True)]))


def measure(x: np.ndarray, label: str) -> list[dict[str, Any]]:
    from llama_index_rag_pack.raptor.dimension_reduction import (
        approximate_neighbors,
        exact_neighbors,
    )

    n = len(x)
    k = min(int(np.sqrt(n - 1)), K_CAP)
    methods = {
        "scikit-learn brute force (before)": lambda: sklearn_neighbors(x, k),
        "faiss flat, exact (exact_neighbors)": lambda: exact_neighbors(x, k)[0],
        "faiss HNSW (approximate_neighbors)": lambda: approximate_neighbors(x, k)[0],
        "faiss HNSW, one thread (seeded runs)": lambda: approximate_neighbors(
            x, k, deterministic=True
        )[0],
    }
    rows, exact = [], None
    for name, run in methods.items():
        start, cpu = time.perf_counter(), time.process_time()
        idx = run()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        if exact is None and "exact" in name:
            exact = idx
        rows.append(
            {"data": label, "n": n, "k": k, "method": name, "seconds": seconds, "cpu": cpu_seconds}
        )
        rows[-1]["idx"] = idx
        print(f"{label} n={n} {name}: {seconds:.1f} s", file=sys.stderr, flush=True)
    for row in rows:
        row["recall"] = recall(row.pop("idx"), exact)
    return rows


def umap_end_to_end(x: np.ndarray) -> list[dict[str, Any]]:
    """The seeded global reduction of ``x`` on the exact graph, then on the HNSW graph."""
    from llama_index_rag_pack.raptor import dimension_reduction as dr

    spent: dict[str, float] = {}
    for name in ("exact_neighbors", "approximate_neighbors"):
        search = getattr(dr, name)

        def timed(*args: Any, _search: Any = search, _name: str = name, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _search(*args, **kwargs)
            finally:
                spent[_name] = time.perf_counter() - start

        setattr(dr, name, timed)
    dr.reduce_embeddings(x[:300], 10, random_state=0)  # numba JIT warm-up, not timed
    n, rows = len(x), []
    k = min(int(np.sqrt(n - 1)), K_CAP)
    for graph, up_to in (("exact (faiss flat)", None), ("HNSW, one thread", 0)):
        spent.clear()
        start = time.perf_counter()
        dr.reduce_embeddings(x, 10, n_neighbors=k, random_state=0, exact_neighbors_up_to=up_to)
        total = time.perf_counter() - start
        search_s = sum(spent.values())
        rows.append({"n": n, "graph": graph, "search_s": search_s, "umap_s": total - search_s})
        print(f"umap n={n} {graph}: {total:.1f} s", file=sys.stderr, flush=True)
    return rows


def text_vectors(n_articles: int) -> np.ndarray:
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
    from llama_index_rag_pack.models.settings import resolve_embed_model

    nodes = split_documents(
        load_wikipedia_documents(limit=n_articles), chunk_size=32, chunk_overlap=0
    )
    texts = [node.get_content() for node in nodes]
    vectors = resolve_embed_model(None).get_text_embedding_batch(texts)
    return np.asarray(vectors, dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000, 100000])
    parser.add_argument("--text-articles", type=int, default=103, help="0 skips real text")
    parser.add_argument(
        "--umap-sizes", type=int, nargs="*", default=[100000], help="end-to-end UMAP sizes"
    )
    parser.add_argument("--name", default="raptor_neighbors")
    add_out_argument(parser)
    args = parser.parse_args()
    from bench_raptor_clustering import make_data

    rows = []
    for n in args.sizes:
        rows += measure(make_data(n), "60 synthetic topics")
    if args.text_articles:
        rows += measure(text_vectors(args.text_articles), "Wikipedia, 32-token pieces")
    umap_rows = []
    for n in args.umap_sizes:
        umap_rows += umap_end_to_end(make_data(n))
    table = md_table(
        ["data", "n", "k", "method", "time s", "CPU s", "recall of the exact k"],
        [
            (
                r["data"],
                r["n"],
                r["k"],
                r["method"],
                f"{r['seconds']:.1f}",
                f"{r['cpu']:.1f}",
                f"{r['recall']:.3f}",
            )
            for r in rows
        ],
        "lrrlrrr",
    )
    ratios = []
    for data, n in dict.fromkeys((r["data"], r["n"]) for r in rows):
        by = [r["seconds"] for r in rows if (r["data"], r["n"]) == (data, n)]
        sklearn_s, flat_s, hnsw_s, hnsw_one_s = by
        ratios.append(
            (
                data,
                n,
                f"{sklearn_s / flat_s:.1f}x",
                f"{flat_s / hnsw_s:.1f}x",
                f"{flat_s / hnsw_one_s:.1f}x",
            )
        )
    ratio_table = md_table(
        [
            "data",
            "n",
            "faiss flat vs scikit-learn",
            "HNSW vs faiss flat",
            "HNSW one thread vs flat",
        ],
        ratios,
        "lrrrr",
    )
    write_results(
        args.name,
        {"rows": rows, "umap_rows": umap_rows, "k_cap": K_CAP},
        [
            ("Neighbour search (k = min(sqrt(n - 1), 50), cosine)", table),
            ("Speed-ups (time ratios, same run)", ratio_table),
            (
                "End to end: seeded global UMAP reduction (60 synthetic topics, 10-d)",
                md_table(
                    ["n", "graph", "search s", "UMAP s (after the search)", "total s"],
                    [
                        (
                            r["n"],
                            r["graph"],
                            f"{r['search_s']:.1f}",
                            f"{r['umap_s']:.1f}",
                            f"{r['search_s'] + r['umap_s']:.1f}",
                        )
                        for r in umap_rows
                    ],
                    "rlrrr",
                ),
            ),
        ],
        out=args.out,
        description=(
            "The k nearest neighbours of every row, as RAPTOR's global UMAP reduction asks for "
            "them; recall is measured against faiss's exact flat search. HNSW: M 32, "
            "efConstruction 80, efSearch max(100, 2k). `cluster_embeddings` searches exactly at "
            "every size unless `exact_neighbors_up_to` is set (HNSW above that many rows)."
        ),
        headline_packages=("numpy", "scikit-learn"),
    )


if __name__ == "__main__":
    main()
