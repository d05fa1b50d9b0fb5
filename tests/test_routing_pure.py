"""Pure routing algorithms: reply parsing and similarity/threshold arithmetic (no LlamaIndex,
no Milvus).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.core import similarity
from llama_index_rag_pack.core.llm_output import parse_route_reply
from llama_index_rag_pack.core.route_names import normalize_name, resolve_name

NAMES = ["python_docs", "js_docs", "physics"]


# =========================================================================== parsing
@pytest.mark.parametrize(
    ("reply", "indices"),
    [
        ('{"routes": ["python_docs"], "reason": "It is about list comprehensions"}', [0]),
        (
            'Sure! Here is my answer:\n```json\n{"route": "PHYSICS", "reason": "black holes"}\n```',
            [2],
        ),
        ("{'datasource': 'js_docs'}", [1]),  # Python-style quotes
        ('[{"choice": 3, "reason": "about gravity"}]', [2]),  # core's selector format, 1-based
        ('{"choice": 0}', [0]),  # 0-based
        ("Python Docs", [0]),
        ("  The question is clearly about JS-DOCS.  ", [1]),
        ('"physics"', [2]),
        ("2", [1]),
        ("2.", [1]),
        ("(3)", [2]),
        ("Choice: 1 because it mentions pip", [0]),
        ("0", [0]),
        ("I would route this to the pythondocs source", [0]),
    ],
)
def test_parse_understands_real_looking_replies(reply: str, indices: list[int]) -> None:
    parsed = parse_route_reply(reply, NAMES)
    assert parsed.status == "ok", parsed
    assert parsed.indices == indices


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "empty"),
        ("4", "out of range"),
        ('{"choice": 7}', "out of range"),
        ('{"route": "chemistry", "reason": "acids"}', "unknown route"),
        ("I think physics, or maybe python_docs", "ambiguous"),
        ("It depends on the question.", "no route name or number"),
        ('{"routes": ["python_docs", "cobol_docs"]}', "unknown route"),
    ],
)
def test_parse_never_guesses(reply: str, problem: str) -> None:
    parsed = parse_route_reply(reply, NAMES)
    assert parsed.status == "invalid"
    assert parsed.indices == []
    assert problem in parsed.problem


@pytest.mark.parametrize(
    "reply",
    ['{"routes": [], "reason": "about cooking"}', "None of the sources fit.", '{"route": null}'],
)
def test_parse_explicit_none(reply: str) -> None:
    parsed = parse_route_reply(reply, NAMES)
    assert parsed.status == "none"
    assert parsed.indices == []


def test_broken_json_falls_back_to_the_name_in_it() -> None:
    assert parse_route_reply('{route: python_docs, "reason": ', NAMES).indices == [0]


def test_parse_keeps_reason_and_cuts_json_lists_to_max_outputs() -> None:
    parsed = parse_route_reply(
        '{"routes": ["js_docs", "physics"], "reason": "animation physics in JS"}', NAMES
    )
    assert parsed.indices == [1]
    assert parsed.reason == "animation physics in JS"
    parsed = parse_route_reply('{"routes": ["js_docs", "physics"]}', NAMES, max_outputs=2)
    assert parsed.indices == [1, 2]
    parsed = parse_route_reply("physics and js_docs", NAMES, max_outputs=2)
    assert sorted(parsed.indices) == [1, 2]


def test_numbers_are_read_one_way_per_reply() -> None:
    # "0" present: the whole reply is 0-based, so 2 means the third route
    assert parse_route_reply('{"choices": [0, 2]}', NAMES, max_outputs=2).indices == [0, 2]
    # no 0: 1-based, as the prompt numbers them
    assert parse_route_reply('{"choices": [1, 3]}', NAMES, max_outputs=2).indices == [0, 2]
    # 0 and 3 cannot both be valid: 0-based makes 3 out of range
    assert parse_route_reply('{"choices": [0, 3]}', NAMES, max_outputs=2).status == "invalid"


def test_longer_names_shadow_their_parts() -> None:
    names = ["docs", "python_docs"]
    assert parse_route_reply("use python docs", names).indices == [1]
    assert resolve_name("python", names) == 1
    assert resolve_name("docs", names) == 0


def test_normalize_name() -> None:
    assert normalize_name("Python_Docs-v2!") == "python docs v2"


_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(_name, min_size=1, max_size=6, unique=True), data=st.data())
def test_property_json_and_numbers_round_trip(names: list[str], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(names) - 1))
    assert parse_route_reply(json.dumps({"route": names[i], "reason": "r"}), names).indices == [i]
    assert parse_route_reply(json.dumps({"route": names[i].upper()}), names).indices == [i]
    assert parse_route_reply(str(i + 1) if i else "0", names).indices == [i]


@settings(max_examples=200)
@given(reply=st.text(max_size=200), names=st.lists(_name, min_size=1, max_size=5, unique=True))
def test_property_ok_only_with_valid_indices(reply: str, names: list[str]) -> None:
    parsed = parse_route_reply(reply, names)
    assert parsed.status in {"ok", "none", "invalid"}
    if parsed.status == "ok":
        assert parsed.indices and all(0 <= i < len(names) for i in parsed.indices)
        assert len(parsed.indices) == len(set(parsed.indices))
    else:
        assert parsed.indices == []


@settings(max_examples=150)
@given(
    reply=st.text(alphabet="QWXZ .,!?\n", max_size=80),
    names=st.lists(_name, min_size=1, max_size=5, unique=True),
)
def test_property_no_name_no_digit_never_routes(reply: str, names: list[str]) -> None:
    """Text with no route name and no number can never become a route."""
    names = [n for n in names if not set(n) & set("qwxz")] or ["abc"]
    assert parse_route_reply(reply, names).status != "ok"


# =========================================================================== similarity
def _brute_scores(q: np.ndarray, rows: np.ndarray, ids: np.ndarray, n: int, agg: str) -> np.ndarray:
    out = []
    for r in range(n):
        sims = [
            float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)))
            for v, i in zip(rows, ids, strict=True)
            if i == r
        ]
        out.append(max(sims) if agg == "max" else sum(sims) / len(sims))
    return np.asarray(out)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000), n_routes=st.integers(1, 5), agg=st.sampled_from(["max", "mean"])
)
def test_property_route_scores_match_brute_force(seed: int, n_routes: int, agg: str) -> None:
    rng = np.random.default_rng(seed)
    ids = np.concatenate([np.arange(n_routes), rng.integers(0, n_routes, size=rng.integers(0, 8))])
    rows = rng.normal(size=(ids.size, 8)).astype(np.float32)
    q = rng.normal(size=8).astype(np.float32)
    got = similarity.aggregate_route_scores(
        similarity.cosine_similarities(q, similarity.normalize_rows(rows)), ids, n_routes, agg
    )
    np.testing.assert_allclose(got, _brute_scores(q, rows, ids, n_routes, agg), atol=1e-5)


@settings(max_examples=100)
@given(
    scores=st.lists(st.floats(-1, 1), min_size=1, max_size=6),
    data=st.data(),
)
def test_property_decide_matches_definition(scores: list[float], data: st.DataObject) -> None:
    thresholds = data.draw(st.lists(st.floats(-1, 1), min_size=len(scores), max_size=len(scores)))
    top_k = data.draw(st.integers(1, 4))
    chosen = similarity.decide(np.asarray(scores), np.asarray(thresholds), top_k)
    passing = [i for i, (s, t) in enumerate(zip(scores, thresholds, strict=True)) if s >= t]
    assert set(chosen) <= set(passing)
    assert len(chosen) == min(top_k, len(passing))
    assert [scores[i] for i in chosen] == sorted((scores[i] for i in chosen), reverse=True)
    if chosen:  # nothing better was left out
        assert all(scores[i] <= scores[chosen[-1]] for i in passing if i not in chosen)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=8))
def test_property_normalize_vector(values: list[float]) -> None:
    unit = similarity.normalize_vector(values)
    assert unit.dtype == np.float64 and unit.shape == (len(values),)
    array = np.asarray(values)
    if not array.any():  # the zero vector: nothing to scale by
        assert np.array_equal(unit, array)
    else:  # unit length and parallel to the input, however tiny or huge its entries
        assert float(np.linalg.norm(unit)) == pytest.approx(1.0)
        scale = float(np.max(np.abs(array)))
        assert np.allclose(unit * float(np.linalg.norm(array / scale)), array / scale)


def test_decide_nothing_passes() -> None:
    assert similarity.decide(np.array([0.1, 0.2]), np.array([0.5, 0.5])) == []


def test_aggregate_rejects_route_without_texts_and_unknown_aggregation() -> None:
    with pytest.raises(ValueError, match="route 1 has no texts"):
        similarity.aggregate_route_scores(np.array([0.5]), np.array([0]), 2)
    with pytest.raises(ValueError, match="aggregation"):
        similarity.aggregate_route_scores(np.array([0.5]), np.array([0]), 1, "median")


def test_fit_thresholds_learns_to_reject_out_of_scope() -> None:
    # route 0 in-scope ~0.6, out-of-scope best ~0.35; a shared 0 threshold would route everything
    s = np.array(
        [[0.62, 0.10], [0.58, 0.20], [0.15, 0.55], [0.20, 0.61], [0.35, 0.30], [0.30, 0.33]]
    )
    labels = [
        frozenset({0}),
        frozenset({0}),
        frozenset({1}),
        frozenset({1}),
        frozenset(),
        frozenset(),
    ]
    fit = similarity.fit_thresholds(s, labels)
    assert fit.accuracy == 1.0
    assert similarity.routing_accuracy(s, labels, fit.thresholds) == 1.0
    assert similarity.routing_accuracy(s, labels, np.zeros(2)) == pytest.approx(4 / 6)
    # margin: the threshold sits between the out-of-scope and in-scope scores, not on either
    assert 0.35 < fit.thresholds[0] < 0.58
    assert 0.33 < fit.thresholds[1] < 0.55


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_property_fit_never_worse_than_its_start(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, r = int(rng.integers(2, 25)), int(rng.integers(1, 5))
    s = rng.uniform(-0.2, 0.9, size=(n, r))
    labels = [
        frozenset() if rng.random() < 0.3 else frozenset({int(rng.integers(0, r))})
        for _ in range(n)
    ]
    start = rng.uniform(-0.2, 0.9, size=r)
    fit = similarity.fit_thresholds(s, labels, initial=start)
    assert fit.accuracy >= similarity.routing_accuracy(s, labels, start) - 1e-12
    assert fit.accuracy == pytest.approx(similarity.routing_accuracy(s, labels, fit.thresholds))
    shared = similarity.fit_thresholds(s, labels)
    best_shared = max(
        similarity.routing_accuracy(s, labels, np.full(r, t))
        for t in np.unique(s).tolist() + [10.0]
    )
    assert shared.accuracy >= best_shared - 1e-12


def test_fit_thresholds_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="matrix"):
        similarity.fit_thresholds(np.zeros((2, 2)), [frozenset()])


def test_routing_accuracy_counts_a_score_equal_to_its_threshold_as_routed() -> None:
    s = np.array([[0.5, 0.2], [0.1, 0.3]])
    labels = [frozenset({0}), frozenset({1})]
    assert similarity.routing_accuracy(s, labels, np.array([0.5, 0.3])) == 1.0
    assert similarity.routing_accuracy(np.empty((0, 2)), [], np.zeros(2)) == 0.0
