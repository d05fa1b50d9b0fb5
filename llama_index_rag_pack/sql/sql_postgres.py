"""PostgreSQL specifics of :class:`~llama_index_rag_pack.sql.sql_database.SafeSQLDatabase`:
the driver, what the connected role can read, the statements that create a role reading only
the visible columns, and the row guard that makes the server refuse oversized result rows.
"""

from __future__ import annotations

import importlib.util
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.sql.sql_sqlite import fetch_bounded

__all__ = [
    "ROW_TOO_LARGE",
    "postgres_execute",
    "role_problems",
    "role_statements",
    "row_guard",
    "server_url",
]

#: The text of the server error a too-large result row raises (see :func:`row_guard`).
ROW_TOO_LARGE = "result row larger than"
#: Text bytes of rows one fetch may bring to the client (rows are at most ``max_bytes`` each).
_BATCH_BYTES = 8_000_000
_READABLE_TABLES = sa.text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind IN ('r', 'v', 'm', 'f', 'p') "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' "
    "AND (has_table_privilege(c.oid, 'SELECT') OR has_any_column_privilege(c.oid, 'SELECT')) "
    "ORDER BY 1"
)


def server_url(database: str) -> sa.URL:
    """The URL with a driver that is installed (``postgresql://`` -> psycopg 3 when present)."""
    url = sa.engine.make_url(database)
    if url.get_backend_name() == "postgresql":
        if url.drivername == "postgresql" and importlib.util.find_spec("psycopg2") is None:
            url = url.set(drivername="postgresql+psycopg")
        driver = url.get_driver_name()
        module = {"psycopg": "psycopg", "psycopg2": "psycopg2"}.get(driver, driver)
        if importlib.util.find_spec(module) is None:
            raise ConfigurationError(
                f"the PostgreSQL driver {module!r} is not installed; "
                "pip install 'llama-index-rag-pack[postgres]' (psycopg 3)"
            )
    return url


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def role_problems(
    connection: sa.Connection,
    allowed: Mapping[str, Sequence[str]],
    hidden: Mapping[str, Sequence[str]],
) -> list[str]:
    """What the connected role can read beyond the allowed tables' visible columns.

    Each entry names a hidden column (``table.column``), a readable table outside ``allowed``
    (``table name``), or ``everything (superuser)``; empty when the role is as narrow as it
    should be.
    """
    problems: list[str] = []
    superuser = connection.execute(
        sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    ).scalar()
    if superuser:
        problems.append("everything (superuser)")
    check = sa.text("SELECT has_column_privilege(:t, :c, 'SELECT')")
    for table, names in hidden.items():
        for column in names:
            if connection.execute(check, {"t": _quote_ident(table), "c": column}).scalar():
                problems.append(f"{table}.{column}")
    readable = connection.execute(_READABLE_TABLES).scalars()
    return problems + [f"table {name}" for name in readable if name not in allowed]


def role_statements(
    role: str,
    allowed: Mapping[str, Sequence[str]],
    *,
    database: str,
    schema: str = "public",
    timeout_s: float = 5.0,
    password: str | None = None,
) -> list[str]:
    """``CREATE ROLE`` and ``GRANT`` statements for a role that reads only ``allowed`` columns,
    with read-only transactions and a statement time-out by default."""
    if not isinstance(role, str) or not role.strip():
        raise ConfigurationError("role is empty; name the role to create")
    name = _quote_ident(role)
    login = "LOGIN"
    if password is not None:
        login += " PASSWORD '" + password.replace("'", "''") + "'"
    statements = [
        f"CREATE ROLE {name} {login};",
        f"GRANT CONNECT ON DATABASE {_quote_ident(database)} TO {name};",
        f"GRANT USAGE ON SCHEMA {_quote_ident(schema)} TO {name};",
    ]
    for table, columns in allowed.items():
        listed = ", ".join(_quote_ident(c) for c in columns)
        statements.append(
            f"GRANT SELECT ({listed}) ON {_quote_ident(schema)}.{_quote_ident(table)} TO {name};"
        )
    return statements + [
        f"ALTER ROLE {name} SET default_transaction_read_only = on;",
        f"ALTER ROLE {name} SET statement_timeout = '{int(timeout_s * 1000)}ms';",
    ]


def row_guard(sql: str, max_bytes: int, max_rows: int) -> str:
    """``sql`` limited to ``max_rows`` rows, and failing on the server (before anything is sent)
    for a row whose text form is over ``max_bytes``: the error names :data:`ROW_TOO_LARGE`.

    The row is measured as ``ROW(alias.*)``, which always names the wrapping relation (a bare
    ``alias`` would read an output column of that name instead), under an alias drawn afresh
    for each query and absent from ``sql``: no query can name, shadow or predict it."""
    alias = _fresh_alias(sql)
    size = f"octet_length(CAST(ROW({alias}.*) AS TEXT)) > {int(max_bytes)}"
    mark = f"'{ROW_TOO_LARGE} {int(max_bytes)} bytes'"
    return (
        f"SELECT {alias}.* FROM ({sql}) AS {alias} "
        f"WHERE CAST(CASE WHEN {size} THEN {mark} END AS INT) IS NULL LIMIT {int(max_rows)}"
    )


def _fresh_alias(sql: str) -> str:
    lowered = sql.lower()
    while True:
        alias = f"_limited_{secrets.token_hex(16)}"
        if alias not in lowered:
            return f'"{alias}"'


class _Batches:
    """``fetchone`` over a server-side cursor, fetching ``size`` rows at a time, each fetch
    under a statement time-out of the time left."""

    def __init__(self, raw: Any, cursor: Any, size: int, deadline: float) -> None:
        self._raw, self._cursor, self._size, self._deadline = raw, cursor, size, deadline
        self._rows: list[tuple] = []
        self._done = False

    def fetchone(self) -> tuple | None:
        if not self._rows and not self._done:
            _time_left(self._raw, self._deadline)
            self._rows = list(reversed(self._cursor.fetchmany(self._size)))
            self._done = len(self._rows) < self._size
        return self._rows.pop() if self._rows else None


def _time_left(raw: Any, deadline: float) -> None:
    ms = max(1, int((deadline - time.monotonic()) * 1000))
    raw.execute(f"SET LOCAL statement_timeout = {ms}")


def postgres_execute(
    raw: Any, sql: str, deadline: float, *, max_rows: int, max_bytes: int
) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` (already row-guarded) in a read-only transaction with a statement time-out
    of the time left, through a server-side cursor declared over it: one statement sent with
    the extended protocol (it refuses a second one) without parameters (so no client-side
    ``%`` formatting); fetch at most ``max_rows`` rows and ``max_bytes`` bytes, a few rows per
    round trip (about :data:`_BATCH_BYTES` of row text, or one row), so the client never holds
    the whole result: the rows are at most ``max_bytes`` each (:func:`row_guard`)."""
    raw.execute("SET TRANSACTION READ ONLY")
    _time_left(raw, deadline)
    cursor = raw.cursor(name="rag_pack_rows")
    try:
        cursor.execute(sql)
        names = [d[0] for d in cursor.description or ()]
        size = max(1, min(int(max_rows), _BATCH_BYTES // max(int(max_bytes), 1)))
        return names, fetch_bounded(_Batches(raw, cursor, size, deadline), max_rows, max_bytes)
    finally:
        cursor.close()
