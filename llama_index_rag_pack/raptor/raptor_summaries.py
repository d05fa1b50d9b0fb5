"""RAPTOR summaries: one LLM summary per cluster, written concurrently, each retried with backoff.

The sync path runs the summaries of a level in a thread pool, the async one with
``asyncio.gather`` under a semaphore (``await llm.apredict``, never the sync method). Each summary
is retried by tenacity: up to ``max_retries`` more attempts after the first, waiting
``retry_backoff * 2**attempt`` seconds times a jitter factor in ``[0.5, 1.5)`` in between. An
empty reply counts as a failure. A summary that still fails is reported in the
:class:`SummaryBatch` (never raised here, never stored by the caller). With a
:class:`~llama_index_rag_pack.raptor.build_budget.SpendGate`, every request (retries too) is
admitted by it first; one it refuses is not sent, and its summary's outcome is a
``BudgetReachedError`` (not retried).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import MetadataMode, TextNode
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_not_exception_type,
    stop_after_attempt,
)

from llama_index_rag_pack.core.prose_replies import unwrap_prose
from llama_index_rag_pack.raptor.build_budget import BudgetReachedError, SpendGate

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

DEFAULT_SUMMARY_PROMPT = PromptTemplate(
    "Write a summary of the following text, including as many key details as possible "
    "(names, numbers, dates, places).\n\n{context_str}\n\nSummary:"
)


def clean_summary(text: str) -> str:
    """Strip chatty preambles ("Here is a summary:"), ``Summary:`` labels and wrapping quotes.

    Example:
        >>> clean_summary('Sure! Here is a summary:\\n\\n"Aardvarks eat ants."')
        'Aardvarks eat ants.'
    """
    return unwrap_prose(text, label="summary")


@dataclass
class SummaryJob:
    """One summary to write: the node it becomes and the children it summarises.

    Attributes:
        node_id: Id of the summary node.
        level: Level of the summary node.
        children: The nodes it summarises (one cluster of the level below).
        source_cluster: Id of that cluster.
    """

    node_id: str
    level: int
    children: list[TextNode]
    source_cluster: int

    def context(self) -> str:
        """The text the LLM summarises: the children's texts, one paragraph each."""
        return "\n\n".join(
            c.get_content(metadata_mode=MetadataMode.LLM).strip() for c in self.children
        )


@dataclass
class SummaryBatch:
    """What summarising a list of jobs gave.

    Attributes:
        outcomes: Per job id, the cleaned summary or the error of its last attempt.
        llm_calls: Requests sent to the LLM (retries included).
        max_attempts: Attempts each summary was allowed.
    """

    outcomes: dict[str, str | BaseException] = field(default_factory=dict)
    llm_calls: int = 0
    max_attempts: int = 1


SummariseFn = Callable[[list[SummaryJob]], SummaryBatch]


def jittered_backoff(retry_backoff: float, rng: random.Random) -> Callable[[RetryCallState], float]:
    """A tenacity wait: ``retry_backoff * 2**attempt`` seconds times a factor in ``[0.5, 1.5)``.

    ``attempt`` counts from 0 for the wait after the first failure.

    Example:
        >>> import random
        >>> from tenacity import RetryCallState
        >>> wait = jittered_backoff(1.0, random.Random(0))
        >>> state = RetryCallState(None, None, (), {})
        >>> state.attempt_number = 3
        >>> 2.0 <= wait(state) < 6.0
        True
    """

    def wait(state: RetryCallState) -> float:
        return retry_backoff * (2 ** (state.attempt_number - 1)) * (0.5 + rng.random())

    return wait


def _checked(reply: str) -> str:
    text = clean_summary(reply)
    if not text:
        raise ValueError("the LLM returned an empty summary")
    return text


