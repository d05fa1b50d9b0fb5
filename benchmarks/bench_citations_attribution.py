"""Citation precision and recall of model-written and attributed citations, on ``wiki_qa``.

Labelled set (reproducible): the questions of ``benchmarks/data/wiki_qa.jsonl`` whose evidence
sentence is found in its shipped Wikipedia article, one per article, split by article into a
*dev* half (even article index: the defaults were chosen there) and a *test* half (odd: reported).
Each question gets a context of 4 chunks of ~600 characters, shuffled: the *gold* chunk around
its evidence sentence, 2 chunks from elsewhere in the same article (hard negatives: same topic,
same source; fewer for short articles) and chunks of other articles to make 4.

Answers are **built from the gold evidence, not generated** (no LLM is run for them), 4 sentences:

* ``short``: "The answer is <gold answer>." (what a tiny model often writes);
* ``truncated``: the first 60 % of the evidence sentence's words;
* ``reordered``: the evidence sentence with its comma-separated clauses in reverse order and every
  5th word dropped (a crude paraphrase);
* ``unsupported``: a sentence of the same article from outside every context chunk (on topic,
  fluent, supported by no passage).

Gold support: the first three sentences are supported by the gold chunk only, the last by none.

Engines (``CitedQueryEngine`` over a fixed retriever, the bundled MiniLM for attribution):

* ``scripted, cites correctly``: the same answer with ``[k](id=gold)`` on the three supported
  sentences (model-written citations; the unsupported one has none and goes to attribution);
* ``scripted, no markers``: the same answer without markers: every citation is attributed;
* ``SmolLM2-135M`` (``--llm-questions`` test questions, optional): the bundled local model's real
  answers, attributed. Its sentences have no gold label, so a citation counts as correct when it
  points at the gold chunk (the 3 other chunks are about other articles).

Metrics (sentence level, :func:`llama_index_rag_pack.core.metrics.citation_precision` /
``citation_recall``): precision = cited chunks that support the sentence / all cited chunks;
recall = supported sentences citing a supporting chunk / supported sentences; plus the share of
unsupported sentences flagged ``unsupported`` and of supported ones wrongly flagged.

Run:  python benchmarks/bench_citations_attribution.py [--llm-questions 8] [--out DIR]
Writes ``citations_attribution.json`` / ``.md``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

from _results import add_out_argument, md_table, write_results
from bench_citations_precision import WINDOW, FixedRetriever, window
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_rag_pack.components.citation_attribution import SentenceAttributor
from llama_index_rag_pack.components.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.core.attribution_scores import (
    DEFAULT_MAX_SOURCES,
    DEFAULT_THRESHOLD,
    DEFAULT_WEIGHT,
)
from llama_index_rag_pack.core.metrics import citation_precision, citation_recall
from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
from llama_index_rag_pack.testing import ScriptedLLM

HERE = Path(__file__).resolve().parent
KINDS = ("short", "truncated", "reordered", "unsupported")


def load_items() -> list[dict]:
    """One question per article whose evidence is found in the article, with the article text."""
    rows = [json.loads(x) for x in (HERE / "data" / "wiki_qa.jsonl").read_text().splitlines() if x]
    titles = list(dict.fromkeys(r["relevant_ids"][0].removeprefix("wiki:") for r in rows))
    docs = {d.metadata["title"]: d for d in load_wikipedia_documents(titles)}
    items, seen = [], set()
    for row in rows:
        title = row["relevant_ids"][0].removeprefix("wiki:")
        if title in seen or title not in docs or not row.get("evidence"):
            continue
        flat = " ".join(docs[title].text.split())
        pos = flat.find(row["evidence"][0])
        if pos < 0:
            continue
        seen.add(title)
        items.append(
            {
                "row": row,
                "title": title,
                "url": docs[title].metadata["url"],
                "text": flat,
                "span": (pos, pos + len(row["evidence"][0])),
                "article": titles.index(title),
            }
        )
    return items


def same_article_windows(item: dict, rng: random.Random, k: int) -> list[tuple[int, int]]:
    """Up to ``k`` spans of the item's article, away from its evidence and from each other."""
    text, (lo, hi) = item["text"], item["span"]
    taken = [(lo - 2 * WINDOW - 400, hi + 2 * WINDOW + 400)]
    spans = []
    for _ in range(50):
        if len(spans) == k or len(text) < 4 * WINDOW:
            break
        start = rng.randrange(WINDOW, max(WINDOW + 1, len(text) - WINDOW))
        if all(start + 2 * WINDOW + 400 < a or start - 2 * WINDOW - 400 > b for a, b in taken):
            spans.append((start, start))
            taken.append((start - 2 * WINDOW - 400, start + 2 * WINDOW + 400))
    return spans


