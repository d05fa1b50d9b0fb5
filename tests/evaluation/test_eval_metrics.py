"""Metrics against hand-computed values, a reference implementation, and properties."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.evaluation.metrics import (
    answer_in_text,
    citation_precision,
    citation_recall,
    exact_match,
    hit_at_k,
    mean,
    mrr_at_k,
    ndcg_at_k,
    normalize_answer,
    precision_at_k,
    recall_at_k,
    token_f1,
)

# --------------------------------------------------------------------------- answers (SQuAD)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   Apple, a pear ", "apple pear"),
        ("Theodore", "theodore"),  # 'the' only as a whole word
        ("U.S.A.", "usa"),
    ],
)
def test_normalize_answer_follows_squad(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_exact_match_uses_best_gold_answer() -> None:
    assert exact_match("the Eiffel tower.", ["Tour Eiffel", "Eiffel Tower"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    assert exact_match("anything", []) == 0.0
    assert exact_match("1969", "1969") == 1.0


def test_token_f1_hand_computed() -> None:
    # pred {eiffel, tower}, gold {eiffel, tower, in, paris}: P=1, R=1/2 -> F1=2/3
    assert token_f1("the Eiffel Tower", ["Eiffel tower in Paris"]) == pytest.approx(2 / 3)
    # pred "paris france" vs gold "paris": P=1/2, R=1 -> 2/3; best of two golds is taken
    assert token_f1("Paris, France", ["London", "Paris"]) == pytest.approx(2 / 3)
    # repeated tokens count with multiplicity: pred "a a b" -> ['b'] after article removal
    assert token_f1("new new york", "new york") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert token_f1("", ["x"]) == 0.0
    assert token_f1("", [""]) == 1.0
    assert token_f1("x", []) == 0.0


def test_answer_in_text_matches_whole_tokens_only() -> None:
    assert answer_in_text("Apollo 11 landed in July 1969.", ["1969"])
    assert not answer_in_text("It happened in 19690.", ["1969"])
    assert answer_in_text("the writings of Hermes Trismegistus", "hermes trismegistus")
    assert not answer_in_text("nothing here", [""])


# --------------------------------------------------------------------------- retrieval


def test_retrieval_metrics_hand_computed() -> None:
    retrieved = ["d3", "d1", "d9", "d2", "d5"]
    relevant = {"d1", "d2"}
    assert recall_at_k(retrieved, relevant, 1) == 0.0
    assert recall_at_k(retrieved, relevant, 2) == 0.5
    assert recall_at_k(retrieved, relevant, 4) == 1.0
    assert precision_at_k(retrieved, relevant, 2) == 0.5
    assert precision_at_k(retrieved, relevant, 5) == pytest.approx(2 / 5)
    assert mrr_at_k(retrieved, relevant, 10) == 0.5
    assert mrr_at_k(retrieved, relevant, 1) == 0.0
    assert hit_at_k(retrieved, relevant, 2) == 1.0
    # DCG@5 = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3)
    assert ndcg_at_k(retrieved, relevant, 5) == pytest.approx(dcg / idcg)


def test_duplicates_count_once() -> None:
    # three chunks of the same relevant document must not inflate precision or nDCG
    retrieved = ["d1", "d1", "d1"]
    assert precision_at_k(retrieved, {"d1"}, 3) == pytest.approx(1 / 3)
    assert recall_at_k(retrieved, {"d1", "d2"}, 3) == 0.5
    assert ndcg_at_k(retrieved, {"d1"}, 3) == 1.0
    assert ndcg_at_k(["x", "d1", "d1"], {"d1", "d2"}, 3) == pytest.approx(
        (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    )


def test_graded_ndcg() -> None:
    gains = {"a": 3.0, "b": 1.0}
    assert ndcg_at_k(["a", "b"], gains, 2) == 1.0
    worse = (1 / 1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    assert ndcg_at_k(["b", "a"], gains, 2) == pytest.approx(worse)


def test_no_relevant_ids_scores_zero() -> None:
    assert recall_at_k(["a"], set(), 3) == 0.0
    assert ndcg_at_k(["a"], set(), 3) == 0.0
    assert mrr_at_k([], {"a"}, 3) == 0.0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_k_is_rejected_with_value(bad: object) -> None:
    with pytest.raises(ValueError, match=f"k must be a positive integer, got {bad!r}"):
        recall_at_k(["a"], {"a"}, bad)  # type: ignore[arg-type]


ids = st.sampled_from([f"d{i}" for i in range(12)])


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    retrieved=st.lists(ids, max_size=12, unique=True),
    relevant=st.sets(ids, max_size=6),
    k=st.integers(min_value=1, max_value=12),
)
def test_ranking_metric_properties(retrieved: list[str], relevant: set[str], k: int) -> None:
    for fn in (recall_at_k, precision_at_k, mrr_at_k, ndcg_at_k, hit_at_k):
        assert 0.0 <= fn(retrieved, relevant, k) <= 1.0 + 1e-12
    # recall is monotone in k; precision * k counts the hits
    assert recall_at_k(retrieved, relevant, k) <= recall_at_k(retrieved, relevant, k + 1) + 1e-12
    hits = sum(1 for r in retrieved[:k] if r in relevant)
    assert precision_at_k(retrieved, relevant, k) * k == pytest.approx(hits)
    # a perfect ranking scores 1 on recall (when k covers it), MRR and nDCG
    if relevant:
        ideal = sorted(relevant) + [r for r in retrieved if r not in relevant]
        assert ndcg_at_k(ideal, relevant, k) == pytest.approx(1.0)
        assert mrr_at_k(ideal, relevant, k) == 1.0
        if k >= len(relevant):
            assert recall_at_k(ideal, relevant, k) == 1.0
    # hit@k is 1 exactly when MRR@k > 0
    assert (hit_at_k(retrieved, relevant, k) == 1.0) == (mrr_at_k(retrieved, relevant, k) > 0)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    retrieved=st.lists(ids, min_size=1, max_size=12, unique=True),
    relevant=st.sets(ids, min_size=1, max_size=6),
    data=st.data(),
)
def test_ndcg_matches_sklearn(
    retrieved: list[str], relevant: set[str], data: st.DataObject
) -> None:
    from sklearn.metrics import ndcg_score

    k = data.draw(st.integers(min_value=1, max_value=len(retrieved)))
    universe = sorted(set(retrieved) | relevant | {"z1", "z2"})
    y_true = [[1.0 if u in relevant else 0.0 for u in universe]]
    # retrieved items get descending scores; the rest rank below every retrieved one
    y_score = [
        [
            float(len(retrieved) - retrieved.index(u)) if u in retrieved else -1.0 - i
            for i, u in enumerate(universe)
        ]
    ]
    assert ndcg_at_k(retrieved, relevant, k) == pytest.approx(ndcg_score(y_true, y_score, k=k))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40), st.lists(st.text(max_size=40), min_size=1, max_size=3))
def test_answer_metric_properties(pred: str, golds: list[str]) -> None:
    f1 = token_f1(pred, golds)
    assert 0.0 <= f1 <= 1.0
    if exact_match(pred, golds) == 1.0:
        assert f1 == 1.0
    assert normalize_answer(normalize_answer(pred)) == normalize_answer(pred)
    assert token_f1(pred, [pred]) == 1.0


# --------------------------------------------------------------------------- citations


def test_citation_precision_and_recall_hand_computed() -> None:
    cited = [["c1", "c2"], ["c3"], [], ["c9"]]
    supporting = [["c1"], ["c3", "c4"], ["c5"], []]
    # citations: c1 ok, c2 wrong, c3 ok, c9 wrong -> 2/4
    assert citation_precision(cited, supporting) == 0.5
    # sentences needing support: 0, 1, 2 -> covered 0 and 1 -> 2/3
    assert citation_recall(cited, supporting) == pytest.approx(2 / 3)
    assert citation_precision([[]], [["x"]]) == 1.0
    assert citation_recall([["x"]], [[]]) == 1.0


def test_citation_metrics_reject_misaligned_lists() -> None:
    with pytest.raises(ValueError, match="cited has 1 sentences but supporting has 2"):
        citation_precision([["a"]], [["a"], ["b"]])
    with pytest.raises(ValueError, match="cited has 2 sentences"):
        citation_recall([["a"], []], [["a"]])


sentence = st.tuples(st.lists(ids, max_size=3), st.lists(ids, max_size=3))  # (cited, supporting)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(sentences=st.lists(sentence, max_size=6), seed=st.integers(0, 1000))
def test_citation_metric_properties(
    sentences: list[tuple[list[str], list[str]]], seed: int
) -> None:
    cited = [c for c, _ in sentences]
    supporting = [s for _, s in sentences]
    precision = citation_precision(cited, supporting)
    recall = citation_recall(cited, supporting)
    assert 0.0 <= precision <= 1.0 and 0.0 <= recall <= 1.0
    # the order of the sentences does not matter
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    shuffled = ([cited[i] for i in order], [supporting[i] for i in order])
    assert citation_precision(*shuffled) == pytest.approx(precision)
    assert citation_recall(*shuffled) == pytest.approx(recall)
    # a sentence that needs no citation and cites nothing changes nothing, wherever it is
    assert citation_precision([[], *cited], [[], *supporting]) == pytest.approx(precision)
    assert citation_recall([[], *cited], [[], *supporting]) == pytest.approx(recall)
    # citing exactly the supporting chunks is perfect; citing only chunks that support nothing
    # scores 0 (when anything needed a citation)
    assert citation_precision(supporting, supporting) == 1.0
    assert citation_recall(supporting, supporting) == 1.0
    if any(supporting):
        unsupported = [["not-a-chunk"] for _ in sentences]
        assert citation_precision(unsupported, supporting) == 0.0
        assert citation_recall(unsupported, supporting) == 0.0


def test_mean() -> None:
    assert mean([]) == 0.0
    assert mean([1.0, 0.0, 0.5]) == 0.5
