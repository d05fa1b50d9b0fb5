"""Rank fusion functions: reference computations, weights, purity, and hypothesis properties."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.rank_fusion import (
    FusionMode,
    distribution_based_fusion,
    fuse,
    reciprocal_rank_fusion,
    relative_score_fusion,
    union_fusion,
)

ALL = [reciprocal_rank_fusion, relative_score_fusion, distribution_based_fusion, union_fusion]


def nws(node_id: str, score: float | None = None) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=f"text of {node_id}"), score=score)


def ranked(*ids: str, scores: list[float] | None = None) -> list[NodeWithScore]:
    scores = scores or [1.0 - i / 10 for i in range(len(ids))]
    return [nws(i, s) for i, s in zip(ids, scores, strict=True)]


def as_pairs(fused: list[NodeWithScore]) -> list[tuple[str, float]]:
    return [(n.node.node_id, round(n.score, 9)) for n in fused]


def snapshot(lists):
    return [[(n.node.node_id, n.score, id(n.node)) for n in lst] for lst in lists]


# ----------------------------------------------------------------------------- reference values
def test_rrf_matches_hand_computation():
    lists = [ranked("a", "b", "c"), ranked("c", "a", "d")]
    fused = reciprocal_rank_fusion(lists, k=60)
    expected = {
        "a": 1 / 61 + 1 / 62,
        "b": 1 / 62,
        "c": 1 / 63 + 1 / 61,
        "d": 1 / 63,
    }
    assert [n.node.node_id for n in fused] == ["a", "c", "b", "d"]
    for n in fused:
        assert n.score == pytest.approx(expected[n.node.node_id])


def test_rrf_honours_weights():
    lists = [ranked("a", "b"), ranked("b", "a")]
    # equal weights: a and b tie (a first-seen first)
    assert [n.node.node_id for n in reciprocal_rank_fusion(lists)] == ["a", "b"]
    # the second list weighs 3x: b wins
    fused = reciprocal_rank_fusion(lists, weights=[1, 3], k=0)
    assert as_pairs(fused) == [("b", round(1 / 2 + 3 / 1, 9)), ("a", round(1 / 1 + 3 / 2, 9))]
    # weight 0 removes a list's influence (its nodes remain, scored 0)
    fused = reciprocal_rank_fusion([ranked("a"), ranked("z")], weights=[1, 0])
    assert [n.node.node_id for n in fused] == ["a", "z"] and fused[1].score == 0.0


def test_rrf_uses_given_order_not_scores():
    # a reranked list: order says b first even though a's raw score is higher
    lst = [nws("b", 0.1), nws("a", 0.9)]
    assert [n.node.node_id for n in reciprocal_rank_fusion([lst])] == ["b", "a"]


def test_relative_score_min_max_and_weights():
    dense = ranked("a", "b", "c", scores=[0.9, 0.6, 0.3])
    bm25 = ranked("c", "d", scores=[-2.0, -8.0])  # negative BM25 distances from Milvus Lite
    fused = relative_score_fusion([dense, bm25], weights=[3, 1])
    scores = dict(as_pairs(fused))
    assert scores["a"] == pytest.approx(0.75 * 1.0)
    assert scores["b"] == pytest.approx(0.75 * 0.5)
    assert scores["c"] == pytest.approx(0.75 * 0.0 + 0.25 * 1.0)
    assert scores["d"] == pytest.approx(0.0)
    assert all(0.0 <= s <= 1.0 for s in scores.values())


def test_relative_score_constant_list_and_missing_scores():
    fused = relative_score_fusion([[nws("a", 0.5), nws("b", 0.5)], [nws("c", None)]])
    scores = dict(as_pairs(fused))
    assert scores == {"a": 0.5, "b": 0.5, "c": 0.0}


def test_distribution_based_reference():
    scores = [0.9, 0.5, 0.1, 0.5]
    lst = [nws(str(i), s) for i, s in enumerate(scores)]
    mean = sum(scores) / 4
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / 4)
    fused = dict(as_pairs(distribution_based_fusion([lst])))
    for i, s in enumerate(scores):
        assert fused[str(i)] == pytest.approx((s - (mean - 3 * std)) / (6 * std))


def test_distribution_based_clips_and_weights():
    a = [nws(f"x{i}", 0.5) for i in range(20)] + [nws("outlier", 50.0)]
    fused = dict(as_pairs(distribution_based_fusion([a, ranked("y")], weights=[1, 1])))
    assert fused["outlier"] == pytest.approx(0.5 * 1.0)  # clipped to 1, weight 1/2
    assert fused["y"] == pytest.approx(0.5)  # single-valued list scales to 1.0
    assert 0 < fused["x0"] < 0.5


def test_union_dedupes_and_keeps_best_weighted_score():
    fused = union_fusion([ranked("a", "b", scores=[0.4, 0.3]), ranked("b", "c", scores=[0.8, 0.1])])
    assert as_pairs(fused) == [("b", 0.8), ("a", 0.4), ("c", 0.1)]
    fused = union_fusion(
        [ranked("a", "b", scores=[0.4, 0.3]), ranked("b", "c", scores=[0.8, 0.1])],
        weights=[1, 0.25],
    )
    assert as_pairs(fused) == [("a", 0.4), ("b", 0.3), ("c", 0.025)]


def test_duplicates_inside_one_list_count_once_at_best_rank():
    lst = [nws("a", 0.9), nws("b", 0.8), nws("a", 0.1)]
    fused = reciprocal_rank_fusion([lst], k=0)
    assert as_pairs(fused) == [("a", 1.0), ("b", 0.5)]
    assert dict(as_pairs(relative_score_fusion([lst]))) == {"a": 1.0, "b": 0.0}


def test_top_n_and_empty_inputs():
    lists = [ranked("a", "b", "c", "d")]
    for fn in ALL:
        assert [n.node.node_id for n in fn(lists, top_n=2)] == ["a", "b"]
        assert fn([]) == []
        assert fn([[], []]) == []


def test_fuse_dispatch_and_core_aliases():
    lists = [ranked("a", "b"), ranked("b", "c")]
    assert as_pairs(fuse(lists, "reciprocal_rank", k=1)) == as_pairs(
        reciprocal_rank_fusion(lists, k=1)
    )
    assert as_pairs(fuse(lists, "reciprocal_rerank")) == as_pairs(reciprocal_rank_fusion(lists))
    assert as_pairs(fuse(lists, "simple")) == as_pairs(union_fusion(lists))
    assert as_pairs(fuse(lists, FusionMode.DIST_BASED_SCORE)) == as_pairs(
        distribution_based_fusion(lists)
    )


# ----------------------------------------------------------------------------- bad input
def test_bad_arguments_raise_clear_errors():
    lists = [ranked("a"), ranked("b")]
    with pytest.raises(
        ConfigurationError, match="weights has 1 values but there are 2 result lists"
    ):
        reciprocal_rank_fusion(lists, weights=[1.0])
    for fn in ALL:
        with pytest.raises(ConfigurationError, match="weights has 3 values"):
            fn(lists, weights=[1, 2, 3])
        with pytest.raises(ConfigurationError, match=">= 0"):
            fn(lists, weights=[1, -1])
        with pytest.raises(ConfigurationError, match="not all be 0"):
            fn(lists, weights=[0, 0])
        with pytest.raises(ConfigurationError, match="top_n"):
            fn(lists, top_n=0)
    with pytest.raises(ConfigurationError, match="k must be"):
        reciprocal_rank_fusion(lists, k=-1)
    with pytest.raises(ConfigurationError, match="valid values: reciprocal_rank, relative_score"):
        fuse(lists, "borda")
    with pytest.raises(ConfigurationError, match="NodeWithScore"):
        reciprocal_rank_fusion([["a", "b"]])


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "1"])
def test_weights_must_be_finite_numbers(bad):
    for fn in ALL:
        with pytest.raises(ConfigurationError, match="weights must be finite numbers"):
            fn([ranked("a"), ranked("b")], weights=[bad, 1.0])


@pytest.mark.parametrize("bad", [True, 2.5, "3"])
def test_top_n_must_be_a_positive_integer(bad):
    for fn in ALL:
        with pytest.raises(ConfigurationError, match="top_n must be an integer >= 1 or None"):
            fn([ranked("a", "b", "c")], top_n=bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "60"])
def test_rrf_k_must_be_a_finite_number(bad):
    with pytest.raises(ConfigurationError, match="k must be a finite number"):
        reciprocal_rank_fusion([ranked("a", "b")], k=bad)


# ----------------------------------------------------------------------------- mode names
@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("rrf", FusionMode.RECIPROCAL_RANK),
        ("RRF", FusionMode.RECIPROCAL_RANK),
        (" Reciprocal_Rank ", FusionMode.RECIPROCAL_RANK),
        ("reciprocal_rerank", FusionMode.RECIPROCAL_RANK),
        ("relative_score", FusionMode.RELATIVE_SCORE),
        ("dist_based_score", FusionMode.DIST_BASED_SCORE),
        ("simple", FusionMode.UNION),
        (FusionMode.UNION, FusionMode.UNION),
    ],
)
def test_mode_names_and_aliases(name, mode):
    assert FusionMode.parse(name) is mode


def test_core_query_fusion_retriever_modes_are_accepted():
    """Code moving from core's ``QueryFusionRetriever`` can pass its ``FUSION_MODES`` as is."""
    from llama_index.core.retrievers.fusion_retriever import FUSION_MODES

    assert FusionMode.parse(FUSION_MODES.RECIPROCAL_RANK) is FusionMode.RECIPROCAL_RANK
    assert FusionMode.parse(FUSION_MODES.RELATIVE_SCORE) is FusionMode.RELATIVE_SCORE
    assert FusionMode.parse(FUSION_MODES.DIST_BASED_SCORE) is FusionMode.DIST_BASED_SCORE
    assert FusionMode.parse(FUSION_MODES.SIMPLE) is FusionMode.UNION


