"""Text-to-SQL with safety: :class:`SQLQueryEngine`, a LlamaIndex query engine over SQL tables.

The LLM sees only the allowed tables' ``CREATE TABLE`` lines (allowed columns only) and a few
sample rows. Its SQL is extracted tolerantly (code fences, prose around it), checked by
:func:`~llama_index_rag_pack.sql.sql_safety.check_sql` and run by :class:`SafeSQLDatabase`
(read-only, row limit, time-out). A rejected or failing query is sent back to the LLM once with
the error; a second failure ends in a one-line answer saying why. The answer cites the SQL and the
rows it used, through the pack's reference styles.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.citations.cited_responses import CitedResponse, CitedResponseBuilder
from llama_index_rag_pack.citations.reference_styles import ReferenceStyle
from llama_index_rag_pack.core.query_bases import PackQueryEngine, PromptAttributes
from llama_index_rag_pack.models.json_output import json_output, supports_json_schema
from llama_index_rag_pack.models.settings import LazyLLMMixin
from llama_index_rag_pack.sql.sql_database import (
    SafeSQLDatabase,
    SQLExecutionError,
    SQLResult,
)
from llama_index_rag_pack.sql.sql_safety import UnsafeSQLError, extract_sql
from llama_index_rag_pack.sql.sql_tables import (
    DEFAULT_MAX_TABLES_IN_PROMPT,
    SQLTableSelector,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from llama_index.core.llms import LLM

__all__ = [
    "SQL_REPLY_FORMATS",
    "SQL_REPLY_SCHEMA",
    "DEFAULT_SQL_ANSWER_PROMPT",
    "DEFAULT_SQL_PROMPT",
    "DEFAULT_SQL_REPAIR_PROMPT",
    "SQLQueryEngine",
]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

# A refused query is kept (and shown to the LLM for repair) up to this many characters.
_MAX_SHOWN_SQL = 2_000

DEFAULT_SQL_PROMPT = PromptTemplate(
    "You write one {dialect} SELECT statement that answers the question. Use only these tables "
    "and columns:\n\n{schema}\n\nQuestion: {query_str}\n{reply_format}\n"
)
DEFAULT_SQL_REPAIR_PROMPT = PromptTemplate(
    "This {dialect} query was rejected or failed.\n\nTables:\n{schema}\n\nQuestion: {query_str}"
    "\nQuery:\n{sql}\nError: {error}\n\nWrite one corrected SELECT statement. {reply_format}\n"
)
#: How the SQL reply is asked for: in a fenced block, or as JSON from an LLM held to
#: :data:`SQL_REPLY_SCHEMA` (the local llama.cpp model), whose reply then always parses.
SQL_REPLY_FORMATS = {
    "text": "Answer with the SQL only, in a ```sql block.",
    "json": 'Answer with JSON only: {"sql": "<the SELECT statement>"}.',
}
SQL_REPLY_SCHEMA = {
    "type": "object",
    "properties": {"sql": {"type": "string", "maxLength": 4000}},
    "required": ["sql"],
    "additionalProperties": False,
}
DEFAULT_SQL_ANSWER_PROMPT = PromptTemplate(
    "Answer the question from the query result. Cite the sources you use as [n](id=k): id=1 is "
    "the SQL query, id=2.. are the rows.\n\n{context_str}\n\nQuestion: {query_str}\nAnswer: "
)


def _result_nodes(result: SQLResult) -> list[NodeWithScore]:
    nodes = [TextNode(text=result.sql, metadata={"title": f"SQL: {result.sql}", "sql": result.sql})]
    for number, row in enumerate(result.rows, start=1):
        text = ", ".join(f"{c}={v!r}" for c, v in zip(result.columns, row, strict=False))
        meta = {"title": f"row {number}: {text}"[:120], "sql_row": number}
        nodes.append(TextNode(text=text, metadata=meta))
    return [NodeWithScore(node=n, score=1.0) for n in nodes]


def _context(nodes: Sequence[NodeWithScore]) -> str:
    return "\n".join(f"id={i}: {n.node.get_content()}" for i, n in enumerate(nodes, start=1))


class SQLQueryEngine(PromptAttributes, LazyLLMMixin, PackQueryEngine):
    """Answer questions from SQL tables, with the safety enforced in code, not in the prompt.

    Args:
        database: A :class:`SafeSQLDatabase`, a SQLite file path (read-only) or a SQLAlchemy URL.
        tables: Allowed tables (required unless ``database`` is a :class:`SafeSQLDatabase`).
        llm: Any LlamaIndex LLM (default: resolved on first use, see ``settings.resolve_llm``).
        style: Reference style for the cited answer (``markdown``, ``text``, ``html``, ``empty``).
        repair: Ask the LLM once to fix a rejected or failing query (default ``True``).
        max_rows, timeout_s, sample_rows, columns, max_result_bytes, role_check: passed to
            :class:`SafeSQLDatabase` when ``database`` is a path or URL.
        max_tables_in_prompt: With more allowed tables than this, only that many closest to
            the question are described in the prompt (:class:`SQLTableSelector`: each table's
            name, columns, sample values and ``table_context`` embedded once); the safety checks
            still allow every configured table.
        table_context: Optional ``{table: text}`` saying what a table holds, for that choice.
        embed_model: Embeds the table descriptions and questions (default: the pack's).

    The response is a :class:`CitedResponse`; ``metadata`` holds ``sql``, ``columns``, ``rows``,
    ``attempts`` (each SQL tried, with its error), ``tables_in_prompt`` and ``error`` when no
    query could run.

    Example:
        >>> import sqlite3, tempfile, os
        >>> from llama_index_rag_pack.testing import ScriptedLLM
        >>> path = os.path.join(tempfile.mkdtemp(), "shop.db")
        >>> with sqlite3.connect(path) as c:
        ...     _ = c.execute("CREATE TABLE items (name TEXT, price REAL)")
        ...     _ = c.execute("INSERT INTO items VALUES ('pen', 1.5)")
        >>> llm = ScriptedLLM(replies=["```sql\\nSELECT price FROM items\\n```", "1.5 [1](id=2)."])
        >>> engine = SQLQueryEngine(path, tables=["items"], llm=llm, style="text")
        >>> print(engine.query("What does a pen cost?").response)
        1.5 [1]. [2]
        <BLANKLINE>
        Sources:
          [1] row 1: price=1.5
          [2] SQL: SELECT "items"."price" AS "price" FROM "items" AS "items"
    """

    prompt_attributes = {
        "sql_prompt": "_sql_prompt",
        "repair_prompt": "_repair_prompt",
        "answer_prompt": "_answer_prompt",
    }

    def __init__(
        self,
        database: SafeSQLDatabase | str | Path,
        tables: Sequence[str] | None = None,
        *,
        llm: LLM | None = None,
        style: str | ReferenceStyle | None = "markdown",
        repair: bool = True,
        max_rows: int = 50,
        timeout_s: float = 5.0,
        sample_rows: int = 3,
        columns: dict[str, Sequence[str]] | None = None,
        max_result_bytes: int = 1_000_000,
        role_check: str = "refuse",
        sql_prompt: BasePromptTemplate | None = None,
        repair_prompt: BasePromptTemplate | None = None,
        answer_prompt: BasePromptTemplate | None = None,
        callback_manager: CallbackManager | None = None,
        max_tables_in_prompt: int = DEFAULT_MAX_TABLES_IN_PROMPT,
        table_context: Mapping[str, str] | None = None,
        embed_model: Any = None,
    ) -> None:
        if not isinstance(database, SafeSQLDatabase):
            database = SafeSQLDatabase(
                database,
                tables=list(tables or []),
                columns=columns,
                max_rows=max_rows,
                timeout_s=timeout_s,
                sample_rows=sample_rows,
                max_result_bytes=max_result_bytes,
                role_check=role_check,
            )
        self.database = database
        self._llm = llm
        self.repair = repair
        self._responses = CitedResponseBuilder("sql", style=style)
        self._sql_prompt = sql_prompt or DEFAULT_SQL_PROMPT
        self._repair_prompt = repair_prompt or DEFAULT_SQL_REPAIR_PROMPT
        self._answer_prompt = answer_prompt or DEFAULT_SQL_ANSWER_PROMPT
        self._schema: str | None = None
        self._descriptions: dict[str, str] | None = None
        self._table_options = {
            "top_k": max_tables_in_prompt,
            "embed_model": embed_model,
            "table_context": table_context,
        }
        # options checked now; the descriptions are read and embedded on first use
        SQLTableSelector({t: "" for t in database.allowed}, **self._table_options)
        self._tables: SQLTableSelector | None = None
        super().__init__(callback_manager=callback_manager)

    # ------------------------------------------------------------------ prompts
    @property
    def schema(self) -> str:
        """Every allowed table as the LLM is shown it: allowed columns, sample rows."""
        if self._schema is None:
            self._schema = "\n\n".join(self.descriptions().values())
        return self._schema

    def descriptions(self) -> dict[str, str]:
        """Per allowed table, what the LLM is shown of it (read once)."""
        if self._descriptions is None:
            self._descriptions = self.database.table_descriptions()
        return self._descriptions

    @property
    def table_selector(self) -> SQLTableSelector | None:
        """The selector of the tables put in the prompt (``None``: every table goes in)."""
        if len(self.database.allowed) <= self._table_options["top_k"]:
            return None
        if self._tables is None:
            self._tables = SQLTableSelector(self.descriptions(), **self._table_options)
        return self._tables

    def _schema_for(self, query: str) -> tuple[str, list[str]]:
        """The schema text of the prompt for ``query``, and the tables in it."""
        selector = self.table_selector
        if selector is None:
            return self.schema, list(self.database.allowed)
        tables = selector.select(query)
        return "\n\n".join(self.descriptions()[t] for t in tables), tables

    async def _aschema_for(self, query: str) -> tuple[str, list[str]]:
        if self._descriptions is None:
            await asyncio.to_thread(self.descriptions)
        selector = self.table_selector
        if selector is None:
            return self.schema, list(self.database.allowed)
        tables = await selector.aselect(query)
        return "\n\n".join(self.descriptions()[t] for t in tables), tables

    @property
    def _json_replies(self) -> bool:
        return supports_json_schema(self.llm)

    def _prompt_args(self, query: str, schema: str) -> dict[str, Any]:
        reply_format = SQL_REPLY_FORMATS["json" if self._json_replies else "text"]
        return {
            "dialect": self.database.dialect,
            "schema": schema,
            "query_str": query,
            "reply_format": reply_format,
        }

    def _sql_schema(self) -> dict[str, Any] | None:
        return SQL_REPLY_SCHEMA if self._json_replies else None

    # ------------------------------------------------------------------ steps
    @dispatcher.span
    def generate_sql(self, prompt: BasePromptTemplate, args: dict[str, Any]) -> str:
        """The LLM's reply with a query (``prompt``: the first or the repair prompt)."""
        with json_output(self._sql_schema()):
            return self.llm.predict(prompt, **args)

    @dispatcher.span
    async def agenerate_sql(self, prompt: BasePromptTemplate, args: dict[str, Any]) -> str:
        """Async :meth:`generate_sql`."""
        with json_output(self._sql_schema()):
            return await self.llm.apredict(prompt, **args)

    @dispatcher.span
    def write_answer(self, query: str, nodes: list[NodeWithScore]) -> str:
        """The LLM's answer to ``query`` from the result rows."""
        return self.llm.predict(self._answer_prompt, context_str=_context(nodes), query_str=query)

    @dispatcher.span
    async def awrite_answer(self, query: str, nodes: list[NodeWithScore]) -> str:
        """Async :meth:`write_answer`."""
        context = _context(nodes)
        return await self.llm.apredict(self._answer_prompt, context_str=context, query_str=query)

    def _try(self, reply: str, attempts: list[dict[str, Any]]) -> SQLResult | None:
        sql = extract_sql(reply)
        try:
            result = self.database.run(sql)
        except (UnsafeSQLError, SQLExecutionError) as error:
            logger.warning("SQL attempt %d refused: %s", len(attempts) + 1, error)
            shown = sql if len(sql) <= _MAX_SHOWN_SQL else sql[:_MAX_SHOWN_SQL] + " ..."
            attempts.append({"sql": shown, "error": str(error)})
            return None
        attempts.append({"sql": result.sql, "error": None})
        return result

    def _repair_args(self, args: dict[str, Any], attempts: list[dict[str, Any]]) -> dict[str, Any]:
        last = attempts[-1]
        return {**args, "sql": last["sql"], "error": last["error"]}

    def _failed(self, query: str, attempts: list[dict[str, Any]]) -> CitedResponse:
        error = attempts[-1]["error"]
        text = f"No safe SQL query could answer this: {error}"
        meta = {"mode": "sql", "sql": None, "attempts": attempts, "error": error, "query": query}
        return CitedResponse(response=text, answer=text, raw_answer=text, metadata=meta)

    def _respond(
        self, query: str, result: SQLResult, raw: str, attempts: list[dict[str, Any]]
    ) -> CitedResponse:
        nodes = _result_nodes(result)
        marked = raw if "(id=1" in raw.replace(" ", "") else f"{raw.rstrip()} [1](id=1)"
        response = self._responses.build(nodes, marked, raw)
        response.metadata = {
            **(response.metadata or {}),
            "sql": result.sql,
            "columns": result.columns,
            "rows": [list(r) for r in result.rows],
            "tables": list(result.tables),
            "attempts": attempts,
            "error": None,
            "query": query,
        }
        return response

    # ------------------------------------------------------------------ query
    def _answer(self, query_bundle: QueryBundle, query: str) -> CitedResponse:
        attempts: list[dict[str, Any]] = []
        schema, tables = self._schema_for(query)
        args = self._prompt_args(query, schema)
        result = self._try(self.generate_sql(self._sql_prompt, args), attempts)
        if result is None and self.repair:
            reply = self.generate_sql(self._repair_prompt, self._repair_args(args, attempts))
            result = self._try(reply, attempts)
        if result is None:
            return _with_tables(self._failed(query, attempts), tables)
        raw = self.write_answer(query, _result_nodes(result))
        return _with_tables(self._respond(query, result, raw, attempts), tables)

    async def _atry(self, reply: str, attempts: list[dict[str, Any]]) -> SQLResult | None:
        return await asyncio.to_thread(self._try, reply, attempts)

    async def _aanswer(self, query_bundle: QueryBundle, query: str) -> CitedResponse:
        attempts: list[dict[str, Any]] = []
        schema, tables = await self._aschema_for(query)
        args = self._prompt_args(query, schema)
        result = await self._atry(await self.agenerate_sql(self._sql_prompt, args), attempts)
        if result is None and self.repair:
            repair_args = self._repair_args(args, attempts)
            reply = await self.agenerate_sql(self._repair_prompt, repair_args)
            result = await self._atry(reply, attempts)
        if result is None:
            return _with_tables(self._failed(query, attempts), tables)
        raw = await self.awrite_answer(query, _result_nodes(result))
        return _with_tables(self._respond(query, result, raw, attempts), tables)


def _with_tables(response: CitedResponse, tables: list[str]) -> CitedResponse:
    """Record which tables the prompt described."""
    response.metadata = {**(response.metadata or {}), "tables_in_prompt": tables}
    return response
