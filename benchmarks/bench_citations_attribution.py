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

Metrics (sentence level, :func:`llama_index_rag_pack.evaluation.metrics.citation_precision` /
``citation_recall``): precision = cited chunks that support the sentence / all cited chunks;
recall = supported sentences citing a supporting chunk / supported sentences; plus the share of
unsupported sentences flagged ``unsupported`` and of supported ones wrongly flagged.

Run:  python benchmarks/bench_citations_attribution.py [--llm-questions 8] [--out DIR]
Writes ``citations_attribution.json`` / ``.md``.
"""

from __future__ import annotations

import argparse
import time

from _attribution_set import build_split, load_items
from _results import add_out_argument, md_table, write_results
from bench_citations_precision import FixedRetriever

from llama_index_rag_pack.citations.attribution_scores import (
    DEFAULT_MAX_SOURCES,
    DEFAULT_THRESHOLD,
    DEFAULT_WEIGHT,
)
from llama_index_rag_pack.citations.citation_attribution import SentenceAttributor
from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.evaluation.metrics import citation_precision, citation_recall
from llama_index_rag_pack.testing import ScriptedLLM

KINDS = ("short", "truncated", "reordered", "unsupported")


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
    from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
    from llama_index_rag_pack.models.settings import bundled_gguf_path

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


def sweep_table(grid: list[dict]) -> str:
    header = ["weight", "threshold", "max sources", "precision", "recall", "F0.5"]
    rows = [
        (r["weight"], r["threshold"], r["max_sources"], pct(r["precision"]), pct(r["recall"]))
        + (pct(r["f05"]), pct(r["unsupported_flagged"]))
        for r in grid
    ]
    return md_table([*header, "unsupported flagged"], rows, align="rrrrrrr")


def scripted_tables(results: dict) -> list[tuple[str, str]]:
    header = ["answers (test split)", "citation precision", "citation recall", "citations"]
    header += ["unsupported sentence flagged", "supported sentence flagged", "origin", "s/answer"]
    rows = [
        (name, pct(r["precision"]), pct(r["recall"]), r["citations"])
        + (pct(r["unsupported_flagged"]), pct(r["supported_flagged"]), "/".join(r["origins"]))
        + (f"{r['seconds_per_answer']:.2f}",)
        for name, r in results.items()
    ]
    kinds = ["answers (test split)", *[f"recall: {k}" for k in KINDS[:3]]]
    kind_rows = [
        (name, *[pct(r["recall_by_kind"][k]) for k in KINDS[:3]])
        + (r["false_citations_on_unsupported"],)
        for name, r in results.items()
    ]
    return [
        ("Model-written vs attributed citations (test split)", md_table(header, rows, "lrrrrrlr")),
        (
            "Recall per answer sentence kind (test split)",
            md_table([*kinds, "citations on the unsupported sentence"], kind_rows, "lrrrr"),
        ),
    ]


def llm_table(r: dict) -> str:
    header = ["engine", "answers with ≥1 citation", "answers citing the gold chunk"]
    header += ["precision (cited = gold chunk)", "sentences flagged unsupported"]
    n = r["questions"]
    row = ("SmolLM2-135M (markers mode) + attribution", f"{r['answers_with_citation']}/{n}")
    row += (f"{r['answers_citing_gold']}/{n}", pct(r["precision"]))
    row += (f"{r['sentences_flagged_unsupported']}/{r['sentences']}",)
    row += (f"{r['gold_answer_in_text']}/{n}", f"{r['seconds_per_answer']:.1f}")
    return md_table([*header, "gold answer in text", "s/answer"], [row], align="lrrrrrr")


def describe(dev: list[dict], test: list[dict]) -> str:
    return (
        f"wiki_qa questions with their evidence found in the shipped article, one per article, "
        f"split by article: dev {len(dev)} (threshold sweep), test {len(test)} (reported). 4 "
        "chunks per question: the gold chunk, 2 other chunks of the same article, 1 of another "
        "article. Answers of the scripted engines are built from the gold evidence (not "
        "generated): a short answer, a truncated and a clause-reordered evidence sentence, and "
        "one on-topic sentence of the same article from outside the context (unsupported). "
        f"Attribution: bundled MiniLM + rapidfuzz, weight {DEFAULT_WEIGHT}, threshold "
        f"{DEFAULT_THRESHOLD}, {DEFAULT_MAX_SOURCES} passage per sentence."
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llm-questions", type=int, default=0, help="SmolLM2 on N test questions")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--sweep-only", action="store_true", help="stop after the dev sweep")
    add_out_argument(parser)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    from llama_index_rag_pack.models.settings import resolve_embed_model

    embed_model = resolve_embed_model()
    items = load_items()
    dev, test = build_split(items, 0), build_split(items, 1)
    print(f"{len(items)} questions with evidence: dev {len(dev)}, test {len(test)}", flush=True)
    grid = sweep(dev, embed_model)
    best = max(grid, key=lambda r: (round(r["f05"], 3), r["unsupported_flagged"]))
    chosen = f"weight {best['weight']}, threshold {best['threshold']}, max sources "
    chosen += f"{best['max_sources']}"
    print(sweep_table(grid) + f"\nbest on dev (F0.5): {chosen}\n", flush=True)
    if args.sweep_only:
        return
    results = {}
    for name, markers in (("scripted, cites correctly", True), ("scripted, no markers", False)):
        timing, responses = run_engine(test, scripted(test, markers), embed_model)
        results[name] = {**score(test, [r.attribution for r in responses]), **timing}
        results[name]["origins"] = sorted({r.metadata["citation_origin"] for r in responses})
    tables = scripted_tables(results)
    print("\n\n".join(t for _, t in tables), flush=True)
    if args.llm_questions:
        print(f"running SmolLM2-135M on {args.llm_questions} test questions ...", flush=True)
        r = smollm(test[: args.llm_questions], embed_model, args.max_new_tokens)
        results["SmolLM2-135M, attributed"] = r
        tables.append(("The bundled local model's real answers, attributed", llm_table(r)))
        print(tables[-1][1] + "\n" + "\n".join(r["samples"]))
    tables.append(("Threshold sweep on the dev split (chooses the defaults)", sweep_table(grid)))
    best_keys = ("weight", "threshold", "max_sources")
    defaults = {"weight": DEFAULT_WEIGHT, "threshold": DEFAULT_THRESHOLD}
    write_results(
        "citations_attribution",
        {"dev": len(dev), "test": len(test), "defaults": defaults, "engines": results}
        | {"best_on_dev": {k: best[k] for k in best_keys}, "sweep": grid},
        tables,
        out=args.out,
        description=describe(dev, test),
        notes=[f"Best on dev by F0.5 (precision weighs more): {chosen}."],
        headline_packages=["sentence-transformers", "rapidfuzz"],
    )


if __name__ == "__main__":
    main()