def outside_sentence(item: dict, windows: list[tuple[int, int]], rng: random.Random) -> str:
    """A sentence of the item's article outside every context chunk: on topic, unsupported."""
    text = item["text"]
    candidates = []
    for m in re.finditer(r"[A-Z][^.!?]{40,220}[.!?](?= |$)", text):
        if all(m.end() < a - WINDOW - 20 or m.start() > b + WINDOW + 20 for a, b in windows):
            candidates.append(m.group(0))
    return rng.choice(candidates) if candidates else ""


def reorder(sentence: str) -> str:
    clauses = [c.strip() for c in sentence.rstrip(".").split(",") if c.strip()]
    words = " ".join(reversed(clauses)).split()
    kept = [w for i, w in enumerate(words, 1) if i % 5 or len(words) < 6]
    return " ".join(kept).rstrip(".") + "."


def answer_sentences(item: dict, unsupported: str) -> list[str]:
    evidence = item["row"]["evidence"][0]
    words = evidence.rstrip(".").split()
    return [
        f"The answer is {item['row']['answers'][0]}.",
        " ".join(words[: max(4, round(len(words) * 0.6))]) + ".",
        reorder(evidence),
        unsupported,
    ]


def context_for(item: dict, pool: list[dict], rng: random.Random) -> tuple[list[dict], str]:
    """The gold chunk, 2 other chunks of the same article (fewer for short articles: other
    articles fill in), 1 chunk of another article; and an on-topic unsupported sentence."""

    def chunk(source: dict, span: tuple[int, int]) -> dict:
        return {
            "title": source["title"],
            "url": source["url"],
            "text": window(source["text"], *span),
        }

    spans = [item["span"], *same_article_windows(item, rng, 2)]
    others = rng.sample([o for o in pool if o is not item], 4 - len(spans) + 1)
    context = [chunk(item, s) for s in spans] + [chunk(o, o["span"]) for o in others[:-1]]
    unsupported = outside_sentence(item, spans, rng) or others[-1]["row"]["evidence"][0]
    return context, unsupported


def build_split(items: list[dict], parity: int, seed: int = 13) -> list[dict]:
    pool = [x for x in items if x["article"] % 2 == parity]
    rng = random.Random(seed + parity)
    labelled = []
    for item in pool:
        context, unsupported = context_for(item, pool, rng)
        gold_text = context[0]["text"]
        rng.shuffle(context)
        nodes = [
            NodeWithScore(
                node=TextNode(text=c["text"], metadata={"title": c["title"], "url": c["url"]}),
                score=1.0,
            )
            for c in context
        ]
        gold = [c["text"] for c in context].index(gold_text) + 1
        labelled.append(
            {
                "question": item["row"]["question"],
                "answers": item["row"]["answers"],
                "nodes": nodes,
                "gold": gold,
                "sentences": answer_sentences(item, unsupported),
                "support": [[gold], [gold], [gold], []],
            }
        )
    return labelled


