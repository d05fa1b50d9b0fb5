"""Peer side of bench_peer_quality.py: LangChain's ``EnsembleRetriever``, in its own venv.

Not a benchmark of its own and not meant to be run by hand: ``bench_peer_quality.py`` starts it
with the peer venv's Python (made by ``benchmarks/make_peer_venv.sh ensemble PATH``), passes the
chunks (id, text, vector), the questions and the bundled MiniLM's path as JSON on stdin, and
reads the ranked chunk ids, the latency of each retrieval and the peer's own Python and package
versions as JSON on stdout.

The recipe is LangChain's documented one: ``BM25Retriever.from_texts`` (rank-bm25, its default
whitespace preprocessing) and a FAISS store (the same vectors, queries embedded by the same
model through ``HuggingFaceEmbeddings``), each fetching ``pool`` candidates, merged by
``EnsembleRetriever`` with weights 0.5 / 0.5 (weighted reciprocal rank fusion). Each retrieval is
timed on the sync path, after one warm-up question.
"""

from __future__ import annotations

import json
import sys
import time

from _results import runtime_info
from langchain_classic.retrievers import EnsembleRetriever
from langchain_community.retrievers import BM25Retriever
from langchain_community.vectorstores import FAISS
from langchain_community.vectorstores.utils import DistanceStrategy
from langchain_huggingface import HuggingFaceEmbeddings

PACKAGES = (
    "langchain-classic",
    "langchain-community",
    "langchain-core",
    "langchain-huggingface",
    "rank-bm25",
    "faiss-cpu",
    "sentence-transformers",
    "torch",
)


def main() -> None:
    payload = json.load(sys.stdin)
    chunks, pool, top_k = payload["chunks"], payload["pool"], payload["top_k"]
    texts = [c["text"] for c in chunks]
    metadatas = [{"chunk_id": c["id"]} for c in chunks]
    embeddings = HuggingFaceEmbeddings(
        model_name=payload["model_path"],
        model_kwargs={"device": "cpu"},
        encode_kwargs={"normalize_embeddings": True},
    )
    bm25 = BM25Retriever.from_texts(texts, metadatas=metadatas, k=pool)
    faiss = FAISS.from_embeddings(
        list(zip(texts, [c["vector"] for c in chunks], strict=True)),
        embeddings,
        metadatas=metadatas,
        distance_strategy=DistanceStrategy.COSINE,
    )
    ensemble = EnsembleRetriever(
        retrievers=[bm25, faiss.as_retriever(search_kwargs={"k": pool})], weights=[0.5, 0.5]
    )
    questions = payload["questions"]
    ensemble.invoke(questions[0])
    ids, latency = [], []
    for question in questions:
        start = time.perf_counter()
        docs = ensemble.invoke(question)
        latency.append(1000.0 * (time.perf_counter() - start))
        ids.append([d.metadata["chunk_id"] for d in docs[:top_k]])
    json.dump({"ids": ids, "latency_ms": latency, "runtime": runtime_info(PACKAGES)}, sys.stdout)


if __name__ == "__main__":
    main()
