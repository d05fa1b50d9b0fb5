"""Fitting the hybrid modes' fusion on a labelled set: what ``rag-pack eval --fit`` runs.

1. :func:`collect_candidates` / :func:`acollect_candidates` run the two searches of the
   ``hybrid_convex`` mode (dense and BM25, ``candidate_pool`` deep) over the harness's questions
   with the harness's runner, scoring and per-question result cache: a second fit reuses them.
2. :func:`fit_questions` turns each question's candidates into a
   :class:`~llama_index_rag_pack.evaluation.fusion_fit.FitQuestion` labelled for one
   :class:`FitMetric`.
3. :func:`~llama_index_rag_pack.evaluation.fusion_fit.fit_fusion` searches the grids (pure code).
4. :func:`fitted_config` keeps the result as a
   :class:`~llama_index_rag_pack.fusion.fusion_config.FusionConfig` that packs load;
   :func:`comparison_strategies` names the rows that show it before and after.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.answers import DEFAULT_ANSWER_PROMPT
from llama_index_rag_pack.evaluation.cache import ResultCache, slug, stable_hash
from llama_index_rag_pack.evaluation.fusion_fit import (
    FitQuestion,
    FusionFit,
    RankMetric,
    fit_fusion,
)
from llama_index_rag_pack.evaluation.labelled import LabelledExample
from llama_index_rag_pack.evaluation.planning import StrategyPlan
from llama_index_rag_pack.evaluation.report import StrategyResult
from llama_index_rag_pack.evaluation.runner import StrategyRunner
from llama_index_rag_pack.evaluation.strategies import Strategy, code_fingerprint
from llama_index_rag_pack.fusion.convex_fusion import DEFAULT_ALPHA, check_candidate_pool
from llama_index_rag_pack.fusion.fusion_config import FusionConfig
from llama_index_rag_pack.fusion.rank_fusion import DEFAULT_RRF_K

__all__ = [
    "FIT_SIDES",
    "FitMetric",
    "acollect_candidates",
    "collect_candidates",
    "comparison_strategies",
    "default_fit_metric",
    "fit_from_candidates",
    "fit_questions",
    "fit_table",
    "fitted_config",
]

#: The searches of ``hybrid_convex`` (attributes of its retriever), fitted on; ``sentences``
#: only when the collection has a sentence index.
FIT_SIDES = ("dense", "sparse", "sentences")

# metric name -> (per-node flag of the cached results, RankMetric kind)
_METRICS = {
    "evidence": ("evidence", "hit"),
    "evidence_mrr": ("evidence", "mrr"),
    "answer_in_context": ("answer", "hit"),
    "answer_mrr": ("answer", "mrr"),
    "mrr": ("relevant", "mrr"),
}
_METRIC_PATTERN = re.compile(r"^([a-z_]+)@([1-9][0-9]*)$")


@dataclass(frozen=True)
class FitMetric:
    """The metric a fit maximises, named like the report's columns.

    ``evidence@k`` and ``answer_in_context@k`` are hits at k (a chunk holding the evidence / the
    answer in the top k); ``evidence_mrr@k`` and ``answer_mrr@k`` the reciprocal rank of the
    first such chunk; ``mrr@k`` the report's document-level MRR.

    Example:
        >>> FitMetric.parse("evidence_mrr@10").rank_metric
        RankMetric(kind='mrr', k=10)
    """

    name: str
    flag: str
    rank_metric: RankMetric

    @classmethod
    def parse(cls, spec: str) -> FitMetric:
        """Parse ``name@k``.

        Raises:
            ConfigurationError: an unknown name or a k that is not a positive integer.
        """
        match = _METRIC_PATTERN.match(str(spec).strip().lower())
        if not match or match.group(1) not in _METRICS:
            valid = ", ".join(f"{name}@k" for name in _METRICS)
            raise ConfigurationError(f"Unknown fit metric {spec!r}; valid: {valid} (e.g. mrr@10).")
        flag, kind = _METRICS[match.group(1)]
        return cls(match.group(0), flag, RankMetric(kind, int(match.group(2))))  # type: ignore[arg-type]


def default_fit_metric(examples: Sequence[LabelledExample]) -> str:
    """``evidence_mrr@10`` when the questions carry evidence sentences, else ``mrr@10``."""
    return "evidence_mrr@10" if any(ex.evidence for ex in examples) else "mrr@10"


# ----------------------------------------------------------------------------- candidates
def _candidate_plans(
    harness: Any, candidate_pool: int
) -> tuple[StrategyRunner, list[StrategyPlan]]:
    """One plan per side of ``hybrid_convex``, each with its own result file in the harness's
    results directory."""
    pack = harness.prepare()
    depth = max(check_candidate_pool(candidate_pool), harness.top_k)
    # any sentence weight > 0 builds the sentence search when the collection has sentences
    convex = pack.retriever(
        "hybrid_convex", candidate_pool=depth, similarity_top_k=depth, sentence_weight=1.0
    )
    collection = getattr(pack.vector_store, "collection_name", "?")  # names the index build
    plans = []
    for side in FIT_SIDES:
        retriever = getattr(convex, side, None)
        if retriever is None:
            continue
        strategy = Strategy(f"fit_{side}", "hybrid_convex", {"side": side, "candidate_pool": depth})
        key = stable_hash(
            "fusion-fit",
            strategy.config_key(),
            code_fingerprint(retriever),
            collection,
            harness.seed,
        )
        path = harness.results_dir / slug(harness.dataset.name) / f"fit_{side}-{key}.json"
        plans.append(
            StrategyPlan(
                strategy,
                StrategyResult(strategy, "ok"),
                retriever,
                harness.examples(),
                ResultCache(path, force=harness.force),
                None,
            )
        )
    runner = StrategyRunner(
        top_k=depth,
        ks=tuple(k for k in (1, 5, 10) if k <= depth),
        concurrency=harness.concurrency,
        answer_prompt=DEFAULT_ANSWER_PROMPT,
        answer_top_k=1,
        show_progress=harness.show_progress,
    )
    return runner, plans


def collect_candidates(harness: Any, candidate_pool: int) -> dict[str, dict[str, Any]]:
    """Each side's scored candidates per question id, on the sync retriever path (cached).

    Returns:
        ``{"dense": {question_id: result}, "sparse": {...}}``, results as the harness caches
        them (``retrieved``: node id, score and flags per candidate, best first).
    """
    runner, plans = _candidate_plans(harness, candidate_pool)
    for plan in plans:
        runner.run(plan)
    return {plan.strategy.kwargs["side"]: plan.row.results for plan in plans}


async def acollect_candidates(harness: Any, candidate_pool: int) -> dict[str, dict[str, Any]]:
    """:func:`collect_candidates` on the async path, ``harness.concurrency`` questions at once."""
    runner, plans = _candidate_plans(harness, candidate_pool)
    for plan in plans:
        await runner.arun(plan)
    return {plan.strategy.kwargs["side"]: plan.row.results for plan in plans}


# ----------------------------------------------------------------------------- fitting
def _judged_unit(item: Mapping[str, Any], example: LabelledExample, flag: str) -> str:
    """What a candidate counts as: its relevant (else first) document for document-level
    metrics, as the report's scoring does; itself for chunk-level ones."""
    if flag != "relevant":
        return str(item["node_id"])
    ids = item.get("doc_ids") or []
    hit = next((d for d in ids if d in example.relevant_ids), None)
    return str(hit or (ids[0] if ids else f"?{item['node_id']}"))