def scripted(labelled: list[dict], markers: bool) -> ScriptedLLM:
    by_question = {x["question"]: x for x in labelled}

    def reply(prompt: str) -> str:
        for question, x in by_question.items():
            if question in prompt:
                parts = []
                for sentence, support in zip(x["sentences"], x["support"], strict=True):
                    if markers and support:
                        sentence = sentence[:-1] + f" [1](id={support[0]})."
                    parts.append(sentence)
                return " ".join(parts)
        return "I don't know."

    return ScriptedLLM(replies=reply)


def per_gold_sentence(x: dict, attribution) -> tuple[list[list[int]], list[bool]]:
    """Cited positions and the "flagged unsupported" verdict of each built sentence (a built
    sentence the splitter cut in two gets the union of its pieces)."""
    starts, offset = [], 0
    for sentence in x["sentences"]:
        starts.append(offset)
        offset += len(sentence) + 1
    cited: list[list[int]] = [[] for _ in x["sentences"]]
    flagged = [True] * len(x["sentences"])
    offset = 0
    for piece, verdict in zip(attribution.sentences, attribution.verdicts, strict=True):
        k = max(
            i
            for i, s in enumerate(starts)
            if s <= offset + len(piece.raw) - len(piece.raw.lstrip())
        )
        offset += len(piece.raw)
        cited[k] += [p for p in verdict.positions if p not in cited[k]]
        flagged[k] = flagged[k] and verdict.origin.value in ("unsupported", "skipped")
    return cited, flagged


def score(labelled: list[dict], attributions: list) -> dict:
    cited_all, support_all, kinds = [], [], {k: [] for k in KINDS}
    flagged_unsupported = wrongly_flagged = supported_total = 0
    for x, attribution in zip(labelled, attributions, strict=True):
        cited, flagged = per_gold_sentence(x, attribution)
        cited_all += cited
        support_all += x["support"]
        for kind, c, s, f in zip(KINDS, cited, x["support"], flagged, strict=True):
            kinds[kind].append((c, s))
            if s:
                supported_total += 1
                wrongly_flagged += f
            else:
                flagged_unsupported += f
    n = len(labelled)
    return {
        "questions": n,
        "precision": citation_precision(cited_all, support_all),
        "recall": citation_recall(cited_all, support_all),
        "citations": sum(len(c) for c in cited_all),
        "unsupported_flagged": flagged_unsupported / n if n else float("nan"),
        "supported_flagged": wrongly_flagged / supported_total if supported_total else 0.0,
        "recall_by_kind": {
            k: citation_recall([c for c, _ in v], [s for _, s in v])
            for k, v in kinds.items()
            if k != "unsupported"
        },
        "false_citations_on_unsupported": sum(len(c) for c, _ in kinds["unsupported"]),
    }


def answer_text(x: dict) -> str:
    return " ".join(x["sentences"])


def f_beta(precision: float, recall: float, beta: float = 0.5) -> float:
    """F-beta; beta 0.5 weighs precision more: a wrong citation misleads, a missing one does not."""
    b2 = beta * beta
    denominator = b2 * precision + recall
    return (1 + b2) * precision * recall / denominator if denominator else 0.0


def sweep(dev: list[dict], embed_model) -> list[dict]:
    shared = SentenceAttributor(embed_model)
    rows = []
    for weight in (0.3, 0.5, 0.7):
        for threshold in (0.45, 0.5, 0.55, 0.6, 0.65, 0.7):
            for max_sources in (1, 2):
                attributor = SentenceAttributor(
                    embed_model, threshold=threshold, weight=weight, max_sources=max_sources
                )
                attributor._cache = shared._cache  # same embeddings, computed once
                answers = [attributor.attribute(answer_text(x), x["nodes"]) for x in dev]
                result = score(dev, answers)
                result.update(
                    weight=weight,
                    threshold=threshold,
                    max_sources=max_sources,
                    f05=f_beta(result["precision"], result["recall"]),
                )
                rows.append(result)
    return rows


