"""Chunk size and overlap, measured on the dev split of ``wiki_qa_para`` with the default mode.

For each chunk size (overlap one eighth of it), the Wikipedia and Lee corpora are split with the
package's own splitter, embedded with the bundled all-MiniLM-L6-v2, stored with their sentence
index in a fresh Milvus Lite collection, and searched with the shipped strategies: ``vector``,
``bm25``, and ``hybrid_convex`` (dense + BM25 + best sentence, shipped weights, exactly what
``RagPack`` uses). A sentence text met at an earlier size is not embedded again.

Two views of the same rankings:
- evidence@k and answer@k at rank 1 and 5: bigger chunks hold more text, so they hold the
  evidence more often at the same rank;
- evidence within a fixed token budget: the top ``budget // chunk_size`` chunks, i.e. the same
  amount of text handed to the LLM at every size (1,024 and 2,048 tokens).

Only the dev split is used (this is a tuning run).

Run:  python benchmarks/bench_chunk_size.py [--sizes 128,256,512,768] [--split dev]
      [--out benchmarks/results]
Writes ``chunk_size.json`` and ``chunk_size.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BUDGETS = (1024, 2048)
TOP_K = 10


class CachedEmbeddings:
    """Text embeddings through the bundled model, each distinct text embedded once."""

    def __init__(self, embed_model: Any) -> None:
        self.model = embed_model
        self.vectors: dict[str, list[float]] = {}
        self.embedded = 0

    def __call__(self, texts: list[str]) -> list[list[float]]:
        new = sorted({t for t in texts if t not in self.vectors})
        if new:
            for text, vec in zip(
                new, self.model.get_text_embedding_batch(new, show_progress=False), strict=True
            ):
                self.vectors[text] = vec
            self.embedded += len(new)
        return [self.vectors[t] for t in texts]


def build_collection(uri: str, size: int, documents: list[Any], embed: CachedEmbeddings) -> Any:
    """Chunks and their sentence index for one chunk size, in a new collection."""
    from llama_index.core.schema import MetadataMode

    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.documents.sentences import sentence_units
    from llama_index_rag_pack.milvus.connection import flush, open_vector_store
    from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex

    nodes = split_documents(documents, chunk_size=size, chunk_overlap=size // 8)
    vectors = embed([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    for node, vec in zip(nodes, vectors, strict=True):
        node.embedding = vec
    store = open_vector_store(uri, f"chunks_{size}", overwrite=True)
    store.add(nodes)
    flush(store)
    units = sentence_units(nodes)
    index = MilvusSentenceIndex(store.client, store.collection_name)
    index.create(dim=len(vectors[0]), overwrite=True)
    index.insert(units, embed([u.text for u in units]))
    return store, len(nodes), len(units)


def retrievers(store: Any, embed_model: Any) -> dict[str, Any]:
    from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
    from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever

    return {
        "vector": MilvusHybridRetriever(
            store, embed_model=embed_model, search_type="dense", similarity_top_k=TOP_K
        ),
        "bm25": MilvusHybridRetriever(store, search_type="sparse", similarity_top_k=TOP_K),
        "hybrid_convex": MilvusScoreFusionRetriever(
            store, embed_model=embed_model, in_memory=True, similarity_top_k=TOP_K
        ),
    }


def score(examples: list[Any], ranked: list[list[Any]], size: int) -> dict[str, float]:
    from llama_index_rag_pack.evaluation.metrics import answer_in_text
    from llama_index_rag_pack.evaluation.scoring import evidence_in_text

    def evidence(ex: Any, node: Any) -> bool:
        return node.ref_doc_id in ex.relevant_ids and evidence_in_text(
            node.get_content(), ex.evidence, ex.answers
        )

    pairs = list(zip(examples, ranked, strict=True))

    def share(hit: Any, k: int) -> float:
        return sum(any(hit(ex, h.node) for h in hits[:k]) for ex, hits in pairs) / len(pairs)

    def answer(ex: Any, node: Any) -> bool:
        return answer_in_text(node.get_content(), ex.answers)

    out: dict[str, float] = {}
    for k in (1, 5):
        out[f"evidence@{k}"] = share(evidence, k)
        out[f"answer@{k}"] = share(answer, k)
    for budget in BUDGETS:
        out[f"evidence in {budget} tokens"] = share(evidence, max(1, budget // size))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from llama_index_rag_pack.evaluation.labelled import load_corpus, load_labelled_set
    from llama_index_rag_pack.models.settings import resolve_embed_model

    examples = list(load_labelled_set("wiki_qa_para", split=args.split).examples)
    documents = load_corpus("wikipedia+lee")
    embed_model = resolve_embed_model(None)
    embed = CachedEmbeddings(embed_model)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "sizes.db")
        for size in args.sizes:
            start = time.perf_counter()
            store, chunks, sentences = build_collection(uri, size, documents, embed)
            built = time.perf_counter() - start
            row: dict[str, Any] = {"chunks": chunks, "sentences": sentences, "build_s": built}
            for name, retriever in retrievers(store, embed_model).items():
                ranked = [retriever.retrieve(ex.question) for ex in examples]
                row[name] = score(examples, ranked, size)
            results[str(size)] = row
            print(f"size {size}: {chunks} chunks, {built:.0f} s", flush=True)  # noqa: T201
    return {"split": args.split, "n_questions": len(examples), "sizes": results}


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    sizes = result["sizes"]
    cols = ["evidence@1", "evidence@5", "answer@1", "answer@5"]
    cols += [f"evidence in {b} tokens" for b in BUDGETS]
    out = []
    for strategy in ("hybrid_convex", "vector", "bm25"):
        header = ["chunk size / overlap", "chunks", *cols]
        rows = [
            [f"{s} / {int(s) // 8}", str(row["chunks"]), *(f"{row[strategy][c]:.3f}" for c in cols)]
            for s, row in sizes.items()
        ]
        out.append(
            (f"{strategy}, {result['split']} split", md_table(header, rows, "lr" + "r" * len(cols)))
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="128,256,512,768", help="chunk sizes in tokens")
    ap.add_argument("--split", default="dev")
    add_out_argument(ap)
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    result = run(args)
    write_results(
        "chunk_size",
        result,
        tables(result),
        out=args.out,
        description=(
            f"`wiki_qa_para` {result['split']} split ({result['n_questions']} questions) over "
            "the Wikipedia and Lee corpora: each chunk size (overlap 1/8) split by the package's "
            "splitter, embedded with all-MiniLM-L6-v2, stored with its sentence index in Milvus "
            "Lite, searched with the shipped strategies (top 10). evidence@k / answer@k: a chunk "
            "holding an evidence sentence / the gold answer in the top k. evidence in N tokens: "
            "in the top N // chunk size chunks, the same amount of text at every size."
        ),
        notes=[
            "A bigger chunk holds the evidence more often at rank 1, but at a fixed amount of "
            "text for the LLM, smaller chunks bring more of the evidence in.",
        ],
    )


if __name__ == "__main__":
    main()
