"""The bundled embedding model in float32 against its int8 copy (``RAG_PACK_EMBED_PRECISION``):
model time, how far the vectors move, and held-out retrieval quality.

* Speed: the chunks and the sentence-index texts of the 8 ``rag-pack demo`` articles, each
  embedded by both ONNX exports (one warm-up run first), pinned to ``--cores`` CPUs.
* Vectors: the cosine of each int8 vector to its float32 one.
* Quality: the evaluation harness (``rag-pack eval``) on ``wiki_qa_para`` dev and test, each
  precision indexing the corpus (403 documents) into its own cache: ``hybrid_convex`` (the
  default mode, shipped fusion weights), ``vector`` and ``bm25``.

Run:  python benchmarks/bench_embedding_precision.py [--cores 2] [--work-dir DIR] [--no-eval]
Writes ``embedding_precision.json`` and ``embedding_precision.md``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _results import add_out_argument, md_table, write_results
from bench_sentence_vectors import METRICS, SPLITS, STRATEGIES, run_eval

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PRECISIONS = ("float32", "int8")


def model_time() -> tuple[list[list[Any]], dict[str, Any]]:
    from llama_index.core.schema import MetadataMode

    from llama_index_rag_pack.cli.app import DEMO_TITLES
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.documents.sentences import sentence_units
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
    from llama_index_rag_pack.models.local_embedding import LocalEmbedding, by_length
    from llama_index_rag_pack.models.settings import resolve_embed_model

    nodes = split_documents(load_wikipedia_documents(list(DEMO_TITLES)))
    sets = {
        "chunks": [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes],
        "sentences": [u.text for u in sentence_units(nodes)],
    }
    name = resolve_embed_model(None).model_name
    models = {p: LocalEmbedding(name, precision=p) for p in PRECISIONS}
    rows, info = [], {}
    for label, texts in sets.items():
        texts = [texts[i] for i in by_length(texts)]
        found: dict[str, tuple[np.ndarray, float]] = {}
        for precision, model in models.items():
            model.get_text_embedding_batch(texts[:64])  # warm: sessions and threads
            start = time.perf_counter()
            vectors = np.asarray(model.get_text_embedding_batch(texts))
            found[precision] = (vectors, time.perf_counter() - start)
        cosines = np.sum(found["float32"][0] * found["int8"][0], axis=1)
        full_s, int8_s = found["float32"][1], found["int8"][1]
        info[label] = {
            "texts": len(texts),
            "float32_s": full_s,
            "int8_s": int8_s,
            "cosine_min": float(cosines.min()),
            "cosine_mean": float(cosines.mean()),
        }
        rows.append(
            [label, len(texts), f"{full_s:.2f}", f"{int8_s:.2f}", f"{full_s / int8_s:.2f}x",
             f"{cosines.mean():.4f}", f"{cosines.min():.4f}"]
        )  # fmt: skip
    return rows, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--work-dir", default=None, help="kept caches (default: a temp dir)")
    parser.add_argument("--no-eval", action="store_true", help="speed and vectors only")
    add_out_argument(parser)
    args = parser.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    speed_rows, speed = model_time()
    print(speed, flush=True)
    results: dict[str, Any] = {"speed": speed}
    tables = [
        (
            "Model time, the 8 demo articles (seconds)",
            md_table(
                ["texts", "n", "float32 s", "int8 s", "speed-up", "mean cosine", "min cosine"],
                speed_rows,
                "lrrrrrr",
            ),
        )
    ]
    if not args.no_eval:
        work = Path(args.work_dir or tempfile.mkdtemp(prefix="embedding-precision-"))
        rows = []
        for precision in PRECISIONS:
            for split in SPLITS:
                found, seconds = run_eval(
                    precision, split, work, args.cores, env_name="RAG_PACK_EMBED_PRECISION"
                )
                results[f"{precision}/{split}"] = {"seconds": seconds, "report": found}
                print(precision, split, f"{seconds:.0f} s", flush=True)
                by_name = {entry["name"]: entry["metrics"] for entry in found["strategies"]}
                for strategy in STRATEGIES:
                    values = [f"{by_name[strategy].get(k, float('nan')):.3f}" for _, k in METRICS]
                    rows.append([strategy, precision, split, *values])
        rows.sort(key=lambda r: (STRATEGIES.index(r[0]), r[2], PRECISIONS.index(r[1])))
        tables.append(
            (
                "`wiki_qa_para`, top 10: float32 against int8",
                md_table(
                    ["strategy", "precision", "split", *[c for c, _ in METRICS]],
                    rows,
                    "lll" + "r" * len(METRICS),
                ),
            )
        )
    write_results(
        "embedding_precision",
        results,
        tables,
        out=args.out,
        description=(
            "The bundled all-MiniLM-L6-v2 on ONNX Runtime, float32 export against its int8 copy "
            f"(`models/int8_export.py`), pinned to {args.cores} cores. Quality: the evaluation "
            "harness, each precision indexing the corpus into its own cache; `hybrid_convex` "
            "uses the shipped fusion weights (fitted on dev with float32)."
        ),
    )
    print("wrote embedding_precision.json and embedding_precision.md")


if __name__ == "__main__":
    main()
