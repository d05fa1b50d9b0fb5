"""Read-only SQL checking for text-to-SQL: parse the LLM's SQL and accept only a safe SELECT.

The check is an **allowlist** over the tree sqlglot parses, never a request in a prompt:

* **bounded before parsing**: the reply's length, its token count and its nesting (parentheses,
  ``CASE``, runs of ``NOT``/unary signs) are checked on sqlglot's tokens first, so no reply can
  make the parser recurse or spin; the tree's depth and size are checked after parsing; every
  phase checks the caller's deadline, and any exception the parser or optimizer raises becomes
  one :class:`UnsafeSQLError` line;
* **node types and clauses**: every node must be of a type on the list a reporting query needs
  (``SELECT``, set operations, joins with ``ON``, ``WHERE``, ``GROUP BY``, ``HAVING``, ``ORDER
  BY``, ``LIMIT``, plain CTEs, windows, comparisons, arithmetic, ``CASE``, casts to scalar types
  and a list of scalar and aggregate functions), and may use only the clauses listed for its type;
  anything else (writes, ``PRAGMA``, ``NATURAL`` joins, ``USING``, ``QUALIFY``, row values,
  composite field access, table functions, ``VALUES``, locks, ``INTO`` ...) is rejected with the
  type's name in the message;
* **names resolved per scope**: every table is an allowed table or a CTE visible at that point
  (CTE names are unique and never shadow an allowed table); every column is qualified by
  sqlglot's ``qualify`` over a schema holding only the allowed columns and then checked again,
  scope by scope, against the source its qualifier names; a bare name (a table alias used as a
  value, a whole row) is rejected, except an ``ORDER BY`` item naming an output column, which is
  rewritten to its position.

What runs is the SQL sqlglot regenerates from the checked tree (comments dropped), wrapped in a
row limit, so text the parser did not see is never executed.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from llama_index_rag_pack.core.llm_output import json_values, strip_code_fences
from llama_index_rag_pack.sql.sql_allowlist import (
    ALLOWED_FUNCTIONS,
    ALLOWED_NAMED_FUNCTIONS,
    check_nodes,
)
from llama_index_rag_pack.sql.sql_limits import (
    Deadline,
    SQLLimits,
    UnsafeSQLError,
    bounded_tokens,
    bounded_tree,
    first_line,
)
from llama_index_rag_pack.sql.sql_scopes import check_columns, resolve_tables

__all__ = [
    "ALLOWED_FUNCTIONS",
    "ALLOWED_NAMED_FUNCTIONS",
    "CheckedSQL",
    "SQLLimits",
    "UnsafeSQLError",
    "check_sql",
    "extract_sql",
]

_SQL_START = re.compile(r"\b(SELECT|WITH)\b", re.I)
# One run of blanks, then the optional language with its own: two runs side by side would
# backtrack quadratically over a long run of blanks that ends in something else.
_FENCED = re.compile(
    r"```[ \t]*(?:(?:sql|sqlite|postgresql|postgres)[ \t]*)?\n(.*?)```", re.S | re.I
)


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


# ---------------------------------------------------------------- helpers
def extract_sql(text: str) -> str:
    """The SQL in an LLM reply: a JSON ``{"sql": ...}`` reply, a fenced ```sql block, else the
    text from the first SELECT/WITH.

    Example:
        >>> extract_sql("Here you go:\\n```sql\\nSELECT 1;\\n```\\nHope it helps.")
        'SELECT 1;'
        >>> extract_sql("SQLQuery: SELECT title FROM books")
        'SELECT title FROM books'
        >>> extract_sql('{"sql": "SELECT title FROM books"}')
        'SELECT title FROM books'
    """
    text = text if isinstance(text, str) else ""
    if text.lstrip().startswith(("{", "```json")):
        for value in json_values(text):
            if isinstance(value, dict) and isinstance(value.get("sql"), str):
                return value["sql"].strip()
    fenced = _FENCED.search(text)
    body = fenced.group(1) if fenced else strip_code_fences(text)
    match = _SQL_START.search(body)
    return (body[match.start() :] if match else body).strip()


def _parse_one(sql: str, dialect: str | None) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except Exception as error:  # ParseError, RecursionError, parser bugs: one line each
        raise UnsafeSQLError(
            f"the SQL does not parse ({first_line(error)}); write one valid SELECT"
        ) from None
    if len(statements) != 1:
        raise UnsafeSQLError(
            f"{len(statements)} statements found; write exactly one SELECT, no ';' chains"
        )
    statement = statements[0]
    if not isinstance(statement, (exp.Select, exp.SetOperation)):
        kind = statement.key.upper()
        raise UnsafeSQLError(f"{kind} is not allowed; only a read-only SELECT can run")
    return statement


