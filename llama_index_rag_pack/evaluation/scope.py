"""``EvalHarness(filters=...)`` / ``rag-pack eval --filter``: evaluate under a metadata filter.

Every strategy searches with the filter (as ``pack.retriever(mode, filters=...)``), and only the
questions whose relevant documents all keep at least one chunk under the filter are asked: a
question about a document the filter excludes has no right answer left to find.
"""

from __future__ import annotations

from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.labelled import LabelledExample
from llama_index_rag_pack.milvus.filter_fields import check_filter_fields
from llama_index_rag_pack.pack.deletion import documents_by_tenant
from llama_index_rag_pack.pack.filters import pack_filter_expression

__all__ = ["EvalScope"]


class EvalScope:
    """The filter of an evaluation, compiled against the evaluation index when it opens.

    Args:
        filters: Core ``MetadataFilters``, a Milvus expression, or ``None`` (no filter).
    """

    def __init__(self, filters: Any = None) -> None:
        self.filters = filters
        self.expression: str = ""

    def questions(self, pack: Any, examples: list[LabelledExample]) -> list[LabelledExample]:
        """``examples`` restricted to the questions the filter leaves answerable on ``pack``.

        Raises:
            ConfigurationError: a bad filter (malformed, or naming a field no chunk has), or one
                that leaves no question.
        """
        if self.filters is None:
            return examples
        if isinstance(self.filters, str):  # a name no chunk has would quietly match nothing
            store = pack.vector_store
            check_filter_fields(
                store.client, store.collection_name, self.filters, what="The filter"
            )
        self.expression = pack_filter_expression(pack, self.filters)
        if not self.expression:
            return examples
        kept = set().union(*documents_by_tenant(pack, self.expression).values())
        answerable = [ex for ex in examples if set(ex.relevant_ids) <= kept]
        if not answerable:
            raise ConfigurationError(
                f"The filter {self.expression!r} keeps {len(kept)} documents and none of the "
                f"{len(examples)} questions' relevant documents: loosen it or pick another set."
            )
        return answerable

    def kwargs(self) -> dict[str, Any]:
        """What every strategy's retriever is built with."""
        return {"filters": self.expression} if self.expression else {}

    def key(self) -> tuple[str, ...]:
        """Part of each result's cache key (nothing without a filter, so old caches still hit)."""
        return (self.expression,) if self.expression else ()

    def config(self) -> dict[str, Any]:
        """The report's record of the filter."""
        return {"filters": self.expression} if self.expression else {}