def fit_questions(
    examples: Sequence[LabelledExample],
    candidates: Mapping[str, Mapping[str, Any]],
    metric: FitMetric,
) -> list[FitQuestion]:
    """The questions to fit on: those both sides answered without an error, labelled with
    ``metric``'s flag (the relevant documents for ``mrr@k``)."""
    out = []
    sides = [side for side in FIT_SIDES if side in candidates]
    for ex in examples:
        results = [candidates[side].get(ex.id) for side in sides]
        if any(r is None or r.get("error") for r in results):
            continue
        lists = [r.get("retrieved") or [] for r in results]  # type: ignore[union-attr]
        units = {str(i["node_id"]): _judged_unit(i, ex, metric.flag) for lst in lists for i in lst}
        if metric.flag == "relevant":
            relevant = set(ex.relevant_ids)
        else:
            relevant = {str(i["node_id"]) for lst in lists for i in lst if i.get(metric.flag)}
        pairs = [[(str(i["node_id"]), i.get("score")) for i in lst] for lst in lists]
        out.append(
            FitQuestion.of(
                pairs[0], pairs[1], relevant, units, sentences=pairs[2] if len(pairs) > 2 else ()
            )
        )
    return out


def fitted_config(
    fit: FusionFit, *, candidate_pool: int, provenance: Mapping[str, Any]
) -> FusionConfig:
    """The config packs load: the fitted values, and in ``fitted_on`` where they come from
    (``provenance``: dataset, metric, ...) and the scores behind them."""
    scores = {
        "dense_alone": fit.inputs["dense"],
        "bm25_alone": fit.inputs["sparse"],
        **{
            f"convex_{norm.value}": {"alpha": grid.best, "score": grid.best_score}
            for norm, grid in fit.alpha_fits.items()
        },
        "convex_default": fit.alpha_fits[fit.normalization].default_score,
        "rrf": {"k": fit.rrf_fit.best, "score": fit.rrf_fit.best_score},
        "rrf_default": fit.rrf_fit.default_score,
    }
    if fit.sentence_fit is not None:
        scores["sentences_alone"] = fit.inputs["sentences"]
        scores["sentence_weight"] = {
            f"{g:g}": score for g, score in sorted(fit.sentence_fit.scores.items())
        }
    return FusionConfig(
        alpha=fit.alpha,
        normalization=fit.normalization.value,
        rrf_k=fit.rrf_k,
        candidate_pool=candidate_pool,
        sentence_weight=fit.sentence_weight,
        fitted_on={
            **provenance,
            "questions": fit.n_questions,
            "scores": scores,
        },
    )


