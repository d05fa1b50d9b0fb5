"""Read-only SQL checking for text-to-SQL: parse the LLM's SQL and accept only a safe SELECT.

The check is enforced with a real parser (sqlglot), never requested in a prompt:

* exactly one statement, and it is a ``SELECT`` (``UNION``/``INTERSECT``/``EXCEPT`` of SELECTs
  included); anything else (``DROP``, ``DELETE``, ``UPDATE``, ``INSERT``, ``ATTACH``, ``PRAGMA``,
  a second statement after a comment ...) is rejected;
* ``WITH RECURSIVE`` is rejected outright: a recursive CTE has no bound the parser can prove, and
  the time-out is the second line of defence, not the first. Plain CTEs are allowed; their bodies
  are checked like the rest of the query;
* every table is one of the allowed tables (or a CTE defined in the query), unqualified by a
  schema or database; every column resolves (aliases, subqueries and ``*`` expansion included) to
  an allowed column, resolution done by sqlglot's ``qualify`` over a schema that holds only the
  allowed columns;
* functions sqlglot does not know (``load_extension``, ``readfile``, ``writefile`` ...) are
  rejected, and so are known ones on the deny list.

What runs is the SQL sqlglot regenerates from the checked tree (comments dropped), wrapped in a
row limit, so text the parser did not see is never executed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify

from llama_index_rag_pack.core.errors import RagPackError
from llama_index_rag_pack.core.llm_output import strip_code_fences

__all__ = ["CheckedSQL", "UnsafeSQLError", "check_sql", "extract_sql"]

# Known (typed) sqlglot functions that still must not run on behalf of an LLM.
DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "sleep"})
_SQL_START = re.compile(r"\b(SELECT|WITH)\b", re.I)
_FENCED = re.compile(r"```[ \t]*(?:sql|sqlite|postgresql)?[ \t]*\n(.*?)```", re.S | re.I)


class UnsafeSQLError(RagPackError, ValueError):
    """The SQL is not a single SELECT over the allowed tables and columns (message says why)."""


@dataclass(frozen=True)
class CheckedSQL:
    """A query that passed :func:`check_sql`.

    Attributes:
        sql: The regenerated query, as checked (no comments, no limit).
        limited_sql: ``sql`` wrapped in the row limit: what is executed.
        tables: The allowed tables it reads.
    """

    sql: str
    limited_sql: str
    tables: tuple[str, ...]


def extract_sql(text: str) -> str:
    """The SQL in an LLM reply: a fenced ```sql block, else the text from the first SELECT/WITH.

    Example:
        >>> extract_sql("Here you go:\\n```sql\\nSELECT 1;\\n```\\nHope it helps.")
        'SELECT 1;'
        >>> extract_sql("SQLQuery: SELECT title FROM books")
        'SELECT title FROM books'
    """
    fenced = _FENCED.search(text or "")
    body = fenced.group(1) if fenced else strip_code_fences(text or "")
    match = _SQL_START.search(body)
    return (body[match.start() :] if match else body).strip()


def _one_statement(sql: str, dialect: str | None) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except SqlglotError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UnsafeSQLError(f"the SQL does not parse ({first}); write one valid SELECT") from None
    if len(statements) != 1:
        raise UnsafeSQLError(
            f"{len(statements)} statements found; write exactly one SELECT, no ';' chains"
        )
    statement = statements[0]
    if not isinstance(statement, (exp.Select, exp.SetOperation)):
        kind = statement.key.upper()
        raise UnsafeSQLError(f"{kind} is not allowed; only a read-only SELECT can run")
    return statement


def _check_nodes(statement: exp.Expression) -> None:
    for node in statement.walk():
        if isinstance(node, (exp.DML, exp.DDL, exp.Command, exp.Pragma, exp.Attach, exp.Into)):
            raise UnsafeSQLError(f"{node.key.upper()} is not allowed; only a read-only SELECT")
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise UnsafeSQLError("WITH RECURSIVE is not allowed; write a non-recursive query")
        if isinstance(node, exp.Anonymous):
            raise UnsafeSQLError(f"function {node.name}() is not allowed; use standard SQL")
        if isinstance(node, exp.Func) and node.sql_name().lower() in DENIED_FUNCTIONS:
            raise UnsafeSQLError(f"function {node.sql_name()}() is not allowed")


def _check_tables(statement: exp.Expression, allowed: Mapping[str, Sequence[str]]) -> list[str]:
    ctes = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
    allowed_lower = {t.lower(): t for t in allowed}
    used: list[str] = []
    for table in statement.find_all(exp.Table):
        name = table.name.lower()
        if table.args.get("db") or table.args.get("catalog"):
            raise UnsafeSQLError(f"table {table.sql()} is qualified; use the bare table name")
        if name in ctes:
            continue
        if name not in allowed_lower:
            raise UnsafeSQLError(
                f"table {table.name or table.sql()!r} is not allowed; use only: "
                f"{', '.join(sorted(allowed))}"
            )
        if allowed_lower[name] not in used:
            used.append(allowed_lower[name])
    return used


def check_sql(
    sql: str,
    allowed: Mapping[str, Sequence[str]],
    *,
    dialect: str | None = "sqlite",
    max_rows: int = 100,
) -> CheckedSQL:
    """Accept ``sql`` only if it is one read-only SELECT over ``allowed`` tables and columns.

    Args:
        sql: The candidate query (already extracted from the LLM reply).
        allowed: Table name -> the column names that may be read.
        dialect: sqlglot dialect to parse and regenerate in (``"sqlite"``, ``"postgres"`` ...).
        max_rows: The row limit added around the query.

    Raises:
        UnsafeSQLError: One line naming what is not allowed and what to write instead.

    Example:
        >>> check_sql("SELECT * FROM books", {"books": ["title"]}).sql
        'SELECT "books"."title" AS "title" FROM "books" AS "books"'
        >>> try:
        ...     check_sql("DROP TABLE books", {"books": ["title"]})
        ... except UnsafeSQLError as error:
        ...     print(error)
        DROP is not allowed; only a read-only SELECT can run
    """
    if not sql or not sql.strip():
        raise UnsafeSQLError("no SQL found in the reply; answer with one SELECT statement")
    statement = _one_statement(sql, dialect)
    _check_nodes(statement)
    _check_tables(statement, allowed)
    schema = {table: {column: "TEXT" for column in columns} for table, columns in allowed.items()}
    try:
        statement = qualify(
            statement, schema=schema, dialect=dialect, validate_qualify_columns=True
        )
    except SqlglotError as error:
        first = str(error).split(". Line")[0]
        raise UnsafeSQLError(f"{first}; use only the allowed columns") from None
    used = _check_tables(statement, allowed)
    _check_nodes(statement)
    checked = statement.sql(dialect=dialect, comments=False)
    limited = exp.select("*").from_(statement.subquery("_limited")).limit(max_rows)
    return CheckedSQL(checked, limited.sql(dialect=dialect, comments=False), tuple(used))
