"""``rag-pack sql --db FILE --tables a,b "question"``: text-to-SQL over a read-only database.

The database is a SQLite file (opened read-only) or a PostgreSQL URL; only ``--tables`` (and of
them only ``--columns``, when given) are shown to the LLM and readable. Prints the cited answer
(the SQL and the rows it used), or the result as JSON with ``--format json``. Exit status 1 when
no safe query could answer. ``--setup-role NAME`` prints the PostgreSQL statements that create a
role reading only those columns, and exits without asking anything.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from llama_index_rag_pack.cli import output as _cli
from llama_index_rag_pack.cli.options import positive_int

__all__ = ["cmd_sql", "register"]


def _tables(text: str) -> list[str]:
    tables = [t.strip() for t in text.split(",") if t.strip()]
    if not tables:
        raise argparse.ArgumentTypeError("name at least one table, like --tables books,authors")
    return tables


def _columns(text: str) -> dict[str, list[str]]:
    visible: dict[str, list[str]] = {}
    for item in (t.strip() for t in text.split(",")):
        table, dot, column = item.partition(".")
        if not item or not dot or not table or not column:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not TABLE.COLUMN; write --columns people.id,people.name"
            )
        visible.setdefault(table, []).append(column)
    return visible


def register(subparsers: Any) -> None:
    """Add ``rag-pack sql`` to the CLI."""
    p = subparsers.add_parser(
        "sql", help="answer a question from SQL tables (read-only, checked SELECT, time-out)"
    )
    p.add_argument("question", nargs="?", help="the question to answer")
    p.add_argument("--db", required=True, help="SQLite file (read-only) or a SQLAlchemy URL")
    p.add_argument(
        "--tables", required=True, type=_tables, help="comma-separated tables the LLM may read"
    )
    p.add_argument(
        "--columns",
        type=_columns,
        help="the only visible columns, as TABLE.COLUMN,... (default: every column of --tables; "
        "a table not named here keeps all its columns)",
    )
    p.add_argument(
        "--setup-role",
        metavar="NAME",
        help="print the PostgreSQL statements that create role NAME reading only the visible "
        "columns (run them as the tables' owner), then exit",
    )
    p.add_argument(
        "--allow-broad-role",
        action="store_true",
        help="PostgreSQL: only warn when the role can read hidden columns or other tables "
        "(default: refuse to run)",
    )
    p.add_argument("--max-rows", type=int, default=50, help="row limit per query (default 50)")
    p.add_argument("--timeout", type=float, default=5.0, help="query time-out, s (default 5)")
    p.add_argument(
        "--max-tables-in-prompt",
        type=positive_int,
        default=None,
        metavar="N",
        help="with more --tables than N, only the N closest to the question are described to the "
        "LLM (embedding similarity; default: SQLQueryEngine's, 20)",
    )
    p.add_argument(
        "--format",
        choices=("text", "markdown", "html", "json"),
        default="text",
        help="citation style of the answer, or json (answer, sql, rows, attempts)",
    )
    p.set_defaults(func=cmd_sql)


def cmd_sql(args: argparse.Namespace) -> int:
    """Answer ``args.question`` from ``args.tables`` of ``args.db``."""
    from llama_index_rag_pack.core.errors import ConfigurationError
    from llama_index_rag_pack.models.settings import resolve_llm
    from llama_index_rag_pack.sql.sql_database import SafeSQLDatabase
    from llama_index_rag_pack.sql.sql_query_engine import SQLQueryEngine

    # the database first: a wrong --db, --tables or --columns fails before any model loads
    setup = bool(args.setup_role)
    if not setup and not (args.question or "").strip():
        raise ConfigurationError("the question is empty; ask one, or pass --setup-role NAME")
    database = SafeSQLDatabase(
        args.db,
        tables=args.tables,
        columns=args.columns,
        max_rows=args.max_rows,
        timeout_s=args.timeout,
        role_check="off" if setup else "warn" if args.allow_broad_role else "refuse",
    )
    if setup:
        _cli.out("\n".join(database.role_setup_sql(args.setup_role)))
        return 0
    style = "text" if args.format == "json" else args.format
    options = {"embed_model": args.embed_model}
    if args.max_tables_in_prompt is not None:
        options["max_tables_in_prompt"] = args.max_tables_in_prompt
    engine = SQLQueryEngine(database, llm=resolve_llm(args.llm), style=style, **options)
    response = engine.query(args.question)
    meta = response.metadata or {}
    if args.format == "json":
        keys = ("sql", "columns", "rows", "attempts", "error", "tables_in_prompt")
        payload = {"answer": response.answer or response.response, **{k: meta.get(k) for k in keys}}
        _cli.out(json.dumps(payload, indent=2, default=str))
    else:
        _cli.out(response.response)
    return 0 if meta.get("error") is None else 1
