"""Tables, CTEs and columns resolved scope by scope (part of
:func:`~llama_index_rag_pack.sql.sql_safety.check_sql`).

Every table is an allowed table or a CTE visible where it stands; every name binds one source
in the whole statement (or always the same table or CTE), so a qualifier means the same source
whatever a database's scoping rule; every column of the qualified tree names a visible column of
the source its qualifier names, checked against sqlglot's scopes; the query's size and the
subqueries it holds, with every CTE and derived table inlined, are bounded.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, find_all_in_scope, traverse_scope

from llama_index_rag_pack.sql.sql_limits import SQLLimits, UnsafeSQLError

__all__ = ["check_columns", "resolve_tables"]


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


def resolve_tables(
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
    _check_bindings(statement, kinds)
    return used, kinds


def _check_bindings(statement: exp.Expression, kinds: dict[int, str]) -> None:
    """Each alias (or bare table/CTE name) names one source in the whole statement.

    Databases differ in which enclosing or sibling FROM items a qualifier can see (PostgreSQL
    hides a non-LATERAL derived table's siblings, a CTE body's and an ``ON`` clause's, and then
    looks one level up; sqlglot does not), so a name bound twice can be read by the checker as
    one source and by the database as another. A name may be bound again only to the same
    allowed table or the same CTE (CTE names are unique): it then has the same columns, whichever
    binding the database picks.
    """
    bound: dict[str, tuple[str, object]] = {}
    bindings: list[tuple[str, tuple[str, object]]] = [
        (cte.alias_or_name, ("cte", cte.alias_or_name.lower()))
        for cte in statement.find_all(exp.CTE)
    ]
    for item in statement.find_all(exp.From, exp.Join):
        source = item.this
        if isinstance(source, exp.Table) and kinds.get(id(source)):
            bindings.append((source.alias_or_name, (kinds[id(source)], source.name.lower())))
        else:  # a derived table: a source of its own (unnamed ones are named when qualified)
            bindings.append((source.alias_or_name, ("subquery", id(source))))
    for name, identity in bindings:
        if name and bound.setdefault(name.lower(), identity) != identity:
            raise UnsafeSQLError(
                f"the name {name!r} is given to two different sources (tables, CTEs or "
                "subqueries) in the query; give each source its own alias"
            )


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


def _check_outputs_unique(scope: Scope) -> None:
    """A CTE or derived table names each of its columns once (a duplicate name makes ``*`` and
    qualified references ambiguous)."""
    if not (scope.is_derived_table or scope.is_cte):
        return
    names = [n.lower() for n in scope.expression.named_selects]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated or len(names) != len(scope.expression.selects):
        what = repr(duplicated[0]) if duplicated else "an unnamed column"
        raise UnsafeSQLError(
            f"a CTE or subquery has the column {what} more than once or unnamed; alias each "
            "column once"
        )


def _order_by_output(column: exp.Column, scope: Scope) -> int | None:
    """The 1-based output position a bare ORDER BY / DISTINCT ON name refers to, else None."""
    selects = scope.expression.named_selects
    name = column.name
    return selects.index(name) + 1 if selects.count(name) == 1 else None


def _rewrite_by_output(scope: Scope, covered: set[int]) -> None:
    """Bare ``ORDER BY`` / ``DISTINCT ON`` names of output columns become their positions."""
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


def _own_accumulators(scope: Scope) -> int:
    """Aggregate and window calls of ``scope`` itself (a window over an aggregate counts once)."""
    return sum(
        1
        for node in find_all_in_scope(scope.expression, exp.AggFunc, exp.Window)
        if not (isinstance(node, exp.AggFunc) and isinstance(node.parent, exp.Window))
    )


def _bounded_subqueries(scopes: list[Scope], limits: SQLLimits) -> None:
    """Refuse queries that hold too many subqueries (derived tables and CTE reads included) or
    aggregate and window calls at once.

    Each may keep a value of up to ``max_result_bytes`` for the whole statement (SQLite keeps an
    uncorrelated scalar subquery's result and materialises what it cannot flatten; an aggregate
    or a window keeps its running value), so the counts bound the memory the value-length limit
    alone does not. A CTE or derived table counts once per read, with what it holds, as a
    database may inline it there.
    """
    held: dict[int, tuple[int, int]] = {}
    for scope in scopes:  # sqlglot yields a scope after the scopes it reads
        reads = [(1, c) for c in scope.subquery_scopes]
        reads += [(0, c) for c in scope.set_operation_scopes]
        reads += [(1, src) for _, src in scope.selected_sources.values() if isinstance(src, Scope)]
        subqueries, accumulators = 0, _own_accumulators(scope)
        for own, child in reads:
            child_subqueries, child_accumulators = held.get(id(child.expression), (0, 0))
            subqueries += own + child_subqueries
            accumulators += child_accumulators
        held[id(scope.expression)] = (subqueries, accumulators)
        if subqueries > limits.max_subqueries:
            raise UnsafeSQLError(
                f"the query holds more than {limits.max_subqueries} subqueries (scalar, IN, "
                "EXISTS, derived tables, CTE reads; limit max_subqueries); use joins or fewer "
                "subqueries"
            )
        if accumulators > limits.max_aggregates:
            raise UnsafeSQLError(
                f"the query holds more than {limits.max_aggregates} aggregate and window calls "
                "(CTEs counted where they are read; limit max_aggregates); compute fewer at once"
            )


def check_columns(
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
    _bounded_subqueries(scopes, limits)
    for scope in scopes:
        _check_aliases_unique(scope)
        _check_outputs_unique(scope)
        _rewrite_by_output(scope, covered)
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
