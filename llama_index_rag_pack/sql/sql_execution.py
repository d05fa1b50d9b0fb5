"""Running one checked query: its result, its one-line error, and a hard deadline.

A query runs in a worker thread on a connection of its own; :func:`run_before` waits for it
until the deadline and, past it, cancels the connection (SQLite ``interrupt``, PostgreSQL
``cancel``) and leaves the thread behind, so no query holds its caller longer than its time-out
even inside one function call that no database time-out interrupts.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llama_index_rag_pack.core.errors import RagPackError

__all__ = ["QueryTimedOut", "SQLExecutionError", "SQLResult", "first_line", "run_before"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class SQLExecutionError(RagPackError, RuntimeError):
    """A checked query failed in the database (time-out, type error ...): one line, with the fix."""


@dataclass
class SQLResult:
    """Rows a checked query returned: ``columns``, ``rows`` (at most the limit) and the SQL."""

    sql: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    tables: tuple[str, ...] = ()
    reads: list[tuple[str, str]] = field(default_factory=list)


def first_line(error: BaseException) -> str:
    orig = getattr(error, "orig", None) or error
    text = str(orig).strip()
    return (text.splitlines()[0] if text else type(orig).__name__)[:300]


def _abort(raw: Any) -> None:
    """Cancel what a connection is running, from another thread (best effort)."""
    if raw is None:
        return
    stop = getattr(raw, "interrupt", None) or getattr(raw, "cancel_safe", None)
    stop = stop or getattr(raw, "cancel", None)
    try:
        if stop is not None:
            stop()
    except Exception:  # noqa: BLE001 - the connection may be gone already
        logger.debug("cancelling a timed-out query failed", exc_info=True)


class QueryTimedOut(Exception):
    """The worker did not finish before the deadline (it was cancelled and left behind)."""


def run_before(deadline: float, work: Callable[[dict[str, Any]], T]) -> T:
    """``work(handle)`` in a daemon thread, waited for until ``deadline`` (``time.monotonic``).

    ``work`` puts its DB-API connection in ``handle["raw"]`` as soon as it has one; past the
    deadline that connection is cancelled and :class:`QueryTimedOut` is raised. What ``work``
    returns is returned; what it raises is raised here.
    """
    handle: dict[str, Any] = {}
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = work(handle)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error

    # in a copy of the caller's context: its instrumentation spans and usage meter reach here
    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(target,), daemon=True, name="rag-pack-sql")
    worker.start()
    worker.join(max(deadline - time.monotonic(), 0.0))
    if worker.is_alive():
        _abort(handle.get("raw"))
        raise QueryTimedOut
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