def fit_from_candidates(
    harness: Any,
    candidates: Mapping[str, Mapping[str, Any]],
    *,
    candidate_pool: int,
    metric: str | None = None,
) -> tuple[FusionFit, FusionConfig]:
    """Fit on the harness's questions and their collected ``candidates``.

    When most questions are ones the embedding model cannot read (their language or their
    chunks' is not the model's: a Chinese set with the bundled English model), the fit is of
    those questions and becomes the config's ``unread_alpha`` and ``unread_sentence_weight``
    (the other weights stay as the pack had them); otherwise of the questions it reads, as
    ``alpha`` and ``sentence_weight``.

    Args:
        harness: The :class:`~llama_index_rag_pack.evaluation.harness.EvalHarness` the
            candidates were collected with.
        candidates: What :func:`collect_candidates` returned.
        candidate_pool: The pool they were collected with (saved in the config).
        metric: A :class:`FitMetric` name (default: :func:`default_fit_metric`).

    Raises:
        ConfigurationError: a bad metric, or no question with a result on both sides.
    """
    examples = harness.examples()
    fit_metric = FitMetric.parse(metric or default_fit_metric(examples))
    reads = harness.prepare().retriever("hybrid_convex").reads
    unread = [ex for ex in examples if not reads(ex.question)]
    for_unread = 2 * len(unread) > len(examples)
    if for_unread:  # most questions are in a language the embedding model cannot read
        examples = unread
    questions = fit_questions(examples, candidates, fit_metric)
    fit = fit_fusion(questions, fit_metric.rank_metric)
    provenance = {
        "dataset": harness.dataset.name,
        "corpus": harness.dataset.corpus,
        "metric": fit_metric.name,
        "seed": harness.seed,
        "limit": harness.limit,
        "questions_fitted": "unread" if for_unread else "read",
    }
    config = fitted_config(fit, candidate_pool=candidate_pool, provenance=provenance)
    if for_unread:
        base = harness.prepare().fusion_config
        config = FusionConfig(
            **{
                **config.to_dict(),
                "alpha": base.alpha,
                "sentence_weight": base.sentence_weight,
                "unread_alpha": config.alpha,
                "unread_sentence_weight": config.sentence_weight,
            }
        )
    return fit, config


