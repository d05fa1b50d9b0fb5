"""Attributed citations: which retrieved passages support each sentence of an answer.

When the LLM writes no valid ``[N](id=M)`` marker on a sentence (the bundled SmolLM2-135M never
writes one), code attributes the sentence to the passages that support it, from two signals:

* **semantic**: the best cosine similarity between the sentence and any sentence of the passage
  (embeddings computed by the caller, one batch per answer);
* **lexical**: the share of the sentence's content words found in the passage, a word counting as
  found when rapidfuzz's ``fuzz.ratio`` with some passage word is at least
  :data:`TOKEN_MATCH_CUTOFF` (so "astronauts" finds "astronaut", "1969" does not find "1968").

``support = weight * semantic + (1 - weight) * lexical``. A sentence cites the passages whose
support reaches ``threshold`` and lies within ``margin`` of the best one (at most
``max_sources``); no passage reaching the threshold flags the sentence as unsupported. A sentence
without content words ("Sure!") is skipped: neither cited nor flagged.

Pure Python, numpy and rapidfuzz: no LlamaIndex (the component
:mod:`~llama_index_rag_pack.citations.citation_attribution` embeds and calls these functions).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from llama_index_rag_pack.citations.annotations import attach_markers, split_sentences
from llama_index_rag_pack.citations.attribution_scores import (
    DEFAULT_MARGIN,
    DEFAULT_MAX_SOURCES,
    DEFAULT_THRESHOLD,
    Passage,
    choose_sources,
)
from llama_index_rag_pack.citations.citation_markers import MATCH, scan_marker
from llama_index_rag_pack.core.errors import ConfigurationError, check_count

__all__ = [
    "AnswerSentence",
    "Evidence",
    "SentenceOrigin",
    "SentenceSupport",
    "answer_sentences",
    "attribution_note",
    "check_attribution_options",
    "decide_support",
    "marked_answer",
]


class SentenceOrigin(str, Enum):
    """Where a sentence's citations come from."""

    MODEL = "model"  # the LLM wrote a valid marker on it: kept untouched
    ATTRIBUTED = "attributed"  # attributed by similarity
    UNSUPPORTED = "unsupported"  # no passage reaches the threshold
    SKIPPED = "skipped"  # no content word: nothing to support


@dataclass(frozen=True)
class AnswerSentence:
    """One sentence of the LLM's answer.

    Attributes:
        raw: The sentence as written, markers and trailing whitespace included (joining every
            ``raw`` gives the answer back).
        text: The sentence without markers, whitespace-normalised.
        ids: The ids of the markers written on it, in order (valid or not).
    """

    raw: str
    text: str
    ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Evidence:
    """The sentence of a cited passage that best supports an answer sentence.

    Attributes:
        position: 1-based context position of the passage.
        score: The support score of the passage for the answer sentence.
        start, end: Character span of the supporting sentence in the passage text (whitespace
            normalised), ``end == start`` when it could not be located.
    """

    position: int
    score: float
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "score": round(self.score, 4),
            "span": [self.start, self.end],
        }


@dataclass
class SentenceSupport:
    """The verdict on one answer sentence.

    Attributes:
        index: 0-based position of the sentence in the answer.
        text: The sentence without markers.
        origin: model / attributed / unsupported / skipped.
        positions: Context positions it cites (the model's valid ids, or the attributed ones).
        best_score: The best support any passage gives it (``None`` when not scored).
        evidence: Per cited position, the passage sentence that supports it best (when scored).
    """

    index: int
    text: str
    origin: SentenceOrigin
    positions: list[int] = field(default_factory=list)
    best_score: float | None = None
    evidence: list[Evidence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "text": self.text,
            "origin": self.origin.value,
            "positions": list(self.positions),
            "best_score": None if self.best_score is None else round(self.best_score, 4),
            "evidence": [e.to_dict() for e in self.evidence],
        }


