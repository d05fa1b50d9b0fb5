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

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.tokens import TokenType

from llama_index_rag_pack.core.errors import RagPackError
from llama_index_rag_pack.core.llm_output import strip_code_fences

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
_FENCED = re.compile(r"```[ \t]*(?:sql|sqlite|postgresql|postgres)?[ \t]*\n(.*?)```", re.S | re.I)
# Control characters other than tab and line breaks: NUL truncates strings in C drivers, the
# rest has no place in a query and hides text from people reading it.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


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
    """

    max_chars: int = 20_000
    max_tokens: int = 2_000
    max_nesting: int = 24
    max_depth: int = 200
    max_nodes: int = 4_000
    max_expanded: int = 50_000

    def __post_init__(self) -> None:
        names = ("max_chars", "max_tokens", "max_nesting", "max_depth", "max_nodes", "max_expanded")
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


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


# ---------------------------------------------------------------- the allowlist
def _classes(*names: str) -> frozenset[type[exp.Expression]]:
    """The sqlglot classes of these names that this sqlglot version has."""
    return frozenset(getattr(exp, n) for n in names if isinstance(getattr(exp, n, None), type))


_QUERY = frozenset(
    {"with_", "expressions", "distinct", "from_", "joins", "where", "group", "having"}
    | {"windows", "order", "limit", "offset"}
)
_BINARY = frozenset({"this", "expression"})
# Node type -> the arguments (clauses) it may carry. A node of a type not here, or with an
# argument not listed for its type, is rejected.
_STRUCTURE: dict[type[exp.Expression], frozenset[str]] = {
    exp.Select: _QUERY,
    exp.Union: frozenset({"with_", "this", "expression", "distinct", "order", "limit", "offset"}),
    exp.Subquery: frozenset({"this", "alias"}),
    exp.From: frozenset({"this"}),
    exp.Join: frozenset({"this", "on", "side", "kind"}),
    exp.Where: frozenset({"this"}),
    exp.Having: frozenset({"this"}),
    exp.Group: frozenset({"expressions"}),
    exp.Order: frozenset({"expressions"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Limit: frozenset({"expression"}),
    exp.Offset: frozenset({"expression"}),
    exp.Distinct: frozenset({"expressions", "on"}),
    exp.With: frozenset({"expressions"}),
    exp.CTE: frozenset({"this", "alias"}),
    exp.TableAlias: frozenset({"this", "columns"}),
    exp.Table: frozenset({"this", "alias"}),
    exp.Column: frozenset({"this", "table"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Star: frozenset(),
    exp.Alias: frozenset({"this", "alias"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Boolean: frozenset({"this"}),
    exp.Null: frozenset(),
    exp.Paren: frozenset({"this"}),
    exp.Not: frozenset({"this"}),
    exp.Neg: frozenset({"this"}),
    exp.Is: frozenset({"this", "expression", "negate"}),
    exp.In: frozenset({"this", "expressions", "query"}),
    exp.Between: frozenset({"this", "low", "high"}),
    exp.Case: frozenset({"this", "ifs", "default"}),
    exp.If: frozenset({"this", "true", "false"}),
    exp.Cast: frozenset({"this", "to"}),
    exp.DataType: frozenset({"this", "expressions", "nested", "kind"}),
    exp.DataTypeParam: frozenset({"this", "expression"}),
    exp.Exists: frozenset({"this"}),
    exp.Any: frozenset({"this"}),
    exp.All: frozenset({"this"}),
    exp.Interval: frozenset({"this", "unit"}),
    exp.Var: frozenset({"this"}),
    exp.Window: frozenset({"this", "partition_by", "order", "spec", "alias", "over"}),
    exp.WindowSpec: frozenset({"kind", "start", "start_side", "end", "end_side"}),
    exp.Filter: _BINARY,
    exp.WithinGroup: _BINARY,
    exp.Escape: _BINARY,
}
for _cls in (exp.Intersect, exp.Except):
    _STRUCTURE[_cls] = _STRUCTURE[exp.Union]
for _cls in _classes(
    *"And Or EQ NEQ GT GTE LT LTE Add Sub Mul Div IntDiv Mod DPipe NullSafeEQ".split(),
    *"Like ILike Glob SimilarTo".split(),
):
    _STRUCTURE[_cls] = _BINARY | {"negate", "safe", "escape", "typed"}
for _cls in _classes("Fetch"):
    _STRUCTURE[_cls] = frozenset({"direction", "count", "limit_options"})
for _cls in _classes("LimitOptions"):
    _STRUCTURE[_cls] = frozenset({"percent", "rows", "with_ties"})

#: Functions a reporting query may call (sqlglot classes); every other function, known to
#: sqlglot or not, is rejected. No function here reads files, the catalog, the session or
#: settings, sleeps, or builds a value much larger than its arguments.
ALLOWED_FUNCTIONS: frozenset[type[exp.Expression]] = _classes(
    # aggregates
    *"Count Sum Avg Min Max GroupConcat Stddev StddevPop StddevSamp Variance VariancePop".split(),
    *"LogicalAnd LogicalOr PercentileCont PercentileDisc Median ApproxDistinct".split(),
    # windows
    *"RowNumber Rank DenseRank PercentRank CumeDist Ntile Lag Lead FirstValue LastValue".split(),
    "NthValue",
    # numbers
    *"Abs Round Ceil Floor Sqrt Pow Ln Log Exp Sign SafeDivide".split(),
    # conditionals
    *"Coalesce Nullif Greatest Least".split(),
    # text
    *"Length Lower Upper Trim Substring StrPosition Left Right Initcap Concat ConcatWs".split(),
    *"Replace SplitPart Reverse Ascii".split(),
    # dates and times
    *"CurrentDate CurrentTimestamp CurrentTime Date Time Extract DateTrunc TimestampTrunc".split(),
    *"TimeToStr StrToTime StrToDate TsOrDsToTimestamp TsOrDsToDate DateAdd DateSub".split(),
    *"DateDiff TimestampAdd TimestampSub TimestampDiff Year Month Day Quarter DayOfWeek".split(),
    *"DayOfMonth DayOfYear WeekOfYear UnixToTime TimeToUnix".split(),
)
_FUNCTION_ARGS = {cls: frozenset(cls.arg_types) for cls in ALLOWED_FUNCTIONS}
#: Functions sqlglot does not type that are allowed by name: pure, and absent or harmless on
#: every backend.
ALLOWED_NAMED_FUNCTIONS = frozenset({"total", "julianday"})

#: Scalar types a value may be cast to (never a table's row type or a user-defined type).
_CAST_TYPES = frozenset(
    getattr(exp.DataType.Type, n)
    for n in (
        "TEXT VARCHAR CHAR NCHAR NVARCHAR BPCHAR INT TINYINT SMALLINT MEDIUMINT BIGINT UINT "
        "UBIGINT USMALLINT UTINYINT DECIMAL DOUBLE FLOAT BOOLEAN DATE DATETIME TIMESTAMP "
        "TIMESTAMPTZ TIMESTAMPLTZ TIMESTAMPNTZ TIME TIMETZ INTERVAL"
    ).split()
    if hasattr(exp.DataType.Type, n)
)
_VAR_PARENTS = _classes(
    "Extract", "Interval", "DateTrunc", "TimestampTrunc", "DateAdd", "DateSub", "DateDiff",
    "TimestampAdd", "TimestampSub", "TimestampDiff", "WindowSpec", "DataType",
)  # fmt: skip
_JOIN_SIDES = frozenset({"", "LEFT", "RIGHT", "FULL"})
_JOIN_KINDS = frozenset({"", "INNER", "OUTER", "CROSS"})
_NESTING_OPEN = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE}
_NESTING_CLOSE = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END}
_PREFIX = {TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE}


# ---------------------------------------------------------------- helpers
def extract_sql(text: str) -> str:
    """The SQL in an LLM reply: a fenced ```sql block, else the text from the first SELECT/WITH.

    Example:
        >>> extract_sql("Here you go:\\n```sql\\nSELECT 1;\\n```\\nHope it helps.")
        'SELECT 1;'
        >>> extract_sql("SQLQuery: SELECT title FROM books")
        'SELECT title FROM books'
    """
    text = text if isinstance(text, str) else ""
    fenced = _FENCED.search(text)
    body = fenced.group(1) if fenced else strip_code_fences(text)
    match = _SQL_START.search(body)
    return (body[match.start() :] if match else body).strip()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line[:200]


class _Deadline:
    """Raises when checking runs past the caller's deadline (``time.monotonic()`` seconds)."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline

    def check(self, phase: str) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise UnsafeSQLError(
                f"checking the SQL ran past the time-out ({phase}); write a shorter query"
            )


def _bounded_tokens(sql: str, dialect: str | None, limits: SQLLimits) -> None:
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
            f"the SQL does not parse ({_first_line(error)}); write one valid SELECT"
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


def _parse_one(sql: str, dialect: str | None) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except Exception as error:  # ParseError, RecursionError, parser bugs: one line each
        raise UnsafeSQLError(
            f"the SQL does not parse ({_first_line(error)}); write one valid SELECT"
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


def _children(node: exp.Expression) -> Iterator[exp.Expression]:
    for value in node.args.values():
        if isinstance(value, exp.Expression):
            yield value
        elif isinstance(value, list):
            yield from (v for v in value if isinstance(v, exp.Expression))


def _bounded_tree(statement: exp.Expression, limits: SQLLimits) -> None:
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
        stack.extend((child, depth + 1) for child in _children(node))


def _set(value: object) -> bool:
    return value not in (None, False, "", [])


def _describe(node: exp.Expression) -> str:
    text = node.sql()
    return text if len(text) <= 60 else text[:57] + "..."


def _check_node(node: exp.Expression) -> None:
    """One node against the allowlist: its type, its clauses, and where it may stand."""
    cls = type(node)
    if cls in ALLOWED_FUNCTIONS:
        allowed_args = _FUNCTION_ARGS[cls]
    elif isinstance(node, exp.Anonymous) and node.name.lower() in ALLOWED_NAMED_FUNCTIONS:
        allowed_args = frozenset({"this", "expressions"})
    elif isinstance(node, exp.Tuple) and isinstance(node.parent, exp.Distinct):
        allowed_args = frozenset({"expressions"})  # DISTINCT ON (a, b)
    elif cls in _STRUCTURE:
        allowed_args = _STRUCTURE[cls]
    else:
        raise UnsafeSQLError(_refusal(node))
    if isinstance(node, exp.With) and node.args.get("recursive"):
        raise UnsafeSQLError("WITH RECURSIVE is not allowed; write a non-recursive query")
    if isinstance(node, exp.Table) and (node.args.get("db") or node.args.get("catalog")):
        raise UnsafeSQLError(f"table {node.sql()} is qualified; use the bare table name")
    for key, value in node.args.items():
        if _set(value) and key not in allowed_args:
            clause = key.rstrip("_").replace("_", " ").upper()
            if isinstance(node, exp.Join) and key in ("using", "method"):
                clause = "NATURAL JOIN" if key == "method" else "JOIN ... USING"
                raise UnsafeSQLError(
                    f"{clause} is not allowed (it joins on columns nobody named); "
                    "write JOIN ... ON a.x = b.x"
                )
            raise UnsafeSQLError(
                f"{clause} in {cls.__name__.upper()} is not allowed; write a plain SELECT"
            )
    parent = node.parent
    if isinstance(node, exp.Join):
        side = str(node.args.get("side") or "").upper()
        kind = str(node.args.get("kind") or "").upper()
        if side not in _JOIN_SIDES or kind not in _JOIN_KINDS:
            raise UnsafeSQLError(f"{side} {kind} JOIN is not allowed; use INNER/LEFT/CROSS JOIN")
    elif isinstance(node, exp.Table):
        if not isinstance(node.this, exp.Identifier):
            raise UnsafeSQLError(f"{_describe(node)} is not allowed; read only the listed tables")
        if not isinstance(parent, (exp.From, exp.Join)):
            raise UnsafeSQLError(f"table {node.name!r} can only be read in FROM or JOIN")
        alias = node.args.get("alias")
        if isinstance(alias, exp.TableAlias) and alias.columns:
            raise UnsafeSQLError(
                f"column names after the alias of table {node.name!r} are not allowed (they "
                "rename columns by position, hidden ones included); alias the columns in SELECT"
            )
    elif isinstance(node, exp.Star):
        in_select = isinstance(parent, exp.Select) or (
            isinstance(parent, exp.Column) and isinstance(parent.parent, exp.Select)
        )
        if not (in_select or isinstance(parent, exp.Count)):
            raise UnsafeSQLError(
                "* is allowed only as SELECT *, SELECT t.* or COUNT(*); name the columns"
            )
    elif isinstance(node, exp.Column):
        if not isinstance(node.this, (exp.Identifier, exp.Star)):
            raise UnsafeSQLError(f"{_describe(node)} is not allowed; name a column")
    elif isinstance(node, exp.DataType):
        if node.this not in _CAST_TYPES:
            raise UnsafeSQLError(
                f"type {_describe(node)} is not allowed; cast only to text, number, boolean, "
                "date or time types"
            )
    elif isinstance(node, exp.Replace):
        _check_replace(node)
    elif isinstance(node, exp.Var) and not isinstance(parent, tuple(_VAR_PARENTS)):
        raise UnsafeSQLError(f"{node.name!r} is not allowed here; name a column")


_MAX_REPLACEMENT = 64


def _check_replace(node: exp.Replace) -> None:
    """REPLACE may grow a value at most ``_MAX_REPLACEMENT`` times, and is never nested: one
    function call runs to its end however long it takes, on every backend."""
    replacement = node.args.get("replacement")
    short = replacement is None or (
        isinstance(replacement, exp.Literal) and len(replacement.name) <= _MAX_REPLACEMENT
    )
    if not short or node.this.find(exp.Replace) or node.expression.find(exp.Replace):
        raise UnsafeSQLError(
            f"REPLACE takes a literal replacement of at most {_MAX_REPLACEMENT} characters and "
            "is not nested; write a simpler expression"
        )


def _refusal(node: exp.Expression) -> str:
    if isinstance(node, (exp.DML, exp.DDL, exp.Command, exp.Pragma, exp.Attach, exp.Into)):
        return f"{node.key.upper()} is not allowed; only a read-only SELECT"
    if isinstance(node, exp.Func):
        name = node.name if isinstance(node, exp.Anonymous) else _describe(node).split("(")[0]
        return f"function {name}() is not allowed; use standard SQL (see ALLOWED_FUNCTIONS)"
    if isinstance(node, (exp.Dot, exp.Tuple, exp.Struct, exp.Array, exp.TableColumn)):
        return (
            f"{_describe(node)} is not allowed (row, composite and array values); "
            "select plain columns"
        )
    return f"{type(node).__name__} ({_describe(node)}) is not allowed; write a plain SELECT"


def _check_nodes(statement: exp.Expression) -> None:
    stack = [statement]
    while stack:
        node = stack.pop()
        _check_node(node)
        stack.extend(_children(node))


# ---------------------------------------------------------------- names and scopes
def _with_of(node: exp.Expression) -> exp.With | None:
    value = node.args.get("with_") or node.args.get("with")
    return value if isinstance(value, exp.With) else None


def _visible_ctes(table: exp.Table) -> set[str]:
    """The CTE names visible where ``table`` stands (a CTE sees only the CTEs before it)."""
    names: set[str] = set()
    child, parent = table, table.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            ctes = parent.expressions
            index = next((i for i, c in enumerate(ctes) if c is child), len(ctes))
            names |= {c.alias_or_name.lower() for c in ctes[:index]}
        else:
            with_ = _with_of(parent)
            if with_ is not None and child is not with_:
                names |= {c.alias_or_name.lower() for c in with_.expressions}
        child, parent = parent, parent.parent
    return names


def _resolve_tables(
    statement: exp.Expression, allowed: Mapping[str, Sequence[str]]
) -> tuple[list[str], dict[int, str]]:
    """Every table reference resolved to a visible CTE or an allowed table.

    Returns the allowed tables read, in order, and ``id(table node) -> "cte"|"table"``.
    """
    allowed_lower = {t.lower(): t for t in allowed}
    seen: set[str] = set()
    for cte in statement.find_all(exp.CTE):
        name = cte.alias_or_name.lower()
        if name in seen:
            raise UnsafeSQLError(f"CTE {cte.alias_or_name!r} is defined twice; name each once")
        if name in allowed_lower:
            raise UnsafeSQLError(
                f"CTE {cte.alias_or_name!r} has the name of a table; give it another name"
            )
        seen.add(name)
    used: list[str] = []
    kinds: dict[int, str] = {}
    for table in statement.find_all(exp.Table):
        name = table.name.lower()
        if table.args.get("db") or table.args.get("catalog"):
            raise UnsafeSQLError(f"table {table.sql()} is qualified; use the bare table name")
        if name in _visible_ctes(table):
            kinds[id(table)] = "cte"
            continue
        if name not in allowed_lower:
            raise UnsafeSQLError(
                f"table {table.name or table.sql()!r} is not allowed; use only: "
                f"{', '.join(sorted(allowed))}"
            )
        kinds[id(table)] = "table"
        if allowed_lower[name] not in used:
            used.append(allowed_lower[name])
    return used, kinds


def _source_of(scope: Scope, alias: str) -> tuple[exp.Expression, object] | None:
    """``(FROM item, source)`` for ``alias`` in ``scope`` or an enclosing scope (correlation)."""
    current: Scope | None = scope
    while current is not None:
        if alias in current.selected_sources:
            return current.selected_sources[alias]
        current = current.parent
    return None


def _check_aliases_unique(scope: Scope) -> None:
    expression = scope.expression
    if not isinstance(expression, exp.Select):
        return
    items = [expression.args.get("from_")] + list(expression.args.get("joins") or [])
    names = [item.this.alias_or_name.lower() for item in items if item is not None]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise UnsafeSQLError(
            f"the alias {duplicated[0]!r} names two sources; give each source its own alias"
        )


def _order_by_output(column: exp.Column, scope: Scope) -> int | None:
    """The 1-based output position a bare ORDER BY / DISTINCT ON name refers to, else None."""
    selects = scope.expression.named_selects
    name = column.name
    return selects.index(name) + 1 if selects.count(name) == 1 else None


def _bare(column: exp.Column) -> str:
    return (
        f"{column.name!r} does not name a column of one table (a whole row, an alias or an "
        "ambiguous name); write table.column"
    )


def _bounded_expansion(scopes: list[Scope], limits: SQLLimits) -> None:
    """Refuse queries whose size, with each CTE/derived table inlined per read, is too large."""
    cost: dict[int, int] = {}
    for scope in scopes:  # sqlglot yields a scope after the scopes it reads
        total = sum(1 for _ in scope.expression.walk())
        for column in scope.columns:
            found = _source_of(scope, column.table) if column.table else None
            if found is not None and isinstance(found[1], Scope):
                total += cost.get(id(found[1].expression), 0)
        for child in scope.subquery_scopes + scope.set_operation_scopes:
            total += cost.get(id(child.expression), 0)
        cost[id(scope.expression)] = total
        if total > limits.max_expanded:
            raise UnsafeSQLError(
                f"the query expands to more than {limits.max_expanded:,} parts once its CTEs and "
                "subqueries are inlined; read each CTE fewer times"
            )


def _check_columns(
    statement: exp.Expression,
    allowed: Mapping[str, Sequence[str]],
    kinds: dict[int, str],
    limits: SQLLimits,
) -> None:
    """Every column, scope by scope, names an allowed column of the source its qualifier names."""
    allowed_lower = {t.lower(): {c.lower() for c in cs} for t, cs in allowed.items()}
    covered: set[int] = set()
    scopes = list(traverse_scope(statement))
    _bounded_expansion(scopes, limits)
    for scope in scopes:
        _check_aliases_unique(scope)
        order = scope.expression.args.get("order")
        distinct = scope.expression.args.get("distinct")
        by_output = [o.this for o in order.expressions] if order else []
        on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
        by_output += on.expressions if isinstance(on, exp.Tuple) else [on] if on else []
        for column in by_output:
            if isinstance(column, exp.Column) and not column.table:
                position = _order_by_output(column, scope)
                if position is None:
                    raise UnsafeSQLError(_bare(column))
                covered.add(id(column))
                column.replace(exp.Literal.number(position))
        for column in scope.columns:
            if id(column) in covered:
                continue
            covered.add(id(column))
            if isinstance(column.this, exp.Star):
                raise UnsafeSQLError(f"{column.sql()} could not be expanded; name the columns")
            if not column.table:
                raise UnsafeSQLError(_bare(column))
            found = _source_of(scope, column.table)
            if found is None:
                raise UnsafeSQLError(f"{column.sql()} names no table of the query; fix the alias")
            item, source = found
            name = column.name.lower()
            if isinstance(source, exp.Table):
                if kinds.get(id(item)) != "table":
                    raise UnsafeSQLError(f"{column.table!r} is ambiguous; rename the CTE or alias")
                if name not in allowed_lower.get(source.name.lower(), ()):
                    raise UnsafeSQLError(
                        f"column {column.name!r} of {source.name!r} is not allowed; use only "
                        "the listed columns"
                    )
            elif isinstance(source, Scope):
                if isinstance(item, exp.Table) and kinds.get(id(item)) != "cte":
                    raise UnsafeSQLError(f"{column.table!r} is ambiguous; rename the CTE or alias")
                outputs = {n.lower() for n in source.expression.named_selects}
                if name not in outputs:
                    raise UnsafeSQLError(
                        f"column {column.name!r} is not an output of {column.table!r}"
                    )
            else:  # pragma: no cover - sqlglot sources are tables or scopes
                raise UnsafeSQLError(f"{column.sql()} has an unknown source; name a column")
    for column in statement.find_all(exp.Column):
        if id(column) not in covered:
            raise UnsafeSQLError(
                f"column {column.sql()} could not be resolved to an allowed column; use only "
                "the allowed columns"
            )


def _qualified(
    statement: exp.Expression, allowed: Mapping[str, Sequence[str]], dialect: str | None
) -> exp.Expression:
    schema = {table: {column: "TEXT" for column in columns} for table, columns in allowed.items()}
    try:
        return qualify(statement, schema=schema, dialect=dialect, validate_qualify_columns=True)
    except Exception as error:  # OptimizeError, RecursionError, optimizer bugs
        first = _first_line(error).split(". Line")[0]
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
    clock = _Deadline(deadline)
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeSQLError("no SQL found in the reply; answer with one SELECT statement")
    _bounded_tokens(sql, dialect, limits)
    clock.check("reading")
    statement = _parse_one(sql, dialect)
    _bounded_tree(statement, limits)
    _check_nodes(statement)
    _resolve_tables(statement, allowed)
    clock.check("parsing")
    statement = _qualified(statement, allowed, dialect)
    clock.check("resolving names")
    _bounded_tree(statement, limits)
    _check_nodes(statement)
    used, kinds = _resolve_tables(statement, allowed)
    try:
        _check_columns(statement, allowed, kinds, limits)
        checked = statement.sql(dialect=dialect, comments=False)
        limited = exp.select("*").from_(statement.subquery("_limited")).limit(max_rows)
        limited_sql = limited.sql(dialect=dialect, comments=False)
    except UnsafeSQLError:
        raise
    except Exception as error:  # scope building or SQL generation failed on an odd tree
        raise UnsafeSQLError(f"the SQL could not be checked ({_first_line(error)})") from None
    clock.check("checking")
    return CheckedSQL(checked, limited_sql, tuple(used))