def fit_table(fit: FusionFit, metric: str) -> str:
    """Markdown: the metric of each input alone, of each fusion at its default and fitted."""
    rows = [
        ("dense alone", "", fit.inputs["dense"]),
        ("BM25 alone", "", fit.inputs["sparse"]),
        *(
            [("best sentence alone", "", fit.inputs["sentences"])]
            if "sentences" in fit.inputs
            else []
        ),
        ("RRF", f"k={fit.rrf_fit.default:g} (default)", fit.rrf_fit.default_score),
        ("RRF", f"k={fit.rrf_fit.best:g} (fitted)", fit.rrf_fit.best_score),
    ]
    # with sentence candidates, each normalization's alpha grid is at its best sentence weight
    suffix = " + sentences" if fit.sentence_fit is not None else ""
    for norm, grid in fit.alpha_fits.items():
        name = f"convex {norm.value}{suffix}"
        rows.append((name, f"alpha={grid.default:g} (default)", grid.default_score))
        rows.append((name, f"alpha={grid.best:g} (fitted)", grid.best_score))
    if fit.sentence_fit is not None:
        for g, score in sorted(fit.sentence_fit.scores.items()):
            chosen = " (fitted)" if g == fit.sentence_weight else ""
            rows.append(
                (
                    f"convex {fit.normalization.value} + sentences",
                    f"sentence weight={g:g}{chosen}, best alpha",
                    score,
                )
            )
    lines = [
        f"Fit on {fit.n_questions} questions, by {metric}:",
        "",
        f"| fusion | setting | {metric} |",
        "|---|---|---:|",
        *(f"| {name} | {setting} | {score:.3f} |" for name, setting, score in rows),
    ]
    return "\n".join(lines)


def comparison_strategies(config: FusionConfig) -> list[Strategy]:
    """The rows that show a fit: each input alone, the hybrid modes with the built-in defaults,
    and with ``config``'s values (every value explicit, so no saved config changes them)."""
    pool = {"candidate_pool": config.candidate_pool}
    alpha, weight = config.alpha, config.sentence_weight
    if config.fitted_on.get("questions_fitted") == "unread":
        alpha, weight = config.unread_alpha, config.unread_sentence_weight
    return [
        Strategy("vector", "vector", description="dense alone"),
        Strategy("bm25", "bm25", description="BM25 alone"),
        Strategy("hybrid_weighted", "hybrid_weighted", pool, description="Milvus weighted"),
        Strategy(
            "hybrid_default", "hybrid", {"rrf_k": DEFAULT_RRF_K, **pool}, description="RRF k=60"
        ),
        Strategy(
            "hybrid_fitted",
            "hybrid",
            {"rrf_k": config.rrf_k, **pool},
            description=f"RRF k={config.rrf_k:g} (fitted)",
        ),
        Strategy(
            "hybrid_convex_default",
            "hybrid_convex",
            {"alpha": DEFAULT_ALPHA, "normalization": "min_max", "sentence_weight": 0.0, **pool},
            description="convex, min-max, alpha=0.5, no sentences",
        ),
        Strategy(
            "hybrid_convex_fitted",
            "hybrid_convex",
            {
                "alpha": alpha,
                "normalization": config.normalization,
                "sentence_weight": weight,
                **pool,
            },
            description=(
                f"convex, {config.normalization}, alpha={alpha:g}, sentence weight={weight:g} "
                "(fitted)"
            ),
        ),
    ]
