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
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.llm_output import MAX_REPLY_CHARS
from llama_index_rag_pack.routing import route_scores
from llama_index_rag_pack.routing import threshold_calibration as calibration
from llama_index_rag_pack.routing.route_names import normalize_name, resolve_name
from llama_index_rag_pack.routing.route_replies import parse_route_reply

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


def test_only_the_head_of_a_long_reply_is_read() -> None:
    assert parse_route_reply("physics " + "x" * 300_000, NAMES).indices == [NAMES.index("physics")]
    assert parse_route_reply("x" * MAX_REPLY_CHARS + " physics", NAMES).status == "invalid"


def test_normalize_name() -> None:
    assert normalize_name("Python_Docs-v2!") == "python docs v2"


_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)


@pytest.mark.slow
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(_name, min_size=1, max_size=6, unique=True), data=st.data())
def test_property_json_and_numbers_round_trip(names: list[str], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(names) - 1))
    assert parse_route_reply(json.dumps({"route": names[i], "reason": "r"}), names).indices == [i]
    assert parse_route_reply(json.dumps({"route": names[i].upper()}), names).indices == [i]
    assert parse_route_reply(str(i + 1) if i else "0", names).indices == [i]


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000), n_routes=st.integers(1, 5), agg=st.sampled_from(["max", "mean"])
)
def test_property_route_scores_match_brute_force(seed: int, n_routes: int, agg: str) -> None:
    rng = np.random.default_rng(seed)
    ids = np.concatenate([np.arange(n_routes), rng.integers(0, n_routes, size=rng.integers(0, 8))])
    rows = rng.normal(size=(ids.size, 8)).astype(np.float32)
    q = rng.normal(size=8).astype(np.float32)
    got = route_scores.aggregate_route_scores(
        similarity.cosine_similarities(q, similarity.normalize_rows(rows)), ids, n_routes, agg
    )
    np.testing.assert_allclose(got, _brute_scores(q, rows, ids, n_routes, agg), atol=1e-5)


@pytest.mark.slow
@settings(max_examples=100)
@given(
    scores=st.lists(st.floats(-1, 1), min_size=1, max_size=6),
    data=st.data(),
)
def test_property_decide_matches_definition(scores: list[float], data: st.DataObject) -> None:
    thresholds = data.draw(st.lists(st.floats(-1, 1), min_size=len(scores), max_size=len(scores)))
    top_k = data.draw(st.integers(1, 4))
    chosen = route_scores.decide(np.asarray(scores), np.asarray(thresholds), top_k)
    passing = [i for i, (s, t) in enumerate(zip(scores, thresholds, strict=True)) if s >= t]
    assert set(chosen) <= set(passing)
    assert len(chosen) == min(top_k, len(passing))
    assert [scores[i] for i in chosen] == sorted((scores[i] for i in chosen), reverse=True)
    if chosen:  # nothing better was left out
        assert all(scores[i] <= scores[chosen[-1]] for i in passing if i not in chosen)


@pytest.mark.slow
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
    assert route_scores.decide(np.array([0.1, 0.2]), np.array([0.5, 0.5])) == []


def test_aggregate_rejects_route_without_texts_and_unknown_aggregation() -> None:
    with pytest.raises(ValueError, match="route 1 has no texts"):
        route_scores.aggregate_route_scores(np.array([0.5]), np.array([0]), 2)
    with pytest.raises(ValueError, match="aggregation"):
        route_scores.aggregate_route_scores(np.array([0.5]), np.array([0]), 1, "median")


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
    fit = route_scores.fit_thresholds(s, labels)
    assert fit.accuracy == 1.0
    assert route_scores.routing_accuracy(s, labels, fit.thresholds) == 1.0
    assert route_scores.routing_accuracy(s, labels, np.zeros(2)) == pytest.approx(4 / 6)
    # margin: the threshold sits between the out-of-scope and in-scope scores, not on either
    assert 0.35 < fit.thresholds[0] < 0.58
    assert 0.33 < fit.thresholds[1] < 0.55


@pytest.mark.slow
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
    fit = route_scores.fit_thresholds(s, labels, initial=start)
    assert fit.accuracy >= route_scores.routing_accuracy(s, labels, start) - 1e-12
    assert fit.accuracy == pytest.approx(route_scores.routing_accuracy(s, labels, fit.thresholds))
    shared = route_scores.fit_thresholds(s, labels)
    best_shared = max(
        route_scores.routing_accuracy(s, labels, np.full(r, t))
        for t in np.unique(s).tolist() + [10.0]
    )
    assert shared.accuracy >= best_shared - 1e-12


def test_fit_thresholds_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="matrix"):
        route_scores.fit_thresholds(np.zeros((2, 2)), [frozenset()])


