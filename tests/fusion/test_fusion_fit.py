"""Convex score fusion of two lists, fitting alpha and RRF k on labelled questions, the saved
fusion config and RagPack loading it, and ``rag-pack eval --fit`` end to end."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.fitting import (
    FitMetric,
    comparison_strategies,
    default_fit_metric,
    fit_questions,
)
from llama_index_rag_pack.evaluation.fusion_fit import (
    ALPHA_GRID,
    FitQuestion,
    RankMetric,
    best_on_grid,
    fit_alpha,
    fit_fusion,
    fit_rrf_k,
    score_inputs,
)
from llama_index_rag_pack.evaluation.labelled import LabelledExample
from llama_index_rag_pack.fusion.convex_fusion import (
    TUNED_ALPHA,
    ScoredId,
    ScoreNormalization,
    convex_fusion,
    ranked,
    two_list_rrf,
)
from llama_index_rag_pack.fusion.fusion_config import (
    FusionConfig,
    load_fusion_config,
    resolve_fusion_config,
    save_fusion_config,
)


def ids(items: list[Any]) -> list[str]:
    return [n.node.node_id for n in items]


def pairs(items: list[Any]) -> list[tuple[str, float]]:
    return [(n.node.node_id, round(n.score, 12)) for n in items]


def sid(*scored: tuple[str, float]) -> list[ScoredId]:
    return [ScoredId.of(i, s) for i, s in scored]


# ----------------------------------------------------------------------------- convex fusion
def test_min_max_convex_fusion_matches_a_hand_computation() -> None:
    dense = sid(("a", 0.9), ("b", 0.7), ("c", 0.5))
    bm25 = sid(("c", 20.0), ("d", 10.0), ("b", 5.0))
    fused = convex_fusion(dense, bm25, alpha=0.3)
    # min-max: dense a=1, b=0.5, c=0; bm25 c=1, d=1/3, b=0
    expected = {"a": 0.3, "b": 0.15, "c": 0.7, "d": 0.7 / 3}
    assert ids(fused) == ["c", "a", "d", "b"]
    for n in fused:
        assert n.score == pytest.approx(expected[n.node.node_id])


def test_dist_based_convex_fusion_matches_a_hand_computation() -> None:
    dense = sid(("a", 0.9), ("b", 0.5), ("c", 0.1))
    fused = convex_fusion(dense, [], alpha=1.0, normalization="dist_based")
    mean, std = 0.5, (0.32 / 3) ** 0.5
    expected = {k: (s - (mean - 3 * std)) / (6 * std) for k, s in (("a", 0.9), ("b", 0.5))}
    assert ids(fused) == ["a", "b", "c"]
    assert fused[0].score == pytest.approx(expected["a"])
    assert fused[1].score == pytest.approx(expected["b"])


def test_alpha_one_and_zero_give_each_side_alone() -> None:
    dense = sid(("a", 0.9), ("b", 0.8), ("c", 0.1))
    bm25 = sid(("c", 9.0), ("b", 3.0), ("d", 1.0))
    assert ids(convex_fusion(dense, bm25, alpha=1.0))[:2] == ["a", "b"]
    assert ids(convex_fusion(dense, bm25, alpha=0.0))[:2] == ["c", "b"]


def test_ties_are_ordered_by_node_id_whatever_the_arrival_order() -> None:
    dense = sid(("z", 1.0), ("m", 0.0))
    bm25 = sid(("a", 1.0), ("m", 0.0))
    fused = convex_fusion(dense, bm25, alpha=0.5)
    assert pairs(fused) == [("a", 0.5), ("z", 0.5), ("m", 0.0)]
    assert pairs(convex_fusion(bm25[::-1], dense[::-1], alpha=0.5)) == pairs(fused)


def test_node_with_score_items_are_copied_not_mutated() -> None:
    dense = [
        NodeWithScore(node=TextNode(id_=i, text=i), score=s) for i, s in (("a", 0.9), ("b", 0.2))
    ]
    before = [(n.node.node_id, n.score) for n in dense]
    fused = convex_fusion(dense, [], alpha=0.5, top_n=1)
    assert [(n.node.node_id, n.score) for n in dense] == before
    assert len(fused) == 1 and isinstance(fused[0], NodeWithScore) and fused[0] is not dense[0]


def test_two_list_rrf_matches_a_hand_computation() -> None:
    dense = sid(("b", 0.1), ("a", 0.9))  # ranked by score: a, b
    bm25 = sid(("b", 5.0), ("c", 1.0))
    fused = two_list_rrf(dense, bm25, k=10)
    expected = {"a": 1 / 11, "b": 1 / 12 + 1 / 11, "c": 1 / 12}
    assert ids(fused) == ["b", "a", "c"]
    assert all(n.score == pytest.approx(expected[n.node.node_id]) for n in fused)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 1.5}, r"alpha .* \[0, 1\], got 1.5"),
        ({"alpha": True}, "alpha"),
        ({"normalization": "zscore"}, "valid values: min_max, dist_based"),
        ({"top_n": 0}, "top_n must be an integer >= 1 or None"),
    ],
)
def test_bad_fusion_arguments_say_what_to_do(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        convex_fusion(sid(("a", 1.0)), [], **kwargs)


scores = st.floats(min_value=-50, max_value=50, allow_nan=False, allow_infinity=False)
candidate_lists = st.lists(
    st.tuples(st.sampled_from("abcdefghij"), scores), max_size=10, unique_by=lambda t: t[0]
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    dense=candidate_lists,
    sparse=candidate_lists,
    alpha=st.floats(0, 1),
    norm=st.sampled_from(list(ScoreNormalization)),
    seed=st.integers(0, 10**6),
)
def test_fusion_never_depends_on_the_order_of_arrival(
    dense: list[tuple[str, float]],
    sparse: list[tuple[str, float]],
    alpha: float,
    norm: ScoreNormalization,
    seed: int,
) -> None:
    shuffled_dense, shuffled_sparse = dense[:], sparse[:]
    random.Random(seed).shuffle(shuffled_dense)
    random.Random(seed + 1).shuffle(shuffled_sparse)
    a = convex_fusion(sid(*dense), sid(*sparse), alpha=alpha, normalization=norm)
    b = convex_fusion(sid(*shuffled_dense), sid(*shuffled_sparse), alpha=alpha, normalization=norm)
    assert pairs(a) == pairs(b)
    assert sorted(ids(a)) == sorted({i for i, _ in dense + sparse})
    assert all(0.0 <= n.score <= 1.0 + 1e-12 for n in a)
    assert pairs(two_list_rrf(sid(*dense), sid(*sparse))) == pairs(
        two_list_rrf(sid(*shuffled_dense), sid(*shuffled_sparse))
    )
    assert a == ranked(a)


# ----------------------------------------------------------------------------- fitting
def mixed_questions() -> list[FitQuestion]:
    """Dense alone wins q1, BM25 alone wins q2; only a mix gets both (b is second on each side)."""
    q1 = FitQuestion.of(
        dense=[("a", 0.9), ("b", 0.85), ("c", 0.1)],
        sparse=[("c", 10.0), ("b", 9.0), ("a", 0.5)],
        relevant=["b"],
    )
    q2 = FitQuestion.of(
        dense=[("x", 0.9), ("y", 0.8), ("z", 0.2)],
        sparse=[("y", 10.0), ("x", 1.0), ("z", 0.9)],
        relevant=["y"],
    )
    return [q1, q2]


def test_the_fit_finds_a_mix_that_beats_both_inputs() -> None:
    fit = fit_fusion(mixed_questions(), RankMetric("hit", 1))
    assert fit.inputs == {"dense": 0.0, "sparse": 0.5}
    assert 0.0 < fit.alpha < 1.0
    assert fit.best_score == 1.0 > max(fit.inputs.values())
    assert fit.normalization is ScoreNormalization.MIN_MAX  # ties go to the default
    assert fit.alpha_fits[fit.normalization].scores[fit.alpha] == 1.0


def test_a_flat_objective_keeps_the_defaults() -> None:
    same = FitQuestion.of(dense=[("a", 1.0)], sparse=[("a", 3.0)], relevant=["a"])
    fit = fit_fusion([same, same], RankMetric("mrr", 10))
    assert (fit.alpha, fit.rrf_k, fit.normalization.value) == (0.5, 60.0, "min_max")


def test_best_on_grid_breaks_ties_toward_the_default() -> None:
    assert best_on_grid({0.0: 1.0, 0.3: 1.0, 0.9: 1.0}, default=0.5) == 0.3
    assert best_on_grid({0.4: 1.0, 0.6: 1.0}, default=0.5) == 0.4
    assert best_on_grid({10.0: 0.2, 60.0: 0.1}, default=60.0) == 10.0
    with pytest.raises(ConfigurationError, match="grid is empty"):
        best_on_grid({}, default=0.5)


def test_grids_always_hold_both_inputs_and_the_default() -> None:
    grid = fit_alpha(mixed_questions(), RankMetric("hit", 1), grid=[0.3])
    assert set(grid.scores) == {0.0, 0.3, 0.5, 1.0}
    assert set(fit_rrf_k(mixed_questions(), RankMetric("hit", 1), grid=[5]).scores) == {5.0, 60.0}
    with pytest.raises(ConfigurationError, match="alpha"):
        fit_alpha(mixed_questions(), RankMetric("hit", 1), grid=[2.0])
    with pytest.raises(ConfigurationError, match="No questions"):
        fit_fusion([], RankMetric("hit", 1))


def test_rank_metric_and_judged_units() -> None:
    assert RankMetric("hit", 2)(["x", "d1"], {"d1"}) == 1.0
    assert RankMetric("mrr", 10)(["x", "y", "d1"], {"d1"}) == pytest.approx(1 / 3)
    with pytest.raises(ConfigurationError, match="'hit' or 'mrr'"):
        RankMetric("ndcg", 10)  # type: ignore[arg-type]
    q = FitQuestion.of(
        dense=[("c1", 0.9), ("c2", 0.8)], sparse=[], relevant=["doc2"], units={"c2": "doc2"}
    )
    assert score_inputs([q], RankMetric("mrr", 10)) == {"dense": 0.5, "sparse": 0.0}


fit_questions_strategy = st.lists(
    st.builds(
        lambda d, s, rel: FitQuestion.of(d, s, rel),
        candidate_lists,
        candidate_lists,
        st.sets(st.sampled_from("abcdefghij"), max_size=3),
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    questions=fit_questions_strategy,
    kind=st.sampled_from(["hit", "mrr"]),
    k=st.integers(1, 10),
)
def test_the_fitted_fusion_never_loses_to_its_inputs_on_the_fitting_data(
    questions: list[FitQuestion], kind: str, k: int
) -> None:
    metric = RankMetric(kind, k)  # type: ignore[arg-type]
    fit = fit_fusion(questions, metric, alpha_grid=ALPHA_GRID[::4])
    for grid in fit.alpha_fits.values():
        assert grid.best_score >= max(grid.scores[0.0], grid.scores[1.0], grid.default_score)
    assert fit.best_score == max(g.best_score for g in fit.alpha_fits.values())
    assert fit.rrf_fit.best_score >= fit.rrf_fit.default_score
    assert fit.rrf_fit.best_score == max(fit.rrf_fit.scores.values())


# ----------------------------------------------------------------------------- cached results
def example(qid: str, evidence: bool = True) -> LabelledExample:
    return LabelledExample(
        id=qid,
        question="q?",
        answers=("x",),
        relevant_ids=("doc:2",),
        evidence=("the evidence.",) if evidence else (),
    )


def hit(node: str, score: float, doc: str, *, evidence: bool = False) -> dict[str, Any]:
    return {
        "node_id": node,
        "doc_ids": [doc],
        "score": score,
        "relevant": doc == "doc:2",
        "evidence": evidence,
        "answer": evidence,
    }


def test_fit_questions_read_the_cached_flags() -> None:
    candidates = {
        "dense": {
            "q1": {"retrieved": [hit("n1", 0.9, "doc:1"), hit("n2", 0.8, "doc:2")]},
            "q2": {"retrieved": [], "error": "boom"},
        },
        "sparse": {
            "q1": {"retrieved": [hit("n3", 7.0, "doc:2", evidence=True)]},
            "q2": {"retrieved": []},
        },
    }
    examples = [example("q1"), example("q2"), example("q3")]
    evidence = fit_questions(examples, candidates, FitMetric.parse("evidence@1"))
    assert len(evidence) == 1, "an error or a missing side leaves the question out"
    assert evidence[0].relevant == {"n3"}
    docs = fit_questions(examples, candidates, FitMetric.parse("mrr@10"))[0]
    assert docs.relevant == {"doc:2"}
    assert docs.units == {"n1": "doc:1", "n2": "doc:2", "n3": "doc:2"}
    assert score_inputs([docs], RankMetric("mrr", 10)) == {"dense": 0.5, "sparse": 1.0}


def test_fit_metric_names() -> None:
    assert FitMetric.parse("MRR@10").flag == "relevant"
    assert FitMetric.parse("answer_in_context@1").rank_metric == RankMetric("hit", 1)
    for bad in ("ndcg@10", "evidence@0", "evidence"):
        with pytest.raises(ConfigurationError, match="valid: evidence@k"):
            FitMetric.parse(bad)
    assert default_fit_metric([example("q")]) == "evidence_mrr@10"
    assert default_fit_metric([example("q", evidence=False)]) == "mrr@10"


# ----------------------------------------------------------------------------- the saved config
def test_fusion_config_round_trips_and_validates(tmp_path: Path) -> None:
    config = FusionConfig(alpha=0.35, normalization="DIST_BASED", rrf_k=20, fitted_on={"m": 1})
    assert config.normalization == "dist_based" and config.rrf_k == 20.0
    path = save_fusion_config(config, tmp_path / "sub" / "fusion.json")
    assert load_fusion_config(path) == config
    assert load_fusion_config(path).fitted_on == {"m": 1}
    assert config.settings() == {
        "alpha": 0.35,
        "normalization": "dist_based",
        "rrf_k": 20.0,
        "candidate_pool": 50,
        "sentence_weight": 0.4,
        "unread_alpha": 0.05,
        "unread_sentence_weight": 0.2,
    }
    # a file saved before the unread weights existed still loads, with their defaults
    path.write_text(json.dumps({"alpha": 0.2}))
    assert load_fusion_config(path).unread_alpha == 0.05
    path.write_text(json.dumps({"alpha": 0.2, "alfa": 0.3}))
    with pytest.raises(ConfigurationError, match=r"unknown keys \['alfa'\]"):
        load_fusion_config(path)
    path.write_text("{not json")
    with pytest.raises(ConfigurationError, match="rag-pack eval --fit"):
        load_fusion_config(path)
    with pytest.raises(ConfigurationError, match="No fusion config"):
        resolve_fusion_config(tmp_path / "missing.json")
    with pytest.raises(ConfigurationError, match="candidate_pool"):
        FusionConfig(candidate_pool=0)
    with pytest.raises(ConfigurationError, match="rrf_k"):
        FusionConfig(rrf_k=-1)
    with pytest.raises(ConfigurationError, match="unread_alpha"):
        FusionConfig(unread_alpha=1.5)
    with pytest.raises(ConfigurationError, match="unread_sentence_weight"):
        FusionConfig(unread_sentence_weight=-0.1)


def test_resolve_reads_the_data_dir_file_only_when_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_PACK_DATA_DIR", str(tmp_path))
    assert resolve_fusion_config() == FusionConfig()
    save_fusion_config(FusionConfig(alpha=0.2))
    assert resolve_fusion_config().alpha == 0.2
    assert resolve_fusion_config(FusionConfig()).alpha == TUNED_ALPHA


def test_comparison_rows_carry_every_value_explicitly() -> None:
    config = FusionConfig(alpha=0.3, rrf_k=15, sentence_weight=0.4)
    rows = {s.name: s for s in comparison_strategies(config)}
    assert rows["hybrid_convex_fitted"].kwargs == {
        "alpha": 0.3,
        "normalization": "min_max",
        "sentence_weight": 0.4,
        "candidate_pool": 50,
    }
    assert rows["hybrid_convex_default"].kwargs["sentence_weight"] == 0.0
    assert rows["hybrid_fitted"].kwargs["rrf_k"] == 15.0
    assert rows["hybrid_default"].kwargs["rrf_k"] == 60.0


# ----------------------------------------------------------------------------- packs and the CLI
DOCS = {
    "okapi": "Okapi BM25 ranks documents by term frequency and inverse document frequency.",
    "milvus": "Milvus stores dense vectors and BM25 sparse vectors in one collection.",
    "paris": "Paris is the capital of France, on the river Seine.",
    "yeast": "Bread dough rises because yeast ferments sugar and releases carbon dioxide.",
    "moon": "The Moon orbits the Earth every 27 days and its gravity drives the tides.",
    "jupiter": "Jupiter is the largest planet in the Solar System, a gas giant.",
}
QUESTIONS = [
    ("q1", "How do search engines weigh how often a word appears?", "okapi", "term frequency"),
    ("q2", "Which database keeps keyword and semantic vectors together?", "milvus", "Milvus"),
    ("q3", "What city on the Seine governs France?", "paris", "Paris"),
    ("q4", "Why does a loaf get bigger before baking?", "yeast", "yeast"),
    ("q5", "What body makes the oceans rise and fall?", "moon", "Moon"),
    ("q6", "Which gas giant is the biggest world near the Sun?", "jupiter", "Jupiter"),
]


@pytest.mark.slow
def test_rag_pack_loads_the_saved_fit_and_arguments_override_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embed_model: Any
) -> None:
    monkeypatch.setenv("RAG_PACK_DATA_DIR", str(tmp_path / "data"))
    saved = FusionConfig(alpha=0.25, normalization="dist_based", rrf_k=15, candidate_pool=64)
    save_fusion_config(saved)
    docs = [Document(id_=k, text=v) for k, v in DOCS.items()]
    uri = str(tmp_path / "pack.db")
    pack = RagPack(docs, uri=uri, collection_name="fit", embed_model=embed_model)
    assert pack.fusion_config == saved
    convex = pack.retriever("hybrid_convex")
    assert (convex.alpha, convex.normalization.value, convex.candidate_pool) == (
        0.25,
        "dist_based",
        64,
    )
    assert convex.dense.similarity_top_k == 64 == convex.sparse.similarity_top_k
    assert pack.retriever("hybrid").rrf_k == 15.0
    assert pack.retriever("hybrid").candidate_pool == 64
    assert pack.retriever("hybrid_weighted").candidate_pool == 64
    assert pack.retriever("hybrid_convex", alpha=0.9).alpha == 0.9, "an argument beats the file"
    assert pack.retriever("hybrid", rrf_k=30).rrf_k == 30.0
    nodes = convex.retrieve("Which planet is the largest?")
    assert ids(nodes)[0] == "jupiter" or nodes[0].node.ref_doc_id == "jupiter"
    builtin = RagPack.open(
        uri=uri, collection_name="fit", embed_model=embed_model, fusion_config=FusionConfig()
    )
    explicit = builtin.retriever("hybrid_convex").alpha
    assert explicit == TUNED_ALPHA, "an explicit config beats the file"


def write_tiny_set(tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for key, text in DOCS.items():
        (corpus / f"{key}.txt").write_text(text, encoding="utf-8")
    lines = [
        json.dumps(
            {
                "id": qid,
                "question": question,
                "answers": [answer],
                "relevant_ids": [str((corpus / f"{doc}.txt").resolve())],
                "evidence": [DOCS[doc]],
            }
        )
        for qid, question, doc, answer in QUESTIONS
    ]
    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dataset, corpus


@pytest.mark.slow
def test_cli_eval_fit_writes_a_config_and_compares_before_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llama_index_rag_pack.cli import main

    monkeypatch.setenv("RAG_PACK_DATA_DIR", str(tmp_path / "data"))
    dataset, corpus = write_tiny_set(tmp_path)
    args = [
        "--llm",
        "none",
        "eval",
        "--dataset",
        str(dataset),
        "--corpus",
        str(corpus),
        "--top-k",
        "5",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "out"),
        "--no-chart",
        "--fit",
        "--fit-metric",
        "evidence@1",
        "--candidate-pool",
        "8",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Fit on 6 questions, by evidence@1" in out
    config = load_fusion_config(tmp_path / "data" / "fusion.json")
    assert config.candidate_pool == 8
    assert config.fitted_on["metric"] == "evidence@1" and config.fitted_on["questions"] == 6
    scores = config.fitted_on["scores"]
    best = scores[f"convex_{config.normalization}"]["score"]
    assert best >= max(scores["dense_alone"], scores["bm25_alone"], scores["sentences_alone"])
    assert best == max(scores["sentence_weight"].values())
    assert 0.0 <= config.sentence_weight <= 1.0
    for row in ("vector", "bm25", "hybrid_default", "hybrid_fitted", "hybrid_convex_fitted"):
        assert f"| {row} |" in out, row
    report = json.loads((tmp_path / "out" / "tiny.json").read_text())
    metrics = {s["name"]: s["metrics"] for s in report["strategies"]}
    assert metrics["hybrid_convex_fitted"]["evidence@1"] >= max(
        metrics["vector"]["evidence@1"], metrics["bm25"]["evidence@1"]
    )
    # a second fit, on the sync path, reads the candidates from the result cache
    cached = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("fit_*.json")}
    # one candidate list per search: dense, BM25 and best sentence
    assert len(cached) == 3
    assert main([*args, "--fit-out", str(tmp_path / "again.json"), "--concurrency", "1"]) == 0
    assert load_fusion_config(tmp_path / "again.json") == config
    assert {p: p.stat().st_mtime_ns for p in cached} == cached


# ----------------------------------------------------------------------------- the sentence list
def test_sentence_weight_zero_is_exactly_the_two_list_fusion() -> None:
    dense, sparse = sid(("a", 0.9), ("b", 0.5)), sid(("b", 7.0), ("c", 1.0))
    sentences = sid(("c", 0.8), ("a", 0.1))
    two = convex_fusion(dense, sparse, alpha=0.4)
    assert pairs(convex_fusion(dense, sparse, alpha=0.4, sentences=sentences)) == pairs(two)
    assert pairs(
        convex_fusion(dense, sparse, alpha=0.4, sentences=sentences, sentence_weight=0.0)
    ) == pairs(two)


def test_sentence_list_is_weighted_as_documented() -> None:
    dense, sparse = sid(("a", 0.9), ("b", 0.5)), sid(("b", 7.0), ("c", 1.0))
    sentences = sid(("c", 0.8), ("a", 0.1))
    fused = dict(
        pairs(convex_fusion(dense, sparse, alpha=0.5, sentences=sentences, sentence_weight=0.5))
    )
    # (1 - g) * (alpha * dense + (1 - alpha) * bm25) + g * sentence, each min-max scaled
    assert fused == pytest.approx({"a": 0.25, "b": 0.25, "c": 0.5})
    only = convex_fusion(dense, sparse, alpha=0.5, sentences=sentences, sentence_weight=1.0)
    assert ids(only)[:2] == ["c", "a"]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(questions=fit_questions_strategy, k=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_the_joint_fit_never_loses_to_any_list_alone(
    questions: list[FitQuestion], k: int, seed: int
) -> None:
    rng = random.Random(seed)
    with_sentences = [
        FitQuestion(
            q.dense,
            q.sparse,
            q.relevant,
            q.units,
            tuple(ranked(sid(*((c, rng.random()) for c in "abcde")))),
        )
        for q in questions
    ]
    metric = RankMetric("mrr", k)
    fit = fit_fusion(with_sentences, metric, alpha_grid=ALPHA_GRID[::5], sentence_grid=(0.5,))
    assert fit.sentence_fit is not None
    assert set(score_inputs(with_sentences, metric)) == {"dense", "sparse", "sentences"}
    grid = fit.sentence_fit.scores
    # the grid holds both ends: no sentences (the two-list fit) and the sentence list alone
    assert {0.0, 0.5, 1.0} <= set(grid)
    assert fit.best_score == pytest.approx(max(grid.values()))
    assert fit.best_score >= max(grid[0.0], grid[1.0])
    assert fit.sentence_weight in fit.sentence_fit.scores
    # without sentence candidates there is nothing to weigh
    assert fit_fusion(questions, metric, alpha_grid=ALPHA_GRID[::5]).sentence_fit is None
