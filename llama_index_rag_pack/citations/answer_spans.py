"""The short answer a sentence holds for a question: a span of the sentence's own text, picked
by what the question asks for (English questions; other languages get the best sentence).

A question asks for a *date* (when, what year), a *number* (how many, how much, what
percentage), a *name* (who, where, which), a *term* (what is it called, what does it stand
for) or something else. :func:`span_candidates` lists the sentence's spans of each kind: dates
and numbers (with their ranges, units and ordinals), capitalised names, quoted or bracketed
terms and what follows *known as* / *called* / *named*, and its clauses. :func:`ranked_spans`
scores them by whether their kind is the one asked for, how few of the question's own words
they repeat, and how close they stand to the words of the question the sentence holds (the
answer sits next to what the question says about it). The order was fitted on the dev split of
``wiki_qa_para`` (``benchmarks/results/offline_answers.md``).

Every span is a substring of the sentence, so a short answer picked from them is never
invented.

Example:
    >>> best_span("When did Apollo 11 land on the Moon?",
    ...           "Apollo 11 landed on the Moon on July 20, 1969, after four days.")
    'July 20, 1969'
    >>> best_span("Who wrote the theme?", "The theme was written by John Williams in 1977.")
    'John Williams'
"""

# Pure module: no LlamaIndex, no pymilvus

from __future__ import annotations

import re
from dataclasses import dataclass

from llama_index_rag_pack.documents.stop_words import ENGLISH_FUNCTION_WORDS

__all__ = [
    "MAX_SPAN_WORDS",
    "Span",
    "best_span",
    "confident_span",
    "question_kind",
    "ranked_spans",
    "scored_spans",
    "span_candidates",
]

#: The longest span, in words (a longer clause is cut at a word boundary).
MAX_SPAN_WORDS = 25

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
    "sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
    "hundred|thousand|million|billion|trillion|dozen|dozens|hundreds|thousands|millions|"
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|half|quarter"
)
_UNITS = (
    r"%|percent|per cent|years?|months?|weeks?|days?|hours?|minutes?|seconds?|centur(?:y|ies)|"
    r"decades?|km|kilomet(?:re|er)s?|miles?|met(?:re|er)s?|cm|mm|feet|foot|ft|inch(?:es)?|kg|"
    r"kilograms?|grams?|g|lb|pounds?|tons?|tonnes?|people|persons|inhabitants|residents|"
    r"members|species|times|degrees?|°[CF]?|km2|sq mi|square (?:kilomet(?:re|er)s|miles)|acres|"
    r"hectares|dollars|euros|BC|BCE|AD|CE|million|billion|thousand|hundred|trillion"
)
_NUM = rf"(?:\d[\d,.]*(?:\s\d{{3}})*(?:st|nd|rd|th|s)?|\b(?:{_NUMBER_WORDS})\b)"
_NUMBER_SPAN = re.compile(
    rf"(?:[$£€¥]\s?)?(?:\b(?:about|around|over|nearly|almost|more than|less than|fewer than|"
    rf"some|up to|approximately|roughly|circa|c\.|number)\s+)?"
    rf"(?:\b(?:{_MONTHS})\.?\s+(?:\d{{1,2}}(?:st|nd|rd|th)?,?\s+)?)?{_NUM}"
    rf"(?:\s*(?:to|-|–|and|or)\s*(?:[$£€¥]\s?)?{_NUM})?"
    rf"(?:\s*(?:{_UNITS})\b)*(?:\s+(?:{_MONTHS})(?:\s+\d{{4}})?)?",
    re.I,
)
_NAME_SPAN = re.compile(
    r"\b[A-Z][\w'’.-]*(?:\s+(?:(?:of|the|de|du|von|van|der|den|da|del|di|la|le|al|bin|y|and|&)"
    r"\s+)*[A-Z0-9][\w'’.-]*)*"
)
_TERM_SPAN = re.compile(
    r"[\"“‘]([^\"”’]{1,80})[\"”’]|\(([^()]{1,60})\)|"
    r"\b(?:known as|called|named|termed|nicknamed|dubbed|stands for|meaning|means)\s+"
    r"(?:an?\s+|the\s+)?([\w'’-]+(?:\s+[\w'’-]+){0,3})",
    re.I,
)
_CLAUSE_BREAK = re.compile(r"\s*(?:[;:()\[\]—–]|,(?=\s)|\s-\s|\bwhich\b|\bwhere\b|\bwho\b)\s*")
_WORD = re.compile(r"\w+")