@functools.lru_cache(maxsize=32)
def _allowed_schema(
    allowed: tuple[tuple[str, tuple[str, ...]], ...], dialect: str | None
) -> MappingSchema:
    """sqlglot's schema of the allowed columns, built once per allowlist: normalising it costs
    ≈17 ms for 200 tables, more than the rest of a check."""
    mapping = {table: {column: "TEXT" for column in columns} for table, columns in allowed}
    return MappingSchema(mapping, dialect=dialect)


def _qualified(
    statement: exp.Expression, allowed: Mapping[str, Sequence[str]], dialect: str | None
) -> exp.Expression:
    key = tuple((table, tuple(columns)) for table, columns in allowed.items())
    schema = _allowed_schema(key, dialect)
    try:
        return qualify(statement, schema=schema, dialect=dialect, validate_qualify_columns=True)
    except Exception as error:  # OptimizeError, RecursionError, optimizer bugs
        first = first_line(error).split(". Line")[0]
        raise UnsafeSQLError(f"{first}; use only the allowed columns") from None


def check_sql(
    sql: str,
    allowed: Mapping[str, Sequence[str]],
    *,
    dialect: str | None = "sqlite",
    max_rows: int = 100,
    limits: SQLLimits | None = None,
    deadline: float | None = None,
) -> CheckedSQL:
    """Accept ``sql`` only if it is one read-only SELECT over ``allowed`` tables and columns.

    Args:
        sql: The candidate query (already extracted from the LLM reply).
        allowed: Table name -> the column names that may be read.
        dialect: sqlglot dialect to parse and regenerate in (``"sqlite"``, ``"postgres"`` ...).
        max_rows: The row limit added around the query.
        limits: Size and nesting bounds (:class:`SQLLimits` defaults).
        deadline: A ``time.monotonic()`` instant; checking past it is refused.

    Raises:
        UnsafeSQLError: One line naming what is not allowed and what to write instead. Nothing
            else: every parser and optimizer error is turned into this one.

    Example:
        >>> check_sql("SELECT * FROM books", {"books": ["title"]}).sql
        'SELECT "books"."title" AS "title" FROM "books" AS "books"'
        >>> try:
        ...     check_sql("DROP TABLE books", {"books": ["title"]})
        ... except UnsafeSQLError as error:
        ...     print(error)
        DROP is not allowed; only a read-only SELECT can run
    """
    limits = limits or SQLLimits()
    clock = Deadline(deadline)
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeSQLError("no SQL found in the reply; answer with one SELECT statement")
    bounded_tokens(sql, dialect, limits)
    clock.check("reading")
    statement = _parse_one(sql, dialect)
    bounded_tree(statement, limits)
    check_nodes(statement)
    resolve_tables(statement, allowed)
    clock.check("parsing")
    statement = _qualified(statement, allowed, dialect)
    clock.check("resolving names")
    bounded_tree(statement, limits)
    check_nodes(statement)
    used, kinds = resolve_tables(statement, allowed)
    try:
        _stars_expanded(statement)
        if len(statement.selects) > limits.max_columns:
            raise UnsafeSQLError(
                f"the query returns {len(statement.selects)} columns (limit "
                f"{limits.max_columns}); select fewer columns"
            )
        check_columns(statement, allowed, kinds, limits)
        limited = exp.select("*").from_(statement.subquery("_limited")).limit(max_rows)
        limited_sql = limited.sql(dialect=dialect, comments=False)
        _same_when_read_back(limited, limited_sql, dialect)
        checked = statement.sql(dialect=dialect, comments=False)
    except UnsafeSQLError:
        raise
    except Exception as error:  # scope building or SQL generation failed on an odd tree
        raise UnsafeSQLError(f"the SQL could not be checked ({first_line(error)})") from None
    clock.check("checking")
    return CheckedSQL(checked, limited_sql, tuple(used))


def _stars_expanded(statement: exp.Expression) -> None:
    """After qualification every ``*`` but ``COUNT(*)``'s must be gone: sqlglot leaves a whole
    scope unexpanded when it can't name a source's columns (duplicate names, say)."""
    for star in statement.find_all(exp.Star):
        if not isinstance(star.parent, exp.Count):
            raise UnsafeSQLError(
                "* could not be expanded to the allowed columns (a CTE or subquery has "
                "duplicate or unnamed columns); name the columns"
            )


def _same_when_read_back(tree: exp.Expression, sql: str, dialect: str | None) -> None:
    """The text that will run must parse back to exactly the checked tree: the generator writes
    some node text verbatim, and what the database reads is what counts."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except Exception:  # noqa: BLE001 - any failure to read it back is a refusal
        statements = []
    if len(statements) != 1 or statements[0] != tree:
        raise UnsafeSQLError(
            "the SQL does not read back as the query that was checked; write a plainer query"
        )
