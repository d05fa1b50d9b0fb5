"""Fitting hybrid fusion on labelled questions: a grid search over per-question candidate lists.

Each :class:`FitQuestion` holds one question's dense and BM25 candidates (node ids and raw
scores) and which of them count as hits. :func:`fit_fusion` scores every grid value of the dense
weight ``alpha`` (for each :class:`~llama_index_rag_pack.fusion.convex_fusion.ScoreNormalization`)
and of the RRF constant ``k`` with one :class:`RankMetric`, fusing exactly as the hybrid
retrievers do (:func:`~llama_index_rag_pack.fusion.convex_fusion.convex_fusion`,
:func:`~llama_index_rag_pack.fusion.convex_fusion.two_list_rrf`), and keeps the best value. The
alpha grid always holds 0 (BM25 only) and 1 (dense only), so on the questions it was fitted on the
fitted fusion never scores below either of its inputs. Equal scores go to the value nearest the
default, so a flat objective keeps the default.

Example:
    >>> q = FitQuestion.of(dense=[("a", 0.9), ("b", 0.8)], sparse=[("b", 7.0), ("c", 2.0)],
    ...                    relevant=["b"])
    >>> fit = fit_fusion([q], RankMetric("hit", 1))
    >>> fit.alpha < 0.5, fit.best_score
    (True, 1.0)
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation import metrics as M
from llama_index_rag_pack.fusion.convex_fusion import (
    DEFAULT_ALPHA,
    DEFAULT_SENTENCE_WEIGHT,
    ScoredId,
    ScoreNormalization,
    check_alpha,
    check_sentence_weight,
    convex_fusion,
    ranked,
    two_list_rrf,
)
from llama_index_rag_pack.fusion.rank_fusion import DEFAULT_RRF_K

__all__ = [
    "ALPHA_GRID",
    "RRF_K_GRID",
    "SENTENCE_WEIGHT_GRID",
    "FitQuestion",
    "FusionFit",
    "GridFit",
    "RankMetric",
    "best_on_grid",
    "fit_alpha",
    "fit_fusion",
    "fit_rrf_k",
    "score_inputs",
]

#: Dense weights tried: 0.0, 0.05, ..., 1.0.
ALPHA_GRID: tuple[float, ...] = tuple(i / 20 for i in range(21))
#: RRF constants tried: 5, 10, ..., 100.
RRF_K_GRID: tuple[float, ...] = tuple(float(k) for k in range(5, 101, 5))
#: Sentence-list weights tried (when the questions have sentence candidates): 0.0, 0.1, ..., 1.0.
SENTENCE_WEIGHT_GRID: tuple[float, ...] = tuple(i / 10 for i in range(11))


@dataclass(frozen=True)
class RankMetric:
    """A per-question measure of a ranking: ``hit`` (success@k) or ``mrr`` (reciprocal rank of
    the first hit within k), computed with :mod:`~llama_index_rag_pack.evaluation.metrics`.

    Example:
        >>> RankMetric("mrr", 10)(["x", "b", "b"], {"b"})
        0.5
    """

    kind: Literal["hit", "mrr"]
    k: int

    def __post_init__(self) -> None:
        if self.kind not in ("hit", "mrr"):
            raise ConfigurationError(f"RankMetric kind must be 'hit' or 'mrr', got {self.kind!r}.")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k <= 0:
            raise ConfigurationError(f"RankMetric k must be a positive integer, got {self.k!r}.")

    def __call__(self, judged: Sequence[str], relevant: Iterable[str]) -> float:
        """The measure of one ranking (``judged``: the judged unit of each rank, best first)."""
        fn = M.hit_at_k if self.kind == "hit" else M.mrr_at_k
        return fn(judged, relevant, self.k)


@dataclass(frozen=True)
class FitQuestion:
    """One question's candidates and labels.

    Attributes:
        dense: Dense candidates (any order; ranked by score, then node id).
        sparse: BM25 candidates (same).
        relevant: The judged units that count as hits.
        units: The judged unit of each node id (a chunk's document for document-level metrics);
            a node missing here is judged as itself.
        sentences: Chunks scored by their best sentence (empty without a sentence index).
    """

    dense: tuple[ScoredId, ...]
    sparse: tuple[ScoredId, ...]
    relevant: frozenset[str]
    units: Mapping[str, str] = field(default_factory=dict)
    sentences: tuple[ScoredId, ...] = ()

    @classmethod
    def of(
        cls,
        dense: Iterable[tuple[str, float]],
        sparse: Iterable[tuple[str, float]],
        relevant: Iterable[str],
        units: Mapping[str, str] | None = None,
        sentences: Iterable[tuple[str, float]] = (),
    ) -> FitQuestion:
        """Build from ``(node_id, score)`` pairs."""
        return cls(
            tuple(ranked([ScoredId.of(i, s) for i, s in dense])),
            tuple(ranked([ScoredId.of(i, s) for i, s in sparse])),
            frozenset(relevant),
            dict(units or {}),
            tuple(ranked([ScoredId.of(i, s) for i, s in sentences])),
        )

    def judge(self, fused: Sequence[ScoredId], metric: RankMetric) -> float:
        """``metric`` of a ranking of this question's candidates."""
        judged = [self.units.get(n.node.node_id, n.node.node_id) for n in fused[: metric.k]]
        return metric(judged, self.relevant)


@dataclass(frozen=True)
class GridFit:
    """The mean metric of every grid value of one parameter, and the value kept.

    Attributes:
        parameter: ``alpha`` or ``rrf_k``.
        best: The value with the highest mean (ties: nearest ``default``, then the smaller).
        default: The built-in default (always on the grid).
        scores: Mean metric per grid value.
    """

    parameter: str
    best: float
    default: float
    scores: Mapping[float, float]

    @property
    def best_score(self) -> float:
        return self.scores[self.best]

    @property
    def default_score(self) -> float:
        return self.scores[self.default]


@dataclass(frozen=True)
class FusionFit:
    """What :func:`fit_fusion` found.

    Attributes:
        metric: The metric maximised.
        n_questions: Questions fitted on.
        alpha: The fitted dense weight of the best normalization.
        normalization: The normalization that scored best (ties: ``min_max``).
        rrf_k: The fitted RRF constant.
        alpha_fits: The alpha grid of each normalization tried.
        rrf_fit: The RRF ``k`` grid.
        inputs: The metric of each side alone (``dense``, ``sparse``, and ``sentences`` when
            the questions have them), ranked by its own scores.
        sentence_weight: The fitted weight of the sentence list (0 without sentences).
        sentence_fit: Per sentence weight, the best convex score over alpha (best
            normalization); ``None`` without sentences.
    """

    metric: RankMetric
    n_questions: int
    alpha: float
    normalization: ScoreNormalization
    rrf_k: float
    alpha_fits: Mapping[ScoreNormalization, GridFit]
    rrf_fit: GridFit
    inputs: Mapping[str, float]
    sentence_weight: float = 0.0
    sentence_fit: GridFit | None = None

    @property
    def best_score(self) -> float:
        """The fitted convex fusion's mean metric."""
        return self.alpha_fits[self.normalization].best_score


def best_on_grid(scores: Mapping[float, float], default: float) -> float:
    """The grid value with the highest score; equal scores go to the value nearest ``default``
    (then to the smaller one).

    Example:
        >>> best_on_grid({0.0: 0.5, 0.4: 0.7, 0.6: 0.7, 1.0: 0.6}, default=0.5)
        0.4
    """
    if not scores:
        raise ConfigurationError("The grid is empty: give at least one value to try.")
    top = max(scores.values())
    return min((v for v, s in scores.items() if s == top), key=lambda v: (abs(v - default), v))


def _mean(questions: Sequence[FitQuestion], score: Callable[[FitQuestion], float]) -> float:
    return sum(score(q) for q in questions) / len(questions)


def _grid_fit(
    parameter: str,
    questions: Sequence[FitQuestion],
    grid: Iterable[float],
    default: float,
    score: Callable[[FitQuestion, float], float],
) -> GridFit:
    if not questions:
        raise ConfigurationError("No questions to fit on: check the dataset and its split.")
    values = sorted({float(v) for v in grid} | {float(default)})
    scores = {v: _mean(questions, lambda q, v=v: score(q, v)) for v in values}
    return GridFit(parameter, best_on_grid(scores, default), float(default), scores)


def fit_alpha(
    questions: Sequence[FitQuestion],
    metric: RankMetric,
    *,
    normalization: str | ScoreNormalization = ScoreNormalization.MIN_MAX,
    grid: Iterable[float] = ALPHA_GRID,
    default: float = DEFAULT_ALPHA,
    sentence_weight: float = 0.0,
) -> GridFit:
    """The dense weight of :func:`convex_fusion` that maximises the mean ``metric``, with the
    sentence list (if any) at ``sentence_weight``.

    The grid always includes 0, 1 and ``default``.

    Raises:
        ConfigurationError: no questions, a grid value or default outside [0, 1].
    """
    norm = ScoreNormalization.parse(normalization)
    grid = [check_alpha(a) for a in (*grid, 0.0, 1.0)]
    check_alpha(default)

    gamma = check_sentence_weight(sentence_weight)

    def score(q: FitQuestion, alpha: float) -> float:
        fused = convex_fusion(
            q.dense,
            q.sparse,
            alpha=alpha,
            normalization=norm,
            top_n=metric.k,
            sentences=q.sentences,
            sentence_weight=gamma,
        )
        return q.judge(fused, metric)

    return _grid_fit("alpha", questions, grid, default, score)


def fit_rrf_k(
    questions: Sequence[FitQuestion],
    metric: RankMetric,
    *,
    grid: Iterable[float] = RRF_K_GRID,
    default: float = DEFAULT_RRF_K,
) -> GridFit:
    """The RRF constant of :func:`two_list_rrf` that maximises the mean ``metric``.

    Raises:
        ConfigurationError: no questions or a negative ``k``.
    """

    def score(q: FitQuestion, k: float) -> float:
        return q.judge(two_list_rrf(q.dense, q.sparse, k=k, top_n=metric.k), metric)

    return _grid_fit("rrf_k", questions, grid, default, score)


def score_inputs(questions: Sequence[FitQuestion], metric: RankMetric) -> dict[str, float]:
    """The mean ``metric`` of the dense and of the BM25 list alone."""
    if not questions:
        raise ConfigurationError("No questions to score: check the dataset and its split.")
    out = {
        "dense": _mean(questions, lambda q: q.judge(q.dense, metric)),
        "sparse": _mean(questions, lambda q: q.judge(q.sparse, metric)),
    }
    if any(q.sentences for q in questions):
        out["sentences"] = _mean(questions, lambda q: q.judge(q.sentences, metric))
    return out


def _fit_alpha_and_sentences(
    questions: Sequence[FitQuestion],
    metric: RankMetric,
    norm: ScoreNormalization,
    alpha_grid: tuple[float, ...],
    sentence_grid: tuple[float, ...],
) -> tuple[GridFit, GridFit]:
    """Alpha fitted at each sentence weight; the sentence weight whose best alpha scores best.

    The grid always holds 0 (dense and BM25 only) and 1 (the sentence list alone).

    Returns:
        The alpha grid at the chosen sentence weight, and the sentence-weight grid (each value's
        score is the best over alpha at that weight).
    """
    per_weight = {
        check_sentence_weight(g): fit_alpha(
            questions, metric, normalization=norm, grid=alpha_grid, sentence_weight=g
        )
        for g in (*sentence_grid, 0.0, 1.0, DEFAULT_SENTENCE_WEIGHT)
    }
    scores = {g: fit.best_score for g, fit in per_weight.items()}
    best = best_on_grid(scores, DEFAULT_SENTENCE_WEIGHT)
    return per_weight[best], GridFit(
        "sentence_weight", best, float(DEFAULT_SENTENCE_WEIGHT), scores
    )


def fit_fusion(
    questions: Sequence[FitQuestion],
    metric: RankMetric,
    *,
    alpha_grid: Iterable[float] = ALPHA_GRID,
    rrf_k_grid: Iterable[float] = RRF_K_GRID,
    normalizations: Iterable[str | ScoreNormalization] = tuple(ScoreNormalization),
    sentence_grid: Iterable[float] = SENTENCE_WEIGHT_GRID,
) -> FusionFit:
    """Fit alpha (per normalization, keeping the best one) and the RRF ``k`` on ``questions``;
    when they have sentence candidates, alpha and the sentence weight together (a joint grid).

    Raises:
        ConfigurationError: no questions, no normalization, bad grid values.
    """
    norms = list(dict.fromkeys(ScoreNormalization.parse(n) for n in normalizations))
    if not norms:
        raise ConfigurationError("Give at least one normalization (min_max, dist_based).")
    alpha_grid = tuple(alpha_grid)
    sentence_fits: dict[ScoreNormalization, GridFit] = {}
    if any(q.sentences for q in questions):
        alpha_fits = {}
        for n in norms:
            alpha_fits[n], sentence_fits[n] = _fit_alpha_and_sentences(
                questions, metric, n, alpha_grid, tuple(sentence_grid)
            )
    else:
        alpha_fits = {
            n: fit_alpha(questions, metric, normalization=n, grid=alpha_grid) for n in norms
        }
    preference = {n: i for i, n in enumerate(ScoreNormalization)}
    best = max(norms, key=lambda n: (alpha_fits[n].best_score, -preference[n]))
    rrf_fit = fit_rrf_k(questions, metric, grid=rrf_k_grid)
    sentence_fit = sentence_fits.get(best)
    return FusionFit(
        metric=metric,
        n_questions=len(questions),
        alpha=alpha_fits[best].best,
        normalization=best,
        rrf_k=rrf_fit.best,
        alpha_fits=alpha_fits,
        rrf_fit=rrf_fit,
        inputs=score_inputs(questions, metric),
        sentence_weight=sentence_fit.best if sentence_fit is not None else 0.0,
        sentence_fit=sentence_fit,
    )
