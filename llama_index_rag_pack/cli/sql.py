"""``rag-pack sql --db FILE --tables a,b "question"``: text-to-SQL over a read-only database.

The database is a SQLite file (opened read-only) or any SQLAlchemy URL; only ``--tables`` are
shown to the LLM and readable. Prints the cited answer (the SQL and the rows it used), or the
result as JSON with ``--format json``. Exit status 1 when no safe query could answer.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from llama_index_rag_pack.cli import output as _cli

__all__ = ["cmd_sql", "register"]


def _tables(text: str) -> list[str]:
    tables = [t.strip() for t in text.split(",") if t.strip()]
    if not tables:
        raise argparse.ArgumentTypeError("name at least one table, like --tables books,authors")
    return tables


def register(subparsers: Any) -> None:
    """Add ``rag-pack sql`` to the CLI."""
    p = subparsers.add_parser(
        "sql", help="answer a question from SQL tables (read-only, checked SELECT, time-out)"
    )
    p.add_argument("question", help="the question to answer")
    p.add_argument("--db", required=True, help="SQLite file (read-only) or a SQLAlchemy URL")
    p.add_argument(
        "--tables", required=True, type=_tables, help="comma-separated tables the LLM may read"
    )
    p.add_argument("--max-rows", type=int, default=50, help="row limit per query (default 50)")
    p.add_argument("--timeout", type=float, default=5.0, help="query time-out, s (default 5)")
    p.add_argument(
        "--format",
        choices=("text", "markdown", "html", "json"),
        default="text",
        help="citation style of the answer, or json (answer, sql, rows, attempts)",
    )
    p.set_defaults(func=cmd_sql)


def cmd_sql(args: argparse.Namespace) -> int:
    """Answer ``args.question`` from ``args.tables`` of ``args.db``."""
    from llama_index_rag_pack.components.settings import resolve_llm
    from llama_index_rag_pack.components.sql_database import SafeSQLDatabase
    from llama_index_rag_pack.components.sql_query_engine import SQLQueryEngine

    # the database first: a wrong --db or --tables fails before any model loads
    database = SafeSQLDatabase(
        args.db, tables=args.tables, max_rows=args.max_rows, timeout_s=args.timeout
    )
    style = "text" if args.format == "json" else args.format
    engine = SQLQueryEngine(database, llm=resolve_llm(args.llm), style=style)
    response = engine.query(args.question)
    meta = response.metadata or {}
    if args.format == "json":
        keys = ("sql", "columns", "rows", "attempts", "error")
        payload = {"answer": response.answer or response.response, **{k: meta.get(k) for k in keys}}
        _cli.out(json.dumps(payload, indent=2, default=str))
    else:
        _cli.out(response.response)
    return 0 if meta.get("error") is None else 1
