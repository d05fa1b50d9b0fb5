"""The labelled set of ``bench_citations_attribution.py``: wiki_qa questions, 4-chunk contexts
with same-article hard negatives, and answers built from the gold evidence (see that script's
docstring)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from bench_citations_precision import WINDOW, window
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents

HERE = Path(__file__).resolve().parent


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
