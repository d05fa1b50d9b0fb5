"""``rag-pack eval``: compare retrieval strategies on a labelled set (table, JSON, bar chart)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any


def _out(text: str = "") -> None:
    print(text, flush=True)  # noqa: T201 - the CLI prints


def register(subparsers: Any) -> None:
    """Add the ``eval`` subcommand to ``rag-pack``."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate retrieval strategies on a labelled question set",
        description="Index the set's corpus once (cached), run each strategy, and write a Markdown "
        "table, a JSON file and a bar chart. Results are cached per strategy: a re-run only "
        "recomputes strategies whose configuration, code or data changed.",
    )
    _add_data_arguments(p)
    _add_run_arguments(p)
    _add_output_arguments(p)
    _add_fit_arguments(p)
    p.set_defaults(func=cmd_eval)


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    """What is evaluated: the labelled set, its corpus and the strategies."""
    p.add_argument(
        "--dataset", default="wiki_qa", help="shipped set name (default wiki_qa) or a .jsonl path"
    )
    p.add_argument(
        "--split",
        default=None,
        help="only the questions of this split of the set, e.g. dev or test (default: all)",
    )
    p.add_argument(
        "--corpus",
        default=None,
        help="corpus the ids refer to: wikipedia, lee, wikipedia+lee or a path "
        "(default: from the set)",
    )
    p.add_argument(
        "--strategies",
        default="all",
        help="'all' or a comma list: vector(dense),bm25(sparse),hybrid,fusion,...",
    )
    p.add_argument("--list", action="store_true", help="list the strategies and sets, then exit")
    p.add_argument(
        "--filter",
        metavar="EXPR",
        default=None,
        help="Milvus expression on the chunks' metadata: every strategy searches under it and "
        "only questions about documents it keeps are asked (see docs/filters.md)",
    )
    p.add_argument(
        "--corpus-limit",
        type=int,
        default=None,
        help="index only the first N documents and keep the questions about them",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How it is evaluated: retrieval depth, question sample, concurrency, answers."""
    p.add_argument(
        "--top-k", type=int, default=10, help="chunks retrieved per question (default 10)"
    )
    p.add_argument(
        "--limit", type=int, default=None, help="evaluate a seeded sample of N questions"
    )
    p.add_argument(
        "--llm-limit",
        type=int,
        default=10,
        help="at most N questions for strategies that call an LLM per query (default 10; 0 = all)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the question sample (default 0)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="questions in flight at once (default 4; 1 = sync path)",
    )
    p.add_argument(
        "--answers", action="store_true", help="also let the LLM answer and score EM / token F1"
    )
    p.add_argument(
        "--rerank",
        metavar="URL|local:DIR",
        default=None,
        help="also score each strategy reranked (as NAME+rerank) by this /rerank endpoint or "
        "local cross-encoder, 4 x --top-k candidates each (docs/rerank.md)",
    )


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Where results go and which caches are reused."""
    p.add_argument(
        "--cache-dir", default=None, help="index and result cache (default $RAG_PACK_DATA_DIR/eval)"
    )
    p.add_argument(
        "--out",
        default=None,
        help="where to write <name>.md/.json/.png (default <cache-dir>/reports)",
    )
    p.add_argument(
        "--name", default=None, help="file stem of the outputs (default: the dataset name)"
    )
    p.add_argument("--rebuild-index", action="store_true", help="index the corpus again")
    p.add_argument("--force", action="store_true", help="ignore cached results")
    p.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")


def _list() -> int:
    from llama_index_rag_pack.evaluation.labelled import shipped_sets
    from llama_index_rag_pack.evaluation.strategies import available_strategies
    from llama_index_rag_pack.pack.mode_registry import mode_aliases

    _out("Strategies:")
    for s in available_strategies().values():
        needs = [n for n, flag in (("LLM", s.needs_llm), ("RAPTOR tree", s.needs_tree)) if flag]
        _out(f"  {s.name:<20} mode={s.mode:<18} {('needs ' + ', '.join(needs)) if needs else ''}")
    _out("  aliases: " + ", ".join(f"{a}={b}" for a, b in mode_aliases().items()))
    _out("Labelled sets:")
    for name, path in shipped_sets().items():
        _out(f"  {name:<20} {path}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    from llama_index_rag_pack.evaluation.harness import EvalHarness
    from llama_index_rag_pack.evaluation.labelled import load_labelled_set
    from llama_index_rag_pack.pack.commands import check_filter_expression

    start = time.perf_counter()
    expr = (args.filter or "").strip() or None
    if expr is not None:
        check_filter_expression(expr)  # malformed: one line, before any model loads
    if args.rerank:
        from llama_index_rag_pack.rerank.reranker_spec import make_reranker

        make_reranker(args.rerank)  # a malformed URL or missing directory: one line, now
    harness = EvalHarness(
        load_labelled_set(args.dataset, corpus=args.corpus, split=args.split),
        corpus=args.corpus,
        cache_dir=args.cache_dir,
        uri=args.uri,
        top_k=args.top_k,
        ks=tuple(k for k in (1, 3, 5, 10) if k <= args.top_k) or (args.top_k,),
        limit=args.limit,
        llm_limit=args.llm_limit or None,
        corpus_limit=args.corpus_limit,
        seed=args.seed,
        concurrency=args.concurrency,
        answers=args.answers,
        llm=args.llm,
        embed_model=args.embed_model,
        rebuild_index=args.rebuild_index,
        force=args.force,
        show_progress=True,
        filters=expr,
    )
    _out(
        f"rag-pack eval: {harness.dataset.name} ({len(harness.dataset)} questions, "
        f"corpus {harness.dataset.corpus})"
    )
    _out("→ loading the corpus and opening the cached index (built on first use) ...")
    pack = harness.prepare()
    if expr is not None:
        _out(f"  filter: {expr}")
    _out(f"  {pack.count()} chunks; {len(harness.examples())} questions to evaluate")
    strategies = _fit_and_compare(args, harness) if args.fit else args.strategies
    if args.rerank:
        strategies = _reranked(strategies, args.rerank)
    if args.concurrency > 1:
        report = asyncio.run(harness.arun(strategies))
    else:
        report = harness.run(strategies)
    for row in report.rows:
        if row.status == "ok" and row.cached:
            _out(f"  {row.strategy.name}: {row.cached}/{row.n} questions from the cache")
    _out()
    _out(report.to_markdown())
    out_dir = Path(args.out) if args.out else harness.cache_dir / "reports"
    paths = report.write(out_dir, stem=args.name, chart=not args.no_chart)
    for kind, path in paths.items():
        _out(f"{kind:>8}: {path}")
    _out(f"done in {time.perf_counter() - start:.1f} s")
    return 0 if report.ok_rows() else 1


def _reranked(strategies: Any, rerank: str) -> list[Any]:
    """The strategies, each followed by its reranked twin (``--rerank``)."""
    from llama_index_rag_pack.evaluation.strategies import (
        reranked_strategies,
        resolve_strategies,
    )

    chosen = resolve_strategies(strategies) if isinstance(strategies, str) else strategies
    return reranked_strategies(chosen, rerank)


def _add_fit_arguments(p: argparse.ArgumentParser) -> None:
    """``--fit``: fit the hybrid modes' fusion on the set and save it for RagPack."""
    g = p.add_argument_group("fitting the hybrid fusion")
    g.add_argument(
        "--fit",
        action="store_true",
        help="fit hybrid_convex's dense weight alpha (and its sentence weight, when the index has "
        "sentences) and hybrid's RRF k on the set, save them "
        "where RagPack loads them, then compare the inputs and the hybrids before and after "
        "(instead of --strategies)",
    )
    g.add_argument(
        "--fit-metric",
        default=None,
        help="what the fit maximises: evidence_mrr@10 (default when the set has evidence "
        "sentences, else mrr@10), evidence@1, answer_in_context@1, answer_mrr@10",
    )
    g.add_argument(
        "--fit-out",
        default=None,
        help="where to write the fusion config (default $RAG_PACK_DATA_DIR/fusion.json, "
        "which RagPack loads)",
    )
    g.add_argument(
        "--candidate-pool",
        type=int,
        default=50,
        help="candidates each side of a hybrid search fetches while fitting, saved in the "
        "config (default 50)",
    )


def _fit_and_compare(args: argparse.Namespace, harness: Any) -> list[Any]:
    """Fit on the harness's questions, print the fit, save the config; returns the strategies
    that compare the inputs and the hybrids before and after."""
    from llama_index_rag_pack.evaluation.fitting import (
        acollect_candidates,
        collect_candidates,
        comparison_strategies,
        fit_from_candidates,
        fit_table,
    )
    from llama_index_rag_pack.fusion.fusion_config import save_fusion_config

    pool = args.candidate_pool
    _out(f"→ fitting the fusion: dense and BM25 candidates, {pool} per side ...")
    if args.concurrency > 1:
        candidates = asyncio.run(acollect_candidates(harness, pool))
    else:
        candidates = collect_candidates(harness, pool)
    fit, config = fit_from_candidates(
        harness, candidates, candidate_pool=pool, metric=args.fit_metric
    )
    _out(fit_table(fit, config.fitted_on["metric"]))
    path = save_fusion_config(config, args.fit_out)
    weights = (
        f"unread_alpha={config.unread_alpha:g}, unread_sentence_weight="
        f"{config.unread_sentence_weight:g} (questions the embedding model cannot read)"
        if config.fitted_on.get("questions_fitted") == "unread"
        else f"alpha={config.alpha:g}"
    )
    _out(
        f"fusion config: {path} ({weights}, {config.normalization}, "
        f"rrf_k={config.rrf_k:g}, candidate_pool={config.candidate_pool})"
    )
    _out()
    return comparison_strategies(config)


if __name__ == "__main__":  # pragma: no cover
    from llama_index_rag_pack.cli import main

    sys.exit(main(["eval", *sys.argv[1:]]))