def test_routing_accuracy_counts_a_score_equal_to_its_threshold_as_routed() -> None:
    s = np.array([[0.5, 0.2], [0.1, 0.3]])
    labels = [frozenset({0}), frozenset({1})]
    assert route_scores.routing_accuracy(s, labels, np.array([0.5, 0.3])) == 1.0
    assert route_scores.routing_accuracy(np.empty((0, 2)), [], np.zeros(2)) == 0.0


# =========================================================================== robust threshold fit
def _routing_problem(
    seed: int, max_n: int = 30
) -> tuple[np.ndarray, list[frozenset[int]], np.ndarray]:
    """Random route scores (2 decimals, so ties happen), labels (some ambiguous, ~30% out of
    scope) and a default threshold per route."""
    rng = np.random.default_rng(seed)
    n, r = int(rng.integers(1, max_n)), int(rng.integers(1, 5))
    s = rng.uniform(-0.2, 0.9, size=(n, r)).round(2)
    labels = []
    for _ in range(n):
        draw = rng.random()
        k = 0 if draw < 0.3 else 2 if draw > 0.9 and r > 1 else 1
        labels.append(frozenset(rng.choice(r, size=k, replace=False).tolist()))
    default = rng.uniform(-0.3, 1.0, size=r) if rng.random() < 0.5 else np.full(r, 0.2)
    return s, labels, default


def _reference_objective(
    s: np.ndarray, labels: list[frozenset[int]], t: np.ndarray, objective: str
) -> float:
    """Balanced: mean of the accuracy over in-scope and over out-of-scope examples."""
    groups = [[i for i, lab in enumerate(labels) if bool(lab) == scope] for scope in (True, False)]
    groups = [g for g in groups if g]
    if objective == "accuracy" or len(groups) == 1:
        return route_scores.routing_accuracy(s, labels, t)
    return float(
        np.mean([route_scores.routing_accuracy(s[g], [labels[i] for i in g], t) for g in groups])
    )


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), objective=st.sampled_from(["balanced", "accuracy"]))
def test_property_objective_score_matches_reference(seed: int, objective: str) -> None:
    s, labels, t = _routing_problem(seed)
    got = calibration.objective_score(s, labels, t, objective)
    assert got == pytest.approx(_reference_objective(s, labels, t, objective))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), objective=st.sampled_from(["balanced", "accuracy"]))
def test_property_robust_fit_never_worse_than_default(seed: int, objective: str) -> None:
    s, labels, default = _routing_problem(seed)
    fit = calibration.fit_thresholds_robust(s, labels, default, objective=objective, n_folds=3)
    ref_default = _reference_objective(s, labels, default, objective)
    ref_fitted = _reference_objective(s, labels, fit.thresholds, objective)
    assert ref_fitted >= ref_default - 1e-9
    assert fit.score_default == pytest.approx(ref_default)
    assert fit.score_fitted == pytest.approx(ref_fitted)
    np.testing.assert_array_equal(fit.default, default)
    # thresholds stay within the observed scores and the default (plus the outer margin)
    low, high = min(s.min(), default.min()), max(s.max(), default.max())
    assert np.all(fit.thresholds >= low - 1e-3 - 1e-9)
    assert np.all(fit.thresholds <= high + 1e-3 + 1e-9)
    if fit.kept_default:
        np.testing.assert_array_equal(fit.thresholds, default)
        assert fit.shrinkage == 1.0
    else:  # it moved only because cross-validation said it beats the default
        assert fit.cv_scores[fit.shrinkage] > fit.cv_scores[1.0]
        assert 0.0 <= fit.shrinkage < 1.0


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_property_robust_fit_is_deterministic(seed: int) -> None:
    s, labels, default = _routing_problem(seed)
    a = calibration.fit_thresholds_robust(s, labels, default, random_state=seed)
    b = calibration.fit_thresholds_robust(s.copy(), list(labels), default.copy(), random_state=seed)
    np.testing.assert_array_equal(a.thresholds, b.thresholds)
    assert (a.cv_scores, a.shrinkage, a.reason) == (b.cv_scores, b.shrinkage, b.reason)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_property_shrinkage_one_returns_the_default(seed: int) -> None:
    s, labels, default = _routing_problem(seed)
    fit = calibration.fit_thresholds_robust(s, labels, default, shrinkage=1.0)
    assert fit.kept_default and fit.shrinkage == 1.0
    np.testing.assert_array_equal(fit.thresholds, default)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000), data=st.data())