# ----------------------------------------------------------------------------- duck-typed items
@dataclasses.dataclass(frozen=True)
class Hit:
    """A NodeWithScore-like item without pydantic's ``model_copy``."""

    node: Any
    score: float | None


def test_items_without_model_copy_are_rebuilt_with_their_own_type():
    raw = [[("a", 0.9), ("b", 0.5), ("c", None)], [("b", 0.8), ("d", 0.2)]]
    nodes = {i: TextNode(id_=i, text=i) for i in "abcd"}
    hits = [[Hit(nodes[i], s) for i, s in lst] for lst in raw]
    for fn in ALL:
        fused = fn(hits)
        assert all(type(h) is Hit for h in fused)
        assert all(h.node is nodes[h.node.node_id] for h in fused)  # the same node, not a copy
        assert as_pairs(fused) == as_pairs(fn(build(raw)))  # as for NodeWithScore items


# ----------------------------------------------------------------------------- properties
ids = st.sampled_from([f"n{i}" for i in range(12)])
scored = st.tuples(ids, st.one_of(st.none(), st.floats(-50, 50, allow_nan=False)))
result_lists_st = st.lists(st.lists(scored, max_size=10), max_size=5)


def build(raw):
    return [[nws(i, s) for i, s in lst] for lst in raw]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    raw=result_lists_st, fn_index=st.integers(0, 3), top_n=st.one_of(st.none(), st.integers(1, 15))
)
def test_property_pure_deduped_sorted(raw, fn_index, top_n):
    fn = ALL[fn_index]
    lists = build(raw)
    before = snapshot(lists)
    fused = fn(lists, top_n=top_n)
    assert snapshot(lists) == before  # inputs untouched (same objects, same scores)
    out_ids = [n.node.node_id for n in fused]
    assert len(out_ids) == len(set(out_ids))  # de-duplicated
    all_ids = {n.node.node_id for lst in lists for n in lst}
    assert set(out_ids) <= all_ids
    assert len(out_ids) == (len(all_ids) if top_n is None else min(top_n, len(all_ids)))
    scores = [n.score for n in fused]
    assert scores == sorted(scores, reverse=True)
    originals = {id(m) for lst in lists for m in lst}
    assert all(id(n) not in originals for n in fused)  # new items, not the inputs


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(raw=result_lists_st, fn_index=st.integers(0, 3), seed=st.integers(0, 1000))
def test_property_list_order_invariance_with_equal_weights(raw, fn_index, seed):
    fn = ALL[fn_index]
    lists = build(raw)
    shuffled = list(lists)
    random.Random(seed).shuffle(shuffled)
    a = {n.node.node_id: n.score for n in fn(lists)}
    b = {n.node.node_id: n.score for n in fn(shuffled)}
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], abs=1e-12)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(raw=result_lists_st, fn_index=st.integers(0, 3), seed=st.integers(0, 1000))
def test_property_weights_follow_the_lists(raw, fn_index, seed):
    """Permuting lists together with their weights gives the same fused scores."""
    fn = ALL[fn_index]
    lists = build(raw)
    rng = random.Random(seed)
    weights = [rng.uniform(0.1, 3.0) for _ in lists]
    perm = list(range(len(lists)))
    rng.shuffle(perm)
    a = {n.node.node_id: n.score for n in fn(lists, weights=weights)}
    b = {
        n.node.node_id: n.score
        for n in fn([lists[i] for i in perm], weights=[weights[i] for i in perm])
    }
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], abs=1e-12)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(raw=result_lists_st)
def test_property_rrf_reference(raw):
    """RRF equals a direct computation from first-occurrence 1-based ranks."""
    lists = build(raw)
    expected: dict[str, float] = {}
    for lst in lists:
        seen: list[str] = []
        for n in lst:
            if n.node.node_id not in seen:
                seen.append(n.node.node_id)
        for rank, nid in enumerate(seen, start=1):
            expected[nid] = expected.get(nid, 0.0) + 1 / (60 + rank)
    got = {n.node.node_id: n.score for n in reciprocal_rank_fusion(lists)}
    assert got.keys() == expected.keys()
    for key in got:
        assert got[key] == pytest.approx(expected[key])


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(raw=result_lists_st, fn_index=st.integers(1, 2))
def test_property_score_fusions_bounded(raw, fn_index):
    for n in ALL[fn_index](build(raw)):
        assert -1e-9 <= n.score <= 1 + 1e-9


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(raw=st.lists(st.tuples(ids, st.floats(0, 1)), min_size=1, max_size=10))
def test_property_single_list_keeps_its_order_under_rrf(raw):
    lists = build([raw])
    seen: list[str] = []
    for n in lists[0]:
        if n.node.node_id not in seen:
            seen.append(n.node.node_id)
    assert [n.node.node_id for n in reciprocal_rank_fusion(lists)] == seen


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(raw=result_lists_st, fn_index=st.integers(0, 3), data=st.data())
def test_property_non_finite_scores_count_as_missing(raw, fn_index, data):
    """A NaN or infinite score (a broken retriever) is read as no score, never poisons a list."""
    fn = ALL[fn_index]
    non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
    broken = [[(i, data.draw(non_finite) if s is None else s) for i, s in lst] for lst in raw]
    fused = fn(build(broken))
    assert all(math.isfinite(n.score) for n in fused)
    assert as_pairs(fused) == as_pairs(fn(build(raw)))


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(raw=result_lists_st, fn_index=st.integers(1, 2))
def test_property_unscored_items_add_nothing(raw, fn_index):
    """Score fusions: an item without a score counts as 0 in its list, so a node that is
    unscored in every list it appears in (at its first position) fuses to 0."""
    fused = {n.node.node_id: n.score for n in ALL[fn_index](build(raw))}
    scored = set()
    for lst in raw:
        first: dict[str, float | None] = {}
        for i, s in lst:
            first.setdefault(i, s)
        scored |= {i for i, s in first.items() if s is not None}
    for node_id, score in fused.items():
        if node_id not in scored:
            assert score == 0.0


