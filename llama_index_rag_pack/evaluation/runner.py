"""Running one planned strategy over its questions, on the sync or the async retriever path.

Questions with a current cached result are not run again; every other one is retrieved (and, when
answers are scored, answered), scored and written back to the strategy's
:class:`~llama_index_rag_pack.evaluation.cache.ResultCache`. A question that fails is scored as a
miss and counted in the report, it does not stop the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.schema import NodeWithScore
from tqdm.auto import tqdm

from llama_index_rag_pack.evaluation.answers import answer_prompt, clean_prediction
from llama_index_rag_pack.evaluation.cache import ResultCache, example_key
from llama_index_rag_pack.evaluation.labelled import LabelledExample
from llama_index_rag_pack.evaluation.planning import StrategyPlan
from llama_index_rag_pack.evaluation.scoring import score_retrieval, summarize

logger = logging.getLogger(__name__)

__all__ = ["StrategyRunner"]


class StrategyRunner:
    """Runs :class:`StrategyPlan` objects and fills in their report rows.

    Args:
        top_k: Chunks scored per question.
        ks: Cut-offs of the metrics.
        concurrency: Questions in flight at once on the async path.
        answer_prompt: Prompt of the answering LLM (``{context_str}``, ``{query_str}``).
        answer_top_k: Chunks the answering LLM reads.
        show_progress: tqdm progress bars.
    """

    def __init__(
        self,
        *,
        top_k: int,
        ks: tuple[int, ...],
        concurrency: int,
        answer_prompt: BasePromptTemplate,
        answer_top_k: int,
        show_progress: bool,
    ) -> None:
        self.top_k = top_k
        self.ks = ks
        self.concurrency = concurrency
        self.answer_prompt = answer_prompt
        self.answer_top_k = answer_top_k
        self.show_progress = show_progress

    def run(self, plan: StrategyPlan) -> None:
        """Evaluate ``plan`` one question at a time on the sync retriever path."""
        start = time.perf_counter()
        results = plan.cache.load()
        todo = ResultCache.stale(plan.examples, results)
        loop_start = time.perf_counter()
        with self._progress(plan, len(todo)) as bar:
            for ex in todo:
                results[ex.id] = self._question(plan, ex)
                bar.update(1)
        self._finish(plan, results, todo, start, loop_start)

    async def arun(self, plan: StrategyPlan) -> None:
        """Evaluate ``plan`` with up to ``concurrency`` questions in flight (async path)."""
        start = time.perf_counter()
        results = plan.cache.load()
        todo = ResultCache.stale(plan.examples, results)
        loop_start = time.perf_counter()
        semaphore = asyncio.Semaphore(self.concurrency)
        with self._progress(plan, len(todo)) as bar:

            async def one(ex: LabelledExample) -> None:
                async with semaphore:
                    results[ex.id] = await self._aquestion(plan, ex)
                    bar.update(1)

            await asyncio.gather(*(one(ex) for ex in todo))
        self._finish(plan, results, todo, start, loop_start)

    # ------------------------------------------------------------------ one question
    def _question(self, plan: StrategyPlan, ex: LabelledExample) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            nodes = plan.retriever.retrieve(ex.question)
            entry = self._scored(ex, nodes)
            if plan.answer_llm is not None:
                reply = plan.answer_llm.complete(self._answer_prompt(ex, nodes))
                entry["prediction"] = clean_prediction(reply.text)
        except Exception as e:  # noqa: BLE001 - scored as a miss, reported in the table
            entry = _failed(plan, ex, e)
        return _stamped(entry, ex, t0)

    async def _aquestion(self, plan: StrategyPlan, ex: LabelledExample) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            nodes = await plan.retriever.aretrieve(ex.question)
            entry = self._scored(ex, nodes)
            if plan.answer_llm is not None:
                reply = await plan.answer_llm.acomplete(self._answer_prompt(ex, nodes))
                entry["prediction"] = clean_prediction(reply.text)
        except Exception as e:  # noqa: BLE001 - scored as a miss, reported in the table
            entry = _failed(plan, ex, e)
        return _stamped(entry, ex, t0)

    def _answer_prompt(self, ex: LabelledExample, nodes: list[NodeWithScore]) -> str:
        return answer_prompt(self.answer_prompt, ex.question, nodes, self.answer_top_k)

    def _scored(self, ex: LabelledExample, nodes: list[NodeWithScore]) -> dict[str, Any]:
        return {"retrieved": score_retrieval(ex, nodes[: self.top_k])}

    # ------------------------------------------------------------------ bookkeeping
    def _progress(self, plan: StrategyPlan, total: int) -> tqdm:
        return tqdm(
            total=total,
            desc=f"{plan.strategy.name:>18}",
            unit="q",
            leave=True,
            disable=not self.show_progress or total == 0,
        )

    def _finish(
        self,
        plan: StrategyPlan,
        results: dict[str, dict[str, Any]],
        todo: list[LabelledExample],
        start: float,
        loop_start: float,
    ) -> None:
        """Save what was computed, then fill in the plan's report row."""
        if todo:
            plan.cache.save(
                plan.strategy.name, results, len(todo), time.perf_counter() - loop_start
            )
        row = plan.row
        ids = {ex.id for ex in plan.examples}
        row.results = {k: v for k, v in results.items() if k in ids}
        row.question_ids = [ex.id for ex in plan.examples]
        row.n = len(plan.examples)
        row.cached = len(plan.examples) - len(todo)
        row.seconds = time.perf_counter() - start
        row.metrics = summarize(row.results, plan.examples, self.ks)
        timing = plan.cache.timing
        if timing.get("questions"):
            # wall time per question at the concurrency used (a serialised local LLM makes
            # per-question latency under concurrency meaningless; throughput is what one waits for)
            row.metrics["ms_per_query"] = 1000.0 * timing["seconds"] / timing["questions"]
        if row.metrics.get("errors"):
            row.note = (
                row.note + "; " if row.note else ""
            ) + f"{int(row.metrics['errors'])} questions failed"


def _failed(plan: StrategyPlan, ex: LabelledExample, error: Exception) -> dict[str, Any]:
    logger.warning("%s failed on %s: %s", plan.strategy.name, ex.id, error)
    return {"retrieved": [], "error": f"{type(error).__name__}: {error}"}


def _stamped(entry: dict[str, Any], ex: LabelledExample, t0: float) -> dict[str, Any]:
    entry["latency_ms"] = (time.perf_counter() - t0) * 1000
    entry["key"] = example_key(ex)
    return entry
