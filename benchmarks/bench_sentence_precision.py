"""What the sentence index's precision does to retrieval quality: the default mode with the
sentence pass in float32 (the old default), in int8 (the new default: chunks and queries stay
float32), and with the whole model in int8, each indexed into its own cache.

For each variant ``rag-pack eval`` scores ``hybrid_convex`` (the default mode, shipped fusion
weights) and ``vector`` on ``wiki_qa_para`` dev and test (147 questions each, 403 documents) and
on ``zh_qa`` test (hand-written Chinese and English questions over five tutorials), and the
number of questions each split answers at evidence@1 / @5 is compared with float32's.

Run:  python benchmarks/bench_sentence_precision.py [--cores 2] [--work-dir DIR]
      [--variants float32,int8-sentences,int8]
Writes ``sentence_precision.json`` and ``sentence_precision.md``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _results import add_out_argument, md_table, write_results
from bench_sentence_vectors import run_eval

#: variant: the environment it is indexed and asked with
VARIANTS = {
    "float32": {"RAG_PACK_EMBED_PRECISION": "float32", "RAG_PACK_SENTENCE_PRECISION": "float32"},
    "int8-sentences": {
        "RAG_PACK_EMBED_PRECISION": "float32",
        "RAG_PACK_SENTENCE_PRECISION": "int8",
    },
    "int8": {"RAG_PACK_EMBED_PRECISION": "int8", "RAG_PACK_SENTENCE_PRECISION": "int8"},
}
SETS = (("wiki_qa_para", "dev"), ("wiki_qa_para", "test"), ("zh_qa", "test"))
STRATEGIES = ("hybrid_convex", "vector")
METRICS = (("evidence@1", "evidence@1"), ("evidence@5", "evidence@5"), ("MRR@10", "mrr@10"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--work-dir", default=None, help="kept caches (default: a temp dir)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    add_out_argument(parser)
    args = parser.parse_args()
    variants = args.variants.split(",")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="sentence-precision-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for variant in variants:
        for dataset, split in SETS:
            report, seconds = run_eval(
                variant,
                split,
                work,
                args.cores,
                dataset=dataset,
                strategies=STRATEGIES,
                env_vars=VARIANTS[variant],
            )
            n = report.get("n_questions") or len(report.get("questions", [])) or None
            by_name = {entry["name"]: entry["metrics"] for entry in report["strategies"]}
            results[f"{variant}/{dataset}/{split}"] = {
                "seconds": seconds,
                "n_questions": n,
                "metrics": by_name,
            }
            print(variant, dataset, split, f"{seconds:.0f} s", flush=True)
    rows = []
    for strategy in STRATEGIES:
        for dataset, split in SETS:
            base = results.get(f"{variants[0]}/{dataset}/{split}")
            for variant in variants:
                found = results[f"{variant}/{dataset}/{split}"]
                metrics = found["metrics"][strategy]
                n = found["n_questions"]
                cells = [f"{metrics[key]:.3f}" for _, key in METRICS]
                deltas = []
                for key in ("evidence@1", "evidence@5"):
                    if n and base:
                        diff = round((metrics[key] - base["metrics"][strategy][key]) * n)
                        deltas.append(f"{diff:+d}")
                    else:
                        deltas.append("")
                rows.append([strategy, f"{dataset} {split}", variant, n or "", *cells, *deltas])
    write_results(
        "sentence_precision",
        {"variants": {v: VARIANTS[v] for v in variants}, "runs": results},
        [
            (
                f"Top 10, each variant against `{variants[0]}` (questions gained or lost)",
                md_table(
                    ["strategy", "set", "variant", "questions", *[c for c, _ in METRICS],
                     "Δ evidence@1", "Δ evidence@5"],
                    rows,
                    "llll" + "r" * (len(METRICS) + 2),
                ),
            )
        ],
        out=args.out,
        description=(
            "The evaluation harness (`rag-pack eval`) with the sentence pass and the model at "
            "each precision (`RAG_PACK_SENTENCE_PRECISION`, `RAG_PACK_EMBED_PRECISION`), each "
            f"variant indexed into its own cache, pinned to {args.cores} cores. `hybrid_convex` "
            "is the default mode (shipped fusion weights); `vector` reads no sentence."
        ),
    )  # fmt: skip
    print("wrote sentence_precision.json and sentence_precision.md")


if __name__ == "__main__":
    main()
