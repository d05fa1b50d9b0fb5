"""Sentence vectors from one pass per chunk, against a pass per sentence (what the sentence index
does today): quality of the sentence signal and the model time each costs.

Indexing with the bundled MiniLM spends about as long embedding the sentences of the sentence
index as embedding the chunks (``profile_indexing.py``). A chunk's forward pass already computes a
vector for every token in context; a sentence's vector can be the mean of its own tokens' vectors
in that pass (``pooled``), so one pass per chunk gives the chunk vector (the mean of all its
tokens, as the model's own pooling does) and every sentence vector. Variants:

* ``separate``: each sentence embedded on its own, headed by its document's title (the pack now);
* ``pooled``: the mean of the sentence's token vectors in the chunk's pass, normalised;
* ``pooled + chunk``: that, plus 0.3 of the chunk's own vector (more context), normalised.

A sentence the chunk's pass does not reach (MiniLM reads 256 word pieces; the pack's chunks are
256 tokens of another tokenizer) keeps its separate vector; the table says how many did.

Quality: the chunks of the held-out ``wiki_qa_para`` split's articles are ranked for each question
by their best sentence's cosine (the sentence side of the default mode, alone), and a chunk holding
the question's evidence sentence must come first (evidence@1) or in the first five (@5).

Run:  python benchmarks/bench_sentence_pooling.py [--splits dev,test] [--cores 2]
Writes ``sentence_pooling.json`` and ``sentence_pooling.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from typing import Any

import numpy as np
from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MIX = 0.3


def evaluate(split: str, embed: Any, pooler: Any) -> tuple[list[list[Any]], dict[str, Any]]:
    from llama_index.core.schema import MetadataMode

    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.documents.sentences import chunk_sentences, sentence_units
    from llama_index_rag_pack.evaluation.labelled import load_corpus, load_labelled_set

    data = load_labelled_set("wiki_qa_para", split=split)
    titles = sorted(
        {i.removeprefix("wiki:") for ex in data.examples for i in ex.relevant_ids if "wiki:" in i}
    )
    docs = load_corpus("wikipedia", titles=titles)
    doc_ids = {d.doc_id for d in docs}
    examples = [ex for ex in data.examples if set(ex.relevant_ids) <= doc_ids and ex.evidence]
    nodes = split_documents(docs)
    units = sentence_units(nodes)
    position: dict[str, int] = {}
    seen: dict[str, int] = {}
    for u in units:
        position[u.id] = seen.get(u.chunk_id, 0)
        seen[u.chunk_id] = position[u.id] + 1
    embed_texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]

    start = time.perf_counter()
    separate = np.asarray(embed.get_text_embedding_batch([u.text for u in units]))
    sentence_s = time.perf_counter() - start
    start = time.perf_counter()
    embed.get_text_embedding_batch(embed_texts)
    chunk_s = time.perf_counter() - start
    start = time.perf_counter()
    bodies = [chunk_sentences(n.get_content(metadata_mode=MetadataMode.NONE)) for n in nodes]
    chunk_vectors, per_chunk = pooler.pool(embed_texts, bodies)
    pooled_s = time.perf_counter() - start
    pooled = {
        (node.node_id, position): vector
        for node, vectors in zip(nodes, per_chunk, strict=True)
        for position, vector in enumerate(vectors)
        if vector is not None
    }
    index_of = {n.node_id: i for i, n in enumerate(nodes)}
    variants: dict[str, np.ndarray] = {"separate": separate}
    missing = 0
    for name, mix in (("pooled", 0.0), ("pooled + chunk", MIX)):
        rows = []
        for k, u in enumerate(units):
            vector = pooled.get((u.chunk_id, position[u.id]))
            if vector is None:
                missing += name == "pooled"
                rows.append(separate[k])
                continue
            if mix:
                vector = vector + mix * chunk_vectors[index_of[u.chunk_id]]
                vector = vector / np.linalg.norm(vector)
            rows.append(vector)
        variants[name] = np.stack(rows)

    def norm(s: str) -> str:
        return re.sub(r"\W+", " ", s.lower()).strip()

    texts = [norm(n.get_content(metadata_mode=MetadataMode.NONE)) for n in nodes]
    gold = [
        {i for i, t in enumerate(texts) if any(norm(e)[:60] in t for e in ex.evidence)}
        for ex in examples
    ]
    queries = np.asarray(embed.get_text_embedding_batch([ex.question for ex in examples]))
    owner = np.asarray([index_of[u.chunk_id] for u in units])
    table = []
    scores: dict[str, Any] = {}
    for name, matrix in variants.items():
        sims = queries @ matrix.T
        at1 = at5 = 0
        for q in range(len(examples)):
            best = np.full(len(nodes), -9.0)
            np.maximum.at(best, owner, sims[q])
            top = np.argsort(-best)[:5].tolist()
            at1 += top[0] in gold[q]
            at5 += bool(gold[q] & set(top))
        n = len(examples)
        model_s = sentence_s + chunk_s if name == "separate" else pooled_s
        scores[name] = {"evidence@1": at1 / n, "evidence@5": at5 / n, "model_s": model_s}
        table.append([name, n, f"{at1 / n:.3f}", f"{at5 / n:.3f}", f"{model_s:.1f}"])
    info = {
        "split": split,
        "articles": len(docs),
        "chunks": len(nodes),
        "sentences": len(units),
        "questions": len(examples),
        "sentences_not_reached": missing,
        "sentence_pass_s": sentence_s,
        "chunk_pass_s": chunk_s,
        "pooled_pass_s": pooled_s,
        "scores": scores,
    }
    return table, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", default="dev,test")
    parser.add_argument("--cores", type=int, default=2, help="pin to this many CPUs (0: all)")
    add_out_argument(parser)
    args = parser.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    from llama_index_rag_pack.models.settings import resolve_embed_model

    embed = resolve_embed_model(None)
    pooler = embed.token_pooler()  # models/token_pooling.py: the same passes the pack runs
    if pooler is None:
        raise SystemExit("the embedding model cannot pool sentence vectors (see the log)")
    tables, infos = [], []
    for split in args.splits.split(","):
        rows, info = evaluate(split, embed, pooler)
        print(split, info, flush=True)
        infos.append(info)
        title = (
            f"`wiki_qa_para` {split}: {info['questions']} questions, {info['chunks']} chunks, "
            f"{info['sentences']} sentences ({info['sentences_not_reached']} not reached by the "
            "chunk's pass keep their separate vector)"
        )
        tables.append(
            (
                title,
                md_table(
                    ["sentence vectors", "n", "evidence@1", "evidence@5", "model s"], rows, "lrrrr"
                ),
            )
        )
    write_results(
        "sentence_pooling",
        {"splits": infos},
        tables,
        out=args.out,
        description=(
            "The sentence side of the default mode alone (chunks ranked by their best sentence's "
            "cosine) with sentence vectors from a pass per sentence against vectors pooled from "
            "one pass per chunk. Model s: the passes each needs (separate: the sentence pass and "
            "the chunk pass; pooled: one token pass per chunk, `TokenPooler`), "
            f"{args.cores} cores."
        ),
    )
    print("wrote sentence_pooling.json and sentence_pooling.md")


if __name__ == "__main__":
    main()