_DATE_QUESTION = re.compile(
    r"\b(when|what (year|date|decade|century|day|month)|which (year|decade|century|month)|"
    r"in what year|since when|until when|how long ago)\b",
    re.I,
)
_NUMBER_QUESTION = re.compile(
    r"\b(how (many|much|long|old|far|tall|big|often|large|high|deep|wide|heavy|fast|hot|cold|"
    r"great|small)|what (percentage|percent|share|proportion|fraction|number|amount|age|size|"
    r"population|rate|price|cost|speed|height|length|distance|temperature|total|sum|rank|"
    r"place|position)|what (was|is|were|are) the ([\w'’]+ ){0,3}(output|population|total|"
    r"attendance|budget|production|revenue|capacity|area))\b",
    re.I,
)
_TERM_QUESTION = re.compile(
    r"\b(called|call|named|name for|term|stand for|stands for|mean|means|meaning|known as|"
    r"nickname|word for|title)\b",
    re.I,
)
_NAME_QUESTION = re.compile(r"\b(who|whom|whose|which|where|what (\w+ ){0,2}name)\b", re.I)

#: The question words of each kind, in the order that breaks a tie (the earliest in the
#: question wins: "how many ... when ..." asks for a number).
_QUESTION_PATTERNS = (
    ("number", _NUMBER_QUESTION),
    ("date", _DATE_QUESTION),
    ("term", _TERM_QUESTION),
    ("name", _NAME_QUESTION),
)
#: Score of a span whose kind is the one asked for, by question kind and span kind.
_KIND_MATCH = {
    "date": {"date": 2.0, "number": 1.0},
    "number": {"number": 2.0, "date": 0.5},
    "term": {"term": 2.0, "name": 1.0},
    "name": {"name": 2.0, "term": 1.0},
    "other": {"term": 0.5, "name": 0.5, "number": 0.5, "date": 0.5, "clause": 1.0},
}
#: Penalty per share of a span's words that the question already holds.
ASKED_PENALTY = 2.0
#: Penalty per word between a span and the nearest word of the question in the sentence.
DISTANCE_PENALTY = 0.15
#: Penalty of a one-word name that modifies the word after it ("Russian abacus").
MODIFIER_PENALTY = 1.0
#: Penalty of a duration ("50 years") when the question counts something else.
DURATION_PENALTY = 0.5
_TIME_UNIT = re.compile(
    r"\b(years?|months?|weeks?|days?|hours?|minutes?|long|old|age|decades?|centur(y|ies))\b", re.I
)
#: The least score of a short answer shown on its own (its kind matches the question's, it is
#: near the question's words), and its least lead over the next span; fitted on the dev split.
MIN_SPAN_SCORE = 1.3
MIN_SPAN_MARGIN = 0.2
#: The farthest distance that counts (words).
MAX_DISTANCE = 12


@dataclass(frozen=True)
class Span:
    """A candidate short answer.

    Attributes:
        text: The span, as the sentence has it.
        start: Where it starts in the sentence (a character offset).
        kind: ``date``, ``number``, ``name``, ``term`` or ``clause``.
    """

    text: str
    start: int
    kind: str


def question_kind(question: str) -> str:
    """What ``question`` asks for: ``date``, ``number``, ``term``, ``name`` or ``other``.

    Example:
        >>> [question_kind(q) for q in ("In what year did it open?", "How many moons?",
        ...   "What is the disease called?", "Who built it?", "Why did it fall?")]
        ['date', 'number', 'term', 'name', 'other']
    """
    found = [
        (m.start(), order, kind)
        for order, (kind, pattern) in enumerate(_QUESTION_PATTERNS)
        if (m := pattern.search(question))
    ]
    return min(found)[2] if found else "other"


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _is_date(text: str) -> bool:
    return bool(
        re.search(
            rf"\b({_MONTHS})\b|\b1\d{{3}}\b|\b20\d\d\b|\b\d+(st|nd|rd|th)? "
            r"centur|\b\d+s\b|\b(BC|BCE|AD|CE)\b",
            text,
        )
    )


def span_candidates(question: str, sentence: str) -> list[Span]:
    """The spans of ``sentence`` a short answer may be (none made only of the question's words;
    each at most :data:`MAX_SPAN_WORDS` words; no two alike)."""
    asked = set(_words(question))
    found: list[Span] = []
    for m in _NUMBER_SPAN.finditer(sentence):
        text = m.group().strip(" ,.")
        if text and _WORD.search(text):
            found.append(Span(text, m.start(), "date" if _is_date(text) else "number"))
    for m in _TERM_SPAN.finditer(sentence):
        index = next(i for i in (1, 2, 3) if m.group(i) is not None)
        text = m.group(index).strip(" ,.")
        if text:
            found.append(Span(text, m.start(index), "term"))
    for m in _NAME_SPAN.finditer(sentence):
        text = m.group().strip(" ,.")
        words = _words(text)
        if len(words) == 1 and words[0] in ENGLISH_FUNCTION_WORDS:
            continue  # "The", "In", ... starting the sentence
        start = m.start()
        parts = text.split(None, 1)
        if len(parts) == 2 and parts[0].lower() in ENGLISH_FUNCTION_WORDS:  # "During 1985"
            start += sentence[start:].index(parts[1], len(parts[0]))
            text = parts[1]
        if re.search(r"[A-Z]", text):
            found.append(Span(text, start, "name"))
    position = 0
    for part in _CLAUSE_BREAK.split(sentence):
        start = sentence.find(part, position)
        position = max(position, start)
        if len(part.split()) >= 2:
            found.append(Span(part.strip(" ,."), max(start, 0), "clause"))
    out: dict[str, Span] = {}
    for span in found:
        text = _first_words(span.text).strip(" ,;:.")
        words = _words(text)
        if not words or set(words) <= asked or text.lower() in out:
            continue
        out[text.lower()] = Span(text, span.start, span.kind)
    return list(out.values())