class Summariser:
    """Writes the summaries of a list of jobs with one LLM.

    Args:
        llm: Writes the summaries.
        prompt: Prompt with ``{context_str}``.
        max_concurrency: Summaries in flight at once.
        max_retries: Retries per summary after the first attempt.
        retry_backoff: First backoff delay in seconds.
        rng: Source of the backoff jitter.
        show_progress: A tqdm bar per batch: clusters summarised of the level's total, LLM calls
            (retries included), elapsed time and ETA.
        gate: Admits each request while the build's budget lasts (``None``: no budget).

    Example:
        >>> import random
        >>> from llama_index.core.llms import MockLLM
        >>> summariser = Summariser(
        ...     MockLLM(max_tokens=3), DEFAULT_SUMMARY_PROMPT, max_concurrency=2,
        ...     max_retries=0, retry_backoff=0.0, rng=random.Random(0),
        ... )
        >>> batch = summariser.summarise([SummaryJob("s1", 1, [TextNode(text="Ants.")], 0)])
        >>> batch.llm_calls, isinstance(batch.outcomes["s1"], str)
        (1, True)
    """

    def __init__(
        self,
        llm: LLM,
        prompt: BasePromptTemplate,
        *,
        max_concurrency: int,
        max_retries: int,
        retry_backoff: float,
        rng: random.Random,
        show_progress: bool = False,
        gate: SpendGate | None = None,
    ) -> None:
        self.llm = llm
        self.gate = gate
        self.prompt = prompt
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.show_progress = show_progress
        self._wait = jittered_backoff(retry_backoff, rng)
        self._calls = 0
        self._calls_lock = threading.Lock()

    def _retry_options(self, job: SummaryJob) -> dict[str, Any]:
        def log_failure(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, BudgetReachedError):
                return
            logger.warning(
                "Summary %s attempt %d failed: %s", job.node_id, state.attempt_number, error
            )

        return dict(
            stop=stop_after_attempt(self.max_retries + 1),
            retry=retry_if_not_exception_type(BudgetReachedError),
            wait=self._wait,
            after=log_failure,
            reraise=True,
        )

    def _count_call(self) -> None:
        """One request is about to be sent (after the budget admitted it)."""
        if self.gate is not None and not self.gate.admit():
            raise BudgetReachedError("the build's LLM budget is spent")
        with self._calls_lock:
            self._calls += 1

    def _batch(self, outcomes: dict[str, str | BaseException], calls_before: int) -> SummaryBatch:
        return SummaryBatch(
            outcomes=outcomes,
            llm_calls=self._calls - calls_before,
            max_attempts=self.max_retries + 1,
        )

    def _progress(self, jobs: list[SummaryJob]) -> Any:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(jobs),
            desc=f"RAPTOR level {jobs[0].level if jobs else 0} summaries",
            unit="cluster",
            disable=not self.show_progress or not jobs,
        )
        calls_before = self._calls

        def update() -> None:  # one more cluster summarised (or given up): its LLM calls too
            bar.set_postfix_str(f"LLM calls {self._calls - calls_before}", refresh=False)
            bar.update(1)

        bar.advance = update
        return bar

    # ------------------------------------------------------------------ sync
    def _write(self, job: SummaryJob) -> str:
        self._count_call()
        return _checked(self.llm.predict(self.prompt, context_str=job.context()))

    def _write_with_retries(self, job: SummaryJob) -> str:
        return Retrying(**self._retry_options(job))(self._write, job)

    def summarise(self, jobs: list[SummaryJob]) -> SummaryBatch:
        """Summarise ``jobs`` in a thread pool of ``max_concurrency`` threads."""
        calls_before = self._calls
        outcomes: dict[str, str | BaseException] = {}
        if not jobs:
            return self._batch(outcomes, calls_before)
        bar = self._progress(jobs)
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(jobs))) as pool:
            # a copy of this thread's context per job keeps the LLM spans under the build's span
            futures = {
                pool.submit(contextvars.copy_context().run, self._write_with_retries, job): job
                for job in jobs
            }
            for future in as_completed(futures):
                job = futures[future]
                try:
                    outcomes[job.node_id] = future.result()
                except Exception as e:  # any provider error, after its retries: report it
                    outcomes[job.node_id] = e
                bar.advance()
        bar.close()
        return self._batch(outcomes, calls_before)

    # ------------------------------------------------------------------ async
    async def _awrite(self, job: SummaryJob, semaphore: asyncio.Semaphore) -> str:
        async with semaphore:  # held for the call only, not while backing off
            self._count_call()
            reply = await self.llm.apredict(self.prompt, context_str=job.context())
        return _checked(reply)

    async def _awrite_with_retries(
        self, job: SummaryJob, semaphore: asyncio.Semaphore, bar: Any
    ) -> str:
        try:
            return await AsyncRetrying(**self._retry_options(job))(self._awrite, job, semaphore)
        finally:
            bar.advance()

    async def asummarise(self, jobs: list[SummaryJob]) -> SummaryBatch:
        """Summarise ``jobs`` on the running event loop, ``max_concurrency`` at a time."""
        calls_before = self._calls
        semaphore = asyncio.Semaphore(self.max_concurrency)
        bar = self._progress(jobs)
        results = await asyncio.gather(
            *(self._awrite_with_retries(job, semaphore, bar) for job in jobs),
            return_exceptions=True,
        )
        bar.close()
        outcomes = {job.node_id: out for job, out in zip(jobs, results, strict=True)}
        return self._batch(outcomes, calls_before)


__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "SummariseFn",
    "Summariser",
    "SummaryBatch",
    "SummaryJob",
    "clean_summary",
    "jittered_backoff",
]