def test_property_fixed_routes_keep_their_threshold(seed: int, data: st.DataObject) -> None:
    s, labels, default = _routing_problem(seed)
    route = data.draw(st.integers(0, s.shape[1] - 1))
    fit = calibration.fit_thresholds_robust(s, labels, default, shrinkage=0.0, fixed={route: 0.5})
    assert fit.thresholds[route] == 0.5 and fit.default[route] == 0.5


def _separable(n_per_route: int = 6, n_oos: int = 4) -> tuple[np.ndarray, list[frozenset[int]]]:
    """Two routes: in-scope scores 0.5-0.6 on the right route, out-of-scope at most 0.2."""
    rows, labels = [], []
    for i in range(n_per_route):
        rows += [[0.5 + 0.02 * i, 0.05], [0.1, 0.5 + 0.02 * i]]
        labels += [frozenset({0}), frozenset({1})]
    for i in range(n_oos):
        rows.append([0.1 + 0.1 * (i % 2), 0.2 - 0.1 * (i % 2)])
        labels.append(frozenset())
    return np.array(rows), labels


def test_robust_fit_rejects_out_of_scope_in_the_middle_of_the_gap() -> None:
    s, labels = _separable()
    full = calibration.fit_thresholds_robust(s, labels, 0.0, shrinkage=0.0)
    # widest plateau: every threshold in (0.2, 0.5] is perfect; its middle is 0.35
    np.testing.assert_allclose(full.thresholds, [0.35, 0.35])
    assert full.reason.startswith("shrinkage 0: cross-validated balanced 1.000")
    fit = calibration.fit_thresholds_robust(s, labels, 0.0)  # 0.0 routes every question
    assert not fit.kept_default
    assert fit.score_default == pytest.approx(0.5) and fit.score_fitted == 1.0
    # shrinkages 0 and 0.25 are both perfect out of fold: the one closer to the default wins
    assert fit.cv_scores == {0.0: 1.0, 0.25: 1.0, 0.5: 0.5, 0.75: 0.5, 1.0: 0.5}
    assert fit.shrinkage == 0.25
    np.testing.assert_allclose(fit.thresholds, [0.75 * 0.35, 0.75 * 0.35])


def test_robust_fit_keeps_a_default_nothing_beats() -> None:
    s, labels = _separable()
    fit = calibration.fit_thresholds_robust(s, labels, 0.3)  # already perfect
    assert fit.kept_default and fit.thresholds.tolist() == [0.3, 0.3]
    assert "not beaten" in fit.reason and fit.cv_scores[1.0] == 1.0
    one = calibration.fit_thresholds_robust(s[:1], labels[:1], 0.0)
    assert one.kept_default and one.cv_scores == {} and "nothing to cross-validate" in one.reason


def test_balanced_objective_does_not_sacrifice_a_few_out_of_scope_questions() -> None:
    # 13 in-scope questions, 3 of them scoring below the 2 out-of-scope ones: plain accuracy is
    # best routing everything (13/15), balanced accuracy rejects the out-of-scope ones
    scores = [0.20, 0.22, 0.24, *(0.30 + 0.01 * np.arange(10)).tolist(), 0.25, 0.26]
    s = np.array(scores)[:, None]
    labels = [frozenset({0})] * 13 + [frozenset()] * 2
    balanced = calibration.fit_thresholds_robust(s, labels, -1.0, shrinkage=0.0, n_folds=2)
    assert 0.26 < balanced.thresholds[0] <= 0.30
    plain = calibration.fit_thresholds_robust(s, labels, -1.0, objective="accuracy", n_folds=2)
    assert plain.kept_default and plain.thresholds[0] == -1.0


def test_robust_fit_rejects_bad_arguments() -> None:
    s, labels = _separable()
    with pytest.raises(ConfigurationError, match=r"shrinkage must be in \[0, 1\]"):
        calibration.fit_thresholds_robust(s, labels, 0.2, shrinkage=1.5)
    with pytest.raises(ConfigurationError, match="valid values: balanced, accuracy"):
        calibration.fit_thresholds_robust(s, labels, 0.2, objective="f1")
    with pytest.raises(ValueError, match="matrix"):
        calibration.fit_thresholds_robust(s[:2], labels, 0.2)
    with pytest.raises(ValueError, match="finite"):
        calibration.fit_thresholds_robust(np.full_like(s, np.nan), labels, 0.2)
    with pytest.raises(ValueError, match="default must be finite"):
        calibration.fit_thresholds_robust(s, labels, np.inf)
    with pytest.raises(ValueError, match=r"route indices 0\.\.1"):
        calibration.fit_thresholds_robust(s, [frozenset({2}), *labels[1:]], 0.2)
    with pytest.raises(ConfigurationError, match="need n_folds >= 2"):
        calibration.fit_thresholds_robust(s, labels, 0.2, n_folds=1)
