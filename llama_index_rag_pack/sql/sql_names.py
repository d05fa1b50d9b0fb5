"""Table and column names that differ only by case, refused when a server database is opened
(part of :class:`~llama_index_rag_pack.sql.sql_database.SafeSQLDatabase`).

The SQL checker compares table and column names case-insensitively (SQLite's rule).
PostgreSQL folds unquoted names to lower case but compares quoted names exactly, and other
servers may keep tables ``Staff`` and ``staff`` apart: there a name the checker reads as an
allowed table or a visible column could reach another table or a hidden column. Refusing the
databases where a name the checker allows has a twin that differs only by case makes the
checker's comparison exact: a name maps to one object, which the server reads or reports
missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["check_case_twins"]

# Every relation a query's unqualified name can reach: the schemas on the search path, with
# pg_catalog (searched first when not listed). Indexes and composite types can't be read.
_PG_RELATIONS = sa.text(
    "SELECT n.nspname, c.relname, n.nspname = current_schema() "
    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = ANY (current_schemas(true)) AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')"
)
# Columns every PostgreSQL table has besides its own (a user column "CTID" folds onto ctid).
_PG_SYSTEM_COLUMNS = ("tableoid", "xmin", "cmin", "xmax", "cmax", "ctid", "oid")


def _relations(engine: sa.Engine) -> list[tuple[str, bool]]:
    """``(name, in the default schema)`` of every relation a query's table name can reach."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            try:
                rows = connection.execute(_PG_RELATIONS).all()
            finally:
                connection.rollback()
        return [(name, bool(here)) for _, name, here in rows]
    inspector = sa.inspect(engine)
    names = set(inspector.get_table_names()) | set(inspector.get_view_names())
    return [(name, True) for name in names]


def check_case_twins(
    engine: sa.Engine,
    allowed: Mapping[str, Sequence[str]],
    hidden: Mapping[str, Sequence[str]],
) -> None:
    """Refuse a server database where an allowed table, or a visible column, has another
    relation or column whose name differs from it only by case (or only by schema).

    Raises:
        ConfigurationError: One line naming the two names.
    """
    folded = {table.lower(): table for table in allowed}
    for name, in_default in _relations(engine):
        table = folded.get(name.lower())
        if table is not None and (name != table or not in_default):
            raise ConfigurationError(
                f"the database has a relation {name!r} besides the allowed table {table!r} and "
                "the SQL checker compares names ignoring case; rename one, or move it off the "
                "search path"
            )
    system = _PG_SYSTEM_COLUMNS if engine.dialect.name == "postgresql" else ()
    for table, visible in allowed.items():
        others = [*visible, *hidden.get(table, ()), *system]
        for column in visible:
            twin = next((o for o in others if o != column and o.lower() == column.lower()), None)
            if twin is not None:
                raise ConfigurationError(
                    f"table {table!r} has the columns {column!r} and {twin!r}, which differ only "
                    "by case, and the SQL checker compares names ignoring case; rename one"
                )
