"""Where one retrieval of the default mode (``hybrid_convex``) spends its time, next to ``bm25``.

On the ``wiki_qa_para`` dev split and the evaluation harness's cached index (3,602 chunks on
Milvus Lite, the sentence index beside it), each question is retrieved by the pack's ``bm25`` and
``hybrid_convex`` retrievers (taken in turn), each as the pack runs it on a Lite file (BM25 scored
on an in-memory copy, ``milvus/bm25/bm25_memory.py``) and with BM25 scored by Milvus Lite itself
(how they ran before). The default's steps are timed one by one, exactly as
``MilvusScoreFusionRetriever`` runs them on a Lite file: the BM25 search (50 candidates, also
timed in Lite); embedding the query; the in-memory dense and sentence searches; the fusion;
reading the returned chunks. Last, the default is timed with its queries embedded on PyTorch
instead of ONNX Runtime.

Run:  python benchmarks/bench_default_latency.py [--cache-dir DIR] [--questions N]
Writes ``default_latency.json`` and ``default_latency.md`` to ``--out``.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from typing import Any

from _results import md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TORCH_ROW = "hybrid_convex, queries embedded on PyTorch"
LITE_BM25 = "BM25 scored by Milvus Lite"
STEPS = ("BM25 search", f"(BM25 search, {LITE_BM25})", "embed query", "dense + sentences",
         "fusion", "read chunks", "total")  # fmt: skip


def _bare(key: str, score: float) -> Any:
    from llama_index.core.schema import NodeWithScore, TextNode

    return NodeWithScore(node=TextNode(id_=key, text=""), score=score)


def steps(retriever: Any, question: str) -> dict[str, float]:
    """The default's steps for ``question``, timed (ms), as the retriever runs them on a Lite
    file; the BM25 search is also timed in Milvus Lite (not counted in the total)."""
    from llama_index_rag_pack.fusion.convex_fusion import convex_fusion
    from llama_index_rag_pack.milvus.vector_memory import memory_vectors, top_scores

    limit = retriever.dense.similarity_top_k
    terms = retriever.sparse.bm25_query(question)
    t = time.perf_counter()
    retriever.sparse._milvus_bm25_ids(terms, limit, "")
    in_lite = 1000.0 * (time.perf_counter() - t)
    t0 = time.perf_counter()
    sparse = [_bare(k, s) for k, s in retriever.sparse.bm25_ids(question, limit)]
    t1 = time.perf_counter()
    embedding = retriever.embed_model.get_query_embedding(question)
    t2 = time.perf_counter()
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
    t3 = time.perf_counter()
    fused = convex_fusion(
        dense,
        sparse,
        alpha=retriever.alpha,
        normalization=retriever.normalization,
        top_n=2 * retriever.pre_top_k,
        sentences=sentences or (),
        sentence_weight=retriever.sentence_weight if sentences is not None else 0.0,
    )
    t4 = time.perf_counter()
    retriever._with_payloads(fused)
    t5 = time.perf_counter()
    ms = [1000.0 * x for x in (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0)]
    return dict(zip(STEPS, [ms[0], in_lite, *ms[1:]], strict=True))


def bm25_in_lite(retriever: Any) -> Any:
    """A copy of ``retriever`` whose BM25 side is scored by Milvus Lite (no in-memory copy)."""
    retriever = copy.copy(retriever)
    if hasattr(retriever, "sparse"):
        retriever.sparse = copy.copy(retriever.sparse)
        retriever.sparse.in_memory = False
    else:
        retriever.in_memory = False
    return retriever


def torch_query_retriever(pack: Any) -> Any:
    """A copy of the default retriever whose queries are embedded on PyTorch (same vectors; the
    pack hands out one cached retriever per mode, so the copy is shallow and changed alone)."""
    from llama_index_rag_pack.models.local_embedding import LocalEmbedding

    retriever = copy.copy(pack.retriever("hybrid_convex", similarity_top_k=10))
    retriever.embed_model = LocalEmbedding(pack.embed_model.model_name, backend="torch")
    return retriever


def timed(retrievers: dict[str, Any], questions: list[str]) -> dict[str, list[float]]:
    """Each question through each retriever (taken in turn, the first one warmed up), in ms."""
    for r in retrievers.values():
        r.retrieve(questions[0])
    whole: dict[str, list[float]] = {m: [] for m in retrievers}
    names = list(retrievers)
    for i, question in enumerate(questions):
        for mode in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            retrievers[mode].retrieve(question)
            whole[mode].append(1000.0 * (time.perf_counter() - start))
    return whole


def main() -> None:
    from bench_peer_quality import dev_questions

    args, _, pack, _, questions = dev_questions(__doc__.splitlines()[0])
    retrievers = {m: pack.retriever(m, similarity_top_k=10) for m in ("bm25", "hybrid_convex")}
    retrievers.update({f"{m}, {LITE_BM25}": bm25_in_lite(r) for m, r in list(retrievers.items())})
    whole = timed(retrievers, questions)
    default = retrievers["hybrid_convex"]
    parts: dict[str, list[float]] = {s: [] for s in STEPS}
    for question in questions:
        for name, ms in steps(default, question).items():
            parts[name].append(ms)
    # last: PyTorch's idle threads keep spinning after each call and slow whatever runs next
    whole.update(timed({TORCH_ROW: torch_query_retriever(pack)}, questions))
    p50 = {m: statistics.median(v) for m, v in whole.items()}
    step_p50 = {s: statistics.median(v) for s, v in parts.items()}
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
        ["step of hybrid_convex", "p50 ms"],
        [[s, f"{step_p50[s]:.2f}"] for s in STEPS],
        "lr",
    )
    write_results(
        "default_latency",
        results,
        [("One retrieval, sync path", whole_table), ("The default's steps", step_table)],
        out=args.out,
        description=(
            f"wiki_qa_para dev split, {len(questions)} questions, 3,602 chunks on Milvus Lite; "
            f"load average at the end {results['load_average_1m']:.2f}. The step in brackets "
            "is what the BM25 search costs in Milvus Lite (not part of the total)."
        ),
    )


if __name__ == "__main__":
    main()
