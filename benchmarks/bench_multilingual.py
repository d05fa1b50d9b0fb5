"""Retrieval in Chinese with the defaults, beside what a LlamaIndex user would pick.

On the ``zh_qa`` dev and test splits (150 hand-written questions over five developer tutorials,
four in Chinese with English code: Chinese questions, Chinese questions about the code, English
questions; ``benchmarks/data/README.md``) and the **same chunks** (the evaluation harness's
index: the pack's loader and splitter, 256-token chunks, all-MiniLM-L6-v2 vectors), every
retriever answers every question once and is scored by the harness's scoring: evidence@1 / @5
(a chunk holding the evidence sentence), document R@1, MRR@10.

Retrievers:

* the pack with the defaults (``auto`` BM25 analysis; ``hybrid_convex`` with its shipped
  weights, which for questions the English embedding model cannot read are the ones fitted on
  the dev split): ``vector``, ``bm25``, ``hybrid``, ``hybrid_weighted``, ``hybrid_convex``;
* the pack as it was before ``auto`` (the same chunks indexed with the ``english`` analysis,
  one fusion weight for every question): ``bm25 (english)``, ``hybrid_convex (english)``;
* stock ``BM25Retriever`` (llama-index-retrievers-bm25: bm25s with its default English stop
  words and stemmer) over the chunks;
* core ``QueryFusionRetriever`` over a core ``VectorStoreIndex`` (the same vectors) and that
  BM25 retriever, ``num_queries=1`` (no LLM), in its three score modes; 50 candidates a side.

Also measured: the analysis alone (no embedding) of 1 MB of Chinese text, as one text and as
the chunks ``RagPack`` makes of it; and, both ways, whether a rare language in a collection
changes how its main language's questions are analysed and ranked by BM25 (English questions
of ``wiki_qa_para`` with the Chinese tutorials added to the English corpus; Chinese questions
of ``zh_qa`` with short documents in six other languages added).

Run:  python benchmarks/bench_multilingual.py [--splits dev,test] [--cache-dir DIR]
      [--out benchmarks/results]

Needs ``pip install llama-index-retrievers-bm25==0.8.0`` in the project's venv. Writes
``multilingual.json`` and ``multilingual.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from _results import add_out_argument, md_table, metadata_version, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOP_K = 10
POOL = 50
KS = (1, 5, 10)
COLUMNS = (
    ("evidence@1", "ev@1"),
    ("evidence@5", "ev@5"),
    ("recall@1", "doc R@1"),
    ("mrr@10", "MRR@10"),
)
LANGS = ("zh", "zh-code", "en")
PEER_PACKAGES = ("llama-index-retrievers-bm25", "bm25s", "PyStemmer", "rjieba", "sudachipy")
#: Short documents in six other languages, added to the Chinese corpus as rare languages.
RARE_DOCS = {
    "de": "Erdferkel graben mit ihren kräftigen Krallen tiefe Höhlen, in denen sie schlafen.",
    "fr": "Les oryctéropes creusent des terriers profonds avec leurs griffes puissantes.",
    "es": "Los cerdos hormigueros duermen durante el día en madrigueras subterráneas.",
    "ru": "Трубкозубы питаются муравьями и термитами, которых находят ночью.",
    "ja": "ツチブタはアフリカに住む夜行性の哺乳類で、主にシロアリを食べます。",
    "en": "Aardvarks are solitary animals that forage at night for termites and ants.",
}


def harness_for(
    split: str, cache_dir: str, fusion_config: Any = None, **kwargs: Any
) -> tuple[Any, Any, dict[str, Any]]:
    """The harness (questions of ``split``), its pack over the cached index (with
    ``fusion_config``, default the shipped one, not a saved fit), and every stored chunk by id."""
    from llama_index_rag_pack import FusionConfig
    from llama_index_rag_pack.evaluation.harness import EvalHarness
    from llama_index_rag_pack.evaluation.labelled import load_labelled_set
    from llama_index_rag_pack.milvus.bm25.bm25_upgrade import stored_nodes

    harness = EvalHarness(
        load_labelled_set("zh_qa", split=split), cache_dir=cache_dir, llm="none", **kwargs
    )
    pack = harness.prepare()
    pack.fusion_config = fusion_config or FusionConfig()
    store = pack.vector_store
    return harness, pack, {n.node_id: n for n in stored_nodes(store.client, store.collection_name)}


def english_pack_factory(documents: Any, **kwargs: Any) -> Any:
    """The pack as indexed before ``auto``: the English analysis."""
    from llama_index_rag_pack import RagPack

    if documents is None:
        return RagPack.open(**kwargs)
    return RagPack(documents, bm25_analyzer="english", **kwargs)


def one_set_of_weights() -> Any:
    """The fusion before per-language weights: the English-fitted ones for every question."""
    from llama_index_rag_pack import FusionConfig

    shipped = FusionConfig()
    return FusionConfig(unread_alpha=shipped.alpha, unread_sentence_weight=shipped.sentence_weight)


def build_retrievers(pack: Any, old_pack: Any, chunks: dict[str, Any]) -> dict[str, Any]:
    """The pack's modes and the peers (as ``bench_peer_quality`` builds them), and the pack as
    it was before ``auto``."""
    from bench_peer_quality import build_retrievers as pack_and_peers

    out = {
        ("hybrid_convex (default)" if name == "hybrid_convex" else name): retriever
        for name, retriever in pack_and_peers(pack, chunks).items()
    }
    out["bm25 (english, before)"] = old_pack.retriever("bm25", similarity_top_k=TOP_K)
    out["hybrid_convex (english, before)"] = old_pack.retriever(
        "hybrid_convex", similarity_top_k=TOP_K
    )
    return out


def score_rows(examples: list[Any], retriever: Any) -> dict[str, dict[str, Any]]:
    from llama_index_rag_pack.evaluation.scoring import score_retrieval

    return {
        ex.id: {"retrieved": score_retrieval(ex, retriever.retrieve(ex.question)[:TOP_K])}
        for ex in examples
    }


def summaries(examples: list[Any], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The metrics over all questions and per question language."""
    from llama_index_rag_pack.evaluation.scoring import summarize

    out = {"all": summarize(rows, examples, KS)}
    for lang in LANGS:
        subset = [ex for ex in examples if ex.extra.get("lang") == lang]
        out[lang] = summarize({ex.id: rows[ex.id] for ex in subset}, subset, KS)
        out[lang]["n"] = len(subset)
    return out