def check_attribution_options(
    threshold: float, weight: float, margin: float, max_sources: int
) -> None:
    """Raise :class:`ConfigurationError` naming the bad value and its valid range."""
    if not 0.0 < threshold <= 1.0:
        raise ConfigurationError(f"attribution threshold must be in (0, 1], got {threshold}")
    if not 0.0 <= weight <= 1.0:
        raise ConfigurationError(f"attribution weight must be in [0, 1], got {weight}")
    if not 0.0 <= margin <= 1.0:
        raise ConfigurationError(f"attribution margin must be in [0, 1], got {margin}")
    check_count("max_sources", max_sources)


# --------------------------------------------------------------------------- answer sentences
def _strip_markers(piece: str) -> tuple[str, list[int]]:
    """``piece`` without its complete markers, and their ids."""
    out: list[str] = []
    ids: list[int] = []
    i = 0
    while True:
        j = piece.find("[", i)
        if j < 0:
            out.append(piece[i:])
            break
        out.append(piece[i:j])
        status, end, found = scan_marker(piece, j)
        if status == MATCH:
            ids.extend(found)
            i = end
        else:
            out.append("[")
            i = j + 1
    return "".join(out), ids


def _leading_markers_end(piece: str) -> int:
    """Length of the run of markers (and spaces between them) that opens ``piece``."""
    k = 0
    while True:
        s = len(piece) - len(piece[k:].lstrip(" "))
        if s >= len(piece) or piece[s] != "[":
            return k
        status, end, _ = scan_marker(piece, s)
        if status != MATCH:
            return k
        k = end


def answer_sentences(answer: str) -> list[AnswerSentence]:
    """The sentences of ``answer`` with the markers written on each.

    A run of markers opening a sentence ("... Moon. [1](id=2) Then ...") belongs to the sentence
    before it.

    Example:
        >>> [(s.text, s.ids) for s in answer_sentences("Paris [1](id=2). [2](id=3) Lyon too.")]
        [('Paris .', (2, 3)), ('Lyon too.', ())]
    """
    pieces = split_sentences(answer or "")
    merged: list[str] = []
    for piece in pieces:
        k = _leading_markers_end(piece) if merged else 0
        if k:
            merged[-1] += piece[:k]
            piece = piece[k:]
        if piece:
            merged.append(piece)
    sentences = []
    for raw in merged:
        text, ids = _strip_markers(raw)
        sentences.append(AnswerSentence(raw=raw, text=" ".join(text.split()), ids=tuple(ids)))
    return sentences


# --------------------------------------------------------------------------- decisions
def decide_support(
    sentences: Sequence[AnswerSentence],
    scored: Sequence[int],
    support: np.ndarray,
    best: np.ndarray,
    passages: Sequence[Passage],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    margin: float = DEFAULT_MARGIN,
    max_sources: int = DEFAULT_MAX_SOURCES,
) -> list[SentenceSupport]:
    """The verdict on every answer sentence.

    A sentence with at least one valid marker (an id in ``1..len(passages)``) keeps the model's
    citations (origin ``model``); any other sentence that was scored cites the passages that
    :func:`~llama_index_rag_pack.citations.attribution_scores.choose_sources` picks
    (``attributed``), or none (``unsupported``); a sentence not scored (no content word) is
    ``skipped``.

    Args:
        sentences: The answer's sentences (:func:`answer_sentences`).
        scored: Indices of the sentences that were scored, one per row of ``support``/``best``.
        support, best: From
            :func:`~llama_index_rag_pack.citations.attribution_scores.support_matrix`.
        passages: The context passages (their count decides which ids are valid).
        threshold, margin, max_sources: As for ``choose_sources``.
    """
    row_of = {s: r for r, s in enumerate(scored)}
    n = len(passages)
    verdicts = []
    for i, sentence in enumerate(sentences):
        valid = [m for m in dict.fromkeys(sentence.ids) if 1 <= m <= n]
        r = row_of.get(i)
        best_score = float(support[r].max()) if r is not None and n else None
        if valid:
            origin, positions = SentenceOrigin.MODEL, valid
        elif r is None:
            origin, positions = SentenceOrigin.SKIPPED, []
        else:
            chosen = choose_sources(
                support[r], threshold=threshold, margin=margin, max_sources=max_sources
            )
            positions = [j + 1 for j in chosen]
            origin = SentenceOrigin.ATTRIBUTED if positions else SentenceOrigin.UNSUPPORTED
        evidence = []
        if r is not None:
            for p in positions:
                start, end = passages[p - 1].spans[int(best[r, p - 1])]
                evidence.append(Evidence(p, float(support[r, p - 1]), start, end))
        verdicts.append(SentenceSupport(i, sentence.text, origin, positions, best_score, evidence))
    return verdicts


