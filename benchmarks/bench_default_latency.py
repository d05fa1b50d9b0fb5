"""Where one retrieval of the default mode (``hybrid_convex``) spends its time, next to ``bm25``.

On the ``wiki_qa_para`` dev split and the evaluation harness's cached index (3,602 chunks on
Milvus Lite, the sentence index beside it), each question is retrieved by the pack's ``bm25`` and
``hybrid_convex`` retrievers (taken in turn), and then the default's steps are timed one by one,
exactly as ``MilvusScoreFusionRetriever`` runs them on a Lite file (in-memory dense and sentence
search): embedding the query, the BM25 search in Milvus (50 candidates), the in-memory dense and
sentence searches, the fusion, and reading the returned chunks. The steps are timed twice: with
the query embedded in a worker thread while the BM25 search runs (what the retriever does) and
one after the other.

Run:  python benchmarks/bench_default_latency.py [--cache-dir DIR] [--questions N]
Writes ``default_latency.json`` and ``default_latency.md`` to ``--out``.
"""

from __future__ import annotations

import contextvars
import os
import statistics
import time
from typing import Any

from _results import md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

STEPS = ("embed query", "BM25 search", "wait for embedding", "dense + sentences", "fusion",
         "read chunks", "total")  # fmt: skip


def _bare(key: str, score: float) -> Any:
    from llama_index.core.schema import NodeWithScore, TextNode

    return NodeWithScore(node=TextNode(id_=key, text=""), score=score)


def steps(retriever: Any, question: str, *, overlap: bool) -> dict[str, float]:
    """The default's steps for ``question``, timed (ms)."""
    from llama_index_rag_pack.core.convex_fusion import convex_fusion
    from llama_index_rag_pack.storage.score_fusion import _embedding_pool
    from llama_index_rag_pack.storage.vector_memory import memory_vectors, top_scores

    embed = retriever.embed_model.get_query_embedding
    t0 = time.perf_counter()
    if overlap:
        pending = _embedding_pool().submit(contextvars.copy_context().run, embed, question)
    else:
        embedding = embed(question)
    t1 = time.perf_counter()
    limit = retriever.dense.similarity_top_k
    sparse = [_bare(k, s) for k, s in retriever.sparse.bm25_ids(question, limit)]
    t2 = time.perf_counter()
    if overlap:
        embedding = pending.result()
    t3 = time.perf_counter()
    dense_store = retriever.dense
    keys, matrix = memory_vectors(
        dense_store.client, dense_store.collection_name, key_field="id", vector_field="embedding"
    )
    dense = [_bare(k, s) for k, s in top_scores(keys, matrix, embedding, limit)]
    sentences = None
    if retriever.sentences is not None:
        best = retriever.sentences.sentences.search(
            embedding, max(retriever.sentences.sentence_pool, limit)
        )
        sentences = [_bare(k, s) for k, s in best[:limit]]
    t4 = time.perf_counter()
    fused = convex_fusion(
        dense,
        sparse,
        alpha=retriever.alpha,
        normalization=retriever.normalization,
        top_n=2 * retriever.pre_top_k,
        sentences=sentences or (),
        sentence_weight=retriever.sentence_weight if sentences is not None else 0.0,
    )
    t5 = time.perf_counter()
    retriever._with_payloads(fused)
    t6 = time.perf_counter()
    marks = (t0, t1, t2, t3, t4, t5, t6)
    spans = [(marks[i], marks[i + 1]) for i in range(6)] + [(t0, t6)]
    return {name: 1000.0 * (b - a) for name, (a, b) in zip(STEPS, spans, strict=True)}


def main() -> None:
    from bench_peer_quality import dev_questions

    args, _, pack, _, questions = dev_questions(__doc__.splitlines()[0])
    retrievers = {m: pack.retriever(m, similarity_top_k=10) for m in ("bm25", "hybrid_convex")}
    for r in retrievers.values():
        r.retrieve(questions[0])
    whole: dict[str, list[float]] = {m: [] for m in retrievers}
    for i, question in enumerate(questions):
        for mode in list(retrievers)[i % 2 :] + list(retrievers)[: i % 2]:
            start = time.perf_counter()
            retrievers[mode].retrieve(question)
            whole[mode].append(1000.0 * (time.perf_counter() - start))
    default = retrievers["hybrid_convex"]
    parts = {"overlapped": {s: [] for s in STEPS}, "in turn": {s: [] for s in STEPS}}
    for question in questions:
        for label, overlap in (("overlapped", True), ("in turn", False)):
            for name, ms in steps(default, question, overlap=overlap).items():
                parts[label][name].append(ms)
    p50 = {m: statistics.median(v) for m, v in whole.items()}
    step_p50 = {
        label: {s: statistics.median(v) for s, v in d.items()} for label, d in parts.items()
    }
    results = {
        "n_questions": len(questions),
        "retrieve_p50_ms": p50,
        "ratio": p50["hybrid_convex"] / p50["bm25"],
        "steps_p50_ms": step_p50,
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
    }
    whole_table = md_table(
        ["retriever", "p50 ms", "/ bm25"],
        [[m, f"{v:.1f}", f"{v / p50['bm25']:.2f}x"] for m, v in p50.items()],
        "lrr",
    )
    step_table = md_table(
        ["step of hybrid_convex", "p50 ms, embedding overlapped", "p50 ms, in turn"],
        [[s, f"{step_p50['overlapped'][s]:.2f}", f"{step_p50['in turn'][s]:.2f}"] for s in STEPS],
        "lrr",
    )
    write_results(
        "default_latency",
        results,
        [("One retrieval, sync path", whole_table), ("The default's steps", step_table)],
        out=args.out,
        description=(
            f"wiki_qa_para dev split, {len(questions)} questions, 3,602 chunks on Milvus Lite; "
            f"load average at the end {results['load_average_1m']:.2f}."
        ),
    )


if __name__ == "__main__":
    main()