finite_scores = st.floats(-50, 50).filter(lambda s: s == 0 or abs(s) > 1e-6)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    raw=st.lists(
        st.lists(st.tuples(ids, st.one_of(st.none(), finite_scores)), max_size=10), max_size=5
    ),
    fn_index=st.integers(1, 2),
    exponent=st.integers(-8, 8),
)
def test_property_score_fusions_ignore_the_score_unit(raw, fn_index, exponent):
    """Min-max and mean ± 3 std scaling read each list relative to itself: multiplying a list's
    scores by a positive factor (a power of 2, exact in floating point) changes nothing."""
    fn = ALL[fn_index]
    factor = 2.0**exponent
    rescaled = [[(i, None if s is None else s * factor) for i, s in lst] for lst in raw]
    a, b = fn(build(raw)), fn(build(rescaled))
    assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
    assert [n.score for n in a] == pytest.approx([n.score for n in b], abs=1e-12)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    raw=result_lists_st,
    fn_index=st.integers(1, 2),
    seed=st.integers(0, 1000),
    exponent=st.integers(-8, 8),
)
def test_property_score_fusions_normalise_the_weights(raw, fn_index, seed, exponent):
    """Only the ratios of the weights matter: they are normalised to sum to 1."""
    fn = ALL[fn_index]
    lists = build(raw)
    rng = random.Random(seed)
    weights = [rng.uniform(0.1, 3.0) for _ in lists]
    a = fn(lists, weights=weights)
    b = fn(lists, weights=[w * 2.0**exponent for w in weights])
    assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
    assert [n.score for n in a] == pytest.approx([n.score for n in b], abs=1e-12)


def test_ties_keep_first_seen_order():
    fused = reciprocal_rank_fusion([ranked("x", "y"), ranked("y", "x")])
    assert [n.node.node_id for n in fused] == ["x", "y"]
    assert fused[0].score == fused[1].score
