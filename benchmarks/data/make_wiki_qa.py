"""Build ``wiki_qa.jsonl``: a labelled retrieval + answer set over the shipped Wikipedia articles.

No capable question-writing model runs offline here, so the questions are made by deterministic
rules from the article text (see ``benchmarks/data/README.md``):

* ``definition``: the lead sentence ``<Title> is/was <description>.`` becomes
  ``What is <description>?``; the answer is the title (a known-item query with the title removed).
* ``year``: a sentence holding a year becomes a cloze question with the year replaced by
  ``what year``; the answer is the year.
* ``entity``: a sentence holding a capitalised name (not the title) becomes a cloze question with
  that name replaced by ``what``; the answer is the name.

In every question the article title (and a person's surname) is replaced by ``it``, parentheses
are dropped and leading discourse markers (``However,``) removed, so a question does not simply
repeat the article name. A question is kept only when its answer and its three rarest content
words occur together in no other article, so its document-level label is unambiguous.

Each record keeps the source sentence as ``evidence``: a retrieved chunk counts as relevant at
chunk level when it comes from a relevant document and contains that sentence.

``wiki_qa_hard.jsonl`` holds the same questions with their ``HARD_DROP`` most distinctive words
(highest document frequency rank, i.e. rarest in the corpus) deleted: a stress variant with less
lexical overlap, where exact keyword matching helps less. Labels are unchanged; some questions
become ambiguous by construction.

Run: ``python benchmarks/data/make_wiki_qa.py`` (about 10 s; same output every time).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents

HERE = Path(__file__).resolve().parent
SEED = 7
PER_ARTICLE = {"definition": 1, "year": 1, "entity": 1}
HARD_DROP = 2
WH_WORDS = frozenset({"what", "year", "which", "who", "whom"})

STOPWORDS = frozenset(
    """a an the and or but if of at by for with about against between into through during before
    after above below to from up down in out on off over under again further then once here there
    when where why how all any both each few more most other some such no nor not only own same so
    than too very can will just should now is are was were be been being have has had having do does
    did doing it its it's this that these those he she they them his her their what which who whom
    as also may might would could one two first new many much however while since""".split()
)
MONTHS = frozenset(
    "January February March April May June July August September October November December".split()
)
LEADING_MARKERS = re.compile(
    r"^(However|Moreover|Furthermore|In addition|Additionally|Also|Thus|Therefore|Nevertheless|"
    r"Meanwhile|Indeed|Instead|Consequently|Similarly|Likewise|Finally|Today|Later),\s+"
)
SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
PARENS = re.compile(r"\s*\([^()]*\)")
YEAR = re.compile(r"(?<![\d,.$£])\b(1[0-9]{3}|20[0-2][0-9])\b(?![\d,]|s\b|\s*(?:BC|BCE))")
# A capitalised name: 1-4 capitalised words (allowing "of"/"de"/"the" inside), not sentence-initial.
ENTITY = re.compile(
    r"(?<=[a-z,;] )((?:[A-Z][a-z]+(?:-[A-Z][a-z]+)?)(?: (?:of |de |the |von )?[A-Z][a-z]+){0,3})"
)
ABBREVIATION = re.compile(
    r"(?:\b(?:[A-Z]\.){1,3}|\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|ca|No|Gen|Col|Lt|Mt)\.)$"
)
YEAR_CUE = frozenset(
    "in since until till from between by to and early late mid around circa before after "
    "during".split()
) | {m.lower() for m in MONTHS}
WORD = re.compile(r"[a-z0-9]+")
DEFINITION = re.compile(
    r"^(?P<subj>.+?) (?P<verb>is|was|are|were) (?P<desc>(?:a|an|the|one)\b.+)\.$"
)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOPWORDS and len(w) > 2 and not w.isdigit()]


def sentences(text: str) -> list[str]:
    """Prose sentences of an article (list items, headings and fragments skipped)."""
    out = []
    for para in text.split("\n"):
        para = para.strip()
        if len(para) < 80 or para.startswith("- "):
            continue
        pieces = [s.strip() for s in SENT_SPLIT.split(para)]
        merged: list[str] = []
        for piece in pieces:
            if merged and ABBREVIATION.search(merged[-1]):
                merged[-1] = f"{merged[-1]} {piece}"
            else:
                merged.append(piece)
        out.extend(merged)
    return out


def clean_sentence(sentence: str) -> str:
    sentence = PARENS.sub("", sentence)
    sentence = re.sub(r"\s+([,.;:])", r"\1", sentence)
    return re.sub(r"\s{2,}", " ", sentence).strip()


def looks_clean(sentence: str) -> bool:
    return (
        70 <= len(sentence) <= 240
        and sentence.endswith(".")
        and sentence[0].isupper()
        and not re.search(r"[|=\[\]{}<>\"“”]|\(\s*[;,)]|\s[;,]\s|:\s*$|\.\.", sentence)
        and sentence.count(",") <= 4
        and not re.search(r"\b(?:see|citation|ISBN|pp?\.)\b", sentence, re.I)
    )


def hide_title(text: str, title: str) -> str:
    """Replace the article name (and a person's surname) by ``it``."""
    base = re.sub(r"\s*\(.*\)$", "", title).strip()
    names = [base]
    parts = base.split()
    if 2 <= len(parts) <= 3 and all(p[:1].isupper() for p in parts) and len(parts[-1]) > 3:
        names.append(parts[-1])
    for name in names:
        esc = re.escape(name)
        text = re.sub(rf"\b{esc}'s\b|\b{esc}'(?!\w)", "its", text)
        text = re.sub(rf"(?<![A-Z][a-z] )\b{esc}\b(?! [A-Z])", "it", text)
    text = re.sub(r"^(it|its)\b", lambda m: m.group(1).capitalize(), text)
    return re.sub(r"\b(The|the) it\b", "it", text)


def to_question(prefix: str, wh: str, suffix: str) -> str:
    q = f"{prefix}{wh}{suffix}".strip()
    q = LEADING_MARKERS.sub("", q)
    q = q.rstrip(".").rstrip() + "?"
    return q[0].upper() + q[1:]


def definition_question(doc_title: str, text: str) -> tuple[str, str, str] | None:
    lead = next((s for s in sentences(text) if len(s) >= 40), None)
    if lead is None:
        return None
    cleaned = clean_sentence(lead)
    m = DEFINITION.match(cleaned)
    base = re.sub(r"\s*\(.*\)$", "", doc_title).strip()
    if not m or base.lower() not in m.group("subj").lower() or len(m.group("desc")) < 25:
        return None
    desc = hide_title(m.group("desc"), doc_title)
    if len(desc) > 200:
        cut = desc[:200].rfind(",")
        if cut < 60:
            return None
        desc = desc[:cut]
    verb = "is" if m.group("verb") in ("is", "are") else "was"
    return f"What {verb} {desc}?", base, lead


def cloze_candidates(title: str, sentence: str, kind: str) -> list[tuple[str, str]]:
    cleaned = clean_sentence(sentence)
    if not looks_clean(cleaned):
        return []
    title_words = set(words(title))
    out: list[tuple[str, str]] = []
    if kind == "year":
        matches = list(YEAR.finditer(cleaned))
        if len(matches) != 1:
            return []
        m = matches[0]
        before, after = cleaned[: m.start()], cleaned[m.end() :]
        prev = words(before)[-1:] or [""]
        if prev[0] not in YEAR_CUE:
            return []
        wh = "what year"
        if re.search(r"\b(?:in|In) $", before):
            before = before[:-3] if before.endswith("in ") else before[:-3]
            wh = "in what year"
        out.append(
            (to_question(hide_title(before, title), wh, hide_title(after, title)), m.group(1))
        )
    else:
        for m in ENTITY.finditer(cleaned):
            name = m.group(1)
            tokens = name.split()
            if (
                set(words(name)) & title_words
                or tokens[0] in MONTHS
                or tokens[0] in ("The", "In", "He", "She", "It", "They", "This", "His", "Her")
                or len(name) < 4
            ):
                continue
            before, after = cleaned[: m.start()], cleaned[m.end() :]
            prev_word = before.split()[-1] if before.split() else ""
            if prev_word[:1].isupper() or re.match(r"\s*(?:[A-Z]\b|[A-Z]\.|[A-Z]\w)", after):
                continue  # part of a longer name, or a name with initials
            before = re.sub(r"\bthe $", "", before)
            q = to_question(hide_title(before, title), "what", hide_title(after, title))
            out.append((q, name))
    return out


def build(seed: int = SEED) -> list[dict]:
    docs = [
        d
        for d in load_wikipedia_documents()
        if "(disambiguation)" not in d.metadata["title"]
        and not d.metadata["title"].startswith("List of")
    ]
    texts = {d.doc_id: d.text for d in docs}
    lowered = {doc_id: text.lower() for doc_id, text in texts.items()}
    doc_words = {doc_id: set(words(t)) for doc_id, t in texts.items()}
    df = Counter(w for ws in doc_words.values() for w in ws)
    rng = random.Random(seed)

    def unambiguous(doc_id: str, question: str, answer: str) -> bool:
        rare = sorted(set(content_words(question)), key=lambda w: (df.get(w, 0), w))[:3]
        if len(rare) < 3 or df.get(rare[0], 0) == 0:
            return False
        others = [
            other
            for other, ws in doc_words.items()
            if other != doc_id and all(w in ws for w in rare) and answer.lower() in lowered[other]
        ]
        return not others

    records: list[dict] = []
    for doc in docs:
        title = doc.metadata["title"]
        body = doc.text.split("\n\n", 1)[1] if "\n\n" in doc.text else doc.text
        found: list[tuple[str, str, str, str]] = []
        definition = definition_question(title, body)
        if definition and unambiguous(doc.doc_id, definition[0], definition[1]):
            found.append(("definition", *definition))
        sents = sentences(body)[1:]
        for kind in ("year", "entity"):
            order = list(range(len(sents)))
            rng.shuffle(order)
            for i in order:
                cands = cloze_candidates(title, sents[i], kind)
                cands = [
                    (q, a)
                    for q, a in cands
                    if len(content_words(q)) >= 5 and unambiguous(doc.doc_id, q, a)
                ]
                if cands:
                    q, a = cands[rng.randrange(len(cands))]
                    found.append((kind, q, a, sents[i]))
                    break
        for kind, question, answer, evidence in found:
            records.append(
                {
                    "id": f"wiki-qa-{len(records):04d}",
                    "question": question,
                    "answers": [answer],
                    "relevant_ids": [doc.doc_id],
                    "evidence": [evidence],
                    "type": kind,
                    "corpus": "wikipedia",
                }
            )
    return records


def harden(records: list[dict], drop: int = HARD_DROP) -> list[dict]:
    """Delete the ``drop`` rarest content words (corpus document frequency) of each question."""
    docs = load_wikipedia_documents()
    df = Counter(w for d in docs for w in set(words(d.text)))
    out = []
    for rec in records:
        tokens = re.findall(r"\S+", rec["question"])
        keyed = [
            (df.get(w, 0), i)
            for i, tok in enumerate(tokens)
            for w in [re.sub(r"[^a-z0-9]", "", tok.lower())]
            if w and w not in STOPWORDS and w not in WH_WORDS and not w.isdigit() and len(w) > 2
        ]
        removed = {i for _, i in sorted(keyed)[:drop]}
        question = " ".join(t for i, t in enumerate(tokens) if i not in removed)
        question = re.sub(r"\s+([,?;:])", r"\1", question)
        if not question.endswith("?"):
            question = question.rstrip(",;: ") + "?"
        out.append(
            {**rec, "id": rec["id"].replace("wiki-qa-", "wiki-qa-hard-"), "question": question}
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default=str(HERE / "wiki_qa.jsonl"))
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    records = build(args.seed)
    out = Path(args.out)
    for path, recs in ((out, records), (out.with_name(out.stem + "_hard.jsonl"), harden(records))):
        with open(path, "w", encoding="utf-8") as fh:
            for rec in recs:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    kinds = Counter(r["type"] for r in records)
    docs = len({r["relevant_ids"][0] for r in records})
    print(f"wrote {len(records)} questions over {docs} articles to {args.out}: {dict(kinds)}")


if __name__ == "__main__":
    main()
