"""The ``MilvusVectorStore`` classes the pack opens: one whose async methods never bind to an
event loop, and (:mod:`~llama_index_rag_pack.milvus.tenants`) its variant that creates a
collection with a tenant partition key."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

from llama_index_rag_pack.documents.bm25_analysis import Bm25Analysis
from llama_index_rag_pack.milvus.bm25.bm25_rows import add_analysed_nodes, prepare_analysed
from llama_index_rag_pack.milvus.document_rows import delete_document_rows
from llama_index_rag_pack.milvus.tenants import ANY_TENANT

__all__ = ["PackStoreMixin", "loop_safe_store_class"]


class PackStoreMixin:
    """What the pack adds to ``MilvusVectorStore``: its BM25 analysis (rows written with their
    analysed copies) and its tenant field. The store class declares the private attributes."""

    _bm25_analysis: Any
    _tenant_field: Any
    _analysed: Any
    _capabilities: Any
    _bm25_vectors: Any
    _created: bool

    def configure(
        self,
        *,
        bm25_analysis: Any,
        tenant_field: str | None,
        capabilities: Any = None,
        bm25_vectors: str | None = None,
        created: bool = False,
    ) -> None:
        """Set how the BM25 side analyses text, the tenant field, what the server can do and
        where BM25 vectors come from (``open_vector_store`` reads them from the collection and
        the server)."""
        self._bm25_analysis, self._tenant_field = bm25_analysis, tenant_field
        self._capabilities, self._bm25_vectors = capabilities, bm25_vectors
        self._created = created

    @property
    def created(self) -> bool:
        """Whether opening the store made its collection (a failed first ingest drops it)."""
        return self._created

    @property
    def capabilities(self) -> Any:
        """What the Milvus serving the collection can do
        (:class:`~llama_index_rag_pack.milvus.capabilities.MilvusCapabilities`)."""
        return self._capabilities

    @property
    def bm25_vectors(self) -> str | None:
        """Where BM25 vectors come from: ``function`` (Milvus' BM25 function), ``client``
        (computed by the pack) or ``None`` (no BM25)."""
        return self._bm25_vectors

    @property
    def bm25_analysis(self) -> Bm25Analysis | None:
        """How the BM25 side analyses text (``None`` without BM25)."""
        return self._bm25_analysis

    @property
    def tenant_field(self) -> str | None:
        """The partition-key field that keeps tenants apart (``None``: no tenants)."""
        return self._tenant_field

    def prepare_bm25(self, nodes: Any, found: Any = None) -> None:
        """Analyse ``nodes`` for BM25 before anything is written (``add`` uses them);
        ``found``: their analysed copies, already made (:func:`prepare_analysed`)."""
        self._analysed = prepare_analysed(self, self._bm25_analysis, nodes, found)

    def add(self, nodes: Any, **add_kwargs: Any) -> Any:
        analysis = self._bm25_analysis
        if analysis is None or not analysis.client_side:
            return super().add(nodes, **add_kwargs)
        # core's index adds in batches: each takes only its own nodes' prepared copies
        prepared = {
            node.node_id: found
            for node in nodes
            if (found := self._analysed.pop(node.node_id, None)) is not None
        }
        return add_analysed_nodes(self, nodes, analysis, prepared=prepared, **add_kwargs)


def loop_safe_store_class() -> type:
    """``MilvusVectorStore`` whose async methods run the sync client in a worker thread.

    pymilvus' ``AsyncMilvusClient`` binds to the event loop of its first call, so a second
    ``asyncio.run`` call on the same store fails with "Event loop is closed". Running the
    (thread-safe) sync client in a worker thread keeps async callers non-blocking on any loop.
    Made once, under a lock: stores opened by several threads at once are all of this one class
    (``open_vector_store`` configures a store found to be an instance of it).
    """
    with _CLASS_LOCK:
        return _loop_safe_store_class()


_CLASS_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _loop_safe_store_class() -> type:
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.vector_stores.milvus import MilvusVectorStore

    class LoopSafeMilvusVectorStore(PackStoreMixin, MilvusVectorStore):
        _bm25_analysis: Any = PrivateAttr(default=None)
        _tenant_field: Any = PrivateAttr(default=None)
        _analysed: Any = PrivateAttr(default_factory=dict)
        _capabilities: Any = PrivateAttr(default=None)
        _bm25_vectors: Any = PrivateAttr(default=None)
        _created: bool = PrivateAttr(default=False)

        @classmethod
        def class_name(cls) -> str:
            return "LoopSafeMilvusVectorStore"

        async def async_add(self, nodes: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.add, nodes, **kwargs)

        def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
            """Delete the chunks of document ``ref_doc_id`` (a list: of each), of every tenant:
            the id is written as an escaped literal (``MilvusVectorStore.delete`` pastes it into
            the expression as it is), and every chunk is found, however many there are."""
            ids = ref_doc_id if isinstance(ref_doc_id, list) else [ref_doc_id]
            delete_document_rows(self, [str(i) for i in ids], tenant=ANY_TENANT)

        async def adelete(self, ref_doc_id: str, **kwargs: Any) -> None:
            await asyncio.to_thread(self.delete, ref_doc_id, **kwargs)

        async def adelete_nodes(
            self, node_ids: Any = None, filters: Any = None, **kwargs: Any
        ) -> None:
            await asyncio.to_thread(self.delete_nodes, node_ids, filters, **kwargs)

        async def aclear(self) -> None:
            await asyncio.to_thread(self.clear)

        async def aget_nodes(self, node_ids: Any = None, filters: Any = None, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.get_nodes, node_ids, filters, **kwargs)

        async def aquery(self, query: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.query, query, **kwargs)

    return LoopSafeMilvusVectorStore
