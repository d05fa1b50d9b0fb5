"""RAPTOR summaries: tenacity retries give up after ``max_retries`` and report the failure (sync
and async), recover from transient failures, treat empty replies as failures, and back off
exponentially with jitter."""

from __future__ import annotations

import logging
import random
from typing import Any

import pytest
from llama_index.core.schema import TextNode
from tenacity import RetryCallState

from llama_index_rag_pack.raptor.raptor_summaries import (
    DEFAULT_SUMMARY_PROMPT,
    Summariser,
    SummaryJob,
    jittered_backoff,
)
from llama_index_rag_pack.testing import ScriptedLLM

MAX_RETRIES = 2


def jobs(n: int = 1) -> list[SummaryJob]:
    return [
        SummaryJob(
            node_id=f"raptor-1-{i}",
            level=1,
            children=[TextNode(text=f"Aardvarks dig burrow number {i}.")],
            source_cluster=i,
        )
        for i in range(n)
    ]


def summariser(llm: ScriptedLLM, max_retries: int = MAX_RETRIES) -> Summariser:
    return Summariser(
        llm,
        DEFAULT_SUMMARY_PROMPT,
        max_concurrency=2,
        max_retries=max_retries,
        retry_backoff=0.0,
        rng=random.Random(0),
    )


async def run(summ: Summariser, todo: list[SummaryJob], use_async: bool) -> Any:
    return await summ.asummarise(todo) if use_async else summ.summarise(todo)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_gives_up_after_max_retries_and_reports_the_failure(
    use_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    llm = ScriptedLLM(
        replies=lambda prompt: TimeoutError("Request timed out."), forbid_sync=use_async
    )
    with caplog.at_level(logging.WARNING):
        batch = await run(summariser(llm), jobs(2), use_async)
    assert set(batch.outcomes) == {"raptor-1-0", "raptor-1-1"}
    for error in batch.outcomes.values():
        assert isinstance(error, TimeoutError) and str(error) == "Request timed out."
    attempts = MAX_RETRIES + 1
    assert llm.call_count == batch.llm_calls == 2 * attempts, "no attempt beyond max_retries"
    assert batch.max_attempts == attempts
    failures = [r.getMessage() for r in caplog.records if "Summary raptor-1-0 attempt" in r.message]
    assert failures == [
        f"Summary raptor-1-0 attempt {i} failed: Request timed out." for i in range(1, 4)
    ]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_transient_failures_and_empty_replies_are_retried(use_async: bool) -> None:
    replies = [ConnectionError("reset by peer"), '  ""  ', 'Summary: "Aardvarks dig burrows."']
    llm = ScriptedLLM(replies=replies, forbid_sync=use_async)
    batch = await run(summariser(llm), jobs(1), use_async)
    assert batch.outcomes == {"raptor-1-0": "Aardvarks dig burrows."}
    assert llm.call_count == batch.llm_calls == 3


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_an_empty_last_reply_is_a_failure(use_async: bool) -> None:
    llm = ScriptedLLM(replies=["   "], forbid_sync=use_async)
    batch = await run(summariser(llm, max_retries=0), jobs(1), use_async)
    (error,) = batch.outcomes.values()
    assert isinstance(error, ValueError) and "empty summary" in str(error)
    assert llm.call_count == 1


def test_no_retries_for_a_good_reply_and_nothing_for_no_jobs() -> None:
    llm = ScriptedLLM(replies=["Here is a summary:\nAardvarks dig."])
    summ = summariser(llm)
    assert summ.summarise([]).outcomes == {}
    batch = summ.summarise(jobs(1))
    assert batch.outcomes == {"raptor-1-0": "Aardvarks dig."} and batch.llm_calls == 1


class FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(("draw", "factor"), [(0.0, 0.5), (0.5, 1.0), (0.999, 1.499)])
def test_backoff_doubles_per_attempt_with_jitter(draw: float, factor: float) -> None:
    wait = jittered_backoff(0.4, FixedRandom(draw))
    state = RetryCallState(None, None, (), {})
    waits = []
    for attempt in (1, 2, 3):
        state.attempt_number = attempt
        waits.append(wait(state))
    assert waits == pytest.approx([0.4 * factor, 0.8 * factor, 1.6 * factor])