def run_engine(labelled: list[dict], llm, embed_model) -> tuple[dict, list]:
    retriever = FixedRetriever({x["question"]: x["nodes"] for x in labelled})
    engine = CitedQueryEngine(retriever, llm, embed_model=embed_model, style="text")
    responses, start = [], time.perf_counter()
    for x in labelled:
        responses.append(engine.query(x["question"]))
    seconds = (time.perf_counter() - start) / max(1, len(labelled))
    return {"seconds_per_answer": seconds}, responses


def smollm(labelled: list[dict], embed_model, max_new_tokens: int) -> dict:
    from llama_index_rag_pack.components.local_llm import LocalGGUFLLM
    from llama_index_rag_pack.components.settings import bundled_gguf_path

    llm = LocalGGUFLLM(model_path=bundled_gguf_path(), max_new_tokens=max_new_tokens).load()
    timing, responses = run_engine(labelled, llm, embed_model)
    cited = correct = citing_gold = answer_hits = flagged = sentences = 0
    samples = []
    for x, r in zip(labelled, responses, strict=True):
        verdicts = r.attribution.verdicts if r.attribution else []
        positions = [p for v in verdicts for p in v.positions]
        cited += len(positions)
        correct += sum(p == x["gold"] for p in positions)
        citing_gold += x["gold"] in positions
        answer_hits += any(a.lower() in r.raw_answer.lower() for a in x["answers"])
        sentences += sum(v.origin.value != "skipped" for v in verdicts)
        flagged += sum(v.origin.value == "unsupported" for v in verdicts)
        if len(samples) < 3:
            samples.append(f"Q: {x['question']} A: {' '.join(str(r).split())[:260]}")
    n = len(labelled)
    return {
        "questions": n,
        "precision": correct / cited if cited else float("nan"),
        "answers_citing_gold": citing_gold,
        "answers_with_citation": sum(bool(r.citations) for r in responses),
        "gold_answer_in_text": answer_hits,
        "sentences": sentences,
        "sentences_flagged_unsupported": flagged,
        "citations": cited,
        "samples": samples,
        **timing,
    }


