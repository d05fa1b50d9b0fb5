"""The numbers behind attributed citations: lexical and semantic support of a passage for an
answer sentence, and which passages a sentence cites.

Pure numpy and rapidfuzz (no LlamaIndex); the decisions built on them are in
:mod:`~llama_index_rag_pack.citations.attribution`.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rapidfuzz import fuzz, process

from llama_index_rag_pack.core.similarity import normalize_rows
from llama_index_rag_pack.documents.words import lexical_words

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_MAX_SOURCES",
    "DEFAULT_THRESHOLD",
    "DEFAULT_WEIGHT",
    "TOKEN_MATCH_CUTOFF",
    "Passage",
    "choose_sources",
    "content_tokens",
    "support_matrix",
    "token_containment",
]

#: Defaults chosen on the dev half of a labelled set (benchmarks/bench_citations_attribution.py:
#: best F0.5, precision weighing more than recall; the test half is what docs/citations.md quotes).
#: Support needed to cite a passage.
DEFAULT_THRESHOLD = 0.5
#: Weight of the semantic signal (the rest is lexical).
DEFAULT_WEIGHT = 0.3
#: With ``max_sources > 1``: passages within this much of the best one are cited too.
DEFAULT_MARGIN = 0.1
#: At most this many passages cited per sentence.
DEFAULT_MAX_SOURCES = 1
#: rapidfuzz ``fuzz.ratio`` (0..100) from which two words count as the same word.
TOKEN_MATCH_CUTOFF = 85.0


# --------------------------------------------------------------------------- lexical support
def content_tokens(text: str, stopwords: Collection[str] = ()) -> list[str]:
    """Lower-cased words of ``text`` minus ``stopwords``, in order, without repeats (Chinese
    and Japanese runs cut into words by their segmenter).

    Example:
        >>> content_tokens("The cheetah runs; the cheetah sleeps.", {"the"})
        ['cheetah', 'runs', 'sleeps']
        >>> content_tokens("猎豹跑得很快")
        ['猎豹', '跑', '得', '很快']
    """
    seen: dict[str, None] = {}
    for word in lexical_words(text or ""):
        if word not in stopwords and word not in seen:
            seen[word] = None
    return list(seen)


def token_containment(
    sentence_tokens: Sequence[str], groups: Sequence[Sequence[str]]
) -> np.ndarray:
    """For each token group (a passage, or a sentence of one), the share of ``sentence_tokens``
    found in it (fuzzy: ``fuzz.ratio >= TOKEN_MATCH_CUTOFF``). One rapidfuzz ``cdist`` call.

    Example:
        >>> token_containment(["astronauts", "moon"], [["astronaut", "apollo"], ["sun"]]).tolist()
        [0.5, 0.0]
    """
    out = np.zeros(len(groups), dtype=np.float64)
    if not sentence_tokens or not groups:
        return out
    vocab = sorted({t for g in groups for t in g})
    if not vocab:
        return out
    column = {t: i for i, t in enumerate(vocab)}
    scores = process.cdist(
        list(sentence_tokens), vocab, scorer=fuzz.ratio, score_cutoff=TOKEN_MATCH_CUTOFF
    )
    found = np.asarray(scores) > 0
    for g, group in enumerate(groups):
        if group:
            cols = [column[t] for t in group]
            out[g] = found[:, cols].any(axis=1).mean()
    return out


# --------------------------------------------------------------------------- decision
def choose_sources(
    support: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    margin: float = DEFAULT_MARGIN,
    max_sources: int = DEFAULT_MAX_SOURCES,
) -> list[int]:
    """0-based indices of the passages a sentence cites, best first: support at least
    ``threshold`` and within ``margin`` of the best, at most ``max_sources`` (ties: first
    passage first). Empty: the sentence is unsupported.

    Example:
        >>> choose_sources([0.2, 0.71, 0.65, 0.8], threshold=0.5, margin=0.1, max_sources=2)
        [3, 1]
    """
    values = np.asarray(support, dtype=np.float64)
    if values.size == 0:
        return []
    best = float(values.max())
    if best < threshold:
        return []
    order = sorted(range(values.size), key=lambda i: (-values[i], i))
    keep = [i for i in order if values[i] >= threshold and values[i] >= best - margin - 1e-12]
    return keep[:max_sources]


# --------------------------------------------------------------------------- scoring
@dataclass(frozen=True)
class Passage:
    """A context passage cut into sentences.

    Attributes:
        text: The passage text, whitespace-normalised (spans index into it).
        spans: ``(start, end)`` of each sentence in ``text``.
    """

    text: str
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def from_sentences(cls, text: str, sentences: Sequence[str]) -> Passage:
        """Locate ``sentences`` (in order) in ``text``; one not found gets an empty span.

        Example:
            >>> Passage.from_sentences("A  b. C d.", ["A b.", "C d."]).spans
            ((0, 4), (5, 9))
        """
        flat = " ".join((text or "").split())
        spans: list[tuple[int, int]] = []
        cursor = 0
        for sentence in sentences:
            s = " ".join(sentence.split())
            start = flat.find(s, cursor) if s else -1
            if start < 0:
                spans.append((cursor, cursor))
                continue
            spans.append((start, start + len(s)))
            cursor = start + len(s)
        return cls(text=flat, spans=tuple(spans) or ((0, len(flat)),))

    def sentence(self, k: int) -> str:
        start, end = self.spans[k]
        return self.text[start:end]


def _unit_rows(matrix: Any) -> np.ndarray:
    return normalize_rows(matrix, dtype=np.float64)


def support_matrix(
    sentence_tokens: Sequence[Sequence[str]],
    sentence_vectors: Any,
    passages: Sequence[Passage],
    passage_vectors: Any,
    stopwords: Collection[str] = (),
    weight: float = DEFAULT_WEIGHT,
) -> tuple[np.ndarray, np.ndarray]:
    """Support of every passage for every answer sentence, and the best passage sentence.

    Args:
        sentence_tokens: Content tokens of each answer sentence.
        sentence_vectors: One embedding per answer sentence (``n × d``).
        passages: The context passages.
        passage_vectors: One embedding per passage sentence, passages in order, each passage's
            sentences in order (``sum(len(p.spans)) × d``).
        stopwords: Ignored words (for the passages' tokens).
        weight: Weight of the semantic signal.

    Returns:
        ``(support, best)``: ``support[i, j]`` for sentence ``i`` and passage ``j``;
        ``best[i, j]`` the index, within passage ``j``, of its sentence supporting ``i`` best.
    """
    n, m = len(sentence_tokens), len(passages)
    support = np.zeros((n, m))
    best = np.zeros((n, m), dtype=np.int64)
    if n == 0 or m == 0:
        return support, best
    cosine = _unit_rows(sentence_vectors) @ _unit_rows(passage_vectors).T
    passage_tokens = [content_tokens(p.text, stopwords) for p in passages]
    piece_tokens = [
        content_tokens(p.sentence(k), stopwords) for p in passages for k in range(len(p.spans))
    ]
    offsets = np.cumsum([0] + [len(p.spans) for p in passages])
    for i, tokens in enumerate(sentence_tokens):
        lexical = token_containment(tokens, passage_tokens)
        piece_lexical = token_containment(tokens, piece_tokens)
        for j in range(m):
            lo, hi = offsets[j], offsets[j + 1]
            semantic = cosine[i, lo:hi]
            support[i, j] = weight * max(0.0, float(semantic.max())) + (1 - weight) * lexical[j]
            local = weight * semantic + (1 - weight) * piece_lexical[lo:hi]
            best[i, j] = int(np.argmax(local))
    return support, best
