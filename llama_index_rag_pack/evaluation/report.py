"""The results of one evaluation run: :class:`EvalReport` (Markdown table, JSON, bar chart) and
one :class:`StrategyResult` per strategy."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.labelled import LabelledExample
from llama_index_rag_pack.evaluation.scoring import DEFAULT_KS, summarize
from llama_index_rag_pack.evaluation.strategies import Strategy

__all__ = ["EvalReport", "SUMMARY_COLUMNS", "StrategyResult"]

# Headline columns: (key, label). Keys are produced by :func:`summarize`.
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("recall@1", "R@1"),
    ("recall@5", "R@5"),
    ("recall@10", "R@10"),
    ("mrr@10", "MRR@10"),
    ("ndcg@10", "nDCG@10"),
    ("evidence@5", "chunk hit@5"),
    ("answer_in_context@5", "answer@5"),
)


@dataclass
class StrategyResult:
    """Outcome of one strategy: its metrics, or why it was skipped / failed.

    Example:
        >>> from llama_index_rag_pack.evaluation.strategies import Strategy
        >>> StrategyResult(Strategy("fusion", "fusion"), "ok", llm="ScriptedLLM").label
        'fusion [LLM: ScriptedLLM]'
    """

    strategy: Strategy
    status: str  # "ok", "skipped", "error"
    note: str = ""
    n: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    llm: str | None = None
    cached: int = 0
    seconds: float = 0.0
    question_ids: list[str] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return f"{self.strategy.name} [LLM: {self.llm}]" if self.llm else self.strategy.name


@dataclass
class EvalReport:
    """Results of one ``rag-pack eval`` run; renders Markdown, JSON and a bar chart.

    Example:
        >>> report = EvalHarness("wiki_qa", limit=20).run("vector,bm25")  # doctest: +SKIP
        >>> report.write("eval-out")  # doctest: +SKIP
        {'markdown': PosixPath('eval-out/wiki_qa.md'), 'json': ..., 'chart': ...}
    """

    dataset: str
    corpus: str | None
    n_questions: int
    config: dict[str, Any]
    rows: list[StrategyResult]
    examples: list[LabelledExample] = field(default_factory=list, repr=False)

    def ok_rows(self) -> list[StrategyResult]:
        return [r for r in self.rows if r.status == "ok"]

    def shared_question_ids(self) -> list[str]:
        rows = self.ok_rows()
        if not rows:
            return []
        common = set(rows[0].question_ids)
        for r in rows[1:]:
            common &= set(r.question_ids)
        return [ex.id for ex in self.examples if ex.id in common]

    def shared_metrics(self) -> dict[str, dict[str, float]]:
        """Metrics of every ok strategy on the questions all of them answered."""
        ids = set(self.shared_question_ids())
        exs = [ex for ex in self.examples if ex.id in ids]
        ks = tuple(self.config.get("ks", DEFAULT_KS))
        return {r.strategy.name: summarize(r.results, exs, ks) for r in self.ok_rows()}

    def to_dict(self) -> dict[str, Any]:
        shared = self.shared_metrics() if self._uneven() else {}
        return {
            "dataset": self.dataset,
            "corpus": self.corpus,
            "n_questions": self.n_questions,
            "config": self.config,
            "strategies": [
                {
                    "name": r.strategy.name,
                    "mode": r.strategy.mode,
                    "kwargs": dict(r.strategy.kwargs),
                    "status": r.status,
                    "note": r.note,
                    "llm": r.llm,
                    "n": r.n,
                    "cached": r.cached,
                    "seconds": round(r.seconds, 3),
                    "metrics": {k: round(v, 6) for k, v in r.metrics.items()},
                    **(
                        {
                            "shared_subset_metrics": {
                                k: round(v, 6) for k, v in shared[r.strategy.name].items()
                            }
                        }
                        if r.strategy.name in shared
                        else {}
                    ),
                }
                for r in self.rows
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def _uneven(self) -> bool:
        return len({r.n for r in self.ok_rows()}) > 1

    def _columns(self) -> list[tuple[str, str]]:
        cols = list(SUMMARY_COLUMNS)
        if any("em" in r.metrics for r in self.ok_rows()):
            cols += [("em", "EM"), ("f1", "F1")]
        return cols

    def _table(
        self,
        metrics_by_name: dict[str, dict[str, float]],
        rows: list[StrategyResult],
        *,
        n_col: bool,
    ) -> list[str]:
        cols = self._columns()
        header = ["strategy", *[label for _, label in cols], "ms/query"] + (["n"] if n_col else [])
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r in rows:
            m = metrics_by_name[r.strategy.name]
            ms = r.metrics.get("ms_per_query", m.get("latency_ms", 0.0))
            cells = [r.label, *[f"{m[k]:.3f}" if k in m else "–" for k, _ in cols], f"{ms:.0f}"]
            if n_col:
                cells.append(str(r.n))
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    def to_markdown(self) -> str:
        """The results table (plus a shared-subset table when strategies ran on different
        counts)."""
        rows = self.ok_rows()
        cfg = self.config
        lines = [
            f"### `{self.dataset}`: {self.n_questions} questions, corpus `{self.corpus}`, "
            f"top_k={cfg.get('top_k')}",
            "",
        ]
        if rows:
            lines += self._table({r.strategy.name: r.metrics for r in rows}, rows, n_col=True)
        if rows and self._uneven():
            shared = self.shared_metrics()
            lines += [
                "",
                f"Same {len(self.shared_question_ids())} questions for every strategy "
                "(LLM strategies ran on a subset):",
                "",
                *self._table(shared, rows, n_col=False),
            ]
        others = [r for r in self.rows if r.status != "ok"]
        if others:
            lines += ["", "Not run:"]
            lines += [f"- `{r.strategy.name}` ({r.status}): {r.note}" for r in others]
        lines += [
            "",
            "R@k: a chunk of the relevant article in the top k (document level); chunk hit@k: a "
            "chunk holding the evidence sentence in the top k; answer@k: the gold answer "
            "appears in a top-k chunk; "
            f"ms/query: wall time per question with {cfg.get('concurrency', 1)} in flight.",
        ]
        return "\n".join(lines) + "\n"

    def plot(
        self,
        path: str | Path,
        *,
        metrics: Sequence[str] = (
            "recall@5",
            "mrr@10",
            "ndcg@10",
            "evidence@5",
            "answer_in_context@5",
        ),
    ) -> Path:
        """Grouped bar chart of ``metrics`` per strategy, saved as PNG."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        import numpy as np

        rows = self.ok_rows()
        if not rows:
            raise ConfigurationError("No strategy produced results: nothing to plot.")
        labels = dict(SUMMARY_COLUMNS)
        metrics = [m for m in metrics if any(m in r.metrics for r in rows)]
        x = np.arange(len(rows))
        width = 0.8 / max(len(metrics), 1)
        fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4.2))
        for i, metric in enumerate(metrics):
            values = [r.metrics.get(metric, 0.0) for r in rows]
            bars = ax.bar(
                x + (i - (len(metrics) - 1) / 2) * width,
                values,
                width,
                label=labels.get(metric, metric),
            )
            if len(rows) * len(metrics) <= 40:
                ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
        uneven = self._uneven()
        ticks = [
            r.strategy.name + ("*" if r.llm else "") + (f"\nn={r.n}" if uneven else "")
            for r in rows
        ]
        ax.set_xticks(
            x, ticks, rotation=20 if not uneven else 0, ha="right" if not uneven else "center"
        )
        ax.set_ylim(0, 1.08)
        ax.set_ylabel("score")
        title = f"{self.dataset}: {self.n_questions} questions, top_k={self.config.get('top_k')}"
        if any(r.llm for r in rows):
            title += "  (* uses LLM: " + ", ".join(sorted({r.llm for r in rows if r.llm})) + ")"
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, ncol=len(metrics), loc="upper center", bbox_to_anchor=(0.5, -0.22))
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path

    def write(
        self, out_dir: str | Path, *, stem: str | None = None, chart: bool = True
    ) -> dict[str, Path]:
        """Write ``<stem>.md``, ``<stem>.json`` and (if any row ran) ``<stem>.png`` to
        ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = stem or self.dataset
        paths = {"markdown": out / f"{stem}.md", "json": out / f"{stem}.json"}
        paths["markdown"].write_text(self.to_markdown(), encoding="utf-8")
        paths["json"].write_text(self.to_json() + "\n", encoding="utf-8")
        if chart and self.ok_rows():
            paths["chart"] = self.plot(out / f"{stem}.png")
        return paths
