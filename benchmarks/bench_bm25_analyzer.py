"""BM25 analyzers on the dev split of ``wiki_qa_para``: what Milvus Lite does, what stemming buys.

Milvus's BM25 function tokenises text with an analyzer; a Milvus server accepts filters such as
English stop words and a Snowball stemmer (``analyzer_params``). This script checks two things:

1. **Milvus Lite.** The chunks of the evaluation corpus (Wikipedia + Lee, 256/32 tokens, the
   package's splitter) go into two BM25-only Lite collections: the default analyzer, and the
   standard tokenizer with ``lowercase``, ``stop`` (``_english_``) and ``stemmer`` (``english``).
   Both are searched with every dev question; identical rankings mean that Lite ignores the
   filters. The built-in ``english`` analyzer type is tried too.
2. **What the filters would buy.** The same chunks scored by a BM25 in Python with Milvus's
   formula (k1 1.2, b 0.75, idf ``log(1 + (N - n + 0.5) / (n + 0.5))``) under three analyzers:
   the default (lower-cased word tokens), plus Lucene's English stop words, plus the Snowball
   English stemmer (nltk's, the algorithm Milvus's ``stemmer`` filter names). The default
   analyzer's row is checked against Lite's own ranking.

3. **The pack's analysis.** The same chunks in BM25-only Lite collections filled the way the pack
   fills them (``documents.bm25_analysis``: an English-analysed copy in the field BM25 reads,
   queries analysed alike), without and with each chunk's title and headings: what stems and
   titles buy on Lite itself.

Dev is the tuning split; test is reported. No embeddings: BM25 alone.

    python benchmarks/bench_bm25_analyzer.py [--splits dev,test] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOP_K = 10
#: Lucene's English stop words (Milvus's ``_english_`` list).
ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
FILTERED_ANALYZER = {
    "tokenizer": "standard",
    "filter": [
        "lowercase",
        {"type": "stop", "stop_words": ["_english_"]},
        {"type": "stemmer", "language": "english"},
    ],
}
WORD = re.compile(r"\w+", re.UNICODE)


class PythonBM25:
    """BM25 over token lists, Milvus's formula."""

    def __init__(self, docs: list[list[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.lengths = [len(d) for d in docs]
        self.avg = sum(self.lengths) / len(docs)
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, doc in enumerate(docs):
            for term, tf in Counter(doc).items():
                self.postings[term].append((i, tf))
        n = len(docs)
        self.idf = {
            t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()
        }

    def top(self, query: list[str], k: int) -> list[int]:
        scores: dict[int, float] = defaultdict(float)
        for term in query:
            for i, tf in self.postings.get(term, ()):
                norm = tf + self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
                scores[i] += self.idf[term] * tf * (self.k1 + 1) / norm
        return sorted(scores, key=lambda i: (-scores[i], i))[:k]


def analyzers() -> dict[str, Any]:
    from nltk.stem.snowball import SnowballStemmer

    stemmer = SnowballStemmer("english")
    cache: dict[str, str] = {}

    def stem(word: str) -> str:
        if word not in cache:
            cache[word] = stemmer.stem(word)
        return cache[word]

    def default(text: str) -> list[str]:
        return WORD.findall(text.lower())

    def stop(text: str) -> list[str]:
        return [w for w in default(text) if w not in ENGLISH_STOP_WORDS]

    return {
        "default (lowercase)": default,
        "+ English stop words": stop,
        "+ stop words + Snowball stemmer": lambda text: [stem(w) for w in stop(text)],
    }


def lite_rankings(texts: list[str], questions: list[str]) -> dict[str, Any]:
    """Top-k chunk positions per question from two Lite collections (default / filtered)."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        client = MilvusClient(str(Path(tmp) / "bm25.db"))
        for name, params in (
            ("default", None),
            ("filtered", FILTERED_ANALYZER),
            ("english", {"type": "english"}),
        ):
            schema = client.create_schema()
            schema.add_field("pos", DataType.INT64, is_primary=True)
            extra = {"analyzer_params": params} if params else {}
            schema.add_field(
                "text", DataType.VARCHAR, max_length=65535, enable_analyzer=True, **extra
            )
            schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
            schema.add_function(
                Function(
                    name="bm25",
                    function_type=FunctionType.BM25,
                    input_field_names=["text"],
                    output_field_names=["sparse"],
                )
            )
            index = client.prepare_index_params()
            index.add_index(
                field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25"
            )
            try:
                client.create_collection(name, schema=schema, index_params=index)
            except Exception as e:  # Lite rejects some analyzer types
                out[name] = {"error": f"{type(e).__name__}: {e}"}
                continue
            client.insert(name, [{"pos": i, "text": t} for i, t in enumerate(texts)])
            hits = client.search(
                name,
                questions,
                anns_field="sparse",
                limit=TOP_K,
                search_params={"params": {"drop_ratio_search": 0}},
                output_fields=["pos"],
            )
            out[name] = {"rankings": [[h["entity"]["pos"] for h in row] for row in hits]}
        client.close()
    return out


def pack_lite_rankings(nodes: list[Any], questions: list[str]) -> dict[str, list[list[int]]]:
    """Top-k chunk positions from BM25-only Lite collections filled the pack's way: the analysed
    copy (``documents.bm25_analysis``, English) in the field BM25 reads, queries analysed alike;
    without and with the chunk's title and headings in front."""
    from llama_index_rag_pack.documents.bm25_analysis import document_headings, resolve_analyzer

    analysis = resolve_analyzer("english")
    queries = [analysis.query_text(q) for q in questions]
    variants = {
        "pack English analysis, chunk text only": [
            analysis.document_text(n.get_content()) for n in nodes
        ],
        "pack English analysis + title and headings (default)": [
            analysis.document_text(n.get_content(), document_headings(n.metadata)) for n in nodes
        ],
    }
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    out: dict[str, list[list[int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        client = MilvusClient(str(Path(tmp) / "pack_bm25.db"))
        for i, (name, texts) in enumerate(variants.items()):
            schema = client.create_schema()
            schema.add_field("pos", DataType.INT64, is_primary=True)
            schema.add_field("text", DataType.VARCHAR, max_length=65535, enable_analyzer=True)
            schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
            schema.add_function(
                Function(
                    name="bm25",
                    function_type=FunctionType.BM25,
                    input_field_names=["text"],
                    output_field_names=["sparse"],
                )
            )
            index = client.prepare_index_params()
            index.add_index(
                field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25"
            )
            collection = f"pack_{i}"
            client.create_collection(collection, schema=schema, index_params=index)
            client.insert(collection, [{"pos": j, "text": t} for j, t in enumerate(texts)])
            hits = client.search(
                collection,
                queries,
                anns_field="sparse",
                limit=TOP_K,
                search_params={"params": {"drop_ratio_search": 0}},
                output_fields=["pos"],
            )
            out[name] = [[h["entity"]["pos"] for h in row] for row in hits]
        client.close()
    return out


def metrics(examples: list[Any], nodes: list[Any], rankings: list[list[int]]) -> dict[str, float]:
    from llama_index_rag_pack.evaluation.metrics import answer_in_text
    from llama_index_rag_pack.evaluation.scoring import evidence_in_text

    ev1 = ev5 = ans1 = mrr = 0.0
    for ex, ranked in zip(examples, rankings, strict=True):
        hits = [nodes[i] for i in ranked]
        evidence = [
            n.ref_doc_id in ex.relevant_ids
            and evidence_in_text(n.get_content(), ex.evidence, ex.answers)
            for n in hits
        ]
        ev1 += any(evidence[:1])
        ev5 += any(evidence[:5])
        ans1 += bool(hits) and answer_in_text(hits[0].get_content(), ex.answers)
        mrr += next(
            (1 / (r + 1) for r, n in enumerate(hits) if n.ref_doc_id in ex.relevant_ids), 0.0
        )
    n = len(examples)
    return {"evidence@1": ev1 / n, "evidence@5": ev5 / n, "answer@1": ans1 / n, "MRR@10": mrr / n}


def run(split: str) -> dict[str, Any]:
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.labelled import load_corpus, load_labelled_set

    examples = list(load_labelled_set("wiki_qa_para", split=split).examples)
    nodes = split_documents(load_corpus("wikipedia+lee"), chunk_size=256, chunk_overlap=32)
    texts = [n.get_content() for n in nodes]
    questions = [ex.question for ex in examples]
    lite = lite_rankings(texts, questions)
    rows: dict[str, Any] = {}
    python_default: list[list[int]] = []
    for name, analyze in analyzers().items():
        bm25 = PythonBM25([analyze(t) for t in texts])
        rankings = [bm25.top(analyze(q), TOP_K) for q in questions]
        python_default = python_default or rankings
        rows[name] = metrics(examples, nodes, rankings)
    for name in ("default", "filtered"):
        if "rankings" in lite.get(name, {}):
            rows[f"Milvus Lite, {name} analyzer"] = metrics(examples, nodes, lite[name]["rankings"])
    for name, rankings in pack_lite_rankings(nodes, questions).items():
        rows[f"Milvus Lite, {name}"] = metrics(examples, nodes, rankings)
    checks: dict[str, Any] = {"english analyzer type": lite["english"].get("error", "accepted")}
    if "rankings" in lite["default"] and "rankings" in lite["filtered"]:
        same = sum(
            a == b
            for a, b in zip(lite["default"]["rankings"], lite["filtered"]["rankings"], strict=True)
        )
        checks["Lite: questions ranked identically with and without the filters"] = (
            f"{same} / {len(questions)}"
        )
        top1 = sum(
            a[:1] == b[:1] for a, b in zip(lite["default"]["rankings"], python_default, strict=True)
        )
        checks["Python default analyzer vs Lite default: same top chunk"] = (
            f"{top1} / {len(questions)}"
        )
    return {
        "split": split,
        "n_questions": len(questions),
        "chunks": len(nodes),
        "rows": rows,
        "checks": checks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", default="dev,test")
    add_out_argument(ap)
    args = ap.parse_args()
    results = {split: run(split) for split in args.splits.split(",") if split}
    cols = ["evidence@1", "evidence@5", "answer@1", "MRR@10"]
    tables = [
        (
            f"BM25 alone, {split} split (top {TOP_K})",
            md_table(
                ["BM25 analyzer", *cols],
                [[name, *(f"{m[c]:.3f}" for c in cols)] for name, m in result["rows"].items()],
                "l" + "r" * len(cols),
            ),
        )
        for split, result in results.items()
    ]
    result = next(iter(results.values()))
    checks = md_table(["check", "result"], list(result["checks"].items()))
    write_results(
        "bm25_analyzer",
        results,
        [*tables, (f"Milvus Lite and the filters ({result['split']} split)", checks)],
        out=args.out,
        description=(
            f"`wiki_qa_para` {', '.join(results)} splits ({result['n_questions']} questions "
            "each) over the "
            f"Wikipedia and Lee corpora ({result['chunks']} chunks of 256 tokens, overlap 32). "
            "Python rows: BM25 with Milvus's formula under each analyzer; Lite rows: BM25-only "
            "collections searched by Milvus Lite."
        ),
        headline_packages=("pymilvus", "milvus-lite", "nltk"),
    )


if __name__ == "__main__":
    main()
