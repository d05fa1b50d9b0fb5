"""``RagPack``: the pack that wires the components together over Milvus."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import Document, NodeWithScore, QueryBundle

from llama_index_rag_pack import milvus as milvus_utils
from llama_index_rag_pack._compat import BaseLlamaPack
from llama_index_rag_pack.errors import CollectionNotFoundError, ConfigurationError, check_query
from llama_index_rag_pack.ingest import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    drop_blank_documents,
    load_documents,
    split_documents,
)
from llama_index_rag_pack.settings import (
    default_milvus_uri,
    describe_embed_model,
    describe_llm,
    resolve_embed_model,
    resolve_llm,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)


class RetrievalMode(str, Enum):
    """Retrieval strategies :class:`RagPack` can answer with."""

    VECTOR = "vector"
    ROUTE = "route"
    BM25 = "bm25"
    HYBRID = "hybrid"
    HYBRID_WEIGHTED = "hybrid_weighted"
    FUSION = "fusion"
    HYDE = "hyde"
    REWRITE = "rewrite"
    RAPTOR = "raptor"
    RAPTOR_TRAVERSAL = "raptor_traversal"

    @classmethod
    def parse(cls, value: str | RetrievalMode) -> RetrievalMode:
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ConfigurationError(
                f"Unknown retrieval mode {value!r}; valid modes: {valid}."
            ) from None


class RagPack(BaseLlamaPack):
    """Advanced RAG over Milvus in one object: index documents, retrieve, answer.

    Built from documents (indexes them) or from an existing collection (reopens it without
    re-indexing). Every part is injectable; missing ones come from
    :mod:`~llama_index_rag_pack.settings`: the bundled all-MiniLM-L6-v2 embeddings, Milvus Lite in
    ``./rag_pack_data/milvus.db`` and the LLM resolution order (explicit → OpenAI / compatible
    server → local GGUF).

    Args:
        documents: Documents to index now (blank ones are skipped with a warning).
        input_dir: A file or directory to read and index (txt, md, pdf, html).
        llm: LLM object, or ``"openai"``/``"local"``/a ``.gguf`` path; resolved lazily on first use.
        embed_model: Embedding model object or a local model path.
        vector_store: A ready ``MilvusVectorStore`` (then ``uri``/``collection_name`` are ignored).
        uri: Milvus Lite path (``*.db``) or server address ``http://host:19530``.
        collection_name: Collection to index into / reopen.
        token: Token for a Milvus server.
        overwrite: Drop the collection before indexing.
        chunk_size: Chunk size in tokens (256 fits MiniLM's input window).
        chunk_overlap: Overlap between chunks, in tokens.
        similarity_top_k: Chunks retrieved per query.
        enable_bm25: Keep a BM25 sparse field beside the dense vectors (hybrid search).
        show_progress: Progress bars while indexing.
        callback_manager: Passed to the index and query engines.

    Example:
        >>> from llama_index.core import Document
        >>> pack = RagPack(  # doctest: +SKIP
        ...     [Document(text="Milvus is a vector database.")], uri="./demo.db"
        ... )
        >>> print(pack.run("What is Milvus?"))  # doctest: +SKIP
    """

    def __init__(
        self,
        documents: Sequence[Document] | None = None,
        *,
        input_dir: str | Path | None = None,
        llm: LLM | str | None = None,
        embed_model: BaseEmbedding | str | None = None,
        vector_store: Any | None = None,
        uri: str | None = None,
        collection_name: str | None = None,
        token: str | None = None,
        overwrite: bool = False,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        similarity_top_k: int = 4,
        enable_bm25: bool = True,
        show_progress: bool = False,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if similarity_top_k <= 0:
            raise ConfigurationError(f"similarity_top_k must be > 0, got {similarity_top_k}")
        if documents is not None and input_dir is not None:
            raise ConfigurationError("Give documents or input_dir, not both.")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.similarity_top_k = similarity_top_k
        self.show_progress = show_progress
        self.callback_manager = callback_manager or CallbackManager([])
        self._llm_spec = llm
        self._llm: LLM | None = None if llm is None or isinstance(llm, str) else llm

        to_index: list[Document] | None = None
        if input_dir is not None:
            to_index = load_documents(input_dir, show_progress=show_progress)
        elif documents is not None:
            to_index = drop_blank_documents(documents)

        self.embed_model = resolve_embed_model(embed_model)
        self.uri = None if vector_store is not None else (uri or default_milvus_uri())
        if vector_store is None:
            dim = len(self.embed_model.get_text_embedding("dimension probe"))
            vector_store = milvus_utils.open_vector_store(
                self.uri,
                collection_name,
                dim=dim,
                token=token,
                overwrite=overwrite,
                enable_bm25=enable_bm25,
                must_exist=to_index is None,
            )
        self.vector_store = vector_store
        self.index = VectorStoreIndex.from_vector_store(
            vector_store, embed_model=self.embed_model, callback_manager=self.callback_manager
        )
        self._retrievers: dict[tuple[Any, ...], BaseRetriever] = {}
        self._query_engines: dict[tuple[Any, ...], BaseQueryEngine] = {}
        if to_index:
            self.insert(to_index)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_directory(cls, path: str | Path, **kwargs: Any) -> RagPack:
        """Read ``path`` (file or directory) and index it."""
        return cls(input_dir=path, **kwargs)

    @classmethod
    def open(cls, **kwargs: Any) -> RagPack:
        """Reopen an existing collection without re-indexing anything."""
        return cls(documents=None, **kwargs)

    @classmethod
    def from_sources(cls, sources: Sequence[Any], **kwargs: Any) -> RagPack:
        """A pack over several named sources (collections) that routes every question between them.

        See :class:`~llama_index_rag_pack.routing.pack.RoutedRagPack` for ``sources`` and options.
        """
        from llama_index_rag_pack.routing.pack import RoutedRagPack

        return RoutedRagPack(sources, **kwargs)

    # ------------------------------------------------------------------ parts
    @property
    def llm(self) -> LLM:
        """The LLM, resolved on first use and logged."""
        if self._llm is None:
            self._llm = resolve_llm(self._llm_spec)
            logger.info("RagPack LLM: %s", describe_llm(self._llm))
        return self._llm

    def describe(self) -> dict[str, str]:
        """Which models and store are in use (for logs and the CLI)."""
        store = self.vector_store
        return {
            "embedding": describe_embed_model(self.embed_model),
            "vector_store": f"Milvus collection {getattr(store, 'collection_name', '?')!r}"
            + (f" at {self.uri}" if self.uri else ""),
            "llm": describe_llm(self._llm) if self._llm is not None else "(not loaded yet)",
        }

    # ------------------------------------------------------------------ indexing
    def insert(self, documents: Sequence[Document]) -> int:
        """Chunk, embed and store documents; chunks of an already indexed document id are replaced.

        Returns:
            The number of chunks written.
        """
        documents = drop_blank_documents(documents)
        for doc in documents:
            self.vector_store.delete(doc.doc_id)
        nodes = split_documents(
            documents,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            show_progress=self.show_progress,
        )
        self.index.insert_nodes(nodes, show_progress=self.show_progress)
        milvus_utils.flush(self.vector_store)
        self._retrievers.clear()
        self._query_engines.clear()
        logger.info("Indexed %d documents as %d chunks", len(documents), len(nodes))
        return len(nodes)

    def count(self) -> int:
        """Number of chunks stored in the collection."""
        return milvus_utils.count_entities(self.vector_store)

    # ------------------------------------------------------------------ retrieval and answers
    def retriever(
        self, mode: str | RetrievalMode = RetrievalMode.VECTOR, **kwargs: Any
    ) -> BaseRetriever:
        """The retriever for ``mode`` (cached per mode and arguments)."""
        mode = RetrievalMode.parse(mode)
        builder = getattr(self, f"_build_{mode.value}_retriever")
        try:
            key = (mode, _cache_key(kwargs))
            hash(key)
        except TypeError:  # an unhashable argument object: build a new retriever, uncached
            return builder(**kwargs)
        if key not in self._retrievers:
            self._retrievers[key] = builder(**kwargs)
        return self._retrievers[key]

    def _build_vector_retriever(self, similarity_top_k: int | None = None) -> BaseRetriever:
        return _CheckedVectorIndexRetriever(
            self.index,
            node_ids=list(self.index.index_struct.nodes_dict.values()),
            callback_manager=self.callback_manager,
            similarity_top_k=similarity_top_k or self.similarity_top_k,
        )

    def _build_route_retriever(self, **kwargs: Any) -> BaseRetriever:
        from llama_index_rag_pack.routing.pack import build_route_retriever

        return build_route_retriever(self, **kwargs)

    # fusion / hybrid / query transforms (llama_index_rag_pack.fusion, .transforms)
    def _milvus_hybrid(
        self, search_type: str, similarity_top_k: int | None, **kwargs: Any
    ) -> BaseRetriever:
        from llama_index_rag_pack.fusion import MilvusHybridRetriever

        return MilvusHybridRetriever(
            vector_store=self.vector_store,
            embed_model=self.embed_model,
            search_type=search_type,
            similarity_top_k=similarity_top_k or self.similarity_top_k,
            callback_manager=self.callback_manager,
            **kwargs,
        )

    def _build_bm25_retriever(self, similarity_top_k: int | None = None) -> BaseRetriever:
        return self._milvus_hybrid("sparse", similarity_top_k)

    def _build_hybrid_retriever(
        self, similarity_top_k: int | None = None, rrf_k: float = 60.0
    ) -> BaseRetriever:
        return self._milvus_hybrid("hybrid", similarity_top_k, ranker="rrf", rrf_k=rrf_k)

    def _build_hybrid_weighted_retriever(
        self, similarity_top_k: int | None = None, weights: tuple[float, float] = (0.7, 0.3)
    ) -> BaseRetriever:
        return self._milvus_hybrid("hybrid", similarity_top_k, ranker="weighted", weights=weights)

    def _build_fusion_retriever(
        self,
        similarity_top_k: int | None = None,
        num_queries: int = 4,
        fusion_mode: str = "reciprocal_rank",
        weights: tuple[float, ...] | None = None,
    ) -> BaseRetriever:
        from llama_index_rag_pack.fusion import FusionRetriever

        top_k = similarity_top_k or self.similarity_top_k
        per_list = max(2 * top_k, 10)
        # MilvusHybridRetriever's dense search is not tied to one event loop (MilvusVectorStore's
        # async client is), so the async fusion path also works across asyncio.run calls.
        retrievers: dict[str, BaseRetriever] = {"dense": self._milvus_hybrid("dense", per_list)}
        if milvus_utils.has_bm25(self.vector_store.client, self.vector_store.collection_name):
            retrievers["bm25"] = self._build_bm25_retriever(per_list)
        return FusionRetriever(
            retrievers,
            llm=self.llm,
            num_queries=num_queries,
            mode=fusion_mode,
            weights=weights,
            similarity_top_k=top_k,
            callback_manager=self.callback_manager,
        )

    def _build_hyde_retriever(
        self,
        similarity_top_k: int | None = None,
        num_hypotheses: int = 1,
        include_query: bool = False,
    ) -> BaseRetriever:
        from llama_index_rag_pack.transforms import HyDERetriever

        return HyDERetriever(
            self._milvus_hybrid("dense", similarity_top_k),
            llm=self.llm,
            embed_model=self.embed_model,
            num_hypotheses=num_hypotheses,
            include_query=include_query,
            callback_manager=self.callback_manager,
        )

    def _build_raptor_retriever(self, similarity_top_k: int | None = None) -> BaseRetriever:
        from llama_index_rag_pack.raptor.integration import pack_raptor_retriever

        return pack_raptor_retriever(self, "collapsed", similarity_top_k)

    def _build_raptor_traversal_retriever(
        self, similarity_top_k: int | None = None
    ) -> BaseRetriever:
        from llama_index_rag_pack.raptor.integration import pack_raptor_retriever

        return pack_raptor_retriever(self, "tree_traversal", similarity_top_k)

    def _build_rewrite_retriever(self, similarity_top_k: int | None = None) -> BaseRetriever:
        from llama_index_rag_pack.transforms import RewriteRetriever

        return RewriteRetriever(
            self._milvus_hybrid("dense", similarity_top_k),
            llm=self.llm,
            callback_manager=self.callback_manager,
        )

    def make_query_engine(
        self,
        mode: str | RetrievalMode = RetrievalMode.VECTOR,
        *,
        streaming: bool = False,
        citations: bool = True,
        citation_style: Any = "markdown",
        citation_mode: str = "markers",
    ) -> BaseQueryEngine:
        """A query engine answering from ``mode``'s retriever with the pack's LLM.

        By default a :class:`~llama_index_rag_pack.citations.CitedQueryEngine`: the answer carries
        renumbered citations in ``citation_style`` (``markdown``, ``text``, ``html``, ``empty`` or a
        ``ReferenceStyle``) and ``source_nodes`` are the cited chunks. ``citations=False`` gives
        core's plain ``RetrieverQueryEngine``.
        """
        from llama_index.core.query_engine import RetrieverQueryEngine

        mode = RetrievalMode.parse(mode)
        style_key = citation_style if isinstance(citation_style, str) else id(citation_style)
        key = (
            (mode, streaming, citations, style_key, citation_mode)
            if citations
            else (mode, streaming)
        )
        if key not in self._query_engines:
            if citations:
                from llama_index_rag_pack.citations import CitedQueryEngine

                self._query_engines[key] = CitedQueryEngine(
                    self.retriever(mode),
                    llm=self.llm,
                    mode=citation_mode,
                    style=citation_style,
                    streaming=streaming,
                    callback_manager=self.callback_manager,
                )
            else:
                self._query_engines[key] = RetrieverQueryEngine.from_args(
                    self.retriever(mode),
                    llm=self.llm,
                    streaming=streaming,
                    callback_manager=self.callback_manager,
                )
        return self._query_engines[key]

    @property
    def query_engine(self) -> BaseQueryEngine:
        """The default query engine: answers with citations
        (``make_query_engine(citations=False)`` for none)."""
        return self.make_query_engine()

    def get_modules(self) -> dict[str, Any]:
        """The pack's parts: models, store, index, retrievers and query engine."""
        modules: dict[str, Any] = {
            "llm": self.llm,
            "embed_model": self.embed_model,
            "vector_store": self.vector_store,
            "index": self.index,
            "retriever": self.retriever(),
            "query_engine": self.query_engine,
        }
        for mode in (
            RetrievalMode.BM25,
            RetrievalMode.HYBRID,
            RetrievalMode.FUSION,
            RetrievalMode.HYDE,
            RetrievalMode.REWRITE,
        ):
            try:
                modules[f"{mode.value}_retriever"] = self.retriever(mode)
            except ConfigurationError as e:  # e.g. a collection indexed without BM25
                logger.info("get_modules: no %s retriever (%s)", mode.value, e)
        modules["plain_query_engine"] = self.make_query_engine(citations=False)
        try:  # only when a RAPTOR tree was built next to the collection
            modules["raptor_retriever"] = self.retriever(RetrievalMode.RAPTOR)
        except (CollectionNotFoundError, ConfigurationError) as e:
            logger.info("get_modules: no raptor retriever (%s)", e)
        return modules

    def run(
        self, query: str, *, mode: str | RetrievalMode = RetrievalMode.VECTOR, **kwargs: Any
    ) -> RESPONSE_TYPE:
        """Answer ``query`` with the query engine of ``mode``."""
        check_query(query)
        return self.make_query_engine(mode, **kwargs).query(query)

    async def arun(
        self, query: str, *, mode: str | RetrievalMode = RetrievalMode.VECTOR, **kwargs: Any
    ) -> RESPONSE_TYPE:
        """Async :meth:`run`."""
        check_query(query)
        return await self.make_query_engine(mode, **kwargs).aquery(query)


__all__ = ["RagPack", "RetrievalMode"]


def _cache_key(value: Any) -> Any:
    """A hashable stand-in for retriever arguments: lists, tuples, sets and dicts by value.

    Example:
        >>> _cache_key({"weights": [1.0, 0.5], "modes": ("a", "b")})
        (('modes', ('a', 'b')), ('weights', (1.0, 0.5)))
    """
    if isinstance(value, dict):
        return tuple(sorted((k, _cache_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_cache_key(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_cache_key(v) for v in value)
    return value


class _CheckedVectorIndexRetriever(VectorIndexRetriever):
    """Core's ``VectorIndexRetriever`` (what ``index.as_retriever()`` returns) that rejects an
    empty query with the pack's error before embedding it, like every other mode."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle)
        return super()._retrieve(query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle)
        return await super()._aretrieve(query_bundle)
