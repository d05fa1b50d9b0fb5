"""Chunk vectors made from the sentence vectors: a lever against the default's second model pass.

The default embeds every chunk (one model pass) and every sentence of every chunk (a second pass
of about as many tokens), so indexing with the bundled model costs about twice the stock
recipe's model time. ``sentence_mean`` drops the chunk pass: each chunk's vector is the
normalised mean of its sentences' vectors (a chunk without a sentence is embedded as before).
This benchmark measures what that costs in retrieval quality, beside the default (``model``),
each indexed into its own cache of the evaluation harness.

For each variant ``rag-pack eval`` scores ``hybrid_convex`` (the default mode, shipped fusion
weights) and ``vector`` on ``wiki_qa_para`` dev and test (147 questions each, 403 documents) and
on ``zh_qa`` test; the questions each variant gains or loses at evidence@1 / @5 against
``model``, and the seconds the harness took to index and score dev (the indexing dominates).
``sentence_mean`` is not a setting of the pack: this script patches
``llama_index_rag_pack.pack.indexing.embed_for_index`` in the harness' process.

Run:  python benchmarks/bench_chunk_vectors.py [--cores 2] [--work-dir DIR]
Writes ``chunk_vectors.json`` and ``chunk_vectors.md``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _results import add_out_argument, md_table, write_results
from bench_sentence_vectors import run_eval

VARIANTS = ("model", "sentence_mean")
SETS = (("wiki_qa_para", "dev"), ("wiki_qa_para", "test"), ("zh_qa", "test"))
STRATEGIES = ("hybrid_convex", "vector")
METRICS = (("evidence@1", "evidence@1"), ("evidence@5", "evidence@5"), ("MRR@10", "mrr@10"))

#: Run in the harness' process before ``rag-pack eval`` for ``sentence_mean``.
PATCH = """
import numpy as np
from llama_index_rag_pack.pack import indexing

_original = indexing.embed_for_index


def _sentence_mean(nodes, index, embed_model, mode="separate", show_progress=False):
    if index is None:
        return _original(nodes, index, embed_model, mode, show_progress)
    units, vectors = indexing.sentence_vectors(index, nodes, embed_model, show_progress)
    by_chunk = {}
    for unit, vector in zip(units, vectors):
        by_chunk.setdefault(unit.chunk_id, []).append(vector)
    rest = []
    for node in nodes:
        found = by_chunk.get(node.node_id)
        if not found:
            rest.append(node)
            continue
        mean = np.asarray(found, dtype=np.float32).mean(axis=0)
        node.embedding = (mean / max(float(np.linalg.norm(mean)), 1e-12)).tolist()
    if rest:
        indexing.embed_chunks(rest, embed_model, show_progress)
    return units, vectors


indexing.embed_for_index = _sentence_mean
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--work-dir", default=None, help="kept caches (default: a temp dir)")
    add_out_argument(parser)
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="chunk-vectors-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for variant in VARIANTS:
        for dataset, split in SETS:
            report, seconds = run_eval(
                variant, split, work, args.cores,
                dataset=dataset, strategies=STRATEGIES,
                env_vars={"RAG_PACK_SENTENCE_VECTORS": "separate"},  # the default, said
                prelude=PATCH if variant == "sentence_mean" else "",
            )  # fmt: skip
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
            base = results[f"{VARIANTS[0]}/{dataset}/{split}"]
            for variant in VARIANTS:
                found = results[f"{variant}/{dataset}/{split}"]
                metrics, n = found["metrics"][strategy], found["n_questions"]
                cells = [f"{metrics[key]:.3f}" for _, key in METRICS]
                deltas = [
                    f"{round((metrics[key] - base['metrics'][strategy][key]) * n):+d}" if n else ""
                    for key in ("evidence@1", "evidence@5")
                ]
                rows.append([strategy, f"{dataset} {split}", variant, n or "", *cells, *deltas])
    timing = [
        [variant, f"{results[variant + '/wiki_qa_para/dev']['seconds']:.0f}"]
        for variant in VARIANTS
    ]
    write_results(
        "chunk_vectors",
        {"variants": list(VARIANTS), "runs": results},
        [
            (
                f"Top 10, `sentence_mean` against `{VARIANTS[0]}` (questions gained or lost)",
                md_table(
                    [
                        "strategy",
                        "set",
                        "chunk vectors",
                        "questions",
                        *[c for c, _ in METRICS],
                        "Δ evidence@1",
                        "Δ evidence@5",
                    ],
                    rows,
                    "llll" + "r" * (len(METRICS) + 2),
                ),
            ),
            (
                "Indexing the harness' corpus (403 documents) and scoring dev, seconds",
                md_table(["chunk vectors", "index + dev s"], timing, "lr"),
            ),
        ],
        out=args.out,
        description=(
            "The evaluation harness (`rag-pack eval`) with chunk vectors from the model's own "
            "pass over each chunk (`model`, the default) or the normalised mean of the chunk's "
            "sentence vectors (`sentence_mean`: no chunk pass), each variant indexed into its own "
            f"cache, pinned to {args.cores} cores. `hybrid_convex` is the default mode with the "
            "shipped fusion weights (fitted on dev with `model` vectors); `vector` ranks by the "
            "chunk vectors alone."
        ),
    )
    print("wrote chunk_vectors.json and chunk_vectors.md")


if __name__ == "__main__":
    main()
