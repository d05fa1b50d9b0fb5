"""The base of the packs: everything :class:`~llama_index_rag_pack.pack.rag_pack.RagPack` and
:class:`~llama_index_rag_pack.pack.routed.RoutedRagPack` share."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import Document

from llama_index_rag_pack.core.errors import CollectionNotFoundError, ConfigurationError
from llama_index_rag_pack.core.query_bases import checked_question
from llama_index_rag_pack.documents.chunking import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    check_chunking,
)
from llama_index_rag_pack.documents.ingest import drop_blank_documents, load_documents
from llama_index_rag_pack.fusion.fusion_config import FusionConfig, resolve_fusion_config
from llama_index_rag_pack.milvus import connection as milvus_utils
from llama_index_rag_pack.milvus.lite import discard_new_lite_db_on_failure
from llama_index_rag_pack.milvus.lite_engine.fast_paths import release_arrow_memory
from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex
from llama_index_rag_pack.milvus.tenants import check_tenants
from llama_index_rag_pack.models.answer_style import describe_answer_style
from llama_index_rag_pack.models.settings import (
    default_milvus_uri,
    describe_embed_model,
    describe_llm,
    resolve_embed_model,
    resolve_llm,
)
from llama_index_rag_pack.pack import indexing
from llama_index_rag_pack.pack._compat import BaseLlamaPack
from llama_index_rag_pack.pack.deletion import delete_documents
from llama_index_rag_pack.pack.engines import (
    ENGINE_DEFAULTS,
    BoundedCache,
    build_chat_engine,
    build_query_engine,
    query_engine_key,
    retriever_key,
)
from llama_index_rag_pack.pack.filters import scoped_kwargs
from llama_index_rag_pack.pack.judge import JudgeEngineMixin
from llama_index_rag_pack.pack.mode_registry import listed_modes
from llama_index_rag_pack.pack.modes import RetrievalMode, get_mode
from llama_index_rag_pack.pack.pipeline.slice_prep import write_slices
from llama_index_rag_pack.pack.raptor import RaptorBuildMixin
from llama_index_rag_pack.pack.sql import SQLEngineMixin
from llama_index_rag_pack.rerank.pack_reranking import PackReranking

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM


logger = logging.getLogger(__name__)


class RagPackBase(RaptorBuildMixin, SQLEngineMixin, JudgeEngineMixin, BaseLlamaPack):
    """What :class:`~llama_index_rag_pack.pack.rag_pack.RagPack` and
    :class:`~llama_index_rag_pack.pack.routed.RoutedRagPack` share: indexing, the retrieval
    modes, the query and chat engines, the pack contract (``get_modules``, ``run``). The
    arguments are :class:`~llama_index_rag_pack.pack.rag_pack.RagPack`'s.
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
        bm25_analyzer: str | Callable[[str], Sequence[str]] | None = "auto",
        bm25_vectors: str = "auto",
        sentence_index: bool = True,
        sentence_vectors: str | None = None,
        fusion_config: FusionConfig | str | Path | None = None,
        tenant_field: str | None = None,
        rerank: Any = None,
        rerank_top_n: int | None = None,
        rerank_fallback: str = "raise",
        rerank_options: Mapping[str, Any] | None = None,
        show_progress: bool = False,
        callback_manager: CallbackManager | None = None,
        flush: bool = True,
    ) -> None:
        if similarity_top_k <= 0:
            raise ConfigurationError(f"similarity_top_k must be > 0, got {similarity_top_k}")
        check_chunking(chunk_size, chunk_overlap)  # before anything is read, loaded or dropped
        if documents is not None and input_dir is not None:
            raise ConfigurationError("Give documents or input_dir, not both.")
        self.sentence_vectors = indexing.check_sentence_vectors(sentence_vectors)
        self.chunk_size, self.chunk_overlap = chunk_size, chunk_overlap
        self._bm25_requested = bm25_analyzer  # an insert refuses another analysis by name
        self.similarity_top_k = similarity_top_k
        self.fusion_config = resolve_fusion_config(fusion_config)
        self.reranking = PackReranking(
            rerank, top_n=rerank_top_n, fallback=rerank_fallback, options=rerank_options
        )
        self.show_progress = show_progress
        self.callback_manager = callback_manager or CallbackManager([])
        self._llm_spec = llm
        self._llm: LLM | None = None if llm is None or isinstance(llm, str) else llm

        to_index: list[Document] | None = None
        if input_dir is not None:
            to_index = load_documents(input_dir, show_progress=show_progress)
        elif documents is not None:
            to_index = drop_blank_documents(documents)
        if tenant_field is not None and to_index:  # before any model loads
            check_tenants(to_index, tenant_field)

        self.embed_model = resolve_embed_model(embed_model)
        self.uri = None if vector_store is not None else (uri or default_milvus_uri())
        # a failed first ingest removes the database it created
        with discard_new_lite_db_on_failure(self.uri if to_index else None):
            if vector_store is None:
                vector_store = indexing.open_pack_store(
                    self.uri,
                    collection_name,
                    self.embed_model,
                    token=token,
                    overwrite=overwrite,
                    enable_bm25=enable_bm25,
                    bm25_analyzer=bm25_analyzer,
                    bm25_vectors=bm25_vectors,
                    must_exist=to_index is None,
                    tenant_field=tenant_field,
                )
            self.vector_store = vector_store
            self.sentence_index: MilvusSentenceIndex | None = indexing.open_sentence_index(
                vector_store, enabled=sentence_index, overwrite=overwrite
            )
            self.index = VectorStoreIndex.from_vector_store(
                vector_store, embed_model=self.embed_model, callback_manager=self.callback_manager
            )
            self._default_mode: str | None = None
            self._retrievers: BoundedCache[BaseRetriever] = BoundedCache()
            self._query_engines: BoundedCache[BaseQueryEngine] = BoundedCache()
            self._schema_fields: frozenset[str] | None = None
            #: What ``configure_self_query`` set (fields, description, base mode).
            self.self_query_config: Any = None
            if to_index:
                with milvus_utils.drop_new_collection_on_failure(vector_store):
                    self.insert(to_index, flush=flush)
            release_arrow_memory()  # what Lite's reads of the collections freed

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_directory(cls, path: str | Path, **kwargs: Any) -> Self:
        """Read ``path`` (file or directory) and index it."""
        return cls(input_dir=path, **kwargs)

    @classmethod
    def open(cls, **kwargs: Any) -> Self:
        """Reopen an existing collection without re-indexing anything."""
        return cls(documents=None, **kwargs)

    # ------------------------------------------------------------------ seams
    def forget_engines(self, *modes: str) -> None:
        """Drop the cached retrievers and query engines (of ``modes`` only, when given), so the
        next ``retriever(...)`` builds them again: after the collection, a tree or a mode's
        settings changed."""
        for cache in (self._retrievers, self._query_engines):
            for key in [k for k in cache if not modes or k[0] in modes]:
                del cache[key]

    def schema_fields(self) -> frozenset[str]:
        """The fields of the pack's collection (read once: a schema does not change)."""
        if self._schema_fields is None:
            store = self.vector_store
            info = store.client.describe_collection(store.collection_name)
            self._schema_fields = frozenset(str(f.get("name")) for f in info.get("fields", []))
        return self._schema_fields

    @property
    def llm_or_spec(self) -> Any:
        """The LLM once resolved, else what was given for it (``None``, a name or a path): for
        parts that resolve it on first use themselves, so nothing loads before it is needed."""
        return self._llm if self._llm is not None else self._llm_spec

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
            "answer_style": (
                describe_answer_style("auto", self._llm)
                if self._llm is not None
                else "auto (decided when the LLM is resolved)"
            ),
            **indexing.describe_bm25(store),
            **indexing.describe_milvus(store),
            **self.reranking.describe(),
        }

    # ------------------------------------------------------------------ indexing
    def insert(
        self, documents: Sequence[Document], *, flush: bool = True, replace: bool | None = None
    ) -> int:
        """Chunk, embed and store documents; chunks of an already indexed document id are replaced
        (of the same tenant: tenants may use the same document ids). Documents are written
        :data:`~llama_index_rag_pack.pack.indexing.SLICE_CHARS` characters of text at a time
        (all documents of one id together), so memory stays bounded; a failure leaves each
        document either as it was or wholly replaced. ``flush=False`` leaves the flush to the
        caller (:meth:`flush`, after more inserts): Milvus Lite seals a segment at every flush
        and scores BM25 in each segment apart. ``replace=False``: the caller knows none of the
        documents is stored, so no old rows are looked for (default: looked for unless the
        collection is empty).

        Returns:
            The number of chunks written.
        """
        documents = drop_blank_documents(documents)
        if self.tenant_field is not None:
            check_tenants(documents, self.tenant_field)
        missing = indexing.check_index_settings(self, self._bm25_requested)
        if replace is None:
            replace = not indexing.nothing_stored(self)  # else no old rows to look for
        written = write_slices(self, documents, replace=replace)
        indexing.record_index_settings(self, missing)
        if flush:
            self.flush()
        self.forget_engines()
        logger.info("Indexed %d documents as %d chunks", len(documents), written)
        return written

    def flush(self) -> None:
        """Seal inserted chunks and sentences (:meth:`insert` does it unless told not to)."""
        if self.sentence_index is not None:  # first: the chunks' flush takes more memory
            self.sentence_index.flush()
        milvus_utils.flush(self.vector_store)
        release_arrow_memory()

    def delete(self, *, filters: Any = None, tenant: str | None = None) -> int:
        """Delete the documents with a chunk matching ``filters`` (of ``tenant``): their chunks,
        sentences and RAPTOR leaves (summaries above are refreshed); ``tenant`` alone deletes
        that tenant's documents and tree. Returns the number of documents deleted."""
        return delete_documents(self, filters=filters, tenant=tenant)

    @property
    def tenant_field(self) -> str | None:
        """The metadata key that keeps tenants apart (a Milvus partition key), or ``None``."""
        return getattr(self.vector_store, "tenant_field", None)

    def count(self) -> int:
        """Number of chunks stored in the collection."""
        return milvus_utils.count_entities(self.vector_store)

    # ------------------------------------------------------------------ retrieval and answers
    @property
    def default_mode(self) -> str:
        """The mode used when none is named: ``hybrid_convex`` (dense, BM25 and best sentence,
        fused by fitted weights), or ``vector`` on a collection indexed without BM25."""
        if self._default_mode is None:
            self._default_mode = indexing.default_mode_for(self.vector_store)
        return self._default_mode

    def retriever(
        self, mode: str | RetrievalMode | None = None, *, rerank: Any = None, **kwargs: Any
    ) -> BaseRetriever:
        """The retriever for ``mode`` (default :attr:`default_mode`; cached per mode and
        arguments), reranked by the pack's ``rerank``, another one, or none (``False``)."""
        spec = get_mode(self.default_mode if mode is None else mode)
        kwargs = scoped_kwargs(self, spec, kwargs)
        key = retriever_key(spec.name, kwargs)
        key, build = self.reranking.plan(self, spec, kwargs, rerank, key)
        if key is None:  # an unhashable argument object: build a new retriever, uncached
            return build()
        return self._retrievers.get_or_build(key, build)

    def make_query_engine(
        self,
        mode: str | RetrievalMode | None = None,
        *,
        streaming: bool = False,
        citations: bool = True,
        citation_style: Any = "markdown",
        citation_mode: str = "markers",
        answer_style: str = "auto",
        filters: Any = None,
        tenant: str | None = None,
    ) -> BaseQueryEngine:
        """A query engine answering from ``mode``'s retriever with the pack's LLM.

        By default a :class:`~llama_index_rag_pack.CitedQueryEngine`: the answer carries
        renumbered citations in ``citation_style`` (``markdown``, ``text``, ``html``, ``empty`` or a
        ``ReferenceStyle``) and ``source_nodes`` are the cited chunks. ``citations=False`` gives
        core's plain ``RetrieverQueryEngine``. ``answer_style``: ``auto`` (extractive with a
        small local model such as the bundled one, generative with any other LLM),
        ``extractive`` or ``generative`` (``docs/citations.md``). ``mode`` defaults to
        :attr:`default_mode`; ``filters`` and ``tenant`` scope its retriever
        (``docs/filters.md``).
        """
        mode = RetrievalMode.parse(self.default_mode if mode is None else mode)
        retriever = self.retriever(mode, filters=filters, tenant=tenant)
        options = dict(
            streaming=streaming,
            citations=citations,
            citation_style=citation_style,
            citation_mode=citation_mode,
            answer_style=answer_style,
        )
        key = query_engine_key(mode, **options) + (id(retriever),)
        return self._query_engines.get_or_build(key, lambda: self.engine_for(retriever, **options))

    def engine_for(self, retriever: BaseRetriever, **options: Any) -> BaseQueryEngine:
        """The pack's query engine over ``retriever``: its LLM, callbacks and embedding model
        (which attributes uncited sentences), with ``make_query_engine``'s ``options``
        (``streaming``, ``citations``, ``citation_style``, ``citation_mode``,
        ``answer_style``). Every engine of
        the pack and of ``rag-pack ask`` is made here."""
        return build_query_engine(
            retriever,
            llm=self.llm,
            callback_manager=self.callback_manager,
            embed_model=self.embed_model,
            **{**ENGINE_DEFAULTS, **options},
        )

    def make_chat_engine(self, mode: str | None = None, **options: Any) -> Any:
        """A :class:`~llama_index_rag_pack.CitedChatEngine` over ``mode``'s retriever (default
        :attr:`default_mode`): follow-ups condensed, answers cited. ``options``: ``filters``,
        ``tenant``, ``citation_style``, ``citation_mode``, ``answer_style``, and the chat engine's
        (``chat_history``, ``memory``, ``token_limit``, ``condense_prompt``, ``skip_condense``)."""
        mode = RetrievalMode.parse(self.default_mode if mode is None else mode)
        return build_chat_engine(self, mode, **options)

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
        for mode in listed_modes():  # the registry says which (ModeSpec.listed)
            try:
                modules[f"{mode}_retriever"] = self.retriever(mode)
            except (CollectionNotFoundError, ConfigurationError) as e:
                # e.g. a collection indexed without BM25, or no RAPTOR tree built beside it
                logger.info("get_modules: no %s retriever (%s)", mode, e)
        modules["plain_query_engine"] = self.make_query_engine(citations=False)
        return modules

    def run(
        self, query: str, *, mode: str | RetrievalMode | None = None, **kwargs: Any
    ) -> RESPONSE_TYPE:
        """Answer ``query`` with the query engine of ``mode`` (default :attr:`default_mode`);
        ``kwargs`` are :meth:`make_query_engine`'s (``answer_style``, ``citation_mode``, ...)."""
        with checked_question(query):  # before the engine (and its LLM) loads
            return self.make_query_engine(mode, **kwargs).query(query)

    async def arun(
        self, query: str, *, mode: str | RetrievalMode | None = None, **kwargs: Any
    ) -> RESPONSE_TYPE:
        """Async :meth:`run`."""
        with checked_question(query):
            return await self.make_query_engine(mode, **kwargs).aquery(query)


__all__ = ["RagPackBase"]
