"""Where one retrieval of the default mode (``hybrid_convex``) spends its time, next to ``bm25``.

On the ``wiki_qa_para`` dev split and the evaluation harness's cached index (3,602 chunks on
Milvus Lite, the sentence index beside it), each question is retrieved by the pack's ``bm25`` and
``hybrid_convex`` retrievers (taken in turn), the default's steps are timed one by one, exactly as
``MilvusScoreFusionRetriever`` runs them on a Lite file: the BM25 search in Milvus (50
candidates); the vector side (embedding the query, the in-memory dense and sentence searches);
the fusion; reading the returned chunks. The steps are timed twice: one after the other (what
the retriever does) and with the vector side in a worker thread while the BM25 search runs.
Last, the default is timed with its queries embedded on PyTorch instead of ONNX Runtime.

Run:  python benchmarks/bench_default_latency.py [--cache-dir DIR] [--questions N]
Writes ``default_latency.json`` and ``default_latency.md`` to ``--out``.
"""

from __future__ import annotations

import contextvars
import copy
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _results import md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vector-side")
TORCH_ROW = "hybrid_convex, queries embedded on PyTorch"
STEPS = ("BM25 search", "embed query", "dense + sentences", "wait for vector side", "fusion",
         "read chunks", "total")  # fmt: skip


def _bare(key: str, score: float) -> Any:
    from llama_index.core.schema import NodeWithScore, TextNode

    return NodeWithScore(node=TextNode(id_=key, text=""), score=score)


def _vector_side(retriever: Any, question: str, limit: int) -> tuple[Any, Any, float, float]:
    """Embed and search the in-memory vectors; returns the candidates and the two times (ms)."""
    from llama_index_rag_pack.storage.vector_memory import memory_vectors, top_scores

    t0 = time.perf_counter()
    embedding = retriever.embed_model.get_query_embedding(question)
    t1 = time.perf_counter()
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
    t2 = time.perf_counter()
    return dense, sentences, 1000.0 * (t1 - t0), 1000.0 * (t2 - t1)


def steps(retriever: Any, question: str, *, overlap: bool) -> dict[str, float]:
    """The default's steps for ``question``, timed (ms): in turn, as the retriever runs them, or
    with the vector side (embedding, dense and sentence search) in a worker thread while BM25
    runs (Milvus Lite's BM25 is Python holding the GIL: the worker mostly waits for it)."""
    from llama_index_rag_pack.core.convex_fusion import convex_fusion

    limit = retriever.dense.similarity_top_k
    t0 = time.perf_counter()
    if overlap:
        run = contextvars.copy_context().run
        pending = _POOL.submit(run, _vector_side, retriever, question, limit)
    sparse = [_bare(k, s) for k, s in retriever.sparse.bm25_ids(question, limit)]
    t1 = time.perf_counter()
    if overlap:
        dense, sentences, embed_ms, search_ms = pending.result()
    else:
        dense, sentences, embed_ms, search_ms = _vector_side(retriever, question, limit)
    t2 = time.perf_counter()
    fused = convex_fusion(
        dense,
        sparse,
        alpha=retriever.alpha,
        normalization=retriever.normalization,
        top_n=2 * retriever.pre_top_k,
        sentences=sentences or (),
        sentence_weight=retriever.sentence_weight if sentences is not None else 0.0,
    )
    t3 = time.perf_counter()
    retriever._with_payloads(fused)
    t4 = time.perf_counter()
    wait = 1000.0 * (t2 - t1) if overlap else 0.0
    ms = [1000.0 * (t1 - t0), embed_ms, search_ms, wait, 1000.0 * (t3 - t2)]
    return dict(zip(STEPS, [*ms, 1000.0 * (t4 - t3), 1000.0 * (t4 - t0)], strict=True))


def torch_query_retriever(pack: Any) -> Any:
    """A copy of the default retriever whose queries are embedded on PyTorch (same vectors; the
    pack hands out one cached retriever per mode, so the copy is shallow and changed alone)."""
    from llama_index_rag_pack.components.local_embedding import LocalEmbedding

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
    whole = timed(retrievers, questions)
    default = retrievers["hybrid_convex"]
    parts = {"in turn": {s: [] for s in STEPS}, "overlapped": {s: [] for s in STEPS}}
    for question in questions:
        for label, overlap in (("in turn", False), ("overlapped", True)):
            for name, ms in steps(default, question, overlap=overlap).items():
                parts[label][name].append(ms)
    # last: PyTorch's idle threads keep spinning after each call and slow whatever runs next
    whole.update(timed({TORCH_ROW: torch_query_retriever(pack)}, questions))
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
        [
            "step of hybrid_convex",
            "p50 ms, in turn (the retriever)",
            "p50 ms, vector side in a worker",
        ],
        [[s, f"{step_p50['in turn'][s]:.2f}", f"{step_p50['overlapped'][s]:.2f}"] for s in STEPS],
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
