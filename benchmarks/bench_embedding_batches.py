"""Embedding in batches of similar length vs in the order given, with the bundled MiniLM.

LlamaIndex's ``BaseEmbedding.get_text_embedding_batch`` cuts a list into batches in the order it
is given, so a batch pads every text to its longest one. The pack's bundled embedding model
sorts the texts by length first and returns the vectors in the caller's order
(``models/settings.py``). This runs both on the same texts, in one process, alternating:
the sentences and the chunks that indexing the demo's 8 shipped Wikipedia articles embeds.

Run:  python benchmarks/bench_embedding_batches.py [--articles 8] [--rounds 2]
      [--out benchmarks/results]
Writes ``embedding_batches.json`` and ``embedding_batches.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def texts_of(articles: int) -> dict[str, list[str]]:
    from llama_index.core.schema import MetadataMode

    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.documents.sentences import sentence_units
    from llama_index_rag_pack.evaluation.labelled import load_corpus

    nodes = split_documents(load_corpus("wikipedia")[:articles])
    return {
        "sentences": [u.text for u in sentence_units(nodes)],
        "chunks": [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes],
    }


def timed(fn: Any, texts: list[str]) -> tuple[float, Any]:
    start = time.perf_counter()
    vectors = fn(texts)
    return time.perf_counter() - start, vectors


def main() -> None:
    import numpy as np
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from llama_index_rag_pack.models.settings import resolve_embed_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--articles", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    add_out_argument(ap)
    args = ap.parse_args()
    model = resolve_embed_model(None)
    model.get_text_embedding_batch(["warm up"])

    def given_order(texts: list[str]) -> Any:  # core's batching, bypassing the pack's sort
        return BaseEmbedding.get_text_embedding_batch(model, texts)

    results: dict[str, Any] = {}
    for kind, texts in texts_of(args.articles).items():
        core_s, sorted_s, diff = [], [], 0.0
        for _ in range(args.rounds):
            t_core, a = timed(given_order, texts)
            t_sorted, b = timed(model.get_text_embedding_batch, texts)
            core_s.append(t_core)
            sorted_s.append(t_sorted)
            diff = max(diff, float(np.abs(np.asarray(a) - np.asarray(b)).max()))
        results[kind] = {
            "texts": len(texts),
            "given_order_s": core_s,
            "by_length_s": sorted_s,
            "ratio": statistics.median(core_s) / statistics.median(sorted_s),
            "max_abs_vector_difference": diff,
        }
        print(kind, results[kind], flush=True)  # noqa: T201 - a script
    rows = [
        [
            kind,
            str(r["texts"]),
            f"{statistics.median(r['given_order_s']):.1f}",
            f"{statistics.median(r['by_length_s']):.1f}",
            f"**{r['ratio']:.2f}x**",
            f"{r['max_abs_vector_difference']:.1e}",
        ]
        for kind, r in results.items()
    ]
    header = ["texts", "n", "given order s", "by length s", "speed-up", "max vector diff"]
    write_results(
        "embedding_batches",
        results,
        [("Embedding time (median of rounds)", md_table(header, rows, "lrrrrr"))],
        out=args.out,
        description=(
            f"The sentences and chunks of the first {args.articles} shipped Wikipedia articles "
            "(256-token chunks, what indexing them with the sentence index embeds), embedded by "
            "the bundled all-MiniLM-L6-v2 in batches of 64: in the order given (LlamaIndex core's "
            "batching) and sorted by length (the pack's), alternating, "
            f"{args.rounds} rounds each, in one process."
        ),
    )


if __name__ == "__main__":
    main()
