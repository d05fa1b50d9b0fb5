"""Evaluation metrics as plain functions over strings and id lists (no LlamaIndex, no Milvus).

Answer metrics follow the SQuAD v1.1 evaluation script: answers are normalised (lower case,
punctuation and the articles *a/an/the* removed, whitespace collapsed) before comparing, and a
prediction is scored against its best-matching gold answer.

Retrieval metrics take the ranked list of retrieved ids and the set of relevant ids. Duplicate
ids in the ranking (several chunks of one relevant document) count once, at their first rank, so
a retriever cannot raise recall or precision by returning the same document twice.

Citation metrics take, per cited sentence, the ids it cites and the ids that support it.

Example:
    >>> token_f1("the Eiffel Tower", ["Eiffel tower in Paris"])
    0.6666666666666666
    >>> recall_at_k(["d3", "d1", "d9"], {"d1", "d2"}, k=2)
    0.5
    >>> mrr_at_k(["d3", "d1", "d9"], {"d1", "d2"}, k=10)
    0.5
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation and articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(gold: str | Iterable[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else list(gold)


def exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0.

    No gold answers (an empty list) scores 0.0.
    """
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_list(gold)))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        # SQuAD v2 convention: both empty is a match, one empty is not.
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, gold: str | Iterable[str]) -> float:
    """Token-overlap F1 of the normalised prediction against its best gold answer (SQuAD)."""
    pred = normalize_answer(prediction).split()
    golds = _as_list(gold)
    if not golds:
        return 0.0
    return max(_f1(pred, normalize_answer(g).split()) for g in golds)


def answer_in_text(text: str, gold: str | Iterable[str]) -> bool:
    """True when a normalised gold answer occurs (as whole tokens) in the normalised ``text``.

    The retrieval-side check of open-domain QA (``top-k accuracy``): did the retrieved context
    contain the answer at all?
    """
    hay = f" {normalize_answer(text)} "
    return any((n := normalize_answer(g)) and f" {n} " in hay for g in _as_list(gold))


# --------------------------------------------------------------------------- retrieval
def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")


def _first_k_unique(retrieved: Sequence[Hashable], k: int) -> list[Hashable]:
    """The first ``k`` ranks with repeated ids blanked (``None``), so ranks keep their position."""
    seen: set[Hashable] = set()
    out: list[Hashable] = []
    for item in list(retrieved)[:k]:
        if item in seen:
            out.append(None)
        else:
            seen.add(item)
            out.append(item)
    return out


def recall_at_k(retrieved: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """Share of the relevant ids found in the first ``k`` retrieved (0.0 when none are relevant)."""
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return 0.0
    return len(rel.intersection(_first_k_unique(retrieved, k))) / len(rel)


def hit_at_k(retrieved: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """1.0 when at least one relevant id is in the first ``k`` retrieved (success@k)."""
    _check_k(k)
    rel = set(relevant)
    return float(any(r in rel for r in list(retrieved)[:k]))


def precision_at_k(retrieved: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """Relevant ids among the first ``k`` ranks, divided by ``k`` (repeats count as misses)."""
    _check_k(k)
    rel = set(relevant)
    return sum(1 for r in _first_k_unique(retrieved, k) if r is not None and r in rel) / k


def mrr_at_k(retrieved: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """Reciprocal rank of the first relevant id within the first ``k`` (0.0 if none)."""
    _check_k(k)
    rel = set(relevant)
    for rank, item in enumerate(list(retrieved)[:k], 1):
        if item in rel:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(
    retrieved: Sequence[Hashable],
    relevant: Iterable[Hashable] | dict[Hashable, float],
    k: int,
) -> float:
    """Normalised discounted cumulative gain at ``k``.

    ``DCG = sum(gain_i / log2(i + 1))`` over ranks ``i = 1..k`` (each relevant id counted once),
    divided by the DCG of the ideal ranking. ``relevant`` is a set (binary gains) or a mapping of
    id to graded gain.
    """
    _check_k(k)
    gains = dict(relevant) if isinstance(relevant, dict) else dict.fromkeys(relevant, 1.0)
    ideal = sorted((g for g in gains.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg == 0:
        return 0.0
    dcg = sum(
        gains.get(item, 0.0) / math.log2(i + 2)
        for i, item in enumerate(_first_k_unique(retrieved, k))
        if item is not None
    )
    return dcg / idcg


# --------------------------------------------------------------------------- citations
def _per_sentence(
    cited: Sequence[Iterable[Hashable]], supporting: Sequence[Iterable[Hashable]]
) -> Iterator[tuple[Iterable[Hashable], set[Hashable]]]:
    """Per sentence, the ids it cites and the set of ids supporting it.

    Raises:
        ValueError: the two lists have different lengths (when called, not when iterated).
    """
    if len(cited) != len(supporting):
        raise ValueError(f"cited has {len(cited)} sentences but supporting has {len(supporting)}")
    return ((ids, set(support)) for ids, support in zip(cited, supporting, strict=True))


def citation_precision(
    cited: Sequence[Iterable[Hashable]], supporting: Sequence[Iterable[Hashable]]
) -> float:
    """Share of citations that point at a chunk supporting the cited sentence.

    Args:
        cited: Per sentence, the ids it cites.
        supporting: Per sentence (same order), the ids whose text supports it.

    Returns:
        Correct citations / all citations (1.0 when nothing is cited: no wrong citations).

    Raises:
        ValueError: the two lists have different lengths.
    """
    total = correct = 0
    for ids, support in _per_sentence(cited, supporting):
        for cid in set(ids):
            total += 1
            correct += cid in support
    return correct / total if total else 1.0


def citation_recall(
    cited: Sequence[Iterable[Hashable]], supporting: Sequence[Iterable[Hashable]]
) -> float:
    """Share of sentences that need a citation (have support) and cite at least one supporting id.

    Returns:
        1.0 when no sentence has support (nothing needed citing).

    Raises:
        ValueError: the two lists have different lengths.
    """
    needed = covered = 0
    for ids, support in _per_sentence(cited, supporting):
        if not support:
            continue
        needed += 1
        covered += bool(support.intersection(ids))
    return covered / needed if needed else 1.0


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean (0.0 for no values)."""
    values = list(values)
    return sum(values) / len(values) if values else 0.0


__all__ = [
    "answer_in_text",
    "citation_precision",
    "citation_recall",
    "exact_match",
    "hit_at_k",
    "mean",
    "mrr_at_k",
    "ndcg_at_k",
    "normalize_answer",
    "precision_at_k",
    "recall_at_k",
    "token_f1",
]
