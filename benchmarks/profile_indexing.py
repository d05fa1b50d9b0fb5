"""Where indexing time and memory go: ``RagPack(documents)`` stage by stage, beside the stock
LlamaIndex recipe (``VectorStoreIndex`` over ``MilvusVectorStore`` on Milvus Lite) on the same
chunks and the same embedding model, each side in a fresh process.

Stages of the pack (the functions ``RagPack.insert`` calls, wrapped with a timer; RSS read after
each, and each stage summed over the slices the documents are written in): chunking, BM25
analysis (``before_embedding``), chunk embeddings, sentence splitting and sentence embeddings,
deleting old rows, sentence inserts, Lite inserts (``insert_nodes``), flush; then the first
default-mode search (which reads the in-memory copies) and a second one.

Corpora:

* ``wiki8``: the 8 Wikipedia articles of ``rag-pack demo`` with the bundled MiniLM (ONNX);
* ``synthetic:N``: N documents of about 180 words (one chunk each at ``chunk_size=512``) with a
  cheap hashed embedding (384-d), so the model is out of the picture.

Run:  python benchmarks/profile_indexing.py [--corpora wiki8,synthetic:20000] [--cores 2]
      [--pack-precision int8]
Writes ``indexing_profile.json`` and ``indexing_profile.md`` (``indexing_profile_int8.*`` with
``--pack-precision int8``).
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


def hashed_embedding() -> Any:
    """A 384-d embedding of hashed word counts: deterministic and about free."""
    import numpy as np
    from llama_index.core.embeddings import BaseEmbedding

    def vector(text: str) -> list[float]:
        out = np.zeros(DIM, dtype=np.float32)
        for word in text.lower().split():
            out[hash(word) % DIM] += 1.0
        norm = float(np.linalg.norm(out)) or 1.0
        return (out / norm).tolist()

    class HashedEmbedding(BaseEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            return vector(text)

        def _get_query_embedding(self, query: str) -> list[float]:
            return vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return vector(query)

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return [vector(t) for t in texts]

    return HashedEmbedding(model_name="hashed-384", embed_batch_size=512)


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


def run_stock(name: str, uri: str) -> dict[str, Any]:
    """The stock recipe on the pack's own chunks (same splitter settings, same model)."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.milvus import MilvusVectorStore

    from llama_index_rag_pack.documents.chunking import split_documents

    docs, embed = corpus(name)
    start = time.perf_counter()
    nodes = split_documents(docs)
    store = MilvusVectorStore(uri=uri, collection_name="stock", dim=DIM, overwrite=True)
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex(nodes, storage_context=context, embed_model=embed)
    store.client.flush("stock")
    total = time.perf_counter() - start
    searches = []
    for query in ("vector search quality", "river mountain history"):
        t = time.perf_counter()
        index.as_retriever(similarity_top_k=4).retrieve(query)
        searches.append({"s": time.perf_counter() - t})
    return {
        "side": "stock",
        "corpus": name,
        "chunks": len(nodes),
        "index_s": total,
        "searches": searches,
        "peak_mb": rss_mb()[1],
    }


def child(side: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "p.db")
        result = run_pack(name, uri) if side == "pack" else run_stock(name, uri)
    print("RESULT " + json.dumps(result), flush=True)


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
        for side in ("stock", "pack"):
            env = dict(os.environ)
            if side == "pack" and args.pack_precision:
                env["RAG_PACK_EMBED_PRECISION"] = args.pack_precision
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
    summary_rows = []
    for name in args.corpora.split(","):
        pack = next(r for r in results if r["corpus"] == name and r["side"] == "pack")
        stock = next(r for r in results if r["corpus"] == name and r["side"] == "stock")
        summary_rows.append(
            [
                name,
                pack["chunks"],
                f"{pack['index_s']:.1f}",
                f"{stock['index_s']:.1f}",
                f"{pack['index_s'] / stock['index_s']:.2f}x",
                f"{pack['peak_mb']:.0f}",
                f"{stock['peak_mb']:.0f}",
                f"{pack['peak_mb'] / stock['peak_mb']:.2f}x",
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
    tables.insert(
        0,
        (
            "Pack against the stock recipe on the same chunks and model",
            md_table(
                ["corpus", "chunks", "pack s", "stock s", "ratio", "pack peak MB",
                 "stock peak MB", "ratio"],
                summary_rows,
                "lrrrrrrr",
            ),
        ),
    )  # fmt: skip
    name = f"indexing_profile_{args.pack_precision}" if args.pack_precision else "indexing_profile"
    model = (
        f"; the pack embeds with the {args.pack_precision} model, the stock side with float32"
        if args.pack_precision
        else ""
    )
    write_results(
        name,
        {"runs": results, "pack_precision": args.pack_precision or "float32"},
        tables,
        out=args.out,
        description=(
            "`RagPack(documents)` stage by stage (the functions its insert calls, timed) and the "
            "stock recipe (`VectorStoreIndex` over `MilvusVectorStore`, Milvus Lite) on the same "
            f"chunks and embedding model, each in a fresh process pinned to {args.cores} "
            f"cores{model}."
        ),
    )
    print(f"wrote {name}.json and {name}.md")


if __name__ == "__main__":
    main()
