"""Judge-driven recursive RAG vs flat RAG on FanOutQA multi-hop questions: EM/F1, evidence
recall, and cost (LLM calls, latency) per question.

Data: the first ``--questions`` FanOutQA dev questions (``load_fanoutqa_questions``, shipped in
the ``fanoutqa`` wheel). The wheel ships no evidence pages, so the corpus is built from each
question's gold decomposition: one short document per sub-question, titled with its evidence
page, ``"<page>: <sub-question> Answer: <sub-answer>."``. Every question's documents share one
Milvus Lite collection (the others' documents are distractors), embedded with the bundled
all-MiniLM-L6-v2; both methods use the same ``vector`` retriever at the same top-k.

The LLM is scripted (no model is loaded), the same for both methods, so the comparison measures
the search, not a model:

* the *writer* answers with every item of the ``Answer: ...`` lines in the context it is given
  (each item once), citing the documents it took each from, so EM/F1 reflect which evidence
  reached the answer;
* the *judge* (judge-RAG only) is a lexical heuristic: the share of the question's content words
  found in the chunk gives 2 (all), 1 (at least a third, or any when the chunk answers a named
  sub-question) or 0; a 1 comes with a follow-up made of the question's words the chunk lacks
  plus the chunk's answer ("batting hand Pat Burrell, Mark Mulder, ..."), which is what a model
  would ask next. It never sees the gold answers.

The bundled SmolLM2-135M is far too small to judge (its replies parse to the safe default, 0,
most of the time), so with it the quality numbers would mean nothing; configure a capable LLM and
swap it in (``--help``) for real numbers. Cost is what this run reports reliably: LLM calls per
question (judge calls plus answers, bounded by ``max_llm_calls``) and latency (retrieval, the
scripted calls themselves are instant).

Run:  python benchmarks/bench_judge_rag.py [--questions 12] [--top-k 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

STOP = set(
    "a an the of in on at to for by with and or is are was were be been who what which when where "
    "why how did does do many much each these those this that their his her its from as than "
    "most more first all any one two three five four ten".split()
)
SCRIPTED_NOTE = (
    "The LLM is scripted for both methods: a writer that repeats the 'Answer:' parts of its "
    "context and, for judge-RAG, a lexical judge (no gold answers). The numbers compare the "
    "search strategies, not a model; with the bundled SmolLM2-135M the quality numbers would "
    "mean little."
)
_WORD = re.compile(r"[a-z0-9]+")
_DOCUMENT = re.compile(r"<document id=(\d+)[^>]*>\n(.*?)\n</document>", re.S)
_ANSWER = re.compile(r"Answer: (.+?)\.(?:\n|$)")


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP and len(w) > 1}


def corpus(questions: list[dict[str, Any]], raw: dict[str, Any]) -> tuple[list[Any], dict]:
    """One document per sub-question of every question; the evidence titles per question."""
    from llama_index.core.schema import Document

    docs, evidence = [], {}
    for q in questions:
        titles = set()
        stack = list(raw[q["id"]].get("decomposition", []))
        while stack:
            sub = stack.pop()
            stack.extend(sub.get("decomposition") or [])
            ev = sub.get("evidence") or {}
            if not ev.get("title"):
                continue
            answer = sub.get("answer")
            answer = ", ".join(map(str, answer)) if isinstance(answer, list) else str(answer)
            titles.add(ev["title"])
            text = f"{ev['title']}: {sub['question']} Answer: {answer}."
            docs.append(Document(text=text, metadata={"title": ev["title"], "qid": q["id"]}))
        evidence[q["id"]] = titles
    return docs, evidence


def scripted_reply(prompt: str) -> str:
    if "<document id=" in prompt:  # the writer: every answer in its context, each cited
        found: dict[str, list[str]] = {}
        for doc_id, body in _DOCUMENT.findall(prompt):
            for answer in _ANSWER.findall(body + "\n"):
                for item in answer.split(", "):  # each listed item once
                    found.setdefault(item.strip(), []).append(doc_id)
        cited = (f"{a} " + "".join(f"[1](id={i})" for i in ids) for a, ids in found.items())
        return ", ".join(cited) + "." if found else "I don't know."
    question = re.search(r"Question: (.*)", prompt).group(1)
    chunk = re.search(r"Passage:\n(.*?)\n\nScore 2", prompt, re.S).group(1)
    asked, have = content_words(question), content_words(chunk)
    share = len(asked & have) / max(len(asked), 1)
    if share >= 0.999:
        return '{"score": 2}'
    if share >= 1 / 3 or (share > 0 and "Answer:" in chunk):
        missing = " ".join(w for w in _WORD.findall(question.lower()) if w in asked - have)
        answer = _ANSWER.search(chunk + "\n")
        follow = f"{missing} {answer.group(1) if answer else ''}".strip()
        return json.dumps({"score": 1, "follow_up": follow + "?"})
    return '{"score": 0}'


def evaluate(engine: Any, questions: list[dict], evidence: dict, judged: bool) -> list[dict]:
    from llama_index_rag_pack.evaluation.metrics import exact_match, token_f1

    rows = []
    for q in questions:
        start = time.perf_counter()
        response = engine.query(q["question"])
        latency = time.perf_counter() - start
        if judged:
            tree = response.search_tree
            seen = [c for node in tree.nodes() for c in node.chunks]
            used = [c.source for c in seen if c.score in (1, 2)]
            seen_titles = {c.source for c in seen}
        else:
            seen_titles = {n.node.metadata["title"] for n in response.context_nodes}
            used = [n.node.metadata["title"] for n in response.source_nodes]
        answer = getattr(response, "answer", None) or str(response)
        answer = re.sub(r"\s*\[\d+\]", "", answer).strip()
        gold, titles = q["answers"], evidence[q["id"]]
        rows.append(
            {
                "id": q["id"],
                "em": exact_match(answer, gold),
                "f1": token_f1(answer, gold),
                "evidence_recall_seen": len(titles & seen_titles) / max(len(titles), 1),
                "evidence_recall_used": len(titles & set(used)) / max(len(titles), 1),
                # flat: CitedQueryEngine's one answer call; judge: counted in the tree
                "llm_calls": response.search_tree.llm_calls if judged else 1,
                "latency_s": latency,
            }
        )
    return rows


def summary(rows: list[dict]) -> dict[str, float]:
    keys = ["em", "f1", "evidence_recall_seen", "evidence_recall_used", "llm_calls", "latency_s"]
    out = {k: statistics.fmean(r[k] for r in rows) for k in keys}
    out["llm_calls_max"] = max(r["llm_calls"] for r in rows)
    out["latency_p50_s"] = statistics.median(r["latency_s"] for r in rows)
    return out


def main() -> None:
    from llama_index_rag_pack import RagPack, judge_query_engine
    from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
    from llama_index_rag_pack.evaluation.datasets import load_fanoutqa_questions
    from llama_index_rag_pack.testing import ScriptedLLM

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--max-depth", type=int, default=2)
    parser.add_argument("--max-branching", type=int, default=2)
    parser.add_argument("--max-llm-calls", type=int, default=24)
    parser.add_argument(
        "--llm",
        default=None,
        help="a real LLM for both methods instead of the script: local (the bundled "
        "SmolLM2-135M), openai, or a .gguf path; results go to judge_rag_<llm>.md",
    )
    add_out_argument(parser)
    args = parser.parse_args()

    import fanoutqa

    path = os.path.join(os.path.dirname(fanoutqa.__file__), "data", "fanout-final-dev.json")
    with open(path, encoding="utf-8") as fh:
        raw = {str(item["id"]): item for item in json.load(fh)}
    questions = load_fanoutqa_questions("dev", limit=args.questions)
    docs, evidence = corpus(questions, raw)
    tmp = tempfile.mkdtemp(prefix="bench_judge_")
    start = time.perf_counter()
    pack = RagPack(docs, uri=os.path.join(tmp, "m.db"), llm=ScriptedLLM(replies=[]))
    index_s = time.perf_counter() - start
    retriever = pack.retriever("vector", similarity_top_k=args.top_k)
    llm = ScriptedLLM(replies=scripted_reply)
    if args.llm:
        from llama_index_rag_pack.models.settings import resolve_llm

        llm = resolve_llm(args.llm)
    flat = CitedQueryEngine(retriever, llm, style="empty")
    judge = judge_query_engine(
        pack,
        "vector",
        similarity_top_k=args.top_k,
        style="empty",
        max_depth=args.max_depth,
        max_branching=args.max_branching,
        max_llm_calls=args.max_llm_calls,
    )
    judge._llm = llm
    rows = {
        "flat": evaluate(flat, questions, evidence, judged=False),
        "judge": evaluate(judge, questions, evidence, judged=True),
    }
    means = {name: summary(r) for name, r in rows.items()}
    header = ["method", "EM", "F1", "evidence recall (seen)", "evidence recall (used)",
              "LLM calls / q (max)", "latency / q (median)"]  # fmt: skip
    table = md_table(
        header,
        [
            [
                name,
                f"{m['em']:.3f}",
                f"{m['f1']:.3f}",
                f"{m['evidence_recall_seen']:.3f}",
                f"{m['evidence_recall_used']:.3f}",
                f"{m['llm_calls']:.1f} ({m['llm_calls_max']})",
                f"{m['latency_p50_s'] * 1000:.0f} ms",
            ]
            for name, m in means.items()
        ],
        "lrrrrrr",
    )
    per_q = md_table(
        ["question", "method", "F1", "evidence (seen)", "LLM calls", "latency"],
        [
            [
                r["id"],
                name,
                f"{r['f1']:.2f}",
                f"{r['evidence_recall_seen']:.2f}",
                r["llm_calls"],
                f"{r['latency_s'] * 1000:.0f} ms",
            ]  # fmt: skip
            for name, rs in rows.items()
            for r in rs
        ],
        "llrrrr",
    )
    label = "scripted LLM" if not args.llm else f"LLM: {args.llm}"
    name = "judge_rag" if not args.llm else "judge_rag_" + re.sub(r"\W+", "_", args.llm)
    write_results(
        name,
        {
            "settings": vars(args) | {"documents": len(docs), "index_s": index_s},
            "summary": means,
            "per_question": rows,
        },  # fmt: skip
        [(f"Judge-RAG vs flat RAG, FanOutQA dev ({label})", table), ("Per question", per_q)],
        out=args.out,
        description=(
            f"{len(questions)} FanOutQA dev questions; corpus of {len(docs)} one-line documents "
            "built from the gold decompositions (the wheel ships no evidence pages); vector "
            f"top-{args.top_k}; judge-RAG max_depth={args.max_depth}, "
            f"max_branching={args.max_branching}, max_llm_calls={args.max_llm_calls}. "
            + (
                SCRIPTED_NOTE
                if not args.llm
                else f"Both methods use the LLM {args.llm!r}; "
                "with the bundled SmolLM2-135M the quality numbers mean little, the cost is "
                "what this measures."
            )
        ),  # fmt: skip
        notes=[
            "Evidence recall (seen): share of the question's evidence pages among all chunks "
            "retrieved (flat: the top-k; judge: every node of the search tree). (used): among "
            "the chunks the answer used (flat: the cited ones; judge: those scored 1 or 2, "
            "which are the context of an answer)."
        ],
    )


if __name__ == "__main__":
    main()