def pct(value: float) -> str:
    return "–" if value != value else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llm-questions", type=int, default=0, help="SmolLM2 on N test questions")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--sweep-only", action="store_true", help="stop after the dev sweep")
    add_out_argument(parser)
    args = parser.parse_args()

    from llama_index_rag_pack.components.settings import resolve_embed_model

    embed_model = resolve_embed_model()
    items = load_items()
    dev, test = build_split(items, 0), build_split(items, 1)
    print(f"{len(items)} questions with evidence: dev {len(dev)}, test {len(test)}", flush=True)

    grid = sweep(dev, embed_model)
    best = max(grid, key=lambda r: (round(r["f05"], 3), r["unsupported_flagged"]))
    sweep_table = md_table(
        [
            "weight",
            "threshold",
            "max sources",
            "precision",
            "recall",
            "F0.5",
            "unsupported flagged",
        ],
        [
            (
                r["weight"],
                r["threshold"],
                r["max_sources"],
                pct(r["precision"]),
                pct(r["recall"]),
                pct(r["f05"]),
                pct(r["unsupported_flagged"]),
            )
            for r in grid
        ],
        align="rrrrrrr",
    )
    print(sweep_table)
    print(
        f"best on dev (F0.5): weight {best['weight']}, threshold {best['threshold']}, "
        f"max sources {best['max_sources']}; defaults: weight {DEFAULT_WEIGHT}, threshold "
        f"{DEFAULT_THRESHOLD}, max sources {DEFAULT_MAX_SOURCES}\n",
        flush=True,
    )
    if args.sweep_only:
        return
    results = {}
    for name, markers in (("scripted, cites correctly", True), ("scripted, no markers", False)):
        timing, responses = run_engine(test, scripted(test, markers), embed_model)
        results[name] = {**score(test, [r.attribution for r in responses]), **timing}
        results[name]["origins"] = sorted({r.metadata["citation_origin"] for r in responses})
    table = md_table(
        [
            "answers (test split)",
            "citation precision",
            "citation recall",
            "citations",
            "unsupported sentence flagged",
            "supported sentence flagged",
            "origin",
            "s/answer",
        ],
        [
            (
                name,
                pct(r["precision"]),
                pct(r["recall"]),
                r["citations"],
                pct(r["unsupported_flagged"]),
                pct(r["supported_flagged"]),
                "/".join(r["origins"]),
                f"{r['seconds_per_answer']:.2f}",
            )
            for name, r in results.items()
        ],
        align="lrrrrrlr",
    )
    kind_table = md_table(
        [
            "answers (test split)",
            *[f"recall: {k}" for k in KINDS[:3]],
            "citations on the unsupported sentence",
        ],
        [
            (
                name,
                *[pct(r["recall_by_kind"][k]) for k in KINDS[:3]],
                r["false_citations_on_unsupported"],
            )
            for name, r in results.items()
        ],
        align="lrrrr",
    )
    print(table + "\n\n" + kind_table, flush=True)
    tables = [
        ("Model-written vs attributed citations (test split)", table),
        ("Recall per answer sentence kind (test split)", kind_table),
    ]
    if args.llm_questions:
        print(f"running SmolLM2-135M on {args.llm_questions} test questions ...", flush=True)
        llm_result = smollm(test[: args.llm_questions], embed_model, args.max_new_tokens)
        results["SmolLM2-135M, attributed"] = llm_result
        r = llm_result
        llm_table = md_table(
            [
                "engine",
                "answers with ≥1 citation",
                "answers citing the gold chunk",
                "precision (cited = gold chunk)",
                "sentences flagged unsupported",
                "gold answer in text",
                "s/answer",
            ],
            [
                (
                    "SmolLM2-135M (markers mode) + attribution",
                    f"{r['answers_with_citation']}/{r['questions']}",
                    f"{r['answers_citing_gold']}/{r['questions']}",
                    pct(r["precision"]),
                    f"{r['sentences_flagged_unsupported']}/{r['sentences']}",
                    f"{r['gold_answer_in_text']}/{r['questions']}",
                    f"{r['seconds_per_answer']:.1f}",
                )
            ],
            align="lrrrrrr",
        )
        print(llm_table + "\n" + "\n".join(r["samples"]))
        tables.append(("The bundled local model's real answers, attributed", llm_table))
    tables.append(("Threshold sweep on the dev split (chooses the defaults)", sweep_table))
    description = (
        f"wiki_qa questions with their evidence found in the shipped article, one per article, "
        f"split by article: dev {len(dev)} (threshold sweep), test {len(test)} (reported). 4 "
        "chunks per question: the gold chunk, 2 other chunks of the same article, 1 of another "
        "article. Answers of the scripted engines are built from the gold evidence (not "
        "generated): a short answer, a truncated and a clause-reordered evidence sentence, and "
        "one on-topic sentence of the same article from outside the context (unsupported). "
        f"Attribution: bundled MiniLM + rapidfuzz, weight {DEFAULT_WEIGHT}, threshold "
        f"{DEFAULT_THRESHOLD}, {DEFAULT_MAX_SOURCES} passage per sentence."
    )
    write_results(
        "citations_attribution",
        {
            "dev": len(dev),
            "test": len(test),
            "defaults": {"weight": DEFAULT_WEIGHT, "threshold": DEFAULT_THRESHOLD},
            "best_on_dev": {k: best[k] for k in ("weight", "threshold", "max_sources")},
            "engines": results,
            "sweep": grid,
        },
        tables,
        out=args.out,
        description=description,
        notes=[
            f"Best on dev by F0.5 (precision weighs more): weight {best['weight']}, threshold "
            f"{best['threshold']}, max sources {best['max_sources']}."
        ],
        headline_packages=["sentence-transformers", "rapidfuzz"],
    )


if __name__ == "__main__":
    main()
