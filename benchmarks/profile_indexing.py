"""Where indexing time and memory go: ``RagPack(documents)`` stage by stage, beside the stock
LlamaIndex recipes on the same chunks and the same embedding model, each side in a fresh process:
``VectorStoreIndex`` over ``MilvusVectorStore`` on Milvus Lite, dense (``stock``) and hybrid
(``stock_hybrid``: ``enable_sparse=True`` with Milvus' own ``BM25BuiltInFunction``, the peer of
the pack's default mode). The stock sides embed in float32, as a LlamaIndex user runs the model.

Stages of the pack (the functions ``RagPack.insert`` calls, wrapped with a timer; RSS read after
each, and each stage summed over the slices the documents are written in): chunking, BM25
analysis (``before_embedding``), chunk embeddings, sentence splitting and sentence embeddings,
deleting old rows, sentence inserts, Lite inserts (``insert_nodes``), flush; then the first
default-mode search (which reads the in-memory copies) and a second one. On ``wiki8`` the first
``rag-pack demo`` in a fresh directory runs too (its own timing of its indexing step).

Corpora:

* ``wiki8``: the 8 Wikipedia articles of ``rag-pack demo`` with the bundled MiniLM (ONNX);
* ``synthetic:N``: N documents of about 180 words (one chunk each at ``chunk_size=512``) with a
  cheap hashed embedding (384-d), so the model is out of the picture.

Run:  python benchmarks/profile_indexing.py [--corpora wiki8,synthetic:20000] [--cores 2]
      [--pack-precision int8] [--sentence-precision float32] [--no-demo]
Writes ``indexing_profile.json`` and ``indexing_profile.md`` (``indexing_profile_int8.*`` with
``--pack-precision int8``, ``indexing_profile_sentences_float32.*`` with
``--sentence-precision float32``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DIM = 384
WORDS = (
    "river mountain data vector search index milvus chunk token model query answer cite "
    "source paper table graph node tree summary cluster level leaf root branch forest city "
    "music science history language engine cloud server client memory disk speed quality"
).split()


def rss_mb() -> tuple[float, float]:
    """``(current, peak)`` resident set size of this process, in MB."""
    now = peak = 0.0
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return now, peak


def hashed_embedding(vector: Any = None, batch_size: int = 512) -> Any:
    """A 384-d embedding of hashed word counts: deterministic and about free (``vector``:
    another ``text -> list[float]`` behind the same LlamaIndex embedding)."""
    import numpy as np
    from llama_index.core.embeddings import BaseEmbedding

    def hashed(text: str) -> list[float]:
        out = np.zeros(DIM, dtype=np.float32)
        for word in text.lower().split():
            out[hash(word) % DIM] += 1.0
        norm = float(np.linalg.norm(out)) or 1.0
        return (out / norm).tolist()

    vector = vector or hashed

    class HashedEmbedding(BaseEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            return vector(text)

        def _get_query_embedding(self, query: str) -> list[float]:
            return vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return vector(query)

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return [vector(t) for t in texts]

    return HashedEmbedding(model_name="hashed-384", embed_batch_size=batch_size)


def corpus(name: str) -> tuple[list[Any], Any]:
    """The documents and the embedding model of a corpus."""
    from llama_index.core import Document

    if name == "wiki8":
        from llama_index_rag_pack.cli.app import DEMO_TITLES
        from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
        from llama_index_rag_pack.models.settings import resolve_embed_model

        return load_wikipedia_documents(list(DEMO_TITLES)), resolve_embed_model(None)
    count = int(name.split(":", 1)[1])
    os.environ["PYTHONHASHSEED"] = "0"
    import random

    rng = random.Random(0)
    docs = [
        Document(
            text=" ".join(rng.choice(WORDS) for _ in range(180)) + ".",
            id_=f"doc-{i}",
            metadata={"title": f"doc {i}"},
        )
        for i in range(count)
    ]
    return docs, hashed_embedding()


def run_pack(name: str, uri: str) -> dict[str, Any]:
    """``RagPack(documents)`` with each stage of its insert timed."""
    from llama_index_rag_pack.pack import indexing, pack_base
    from llama_index_rag_pack.pack.rag_pack import RagPack

    docs, embed = corpus(name)
    by_label: dict[str, dict[str, Any]] = {}  # a stage runs once per slice: summed

    def timed(label: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            now, peak = rss_mb()
            stage = by_label.setdefault(label, {"stage": label, "s": 0.0, "calls": 0})
            stage["s"] += time.perf_counter() - start
            stage.update(calls=stage["calls"] + 1, rss_mb=now, peak_mb=peak)
            return result

        return call

    from llama_index_rag_pack.documents import sentences

    indexing.split_documents = timed("chunking", indexing.split_documents)
    indexing.before_embedding = timed("BM25 analysis (+ language check)", indexing.before_embedding)
    indexing.embed_chunks = timed("chunk embeddings", indexing.embed_chunks)
    indexing.sentence_units = timed("sentence splitting", sentences.sentence_units)
    indexing.embed_sentence_units = timed("sentence embeddings", sentences.embed_sentence_units)
    indexing.delete_document_rows = timed("delete old rows", indexing.delete_document_rows)
    indexing.store_sentences = timed("sentence inserts", indexing.store_sentences)
    original_flush = pack_base.milvus_utils.flush
    pack_base.milvus_utils.flush = timed("flush", original_flush)
    from llama_index.core import VectorStoreIndex

    VectorStoreIndex.insert_nodes = timed(
        "Lite inserts (insert_nodes)", VectorStoreIndex.insert_nodes
    )
    start = time.perf_counter()
    pack = RagPack(docs, uri=uri, collection_name="profile", embed_model=embed, overwrite=True)
    total = time.perf_counter() - start
    pack_base.milvus_utils.flush = original_flush
    searches = []
    for query in ("vector search quality", "river mountain history"):
        t = time.perf_counter()
        pack.retriever().retrieve(query)
        now, peak = rss_mb()
        searches.append({"s": time.perf_counter() - t, "rss_mb": now, "peak_mb": peak})
    return {
        "side": "pack",
        "corpus": name,
        "chunks": pack.count(),
        "index_s": total,
        "stages": list(by_label.values()),
        "searches": searches,
        "peak_mb": rss_mb()[1],
    }


def stock_store(uri: str, hybrid: bool) -> Any:
    """The stock recipe's ``MilvusVectorStore``: dense only, or ``hybrid`` (Milvus' own BM25
    function on the text, what a LlamaIndex user picks for dense + BM25 on Milvus)."""
    from llama_index.vector_stores.milvus import MilvusVectorStore

    if not hybrid:
        return MilvusVectorStore(uri=uri, collection_name="stock", dim=DIM, overwrite=True)
    from llama_index.vector_stores.milvus.utils import BM25BuiltInFunction

    return MilvusVectorStore(
        uri=uri,
        collection_name="stock",
        dim=DIM,
        overwrite=True,
        enable_sparse=True,
        sparse_embedding_function=BM25BuiltInFunction(),
    )


def stock_retriever(index: Any, hybrid: bool, top_k: int = 4) -> Any:
    """The stock recipe's retriever: dense, or Milvus' hybrid search (dense + BM25, RRF)."""
    if hybrid:
        return index.as_retriever(
            vector_store_query_mode="hybrid", similarity_top_k=top_k, sparse_top_k=top_k
        )
    return index.as_retriever(similarity_top_k=top_k)


def run_stock(name: str, uri: str, side: str = "stock") -> dict[str, Any]:
    """The stock recipe on the pack's own chunks (same splitter settings, same model, in
    float32: the child's environment says so); ``side`` ``stock_hybrid`` adds Milvus' BM25."""
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_rag_pack.documents.chunking import split_documents

    hybrid = side == "stock_hybrid"
    docs, embed = corpus(name)
    start = time.perf_counter()
    nodes = split_documents(docs)
    store = stock_store(uri, hybrid)
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex(nodes, storage_context=context, embed_model=embed)
    store.client.flush("stock")
    total = time.perf_counter() - start
    searches = []
    for query in ("vector search quality", "river mountain history"):
        t = time.perf_counter()
        stock_retriever(index, hybrid).retrieve(query)
        searches.append({"s": time.perf_counter() - t})
    return {
        "side": side,
        "corpus": name,
        "chunks": len(nodes),
        "index_s": total,
        "searches": searches,
        "peak_mb": rss_mb()[1],
    }


def child(side: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "p.db")
        result = run_pack(name, uri) if side == "pack" else run_stock(name, uri, side)
    print("RESULT " + json.dumps(result), flush=True)


#: The line of ``rag-pack demo``'s timings that is its indexing.
DEMO_INDEX_STEP = "chunking, embedding and indexing into Milvus"


def run_demo(cores: int, env: dict[str, str]) -> dict[str, Any]:
    """The first ``rag-pack demo`` in a fresh directory (the 8 articles, three answers): its
    own timing of the indexing step, and the whole command's wall time."""
    import shutil

    with tempfile.TemporaryDirectory() as tmp:
        command = [str(Path(sys.executable).parent / "rag-pack"), "demo"]
        if cores and shutil.which("taskset"):
            command = ["taskset", "-c", f"0-{cores - 1}", *command]
        start = time.perf_counter()
        out = subprocess.run(
            command, cwd=tmp, env=env, capture_output=True, text=True, check=True
        ).stdout
        wall = time.perf_counter() - start
    index_s = next(
        float(line.split()[0])
        for line in out.splitlines()
        if line.strip().endswith(DEMO_INDEX_STEP)
    )
    return {"side": "demo", "corpus": "wiki8", "index_s": index_s, "wall_s": wall, "peak_mb": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", default="wiki8,synthetic:2000")
    parser.add_argument("--cores", type=int, default=2, help="pin to this many CPUs (0: all)")
    parser.add_argument(
        "--pack-precision",
        default=None,
        choices=("float32", "int8"),
        help="the pack's embedding precision (RAG_PACK_EMBED_PRECISION; the stock side keeps "
        "float32); results go to indexing_profile_<precision>",
    )
    parser.add_argument(
        "--sentence-precision",
        default=None,
        choices=("float32", "int8"),
        help="the pack's sentence pass (RAG_PACK_SENTENCE_PRECISION; default: the pack's)",
    )
    parser.add_argument("--no-demo", action="store_true", help="skip the rag-pack demo side")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    add_out_argument(parser)
    args = parser.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    if args.child:
        child(*args.child)
        return
    results = []
    for name in args.corpora.split(","):
        sides = ["stock", "stock_hybrid", "pack"]
        if name == "wiki8" and not args.no_demo:
            sides.append("demo")
        for side in sides:
            env = dict(os.environ)
            env.pop("RAG_PACK_SENTENCE_PRECISION", None)
            if side.startswith("stock"):  # what a LlamaIndex user runs: the model in float32
                env["RAG_PACK_EMBED_PRECISION"] = "float32"
            elif args.pack_precision:
                env["RAG_PACK_EMBED_PRECISION"] = args.pack_precision
            if args.sentence_precision and not side.startswith("stock"):
                env["RAG_PACK_SENTENCE_PRECISION"] = args.sentence_precision
            if side == "demo":
                found = run_demo(args.cores, env)
            else:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", side, name, "--cores", str(args.cores)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                ).stdout
                found = json.loads(out.split("RESULT ", 1)[1])
            print(side, name, f"{found['index_s']:.1f} s", f"{found['peak_mb']:.0f} MB", flush=True)
            results.append(found)
    tables = []
    summary_rows: list[list[Any]] = []
    demo_rows: list[list[Any]] = []
    for name in args.corpora.split(","):
        pack = next(r for r in results if r["corpus"] == name and r["side"] == "pack")
        stock = next(r for r in results if r["corpus"] == name and r["side"] == "stock")
        hybrid = next(r for r in results if r["corpus"] == name and r["side"] == "stock_hybrid")
        summary_rows.append(
            [
                name,
                pack["chunks"],
                f"{pack['index_s']:.1f}",
                f"{stock['index_s']:.1f}",
                f"{hybrid['index_s']:.1f}",
                f"**{pack['index_s'] / hybrid['index_s']:.2f}x**",
                f"{pack['peak_mb']:.0f}",
                f"{hybrid['peak_mb']:.0f}",
                f"{pack['peak_mb'] / hybrid['peak_mb']:.2f}x",
            ]
        )
        demo = next((r for r in results if r["corpus"] == name and r["side"] == "demo"), None)
        if demo is not None:
            demo_rows.append(
                [
                    f"{demo['index_s']:.1f}",
                    f"{demo['wall_s']:.1f}",
                    f"{hybrid['index_s']:.1f}",
                    f"**{demo['index_s'] / hybrid['index_s']:.2f}x**",
                ]
            )
        rows = [
            [s["stage"], f"{s['s']:.2f}", f"{100 * s['s'] / pack['index_s']:.0f}%",
             f"{s['rss_mb']:.0f}", f"{s['peak_mb']:.0f}"]
            for s in pack["stages"]
        ]  # fmt: skip
        for i, s in enumerate(pack["searches"], 1):
            rows.append([f"default search {i}", f"{s['s']:.3f}", "", f"{s['rss_mb']:.0f}",
                         f"{s['peak_mb']:.0f}"])  # fmt: skip
        tables.append(
            (
                f"`{name}`: the pack's stages",
                md_table(["stage", "s", "share", "RSS MB after", "peak MB"], rows, "lrrrr"),
            )
        )
    if demo_rows:
        tables.insert(
            0,
            (
                "The first `rag-pack demo` in a fresh directory, beside the stock hybrid recipe",
                md_table(
                    ["demo's indexing step s", "demo wall s", "stock hybrid s",
                     "demo / stock hybrid"],
                    demo_rows,
                    "rrrr",
                ),
            ),
        )  # fmt: skip
    tables.insert(
        0,
        (
            "Pack against the stock recipes on the same chunks and model",
            md_table(
                ["corpus", "chunks", "pack s", "stock dense s", "stock hybrid s",
                 "pack / hybrid", "pack peak MB", "hybrid peak MB", "ratio"],
                summary_rows,
                "lrrrrrrrr",
            ),
        ),
    )  # fmt: skip
    suffix = "_".join(
        f"{label}{value}"
        for label, value in (("", args.pack_precision), ("sentences_", args.sentence_precision))
        if value
    )
    name = f"indexing_profile_{suffix}" if suffix else "indexing_profile"
    model = (
        f"; the pack's model in {args.pack_precision or 'float32'}, its sentence pass in "
        f"{args.sentence_precision or args.pack_precision or 'float32'}"
        if suffix
        else "; the pack's defaults (the model in float32 for chunks, sentences and questions)"
    )
    write_results(
        name,
        {"runs": results, "pack_precision": args.pack_precision or "float32"},
        tables,
        out=args.out,
        description=(
            "`RagPack(documents)` stage by stage (the functions its insert calls, timed) and the "
            "stock recipes (`VectorStoreIndex` over `MilvusVectorStore` on Milvus Lite: dense, "
            "and hybrid with Milvus' own BM25 function, `BM25BuiltInFunction`) on the same "
            "chunks and embedding model (the stock sides in float32, as a LlamaIndex user runs "
            f"it), each in a fresh process pinned to {args.cores} cores{model}. `wiki8` also "
            "runs the first `rag-pack demo` in a fresh directory (its own timing of the "
            "indexing step; the wall time adds loading and three answers)."
        ),
    )
    print(f"wrote {name}.json and {name}.md")


if __name__ == "__main__":
    main()
