"""The default mode with the sentence index's vectors made apart (``separate``, the default) or
pooled from each chunk's own pass (``pooled``): held-out quality through the evaluation harness,
and the indexing time of the harness' corpus.

Each variant indexes the ``wiki_qa_para`` corpus (Wikipedia + Lee, 403 documents) into its own
cache with ``RAG_PACK_SENTENCE_VECTORS`` set, then ``rag-pack eval`` scores ``hybrid_convex`` (the
default mode, with the shipped fusion weights, which were fitted on dev with separate vectors),
``vector`` and ``bm25`` on the dev and test splits.

Run:  python benchmarks/bench_sentence_vectors.py [--cores 2] [--work-dir DIR]
Writes ``sentence_vectors.json`` and ``sentence_vectors.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import add_out_argument, md_table, write_results

VARIANTS = ("separate", "pooled")
SPLITS = ("dev", "test")
STRATEGIES = ("hybrid_convex", "vector", "bm25")
#: (column, harness metric): document recall, the evidence chunk, the gold answer in a chunk.
METRICS = (
    ("R@1", "recall@1"),
    ("R@5", "recall@5"),
    ("MRR@10", "mrr@10"),
    ("evidence@1", "evidence@1"),
    ("evidence@5", "evidence@5"),
    ("answer@5", "answer_in_context@5"),
)


def run_eval(
    variant: str,
    split: str,
    work: Path,
    cores: int,
    env_name: str = "RAG_PACK_SENTENCE_VECTORS",
    *,
    dataset: str = "wiki_qa_para",
    strategies: tuple[str, ...] = STRATEGIES,
    env_vars: dict[str, str] | None = None,
    prelude: str = "",
) -> tuple[dict, float]:
    """``rag-pack eval`` of ``dataset``'s ``split`` with ``env_name=variant`` (or the
    environment ``env_vars``), indexed into its own cache under ``work``; the harness' report
    and the seconds it took. ``prelude``: Python run in the harness' process before it (the
    command then runs through ``python -c``)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", **(env_vars or {env_name: variant}))
    suffix = "" if dataset == "wiki_qa_para" else f"_{dataset}"
    out = work / f"out_{variant}_{split}{suffix}"
    argv = [
        "eval",
        "--dataset", dataset,
        "--split", split,
        "--strategies", ",".join(strategies),
        "--cache-dir", str(work / f"cache_{variant}"),
        "--out", str(out),
        "--no-chart",
    ]  # fmt: skip
    command = [str(Path(sys.executable).parent / "rag-pack"), *argv]
    if prelude:
        run = f"\nimport sys\nfrom llama_index_rag_pack.cli import main\nsys.exit(main({argv!r}))\n"
        command = [sys.executable, "-c", prelude + run]
    if cores and shutil.which("taskset"):
        command = ["taskset", "-c", f"0-{cores - 1}", *command]
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    seconds = time.perf_counter() - start
    return json.loads((out / f"{dataset}-{split}.json").read_text()), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--work-dir", default=None, help="kept caches (default: a temp dir)")
    add_out_argument(parser)
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="sentence-vectors-"))
    results: dict[str, dict] = {}
    rows = []
    for variant in VARIANTS:
        for split in SPLITS:
            found, seconds = run_eval(variant, split, work, args.cores)
            results[f"{variant}/{split}"] = {"seconds": seconds, "report": found}
            print(variant, split, f"{seconds:.0f} s", flush=True)
            by_name = {entry["name"]: entry["metrics"] for entry in found["strategies"]}
            for strategy in STRATEGIES:
                metrics = by_name[strategy]
                values = [f"{metrics.get(key, float('nan')):.3f}" for _, key in METRICS]
                rows.append([strategy, variant, split, *values])
    rows.sort(key=lambda r: (STRATEGIES.index(r[0]), r[2], VARIANTS.index(r[1])))
    timing = [[variant, f"{results[f'{variant}/dev']['seconds']:.0f}"] for variant in VARIANTS]
    write_results(
        "sentence_vectors",
        results,
        [
            (
                "`wiki_qa_para`, top 10: separate against pooled sentence vectors",
                md_table(
                    ["strategy", "sentence vectors", "split", *[c for c, _ in METRICS]],
                    rows,
                    "lll" + "r" * len(METRICS),
                ),
            ),
            (
                "Indexing the harness' corpus (403 documents) and scoring dev, seconds",
                md_table(["sentence vectors", "index + dev s"], timing, "lr"),
            ),
        ],
        out=args.out,
        description=(
            "The evaluation harness (`rag-pack eval`) on the `wiki_qa_para` dev and test splits, "
            "each variant indexed into its own cache with `RAG_PACK_SENTENCE_VECTORS` set, "
            f"pinned to {args.cores} cores. `hybrid_convex` uses the shipped fusion weights "
            "(fitted on dev with separate vectors); `vector` and `bm25` do not read sentences."
        ),
    )
    print("wrote sentence_vectors.json and sentence_vectors.md")


if __name__ == "__main__":
    main()
