"""A read-only, time-limited view of a SQL database for text-to-SQL (:class:`SafeSQLDatabase`).

SQLite (the default, a file) is opened with ``file:...?mode=ro`` so nothing can be written even by
a query the checker let through; a progress handler cuts any query past the time-out and an
authorizer refuses any action but reading allowed columns of allowed tables (no writes, no
``ATTACH``/``PRAGMA``, no recursive CTE): a second line of defence behind
:func:`~llama_index_rag_pack.core.sql_safety.check_sql`). Any other SQLAlchemy URL works
(PostgreSQL is the scale-out path): each query runs in a ``READ ONLY`` transaction with
``SET LOCAL statement_timeout``. Use a database user that can only read the allowed tables too.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.sql_safety import CheckedSQL, check_sql

__all__ = ["SQLExecutionError", "SQLResult", "SafeSQLDatabase"]

logger = logging.getLogger(__name__)

_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql"}
_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}


class SQLExecutionError(RuntimeError):
    """A checked query failed in the database (time-out, type error ...): one line, with the fix."""


@dataclass
class SQLResult:
    """Rows a checked query returned: ``columns``, ``rows`` (at most the limit) and the SQL."""

    sql: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    tables: tuple[str, ...] = ()
    reads: list[tuple[str, str]] = field(default_factory=list)


def _sqlite_path(database: str) -> str | None:
    """The file of a SQLite database given as a path or a ``sqlite:///`` URL (None: a server)."""
    if "://" not in database:
        return database
    url = sa.engine.make_url(database)
    if url.get_backend_name() != "sqlite":
        return None
    if not url.database or url.database == ":memory:":
        raise ConfigurationError("an in-memory SQLite database has no tables; pass a .db file")
    return url.database


def _sqlite_url(path: str | Path) -> str:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise ConfigurationError(f"SQLite file {str(path)!r} does not exist; pass an existing .db")
    return f"sqlite:///file:{urllib.parse.quote(str(resolved))}?mode=ro&uri=true"


