"""SQLite specifics of :class:`~llama_index_rag_pack.sql.sql_database.SafeSQLDatabase`:
the read-only file URL, and running a checked query under an authorizer (visible columns of
allowed tables, listed functions, nothing else), length limits and a deadline.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.sql.sql_limits import SQLLimits

__all__ = ["ResultTooLargeError", "fetch_bounded", "sqlite_execute", "sqlite_path", "sqlite_url"]

# Functions SQLite may run for a checked query (the names sqlglot writes for the checker's
# allowed functions and operators); everything else is denied by the authorizer.
_FUNCTIONS = frozenset(
    (
        "count sum avg min max total group_concat abs round ceil ceiling floor sqrt pow power "
        "ln log log10 exp sign coalesce ifnull nullif iif length lower upper trim ltrim rtrim "
        "substr substring instr replace concat concat_ws date time datetime julianday strftime "
        "unixepoch row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value "
        "last_value nth_value like glob"
    ).split()
)
_SQLITE_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}


class ResultTooLargeError(Exception):
    """The rows fetched so far hold more than the result budget."""


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, bytearray, memoryview)) else 8


def fetch_bounded(cursor: Any, max_rows: int, max_bytes: int) -> list[tuple]:
    """Up to ``max_rows`` rows, one at a time, stopping once they hold over ``max_bytes``.

    Raises:
        ResultTooLargeError: The rows hold more than ``max_bytes`` (text counted by length).
    """
    rows: list[tuple] = []
    total = 0
    while len(rows) < max_rows:
        row = cursor.fetchone()
        if row is None:
            break
        total += sum(_size(v) for v in row)
        if total > max_bytes:
            raise ResultTooLargeError(f"result too large: over {max_bytes} bytes")
        rows.append(tuple(row))
    return rows


def sqlite_path(database: str) -> str | None:
    """The file of a SQLite database given as a path or a ``sqlite:///`` URL (None: a server)."""
    if "://" not in database:
        return database
    try:
        url = sa.engine.make_url(database)
    except sa.exc.ArgumentError as error:
        raise ConfigurationError(f"{database!r} is not a database URL or file ({error})") from None
    if url.get_backend_name() != "sqlite":
        return None
    if not url.database or url.database == ":memory:":
        raise ConfigurationError("an in-memory SQLite database has no tables; pass a .db file")
    return url.database


def sqlite_url(path: str | Path) -> str:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise ConfigurationError(f"SQLite file {str(path)!r} does not exist; pass an existing .db")
    return f"sqlite:///file:{urllib.parse.quote(str(resolved))}?mode=ro&uri=true"


def sqlite_execute(
    raw: sqlite3.Connection,
    sql: str,
    allowed_columns: Mapping[str, Sequence[str]],
    *,
    reads: list[tuple[str, str]],
    deadline: float,
    max_rows: int,
    max_result_bytes: int,
    limits: SQLLimits,
) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` on ``raw`` under the authorizer, the length limits and the deadline.

    Every column SQLite reads is appended to ``reads``; the connection's limits, authorizer and
    progress handler are restored afterwards.
    """
    allowed = {t.lower(): {c.lower() for c in cs} | {""} for t, cs in allowed_columns.items()}

    def authorize(action: int, arg1: Any, arg2: Any, _db: Any, _trigger: Any) -> int:
        if action == sqlite3.SQLITE_READ:
            if (arg2 or "").lower() not in allowed.get((arg1 or "").lower(), ()):
                return sqlite3.SQLITE_DENY
            reads.append((arg1, arg2))
        elif action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() not in _FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK if action in _SQLITE_ACTIONS else sqlite3.SQLITE_DENY

    limits = {
        sqlite3.SQLITE_LIMIT_LENGTH: max_result_bytes,
        sqlite3.SQLITE_LIMIT_SQL_LENGTH: max(limits.max_chars * 4, 100_000),
        sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 2 * limits.max_depth,
        sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 64,
        sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1000,
        sqlite3.SQLITE_LIMIT_ATTACHED: 0,
        sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 32,
    }
    previous = {key: raw.setlimit(key, value) for key, value in limits.items()}
    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    raw.set_authorizer(authorize)
    try:
        cursor = raw.cursor()
        try:
            cursor.execute(sql)
            names = [d[0] for d in cursor.description or ()]
            return names, fetch_bounded(cursor, max_rows, max_result_bytes)
        finally:
            cursor.close()
    finally:
        raw.set_authorizer(None)
        raw.set_progress_handler(None, 1000)
        for key, value in previous.items():
            raw.setlimit(key, value)
