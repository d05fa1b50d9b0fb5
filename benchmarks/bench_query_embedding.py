"""Embedding on ONNX Runtime against PyTorch: a new process's first query, one query, batches.

The bundled all-MiniLM-L6-v2 through the pack's ``LocalEmbedding`` with ``backend="onnx"`` and
``backend="torch"``:

* **first query in a new process**: import, model load and one query embedding, each backend in
  its own fresh Python process (the ONNX export already in the cache; its one-time cost is
  timed separately, in another process, into an empty directory);
* **one query**: p50 over the ``wiki_qa_para`` dev questions, ONNX first, then PyTorch;
* **batches**: the chunks and sentences of the first ``--articles`` shipped Wikipedia articles,
  sorted by length as the pack embeds them, each backend in its own fresh process with its
  model loaded first, and the largest difference between the two backends' vectors; ONNX both
  as the pack runs a batch (one run per core at a time) and runs in turn on one session with
  every core (the earlier scheme), alternated, twice each.

Run:  python benchmarks/bench_query_embedding.py [--articles N] [--questions N]
Writes ``query_embedding.json`` and ``query_embedding.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BACKENDS = ("onnx", "torch")

_FIRST_QUERY = """
import json, sys, time
start = time.perf_counter()
from llama_index_rag_pack.models.local_embedding import LocalEmbedding
from llama_index_rag_pack.models.settings import bundled_embed_model_path
imported = time.perf_counter()
model = LocalEmbedding(bundled_embed_model_path(), backend=sys.argv[1],
                       onnx_dir=sys.argv[2] or None)
model.get_query_embedding("Which river flows through the capital of Hungary?")
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "load_and_first_query_s": done - imported,
                  "total_s": done - start, "torch_imported": "torch" in sys.modules}))
"""


def first_query(backend: str, onnx_dir: str = "") -> dict[str, Any]:
    """Import, load and one query in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_QUERY, backend, onnx_dir],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def query_p50(models: dict[str, Any], questions: list[str]) -> dict[str, float]:
    """p50 of one query, each backend over all questions in its own block (ONNX first: PyTorch's
    idle threads keep spinning after each call and would slow whatever runs next)."""
    p50 = {}
    for name, model in models.items():
        model.get_query_embedding("warm up")
        times = []
        for question in questions:
            start = time.perf_counter()
            model.get_query_embedding(question)
            times.append(1000.0 * (time.perf_counter() - start))
        p50[name] = statistics.median(times)
    return p50


_BATCHES = """
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[3])
from bench_embedding_batches import texts_of
from llama_index_rag_pack.models.local_embedding import LocalEmbedding
from llama_index_rag_pack.models.settings import bundled_embed_model_path
variant = sys.argv[1]
model = LocalEmbedding(bundled_embed_model_path(), backend=variant.split("_")[0])
model.get_text_embedding_batch(["load the model first"])
if variant == "onnx_one_session":  # the earlier scheme: runs in turn, every core inside each
    import os
    encoder = model._onnx_encoder()
    encoder._batch_threads = 1
    encoder._batch_session = encoder._new_session(os.cpu_count() or 1)
out = {}
for kind, texts in texts_of(int(sys.argv[2])).items():
    start = time.perf_counter()
    vectors = np.asarray(model.get_text_embedding_batch(texts))
    out[kind] = {"texts": len(texts), "s": time.perf_counter() - start}
    np.save(f"{sys.argv[4]}/{sys.argv[1]}_{kind}.npy", vectors)
print(json.dumps(out))
"""


#: Batch runs, each in its own fresh process: the two ONNX schemes alternate (twice each, the
#: mean reported) so a drift of the machine's speed does not favour one.
BATCH_RUNS = ("onnx_one_session", "onnx", "torch", "onnx", "onnx_one_session")


