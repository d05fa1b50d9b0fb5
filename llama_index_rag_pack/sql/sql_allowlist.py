"""The allowlist of SQL node types, clauses and functions a reporting query may use (part of
:func:`~llama_index_rag_pack.sql.sql_safety.check_sql`).

Every node of the parsed tree must be of a listed type and carry only the arguments (clauses)
listed for that type; functions must be in :data:`ALLOWED_FUNCTIONS`. Anything else is refused
with the type's name, so a construct nobody thought of is refused by default.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from sqlglot import exp

from llama_index_rag_pack.sql.sql_limits import UnsafeSQLError, children

__all__ = ["ALLOWED_FUNCTIONS", "ALLOWED_NAMED_FUNCTIONS", "check_nodes", "describe_node"]


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


def _set(value: object) -> bool:
    return value not in (None, False, "", [])


def describe_node(node: exp.Expression) -> str:
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
    _check_position(node)


def _check_position(node: exp.Expression) -> None:
    """Where a node may stand, and the values some nodes may take."""
    parent = node.parent
    if isinstance(node, exp.Join):
        side = str(node.args.get("side") or "").upper()
        kind = str(node.args.get("kind") or "").upper()
        if side not in _JOIN_SIDES or kind not in _JOIN_KINDS:
            raise UnsafeSQLError(f"{side} {kind} JOIN is not allowed; use INNER/LEFT/CROSS JOIN")
    elif isinstance(node, exp.Table):
        if not isinstance(node.this, exp.Identifier):
            raise UnsafeSQLError(f"{describe_node(node)} is not allowed; read only listed tables")
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
            raise UnsafeSQLError(f"{describe_node(node)} is not allowed; name a column")
    elif isinstance(node, exp.DataType):
        if node.this not in _CAST_TYPES:
            raise UnsafeSQLError(
                f"type {describe_node(node)} is not allowed; cast only to text, number, boolean, "
                "date or time types"
            )
    elif isinstance(node, exp.Var):
        if not isinstance(parent, tuple(_VAR_PARENTS)) or node.name.upper() not in _UNITS:
            raise UnsafeSQLError(
                f"{node.name[:40]!r} is not allowed here; name a column or a date part "
                "(year, month, day, hour, ...)"
            )
    elif isinstance(node, _SEARCHES):
        _check_search(node)


_MAX_LITERAL = 64
#: Date and time parts a unit word may name (EXTRACT, INTERVAL, DATE_TRUNC ...): the generator
#: writes these words as they are, so nothing else may stand there.
_UNITS = frozenset(
    "YEAR YEARS QUARTER MONTH MONTHS WEEK WEEKS DAY DAYS HOUR HOURS MINUTE MINUTES SECOND SECONDS "
    "MILLISECOND MILLISECONDS MICROSECOND MICROSECONDS DOW DOY ISODOW ISOYEAR EPOCH DECADE "
    "CENTURY MILLENNIUM DAYOFWEEK DAYOFYEAR WEEKDAY ROWS RANGE GROUPS UNBOUNDED PRECEDING "
    "FOLLOWING CURRENT ROW".split()
)
# Functions whose running time grows with the product of two lengths, inside one call that no
# time-out interrupts: the searched-for or replacing argument must be a short literal.
_SEARCHES = (exp.Replace, exp.StrPosition, *_classes("SplitPart"))
_SEARCH_ARGS = {"expression", "replacement", "substr", "delimiter"}


def _check_search(node: exp.Expression) -> None:
    """REPLACE, INSTR/STRPOS/POSITION and SPLIT_PART search for (or put in) a short literal, and
    REPLACE is never nested (each one may grow a value ``_MAX_LITERAL`` times)."""
    if isinstance(node, exp.Replace) and node.this.find(exp.Replace):
        raise UnsafeSQLError("REPLACE inside REPLACE is not allowed; write a simpler expression")
    for key in _SEARCH_ARGS & set(node.args):
        value = node.args.get(key)
        literal = isinstance(value, exp.Literal) and value.is_string
        if value is not None and not (literal and len(value.name) <= _MAX_LITERAL):
            raise UnsafeSQLError(
                f"{describe_node(node).split('(')[0]}() searches for or inserts only a text "
                f"literal of at most {_MAX_LITERAL} characters; write a simpler expression"
            )


def _refusal(node: exp.Expression) -> str:
    if isinstance(node, (exp.DML, exp.DDL, exp.Command, exp.Pragma, exp.Attach, exp.Into)):
        return f"{node.key.upper()} is not allowed; only a read-only SELECT"
    if isinstance(node, exp.Func):
        name = node.name if isinstance(node, exp.Anonymous) else describe_node(node).split("(")[0]
        return f"function {name}() is not allowed; use standard SQL (see ALLOWED_FUNCTIONS)"
    if isinstance(node, (exp.Dot, exp.Tuple, exp.Struct, exp.Array, exp.TableColumn)):
        return (
            f"{describe_node(node)} is not allowed (row, composite and array values); "
            "select plain columns"
        )
    return f"{type(node).__name__} ({describe_node(node)}) is not allowed; write a plain SELECT"


def check_nodes(statement: exp.Expression) -> None:
    stack = [statement]
    while stack:
        node = stack.pop()
        _check_node(node)
        stack.extend(children(node))