def marked_answer(sentences: Sequence[AnswerSentence], verdicts: Sequence[SentenceSupport]) -> str:
    """The answer with ``[k](id=M)`` markers put on the attributed sentences (the model's own
    markers, valid or not, are left as written).

    Example:
        >>> s = answer_sentences("Paris is in France. Hi [1](id=1).")
        >>> v = [SentenceSupport(0, s[0].text, SentenceOrigin.ATTRIBUTED, [2]),
        ...      SentenceSupport(1, s[1].text, SentenceOrigin.MODEL, [1])]
        >>> marked_answer(s, v)
        'Paris is in France [1](id=2). Hi [1](id=1).'
    """
    return "".join(
        _attach(s, v.positions) if v.origin is SentenceOrigin.ATTRIBUTED else s.raw
        for s, v in zip(sentences, verdicts, strict=True)
    )


def _attach(sentence: AnswerSentence, positions: Sequence[int]) -> str:
    """Markers for ``positions`` on ``sentence``: right after its last (invalid) marker when it
    has one, so they render as one group, else before its final punctuation."""
    if not sentence.ids:
        return attach_markers(sentence.raw, positions)
    raw, last, i = sentence.raw, 0, 0
    while (j := raw.find("[", i)) >= 0:
        status, end, _ = scan_marker(raw, j)
        last, i = (end, end) if status == MATCH else (last, j + 1)
    markers = "".join(f"[{k}](id={m})" for k, m in enumerate(positions, 1))
    return raw[:last] + markers + raw[last:]


def _quote(text: str, limit: int = 60) -> str:
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "\u2026"
    return "\u201c" + text + "\u201d"


def attribution_note(verdicts: Sequence[SentenceSupport]) -> str:
    """One plain line saying which citations were attributed and which sentences no passage
    supports ("" when every citation is the model's and every sentence is supported).

    Example:
        >>> v = [SentenceSupport(0, "Paris is in France.", SentenceOrigin.ATTRIBUTED, [1]),
        ...      SentenceSupport(1, "It has 9 moons.", SentenceOrigin.UNSUPPORTED)]
        >>> print(attribution_note(v).replace("; ", ";\\n"))
        Note: citations on 1 of 2 sentences were attributed by matching them to the passages \
(the model wrote none);
        no passage supports \u201cIt has 9 moons.\u201d
    """
    considered = [v for v in verdicts if v.origin is not SentenceOrigin.SKIPPED]
    attributed = [v for v in considered if v.origin is SentenceOrigin.ATTRIBUTED]
    unsupported = [v for v in considered if v.origin is SentenceOrigin.UNSUPPORTED]
    parts = []
    if attributed:
        parts.append(
            f"citations on {len(attributed)} of {len(considered)} sentences were attributed by "
            "matching them to the passages (the model wrote none)"
        )
    if unsupported:
        quoted = ", ".join(_quote(v.text) for v in unsupported[:3])
        more = f" and {len(unsupported) - 3} more" if len(unsupported) > 3 else ""
        parts.append(f"no passage supports {quoted}{more}")
    return "Note: " + "; ".join(parts) if parts else ""