def batches(articles: int) -> dict[str, dict[str, Any]]:
    """Each variant embeds the same texts in its own fresh process (model loaded first): one
    runtime's idle threads never slow the other down. ``onnx``: one run per core at a time
    (the pack's scheme); ``onnx_one_session``: runs in turn on one session with every core."""
    import numpy as np

    here = os.path.dirname(os.path.abspath(__file__))
    times: dict[str, dict[str, list[float]]] = {}
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in BATCH_RUNS:
            proc = subprocess.run(
                [sys.executable, "-c", _BATCHES, variant, str(articles), here, tmp],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
            )
            for kind, r in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                counts[kind] = r["texts"]
                times.setdefault(kind, {}).setdefault(variant, []).append(r["s"])
        out: dict[str, dict[str, Any]] = {}
        for kind, by_variant in times.items():
            row: dict[str, Any] = {"texts": counts[kind]}
            row.update({f"{v}_s": statistics.mean(t) for v, t in by_variant.items()})
            a, b, c = (np.load(f"{tmp}/{v}_{kind}.npy") for v in ("onnx", "torch", BATCH_RUNS[0]))
            row["max_abs_difference"] = float(np.abs(a - b).max())
            row["schemes_max_abs_difference"] = float(np.abs(a - c).max())
            out[kind] = row
    return out


def main() -> None:
    from llama_index_rag_pack.evaluation.labelled import load_labelled_set
    from llama_index_rag_pack.models.local_embedding import LocalEmbedding
    from llama_index_rag_pack.models.settings import bundled_embed_model_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--articles", type=int, default=4)
    ap.add_argument("--questions", type=int, default=147)
    add_out_argument(ap)
    args = ap.parse_args()
    path = bundled_embed_model_path()
    first_query("onnx")  # the export exists in the cache from here on
    cold = {backend: first_query(backend) for backend in BACKENDS}
    with tempfile.TemporaryDirectory() as empty:
        start = time.perf_counter()
        export = first_query("onnx", empty)
        export["wall_s"] = time.perf_counter() - start
    models = {b: LocalEmbedding(path, backend=b) for b in BACKENDS}
    questions = [ex.question for ex in load_labelled_set("wiki_qa_para", split="dev")]
    p50 = query_p50(models, questions[: args.questions])
    batch = batches(args.articles)
    results = {
        "first_query": cold,
        "first_query_with_export": export,
        "query_p50_ms": p50,
        "batches": batch,
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
    }
    cold_table = md_table(
        ["backend", "import s", "load + first query s", "total s", "PyTorch imported"],
        [
            [b, f"{r['import_s']:.2f}", f"{r['load_and_first_query_s']:.2f}",
             f"{r['total_s']:.2f}", "yes" if r["torch_imported"] else "no"]
            for b, r in [*cold.items(), ("onnx, exporting first (once)", export)]
        ],
        "lrrrl",
    )  # fmt: skip
    query_table = md_table(
        ["backend", "one query, p50 ms"], [[b, f"{v:.2f}"] for b, v in p50.items()], "lr"
    )
    batch_table = md_table(
        ["texts", "n", "onnx s", "onnx, runs in turn on every core s", "torch s",
         "max |onnx - torch|", "max |onnx - in turn|"],
        [
            [kind, r["texts"], f"{r['onnx_s']:.2f}", f"{r['onnx_one_session_s']:.2f}",
             f"{r['torch_s']:.2f}", f"{r['max_abs_difference']:.1e}",
             f"{r['schemes_max_abs_difference']:.1e}"]
            for kind, r in batch.items()
        ],
        "lrrrrrr",
    )  # fmt: skip
    write_results(
        "query_embedding",
        results,
        [
            ("A new process: import, load, first query", cold_table),
            ("One query", query_table),
            ("Batches (indexing)", batch_table),
        ],
        out=args.out,
        headline_packages=("onnxruntime", "torch", "sentence-transformers"),
        description=(
            f"all-MiniLM-L6-v2 (bundled) through LocalEmbedding; {len(questions)} wiki_qa_para "
            f"dev questions; the first {args.articles} shipped Wikipedia articles for batches; "
            f"load average at the end {results['load_average_1m']:.2f}."
        ),
    )


if __name__ == "__main__":
    main()