def _is_asked(word: str, asked: set[str], stems: set[str]) -> bool:
    """Whether ``word`` is one of the question's (or shares its first 5 letters with one)."""
    return word in asked or (len(word) >= 4 and word[:5] in stems)


def _stems(asked: set[str]) -> set[str]:
    return {w[:5] for w in asked if len(w) >= 4}


def _first_words(text: str) -> str:
    """``text`` up to the end of its :data:`MAX_SPAN_WORDS`-th word (its own spacing kept)."""
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    return text if len(ends) <= MAX_SPAN_WORDS else text[: ends[MAX_SPAN_WORDS - 1]]


def _anchors(question: str, sentence: str) -> list[int]:
    """Where the question's content words stand in ``sentence`` (word positions)."""
    asked = {w for w in _words(question) if w not in ENGLISH_FUNCTION_WORDS}
    stems = _stems(asked)
    return [i for i, w in enumerate(_words(sentence)) if _is_asked(w, asked, stems)]


def _score(
    span: Span, kind: str, asked: set[str], anchors: list[int], sentence: str, asked_text: str
) -> float:
    words = _words(span.text)
    score = _KIND_MATCH[kind].get(span.kind, 0.0)
    stems = _stems(asked)
    score -= ASKED_PENALTY * sum(_is_asked(w, asked, stems) for w in words) / len(words)
    if anchors:
        first = len(_words(sentence[: span.start]))
        last = first + len(words) - 1
        distance = min(
            0 if first <= a <= last else min(abs(a - first), abs(a - last)) for a in anchors
        )
        score -= DISTANCE_PENALTY * min(distance, MAX_DISTANCE)
    if kind == "number" and _TIME_UNIT.search(span.text) and not _TIME_UNIT.search(asked_text):
        score -= DURATION_PENALTY  # "almost 50 years" for "how many films"
    if span.kind == "name" and len(words) == 1:
        after = re.match(r"\s+([a-z][\w-]*)", sentence[span.start + len(span.text) :])
        if after and after.group(1) not in ENGLISH_FUNCTION_WORDS:
            score -= MODIFIER_PENALTY  # "Democratic nominee", "Persian religion": a modifier
        where = kind == "name" and re.search(r"\bwhere\b", asked_text, re.I)
        if where and re.search(r"\b(in|at|from|to|near)\s+$", sentence[: span.start]):
            score += 0.25  # "in Sweden" for a where-question
    if span.kind == "clause":
        score -= 0.02 * len(words)  # the shorter clause, other things equal
    return score


def scored_spans(question: str, sentence: str) -> list[tuple[float, str]]:
    """:func:`span_candidates` with their scores, the likeliest answer first."""
    spans = span_candidates(question, sentence)
    kind = question_kind(question)
    asked = {w for w in _words(question) if w not in ENGLISH_FUNCTION_WORDS}
    anchors = _anchors(question, sentence)
    scored = [
        (_score(s, kind, asked, anchors, sentence, question), i, s.text)
        for i, s in enumerate(spans)
    ]
    return [(score, text) for score, _, text in sorted(scored, key=lambda x: (-x[0], x[1]))]


def ranked_spans(question: str, sentence: str) -> list[str]:
    """:func:`span_candidates`, the likeliest answer first.

    Example:
        >>> ranked_spans("How many films did Dwan direct?",
        ...              "Over almost 50 years, Dwan directed 125 motion pictures.")[:2]
        ['125', 'almost 50 years']
    """
    return [text for _, text in scored_spans(question, sentence)]


def best_span(question: str, sentence: str) -> str:
    """The likeliest short answer to ``question`` in ``sentence`` (the sentence itself when it
    has no span to offer)."""
    spans = ranked_spans(question, sentence)
    return spans[0] if spans else _first_words(sentence)


def confident_span(question: str, sentence: str) -> str | None:
    """:func:`best_span` when it is a likely answer: the question asks for a date, number,
    name or term, the span is of that kind near the question's words (score at least
    :data:`MIN_SPAN_SCORE`) and ahead of the next span by :data:`MIN_SPAN_MARGIN`; else
    ``None`` (the quoted sentences answer alone).

    Example:
        >>> confident_span("Where was Einstein born?", "Einstein was born in Ulm in 1879.")
        'Ulm'
        >>> confident_span("Why did the empire fall?", "The empire fell for many reasons.") is None
        True
    """
    if question_kind(question) == "other":
        return None
    scored = scored_spans(question, sentence)
    if not scored or scored[0][0] < MIN_SPAN_SCORE:
        return None
    if len(scored) > 1 and scored[0][0] - scored[1][0] < MIN_SPAN_MARGIN:
        return None
    return scored[0][1]
