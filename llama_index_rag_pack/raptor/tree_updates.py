"""``RaptorTree``'s incremental updates: insert documents, delete them, refresh what a folder
sync removed (each re-summarises only the clusters that changed, see
:mod:`~llama_index_rag_pack.raptor.raptor_updates`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.schema import BaseNode

from llama_index_rag_pack.raptor.raptor_levels import BuildStats, LevelBuilder
from llama_index_rag_pack.raptor.raptor_summaries import SummariseFn
from llama_index_rag_pack.raptor.raptor_updates import (
    delete_documents,
    insert_leaves,
    refresh_stale,
)

__all__ = ["TreeUpdates"]


class TreeUpdates:
    """Insert, delete and refresh (sync and async) of a
    :class:`~llama_index_rag_pack.raptor.raptor_tree.RaptorTree`; they are not limited by its
    ``max_llm_calls`` / ``max_tokens`` (only builds are)."""

    make_leaves: Callable[[Sequence[BaseNode]], list[Any]]
    _summarise: SummariseFn
    _operation: Callable[..., BuildStats]
    _run_async: Callable[..., Any]

    def _insert(self, documents: Sequence[BaseNode], summarise: SummariseFn) -> BuildStats:
        leaves = self.make_leaves(documents)
        return self._operation(lambda b: insert_leaves(b, leaves), summarise, budget=False)

    def _delete(
        self, ref_doc_ids: str | Sequence[str] | None, summarise: SummariseFn
    ) -> BuildStats:
        def run(builder: LevelBuilder) -> None:  # None: refresh what lost leaves already
            if ref_doc_ids is None:
                refresh_stale(builder)
            else:
                delete_documents(builder, ref_doc_ids)

        return self._operation(run, summarise, budget=False)

    def insert(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Add documents to the tree, re-summarising only the clusters that change.

        Documents whose id is already in the tree replace their old leaves.
        """
        return self._insert(documents, self._summarise)

    async def ainsert(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Async :meth:`insert`."""
        return await self._run_async(self._insert, documents)

    def delete(self, ref_doc_ids: str | Sequence[str]) -> BuildStats:
        """Remove the leaves of these document ids and refresh the summaries above them."""
        return self._delete(ref_doc_ids, self._summarise)

    async def adelete(self, ref_doc_ids: str | Sequence[str]) -> BuildStats:
        """Async :meth:`delete`."""
        return await self._run_async(self._delete, ref_doc_ids)

    def refresh(self) -> BuildStats:
        """Write again the summaries whose leaves were removed without an LLM call (a folder
        sync, ``rag-pack index --sync``), up to the root; nothing to do costs no LLM call."""
        return self._delete(None, self._summarise)

    async def arefresh(self) -> BuildStats:
        """Async :meth:`refresh`."""
        return await self._run_async(self._delete, None)
