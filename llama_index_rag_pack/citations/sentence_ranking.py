"""Sentence ranking for extractive answers: every sentence of the retrieved passages, scored
for a question.

A sentence's score (:func:`rank_sentences`) adds its embedding's similarity to the question
(the sentence headed by its passage's title, as the sentence index embeds it), the share of the
question's terms it holds (the BM25 analysis, in the question's language) and whether it holds
what the question asks for (a number for *how many*, a date for *when*, names for *who*;
several names for *who were ...*), and takes off a little per rank of its passage and for a
list item (a run-together list is quoted item by item, :func:`quotable_pieces`). The weights
were fitted on the dev split of ``wiki_qa_para`` (``benchmarks/results/offline_answers.md``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from llama_index_rag_pack.citations.answer_spans import question_kind, span_candidates
from llama_index_rag_pack.citations.citation_attribution import passage_sentences
from llama_index_rag_pack.documents.bm25_analysis import resolve_analyzer

__all__ = ["WEIGHTS", "Quote", "arank_sentences", "quotable_pieces", "rank_sentences"]

#: A longer "sentence" (a list or table run together) is quoted item by item.
MAX_QUOTE_CHARS = 300
_LIST_SEPARATOR = re.compile(r"\s+[-–•]\s+|;\s+|\s*\n\s*")
#: Penalty of a list item (a piece of a run-together "sentence") against a whole sentence.
PIECE_PENALTY = 0.5
#: A question asking for several names (*who were the astronauts*) prefers a sentence naming
#: several: each further name adds this to the answer-type match, up to MAX_NAMES names.
NAME_STEP = 0.5
MAX_NAMES = 3
_SEVERAL_NAMES = re.compile(r"\b(who|which \w+|what \w+) (were|are)\b|\bwho (all|else)\b", re.I)
#: Weights of a sentence's embedding similarity, term share, passage rank (a penalty per rank)
#: and answer-type match, fitted on the dev split of ``wiki_qa_para``.
WEIGHTS = (2.0, 0.5, 0.1, 0.5)


@dataclass(frozen=True)
class Quote:
    """One quoted sentence.

    Attributes:
        position: Its passage's place in the context, from 1 (the id of its citation marker).
        text: The sentence, as the passage has it.
        score: Its score for the question (higher first).
    """

    position: int
    text: str
    score: float


def quotable_pieces(sentence: str) -> list[str]:
    """``sentence``, or, when it is longer than :data:`MAX_QUOTE_CHARS` (a list or table run
    together), its items: the parts between `` - `` / ``;`` / ``•`` separators, each verbatim, the
    pieces of fewer than 3 words dropped.

    Example:
        >>> crew = "Crew - Neil Armstrong, commander - Buzz Aldrin, module pilot - " + "a b " * 200
        >>> quotable_pieces(crew)[:2]
        ['Neil Armstrong, commander', 'Buzz Aldrin, module pilot']
    """
    if len(sentence) <= MAX_QUOTE_CHARS:
        return [sentence]
    pieces = [p.strip() for p in _LIST_SEPARATOR.split(sentence)]
    return [p for p in pieces if len(p.split()) >= 3] or [sentence]


class _Candidate(NamedTuple):
    position: int  # of its passage, from 1
    title: str  # of its passage's document
    text: str
    piece: bool  # an item of a list run together, not a whole sentence


def _candidates(nodes: Sequence[Any]) -> list[_Candidate]:
    out = []
    for position, nws in enumerate(nodes, start=1):
        node = getattr(nws, "node", nws)
        title = str((node.metadata or {}).get("title") or "")
        for sentence in passage_sentences(node.get_content()):
            pieces = quotable_pieces(sentence)
            out += [_Candidate(position, title, p, p != sentence) for p in pieces]
    return out


def _answer_type_match(kind: str, question: str, sentence: str) -> float:
    """How well ``sentence`` holds what ``question`` asks for: 1 with a span of that kind (a
    date for *when*, a name it does not hold for *who*), for a question asking for several
    names (*who were ...*) one more per further name, up to :data:`MAX_NAMES`; else 0."""
    if kind == "other":
        return 0.0
    spans = span_candidates(question, sentence)
    if not any(s.kind == kind for s in spans):
        return 0.0
    if kind == "name" and _SEVERAL_NAMES.search(question):
        names = len({s.text for s in spans if s.kind == "name"})
        return 1.0 + NAME_STEP * (min(names, MAX_NAMES) - 1)
    return 1.0


def _scores(
    question: str, candidates: list[_Candidate], similarities: np.ndarray | None
) -> np.ndarray:
    analysis = resolve_analyzer("auto")
    asked = set(analysis.query_text(question).split())
    share = np.array(
        [
            len(asked & set(analysis.document_text(c.text).split())) / max(1, len(asked))
            for c in candidates
        ]
    )
    rank = np.array([c.position - 1 for c in candidates], dtype=float)
    asks = question_kind(question)
    kind = np.array([_answer_type_match(asks, question, c.text) for c in candidates])
    piece = np.array([c.piece for c in candidates], dtype=float)
    w_embed, w_share, w_rank, w_kind = WEIGHTS
    sim = similarities if similarities is not None else np.zeros(len(candidates))
    return w_embed * sim + w_share * share - w_rank * rank + w_kind * kind - PIECE_PENALTY * piece


def _similarities(vectors: Any, query_vector: Any) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float64)
    query = np.asarray(query_vector, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    return (matrix @ query) / np.where(norms == 0, 1.0, norms)


def _embedded_texts(candidates: list[_Candidate]) -> list[str]:
    return [f"{c.title}: {c.text}" if c.title else c.text for c in candidates]


def _ranked(candidates: list[_Candidate], scores: np.ndarray) -> list[Quote]:
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
    return [Quote(candidates[i].position, candidates[i].text, float(scores[i])) for i in order]


def rank_sentences(question: str, nodes: Sequence[Any], embed_model: Any = None) -> list[Quote]:
    """Every sentence of the retrieved ``nodes``, best for ``question`` first (without an
    ``embed_model``, by terms, rank and answer type only)."""
    candidates = _candidates(nodes)
    if not candidates:
        return []
    similarities = None
    if embed_model is not None:
        vectors = embed_model.get_text_embedding_batch(_embedded_texts(candidates))
        similarities = _similarities(vectors, embed_model.get_query_embedding(question))
    return _ranked(candidates, _scores(question, candidates, similarities))


async def arank_sentences(
    question: str, nodes: Sequence[Any], embed_model: Any = None
) -> list[Quote]:
    """Async :func:`rank_sentences` (the embeddings awaited)."""
    candidates = _candidates(nodes)
    if not candidates:
        return []
    similarities = None
    if embed_model is not None:
        vectors = await embed_model.aget_text_embedding_batch(_embedded_texts(candidates))
        query = await embed_model.aget_query_embedding(question)
        similarities = _similarities(vectors, query)
    return _ranked(candidates, _scores(question, candidates, similarities))
