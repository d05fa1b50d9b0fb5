"""What a metadata filter costs: p50 latency of filtered against unfiltered retrieval, per mode.

On the evaluation harness's cached index of the ``wiki_qa_para`` corpus (3,602 chunks on Milvus
Lite), every dev question is retrieved by each mode without a filter and with a filter that keeps
half of the articles (``title in [...]``, core ``MetadataFilters``), the two taken in turn so the
machine's load falls on both alike. Also checked: every filtered result holds only kept articles.

Run:  python benchmarks/bench_filters.py [--cache-dir DIR] [--questions N]
Writes ``filters.json`` and ``filters.md`` to ``--out``.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from _results import md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MODES = ("vector", "bm25", "hybrid", "hybrid_weighted", "hybrid_convex")


def half_of_the_articles(chunks: dict[str, Any]) -> list[str]:
    titles = sorted({n.metadata.get("title") for n in chunks.values() if n.metadata.get("title")})
    return titles[::2]


def main() -> None:
    from bench_peer_quality import dev_questions
    from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters

    args, _, pack, chunks, questions = dev_questions(__doc__.splitlines()[0])
    kept = half_of_the_articles(chunks)
    filters = MetadataFilters(
        filters=[MetadataFilter(key="title", value=kept, operator=FilterOperator.IN)]
    )
    kept_share = sum(n.metadata.get("title") in kept for n in chunks.values()) / len(chunks)
    rows, results = [], {}
    for mode in MODES:
        plain = pack.retriever(mode, similarity_top_k=10)
        scoped = pack.retriever(mode, similarity_top_k=10, filters=filters)
        plain.retrieve(questions[0]), scoped.retrieve(questions[0])
        times: dict[str, list[float]] = {"plain": [], "filtered": []}
        leaks = 0
        for i, question in enumerate(questions):
            order = [("plain", plain), ("filtered", scoped)]
            for label, retriever in order if i % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                nodes = retriever.retrieve(question)
                times[label].append(1000.0 * (time.perf_counter() - start))
                if label == "filtered":
                    leaks += sum(n.node.metadata.get("title") not in kept for n in nodes)
        p50 = {k: statistics.median(v) for k, v in times.items()}
        results[mode] = {**{f"{k}_p50_ms": v for k, v in p50.items()}, "leaks": leaks}
        ratio = p50["filtered"] / p50["plain"]
        results[mode]["ratio"] = ratio
        rows.append([mode, f"{p50['plain']:.1f}", f"{p50['filtered']:.1f}", f"{ratio:.2f}x",
                     str(leaks)])  # fmt: skip
    table = md_table(
        ["mode", "unfiltered p50 ms", "filtered p50 ms", "filtered / unfiltered", "leaked nodes"],
        rows,
        "lrrrr",
    )
    write_results(
        "filters",
        {
            "modes": results,
            "n_questions": len(questions),
            "kept_articles": len(kept),
            "kept_chunk_share": kept_share,
            "load_average_1m": os.getloadavg()[0],
        },
        [("Filtered against unfiltered retrieval, sync path", table)],
        out=args.out,
        description=(
            f"wiki_qa_para dev split, {len(questions)} questions, {len(chunks)} chunks on "
            f"Milvus Lite; the filter keeps {len(kept)} articles ({kept_share:.0%} of the "
            f"chunks); load average at the end {os.getloadavg()[0]:.2f}."
        ),
    )


if __name__ == "__main__":
    main()
