"""Which tables go into a text-to-SQL prompt when more are allowed than fit one.

:class:`SQLTableSelector` embeds a short description of every allowed table once (its name, its
allowed columns, a few sample values, and the text you give for it), keeps the vectors in a core
``VectorStoreIndex`` in memory, and returns the ``top_k`` tables closest to a question. Only those
tables are described to the LLM; the safety checks still allow exactly the configured tables and
columns (a query on an allowed table the prompt left out runs; a hidden column or another table is
refused as before).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.models.settings import describe_embed_model, resolve_embed_model

__all__ = ["DEFAULT_MAX_TABLES_IN_PROMPT", "SQLTableSelector", "table_summary"]

#: Tables described in full in the prompt before the engine retrieves the relevant ones.
DEFAULT_MAX_TABLES_IN_PROMPT = 20

_SAMPLE_VALUES = 3


def table_summary(table: str, description: str, context: str | None = None) -> str:
    """The text embedded for ``table``: its name in words, its columns, a few sample values
    (read off the ``CREATE TABLE`` description the LLM would see), and ``context``.

    Example:
        >>> print(table_summary("sales_orders", "CREATE TABLE sales_orders (\\n  id INTEGER,"
        ...                     "\\n  order_total REAL\\n);", "Orders placed by customers"))
        Table sales orders (sales_orders). Columns: id, order total. Orders placed by customers
    """
    columns = re.findall(r"^\s{2}(\S+)\s", description.split(");", 1)[0], flags=re.M)
    parts = [f"Table {_words(table)} ({table}).", f"Columns: {', '.join(map(_words, columns))}."]
    rows = description.split("*/", 1)[0].split(":\n", 1)
    if len(rows) == 2:
        lines = rows[1].strip().splitlines()[1 : 1 + _SAMPLE_VALUES]
        values = sorted({v for line in lines for v in line.split("\t") if _worth_showing(v)})
        if values:
            parts.append(f"Sample values: {', '.join(values[:12])}.")
    if context:
        parts.append(context.strip())
    return " ".join(parts)


def _words(name: str) -> str:
    return re.sub(r"[_\s]+", " ", name).strip()


def _worth_showing(value: str) -> bool:
    """Words, not numbers, ids or long text: what tells a table's topic."""
    return bool(re.search(r"[A-Za-z]{3}", value)) and len(value) <= 40


#: Table summaries embedded in this process, by (embedding model, text): engines over the same
#: database share them.
_VECTORS: dict[tuple[str, str], list[float]] = {}
_VECTORS_LOCK = threading.Lock()


def _embed_once(model: Any, texts: list[str]) -> dict[str, list[float]]:
    name = f"{type(model).__name__}:{describe_embed_model(model)}"
    with _VECTORS_LOCK:
        missing = sorted({t for t in texts if (name, t) not in _VECTORS})
    if missing:
        vectors = model.get_text_embedding_batch(missing)
        with _VECTORS_LOCK:
            _VECTORS.update({(name, t): v for t, v in zip(missing, vectors, strict=True)})
    with _VECTORS_LOCK:
        return {t: _VECTORS[(name, t)] for t in texts}


class SQLTableSelector:
    """The allowed tables closest to a question, by embedding similarity.

    Args:
        descriptions: ``{table: description}``, e.g. ``SafeSQLDatabase.table_descriptions()``.
        top_k: Tables returned per question.
        embed_model: LlamaIndex embedding model (default: resolved as everywhere in the pack).
        table_context: Optional ``{table: text}`` embedded with the table (what it holds, in
            your words).

    Raises:
        ConfigurationError: ``top_k`` not a positive integer, no tables, or context for a table
            that is not allowed.
    """

    def __init__(
        self,
        descriptions: Mapping[str, str],
        *,
        top_k: int = DEFAULT_MAX_TABLES_IN_PROMPT,
        embed_model: Any = None,
        table_context: Mapping[str, str] | None = None,
    ) -> None:
        self.top_k = check_count("top_k", top_k)
        if not descriptions:
            raise ConfigurationError("No tables to select from.")
        unknown = sorted(set(table_context or {}) - set(descriptions))
        if unknown:
            raise ConfigurationError(f"table_context names tables that are not allowed: {unknown}")
        if any(not isinstance(v, str) for v in (table_context or {}).values()):
            raise ConfigurationError("table_context values must be strings (what a table holds).")
        context = dict(table_context or {})
        self.summaries = {t: table_summary(t, d, context.get(t)) for t, d in descriptions.items()}
        self._embed_model = embed_model
        self._index: VectorStoreIndex | None = None

    def _retriever(self) -> Any:
        if self._index is None:  # every table embedded once per process, in one batch
            model = resolve_embed_model(self._embed_model)
            vectors = _embed_once(model, list(self.summaries.values()))
            nodes = [
                TextNode(id_=t, text=text, embedding=vectors[text])
                for t, text in self.summaries.items()
            ]
            self._index = VectorStoreIndex(nodes, embed_model=model)
        return self._index.as_retriever(similarity_top_k=self.top_k)

    def select(self, question: str) -> list[str]:
        """The ``top_k`` tables for ``question``, closest first."""
        return [n.node.node_id for n in self._retriever().retrieve(question)]

    async def aselect(self, question: str) -> list[str]:
        """Async :meth:`select` (the first call embeds the tables in a worker thread)."""
        retriever = await asyncio.to_thread(self._retriever)
        return [n.node.node_id for n in await retriever.aretrieve(question)]

    def tables(self) -> Sequence[str]:
        return list(self.summaries)
