"""RAPTOR spend estimate against the build it estimates: summary calls, input and output tokens.

Two corpora, each estimated (``RaptorTree.estimate``, no LLM call) and then built with the
default tree options, the bundled all-MiniLM-L6-v2 embeddings and Milvus Lite:

* ``demo``: the 8 Wikipedia articles of ``rag-pack demo`` (the estimator was checked on these);
* ``wiki_qa``: the articles of the ``wiki_qa`` labelled set (``load_wikipedia_documents()``, the
  corpus ``benchmarks/data/wiki_qa.jsonl`` refers to), held out.

The LLM is scripted: an extractive summariser that returns the first sentences of the cluster's
text, as many as fit a length drawn per cluster (a seeded hash of the text) between 15% and 40%
of the input, at most the LLM's maximum output (512 tokens). The actual tokens are the usage
meter's (counted with the tokenizer: the scripted LLM reports none). Then a build with
``max_llm_calls`` at half the estimate, resumed without a budget, is compared with the
uninterrupted tree (same nodes, texts and children per level).

Run (from the repo root): python benchmarks/bench_raptor_estimate.py [--wiki-articles N]
Writes ``raptor_estimate.json`` and ``raptor_estimate.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import tempfile
import time
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def extractive_llm() -> Any:
    from llama_index.core.utils import get_tokenizer

    from llama_index_rag_pack.testing import ScriptedLLM

    tokenizer = get_tokenizer()

    def reply(prompt: str) -> str:
        body = prompt.split("(names, numbers, dates, places).", 1)[-1].rsplit("Summary:", 1)[0]
        body = body.strip()
        draw = int(hashlib.sha1(body.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        target = min(512, max(16, int((0.15 + 0.25 * draw) * len(tokenizer(body)))))
        out: list[str] = []
        used = 0
        for sentence in _SENTENCE.split(body.replace("\n", " ")):
            n = len(tokenizer(sentence))
            if out and used + n > target:
                break
            out.append(sentence)
            used += n
        return " ".join(out)

    return ScriptedLLM(replies=reply)


def corpus(name: str, wiki_articles: int | None) -> list[Any]:
    from llama_index_rag_pack.cli.app import DEMO_TITLES
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents

    if name == "demo":
        return load_wikipedia_documents(list(DEMO_TITLES))
    return load_wikipedia_documents(limit=wiki_articles)


def make_tree(path: str, embed: Any, llm: Any, **options: Any) -> Any:
    from llama_index_rag_pack.milvus.connection import open_vector_store
    from llama_index_rag_pack.raptor.raptor_tree import RaptorTree

    return RaptorTree(
        open_vector_store(path, "bench_raptor", dim=384), embed_model=embed, llm=llm, **options
    )


def err(estimated: float, actual: float) -> float | None:
    return None if actual == 0 else (estimated - actual) / actual


def measure(name: str, docs: list[Any], embed: Any, workdir: str) -> dict[str, Any]:
    tree = make_tree(f"{workdir}/{name}.db", embed, extractive_llm())
    started = time.perf_counter()
    estimate = tree.estimate(docs)
    estimate_s = time.perf_counter() - started
    stats = tree.build(docs)
    rows = []
    for lv in estimate.levels:
        spent = stats.per_level.get(lv.level)
        rows.append(
            {
                "level": lv.level,
                "method": lv.method,
                "calls": [lv.calls, spent.calls if spent else 0],
                "input_tokens": [lv.input_tokens, spent.prompt_tokens if spent else 0],
                "output_tokens": [lv.output_tokens, spent.completion_tokens if spent else 0],
            }
        )
    for level, spent in stats.per_level.items():
        if all(r["level"] != level for r in rows):
            rows.append(
                {
                    "level": level,
                    "method": "(not estimated)",
                    "calls": [0, spent.calls],
                    "input_tokens": [0, spent.prompt_tokens],
                    "output_tokens": [0, spent.completion_tokens],
                }
            )
    total = {
        "calls": [estimate.calls, stats.llm_calls],
        "input_tokens": [estimate.input_tokens, stats.prompt_tokens],
        "output_tokens": [estimate.output_tokens, stats.completion_tokens],
    }
    return {
        "documents": len(docs),
        "leaves": estimate.leaves,
        "levels": stats.levels,
        "estimate_s": round(estimate_s, 1),
        "build_s": round(stats.seconds, 1),
        "summary_share": estimate.summary_share,
        "ceiling_calls": estimate.ceiling_calls,
        "per_level": rows,
        "total": total,
        "estimate_lines": estimate.lines(0.15, 0.6),
    }


def budget_check(docs: list[Any], embed: Any, workdir: str) -> dict[str, Any]:
    from llama_index_rag_pack.raptor.raptor_nodes import CHILD_KEY

    def shape(tree: Any) -> dict[str, Any]:
        return {
            n.node_id: (n.get_content(), tuple(sorted(n.metadata.get(CHILD_KEY) or [])))
            for n in tree.store.tree_nodes(min_level=0)
        }

    whole = make_tree(f"{workdir}/whole.db", embed, extractive_llm())
    estimate = whole.estimate(docs)
    whole_stats = whole.build(docs)
    budget = max(1, estimate.calls // 2)
    tree = make_tree(f"{workdir}/budget.db", embed, extractive_llm(), max_llm_calls=budget)
    first = tree.build(docs)
    left = tree.estimate()
    tree.max_llm_calls = None
    second = tree.resume()
    return {
        "budget": budget,
        "first_calls": first.llm_calls,
        "first_stopped_at_budget": first.stopped_at_budget,
        "estimated_left": left.calls,
        "resume_calls": second.llm_calls,
        "whole_calls": whole_stats.llm_calls,
        "same_tree": shape(tree) == shape(whole),
    }


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1%}"


def table(result: dict[str, Any]) -> str:
    rows = []
    for r in [*result["per_level"], {"level": "total", "method": "", **result["total"]}]:
        cells = [r["level"], r["method"]]
        for key in ("calls", "input_tokens", "output_tokens"):
            est, act = r[key]
            cells += [f"{est:,}", f"{act:,}", pct(err(est, act))]
        rows.append(cells)
    header = ["level", "method"] + [
        f"{what} {col}"
        for what in ("calls", "input tok", "output tok")
        for col in ("est.", "actual", "error")
    ]
    return md_table(header, rows, "ll" + "r" * 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wiki-articles", type=int, default=None, help="default: all 103")
    add_out_argument(parser)
    args = parser.parse_args()
    from llama_index_rag_pack.models.settings import resolve_embed_model

    embed = resolve_embed_model(None)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in ("demo", "wiki_qa"):
            docs = corpus(name, args.wiki_articles)
            results[name] = measure(name, docs, embed, workdir)
            print(name, results[name]["total"], flush=True)
        results["budget"] = budget_check(corpus("demo", None), embed, workdir)
        print(results["budget"], flush=True)
    b = results["budget"]
    tables = [
        (
            f"demo: {results['demo']['leaves']} chunks of {results['demo']['documents']} articles "
            f"(levels {results['demo']['levels']})",
            table(results["demo"]),
        ),
        (
            f"wiki_qa (held out): {results['wiki_qa']['leaves']} chunks of "
            f"{results['wiki_qa']['documents']} articles (levels {results['wiki_qa']['levels']})",
            table(results["wiki_qa"]),
        ),
        (
            "Budget stop and resume (demo)",
            md_table(
                [
                    "max_llm_calls",
                    "calls, stopped run",
                    "estimated left",
                    "calls to resume",
                    "uninterrupted build",
                    "same tree",
                ],
                [
                    [
                        b["budget"],
                        b["first_calls"],
                        b["estimated_left"],
                        b["resume_calls"],
                        b["whole_calls"],
                        b["same_tree"],
                    ]
                ],
                "rrrrrl",
            ),
        ),
    ]
    notes = [
        "Error = (estimate - actual) / actual. Output tokens are those of a scripted extractive "
        "summariser whose length follows the same kind of rule as the estimator's prediction (a "
        "share of the input), so that column checks the bookkeeping (carried clusters, levels, "
        "caps), not how long a real LLM's summaries are; a tree that already holds summaries "
        "calibrates the prediction on them.",
        "Example `--estimate` output (demo):\n\n"
        + "\n".join("    " + line for line in results["demo"]["estimate_lines"]),
    ]
    write_results(
        "raptor_estimate",
        results,
        tables,
        out=args.out,
        description="RAPTOR spend estimate (no LLM call) against the build it estimates.",
        notes=notes,
        headline_packages=("umap-learn", "scikit-learn"),
    )


if __name__ == "__main__":
    main()