class SafeSQLDatabase:
    """The allowed tables of a database, opened read-only, queried with a row limit and time-out.

    Args:
        database: A SQLite file path or ``sqlite:///`` URL (both opened read-only), or any
            SQLAlchemy URL (``postgresql+psycopg://reader@host/db``).
        tables: The only tables the LLM may see and read (required, at least one).
        columns: Optional ``{table: [columns]}`` to hide columns (default: every column).
        max_rows: Row limit added to every query.
        timeout_s: Query time-out in seconds.
        sample_rows: Example rows per table shown to the LLM.

    Example:
        >>> import sqlite3, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "shop.db")
        >>> with sqlite3.connect(path) as c:
        ...     _ = c.execute("CREATE TABLE items (name TEXT, price REAL)")
        ...     _ = c.execute("INSERT INTO items VALUES ('pen', 1.5)")
        >>> db = SafeSQLDatabase(path, tables=["items"])
        >>> db.run("SELECT name FROM items").rows
        [('pen',)]
    """

    def __init__(
        self,
        database: str | Path,
        *,
        tables: Sequence[str],
        columns: dict[str, Sequence[str]] | None = None,
        max_rows: int = 50,
        timeout_s: float = 5.0,
        sample_rows: int = 3,
    ) -> None:
        if not tables:
            raise ConfigurationError("tables is empty; name the tables the LLM may read")
        if max_rows <= 0 or timeout_s <= 0 or sample_rows < 0:
            raise ConfigurationError(
                f"need max_rows > 0, timeout_s > 0, sample_rows >= 0; got {max_rows}, "
                f"{timeout_s}, {sample_rows}"
            )
        path = _sqlite_path(str(database))
        self._sqlite = path is not None
        self.engine = sa.create_engine(_sqlite_url(path) if path is not None else str(database))
        self.dialect = _DIALECTS.get(self.engine.dialect.name, self.engine.dialect.name)
        self.max_rows, self.timeout_s, self.sample_rows = max_rows, timeout_s, sample_rows
        self.allowed = self._resolve_columns(list(tables), columns or {})
        logger.info("SQL database %s: tables %s", self.engine.url, sorted(self.allowed))

    def _resolve_columns(
        self, tables: list[str], hidden: dict[str, Sequence[str]]
    ) -> dict[str, list[str]]:
        inspector = sa.inspect(self.engine)
        existing = set(inspector.get_table_names())
        allowed: dict[str, list[str]] = {}
        for table in tables:
            if table not in existing:
                raise ConfigurationError(
                    f"table {table!r} is not in the database; choose from {sorted(existing)}"
                )
            names = [c["name"] for c in inspector.get_columns(table)]
            wanted = list(hidden.get(table, names))
            unknown = sorted(set(wanted) - set(names))
            if unknown:
                raise ConfigurationError(f"columns {unknown} are not in table {table!r}: {names}")
            allowed[table] = [n for n in names if n in wanted]
        return allowed

    def check(self, sql: str) -> CheckedSQL:
        """:func:`check_sql` against this database's allowed tables, dialect and row limit."""
        return check_sql(sql, self.allowed, dialect=self.dialect, max_rows=self.max_rows)

    def describe(self) -> str:
        """``CREATE TABLE`` lines with only the allowed columns, plus a few sample rows each."""
        inspector = sa.inspect(self.engine)
        parts = []
        for table, columns in self.allowed.items():
            types = {c["name"]: str(c["type"]) for c in inspector.get_columns(table)}
            body = ",\n  ".join(f"{c} {types[c]}" for c in columns)
            parts.append(f"CREATE TABLE {table} (\n  {body}\n);")
            if self.sample_rows:
                sample = self.run(f"SELECT * FROM {table} LIMIT {self.sample_rows}")
                lines = ["\t".join(sample.columns)]
                lines += ["\t".join(str(v) for v in row) for row in sample.rows]
                parts.append(
                    f"/* {len(sample.rows)} rows from {table}:\n" + "\n".join(lines) + "\n*/"
                )
        return "\n\n".join(parts)

    def run(self, sql: str) -> SQLResult:
        """Check ``sql``, then execute it read-only under the row limit and time-out.

        Raises:
            UnsafeSQLError: The query is not a single SELECT over the allowed tables/columns.
            SQLExecutionError: The database refused it or it ran past the time-out.
        """
        checked = self.check(sql)
        reads: list[tuple[str, str]] = []
        with self.engine.connect() as connection:
            try:
                if self._sqlite:
                    columns, rows = self._sqlite_execute(connection, checked.limited_sql, reads)
                else:
                    columns, rows = self._server_execute(connection, checked.limited_sql)
            except sa.exc.DBAPIError as error:
                raise SQLExecutionError(self._explain(error)) from None
            finally:
                connection.rollback()
        return SQLResult(checked.sql, columns, rows, checked.tables, reads)

    def _explain(self, error: sa.exc.DBAPIError) -> str:
        text = str(error.orig).splitlines()[0] if error.orig else str(error)
        if "interrupted" in text or "statement timeout" in text or "canceling statement" in text:
            return f"the query ran past the {self.timeout_s:g}s time-out; write a cheaper query"
        return f"the database refused the query ({text}); fix it and use only the listed columns"

    def _sqlite_execute(self, connection: sa.Connection, sql: str, reads: list) -> Any:
        raw = connection.connection.dbapi_connection
        allowed = {t.lower(): {c.lower() for c in cs} | {""} for t, cs in self.allowed.items()}
        deadline = time.monotonic() + self.timeout_s

        def authorize(action: int, arg1: Any, arg2: Any, _db: Any, _trigger: Any) -> int:
            if action == sqlite3.SQLITE_READ:
                if (arg2 or "").lower() not in allowed.get((arg1 or "").lower(), ()):
                    return sqlite3.SQLITE_DENY
                reads.append((arg1, arg2))
            return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY

        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        raw.set_authorizer(authorize)
        try:
            return self._fetch(connection, sql)
        finally:
            raw.set_authorizer(None)
            raw.set_progress_handler(None, 1000)

    def _server_execute(self, connection: sa.Connection, sql: str) -> Any:
        if self.engine.dialect.name == "postgresql":
            connection.exec_driver_sql("SET TRANSACTION READ ONLY")
            ms = int(self.timeout_s * 1000)
            connection.exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")
        return self._fetch(connection, sql)

    def _fetch(self, connection: sa.Connection, sql: str) -> tuple[list[str], list[tuple]]:
        cursor = connection.exec_driver_sql(sql)
        return list(cursor.keys()), [tuple(r) for r in cursor.fetchmany(self.max_rows)]
