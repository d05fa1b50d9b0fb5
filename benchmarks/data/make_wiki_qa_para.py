"""Fill in the derived fields of ``wiki_qa_para.jsonl``: evidence offsets and the dev/test split.

The questions, answers and evidence sentences of ``wiki_qa_para.jsonl`` were written by hand (see
``benchmarks/data/README.md``); this script only derives what follows from them, so that it can be
checked and redone:

* ``evidence_offsets``: the character offset of each evidence string in its article's text, as
  ``load_corpus("wikipedia+lee")`` produces it (an evidence string that is not an exact substring
  of its article is an error);
* ``evidence_position``: the earliest of those offsets divided by the article's length (0 = the
  article's start, 1 = its end);
* ``split``: ``dev`` or ``test``, 50/50 within each stratum (source corpus x ``hops``), by a
  seeded shuffle; the odd question of a stratum goes to ``dev`` and ``test`` in turn.

Run: ``python benchmarks/data/make_wiki_qa_para.py`` (rewrites the file in place; the same input
gives the same output).
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

from llama_index_rag_pack.evaluation.labelled import load_corpus

HERE = Path(__file__).resolve().parent
SEED = 13
FIELD_ORDER = (
    "id",
    "question",
    "answers",
    "relevant_ids",
    "evidence",
    "type",
    "corpus",
    "split",
    "hops",
    "evidence_offsets",
    "evidence_position",
)


def source_corpus(record: dict) -> str:
    """``wikipedia`` or ``lee``: the corpus the question's article comes from."""
    prefix = record["relevant_ids"][0].split(":", 1)[0]
    return {"wiki": "wikipedia", "lee": "lee"}[prefix]


def add_offsets(record: dict, texts: dict[str, str]) -> None:
    """Set ``evidence_offsets`` and ``evidence_position`` from the article text."""
    (doc_id,) = record["relevant_ids"]
    text = texts[doc_id]
    offsets = []
    for sentence in record["evidence"]:
        offset = text.find(sentence)
        if offset < 0:
            raise SystemExit(f"{record['id']}: evidence not in {doc_id}: {sentence[:80]!r}")
        offsets.append(offset)
    record["evidence_offsets"] = offsets
    record["evidence_position"] = round(min(offsets) / len(text), 3)


def assign_splits(records: list[dict], seed: int = SEED) -> None:
    """Set ``split`` to ``dev``/``test``, half of each (corpus, hops) stratum each."""
    strata: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for record in records:
        strata[(source_corpus(record), record["hops"])].append(record)
    rng = random.Random(seed)
    for index, key in enumerate(sorted(strata)):
        members = strata[key]
        rng.shuffle(members)
        n_dev = len(members) // 2 + (len(members) % 2 if index % 2 == 0 else 0)
        for position, record in enumerate(members):
            record["split"] = "dev" if position < n_dev else "test"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=HERE / "wiki_qa_para.jsonl")
    args = parser.parse_args()
    records = [json.loads(line) for line in args.path.read_text("utf-8").splitlines() if line]
    texts = {doc.doc_id: doc.text for doc in load_corpus("wikipedia+lee")}
    for record in records:
        record["hops"] = len(record["evidence"])
        add_offsets(record, texts)
    assign_splits(records)
    lines = [
        json.dumps({k: r[k] for k in FIELD_ORDER if k in r}, ensure_ascii=False) for r in records
    ]
    args.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    counts: dict[tuple[str, str, int], int] = defaultdict(int)
    for r in records:
        counts[(r["split"], source_corpus(r), r["hops"])] += 1
    print(f"wrote {len(records)} questions to {args.path}")  # noqa: T201 - a script
    for (split, corpus, hops), n in sorted(counts.items()):
        print(f"  split={split} corpus={corpus} hops={hops}: {n}")  # noqa: T201


if __name__ == "__main__":
    main()
