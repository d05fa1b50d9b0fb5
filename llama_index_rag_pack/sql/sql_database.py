"""A read-only, time-limited view of a SQL database for text-to-SQL (:class:`SafeSQLDatabase`).

Every query is first checked by :func:`~llama_index_rag_pack.sql.sql_safety.check_sql` (an
allowlist, under the same deadline as execution); the database then enforces what it can on its
own, per backend:

* **SQLite** (a file): opened with ``file:...?mode=ro`` so nothing can be written; an authorizer
  allows only reading allowed columns of allowed tables and calling listed functions (no writes,
  ``ATTACH``, ``PRAGMA``, recursive CTE or extension even past the checker); length limits
  (``sqlite3`` limits: no value over ``max_result_bytes``, bounded SQL length, expression depth
  and compound SELECTs) so no single call can grow memory without bound; a progress handler
  stops any query at the deadline.
* **PostgreSQL**: each query runs in a ``READ ONLY`` transaction with ``SET LOCAL
  statement_timeout`` (the time left after checking), sent without client-side ``%``
  formatting, with no result row over ``max_result_bytes``. The role must be granted ``SELECT``
  on the allowed columns only (:meth:`SafeSQLDatabase.role_setup_sql` prints the statements);
  by default the database refuses to open when the role can read a hidden column, another
  table, or is a superuser (``role_check="warn"`` only logs it).
* **Any other server** gives none of these guarantees and is refused unless
  ``allow_unguarded=True`` (then only the checker and the row limit stand).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import sqlalchemy as sa
from llama_index.core.instrumentation import get_dispatcher
from sqlalchemy.pool import NullPool
from sqlglot import exp

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.sql.sql_execution import (
    QueryTimedOut,
    SQLExecutionError,
    SQLResult,
    first_line,
    run_before,
)
from llama_index_rag_pack.sql.sql_names import check_case_twins
from llama_index_rag_pack.sql.sql_postgres import (
    ROW_TOO_LARGE,
    postgres_execute,
    role_problems,
    role_statements,
    row_guard,
    server_url,
)
from llama_index_rag_pack.sql.sql_safety import CheckedSQL, SQLLimits, check_sql
from llama_index_rag_pack.sql.sql_sqlite import (
    sqlite_execute,
    sqlite_path,
    sqlite_url,
)

__all__ = ["ROLE_CHECKS", "SQLExecutionError", "SQLResult", "SafeSQLDatabase"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql"}
ROLE_CHECKS = ("refuse", "warn", "off")


class SafeSQLDatabase:
    """The allowed tables of a database, opened read-only, queried with a row limit and time-out.

    Args:
        database: A SQLite file path or ``sqlite:///`` URL (both opened read-only), or a
            PostgreSQL URL (``postgresql://reader:pw@127.0.0.1/shop``; psycopg 3 is used).
        tables: The only tables the LLM may see and read (required, at least one).
        columns: Optional ``{table: [columns]}`` of the visible columns (default: every column);
            the others are hidden from the LLM, from ``*`` and from every query.
        max_rows: Row limit added to every query.
        timeout_s: Time-out in seconds for checking and running one query together.
        sample_rows: Example rows per table shown to the LLM.
        max_result_bytes: Largest result (all rows together) a query may return; no single value
            (SQLite) or row (PostgreSQL) may be larger either, checked in the database.
        limits: Size and nesting bounds on the SQL (:class:`SQLLimits`).
        role_check: PostgreSQL: ``"refuse"`` (default) to raise when the role can read a hidden
            column, a table not in ``tables``, or is a superuser; ``"warn"`` to log it;
            ``"off"`` to skip the check (setting up a role).
        allow_unguarded: Accept a server other than SQLite and PostgreSQL, where the database
            enforces neither read-only access nor the time-out (default ``False``: refused).

    Raises:
        ConfigurationError: A missing file or table, an unknown column, an unreachable server,
            a role that can read too much, an unsupported backend, a server table or visible
            column whose name differs from another only by case (the checker ignores case).

    Example:
        >>> import sqlite3, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "shop.db")
        >>> with sqlite3.connect(path) as c:
        ...     _ = c.execute("CREATE TABLE items (name TEXT, price REAL, cost REAL)")
        ...     _ = c.execute("INSERT INTO items VALUES ('pen', 1.5, 0.2)")
        >>> db = SafeSQLDatabase(path, tables=["items"], columns={"items": ["name", "price"]})
        >>> db.run("SELECT * FROM items").rows
        [('pen', 1.5)]
    """

    def __init__(
        self,
        database: str | Path,
        *,
        tables: Sequence[str],
        columns: Mapping[str, Sequence[str]] | None = None,
        max_rows: int = 50,
        timeout_s: float = 5.0,
        sample_rows: int = 3,
        max_result_bytes: int = 1_000_000,
        limits: SQLLimits | None = None,
        role_check: str = "refuse",
        allow_unguarded: bool = False,
    ) -> None:
        if isinstance(tables, str) or not tables:
            raise ConfigurationError("tables is empty; name the tables the LLM may read")
        for name, value, low in (
            ("max_rows", max_rows, 1),
            ("sample_rows", sample_rows, 0),
            ("max_result_bytes", max_result_bytes, 1000),
        ):
            check_count(name, value, minimum=low)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ConfigurationError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        if role_check not in ROLE_CHECKS:
            raise ConfigurationError(f"role_check must be one of {ROLE_CHECKS}, got {role_check!r}")
        path = sqlite_path(str(database))
        self._sqlite = path is not None
        if path is not None:
            self.engine = sa.create_engine(sqlite_url(path), poolclass=NullPool)
        else:
            url = server_url(str(database))
            backend = url.get_backend_name()
            if backend != "postgresql" and not allow_unguarded:
                raise ConfigurationError(
                    f"{backend} gives no read-only transaction or time-out here; use SQLite or "
                    "PostgreSQL, or pass allow_unguarded=True to rely on the SQL checker alone"
                )
            args = {"connect_timeout": max(1, int(timeout_s))} if backend == "postgresql" else {}
            try:
                self.engine = sa.create_engine(url, connect_args=args, poolclass=NullPool)
            except (ImportError, sa.exc.ArgumentError) as error:
                raise ConfigurationError(f"cannot use {backend}: {first_line(error)}") from None
        self.backend = self.engine.dialect.name
        self.dialect = _DIALECTS.get(self.backend, self.backend)
        self.max_rows, self.timeout_s, self.sample_rows = max_rows, float(timeout_s), sample_rows
        self.max_result_bytes = max_result_bytes
        self.limits = limits or SQLLimits()
        try:
            self.allowed, self.hidden = self._resolve_columns(list(tables), dict(columns or {}))
            if not self._sqlite:  # SQLite ignores case in names, as the checker does
                check_case_twins(self.engine, self.allowed, self.hidden)
            if self.backend == "postgresql" and role_check != "off":
                self._check_role(role_check)
        except sa.exc.SQLAlchemyError as error:
            raise ConfigurationError(
                f"cannot open {self.engine.url.render_as_string(hide_password=True)}: "
                f"{first_line(error)}"
            ) from None
        logger.info("SQL database %s: tables %s", self.engine.url, sorted(self.allowed))

    def _resolve_columns(
        self, tables: list[str], visible: dict[str, Sequence[str]]
    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        inspector = sa.inspect(self.engine)
        existing = set(inspector.get_table_names()) | set(inspector.get_view_names())
        unknown_tables = sorted(set(visible) - set(tables))
        if unknown_tables:
            raise ConfigurationError(
                f"columns name tables not in tables: {unknown_tables}; add them to tables"
            )
        allowed: dict[str, list[str]] = {}
        hidden: dict[str, list[str]] = {}
        for table in tables:
            if table not in existing:
                raise ConfigurationError(
                    f"table {table!r} is not in the database; choose from {sorted(existing)}"
                )
            names = [c["name"] for c in inspector.get_columns(table)]
            wanted = list(visible.get(table, names))
            unknown = sorted(set(wanted) - set(names))
            if unknown or not wanted:
                raise ConfigurationError(
                    f"columns {unknown or wanted} are not usable in table {table!r}: {names}"
                )
            allowed[table] = [n for n in names if n in wanted]
            hidden[table] = [n for n in names if n not in wanted]
        return allowed, hidden

    # ------------------------------------------------------------------ PostgreSQL role
    def _check_role(self, mode: str) -> None:
        """Refuse (or warn) when the connected role can read more than the allowed columns."""
        problems = self.role_problems()
        if not problems:
            return
        role = self.engine.url.username or "the current role"
        message = (
            f"the database role {role!r} can read {', '.join(problems[:6])}"
            f"{' ...' if len(problems) > 6 else ''}; connect as a role granted SELECT on the "
            "allowed columns only (statements: SafeSQLDatabase.role_setup_sql or rag-pack sql "
            "--setup-role NAME), or pass role_check='warn'"
        )
        if mode == "refuse":
            raise ConfigurationError(message)
        logger.warning("%s", message)

    def role_problems(self) -> list[str]:
        """What the connected PostgreSQL role can read beyond the allowed columns (empty: none).

        Each entry names a hidden column (``table.column``), a table outside ``tables``, or
        ``superuser``. Always empty on SQLite, where the authorizer enforces the columns.
        """
        if self.backend != "postgresql":
            return []
        with self.engine.connect() as connection:
            try:
                return role_problems(connection, self.allowed, self.hidden)
            finally:
                connection.rollback()

    def role_setup_sql(
        self, role: str, *, password: str | None = None, schema: str = "public"
    ) -> list[str]:
        """The statements that create a PostgreSQL role reading only the allowed columns.

        Run them as the tables' owner; then connect the engine as ``role``. The role's
        transactions default to read-only and its statements to this database's time-out.

        Example:
            >>> import sqlite3, tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "shop.db")
            >>> with sqlite3.connect(path) as c:
            ...     _ = c.execute("CREATE TABLE items (name TEXT, price REAL, cost REAL)")
            >>> db = SafeSQLDatabase(path, tables=["items"], columns={"items": ["name", "price"]})
            >>> print("\\n".join(db.role_setup_sql("reader", password="s3cret")[-4:]))
            GRANT USAGE ON SCHEMA "public" TO "reader";
            GRANT SELECT ("name", "price") ON "public"."items" TO "reader";
            ALTER ROLE "reader" SET default_transaction_read_only = on;
            ALTER ROLE "reader" SET statement_timeout = '5000ms';
        """
        return role_statements(
            role,
            self.allowed,
            database=self.engine.url.database or "postgres",
            schema=schema,
            timeout_s=self.timeout_s,
            password=password,
        )

    # ------------------------------------------------------------------ queries
    @dispatcher.span
    def check(self, sql: str, *, deadline: float | None = None) -> CheckedSQL:
        """:func:`check_sql` against this database's allowed tables, dialect and row limit."""
        return check_sql(
            sql,
            self.allowed,
            dialect=self.dialect,
            max_rows=self.max_rows,
            limits=self.limits,
            deadline=deadline,
        )

    def describe(self) -> str:
        """``CREATE TABLE`` lines with only the allowed columns, plus a few sample rows each."""
        return "\n\n".join(self.table_descriptions().values())

    def table_descriptions(self) -> dict[str, str]:
        """Per allowed table: its ``CREATE TABLE`` line with only the allowed columns, and a
        few sample rows (what the LLM is shown of it)."""
        try:
            inspector = sa.inspect(self.engine)
            types = {
                t: {c["name"]: str(c["type"]) for c in inspector.get_columns(t)}
                for t in self.allowed
            }
        except sa.exc.SQLAlchemyError as error:
            raise SQLExecutionError(f"cannot read the schema: {first_line(error)}") from None
        out = {}
        for table, columns in self.allowed.items():
            body = ",\n  ".join(f"{c} {types[table][c]}" for c in columns)
            text = f"CREATE TABLE {table} (\n  {body}\n);"
            if self.sample_rows:
                quoted = exp.to_identifier(table, quoted=True)
                query = exp.select("*").from_(exp.Table(this=quoted)).limit(self.sample_rows)
                sample = self.run(query.sql(dialect=self.dialect))
                lines = ["\t".join(sample.columns)]
                lines += ["\t".join(str(v) for v in row) for row in sample.rows]
                text += f"\n\n/* {len(sample.rows)} rows from {table}:\n" + "\n".join(lines)
                text += "\n*/"
            out[table] = text
        return out

    @dispatcher.span
    def run(self, sql: str) -> SQLResult:
        """Check ``sql``, then execute it read-only under the row limit and time-out.

        Checking and running share one deadline, ``timeout_s`` from the call.

        Raises:
            UnsafeSQLError: The query is not a single SELECT over the allowed tables/columns.
            SQLExecutionError: The database refused it, or it ran past the time-out.
        """
        deadline = time.monotonic() + self.timeout_s
        checked = self.check(sql, deadline=deadline)
        # The database's own time-out fires first; the deadline here holds when a single
        # function call or the planner never gives control back.
        grace = min(0.25 * self.timeout_s, 1.0)
        try:
            return run_before(
                deadline + grace, lambda handle: self._work(checked, deadline, handle)
            )
        except QueryTimedOut:
            raise SQLExecutionError(self._timed_out()) from None

    def _timed_out(self) -> str:
        return f"the query ran past the {self.timeout_s:g}s time-out; write a cheaper query"

    def _work(self, checked: CheckedSQL, deadline: float, handle: dict) -> SQLResult:
        """Run ``checked`` on a connection of its own (in a worker thread ``run`` may leave
        behind at its deadline, after cancelling ``handle["raw"]``)."""
        reads: list[tuple[str, str]] = []
        try:
            with self.engine.connect() as connection:
                raw = handle["raw"] = connection.connection.dbapi_connection
                try:
                    if self._sqlite:
                        columns, rows = self._sqlite_execute(
                            connection, checked.limited_sql, reads, deadline
                        )
                    else:
                        columns, rows = postgres_execute(
                            raw,
                            self._row_guard(checked.sql),
                            deadline,
                            max_rows=self.max_rows,
                            max_bytes=self.max_result_bytes,
                        )
                finally:
                    connection.rollback()
        except SQLExecutionError:
            raise
        except Exception as error:  # driver errors, decoding, connection loss: one line each
            raise SQLExecutionError(self._explain(error)) from None
        return SQLResult(checked.sql, columns, rows, checked.tables, reads)

    def _explain(self, error: BaseException) -> str:
        text = first_line(error)
        lowered = text.lower()
        if "interrupted" in lowered or "statement timeout" in lowered or "canceling" in lowered:
            return self._timed_out()
        if ROW_TOO_LARGE in lowered or "too big" in lowered or "too large" in lowered:
            return self._too_large()
        if "not authorized" in lowered or "permission denied" in lowered:
            return f"the database refused the query ({text}); read only the listed columns"
        return f"the database refused the query ({text}); fix it and use only the listed columns"

    def _too_large(self) -> str:
        return (
            f"the result is larger than {self.max_result_bytes:,} bytes; select fewer rows or "
            "shorter values"
        )

    def _sqlite_execute(
        self, connection: sa.Connection, sql: str, reads: list, deadline: float
    ) -> tuple[list[str], list[tuple]]:
        return sqlite_execute(
            connection.connection.dbapi_connection,
            sql,
            self.allowed,
            reads=reads,
            deadline=deadline,
            max_rows=self.max_rows,
            max_result_bytes=self.max_result_bytes,
            limits=self.limits,
        )

    def _row_guard(self, sql: str) -> str:
        """The query limited in rows, failing on the server for any row over the byte limit."""
        return row_guard(sql, self.max_result_bytes, self.max_rows)