def quality(splits: list[str], cache_dir: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split in splits:
        harness, pack, chunks = harness_for(split, cache_dir)
        _, old_pack, _ = harness_for(
            split,
            os.path.join(cache_dir, "english"),
            one_set_of_weights(),
            pack_factory=english_pack_factory,
        )
        examples = harness.examples()
        retrievers = build_retrievers(pack, old_pack, chunks)
        out[split] = {
            "n_questions": len(examples),
            "n_chunks": len(chunks),
            "retrievers": {
                name: summaries(examples, score_rows(examples, r)) for name, r in retrievers.items()
            },
        }
    return out


def analysis_speed() -> dict[str, Any]:
    """Seconds to analyse 1 MB of Chinese text (the tutorials, repeated): as one text, and as
    the chunks RagPack makes of it (language identification, segmentation, stop words)."""
    from llama_index.core.schema import Document

    from llama_index_rag_pack.documents.bm25_analysis import resolve_analyzer
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.datasets import load_zh_tutorials
    from llama_index_rag_pack.milvus.bm25.bm25_rows import analyse_nodes

    chinese = [d.text for d in load_zh_tutorials() if d.doc_id != "zh:langchain-references-readme"]
    text = "\n\n".join(chinese)
    text = (text * (1 + 1_000_000 // len(text.encode())))[:400_000]
    while len(text.encode()) < 1_000_000:
        text += text[:1000]
    analysis = resolve_analyzer("auto")
    analysis.analyse_document("warm up 预热")  # loads the models, as any first call does
    start = time.perf_counter()
    whole = analysis.analyzer.analyse_document(text)  # every term (a stored copy is cut at 65 kB)
    one_text = time.perf_counter() - start
    nodes = split_documents([Document(id_="mb", text=text)])
    start = time.perf_counter()
    analyse_nodes(resolve_analyzer("auto"), nodes, [n.get_content() for n in nodes])
    chunked = time.perf_counter() - start
    return {
        "bytes": len(text.encode()),
        "terms": len(whole.terms),
        "one_text_s": one_text,
        "chunks": len(nodes),
        "chunked_s": chunked,
        "per_chunk_ms": 1000 * chunked / len(nodes),
    }


def english_unchanged() -> dict[str, Any]:
    """On every chunk of the shipped English corpora, whether ``auto`` gives the ``english``
    terms, and what the chunks that differ are (their recorded language)."""
    from collections import Counter

    from llama_index_rag_pack.documents.bm25_analysis import document_headings, resolve_analyzer
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.labelled import load_corpus
    from llama_index_rag_pack.milvus.bm25.bm25_rows import analyse_nodes

    nodes = split_documents(load_corpus("wikipedia+lee"))
    english = resolve_analyzer("english")
    texts = [n.get_content() for n in nodes]
    start = time.perf_counter()
    analysed = analyse_nodes(resolve_analyzer("auto"), nodes, texts)
    auto_s = time.perf_counter() - start
    start = time.perf_counter()
    before = [
        english.document_text(t, document_headings(n.metadata))
        for n, t in zip(nodes, texts, strict=True)
    ]
    english_s = time.perf_counter() - start
    differ = [a for a, b in zip(analysed, before, strict=True) if a.text != b]
    return {
        "chunks": len(nodes),
        "same_terms": len(nodes) - len(differ),
        "differ_by_language": dict(Counter("+".join(a.languages) for a in differ)),
        "auto_s": auto_s,
        "english_s": english_s,
    }


def rare_language(english_split: str = "test") -> dict[str, Any]:
    """Both ways: BM25 (in-memory, Lite's formula) of a collection's main-language questions,
    alone and with a rare language added. Chunks are analysed as RagPack does; what can change is
    the questions' analysis (their main language always comes first) and the IDF."""
    from llama_index.core.schema import Document

    from llama_index_rag_pack.documents.bm25_analysis import resolve_analyzer
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.datasets import load_zh_tutorials
    from llama_index_rag_pack.evaluation.labelled import load_corpus, load_labelled_set
    from llama_index_rag_pack.evaluation.scoring import evidence_in_text
    from llama_index_rag_pack.milvus.bm25.bm25_memory import MemoryBM25
    from llama_index_rag_pack.milvus.bm25.bm25_rows import analyse_nodes

    rare = [Document(id_=f"rare:{k}", text=v) for k, v in RARE_DOCS.items()]
    cases = {
        "English questions (wiki_qa_para), Chinese tutorials added": (
            load_labelled_set("wiki_qa_para", split=english_split),
            load_corpus("wikipedia+lee"),
            load_zh_tutorials(),
        ),
        "Chinese questions (zh_qa), six other languages added": (
            load_labelled_set("zh_qa", split="test"),
            load_zh_tutorials(),
            rare,
        ),
    }
    out = {}
    for name, (dataset, main_docs, extra_docs) in cases.items():
        row = {}
        for variant, docs in (("alone", main_docs), ("with rare", main_docs + extra_docs)):
            nodes = split_documents(docs)
            analysis = resolve_analyzer("auto")
            analysed = analyse_nodes(analysis, nodes, [n.get_content() for n in nodes])
            for found in analysed:
                analysis.profile.add([found.language])
            index = MemoryBM25([n.node_id for n in nodes], [a.text for a in analysed])
            by_id = {n.node_id: n for n in nodes}
            hits1 = hits5 = 0
            queries = []
            for ex in dataset.examples:
                query = analysis.query_text(ex.question)
                queries.append(query)
                ranked = [key for key, _ in index.search(query, 5)]
                ok = [
                    by_id[k].ref_doc_id in ex.relevant_ids
                    and evidence_in_text(by_id[k].get_content(), ex.evidence, ex.answers)
                    for k in ranked
                ]
                hits1 += bool(ok[:1] and ok[0])
                hits5 += any(ok)
            n = len(dataset.examples)
            row[variant] = {
                "evidence@1": hits1 / n,
                "evidence@5": hits5 / n,
                "queries": queries,
                "profile": analysis.profile.counts(),
            }
        alone, mixed = row["alone"]["queries"], row["with rare"]["queries"]
        changed = sum(a != m for a, m in zip(alone, mixed, strict=True))
        prefix = sum(m.startswith(a) for a, m in zip(alone, mixed, strict=True))
        out[name] = {
            "n_questions": len(alone),
            "queries_changed": changed,
            "main_language_terms_kept": prefix,
            **{
                v: {k: row[v][k] for k in ("evidence@1", "evidence@5", "profile")}
                for v in ("alone", "with rare")
            },
        }
    return out


def quality_table(block: dict[str, Any]) -> str:
    header = ["retriever", *(label for _, label in COLUMNS), *(f"{lang} ev@1/@5" for lang in LANGS)]
    rows = []
    for name, m in block.items():
        cells = [f"{m['all'][key]:.3f}" for key, _ in COLUMNS]
        cells += [f"{m[lang]['evidence@1']:.2f} / {m[lang]['evidence@5']:.2f}" for lang in LANGS]
        rows.append([name, *cells])
    return md_table(header, rows, "l" + "r" * (len(header) - 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", default="dev,test")
    ap.add_argument("--cache-dir", default=None, help="index cache (default: a temp dir)")
    add_out_argument(ap)
    args = ap.parse_args()
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="bench-multilingual-")
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    results = {
        "quality": quality(splits, cache_dir),
        "analysis_speed": analysis_speed(),
        "english_unchanged": english_unchanged(),
        "rare_language": rare_language(),
        "top_k": TOP_K,
        "candidate_pool": POOL,
    }
    tables = []
    for split, block in results["quality"].items():
        title = (
            f"`zh_qa` {split} split ({block['n_questions']} questions, {block['n_chunks']} chunks)"
        )
        tables.append((title, quality_table(block["retrievers"])))
    speed = results["analysis_speed"]
    tables.append(
        (
            "BM25 analysis of 1 MB of Chinese text (no embedding)",
            md_table(
                ["as", "seconds", "terms / chunks"],
                [
                    ["one text", f"{speed['one_text_s']:.2f}", f"{speed['terms']} terms"],
                    [
                        f"RagPack's chunks ({speed['per_chunk_ms']:.2f} ms each)",
                        f"{speed['chunked_s']:.2f}",
                        f"{speed['chunks']} chunks",
                    ],
                ],
                "lrr",
            ),
        )
    )
    same = results["english_unchanged"]
    tables.append(
        (
            "English text: `auto` against the `english` analysis (every chunk of the shipped "
            "Wikipedia and Lee corpora)",
            md_table(
                ["chunks", "same terms", "differ (their languages)", "auto s", "english s"],
                [
                    [
                        same["chunks"],
                        same["same_terms"],
                        ", ".join(f"{k} {v}" for k, v in same["differ_by_language"].items()),
                        f"{same['auto_s']:.1f}",
                        f"{same['english_s']:.1f}",
                    ]
                ],
                "rrlrr",
            ),
        )
    )
    rare_rows = [
        [
            name,
            f"{r['queries_changed']} / {r['n_questions']}",
            f"{r['main_language_terms_kept']} / {r['n_questions']}",
            f"{r['alone']['evidence@1']:.3f} / {r['alone']['evidence@5']:.3f}",
            f"{r['with rare']['evidence@1']:.3f} / {r['with rare']['evidence@5']:.3f}",
        ]
        for name, r in results["rare_language"].items()
    ]
    tables.append(
        (
            "A rare language in the collection (BM25 alone, test splits)",
            md_table(
                [
                    "case",
                    "questions analysed differently",
                    "main-language terms kept",
                    "ev@1 / @5 alone",
                    "ev@1 / @5 with rare",
                ],
                rare_rows,
                "lrrrr",
            ),
        )
    )
    versions = ", ".join(f"{p} {metadata_version(p)}" for p in PEER_PACKAGES)
    write_results(
        "multilingual",
        results,
        tables,
        out=args.out,
        description=(
            "`zh_qa` (hand-written Chinese and English questions over five developer tutorials, "
            "`benchmarks/data/README.md`), the same chunks for every retriever: the evaluation "
            "harness's index (256-token chunks, overlap 32, the bundled English "
            f"all-MiniLM-L6-v2, Milvus Lite). top_k {TOP_K}; fusion recipes fetch {POOL} "
            f"candidates a side. Packages: {versions}. ev@k: a chunk holding an evidence "
            "sentence in the top k; doc R@1: the relevant document first. zh: Chinese "
            "questions about the Chinese prose; zh-code: Chinese questions about the English "
            "code; en: English questions. The `hybrid_convex` weights for questions the "
            "embedding model cannot read were fitted on the dev split only."
        ),
    )


if __name__ == "__main__":
    main()
