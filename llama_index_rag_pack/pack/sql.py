"""Text-to-SQL from a pack: :meth:`SQLEngineMixin.make_sql_query_engine` (mixed into
:class:`~llama_index_rag_pack.RagPack`), answering from SQL tables with the pack's LLM and
citation styles."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_rag_pack.sql.sql_database import SafeSQLDatabase
    from llama_index_rag_pack.sql.sql_query_engine import SQLQueryEngine

__all__ = ["SQLEngineMixin"]


class SQLEngineMixin:
    """Adds :meth:`make_sql_query_engine` to a pack that has ``llm`` and ``callback_manager``."""

    llm: Any
    callback_manager: Any

    def make_sql_query_engine(
        self,
        database: SafeSQLDatabase | str | Path,
        tables: Sequence[str] | None = None,
        *,
        citation_style: Any = "markdown",
        **options: Any,
    ) -> SQLQueryEngine:
        """A :class:`~llama_index_rag_pack.SQLQueryEngine` over ``tables`` of ``database`` (a
        SQLite file, opened read-only, or a PostgreSQL URL), answering with the pack's LLM.

        ``options`` go to the engine: ``max_rows``, ``timeout_s``, ``sample_rows``, ``columns``,
        ``max_result_bytes``, ``role_check``, ``repair``, ``max_tables_in_prompt``,
        ``table_context``, prompts. The answer cites the SQL and the rows in ``citation_style``;
        with more tables than fit the prompt, the pack's embedding model picks the tables shown.
        """
        from llama_index_rag_pack.sql.sql_query_engine import SQLQueryEngine

        options.setdefault("embed_model", getattr(self, "embed_model", None))
        return SQLQueryEngine(
            database,
            tables,
            llm=self.llm,
            style=citation_style,
            callback_manager=self.callback_manager,
            **options,
        )
