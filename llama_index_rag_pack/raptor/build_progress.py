"""A RAPTOR build's progress, and its summaries written in groups that are stored as they come.

A level's summaries go to the LLM in groups of ``store_every`` clusters (``max_concurrency`` of
them in flight at once). Each group, once answered, is embedded and stored in a writer thread
while the next group is with the LLM, so a build killed at any moment loses at most the groups
in flight (at most two: one with the LLM, one being stored), and the next build (or
``RaptorTree.resume()``, ``rag-pack raptor build``) writes only the summaries not stored yet:
summary ids hash their level and children, and clustering is seeded. The next level cannot be
clustered before this one's summaries exist (it clusters their embeddings), so the overlap is
between the LLM calls and the embedding and storing.

Progress goes to an optional callback as :class:`BuildProgress` records: one when a level starts
and ends clustering, and one per group summarised, with the rate and the time left for the level.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from llama_index_rag_pack.core.errors import RagPackError

__all__ = [
    "DEFAULT_STORE_EVERY",
    "BuildProgress",
    "ProgressFn",
    "RaptorBuildError",
    "groups_of_writes",
    "summarise_in_groups",
]


class RaptorBuildError(RagPackError, RuntimeError):
    """Some summaries failed after all retries; what succeeded is stored, build again to resume."""


#: Clusters summarised, then stored, per group.
DEFAULT_STORE_EVERY = 256


@dataclass(frozen=True)
class BuildProgress:
    """Where a RAPTOR build is.

    Attributes:
        level: The level being made (clustering level ``L`` makes level ``L + 1``).
        stage: ``"clustering"`` (``done`` 0 of ``total`` nodes; then ``done == total`` with
            ``total`` clusters found) or ``"summarising"`` (``done`` of ``total`` summaries
            stored for the level).
        done: Units finished in this stage.
        total: Units of this stage.
        llm_calls: LLM calls of the whole operation so far.
        elapsed_s: Seconds since the operation started.
        eta_s: Seconds left for this stage at the rate so far (``None`` before a rate is known).
        rate: Units per second in this stage so far (``None`` before one is known).
    """

    level: int
    stage: str
    done: int
    total: int
    llm_calls: int
    elapsed_s: float
    eta_s: float | None = None
    rate: float | None = None

    def line(self) -> str:
        """One line for a terminal, e.g. ``level 1: 512/10,240 summaries, 11.8/s, ETA 13m 44s``."""
        if self.stage == "clustering":
            if self.done < self.total:
                return f"level {self.level}: clustering {self.total:,} nodes"
            return f"level {self.level}: {self.total:,} clusters ({self.elapsed_s:.0f} s in)"
        rate = "" if self.rate is None else f", {self.rate:.1f}/s"
        eta = "" if self.eta_s is None else f", ETA {_duration(self.eta_s)}"
        return f"level {self.level}: {self.done:,}/{self.total:,} summaries{rate}{eta}"


ProgressFn = Callable[[BuildProgress], None]


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds}s"


def report(builder: Any, level: int, stage: str, done: int, total: int, **kw: Any) -> None:
    """Send a :class:`BuildProgress` to the builder's callback, if it has one."""
    if builder.progress is None:
        return
    builder.progress(
        BuildProgress(
            level=level,
            stage=stage,
            done=done,
            total=total,
            llm_calls=builder.stats.llm_calls,
            elapsed_s=time.perf_counter() - builder.started_at,
            **kw,
        )
    )


def groups_of_writes(jobs: int, store_every: int) -> int:
    """How many groups :func:`summarise_in_groups` makes of ``jobs`` (the pieces of the
    writes to spread over them)."""
    return max(1, -(-jobs // max(1, store_every)))


def summarise_in_groups(
    builder: Any, jobs: list[Any], level: int, alongside: Sequence[Callable[[], Any]] = ()
) -> None:
    """Summarise ``jobs`` (:class:`~llama_index_rag_pack.raptor.raptor_summaries.SummaryJob`) in
    groups of ``builder.store_every`` (a
    :class:`~llama_index_rag_pack.raptor.raptor_levels.LevelBuilder`), storing each group in a
    writer thread while the next is summarised (see the module). ``alongside``: other writes
    the writer thread does, one before each group's (any left over before the last group's),
    so that none of them holds up a group (:func:`groups_of_writes`). Once the builder's budget
    refused a request, the group in hand is stored and no further group is started.

    Raises:
        RaptorBuildError: some summaries failed after their retries (every other group was
            still summarised and stored).
    """
    size = max(1, builder.store_every)
    started = time.perf_counter()
    done = 0
    errors: list[RaptorBuildError] = []
    pending: Future[Any] | None = None

    def settle() -> None:
        nonlocal pending, done
        if pending is None:
            return
        group_size = pending_size
        try:
            pending.result()
        except RaptorBuildError as e:
            errors.append(e)
        pending = None
        done += group_size
        spent = time.perf_counter() - started
        eta = (len(jobs) - done) * spent / done if done else None
        rate = done / spent if spent > 0 else None
        report(builder, level, "summarising", done, len(jobs), eta_s=eta, rate=rate)

    def store(group: list[Any], batch: Any, writes: Sequence[Callable[[], Any]]) -> None:
        for write in writes:
            write()
        builder.write_summaries(group, batch, replace=False)

    starts = range(0, len(jobs), size)
    extra = list(alongside)
    pending_size = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="raptor-store") as writer:
        try:
            for k, start in enumerate(starts):
                group = jobs[start : start + size]
                writes = extra[k : k + 1] if k + 1 < len(starts) else extra[k:]
                batch = builder.summarise(group)
                settle()  # the previous group is stored before this one is handed over
                pending = writer.submit(store, group, batch, writes)
                pending_size = len(group)
                if builder.gate.reached:  # the budget is spent: store this group and stop
                    break
        finally:
            settle()
    if errors:
        if len(errors) == 1:
            raise errors[0]
        first = errors[0]
        raise RaptorBuildError(
            f"Summaries failed in {len(errors)} groups of level {level} (first: {first}). "
            "Every summary that succeeded is stored: fix the LLM and build again to resume."
        ) from first
