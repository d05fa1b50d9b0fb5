"""Bounds on an LLM's SQL, checked before and while it is parsed (part of
:func:`~llama_index_rag_pack.sql.sql_safety.check_sql`).

The reply's length, token count and nesting are read from sqlglot's tokens before the parser
sees them (the parser recurses on nesting); the parsed tree's depth and size are measured
without recursion; every phase checks one deadline.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from llama_index_rag_pack.core.errors import RagPackError

__all__ = [
    "Deadline",
    "SQLLimits",
    "UnsafeSQLError",
    "bounded_tokens",
    "bounded_tree",
    "children",
    "first_line",
]

# Control characters other than tab and line breaks (NUL truncates strings in C drivers), and
# zero-width and bidirectional marks (they hide text from people reading the query).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_NESTING_OPEN = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE}
_NESTING_CLOSE = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END}
_PREFIX = {TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE}


class UnsafeSQLError(RagPackError, ValueError):
    """The SQL is not a single SELECT over the allowed tables and columns (message says why)."""


@dataclass(frozen=True)
class SQLLimits:
    """Bounds on an LLM's SQL, checked before and after parsing.

    Attributes:
        max_chars: Longest SQL text accepted.
        max_tokens: Most tokens accepted (bounds IN lists and OR chains before parsing).
        max_nesting: Deepest nesting of parentheses, ``CASE`` and prefix operators (the parser
            recurses on these).
        max_depth: Deepest parsed tree.
        max_nodes: Largest parsed tree.
        max_expanded: Largest tree once every CTE and derived table is inlined where it is
            read (databases inline them when planning: a chain of CTEs each reading the last
            twice doubles at every step, and planning can't be interrupted).
        max_columns: Most columns the query may return (a row is built whole before anything
            can check its size).
        max_subqueries: Most subqueries the statement may hold: scalar, ``IN`` and ``EXISTS``
            subqueries, derived tables and CTE reads, each CTE or derived table counted again,
            with the subqueries it holds, wherever it is read (a database may inline it there).
            Each may keep a value of up to ``max_result_bytes`` for the whole statement (SQLite
            evaluates an uncorrelated scalar subquery once and keeps its result; it materialises
            a derived table or CTE it cannot flatten), about four copies of it in SQLite, and
            the value-length limit caps each value, not how many are held: 16 keep that near
            64 MB with the default 1 MB, far below the 200 MB a query may use, while a
            reporting query uses a handful (a few CTEs, an ``IN``/``EXISTS`` filter, a scalar
            subquery or two).
        max_aggregates: Most aggregate and window calls the statement may hold (a CTE's counted
            wherever it is read): each keeps a running value of up to ``max_result_bytes``
            (about 2 MB in SQLite for a 1 MB text), so 32 keep that near 64 MB, while a report
            computes a few per column it shows.
    """

    max_chars: int = 20_000
    max_tokens: int = 2_000
    max_nesting: int = 24
    max_depth: int = 200
    max_nodes: int = 4_000
    max_expanded: int = 50_000
    max_columns: int = 64
    max_subqueries: int = 16
    max_aggregates: int = 32

    def __post_init__(self) -> None:
        names = (
            "max_chars", "max_tokens", "max_nesting", "max_depth", "max_nodes", "max_expanded",
            "max_columns", "max_subqueries", "max_aggregates",
        )  # fmt: skip
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line[:200]


class Deadline:
    """Raises when checking runs past the caller's deadline (``time.monotonic()`` seconds)."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline

    def check(self, phase: str) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise UnsafeSQLError(
                f"checking the SQL ran past the time-out ({phase}); write a shorter query"
            )


def bounded_tokens(sql: str, dialect: str | None, limits: SQLLimits) -> None:
    """Refuse replies too long, too many tokens or too deeply nested before the parser sees them."""
    if len(sql) > limits.max_chars:
        raise UnsafeSQLError(
            f"the SQL is {len(sql):,} characters long (limit {limits.max_chars:,}); "
            "write a shorter query"
        )
    bad = _CONTROL.search(sql)
    if bad:
        raise UnsafeSQLError(
            f"the SQL holds a control or invisible character (U+{ord(bad.group()):04X}); "
            "write plain text"
        )
    try:
        sql.encode("utf-8")
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception as error:  # sqlglot's TokenError, a lone surrogate, anything else
        raise UnsafeSQLError(
            f"the SQL does not parse ({first_line(error)}); write one valid SELECT"
        ) from None
    if len(tokens) > limits.max_tokens:
        raise UnsafeSQLError(
            f"the SQL has {len(tokens):,} tokens (limit {limits.max_tokens:,}); write a shorter "
            "query (a long IN list or OR chain belongs in a narrower condition)"
        )
    depth = run = deepest = 0
    for token in tokens:
        kind = token.token_type
        run = run + 1 if kind in _PREFIX else 0
        if kind in _NESTING_OPEN:
            depth += 1
        elif kind in _NESTING_CLOSE:
            depth = max(depth - 1, 0)
        deepest = max(deepest, depth + run)
    if deepest > limits.max_nesting:
        raise UnsafeSQLError(
            f"the SQL nests {deepest} levels deep (limit {limits.max_nesting}); write a flatter "
            "query"
        )


def children(node: exp.Expression) -> Iterator[exp.Expression]:
    for value in node.args.values():
        if isinstance(value, exp.Expression):
            yield value
        elif isinstance(value, list):
            yield from (v for v in value if isinstance(v, exp.Expression))


def bounded_tree(statement: exp.Expression, limits: SQLLimits) -> None:
    """Refuse trees too deep or too large, measured without recursion."""
    count, stack = 0, [(statement, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > limits.max_depth:
            raise UnsafeSQLError(
                f"the SQL nests more than {limits.max_depth} levels deep; write a flatter query "
                "(IN (...) instead of long OR chains)"
            )
        if count > limits.max_nodes:
            raise UnsafeSQLError(
                f"the SQL has more than {limits.max_nodes:,} parts; write a shorter query"
            )
        stack.extend((child, depth + 1) for child in children(node))
